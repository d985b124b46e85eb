"""Mutants of DeepSeek-V4's mechanisms (gqa_export/arch/shared_kv_families.DEEPSEEK_V4, docs/coverage.md section
"deepseek_v4"): each planted into the spec, the config reader or the graph builder the registry's package is built
from (tests/families.py row `deepseek_v4`), or into a copy of that package, must move the logits far past the
registry's bound (1e-4; the package: ~8.5e-6); and the refusals in one line (exit 2): compressed-KV layer types,
--inputs-embeds (the hash layers read the ids), the standard-Attention modes (the sinks).

Sinkhorn hyper-connections (graph/hyper_connections.py): comb dropped (the copies unmixed), comb read untransposed,
the Sinkhorn iterations cut to the first column normalization. Attention (graph/shared_kv_attention.py): the
output's rotation back dropped, rotated forward instead, the per-head query norm dropped, the sinks zeroed, the
output groups' o_a blocks exchanged. Experts: hash routing dropped (top k instead), sqrt(softplus) scores replaced
by sigmoid, the routed clip dropped, the shared expert's clip dropped."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from families import BY_NAME, REGISTERED
from moe_models import save_moe
from mutants import copy_package, edit_initializers, times
from reference import parity_error
from typer.testing import CliRunner

from gqa_export.arch import SPECS
from gqa_export.cli import app
from gqa_export.graph import decoder, hyper_connections, shared_kv_attention
from gqa_export.graph.builder import GraphBuilder
from gqa_export.model import dims, moe
from gqa_export.pipeline import BuildOptions, build

ROW = "deepseek_v4"
BOUND = 1e-2  # every mutant must be off by more; measured in docs/coverage.md


@pytest.fixture(autouse=True)
def _registered() -> None:
    if BY_NAME[ROW] not in REGISTERED:
        pytest.skip(f"{ROW} needs a newer transformers")


def _comb_dropped(monkeypatch: pytest.MonkeyPatch) -> None:
    """The copies added to post * y unmixed (HunYuan-V4's form), comb computed but unread."""
    spread = hyper_connections._spread
    monkeypatch.setattr(hyper_connections, "_spread", lambda lc, s, p, comb, y, n: spread(lc, s, p, None, y, n))


def _comb_untransposed(monkeypatch: pytest.MonkeyPatch) -> None:
    sinkhorn = hyper_connections._sinkhorn

    def transposed(b: Any, logits: Any, k: int, eps: float, iters: int) -> Any:
        return b.op("Transpose", sinkhorn(b, logits, k, eps, iters), perm=[0, 1, 3, 2])

    monkeypatch.setattr(hyper_connections, "_sinkhorn", transposed)


def _sinkhorn_cut(monkeypatch: pytest.MonkeyPatch) -> None:
    read = dims.hyper_dims
    monkeypatch.setattr(dims, "hyper_dims", lambda opt, spec: replace(read(opt, spec), sinkhorn_iters=1))


def _rotation_back_dropped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(decoder, "rotated_back", lambda lc, y, table: y)


def _rotated_forward(monkeypatch: pytest.MonkeyPatch) -> None:
    """The output's trailing channels rotated by the query's angle again instead of back."""
    rotate = shared_kv_attention._rotate_trailing

    def forward(lc: Any, x: Any, table: Any, name: str, inverse: bool = False) -> Any:
        return rotate(lc, x, table, name, inverse=False)

    monkeypatch.setattr(shared_kv_attention, "_rotate_trailing", forward)


def _query_norm_dropped(monkeypatch: pytest.MonkeyPatch) -> None:
    op = GraphBuilder.op

    def skipping(self: Any, kind: str, *inputs: Any, **attrs: Any) -> Any:
        if attrs.get("name") == "q_b_norm":
            return inputs[0]
        return op(self, kind, *inputs, **attrs)

    monkeypatch.setattr(GraphBuilder, "op", skipping)


def _hash_dropped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(moe, "_hashed_layers", lambda opt, spec: ())


def _moe(**changes: Any) -> dict[str, Any]:
    spec = SPECS[ROW].moe
    assert spec is not None
    return dict(moe=replace(spec, **changes))


# mutant -> a spec change (fields of ArchSpec) or a graph-builder / config-reader patch
MUTANTS: dict[str, dict[str, Any] | Callable[[pytest.MonkeyPatch], None]] = {
    "comb-dropped": _comb_dropped,
    "comb-untransposed": _comb_untransposed,
    "sinkhorn-iterations-cut": _sinkhorn_cut,
    "output-rotation-back-dropped": _rotation_back_dropped,
    "output-rotated-forward": _rotated_forward,
    "query-head-norm-dropped": _query_norm_dropped,
    "hash-routing-dropped": _hash_dropped,
    "sqrtsoftplus-as-sigmoid": _moe(routing="sigmoid_biased"),
    "routed-clip-dropped": _moe(activation="swiglu"),
    "shared-clip-dropped": _moe(shared_clipped=False),
}


def test_the_correct_package_passes(builds):
    assert parity_error(builds.package(ROW), builds.checkpoint(ROW)) < 1e-4  # measured 8.5e-6


@pytest.mark.parametrize("mutant", MUTANTS)
def test_mutant_fails_hf_parity(builds, tmp_path, monkeypatch, mutant):
    checkpoint = builds.checkpoint(ROW)
    plant = MUTANTS[mutant]
    if callable(plant):
        plant(monkeypatch)
    else:
        monkeypatch.setitem(SPECS, ROW, replace(SPECS[ROW], **plant))
    out = tmp_path / mutant
    build(BuildOptions(str(checkpoint), out, smoke=False))
    error = parity_error(out, Path(checkpoint))
    print(f"{mutant}: {error:.3g}")
    assert error > BOUND, (mutant, error)


def _reversed_groups(values: np.ndarray) -> np.ndarray:
    return values[::-1].copy()


@pytest.mark.parametrize(
    ("mutant", "pattern", "change"),
    [
        ("sinks-zeroed", "*.self_attn.sinks", times(0.0)),
        ("output-groups-exchanged", "*.o_a_proj.weight", _reversed_groups),
    ],
)
def test_package_mutant_fails_hf_parity(builds, tmp_path, mutant, pattern, change):
    """Every head's sink logit at 0 instead of the stored one; o_a's per-group blocks [G, in, rank] in reverse order."""
    broken = copy_package(builds.package(ROW), tmp_path / "pkg")
    assert edit_initializers(broken, pattern, change)
    error = parity_error(broken, builds.checkpoint(ROW))
    print(f"{mutant}: {error:.3g}")
    assert error > BOUND, error


def _one_line_exit_2(args: list[str], needle: str) -> None:
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if needle in line]
    assert len(lines) == 1 and "Traceback" not in result.output, result.output


