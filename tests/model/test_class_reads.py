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

    assert read("llama") == read("mixtral") == set()
    assert read("gemma2") == {"attn_logit_softcapping", "final_logit_softcapping", "query_pre_attn_scalar"}
    assert read("granite") == {"attention_multiplier", "embedding_multiplier", "logits_scaling", "residual_multiplier"}
    assert read("olmo") == {"clip_qkv"} and read("cohere") == {"logit_scale"}
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
