"""Llama-4's text decoder (issue #24), what only it has: chunked local attention (mode bias in all
its graph forms; gqa and split refused in one line), NoPE layers' attention temperature tuning,
scaleless q/k norms after interleaved-pair RoPE on RoPE layers, experts whose sigmoid score scales
their input (top 1 through the MoE op, top 2 in plain ops), the multimodal checkpoint's decoder,
and mutants of each mechanism that fail parity. The checks every family gets are its row in
tests/families.py, a right-padded batch in three forms of mode bias included (docs/llama4.md)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import onnx
import pytest
from families import PROMPT, PROMPTS
from llama4_models import save_llama4
from mutants import edited_checkpoint
from reference import (
    assert_varied,
    genai_prompt_then_greedy,
    hf_generate,
    hf_logits,
    hf_model,
    hf_prompt_then_greedy,
    ort_prefill_and_decode,
    parity_error,
)

from gqa_export.arch import SPECS
from gqa_export.errors import InputError
from gqa_export.pipeline import BuildOptions, build
from gqa_export.runtime.run import generate_greedy, load

pytestmark = pytest.mark.skipif(
    int(__import__("transformers").__version__.split(".")[0]) < 5, reason="the tiny Llama-4 is spelled for 5.x"
)
# mode bias in each graph form: the scatter graph reading the buffer's first T slots (CPU), the
# whole buffer with nonpad_kv_seqlen (CUDA's form), GroupQueryAttention with the bias, and the
# concatenating graph (beam search)
BIAS_FORMS = {
    "slice": (),
    "nonpad": ("attention.bias_kv_read=nonpad",),
    "gqa_op": ("attention.bias_op=gqa",),
    "growing": ("attention.bias_cache=growing",),
}


def _package(checkpoint: Path, out: Path, mode: str = "bias", settings: tuple[str, ...] = ()) -> Path:
    build(BuildOptions(str(checkpoint), out, attention=mode, settings=settings, smoke=False, text_only=True))
    return out


def _matches_hf(package: Path, checkpoint: Path) -> None:
    """The 14-token and a 1-token prompt: through ORT over the shared buffer, the prompt logits and 6
    decode steps' (single-graph shared-buffer packages); through onnxruntime-genai (any package),
    the prompt logits and 16 greedy tokens."""
    search = json.loads((package / "genai_config.json").read_text())["search"]
    if (package / "model.onnx").exists() and search["past_present_share_buffer"]:
        assert parity_error(package, checkpoint) < 1e-4
        assert parity_error(package, checkpoint, (0,)) < 1e-4
    for prompt in (list(PROMPT), [0]):
        logits, tokens = genai_prompt_then_greedy(package, prompt, 16)
        ref_logits, ref_tokens = hf_prompt_then_greedy(hf_model(checkpoint), prompt, 16)
        np.testing.assert_allclose(logits, ref_logits, atol=1e-4, rtol=1e-4)
        assert tokens == ref_tokens


@pytest.mark.parametrize("form", list(BIAS_FORMS))
def test_llama4_bias_forms_match_hf(builds, form):
    """Every form of mode bias: the 14-token prompt (chunks of 6) and a 1-token one, 6 decode steps each."""
    # the session's builds: the registry's own bias package, and the forms its ragged batch runs in
    _matches_hf(builds.package("llama4", "bias", settings=BIAS_FORMS[form]), builds.checkpoint("llama4"))


@pytest.mark.parametrize("mode", ["gqa", "split"])
def test_llama4_chunked_attention_refuses_gqa_and_split_in_one_line(builds, tmp_path, mode):
    """GroupQueryAttention (gqa, and split's decode graph) has a window, not chunks."""
    with pytest.raises(InputError, match=r"attention_chunk_size.*--attention bias") as refused:
        build(BuildOptions(str(builds.checkpoint("llama4")), tmp_path / "pkg", attention=mode, smoke=False))
    assert "\n" not in str(refused.value)


def test_llama4_auto_picks_bias(builds):
    package = builds.package("llama4", "auto")
    assert [g.name for g in package.glob("*.onnx")] == ["model.onnx"]
    nodes = onnx.load(str(package / "model.onnx"), load_external_data=False).graph.node
    ops = {n.op_type for n in nodes}
    assert "Attention" in ops and "GroupQueryAttention" not in ops and "MoE" in ops


@pytest.mark.parametrize("mode", ["gqa", "split", "bias"])
def test_llama4_without_chunks_matches_hf_in_every_mode(tmp_path, mode):
    """attention_chunk_size None: every layer global, so GroupQueryAttention runs it (RoPE, the q/k
    norms and the NoPE layers' temperature as plain ops before it)."""
    checkpoint = save_llama4(tmp_path / "ckpt", attention_chunk_size=None)
    _matches_hf(_package(checkpoint, tmp_path / "pkg", mode), checkpoint)


def test_llama4_top2_experts_in_plain_ops_match_hf(tmp_path):
    """Two experts a token: each scales its own input, which the MoE op's weighted sum cannot
    express, so plain ops run every expert on its scaled input."""
    checkpoint = save_llama4(tmp_path / "ckpt", num_experts_per_tok=2)
    package = _package(checkpoint, tmp_path / "pkg")
    ops = {n.op_type for n in onnx.load(str(package / "model.onnx"), load_external_data=False).graph.node}
    assert "MoE" not in ops and "TopK" in ops
    assert parity_error(package, checkpoint) < 1e-4


def test_llama4_fp16_cuda_graph_runs_close_to_hf(builds, tmp_path):
    """The CUDA fp16 package (auto: bias in CUDA's whole-buffer form, the chunk bias in fp16, fp16
    experts in MoE) runs on CPU close to HF, as the registry's fp16 check bounds it."""
    checkpoint = builds.checkpoint("llama4")
    package = tmp_path / "pkg"
    build(BuildOptions(str(checkpoint), package, ep="cuda", precision="fp16", smoke=False))
    graph = onnx.load(str(package / "model.onnx"), load_external_data=False).graph
    assert {"Attention", "MoE"} <= {n.op_type for n in graph.node}
    tokens, got = ort_prefill_and_decode(package, list(PROMPT), steps=3)
    ref = hf_logits(hf_model(checkpoint), tokens, len(PROMPT))
    assert np.abs(got - ref).max() < 3e-2 * max(1.0, float(np.abs(ref).max()))


def test_position_query_scale_in_an_fp16_graph_ministral3(tmp_path):
    """The position query scale Llama-4's temperature tuning shares with Ministral-3 is built in the
    graph's dtype: an fp16 Ministral-3 package builds (its float32 constants failed the precision
    check before) and runs on CPU close to HF."""
    from families import MULTIMODAL_PROMPT
    from multimodal_models import save_multimodal

    checkpoint = save_multimodal(tmp_path / "ckpt", "ministral3")
    package = tmp_path / "pkg"
    build(BuildOptions(str(checkpoint), package, ep="cuda", precision="fp16", smoke=False, text_only=True))
    tokens, got = ort_prefill_and_decode(package, list(MULTIMODAL_PROMPT), steps=3)
    ref = hf_logits(hf_model(checkpoint), tokens, len(MULTIMODAL_PROMPT))
    assert np.abs(got - ref).max() < 3e-2 * max(1.0, float(np.abs(ref).max()))


def _text_reference(checkpoint: Path):
    """The multimodal checkpoint's language_model (a Llama4ForCausalLM): transformers 5.24's
    Llama4ForConditionalGeneration.forward computes with it, then raises building its output
    (`image_outputs`), so its decoder is the reference, with the same weights."""
    return hf_model(checkpoint).language_model


def test_llama4_multimodal_checkpoint_decoder_matches_hf(tmp_path):
    """Llama4ForConditionalGeneration (tied embeddings, decoder under language_model.model.): prompt
    and 1-token logits, and greedy onnxruntime-genai tokens = HF generate on the 1/7/30-token prompts."""
    checkpoint = save_llama4(tmp_path / "ckpt", conditional=True, tie_word_embeddings=True)
    config = json.loads((checkpoint / "config.json").read_text())
    assert config["architectures"] == ["Llama4ForConditionalGeneration"]
    package = _package(checkpoint, tmp_path / "pkg", "auto")
    reference = _text_reference(checkpoint)
    for prompt in (list(PROMPT), [0]):
        tokens, got = ort_prefill_and_decode(package, prompt, steps=6)
        np.testing.assert_allclose(got, hf_logits(reference, tokens, len(prompt)), atol=1e-4, rtol=1e-4)
    model, seen = load(package, "cpu"), []
    for prompt in map(list, PROMPTS):
        got = generate_greedy(package, prompt, 40, min_new_tokens=40, model=model).tokens
        assert got == hf_generate(reference, prompt, 40), prompt
        seen.append(got)
    assert_varied(seen)


CONFIG_MUTANTS = {  # a mechanism switched off in the exported config: a wrong model
    "chunk_mask_off": dict(attention_chunk_size=None),
    "temperature_tuning_off": dict(attn_temperature_tuning=False),
    "qk_norm_off": dict(use_qk_norm=False),
}


@pytest.mark.parametrize("mutant", list(CONFIG_MUTANTS))
def test_llama4_mutant_config_fails_parity(builds, tmp_path, mutant):
    original = builds.checkpoint("llama4")
    package = _package(edited_checkpoint(original, tmp_path / "ckpt", **CONFIG_MUTANTS[mutant]), tmp_path / "pkg")
    assert parity_error(package, original) > 1e-2


def _spec_mutants() -> dict[str, dict]:
    spec = SPECS["llama4"]
    moe = spec.moe
    assert moe is not None
    pairs = replace(moe, names=replace(moe.names, transposed_order="interleaved"))
    return {
        "rope_half_split": dict(rope_interleaved=False),
        "qk_norm_on_nope_layers": dict(qk_norm_layers="all"),
        "expert_halves_read_interleaved": dict(moe=pairs),
    }


@pytest.mark.parametrize("mutant", ["rope_half_split", "qk_norm_on_nope_layers", "expert_halves_read_interleaved"])
def test_llama4_mutant_spec_fails_parity(builds, tmp_path, monkeypatch, mutant):
    monkeypatch.setitem(SPECS, "llama4", replace(SPECS["llama4"], **_spec_mutants()[mutant]))
    checkpoint = builds.checkpoint("llama4")
    assert parity_error(_package(checkpoint, tmp_path / "pkg"), checkpoint) > 1e-2


def test_llama4_mutant_score_on_expert_output_fails_parity(builds, tmp_path, monkeypatch):
    """The router score multiplying the expert's output instead of its input (what the MoE op's
    weighted sum computes): through the SiLU gate that is another model."""
    from gqa_export.graph import moe

    original = moe._experts_op

    def on_output(lc, x, router, weights, dims, prefix, routing_lc):
        out = original(lc, x, router, weights, dims, prefix, routing_lc)
        top = lc.b.op("ReduceMax", router, lc.b.const([-1], "mutant_last", "int64"), keepdims=1)
        return lc.b.op("Mul", out, lc.b.op("Sigmoid", top))

    monkeypatch.setattr(moe, "top1_scaled_input", lambda lc, x, logits: x)
    monkeypatch.setattr(moe, "_experts_op", on_output)
    checkpoint = builds.checkpoint("llama4")
    assert parity_error(_package(checkpoint, tmp_path / "pkg"), checkpoint) > 1e-2


def test_llama4_mutant_temperature_from_position_zero_fails_parity(builds, tmp_path, monkeypatch):
    """floor(pos / floor_scale) (Ministral-3's form) instead of Llama-4's floor((pos + 1) / floor_scale)."""
    from gqa_export.graph import decoder

    original = decoder.position_query_scale

    def from_zero(*args, **kwargs):
        return original(*args, **{**kwargs, "offset": 0})

    monkeypatch.setattr(decoder, "position_query_scale", from_zero)
    checkpoint = builds.checkpoint("llama4")
    assert parity_error(_package(checkpoint, tmp_path / "pkg"), checkpoint) > 1e-2
