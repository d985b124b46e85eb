"""Gemma-4, what only it has: vision runs against HF's own mm_token_type_ids mask, placeholders
embedded as pad, per-layer KV buffers as the runtime allocates them, per-layer GQA and KV sharing
in the fp16 CUDA graph, and refusals. The checks every form gets (logits and greedy tokens against
HF in every mode, int4/int8 packages, fp16 CUDA graphs close to HF) are its row in
tests/families.py, run by tests/arch/test_families.py."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from families import GEMMA4_PROMPTS
from gemma4_models import mm_token_type_ids, save_gemma4
from reference import (
    genai_prompt_then_greedy,
    hf_generate,
    hf_logits,
    hf_model,
    hf_prompt_then_greedy,
    ort_prefill_and_decode,
)

from gqa_export.check.reader import load_package
from gqa_export.errors import InputError
from gqa_export.pipeline import BuildOptions, build
from gqa_export.runtime.run import generate_greedy, load

NEW = 40
# an image run longer than the window (4), an audio placeholder, a video run
VISION_PROMPT = [0, 17, 45, 300, 300, 300, 300, 300, 300, 99, 302, 200, 301, 301, 3, 7]


@pytest.mark.parametrize("mode", ["auto", "bias", "split"])
@pytest.mark.parametrize("variant", ["gemma4_conditional", "gemma4_unified"])
def test_vision_runs_match_hf_mask(builds, variant, mode):
    """gemma4: image/video runs bidirectional on sliding layers, the window bounding them on the
    left; gemma4_unified: transformers' generic block mask on every layer. Placeholders (the audio
    id too) are embedded as pad. Prompt through HF's mm_token_type_ids, causal decoding after."""
    package = builds.package(variant, mode)
    manifest = json.loads((package / "manifest.json").read_text())
    assert manifest["options"]["attention"] == ("split" if mode == "auto" else mode)
    assert manifest["options"]["bidirectional_token_ids"] == [300, 301]
    hf = hf_model(builds.checkpoint(variant))
    types = mm_token_type_ids(hf, VISION_PROMPT)
    ref_logits, ref_tokens = hf_prompt_then_greedy(hf, VISION_PROMPT, 24, mm_token_type_ids=types)
    causal_logits, _ = hf_prompt_then_greedy(hf, VISION_PROMPT, 0)
    assert np.abs(ref_logits - causal_logits).max() > 0.1  # the mask matters
    logits, tokens = genai_prompt_then_greedy(package, VISION_PROMPT, 24)
    np.testing.assert_allclose(logits, ref_logits, atol=1e-4, rtol=1e-4)
    assert tokens == ref_tokens


def test_unified_text_class_stays_causal_like_hf(builds):
    """Gemma4UnifiedForCausalLM (gemma4_unified_text) never builds vision runs: its config says
    use_bidirectional_attention "vision" but holds no placeholder ids, so the package has no
    bidirectional ids and ids 300-302 are plain tokens (not pad), attention causal and windowed as
    HF's over a prompt whose runs outlast the window. Mutant: the same package with the runs made
    bidirectional moves the logits far past the bound."""
    package = builds.package("gemma4_unified_text")
    manifest = json.loads((package / "manifest.json").read_text())
    assert manifest["options"]["attention"] == "gqa"
    assert manifest["options"]["bidirectional_token_ids"] == []
    hf = hf_model(builds.checkpoint("gemma4_unified_text"))
    tokens, got = ort_prefill_and_decode(package, VISION_PROMPT, steps=3)
    ref = hf_logits(hf, tokens, len(VISION_PROMPT))
    np.testing.assert_allclose(got, ref, atol=1e-4, rtol=1e-4)
    _, bidirectional = ort_prefill_and_decode(
        builds.package("gemma4_unified_text", "bias", bidirectional_ids=(300, 301)), VISION_PROMPT, steps=0
    )
    assert np.abs(bidirectional - ref[: len(VISION_PROMPT)]).max() > 0.05


def test_gqa_embeds_placeholders_as_pad_like_hf(builds):
    """Text-only use (gqa): image/video/audio ids are embedded as pad_token_id, like the HF class
    fed input_ids alone; attention stays causal."""
    tokens, got = ort_prefill_and_decode(builds.package("gemma4_conditional"), VISION_PROMPT, steps=2)
    ref = hf_logits(hf_model(builds.checkpoint("gemma4_conditional")), tokens, len(VISION_PROMPT))
    np.testing.assert_allclose(got, ref, atol=1e-4, rtol=1e-4)


