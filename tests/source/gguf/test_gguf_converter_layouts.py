"""GGUF files of the families whose tensors llama.cpp's converter changes on the way (docs/gguf.md §4):
Bloom and Falcon regroup their fused qkv rows (all queries, then keys, then values), GPT-2's Conv1D
weights are transposed, LFM2's convolution kernels squeezed, Nemotron's LayerNorm1P weights stored
as 1 + w, Falcon-40B's two norms named by what llama.cpp runs them on, and Mixtral written as
`llama` with stacked experts.

Per family, on tiny checkpoints written as the converter writes them (tests/gguf_models.py):
- the F32 file's package equals the checkpoint it was written from (HF on the safetensors);
- the Q4_1 file's package (integer blocks kept, the fused qkv and the transposed weights included:
  the manifest says so) equals the reference on that file, prompt and decode steps, and genai's
  greedy tokens equal HF generate on it. The reference is transformers' own load of the GGUF where
  it reads the family right (Bloom, Falcon-7B, GPT-2, Nemotron, LFM2); transformers 5.24 cannot load a
  Mixtral-style `llama` file ("Unknown gguf model_type: mixtral") and loads Falcon-40B's without
  undoing the regrouping (logits 3.0 off), so there the reference is HF on the checkpoint holding
  the file's weights dequantized by the `gguf` package (GgufFiles.twin);
- a planted bug per mapping fails: each transform left in place, the import taking the fused qkv's
  blocks without the q | k | v selection, Falcon-40B's norms swapped, Mixtral's gate and up swapped,
  and its Q4_1 experts (per-expert MatMulNBits, docs/gguf.md §3.4) without their mins' residual.
Phi-3's LongRoPE factor tensors and StableLM's stacked per-head q/k norms: the F32 package equals the
checkpoint, and swapped factors or norms fail.
"""

from __future__ import annotations

import json

import pytest
from families import PROMPT, PROMPTS, TEXT_PROMPTS
from gguf_reference import hf_from_gguf, hf_generate_until, package_eos
from reference import assert_varied, genai_prompt_then_greedy, hf_logits, hf_model, ort_prefill_and_decode

from gqa_export.errors import InputError
from gqa_export.pipeline import BuildOptions, build
from gqa_export.quant import imported_experts
from gqa_export.source.gguf import names
from gqa_export.source.gguf.store import GgufStore

BOUND = 1e-4
ARCH = {"bloom": "bloom", "falcon": "falcon", "falcon_grouped": "falcon", "gpt2": "gpt2", "nemotron": "nemotron",
        "mixtral": "llama", "lfm2": "lfm2"}  # fmt: skip
TRANSFORMERS_READS = {"bloom", "falcon", "gpt2", "nemotron", "lfm2"}
# a weight per family that keeps its blocks only through the new import paths (selection, transpose)
KEPT = {
    "bloom": "transformer.h.0.self_attention.query_key_value.weight",
    "falcon": "transformer.h.0.self_attention.query_key_value.weight",
    "falcon_grouped": "transformer.h.0.self_attention.query_key_value.weight",
    "gpt2": "transformer.h.0.attn.c_attn.weight",
    "nemotron": "model.layers.0.mlp.up_proj.weight",
    "mixtral": "model.layers.0.self_attn.q_proj.weight",
    "lfm2": "model.layers.0.conv.in_proj.weight",
}


def logits_error(package, model) -> float:
    tokens, got = ort_prefill_and_decode(package, list(PROMPT), steps=6)
    return float(abs(got - hf_logits(model, tokens, len(PROMPT))).max())


def reference(ggufs, family: str, type_name: str):
    gguf = ggufs.get(family, type_name, arch=ARCH[family])
    if family in TRANSFORMERS_READS:
        from gqa_export.source.gguf import materialize

        folder, _ = materialize(gguf)
        return hf_from_gguf(gguf, folder)
    return hf_model(ggufs.twin(family, type_name, ARCH[family]))


