"""Mutants of HunYuan-V4's mechanisms (gqa_export/arch/latent_families.HY_V4, docs/coverage.md): each planted into
the spec, the config reader or the graph builder the registry's package is built from (tests/families.py row
`hy_v4`), or into a copy of that package, must move the logits far past the registry's bound (1e-4; the
package: ~1.3e-5), and the refusals: the standard-Attention modes, a swiglu_limit <= 0.

The hyper-connection streams (graph/hyper_connections.py): collapsed to one plain residual stream, the pre and
post weights exchanged, hc_magnitude dropped (post weights at most 1), the head's weighted sum replaced by the
first copy. The sink logit per head zeroed. The value
gate (sigmoid(gate_proj(x)) per value channel) dropped. The routed experts' SwiGLU clip at swiglu_limit dropped."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest
from families import require_registered
from moe_models import save_moe
from mutants import build_planted, copy_package, edit_initializers, times
from reference import parity_error
from typer.testing import CliRunner

from gqa_export.arch import SPECS
from gqa_export.arch.spec import LatentAttentionNames
from gqa_export.cli import app
from gqa_export.graph import decoder, hyper_connections
from gqa_export.model import dims

ROW = "hy_v4"
BOUND = 1e-2  # every mutant must be off by more; measured in docs/coverage.md


@pytest.fixture(autouse=True)
def _registered() -> None:
    require_registered(ROW)


def _pre_post_swapped(monkeypatch: pytest.MonkeyPatch) -> None:
    split = hyper_connections.pre_post_split
    monkeypatch.setattr(hyper_connections, "pre_post_split", lambda b, w, k: split(b, w, k)[::-1])


def _magnitude_dropped(monkeypatch: pytest.MonkeyPatch) -> None:
    read = dims.hyper_dims

    def unscaled(opt: Any, spec: Any) -> Any:
        hyper = read(opt, spec)
        return None if hyper is None else replace(hyper, magnitude=1.0)

    monkeypatch.setattr(dims, "hyper_dims", unscaled)


def _head_dropped(monkeypatch: pytest.MonkeyPatch) -> None:
    """The copies collapsed as copy 0 alone, without the head's sigmoid weights."""

    def first_copy(b: Any, streams: Any, dims: Any, spec: Any, params: Any) -> Any:
        first = b.op("Gather", streams, b.const(0, "first_copy", "int64"), axis=2)
        return first if params.dtype == first.dtype else b.op("Cast", first, to=params.dtype)

    monkeypatch.setattr(decoder, "collapse_streams", first_copy)


def _moe_activation(activation: str) -> dict[str, Any]:
    moe = SPECS[ROW].moe
    assert moe is not None
    return dict(moe=replace(moe, activation=activation))


# mutant -> a spec change (fields of ArchSpec) or a graph-builder / config-reader patch
MUTANTS: dict[str, dict[str, Any] | Callable[[pytest.MonkeyPatch], None]] = {
    "streams-collapsed-to-one": dict(hyper_connections=None),
    "pre-post-swapped": _pre_post_swapped,
    "hc-magnitude-dropped": _magnitude_dropped,
    "hc-head-dropped": _head_dropped,
    "value-gate-dropped": dict(latent_attention=LatentAttentionNames()),
    "swiglu-clip-dropped": _moe_activation("swiglu"),
}


def test_the_correct_package_passes(builds):
    assert parity_error(builds.package(ROW), builds.checkpoint(ROW)) < 1e-4  # measured 1.3e-5


@pytest.mark.parametrize("mutant", MUTANTS)
def test_mutant_fails_hf_parity(builds, tmp_path, monkeypatch, mutant):
    checkpoint = builds.checkpoint(ROW)
    error = parity_error(build_planted(checkpoint, tmp_path / mutant, monkeypatch, MUTANTS[mutant], ROW), checkpoint)
    print(f"{mutant}: {error:.3g}")
    assert error > BOUND, (mutant, error)


def test_mutant_sink_zeroed_fails_hf_parity(builds, tmp_path):
    """Every head's sink logit at 0 (exp(0) = 1 in each softmax's denominator) instead of the stored one (the
    registry's checkpoint is in the hub's spelling, learnable_sink_param)."""
    broken = copy_package(builds.package(ROW), tmp_path / "pkg")
    assert edit_initializers(broken, "*.self_attn.learnable_sink_param", times(0.0))
    error = parity_error(broken, builds.checkpoint(ROW))
    print(f"sink-zeroed: {error:.3g}")
    assert error > BOUND, error


def test_standard_attention_modes_are_refused_in_one_line(builds, tmp_path):
    """The sinks need GroupQueryAttention's head_sink: --attention bias / split exit 2 with one line."""
    for mode in ("bias", "split"):
        out = tmp_path / mode
        args = ["build", str(builds.checkpoint(ROW)), "-o", str(out), "--no-smoke", "--attention", mode]
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 2, result.output
        lines = [line for line in result.output.splitlines() if "head_sink" in line]
        assert len(lines) == 1 and "Traceback" not in result.output, result.output


def test_non_positive_swiglu_limit_is_refused_in_one_line(tmp_path):
    """HF's experts clip at swiglu_limit whatever its sign while its config calls <= 0 "no clip": not guessed."""
    checkpoint = save_moe(tmp_path / "ckpt", ROW, hub_layout=False, swiglu_limit=0.0)
    result = CliRunner().invoke(app, ["build", str(checkpoint), "-o", str(tmp_path / "pkg"), "--no-smoke"])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if "swiglu_limit" in line]
    assert len(lines) == 1 and "Traceback" not in result.output, result.output
