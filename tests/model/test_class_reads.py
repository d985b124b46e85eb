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
    assert read("llama") == read("mixtral") == eps
    assert read("gemma2") == {"attn_logit_softcapping", "final_logit_softcapping", "query_pre_attn_scalar"} | eps
    assert read("granite") == {"attention_multiplier", "embedding_multiplier", "logits_scaling", "residual_multiplier"
                               } | eps  # fmt: skip
    assert read("olmo") == {"clip_qkv"} and read("cohere") == {"logit_scale", "layer_norm_eps"}
    # each its own eps spelling only (norm_eps is not read where only rms_norm_eps is named)
    assert [read(t) for t in ("stablelm", "starcoder2", "lfm2")] == [{"layer_norm_eps"}, {"norm_epsilon"}, {"norm_eps"}]
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


# a stray rms_norm_eps (and another family's spelling) beside the class's own eps key; 0.5 moves every norm
STRAY_EPS = {
    "stablelm": {"rms_norm_eps": 0.5, "norm_eps": 0.5},
    "starcoder2": {"rms_norm_eps": 0.5, "layer_norm_eps": 0.5},
}


@pytest.fixture(scope="module")
def stray_eps_checkpoints(tmp_path_factory) -> dict[str, Path]:
    from dense_models import save_dense

    root = tmp_path_factory.mktemp("stray_eps")
    return {model_type: save_dense(root / model_type, model_type, **keys) for model_type, keys in STRAY_EPS.items()}


@pytest.mark.parametrize("model_type", list(STRAY_EPS))
def test_a_stray_eps_spelling_is_not_read(stray_eps_checkpoints, model_type, tmp_path):
    """StableLM reads layer_norm_eps, StarCoder2 norm_epsilon: another spelling beside it leaves the package = HF."""
    checkpoint = stray_eps_checkpoints[model_type]
    build(BuildOptions(str(checkpoint), tmp_path / "pkg", smoke=False))
    assert parity_error(tmp_path / "pkg", checkpoint) < 1e-4


def test_mutant_reading_the_stray_eps_is_off_hf(stray_eps_checkpoints, tmp_path, monkeypatch):
    """The eps spellings read in config_keys' order again (rms_norm_eps first): StableLM's norms at eps 0.5."""
    keys = tuple(k for k in class_reads.CLASS_LOCAL_KEYS if "eps" not in k)
    monkeypatch.setattr(class_reads, "CLASS_LOCAL_KEYS", keys)
    class_reads._unread_in.cache_clear()
    try:
        build(BuildOptions(str(stray_eps_checkpoints["stablelm"]), tmp_path / "pkg", smoke=False))
    finally:
        class_reads._unread_in.cache_clear()
    assert parity_error(tmp_path / "pkg", stray_eps_checkpoints["stablelm"]) > 0.05
