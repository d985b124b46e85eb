"""Attention modes gqa / bias / split beyond single-prompt parity: the split package's layout,
bias's in-place scatter and growing cache, bidirectional prompt blocks equal to HF run with the
equivalent 4D additive mask, rotary dims GQA's fused RoPE refuses. Each variant's greedy tokens in
each mode against HF generate, alone and in a ragged batch (where every step of a split pipeline
runs its prefill graph and bias writes each row at its own index of the shared buffer), are rows of
the family registry (tests/families.py LLAMA_MODES, tests/arch/test_families.py); the packages are
the registry's session builds."""

from __future__ import annotations

import json

import numpy as np
import pytest
from families import PROMPTS
from reference import (
    genai_prompt_then_greedy,
    hf_generates_of,
    hf_model,
    hf_prompt_then_greedy,
)

from gqa_export.pipeline import BuildOptions, build
from gqa_export.runtime.run import generate_greedy

NEW = 40
BIDIR = (300, 301)
# Two runs of bidirectional ids: positions 3-5 and 8-9.
BIDIR_PROMPT = [0, 17, 45, 300, 301, 300, 99, 200, 301, 301, 7, 64]


def test_split_package_layout(builds):
    package = builds.package("gqa", "split")
    config = json.loads((package / "genai_config.json").read_text())
    assert config["model"]["type"] == "decoder-pipeline"
    assert config["search"]["past_present_share_buffer"] is True
    (stages,) = config["model"]["decoder"]["pipeline"]
    assert stages["prefill"]["run_on_prompt"] and not stages["prefill"]["run_on_token_gen"]
    assert stages["decode"]["run_on_token_gen"] and not stages["decode"]["run_on_prompt"]
    assert stages["prefill"]["inputs"] == stages["decode"]["inputs"]
    assert stages["prefill"]["outputs"] == stages["decode"]["outputs"]
    gqa_weights = (builds.package("gqa", "gqa") / "model.onnx.data").stat().st_size
    assert (package / "weights.onnx.data").stat().st_size == gqa_weights  # stored once
    assert not (package / "model.onnx.data").exists()
    assert (package / "prefill.onnx").stat().st_size < 200_000  # references, no weight bytes inside


def test_bias_mode_writes_the_shared_buffer_in_place(builds):
    """One standard-Attention graph on the shared buffer: every past input is written by a
    TensorScatter whose output is the matching present (bound to the same buffer by the runtime)."""
    import onnx

    package = builds.package("gqa", "bias")
    config = json.loads((package / "genai_config.json").read_text())
    assert config["search"]["past_present_share_buffer"] is True and config["model"]["type"] == "llama"
    graph = onnx.load(str(package / "model.onnx"), load_external_data=False).graph
    scatters = {n.input[0]: n.output[0] for n in graph.node if n.op_type == "TensorScatter"}
    pasts = [i.name for i in graph.input if i.name.startswith("past_key_values.")]
    assert {scatters[p] for p in pasts} == {p.replace("past_key_values.", "present.") for p in pasts}
    assert "GroupQueryAttention" not in {n.op_type for n in graph.node}


@pytest.mark.parametrize("variant", ["gqa", "mistral_window"])
def test_bias_growing_cache_for_beam_search(builds, variant):
    """attention.bias_cache: growing keeps the concatenating form (share buffer off), which beam
    search needs: onnxruntime-genai turns the shared buffer off for num_beams > 1."""
    package = builds.package(variant, "bias", settings=("attention.bias_cache=growing",))
    config = json.loads((package / "genai_config.json").read_text())
    assert config["search"]["past_present_share_buffer"] is False
    for prompt, want in zip(PROMPTS[1:], hf_generates_of(builds.checkpoint(variant), PROMPTS[1:], NEW), strict=True):
        assert generate_greedy(package, list(prompt), NEW, min_new_tokens=NEW).tokens == want


def _hf_bidirectional(hf, prompt: list[int], ids: tuple[int, ...], new: int):
    """HF with the 4D additive mask: causal, plus every run of `ids` attending within itself;
    then greedy decoding through HF's cache with the plain causal mask."""
    import torch

    n = len(prompt)
    allowed = np.tril(np.ones((n, n), dtype=bool))
    bi = np.isin(prompt, ids)
    run = np.cumsum(bi & ~np.concatenate([[False], bi[:-1]]))
    allowed |= bi[:, None] & bi[None, :] & (run[:, None] == run[None, :])
    mask = torch.where(torch.tensor(allowed), 0.0, torch.finfo(torch.float32).min)[None, None]
    return hf_prompt_then_greedy(hf, prompt, new, attention_mask=mask)


