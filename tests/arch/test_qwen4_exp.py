"""Qwen4-Exp's text decoder (gqa_export/arch/hybrid_families.QWEN4_EXP, docs/coverage.md), what only it has (the
checks every family gets are its row `qwen4_exp_text` in tests/families.py): mutants of its hyper-connection copies
in the gated form (graph/hyper_connections.py), each planted into the spec or the graph builder the registry's
package is built from, or into a copy of that package, must move the logits far past the registry's bound (1e-4;
the package: ~7e-6 on the 70-token prompt); the QSA cap (every key kept within indexer_budget +
indexer_compress_ratio - 1, a longer --max-length refused); the DeltaNet's sigmoid output gate; the hub's
"full_attention" spelling; and the refusals (PLE layers, an indexer without its budget) in one line."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from families import LONG_PROMPT, require_registered
from mutants import build_planted, copy_package, edit_initializers
from reference import parity_error

from gqa_export.arch import SPECS
from gqa_export.arch.mixer_spec import GatedDeltaNetNames
from gqa_export.graph import hyper_connections
from gqa_export.pipeline import BuildOptions, build

ROW = "qwen4_exp_text"
SPEC = "qwen4_exp"
BOUND = 1e-2  # every mutant must be off by more; measured in docs/coverage.md


@pytest.fixture(autouse=True)
def _registered() -> None:
    require_registered(ROW)


def _norm_over_all_copies(monkeypatch: pytest.MonkeyPatch) -> None:
    """One RMS over the K*H channels of all copies (HunYuan-V4's) instead of one per copy."""

    def joint(b: Any, streams: Any, eps: float) -> Any:
        axes = b.const([-2, -1], "copies_axes", "int64")
        mean = b.op("ReduceMean", b.op("Mul", streams, streams), axes, keepdims=1)
        eps_value = b.const(np.float32(eps), "eps")
        return b.op("Mul", streams, b.op("Reciprocal", b.op("Sqrt", b.op("Add", mean, eps_value))))

    monkeypatch.setattr(hyper_connections, "copy_rms", joint)


def _mixer_dropped(monkeypatch: pytest.MonkeyPatch) -> None:
    """The low-rank mixer's weights all 1: every block input (and the final mixer) the plain mean of the normed
    copies."""
    monkeypatch.setattr(
        hyper_connections, "mix_weights", lambda b, flat, down, up, k, width: b.const(np.float32(1.0), "one")
    )


def _gate(gate: str) -> dict[str, Any]:
    mixers = SPECS[SPEC].mixers
    assert mixers is not None
    return dict(mixers=replace(mixers, gated_deltanet=GatedDeltaNetNames(gate=gate)))


# mutant -> a spec change (fields of ArchSpec) or a graph-builder patch
MUTANTS: dict[str, dict[str, Any] | Callable[[pytest.MonkeyPatch], None]] = {
    "streams-collapsed-to-one": dict(hyper_connections=None),
    "copy-norm-over-all-copies": _norm_over_all_copies,
    "mixer-weights-dropped": _mixer_dropped,
    "inject-scale-1": lambda monkeypatch: monkeypatch.setattr(hyper_connections, "INJECT_SCALE", 1.0),
    "deltanet-gate-sigmoid": _gate("sigmoid"),  # the row's config says silu (hidden_act)
}


def _build(checkpoint: Path, out: Path, **options: Any) -> Path:
    build(BuildOptions(str(checkpoint), out, smoke=False, **options))
    return out


def test_the_correct_package_passes(builds):
    error = parity_error(builds.package(ROW), builds.checkpoint(ROW), LONG_PROMPT)
    print(f"qwen4_exp_text: {error:.3g}")
    assert error < 1e-4  # measured 6.8e-6


@pytest.mark.parametrize("mutant", MUTANTS)
def test_mutant_fails_hf_parity(builds, tmp_path, monkeypatch, mutant):
    checkpoint = builds.checkpoint(ROW)
    package = build_planted(checkpoint, tmp_path / mutant, monkeypatch, MUTANTS[mutant], SPEC)
    error = parity_error(package, checkpoint, LONG_PROMPT)
    print(f"{mutant}: {error:.3g}")
    assert error > BOUND, (mutant, error)


def test_mutant_copy_norm_offset_dropped_fails_hf_parity(builds, tmp_path):
    """The copies' RMSNorm times w instead of (1 + w) (the stored weights are drawn around 0)."""
    broken = copy_package(builds.package(ROW), tmp_path / "pkg")
    assert edit_initializers(broken, "*hyper_connection*.hc_norm.weight", lambda w: w - 1.0)
    error = parity_error(broken, builds.checkpoint(ROW), LONG_PROMPT)
    print(f"copy-norm-offset-dropped: {error:.3g}")
    assert error > BOUND, error


def _tiny(folder: Path, **overrides: Any) -> Path:
    from dense_models import save_dense

    return save_dense(folder, ROW, **overrides)


def test_top_k_weights_as_the_softmax_gave_them_match_hf(tmp_path, monkeypatch):
    """norm_topk_prob false: the top-k weights not renormalized (Qwen3-Next's router reads it; Qwen3.5-MoE's spec
    always renormalizes); renormalized anyway, far off."""
    checkpoint = _tiny(tmp_path / "ckpt", norm_topk_prob=False)
    error = parity_error(_build(checkpoint, tmp_path / "pkg"), checkpoint, LONG_PROMPT)
    print(f"norm_topk_prob false: {error:.3g}")
    assert error < 1e-4
    moe = SPECS[SPEC].moe
    assert moe is not None
    monkeypatch.setitem(SPECS, SPEC, replace(SPECS[SPEC], moe=replace(moe, normalize=True)))
    wrong = parity_error(_build(checkpoint, tmp_path / "normalized"), checkpoint, LONG_PROMPT)
    print(f"norm_topk_prob false exported renormalized: {wrong:.3g}")
    assert wrong > BOUND


def test_sigmoid_output_gate_matches_hf_and_silu_does_not(tmp_path, monkeypatch):
    """output_gate_type "sigmoid": the DeltaNet's gated norm times sigmoid(z) (GatedDeltaNetNames.gate "config");
    the same package built with silu is far off."""
    checkpoint = _tiny(tmp_path / "ckpt", output_gate_type="sigmoid")
    error = parity_error(_build(checkpoint, tmp_path / "pkg"), checkpoint, LONG_PROMPT)
    print(f"sigmoid gate: {error:.3g}")
    assert error < 1e-4
    monkeypatch.setitem(SPECS, SPEC, replace(SPECS[SPEC], **_gate("silu")))
    wrong = parity_error(_build(checkpoint, tmp_path / "silu"), checkpoint, LONG_PROMPT)
    print(f"sigmoid gate exported as silu: {wrong:.3g}")
    assert wrong > BOUND


def test_qsa_cap_is_where_the_indexer_starts_dropping_keys(tmp_path):
    """Budget 8 in blocks of 4: the package's context is 11 (genai_config), exact there against HF (5 prompt tokens
    + 6 steps); HF's own logits with that budget equal those with a budget past the sequence up to position 11
    and move at 12 (three complete blocks, two kept), so a longer context would not be the model's."""
    from reference import hf_model

    checkpoint = _tiny(tmp_path / "ckpt", indexer_budget=8, indexer_compress_ratio=4)
    package = _build(checkpoint, tmp_path / "pkg")
    assert json.loads((package / "genai_config.json").read_text())["search"]["max_length"] == 11
    error = parity_error(package, checkpoint, LONG_PROMPT[:5])
    print(f"cap 11: {error:.3g}")
    assert error < 1e-4
    from transformers import AutoModelForCausalLM

    tokens = torch.tensor([LONG_PROMPT[:20]])
    with torch.no_grad():
        capped = hf_model(checkpoint)(tokens).logits[0]
        wide = AutoModelForCausalLM.from_pretrained(checkpoint, indexer_budget=40).eval()(tokens).logits[0]
    moved = (capped - wide).abs().amax(dim=-1)
    print(f"HF budget 8 vs 40 by position: {[f'{v:.2g}' for v in moved.tolist()]}")
    assert float(moved[:11].max()) < 1e-5 and float(moved[11:].max()) > BOUND


def _cli(args: list[str]) -> Any:
    from typer.testing import CliRunner

    from gqa_export.cli import app

    return CliRunner().invoke(app, args)


def _one_line_refusal(result: Any, word: str) -> None:
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if word in line]
    assert len(lines) == 1 and "Traceback" not in result.output, result.output


