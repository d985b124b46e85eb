"""`gqa-export inspect` on our packages (every mode), the official builder's, and broken copies."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import onnx
import pytest
from typer.testing import CliRunner

from gqa_export.cli import app
from gqa_export.pipeline import BuildOptions, build

runner = CliRunner()


def inspect(*args: object):
    result = runner.invoke(app, ["inspect", *[str(a) for a in args], "--json"])
    return result.exit_code, json.loads(result.stdout)


@pytest.fixture(scope="module")
def mode_packages(checkpoints, tmp_path_factory):
    root = tmp_path_factory.mktemp("inspect")
    out = {}
    for mode in ("gqa", "bias", "split"):
        build(BuildOptions(str(checkpoints.get("mistral_window")), root / mode, smoke=False, attention=mode))
        out[mode] = root / mode
    variants = (("bias_growing", "bias", "bias_cache=growing"), ("gqa_window", "gqa", "sliding_window_cache=true"))
    for name, mode, setting in variants:
        options = BuildOptions(str(checkpoints.get("mistral_window")), root / name, smoke=False, attention=mode)
        build(BuildOptions(**{**vars(options), "settings": (f"attention.{setting}",)}))
        out[name] = root / name
    return out


@pytest.mark.parametrize("mode", ["gqa", "bias", "split"])
def test_our_packages_are_clean(mode_packages, mode):
    code, report = inspect(mode_packages[mode])
    assert code == 0 and report["findings"] == []
    summary = report["summary"]
    assert set(report) == {"summary", "layers", "experts", "findings"} and report["experts"] == []
    assert summary["past_present_share_buffer"] is True
    ops = {a["op"] for a in report["layers"]}
    assert (
        ops
        == {"gqa": {"GroupQueryAttention"}, "bias": {"Attention"}, "split": {"GroupQueryAttention", "Attention"}}[mode]
    )
    gqa = [a for a in report["layers"] if a["op"] == "GroupQueryAttention"]
    assert all(a["local_window_size"] == 8 and a["fused_rope"] and a["packed_qkv"] for a in gqa)
    # layers x K/V x kv heads x slots x head_dim x fp32 (window-sized buffers are opt-in)
    slots = 256
    assert summary["kv_cache_bytes_per_row"] == 2 * 2 * 2 * slots * 16 * 4
    if mode == "split":
        stages = {g["stage"]: g for g in summary["graphs"]}
        assert stages["prefill"]["run_on_prompt"] and not stages["prefill"]["run_on_token_gen"]


def test_bare_onnx_and_genai_config_paths(mode_packages):
    code, report = inspect(mode_packages["gqa"] / "model.onnx")
    assert code == 0 and len(report["layers"]) == 2 and report["summary"]["model_type"] is None
    code, report = inspect(mode_packages["gqa"] / "genai_config.json")
    assert code == 0 and report["summary"]["model_type"] == "mistral"


def test_official_builder_package(checkpoints, tmp_path):
    out = tmp_path / "builder"
    subprocess.run(
        [sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", str(checkpoints.get("gqa")), "-o", str(out),
         "-p", "fp32", "-e", "cpu", "-c", str(tmp_path / "cache")],
        check=True, capture_output=True,
    )  # fmt: skip
    code, report = inspect(out)
    assert code == 0, report["findings"]
    assert [a["op"] for a in report["layers"]] == ["GroupQueryAttention"] * 2
    assert report["summary"]["graphs"][0]["weights"]["linear"] == "float"


def _copy(src: Path, dst: Path) -> Path:
    return Path(shutil.copytree(src, dst))


def _edit_config(folder: Path, edit) -> None:
    path = folder / "genai_config.json"
    config = json.loads(path.read_text())
    edit(config)
    path.write_text(json.dumps(config))


def _set(path: list[str], value):
    def edit(config):
        target = config
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value

    return edit


@pytest.mark.parametrize(
    ("mode", "edit", "finding", "severity"),
    [
        ("gqa", _set(["search", "past_present_share_buffer"], False), "gqa-share-buffer-off", "error"),
        ("bias_growing", _set(["search", "past_present_share_buffer"], True), "share-buffer-unsupported-op", "error"),
        ("bias", _set(["search", "past_present_share_buffer"], False), "scatter-share-buffer-off", "error"),
        ("gqa", _set(["model", "decoder", "num_kv_heads"], 2), "unknown-config-key", "error"),
        ("gqa", _set(["search", "max_length"], 100000), "rope-cache-short", "error"),
        ("gqa", _set(["model", "decoder", "filename"], "gone.onnx"), "missing-file", "error"),
        ("gqa", _set(["model", "decoder", "num_key_value_heads"], 4), "kv-shape-mismatch", "error"),
        ("gqa", _set(["model", "eos_token_id"], 1), None, None),  # matches generation_config: clean
        ("gqa_window", None, None, None),  # window-sized buffers as exported: clean
        (
            "gqa_window",
            _set(["model", "decoder", "sliding_window", "window_size"], 6),
            "sliding-window-size-mismatch",
            "error",
        ),
        (
            "gqa_window",
            _set(["model", "decoder", "sliding_window", "layers"], [0, 1, 7]),
            "sliding-window-size-mismatch",
            "error",
        ),
    ],
)
def test_broken_configs(mode_packages, tmp_path, mode, edit, finding, severity):
    folder = _copy(mode_packages[mode], tmp_path / "pkg")
    if edit is not None:
        _edit_config(folder, edit)
    code, report = inspect(folder)
    ids = {(f["id"], f["severity"]) for f in report["findings"]}
    if finding is None:
        assert code == 0 and not ids
    else:
        assert (finding, severity) in ids and code == 1
        assert all(f["fix"] for f in report["findings"])


def test_sliding_window_missing_against_hf_config(checkpoints, tmp_path):
    """A package without windows checked against a source whose config has sliding_window."""
    package = tmp_path / "pkg"
    build(BuildOptions(str(checkpoints.get("gqa")), package, smoke=False))
    code, report = inspect(package, "--source", checkpoints.get("mistral_window"))
    assert code == 1 and "missing-sliding-window" in {f["id"] for f in report["findings"]}


def test_sliding_window_lost_in_the_graph_is_caught_from_the_manifest(mode_packages, tmp_path):
    """Mutant: a windowed layer's GroupQueryAttention loses its window; the lint reads the windows the
    export resolved (manifest `model.attention_windows`), with no source config at hand."""
    folder = _copy(mode_packages["gqa"], tmp_path / "pkg")
    assert inspect(folder)[0] == 0
    model = onnx.load(str(folder / "model.onnx"), load_external_data=False)
    gqa = [n for n in model.graph.node if n.op_type == "GroupQueryAttention"]
    for attr in gqa[1].attribute:
        if attr.name == "local_window_size":
            attr.i = -1
    onnx.save(model, str(folder / "model.onnx"))
    code, report = inspect(folder)
    found = [f for f in report["findings"] if f["id"] == "missing-sliding-window"]
    assert code == 1 and len(found) == 1 and "layers 1 " in found[0]["message"], report["findings"]


def test_eos_and_kv_warnings_and_strict(mode_packages, tmp_path):
    folder = _copy(mode_packages["gqa"], tmp_path / "pkg")
    (folder / "generation_config.json").write_text(json.dumps({"eos_token_id": [1, 7]}))
    _edit_config(folder, _set(["model", "context_length"], 10**6))
    code, report = inspect(folder)
    assert code == 0 and {f["id"] for f in report["findings"]} == {"eos-incomplete"}
    assert runner.invoke(app, ["inspect", str(folder), "--strict"]).exit_code == 1


def test_unused_position_ids_is_info(mode_packages, tmp_path):
    folder = _copy(mode_packages["gqa"], tmp_path / "pkg")
    model = onnx.load(str(folder / "model.onnx"), load_external_data=False)
    model.graph.input.append(onnx.helper.make_tensor_value_info("position_ids", onnx.TensorProto.INT64, ["b", "s"]))
    onnx.save(model, str(folder / "model.onnx"))
    code, report = inspect(folder)
    assert code == 0 and [(f["id"], f["severity"]) for f in report["findings"]] == [("position-ids-unused", "info")]


def test_pipeline_kv_dtype_mismatch(mode_packages, tmp_path):
    folder = _copy(mode_packages["split"], tmp_path / "pkg")
    model = onnx.load(str(folder / "prefill.onnx"), load_external_data=False)
    model.graph.input[2].type.tensor_type.elem_type = onnx.TensorProto.FLOAT16
    onnx.save(model, str(folder / "prefill.onnx"))
    code, report = inspect(folder)
    assert code == 1 and "pipeline-kv-mismatch" in {f["id"] for f in report["findings"]}


def test_readable_in_80_columns(mode_packages):
    """On an 80-column terminal the report fits; piped, nothing is wrapped or cut."""
    import re

    terminal = {"TTY_COMPATIBLE": "1", "COLUMNS": "80"}
    result = runner.invoke(app, ["inspect", str(mode_packages["split"])], env=terminal)
    assert result.exit_code == 0
    lines = re.sub(r"\x1b\[[0-9;]*m", "", result.stdout).splitlines()
    assert max(len(line) for line in lines) <= 80
    piped = runner.invoke(app, ["inspect", str(mode_packages["split"])], env={"COLUMNS": "80"})
    assert piped.exit_code == 0 and "\x1b" not in piped.stdout
    heading = next(line for line in piped.stdout.splitlines() if line.startswith("prefill.onnx ("))
    assert heading.endswith(")") and "com.microsoft" in heading, heading  # one line, not folded at 80


def test_not_a_package(tmp_path):
    result = runner.invoke(app, ["inspect", str(tmp_path)])
    assert result.exit_code == 2 and "no genai_config.json" in result.output


def test_rope_tables_are_no_embedding(checkpoints, tmp_path):
    """#34 item 12: with RoPE outside GQA (mode bias here; DirectML's graphs too) the cos/sin tables
    are read by Gather, which inspect counted as a float embedding: a tied int4 embedding showed as
    "float, int4" and the tables as parameters."""
    out = tmp_path / "int4-bias"
    build(BuildOptions(str(checkpoints.get("mqa_tied")), out, smoke=False, precision="int4", attention="bias"))
    code, report = inspect(out)
    graph = report["summary"]["graphs"][0]
    assert code == 0 and graph["weights"]["embedding"] == "int4 (block 32)", graph["weights"]
    model = onnx.load(str(out / "model.onnx"), load_external_data=False)
    tables = {i.name: i for i in model.graph.initializer if i.name.endswith(("cos_cache", "sin_cache"))}
    gathered = {n.input[0] for n in model.graph.node if n.op_type == "Gather"}
    assert tables and set(tables) <= gathered  # the case this covers: the tables read by Gather
    fused = tmp_path / "int4-gqa"  # RoPE inside GQA: the tables are its inputs, never counted
    build(BuildOptions(str(checkpoints.get("mqa_tied")), fused, smoke=False, precision="int4", attention="gqa"))
    assert report["summary"]["parameters"] == inspect(fused)[1]["summary"]["parameters"]
