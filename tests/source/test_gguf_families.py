"""GGUF import per family: every architecture both transformers' GGUF loader and gqa-export read.

Two checks per family, on tiny checkpoints written to GGUF the way llama.cpp's converter writes
them (gguf_models.write_gguf; its output for llama is byte-identical to the converter's, and the
converter's own files are compared in tests/source/test_gguf_llama_cpp.py where llama.cpp is installed):
- the F32 file's package equals the checkpoint it was written from (HF transformers on the
  safetensors) within the fp32 bound: the config read from the metadata, the tensor names and the
  transforms undone (Llama's q/k rows, Gemma's 1 + w norms) are right, whatever transformers' own
  GGUF mapping does;
- a quantized file's package (Q8_0; Q4_1, whose mins go through the block-sum correction) equals
  transformers loading the same file with that config, and genai's greedy tokens equal HF generate.
"""

from __future__ import annotations

import onnx
import pytest
from families import PROMPT, PROMPTS, TEXT_PROMPTS
from gguf_reference import GGUF_CHECKPOINTS, hf_from_gguf, hf_generate_until, package_eos
from reference import assert_varied, genai_prompt_then_greedy, hf_logits, hf_model, ort_prefill_and_decode

BOUND = 1e-4
# family checkpoint -> GGUF architecture llama.cpp's converter writes it as
ARCH = {"qwen2": "qwen2", "qwen3": "qwen3", "mistral": "llama", "gemma2": "gemma2", "gemma3": "gemma3",
        "phi3": "phi3", "stablelm": "stablelm", "starcoder2": "starcoder2", "qwen3_moe": "qwen3moe",
        "qwen2_moe": "qwen2moe", "llama3_rope": "llama"}  # fmt: skip
assert set(ARCH) < set(GGUF_CHECKPOINTS)


def logits_error(package, model) -> float:
    tokens, got = ort_prefill_and_decode(package, list(PROMPT), steps=6)
    return float(abs(got - hf_logits(model, tokens, len(PROMPT))).max())


@pytest.mark.parametrize("family", list(ARCH))
def test_f32_gguf_package_equals_the_checkpoint_it_was_written_from(ggufs, family):
    package = ggufs.package(family, "F32", arch=ARCH[family])
    assert logits_error(package, hf_model(ggufs.checkpoint(family))) < BOUND


MOE = ("qwen3_moe", "qwen2_moe")
# how a MoE layer's stacked experts come out, by type: QMoE (Q4_0: 4-bit block 32, exact on CPU), per-expert
# MatMulNBits (Q8_0: QMoE's block-wise 8-bit runs on int8 activations; Q4_1: QMoE has no term for the mins'
# residual, which each expert's MatMulNBits adds as a block-sum correction)
EXPERT_FORM = {"Q4_0": "QMoE", "Q8_0": "MatMulNBits", "Q4_1": "MatMulNBits"}


QUANTIZED = [(f, t) for f in ARCH for t in ("Q8_0", "Q4_1", *(("Q4_0",) if f in MOE else ()))]


@pytest.mark.parametrize(("family", "type_name"), QUANTIZED)
def test_quantized_gguf_package_equals_transformers_on_the_file(ggufs, family, type_name, tmp_path):
    gguf = ggufs.get(family, type_name, arch=ARCH[family])
    package = ggufs.package(family, type_name, arch=ARCH[family])
    from gqa_export.source.gguf import materialize

    folder, _ = materialize(gguf)
    reference = hf_from_gguf(gguf, folder)
    assert logits_error(package, reference) < BOUND
    if family in MOE:
        ops = {n.op_type for n in onnx.load(str(package / "model.onnx"), load_external_data=False).graph.node}
        assert EXPERT_FORM[type_name] in ops and not ({"QMoE", "MoE"} - {EXPERT_FORM[type_name]}) & ops, ops
    if type_name == "Q8_0":
        seen = []
        for prompt in (*PROMPTS, *TEXT_PROMPTS):  # the registry's prompts (random tiny models repeat themselves)
            _, tokens = genai_prompt_then_greedy(package, list(prompt), 48)
            assert tokens == hf_generate_until(reference, list(prompt), 48, package_eos(package)), prompt
            seen.append(tokens)
        assert_varied(seen)


def test_mutant_rope_freqs_ignored(ggufs, tmp_path, monkeypatch):
    """Llama-3's scaling lives in the rope_freqs tensor; a reader that drops it exports plain RoPE."""
    from gqa_export.pipeline import BuildOptions, build
    from gqa_export.source.gguf import rope_factors

    monkeypatch.setattr(rope_factors, "llama3_scaling", lambda *args: {"rope_type": "default"})
    gguf = ggufs.get("llama3_rope", "F32", arch="llama")
    build(BuildOptions(str(gguf), tmp_path / "pkg", precision="fp32", smoke=False))
    assert logits_error(tmp_path / "pkg", hf_model(ggufs.checkpoint("llama3_rope"))) > 100 * BOUND
