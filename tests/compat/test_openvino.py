"""OpenVINO, run-verified (docs/eps.md §3): fp32, fp16 and int4 `--ep openvino` packages generate, through
onnxruntime-genai on the OpenVINO provider (device_type CPU), the same greedy tokens as the CPU
packages of the same checkpoint on ORT's CPU kernels in this interpreter.

onnxruntime-openvino ships its own `onnxruntime` module, so it runs in a cached venv of its own
(openvino_env.py, built once per cache folder and parent interpreter); skipped only where its
wheels cannot be installed (no registry access).
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
from reference import assert_varied

from gqa_export.runtime.run import generate_greedy

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
PROMPT = [1, 17, 93, 5, 250, 41, 8, 77, 3, 120, 64, 9, 200, 31]
NEW_TOKENS = 16


@pytest.fixture(scope="module")
def openvino_python() -> Path:
    from openvino_env import openvino_env

    python, why = openvino_env()
    if python is None:
        pytest.skip(why)
    return python


def _on_openvino(python: Path, packages: list[Path]) -> dict:
    run = subprocess.run(
        [str(python), str(HERE / "openvino_generate.py"), "openvino", ",".join(map(str, PROMPT)), str(NEW_TOKENS),
         *map(str, packages)],
        cwd=ROOT, env={"PYTHONPATH": f"{ROOT}:{HERE}", "PATH": "/usr/bin:/bin"}, capture_output=True, text=True,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("precision", ["fp32", "fp16", "int4"])
def test_openvino_greedy_tokens_equal_cpu(exports, openvino_python, precision):
    cpu = exports.get("base", ep="cpu", precision=precision)
    ov = exports.get("base", ep="openvino", precision=precision)
    # the OpenVINO package is the CPU graph with another provider entry (docs/eps.md §3)
    assert (ov / "model.onnx").read_bytes() == (cpu / "model.onnx").read_bytes()
    want = generate_greedy(cpu, PROMPT, NEW_TOKENS, "cpu").tokens
    found = _on_openvino(openvino_python, [ov])
    assert Path(found["ort"]).resolve().is_relative_to(openvino_python.parents[1].resolve())
    got = found["packages"][str(ov)]
    assert got["session_providers"][0] == "OpenVINOExecutionProvider"
    assert got["tokens"] == want
    assert_varied([want])


def test_openvino_runs_a_mutant_differently(exports, openvino_python, tmp_path):
    """The comparison can fail: the fp32 package with its lm_head scaled x1.5 on one half of the
    vocabulary changes the OpenVINO tokens (so equal tokens above are not an artefact)."""
    from mutants import copy_package, edit_initializers

    def half_scaled(values):
        out = values.copy()
        out[: out.shape[0] // 2] *= 1.5
        return out

    package = copy_package(exports.get("base", ep="openvino", precision="fp32"), tmp_path / "ov")
    assert edit_initializers(package, "*lm_head*", half_scaled) or edit_initializers(package, "*embed*", half_scaled)
    want = generate_greedy(exports.get("base", ep="cpu", precision="fp32"), PROMPT, NEW_TOKENS, "cpu").tokens
    got = _on_openvino(openvino_python, [package])["packages"][str(package)]["tokens"]
    assert got != want


def test_openvino_runs_all_but_group_query_attention(exports, openvino_python):
    """Node placements (onnxruntime's verbose log): OpenVINO takes every node of the int4 graph
    except GroupQueryAttention, which is not in its op list and runs on ORT's CPU EP."""
    package = exports.get("base", ep="openvino", precision="int4")
    run = subprocess.run(
        [str(openvino_python), str(HERE / "openvino_generate.py"), "placements", str(package)],
        cwd=ROOT, env={"PYTHONPATH": f"{ROOT}:{HERE}", "PATH": "/usr/bin:/bin"}, capture_output=True, text=True,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    placed: dict[str, list[str]] = {}
    provider = None
    for line in run.stderr.splitlines():
        if m := re.search(r"Node\(s\) placed on \[(\w+)\]", line):
            provider = m.group(1)
            placed[provider] = []
        elif provider and (m := re.search(r"VerifyEachNodeIsAssignedToAnEp\]\s+(\w+) \(", line)):
            placed[provider].append(m.group(1))
    assert "OpenVINOExecutionProvider" in placed, run.stderr[-2000:]
    assert set(placed.get("CPUExecutionProvider", [])) == {"GroupQueryAttention"}


def test_openvino_tied_int4_reads_a_float_table(exports, checkpoints, openvino_python, tmp_path, monkeypatch):
    """A GatherBlockQuantized in an OpenVINO session (placed on ORT's CPU EP beside OpenVINO) gives
    wrong tokens (probed: a tied int4 package, and an untied one with --quant-embeddings, both
    repeat id 256), so the record lacks it and a tied table is a float Gather beside the quantized
    lm_head (docs/eps.md §2.7): the tied package generates its untied twin's tokens on OpenVINO,
    and, planted, the table left GatherBlockQuantized does not."""
    from tiny_models import save_untied_twin

    from gqa_export.pipeline import BuildOptions, build
    from gqa_export.quant import quantize

    tied = exports.get("mqa_tied", ep="openvino", precision="int4")
    twin = tmp_path / "twin"
    build(BuildOptions(str(save_untied_twin(checkpoints.get("mqa_tied"), tmp_path / "ck")), twin, ep="openvino",
                       precision="int4", smoke=False))  # fmt: skip
    monkeypatch.setattr(quantize, "float_gather", lambda *args: "")
    monkeypatch.setattr("gqa_export.stages.graphs.check_ep_graph", lambda ep, models: None)
    monkeypatch.setattr("gqa_export.stages.finish.check_written", lambda *args, **kwargs: [])
    planted = tmp_path / "planted"
    build(BuildOptions(str(checkpoints.get("mqa_tied")), planted, ep="openvino", precision="int4", smoke=False))
    found = _on_openvino(openvino_python, [tied, twin, planted])["packages"]
    assert found[str(tied)]["tokens"] == found[str(twin)]["tokens"]
    assert_varied([found[str(tied)]["tokens"]])
    assert found[str(planted)]["tokens"] != found[str(twin)]["tokens"]
