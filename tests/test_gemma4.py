"""Gemma-4 in its three checkpoint forms against the HF class itself: logits (prompt + decode),
greedy onnxruntime-genai tokens in every mode, vision runs against HF's own mm_token_type_ids
mask, per-layer KV buffers as the runtime allocates them, quantized and CUDA graphs, refusals."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from gemma4_models import mm_token_type_ids, save_gemma4
from reference import (
    assert_varied,
    genai_prompt_then_greedy,
    hf_generate,
    hf_logits,
    hf_model,
    hf_prompt_then_greedy,
    ort_prefill_and_decode,
)
from variants import GEMMA4_VARIANTS
from weight_layouts import INT4_MAX_ERROR, INT8_MAX_ERROR, relative_errors

from gqa_export.check.reader import load_package
from gqa_export.errors import InputError
from gqa_export.pipeline import BuildOptions, build
from gqa_export.quant.quantize import QuantOptions
from gqa_export.runtime.run import generate_greedy, load

PROMPT = [0, 17, 45, 99, 200, 3, 7, 120, 64, 33, 250, 11, 12, 13]  # longer than the windows (4, 6)
PROMPTS = [[0], [0, 17, 45, 99, 200, 3, 7], [(11 * i + 5) % 290 for i in range(30)]]
NEW = 40
# an image run longer than the window (4), an audio placeholder, a video run
VISION_PROMPT = [0, 17, 45, 300, 300, 300, 300, 300, 300, 99, 302, 200, 301, 301, 3, 7]


@pytest.fixture(scope="module")
def packages(checkpoints, tmp_path_factory):
    made = {}

    def get(variant: str, mode: str = "gqa", ep: str = "cpu", precision: str = "fp32", settings: tuple = ()):
        key = (variant, mode, ep, precision, *settings)
        if key not in made:
            out = tmp_path_factory.mktemp("gemma4") / "-".join(key)
            options = BuildOptions(str(checkpoints.get(variant)), out, ep=ep, precision=precision, smoke=False)
            build(BuildOptions(**{**vars(options), "attention": mode, "settings": settings}))
            made[key] = out
        return made[key]

    return get


@pytest.mark.parametrize("variant", list(GEMMA4_VARIANTS))
def test_logits_match_hf_prefill_and_decode(packages, checkpoints, variant):
    package = packages(variant)
    tokens, got = ort_prefill_and_decode(package, PROMPT, steps=6)
    ref = hf_logits(hf_model(checkpoints.get(variant)), tokens, len(PROMPT))
    np.testing.assert_allclose(got, ref, atol=1e-4, rtol=1e-4)
    assert np.abs(ref).max() > 1.0


@pytest.mark.parametrize("mode", ["gqa", "bias", "split"])
@pytest.mark.parametrize("variant", list(GEMMA4_VARIANTS))
def test_generates_like_hf(packages, checkpoints, variant, mode):
    package = packages(variant, mode)
    hf = hf_model(checkpoints.get(variant))
    model = load(package, "cpu")
    seen: list[list[int]] = []
    for prompt in PROMPTS:
        got = generate_greedy(package, prompt, NEW, min_new_tokens=NEW, model=model)
        assert got.tokens == hf_generate(hf, prompt, NEW), (mode, prompt)
        seen.append(got.tokens)
    assert_varied(seen)


@pytest.mark.parametrize("mode", ["auto", "bias", "split"])
@pytest.mark.parametrize("variant", ["gemma4_conditional", "gemma4_unified"])
def test_vision_runs_match_hf_mask(packages, checkpoints, variant, mode):
    """gemma4: image/video runs bidirectional on sliding layers, the window bounding them on the
    left; gemma4_unified: transformers' generic block mask on every layer. Placeholders (the audio
    id too) are embedded as pad. Prompt through HF's mm_token_type_ids, causal decoding after."""
    package = packages(variant, mode)
    manifest = json.loads((package / "manifest.json").read_text())
    assert manifest["options"]["attention"] == ("split" if mode == "auto" else mode)
    assert manifest["options"]["bidirectional_token_ids"] == [300, 301]
    hf = hf_model(checkpoints.get(variant))
    types = mm_token_type_ids(hf, VISION_PROMPT)
    ref_logits, ref_tokens = hf_prompt_then_greedy(hf, VISION_PROMPT, 24, mm_token_type_ids=types)
    causal_logits, _ = hf_prompt_then_greedy(hf, VISION_PROMPT, 0)
    assert np.abs(ref_logits - causal_logits).max() > 0.1  # the mask matters
    logits, tokens = genai_prompt_then_greedy(package, VISION_PROMPT, 24)
    np.testing.assert_allclose(logits, ref_logits, atol=1e-4, rtol=1e-4)
    assert tokens == ref_tokens


def test_gqa_embeds_placeholders_as_pad_like_hf(packages, checkpoints):
    """Text-only use (gqa): image/video/audio ids are embedded as pad_token_id, like the HF class
    fed input_ids alone; attention stays causal."""
    tokens, got = ort_prefill_and_decode(packages("gemma4_conditional"), VISION_PROMPT, steps=2)
    ref = hf_logits(hf_model(checkpoints.get("gemma4_conditional")), tokens, len(VISION_PROMPT))
    np.testing.assert_allclose(got, ref, atol=1e-4, rtol=1e-4)


