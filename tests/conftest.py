"""Shared fixtures: tiny random Llama checkpoints (made once per session) and their exports."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from tiny_models import save_llama

LLAMA3_ROPE = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 64,
    "rope_theta": 500000.0,
}
# name -> save_llama keyword arguments. Each exercises one feature of the Llama spec.
LLAMA_VARIANTS: dict[str, dict[str, Any]] = {
    "gqa": {},
    "mha": {"num_key_value_heads": 4},
    "mqa_tied": {"num_key_value_heads": 1, "tie_word_embeddings": True},
    "llama3_rope": {"rope_parameters": LLAMA3_ROPE},
    "linear_rope_bias": {
        "rope_parameters": {"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0},
        "attention_bias": True,
        "mlp_bias": True,
    },
    "head_dim_32": {"head_dim": 32, "num_hidden_layers": 3},
    "bf16_sharded": {"dtype": "bfloat16", "max_shard_size": "60KB"},
}


class Checkpoints:
    """Builds each named checkpoint once per test session."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._made: dict[str, Path] = {}

    def get(self, name: str, **kwargs: Any) -> Path:
        if name not in self._made:
            params = {**LLAMA_VARIANTS.get(name, {}), **kwargs}
            self._made[name] = save_llama(self.root / name, **params)
        return self._made[name]


@pytest.fixture(scope="session")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> Checkpoints:
    return Checkpoints(tmp_path_factory.mktemp("checkpoints"))


class Exports:
    """Exports each (checkpoint, ep, precision) once per session, without the smoke run."""

    def __init__(self, root: Path, checkpoints: Checkpoints) -> None:
        self.root = root
        self.checkpoints = checkpoints
        self._made: dict[tuple[str, str, str], Path] = {}

    def get(self, name: str, ep: str = "cpu", precision: str = "fp32") -> Path:
        key = (name, ep, precision)
        if key not in self._made:
            from gqa_export.pipeline import BuildOptions, build

            out = self.root / f"{name}-{ep}-{precision}"
            build(BuildOptions(str(self.checkpoints.get(name)), out, ep=ep, precision=precision, smoke=False))
            self._made[key] = out
        return self._made[key]


@pytest.fixture(scope="session")
def exports(tmp_path_factory: pytest.TempPathFactory, checkpoints: Checkpoints) -> Exports:
    return Exports(tmp_path_factory.mktemp("exports"), checkpoints)
