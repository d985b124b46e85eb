"""Another family's key in a config.json (model/class_reads.py): where the installed transformers' class never
names it, HF ignores it and so must the export. Measured before the fix on the tiny models of the round-3 probe:
0.3 to 3.9 off HF (a Mixtral with final_logit_softcapping, a Qwen-MoE with attention_multiplier, ...)."""

from __future__ import annotations

from pathlib import Path

import pytest
from mutants import edited_checkpoint
from reference import parity_error

from gqa_export.model import class_reads
from gqa_export.pipeline import BuildOptions, build

# each of these changes the package's numbers where read; Llama's class names none of them
STRAY = {
    "final_logit_softcapping": 1.0,
    "attn_logit_softcapping": 1.0,
    "query_pre_attn_scalar": 3,
    "attention_multiplier": 0.3,
    "residual_multiplier": 0.3,
    "logits_scaling": 3.0,
    "clip_qkv": 0.05,
}


def test_the_keys_a_class_names_are_read_and_the_others_are_not():
    from transformers import AutoConfig

    def read(model_type: str) -> set[str]:
        return set(class_reads.CLASS_LOCAL_KEYS) - class_reads.unread_keys(AutoConfig.for_model(model_type))

    eps = {"rms_norm_eps"}  # Llama's norms' spelling, named by most classes
    assert read("llama") == eps and read("mixtral") == eps | {"num_experts_per_tok"}
    assert read("gemma2") == {"attn_logit_softcapping", "final_logit_softcapping", "query_pre_attn_scalar"} | eps
    assert read("granite") == {"attention_multiplier", "embedding_multiplier", "logits_scaling", "residual_multiplier"
                               } | eps  # fmt: skip
    assert read("olmo") == {"clip_qkv"} and read("cohere") == {"logit_scale", "layer_norm_eps"}
    # each its own eps spelling only (norm_eps is not read where only rms_norm_eps is named)
    assert [read(t) for t in ("stablelm", "starcoder2", "lfm2")] == [{"layer_norm_eps"}, {"norm_epsilon"}, {"norm_eps"}]
    assert "top_k_experts" in read("gemma4_text") and "num_experts_per_tok" not in read("gemma4_text")
    assert "norm_topk_prob" not in read("muse_spark_text")  # it names norm_topk_prob_eps, a constant of its own
    assert class_reads.unread_keys(object()) == frozenset()  # not a transformers config: nothing dropped


@pytest.fixture(scope="module")
def stray_checkpoint(checkpoints, tmp_path_factory) -> Path:
    return edited_checkpoint(checkpoints.get("gqa"), tmp_path_factory.mktemp("stray") / "ckpt", **STRAY)


def test_stray_keys_a_class_never_reads_leave_the_package_equal_to_hf(stray_checkpoint, tmp_path):
    build(BuildOptions(str(stray_checkpoint), tmp_path / "pkg", smoke=False))
    assert parity_error(tmp_path / "pkg", stray_checkpoint) < 1e-4


def test_mutant_reading_every_key_is_off_hf(stray_checkpoint, tmp_path, monkeypatch):
    """The filter removed (every key read for every family, as before): far from HF."""
    monkeypatch.setattr("gqa_export.model.dims.unread_keys", lambda config: frozenset())
    build(BuildOptions(str(stray_checkpoint), tmp_path / "pkg", smoke=False))
    assert parity_error(tmp_path / "pkg", stray_checkpoint) > 0.1


# another spelling beside the one the class reads: a stray rms_norm_eps (and another family's eps spelling) at 0.5
# moves every norm; a stray num_experts_per_tok beside Gemma-4's top_k_experts (2) routes each token to 6 of 8 experts
STRAY_SPELLINGS = {
    "stablelm": ("dense", {"rms_norm_eps": 0.5, "norm_eps": 0.5}),
    "starcoder2": ("dense", {"rms_norm_eps": 0.5, "layer_norm_eps": 0.5}),
    "gemma4_text": ("moe", {"num_experts_per_tok": 6}),
}


@pytest.fixture(scope="module")
def stray_spelling_checkpoints(tmp_path_factory) -> dict[str, Path]:
    from dense_models import save_dense
    from moe_models import save_moe

    root, save = tmp_path_factory.mktemp("stray_spellings"), {"dense": save_dense, "moe": save_moe}
    return {t: save[kind](root / t, t, **keys) for t, (kind, keys) in STRAY_SPELLINGS.items()}


@pytest.mark.parametrize("model_type", list(STRAY_SPELLINGS))
def test_a_stray_spelling_is_not_read(stray_spelling_checkpoints, model_type, tmp_path):
    """StableLM reads layer_norm_eps, StarCoder2 norm_epsilon, Gemma-4 top_k_experts: another spelling of the same
    option beside it leaves the package equal to HF."""
    checkpoint = stray_spelling_checkpoints[model_type]
    build(BuildOptions(str(checkpoint), tmp_path / "pkg", smoke=False))
    assert parity_error(tmp_path / "pkg", checkpoint) < 1e-4


@pytest.mark.parametrize("model_type", ["stablelm", "gemma4_text"])
def test_mutant_reading_the_stray_spelling_is_off_hf(stray_spelling_checkpoints, model_type, tmp_path, monkeypatch):
    """The spellings read in config_keys' order again (rms_norm_eps, num_experts_per_tok first): far from HF."""
    spellings = ("eps", "experts_per_tok", "top_k_experts")
    monkeypatch.setattr(class_reads, "CLASS_LOCAL_KEYS", tuple(k for k in class_reads.CLASS_LOCAL_KEYS
                                                               if not k.endswith(spellings)))  # fmt: skip
    class_reads._unread_in.cache_clear()
    try:
        build(BuildOptions(str(stray_spelling_checkpoints[model_type]), tmp_path / "pkg", smoke=False))
    finally:
        class_reads._unread_in.cache_clear()
    assert parity_error(tmp_path / "pkg", stray_spelling_checkpoints[model_type]) > 0.05
