"""A 4-variant release (cpu + cuda, fp32/fp16 + int4, one eval gate) made both ways, once per
session: on one machine (`release SPEC -o ROOT`) and as the GitHub workflow docs/ci/github-release.yml
makes it (its list, part and assemble steps' own shell, the parts in parallel processes)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from parts_harness import RUNNERS, TRAINED, Workflow, invoke, write_spec


@pytest.fixture(scope="session")
def spec(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The 4-variant spec over the trained tiny checkpoint, given a LICENSE file (copied to the
    release root, and so to every part: assembling needs no source)."""
    folder = tmp_path_factory.mktemp("spec")
    shutil.copytree(TRAINED, folder / "model")
    (folder / "model" / "LICENSE").write_text("Apache License, Version 2.0 (the tiny test checkpoint's)\n")
    return write_spec(folder, source=str(folder / "model"))


@pytest.fixture(scope="session")
def one_machine(spec: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`release SPEC -o ROOT` on one machine."""
    root = tmp_path_factory.mktemp("one") / "release"
    result = invoke("release", spec, "-o", root, "-q")
    assert result.exit_code == 0, result.output
    return root


@pytest.fixture(scope="session")
def matrix_run(spec: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The workflow's three jobs: list; one part per matrix entry, all at once (the runners), each
    part uploaded as `part-<artifact>`; assemble (the artifacts downloaded into parts/) and verify."""
    root = tmp_path_factory.mktemp("workflow")
    flow = Workflow(root, {"inputs.spec": str(spec), "inputs.revision": "", "vars.GQA_EXPORT_RUNNERS": RUNNERS,
                           "secrets.HF_TOKEN": ""})  # fmt: skip
    flow.run("list", "list", root / "list")
    output = (root / "list" / "github_output").read_text().splitlines()
    matrix = json.loads(next(line for line in output if line.startswith("matrix="))[len("matrix=") :])
    jobs = {entry["artifact"]: flow.start("part", "part", root / "jobs" / entry["artifact"], entry)
            for entry in matrix["include"]}  # fmt: skip
    for artifact, process in jobs.items():
        log, _ = process.communicate()
        assert process.returncode == 0, f"part {artifact} failed:\n{log[-3000:]}"
    assemble = root / "assemble"
    for artifact in jobs:  # upload-artifact of part/ as `artifact`, download-artifact pattern part-* into parts/
        assert artifact.startswith("part-")
        shutil.copytree(root / "jobs" / artifact / "part", assemble / "parts" / artifact)
    flow.run("assemble", "assemble", assemble)
    verified = flow.run("assemble", "verify", assemble)
    return {"matrix": matrix, "parts": assemble / "parts", "release": assemble / "release", "verify": verified,
            "workflow": flow}  # fmt: skip
