"""Mutants of the mechanisms Beam-1.0 brought (gqa_export/arch/sigmoid_router_families.py BEAM): each
planted into a copy of the correct registry package (tests/mutants.py) must move the logits far past the
registry's 1e-4 bound against HF (tests/arch/test_families.py), so a graph that dropped or miswired the
mechanism fails it.

The NoPE layers' position query scale, (1 + (pos + 1) / 2048) ** 0.1, is within 0.4% of 1 over the
registry's 70-token prompt, so its mutants are measured there: the scale dropped (exponent 0) and its
exponent x10. The output gate's per-head bias: zeroed. The depth-scaled adds: block / sqrt(k) +
residual * sqrt((k - 1) / k) makes the stream after the k-th add the plain sum over sqrt(k), which every
following RMSNorm cancels up to its eps, so dropping both factors moves the logits by ~1e-6 only
(docs/coverage.md, Beam); a graph that gets the form wrong does not cancel: the residual kept whole,
the two factors exchanged, and each add's factors those of the add before (k - 1), all fail.
A spec mutant keeps RoPE on the full layers. The query factor itself is compared with HF's
compute_attention_scaling on a right-padded batch and on decode steps 3000 positions out.
"""

from __future__ import annotations

import numpy as np
import pytest
from families import LONG_PROMPT
from mutants import build_planted, copy_package, edit_initializers, times
from reference import parity_error

from gqa_export import arch

BOUND = 1e-4  # the registry's parity bound
FAR = 10 * BOUND  # a mutant must move the logits at least this far


def _previous_add(values: np.ndarray, kind: str, k: int) -> np.ndarray:
    """The factor of add k - 1 (k >= 3) in place of add k's: block 1/sqrt(k - 1), residual sqrt((k - 2)/(k - 1))."""
    k -= 1
    value = 1.0 / np.sqrt(k) if kind == "block" else np.sqrt((k - 1) / k)
    return np.full_like(values, value)


def _depth_off_by_one(package) -> None:
    """Every depth factor replaced by the previous add's (the constants are numbered in add order, k = 2 first)."""
    for kind in ("block", "residual"):
        for n in range(8):
            suffix = f"_{n}" if n else ""
            name = f"const.{kind}_depth_scale{suffix}"
            assert edit_initializers(package, name, lambda v, kind=kind, k=n + 2: _previous_add(v, kind, k)), name


def _swap_depth_factors(package) -> None:
    """block x sqrt((k - 1) / k) + residual / sqrt(k): the two factors exchanged on every add."""
    assert edit_initializers(package, "const.block_depth_scale*", lambda v: np.sqrt(1.0 - v * v))
    assert edit_initializers(package, "const.residual_depth_scale*", lambda v: np.sqrt(1.0 - v * v))


# mutant -> (prompt, edit of the package)
MUTANTS = {
    "query-power-dropped": (LONG_PROMPT, lambda p: edit_initializers(p, "const.exponent*", times(0.0))),
    "query-power-exponent-x10": (LONG_PROMPT, lambda p: edit_initializers(p, "const.exponent*", times(10.0))),
    "gate-bias-zeroed": (None, lambda p: edit_initializers(p, "*.self_attn.gate_bias", times(0.0))),
    "residual-kept-whole": (
        None,
        lambda p: edit_initializers(p, "const.residual_depth_scale*", lambda v: np.ones_like(v)),
    ),
    "depth-factors-swapped": (None, lambda p: _swap_depth_factors(p) or True),
    "depth-index-off-by-one": (None, lambda p: _depth_off_by_one(p) or True),
}


@pytest.mark.parametrize("prompt", [None, LONG_PROMPT], ids=["prompt", "long"])
def test_the_correct_package_passes(builds, prompt):
    assert parity_error(builds.package("beam"), builds.checkpoint("beam"), prompt) < BOUND


@pytest.mark.parametrize("mutant", MUTANTS)
def test_mutant_fails_hf_parity(builds, tmp_path, mutant):
    prompt, plant = MUTANTS[mutant]
    broken = copy_package(builds.package("beam"), tmp_path / mutant)
    assert plant(broken)
    assert parity_error(broken, builds.checkpoint("beam"), prompt) > FAR


def test_depth_scales_dropped_cancel_in_the_norms(builds, tmp_path):
    """Both factors at 1 (the plain residual sum): the RMSNorms after each add cancel the 1/sqrt(k) the
    correct form applies, so the logits stay within the bound; the mutants above are the forms that do not."""
    broken = copy_package(builds.package("beam"), tmp_path / "dropped")
    assert edit_initializers(broken, "const.*_depth_scale*", lambda v: np.ones_like(v))
    assert parity_error(broken, builds.checkpoint("beam")) < BOUND


def test_full_layer_rope_kept_fails_hf_parity(builds, tmp_path, monkeypatch):
    checkpoint = builds.checkpoint("beam")
    out = build_planted(checkpoint, tmp_path / "rope-kept", monkeypatch, {"rope_layers": "all"}, "beam")
    assert parity_error(out, checkpoint) > FAR


def _graph_factors(input_ids: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
    """The [B,S] query factors graph/positions.power_query_scale computes (in an fp32 graph of its own)."""
    import onnx_ir as ir
    import onnxruntime as ort

    from gqa_export.graph.builder import GraphBuilder
    from gqa_export.graph.positions import power_query_scale

    b = GraphBuilder("power_query_scale", {"": 21})
    ids = b.input("input_ids", ir.DataType.INT64, ["B", "S"])
    mask = b.input("attention_mask", ir.DataType.INT64, ["B", "T"])
    factor = power_query_scale(b, arch.SPECS["beam"].nope_query_power, ids, mask, ir.DataType.FLOAT)
    assert factor is not None
    b.output(factor, "factor", ir.DataType.FLOAT, ["B", "S", 1])
    session = ort.InferenceSession(ir.to_proto(ir.Model(b.graph, ir_version=10)).SerializeToString())
    return session.run(None, {"input_ids": input_ids, "attention_mask": attention_mask})[0][..., 0]


def test_query_power_reads_each_rows_positions():
    """The factor at each real token equals HF's compute_attention_scaling at the position HF gives it on the
    row alone: a right-padded prompt (5 and 13 tokens), then decode steps far out (the masks grown to 3000
    columns), where a factor from the buffer's column instead of the row's position is off by 2e-5 to 5e-5
    per padded slot; the graph agrees to float32 rounding."""
    import torch
    from transformers.models.beam.modeling_beam import compute_attention_scaling

    def hf(positions: list[int]) -> np.ndarray:
        return compute_attention_scaling(torch.tensor([positions]))[0, 0, :, 0].numpy()

    lengths, width = (5, 13), 13
    mask = np.array([[1] * n + [0] * (width - n) for n in lengths], np.int64)
    got = _graph_factors(np.zeros((2, width), np.int64), mask)
    for row, n in enumerate(lengths):
        np.testing.assert_allclose(got[row, :n], hf(list(range(n))), rtol=3e-7, atol=0)
    steps = 3000 - width
    grown = np.concatenate([mask, np.ones((2, steps), np.int64)], axis=1)
    got = _graph_factors(np.zeros((2, 1), np.int64), grown)[:, 0]
    want = np.array([hf([n + steps - 1])[0] for n in lengths])
    np.testing.assert_allclose(got, want, rtol=3e-7, atol=0)
    assert abs(float(want[0]) - float(hf([width + steps - 1])[0])) > 1e-4  # the column's factor would differ
