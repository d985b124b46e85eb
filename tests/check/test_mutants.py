"""The mutant suite: a known-bad form of each package feature, planted into a copy of a correct
package, must be flagged by the project's own checks. This is the proof that the checks bite.

Here: weight layouts (nibble order, scales, zero points, a transposed weight) against the
independent dequantizer's bound, a dropped RoPE and a wrong window against HF parity and the
`inspect` lints, and a broken int4 package against `eval`'s perplexity gate. Elsewhere, named
`*mutant*` as well: KV-cache scales (tests/quant/test_kv_quant.py), int4 perplexity
(tests/runtime/test_evaluate.py), QMoE experts (tests/quant/), and pruned logits under the serving APIs
(tests/runtime/test_serving.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from mutants import copy_package, edit_initializers, swap_nibbles, times, transpose_blocks
from reference import hf_logits, hf_model, ort_prefill_and_decode
from typer.testing import CliRunner
from weight_layouts import INT4_MAX_ERROR, relative_errors

from gqa_export.cli import app
from gqa_export.pipeline import BuildOptions, build

TRAINED = Path(__file__).resolve().parents[1] / "data" / "tiny-trained"
EVAL_TEXT = Path(__file__).resolve().parents[1] / "data" / "tiny-text" / "eval.txt"
PROMPT = [0, 17, 45, 99, 200, 3, 7, 120, 64, 33, 250, 11, 12, 13]  # longer than the window (8)


@pytest.fixture(scope="module")
def packages(tmp_path_factory, checkpoints) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("mutants")
    made = {
        "int4": root / "int4",
        "fp32": root / "fp32",
        "window": root / "window",
    }
    build(BuildOptions(str(TRAINED), made["int4"], precision="int4", smoke=False))
    build(BuildOptions(str(TRAINED), made["fp32"], smoke=False))
    build(BuildOptions(str(checkpoints.get("mistral_window")), made["window"], smoke=False, attention="gqa"))
    return made


def test_the_correct_packages_pass_the_checks(packages, checkpoints):
    errors = relative_errors(packages["int4"], TRAINED)
    assert max(errors.values()) < INT4_MAX_ERROR
    tokens, got = ort_prefill_and_decode(packages["window"], PROMPT, steps=4)
    np.testing.assert_allclose(got, hf_logits(hf_model(checkpoints.get("mistral_window")), tokens, len(PROMPT)),
                               atol=1e-4, rtol=1e-4)  # fmt: skip
    inspected = CliRunner().invoke(app, ["inspect", str(packages["window"]), "--json"])
    assert inspected.exit_code == 0, inspected.output


@pytest.mark.parametrize(
    ("mutant", "pattern", "change"),
    [
        ("nibble-order", "model.layers.0.mlp.down_proj.qweight", swap_nibbles),
        ("scales-x1.5", "model.layers.1.self_attn.o_proj.scales", times(1.5)),
        ("zero-point-nibbles", "model.layers.0.self_attn.qkv_proj.zero_points", swap_nibbles),
        ("tied-table-nibbles", "model.embed_tokens.qweight", swap_nibbles),
    ],
)
def test_mutant_weight_layout_fails_the_dequantization_bound(packages, tmp_path, mutant, pattern, change):
    broken = copy_package(packages["int4"], tmp_path / mutant)
    assert edit_initializers(broken, pattern, change), pattern
    assert max(relative_errors(broken, TRAINED).values()) > INT4_MAX_ERROR


def test_mutant_transposed_weight_fails_hf_parity(packages, tmp_path):
    """A square weight read the wrong way round: quantized from W^T instead of W."""
    broken = copy_package(packages["fp32"], tmp_path / "transposed")
    assert edit_initializers(broken, "model.layers.0.self_attn.o_proj.weight*", transpose_blocks)
    tokens, got = ort_prefill_and_decode(broken, PROMPT, steps=2)
    want = hf_logits(hf_model(TRAINED), tokens, len(PROMPT))
    assert not np.allclose(got, want, atol=1e-4, rtol=1e-4)


def _set_gqa_attribute(package: Path, name: str, value: int, layer: int | None = None) -> None:
    path = package / "model.onnx"
    model = onnx.load(str(path), load_external_data=False)
    nodes = [n for n in model.graph.node if n.op_type == "GroupQueryAttention"]
    for i, node in enumerate(nodes):
        if layer is None or i == layer:
            for attr in node.attribute:
                if attr.name == name:
                    attr.i = value
    onnx.save(model, str(path))


def test_mutant_dropped_rope_fails_hf_parity(packages, tmp_path, checkpoints):
    broken = copy_package(packages["window"], tmp_path / "no-rope")
    _set_gqa_attribute(broken, "do_rotary", 0)
    tokens, got = ort_prefill_and_decode(broken, PROMPT, steps=2)
    want = hf_logits(hf_model(checkpoints.get("mistral_window")), tokens, len(PROMPT))
    assert not np.allclose(got, want, atol=1e-4, rtol=1e-4)


def test_mutant_wrong_window_fails_hf_parity_and_the_lint(packages, tmp_path, checkpoints):
    broken = copy_package(packages["window"], tmp_path / "window")
    _set_gqa_attribute(broken, "local_window_size", 4, layer=1)
    tokens, got = ort_prefill_and_decode(broken, PROMPT, steps=2)
    want = hf_logits(hf_model(checkpoints.get("mistral_window")), tokens, len(PROMPT))
    assert not np.allclose(got, want, atol=1e-4, rtol=1e-4)
    inspected = CliRunner().invoke(app, ["inspect", str(broken), "--json"])
    findings = {f["id"] for f in json.loads(inspected.stdout)["findings"]}
    assert inspected.exit_code == 1 and "missing-sliding-window" in findings


def test_mutant_int4_package_trips_the_eval_gate(packages, tmp_path):
    broken = copy_package(packages["int4"], tmp_path / "gate")
    assert edit_initializers(broken, "model.layers.*.scales", times(1.5))
    args = ["eval", str(broken), "--text", str(EVAL_TEXT), "--reference", str(packages["fp32"])]
    result = CliRunner().invoke(app, [*args, "--window", "256", "--max-tokens", "1024", "--max-ppl-increase", "3"])
    assert result.exit_code == 1, result.output