def test_max_length_past_the_qsa_cap_is_refused_in_one_line(builds, tmp_path):
    out = str(tmp_path / "pkg")
    result = _cli(["build", str(builds.checkpoint(ROW)), "-o", out, "--no-smoke", "--max-length", "125"])
    _one_line_refusal(result, "indexer_budget")


def _edited(builds: Any, tmp_path: Path, edit: Callable[[dict[str, Any]], None]) -> Path:
    folder = tmp_path / "ckpt"
    shutil.copytree(builds.checkpoint(ROW), folder)
    config = json.loads((folder / "config.json").read_text())
    edit(config)
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def test_ple_layers_are_refused_in_one_line(builds, tmp_path):
    """ple_layer_ids set (a DeltaNet layer, valid for the config class): exit 2, one line naming the key."""
    folder = _edited(builds, tmp_path, lambda c: c.update(ple_layer_ids=[1]))
    result = _cli(["build", str(folder), "-o", str(tmp_path / "pkg"), "--no-smoke"])
    _one_line_refusal(result, "ple_layer_ids")


def test_indexed_layers_without_a_budget_are_refused_in_one_line(builds, tmp_path):
    """No indexer_* keys at all (valid for the config class; its model cannot be built): exit 2, one line."""

    def drop(config: dict[str, Any]) -> None:
        for key in [k for k in config if k.startswith("indexer_")]:
            del config[key]

    result = _cli(["build", str(_edited(builds, tmp_path, drop)), "-o", str(tmp_path / "pkg"), "--no-smoke"])
    _one_line_refusal(result, "indexer_budget")


def test_hub_spelling_full_attention_gives_the_same_package(builds, tmp_path):
    """The published configs spell the indexed layers "full_attention" (the config class renames them)."""

    def respell(config: dict[str, Any]) -> None:
        config["layer_types"] = [t.replace("indexed_attention", "full_attention") for t in config["layer_types"]]

    package = _build(_edited(builds, tmp_path, respell), tmp_path / "pkg")
    reference = builds.package(ROW)
    for name in ("model.onnx", "model.onnx.data"):
        assert (package / name).read_bytes() == (reference / name).read_bytes(), name


def test_transformers_own_layout_gives_the_same_package(builds, tmp_path):
    """save_pretrained(save_original_format=False): the experts fused (gate_up_proj [E, 2I, H], down_proj) where
    the hub's files hold them one by one; the package is the same byte for byte."""
    from dense_models import build_model
    from tiny_models import save_tokenizer

    checkpoint = tmp_path / "ckpt"
    build_model(ROW).save_pretrained(checkpoint, save_original_format=False)
    save_tokenizer(checkpoint, vocab_size=384)
    package = _build(checkpoint, tmp_path / "pkg")
    reference = builds.package(ROW)
    for name in ("model.onnx", "model.onnx.data"):
        assert (package / name).read_bytes() == (reference / name).read_bytes(), name