@pytest.mark.parametrize("family", list(ARCH))
def test_f32_gguf_package_equals_the_checkpoint_it_was_written_from(ggufs, family):
    package = ggufs.package(family, "F32", arch=ARCH[family])
    assert logits_error(package, hf_model(ggufs.checkpoint(family))) < BOUND


@pytest.mark.parametrize("family", list(ARCH))
def test_q4_1_gguf_package_equals_the_file_and_generates_like_hf(ggufs, family):
    package = ggufs.package(family, "Q4_1", arch=ARCH[family])
    model = reference(ggufs, family, "Q4_1")
    assert logits_error(package, model) < BOUND
    tensors = json.loads((package / "manifest.json").read_text())["options"]["gguf"]["tensors"]
    assert tensors[KEPT[family]]["as"] == "Q4_1: MatMulNBits 4-bit block 32 + mins"
    if family == "mixtral":  # experts with mins: per-expert MatMulNBits plus their block-sum correction
        expert = tensors["model.layers.0.mlp.experts.0.down_proj.weight"]["as"]
        assert expert == "gguf Q4_1 4-bit group 32 (per-expert MatMulNBits)"
        from gqa_export.source.gguf.summary import summarize  # `inspect` names the family the file reads as

        assert summarize(ggufs.get(family, "Q4_1", arch="llama"))["family"] == "mixtral"
    seen = []
    for prompt in (*PROMPTS, *TEXT_PROMPTS):  # the registry's prompts (random tiny models repeat themselves)
        _, tokens = genai_prompt_then_greedy(package, list(prompt), 24)
        assert tokens == hf_generate_until(model, list(prompt), 24, package_eos(package)), prompt
        seen.append(tokens)
    assert_varied(seen)


def _drop_selection(monkeypatch: pytest.MonkeyPatch) -> None:
    linear = GgufStore.linear
    monkeypatch.setattr(GgufStore, "linear", lambda self, name, selected=None: linear(self, name))


def _swap(table: dict[str, str], a: str, b: str) -> dict[str, str]:
    return {**table, a: table[b], b: table[a]}


MUTANTS = {
    # (family, type): how the bug is planted
    "bloom qkv regrouping left in place": ("bloom", "F32", lambda mp: mp.setattr(names, "GROUPED_QKV", frozenset())),
    "falcon-40B qkv regrouping left in place": (
        "falcon_grouped", "F32", lambda mp: mp.setattr(names, "GROUPED_QKV", frozenset())),
    "fused qkv blocks imported without the q|k|v selection": ("bloom", "Q4_1", _drop_selection),
    "gpt2 transpose left in place": ("gpt2", "F32", lambda mp: mp.setattr(names, "TRANSPOSED", {})),
    "lfm2 convolution kernels left squeezed": ("lfm2", "F32", lambda mp: mp.setattr(names, "SQUEEZED", {})),
    "nemotron 1 + w norms kept": ("nemotron", "F32", lambda mp: mp.setattr(names, "NORM_PLUS_ONE", frozenset())),
    "falcon-40B norms swapped": ("falcon_grouped", "F32", lambda mp: mp.setattr(
        names, "_FALCON_40B", _swap(names._FALCON_40B, "blk.{i}.attn_norm", "blk.{i}.attn_norm_2"))),
    "expert mins' residual dropped (zero points alone)": ("mixtral", "Q4_1", lambda mp: mp.setattr(
        imported_experts, "_plus_residual", lambda b, x, y, *rest: y)),
    "mixtral gate and up experts swapped": ("mixtral", "F32", lambda mp: mp.setitem(
        names.TABLES, "llama", _swap(names.TABLES["llama"], "blk.{i}.ffn_gate_exps", "blk.{i}.ffn_up_exps"))),
}  # fmt: skip


# how a planted bug that does not change logits fails instead: a refusal, or a package onnxruntime will not load
FAILS_OTHERWISE = {
    "gpt2 transpose left in place": (InputError, "does not belong to these weights"),
    "lfm2 convolution kernels left squeezed": (Exception, "weight must have rank"),
}