@pytest.mark.parametrize("layer_type", ["compressed_sparse_attention", "heavily_compressed_attention"])
def test_compressed_kv_layers_are_refused_in_one_line(tmp_path, layer_type):
    """A checkpoint with CSA / HCA layers (every published one): refused before any weight is read."""
    types = ["sliding_attention", layer_type, "sliding_attention"]
    checkpoint = save_moe(tmp_path / "ckpt", ROW, hub_layout=False, layer_types=types, compress_rates={
        "compressed_sparse_attention": 4, "heavily_compressed_attention": 8})  # fmt: skip
    _one_line_exit_2(["build", str(checkpoint), "-o", str(tmp_path / "pkg"), "--no-smoke"], "compressed-KV layers")


@pytest.mark.parametrize("form", ["legacy_compress_ratios", "no_layer_types"])
def test_compressed_kv_layers_of_other_config_forms_are_refused(builds, tmp_path, form):
    """The config class folds the reference's compress_ratios into layer_types, and without either defaults to
    HCA / CSA layers: both refused (a package of sliding layers would not be the model)."""
    checkpoint = shutil.copytree(builds.checkpoint(ROW), tmp_path / "ckpt")
    config = json.loads((checkpoint / "config.json").read_text())
    del config["layer_types"]
    if form == "legacy_compress_ratios":
        config["compress_ratios"] = [0, 4, 0]
    (checkpoint / "config.json").write_text(json.dumps(config))
    _one_line_exit_2(["build", str(checkpoint), "-o", str(tmp_path / "pkg"), "--no-smoke"], "compressed-KV layers")


def test_inputs_embeds_and_standard_attention_are_refused_in_one_line(builds, tmp_path):
    """The hash layers read the input ids; the sinks need GroupQueryAttention's head_sink."""
    checkpoint = str(builds.checkpoint(ROW))
    _one_line_exit_2(["build", checkpoint, "-o", str(tmp_path / "e"), "--no-smoke", "--inputs-embeds"], "input ids")
    for mode in ("bias", "split"):
        args = ["build", checkpoint, "-o", str(tmp_path / mode), "--no-smoke", "--attention", mode]
        _one_line_exit_2(args, "head_sink")