def test_placeholders_embed_as_the_text_config_pad_not_generation_config(builds, tmp_path):
    """HF embeds the placeholders as text_config.pad_token_id; a generation_config.json naming another pad id
    (7 here) does not change that (read from there, the placeholders embedded as row 7: 2.0 off)."""
    import shutil

    checkpoint = shutil.copytree(builds.checkpoint("gemma4_conditional"), tmp_path / "ckpt")
    generation = json.loads((checkpoint / "generation_config.json").read_text())
    (checkpoint / "generation_config.json").write_text(json.dumps({**generation, "pad_token_id": 7}))
    build(BuildOptions(str(checkpoint), tmp_path / "pkg", attention="gqa", smoke=False, text_only=True))
    tokens, got = ort_prefill_and_decode(tmp_path / "pkg", VISION_PROMPT, steps=2)
    ref = hf_logits(hf_model(builds.checkpoint("gemma4_conditional")), tokens, len(VISION_PROMPT))
    np.testing.assert_allclose(got, ref, atol=1e-4, rtol=1e-4)


WINDOW_CACHE = ("attention.sliding_window_cache=true",)


def test_runtime_allocates_per_layer_kv(builds):
    """Through onnxruntime-genai, window-sized buffers on: KV-shared layers have no cache, global
    layers hold 1 kv head of 32 for max_length, unshared sliding layers a window-sized buffer
    (window 4 + CPU slack 16); the sliding layer other layers read keeps max_length (GQA's
    shared-KV mode reads it whole). Tokens stay exact past the window."""
    import onnxruntime_genai as og

    package = builds.package("gemma4_causal", settings=WINDOW_CACHE)
    graph = onnx.load(str(package / "model.onnx"), load_external_data=False).graph
    assert sorted(i.name for i in graph.input if i.name.startswith("past_key_values.") and i.name.endswith("key")) == [
        f"past_key_values.{i}.key" for i in range(4)
    ]
    config = json.loads((package / "genai_config.json").read_text())
    assert config["model"]["decoder"]["sliding_window"]["layers"] == [0, 1]
    assert config["search"]["past_present_share_buffer"] is True
    params = og.GeneratorParams(load(package, "cpu"))
    params.set_search_options(max_length=100)
    generator = og.Generator(load(package, "cpu"), params)
    generator.append_tokens([0, 17, 45, 99])
    shapes = {i: np.asarray(generator.get_output(f"present.{i}.key")).shape for i in range(4)}
    assert shapes == {0: (1, 2, 20, 16), 1: (1, 2, 20, 16), 2: (1, 1, 100, 32), 3: (1, 2, 100, 16)}
    hf, prompt = hf_model(builds.checkpoint("gemma4_causal")), list(GEMMA4_PROMPTS[2])  # far past the window
    assert generate_greedy(package, prompt, NEW, min_new_tokens=NEW).tokens == hf_generate(hf, prompt, NEW)


def test_inspect_reports_per_layer_shapes_and_true_kv_bytes(builds):
    package = builds.package("gemma4_causal", settings=WINDOW_CACHE)
    pkg = load_package(package)
    layers = {a.layer: a for a in pkg.graphs[0].attention}
    assert [(layers[i].head_dim, layers[i].kv_heads, layers[i].kv_source) for i in range(8)] == [
        (16, 2, 0), (16, 2, 1), (32, 1, 2), (16, 2, 3), (16, 2, 3), (32, 1, 2), (16, 2, 3), (32, 1, 2),
    ]  # fmt: skip
    max_length = pkg.max_length
    # K and V, fp32: two window layers (4 + 16 slots), the global layer 2 and the shared sliding layer 3
    expected = 2 * 4 * (2 * 2 * 16 * 20 + 1 * 32 * max_length + 2 * 16 * max_length)
    assert pkg.kv_bytes_per_row() == expected


@pytest.mark.parametrize("variant", ["gemma4_causal", "gemma4_unified"])
def test_fp16_cuda_graph_keeps_per_layer_kv(builds, variant):
    """CUDA fp16: GQA per layer with its own kv heads and scale 1, shared-KV nodes reading the
    producer's present (its logits close to HF on CPU: tests/arch/test_families.py)."""
    package = builds.package(variant, ep="cuda", precision="fp16")
    graph = onnx.load(str(package / "model.onnx"), load_external_data=False).graph
    nodes = [n for n in graph.node if n.op_type == "GroupQueryAttention"]
    attrs = [{a.name: onnx.helper.get_attribute_value(a) for a in n.attribute} for n in nodes]
    assert [a["kv_num_heads"] for a in attrs] == [2, 2, 1, 2, 2, 1, 2, 1]
    assert all(a["scale"] == 1.0 for a in attrs)
    assert [n.input[3] for n in nodes[4:]] == ["present.3.key", "present.2.key", "present.3.key", "present.2.key"]
    assert all(len(n.output) == 1 for n in nodes[4:])


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"use_bidirectional_attention": "all"}, "makes every layer bidirectional"),
        ({"num_kv_shared_layers": 8}, "shares the KV cache of an earlier"),
    ],
)
def test_refuses_what_it_cannot_export(tmp_path, overrides, message):
    folder = save_gemma4(tmp_path / "ckpt", "causal", **overrides)
    with pytest.raises(InputError, match=message):
        build(BuildOptions(str(folder), tmp_path / "pkg", smoke=False))
    assert not (tmp_path / "pkg").exists()