@pytest.mark.parametrize("mutant", list(MUTANTS))
def test_mutant_layout_bug_fails(ggufs, mutant, tmp_path, monkeypatch):
    family, type_name, plant = MUTANTS[mutant]
    gguf = ggufs.get(family, type_name, arch=ARCH[family])
    model = hf_model(ggufs.checkpoint(family)) if type_name == "F32" else reference(ggufs, family, type_name)
    plant(monkeypatch)

    def error() -> float:
        build(BuildOptions(str(gguf), tmp_path / "pkg", precision="fp32", smoke=False))
        return logits_error(tmp_path / "pkg", model)

    if mutant in FAILS_OTHERWISE:
        kind, message = FAILS_OTHERWISE[mutant]
        with pytest.raises(kind, match=message):
            error()
        return
    assert error() > 100 * BOUND


# --- tensors llama.cpp's converter adds or stacks: Phi-3's LongRoPE factors, StableLM's per-head q/k norms ---
ROPE_AND_NORMS = {"phi3_longrope": ("phi3", TEXT_PROMPTS[2]), "stablelm_qk_norm": ("stablelm", PROMPT)}


def _swapped_longrope(monkeypatch: pytest.MonkeyPatch) -> None:
    from gqa_export.source.gguf import config

    longrope = config._longrope

    def swapped(f, cfg):
        made = longrope(f, cfg)
        return {**made, "long_factor": made["short_factor"], "short_factor": made["long_factor"]}

    monkeypatch.setattr(config, "_longrope", swapped)


def _swapped_qk_norms(monkeypatch: pytest.MonkeyPatch) -> None:
    table = _swap(names.TABLES["stablelm"], "blk.{i}.attn_q_norm", "blk.{i}.attn_k_norm")
    monkeypatch.setitem(names.TABLES, "stablelm", table)


@pytest.mark.parametrize("family", list(ROPE_AND_NORMS))
def test_rope_factor_and_per_head_norm_tensors(ggufs, family, tmp_path, monkeypatch):
    """Phi-3 LongRoPE (rope_factors_long / _short, the original context; a 97-token prompt crosses
    its switch at 32) and StableLM's per-head q/k LayerNorms (stacked [heads, head_dim]): the F32
    file's package equals the checkpoint; with the factors or the q/k norms swapped it does not."""
    arch, prompt = ROPE_AND_NORMS[family]
    model = hf_model(ggufs.checkpoint(family))

    def error(package) -> float:
        tokens, got = ort_prefill_and_decode(package, list(prompt), steps=6)
        return float(abs(got - hf_logits(model, tokens, len(prompt))).max())

    assert error(ggufs.package(family, "F32", arch=arch)) < BOUND
    (_swapped_longrope if family == "phi3_longrope" else _swapped_qk_norms)(monkeypatch)
    build(BuildOptions(str(ggufs.get(family, "F32", arch=arch)), tmp_path / "pkg", precision="fp32", smoke=False))
    assert error(tmp_path / "pkg") > 100 * BOUND


def test_k_quant_experts_keep_their_blocks_exactly(ggufs):
    """Q4_K experts (super-block scales and mins; K = 256 here) go to per-expert MatMulNBits with
    their block-sum correction: logits equal HF on the file's dequantized weights."""
    package = ggufs.package("qwen3_moe256", "Q4_K", arch="qwen3moe")
    assert logits_error(package, hf_model(ggufs.twin("qwen3_moe256", "Q4_K", "qwen3moe"))) < BOUND
    tensors = json.loads((package / "manifest.json").read_text())["options"]["gguf"]["tensors"]
    assert (
        tensors["model.layers.1.mlp.experts.7.up_proj.weight"]["as"]
        == "gguf Q4_K 4-bit group 32 (per-expert MatMulNBits)"
    )