WINDOW_CACHE = ("attention.sliding_window_cache=true",)


def test_runtime_allocates_per_layer_kv(packages, checkpoints):
    """Through onnxruntime-genai, window-sized buffers on: KV-shared layers have no cache, global
    layers hold 1 kv head of 32 for max_length, unshared sliding layers a window-sized buffer
    (window 4 + CPU slack 16); the sliding layer other layers read keeps max_length (GQA's
    shared-KV mode reads it whole). Tokens stay exact past the window."""
    import onnxruntime_genai as og

    package = packages("gemma4_causal", settings=WINDOW_CACHE)
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
    hf = hf_model(checkpoints.get("gemma4_causal"))
    assert generate_greedy(package, PROMPTS[2], NEW, min_new_tokens=NEW).tokens == hf_generate(hf, PROMPTS[2], NEW)


def test_inspect_reports_per_layer_shapes_and_true_kv_bytes(packages):
    package = packages("gemma4_causal", settings=WINDOW_CACHE)
    pkg = load_package(package)
    layers = {a.layer: a for a in pkg.graphs[0].attention}
    assert [(layers[i].head_dim, layers[i].kv_heads, layers[i].kv_source) for i in range(8)] == [
        (16, 2, 0), (16, 2, 1), (32, 1, 2), (16, 2, 3), (16, 2, 3), (32, 1, 2), (16, 2, 3), (32, 1, 2),
    ]  # fmt: skip
    max_length = pkg.max_length
    # K and V, fp32: two window layers (4 + 16 slots), the global layer 2 and the shared sliding layer 3
    expected = 2 * 4 * (2 * 2 * 16 * 20 + 1 * 32 * max_length + 2 * 16 * max_length)
    assert pkg.kv_bytes_per_row() == expected


@pytest.mark.parametrize(("precision", "bound"), [("int8", INT8_MAX_ERROR), ("int4", INT4_MAX_ERROR)])
def test_quantized_packages_generate_close_to_float(checkpoints, tmp_path, precision, bound):
    """MatMulNBits on every projection (PLE ones too), the tied table shared with GatherBlockQuantized.
    Each weight dequantized independently (tests/weight_layouts.py) is within `bound` of the
    checkpoint's (a layout bug: ~0.4-1.4); end to end, int8 prompt logits stay within 0.25 of the
    fp32 export (measured 0.12). int4's end-to-end error on this random model (0.84: 8
    sandwich-normed layers and a softcap of 2 amplify a weight error of 0.09) bounds nothing."""
    package = tmp_path / precision
    quant = QuantOptions(accuracy_level=0)
    result = build(
        BuildOptions(str(checkpoints.get("gemma4_causal")), package, precision=precision, quant=quant, report=True)
    )
    assert result.smoke is not None and len(result.smoke.tokens) == 16
    graph = onnx.load(str(package / "model.onnx"), load_external_data=False).graph
    ops = {n.op_type for n in graph.node}
    assert {"MatMulNBits", "GatherBlockQuantized"} <= ops and "MatMul" not in ops
    tables = {n.input[0] for n in graph.node if n.op_type == "GatherBlockQuantized"}
    # the tied table (shared with the lm_head) and the per-layer-embedding table, quantized by default
    assert tables == {"model.embed_tokens.qweight", "model.embed_tokens_per_layer.qweight"}
    errors = relative_errors(package, checkpoints.get("gemma4_causal"))
    assert errors and max(errors.values()) < bound, errors
    if precision == "int8":
        report = json.loads((package / "quant_report.json").read_text())["logits_vs_float"]
        assert report["relative_l2"] < 0.25 and report["next_token_agreement"] > 0.75


@pytest.mark.parametrize("variant", ["gemma4_causal", "gemma4_unified"])
def test_fp16_cuda_graph(packages, checkpoints, variant):
    """CUDA fp16: GQA per layer with its own kv heads and scale 1, shared-KV nodes reading the
    producer's present; run on CPU close to HF."""
    package = packages(variant, ep="cuda", precision="fp16")
    graph = onnx.load(str(package / "model.onnx"), load_external_data=False).graph
    nodes = [n for n in graph.node if n.op_type == "GroupQueryAttention"]
    attrs = [{a.name: onnx.helper.get_attribute_value(a) for a in n.attribute} for n in nodes]
    assert [a["kv_num_heads"] for a in attrs] == [2, 2, 1, 2, 2, 1, 2, 1]
    assert all(a["scale"] == 1.0 for a in attrs)
    assert [n.input[3] for n in nodes[4:]] == ["present.3.key", "present.2.key", "present.3.key", "present.2.key"]
    assert all(len(n.output) == 1 for n in nodes[4:])
    tokens, got = ort_prefill_and_decode(package, PROMPT, steps=3)
    ref = hf_logits(hf_model(checkpoints.get(variant)), tokens, len(PROMPT))
    assert np.abs(got - ref).max() < 3e-2 * max(1.0, float(np.abs(ref).max()))


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