@pytest.mark.parametrize("mode", ["bias", "bias_nonpad", "bias_gqa", "split", "auto"])
def test_bidirectional_blocks_match_hf_4d_mask(builds, mode):
    package = builds.package("gqa", mode, bidirectional_ids=BIDIR)
    if mode == "auto":
        assert json.loads((package / "manifest.json").read_text())["options"]["attention"] == "split"
    hf = hf_model(builds.checkpoint("gqa"))
    ref_logits, ref_tokens = _hf_bidirectional(hf, BIDIR_PROMPT, BIDIR, 24)
    prompt_logits, tokens = genai_prompt_then_greedy(package, BIDIR_PROMPT, 24)
    np.testing.assert_allclose(prompt_logits, ref_logits, atol=1e-4, rtol=1e-4)
    assert tokens == ref_tokens


def test_bidirectional_ids_change_the_prompt_logits(builds):
    """The blocks matter: plain causal logits differ from the bidirectional ones."""
    hf = hf_model(builds.checkpoint("gqa"))
    bi_logits, _ = _hf_bidirectional(hf, BIDIR_PROMPT, BIDIR, 0)
    causal_logits, _ = _hf_bidirectional(hf, BIDIR_PROMPT, (), 0)
    assert np.abs(bi_logits[3:] - causal_logits[3:]).max() > 1e-2
    np.testing.assert_allclose(bi_logits[:3], causal_logits[:3], atol=1e-5)


def test_gqa_refuses_bidirectional_ids(builds, tmp_path):
    from gqa_export.errors import InputError

    with pytest.raises(InputError, match="attention gqa cannot express bidirectional token blocks"):
        build(
            BuildOptions(
                str(builds.checkpoint("gqa")), tmp_path / "p", smoke=False, attention="gqa", bidirectional_ids=BIDIR
            )
        )


@pytest.mark.parametrize("name", ["phi3_rotary_24", "llama_head_dim_24"])
def test_every_rotary_dim_keeps_gqa_and_the_shared_buffer(builds, name):
    """Rotary dims GQA's fused RoPE refuses (24 of 32; head_dim 24: not a multiple of 16) are applied
    with plain ops before GQA (do_rotary=0): mode gqa keeps the shared buffer, and so does bias
    (plain-op RoPE); their greedy tokens equal HF generate in the registry's rows."""
    import onnx

    for mode in ("gqa", "bias"):
        config = json.loads((builds.package(name, mode) / "genai_config.json").read_text())
        assert config["search"]["past_present_share_buffer"]
    graph = onnx.load(str(builds.package(name, "gqa") / "model.onnx"), load_external_data=False).graph
    gqa = [n for n in graph.node if n.op_type == "GroupQueryAttention"]
    assert gqa and all(
        onnx.helper.get_attribute_value(a) == 0 for n in gqa for a in n.attribute if a.name == "do_rotary"
    )


def test_cuda_split_can_share_weights_on_the_gpu(builds, tmp_path):
    """attention.split_shared_weights lists every external weight in decoder.shared_initializers
    with the exact name, offset and length both graphs reference (onnxruntime-genai uploads each
    once); the smoke run is skipped without a GPU (the runtime refuses the key on CPU)."""
    import onnx

    out = tmp_path / "split"
    settings = ("attention.split_shared_weights=true",)
    result = build(BuildOptions(str(builds.checkpoint("gqa")), out, ep="cuda", attention="split", settings=settings))
    assert result.smoke is None and any("shared_initializers" in note for note in result.notes)
    entries = json.loads((out / "genai_config.json").read_text())["model"]["decoder"]["shared_initializers"]
    for graph in ("decode.onnx", "prefill.onnx"):
        external = {
            t.name: {e.key: e.value for e in t.external_data}
            for t in onnx.load(str(out / graph), load_external_data=False).graph.initializer
            if t.data_location == onnx.TensorProto.EXTERNAL
        }
        assert {e["name"]: (e["data_file"], e["offset"], e["length"]) for e in entries} == {
            name: (info["location"], info.get("offset", "0"), info["length"]) for name, info in external.items()
        }
    assert {e["data_type"] for e in entries} == {onnx.TensorProto.FLOAT16}


def test_fused_rope_off_applies_rope_before_gqa(builds):
    """attention.fused_rope false: plain-op RoPE before GQA everywhere (do_rotary=0), still exact."""
    import onnx

    package = builds.package("mistral_window", "gqa", settings=("attention.fused_rope=false",))
    graph = onnx.load(str(package / "model.onnx"), load_external_data=False).graph
    rotary = {onnx.helper.get_attribute_value(a) for n in graph.node if n.op_type == "GroupQueryAttention"
              for a in n.attribute if a.name == "do_rotary"}  # fmt: skip
    assert rotary == {0}
    for prompt, want in zip(PROMPTS, hf_generates_of(builds.checkpoint("mistral_window"), PROMPTS, NEW), strict=True):
        assert generate_greedy(package, list(prompt), NEW, min_new_tokens=NEW).tokens == want
