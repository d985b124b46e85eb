"""A release made on a CI matrix is the release one machine makes: the workflow's own steps
(docs/ci/github-release.yml), parts in parallel processes, assembled, compared byte for byte; the
workflow validated against GitHub's workflow schema; `--list` as a matrix."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from parts_harness import FOLDERS, WORKFLOW, files, invoke

from gqa_export.package.manifest import sealed_problems


def test_matrix_release_is_the_one_machine_release(one_machine, matrix_run):
    assembled = matrix_run["release"]
    ours, theirs = files(one_machine), files(assembled)
    assert sorted(ours) == sorted(theirs)
    assert [name for name in ours if ours[name] != theirs[name]] == []
    assert "ok: release" in matrix_run["verify"]
    assert (assembled / "LICENSE").read_bytes() == (one_machine / "LICENSE").read_bytes()  # from a part
    document, problems = sealed_problems(assembled / "release.json")
    assert document is not None and not problems
    assert [v["path"] for v in document["variants"]] == FOLDERS
    # the gate's comparison crossed parts: cpu-int4's reference, cpu-fp32, was its own job's
    assert document["variants"][1]["eval"]["against"] == FOLDERS[0]
    assert document["variants"][3]["eval"]["against"] == FOLDERS[2]


def test_each_job_made_a_part_of_its_variant(matrix_run):
    parts = sorted(matrix_run["parts"].iterdir())
    assert [p.name for p in parts] == sorted(f"part-{f.replace('/', '__')}" for f in FOLDERS)
    for part in parts:
        record, problems = sealed_problems(part / "part.json")
        assert record is not None and not problems
        (variant,) = record["variants"]
        assert part.name == "part-" + variant["path"].replace("/", "__")  # the artifact --list named
        assert record["pin"]["content_sha256"] and record["pin"]["files"] > 3  # a local source: its content
        assert variant["eval"] is None and set(record["scores"]) == {variant["path"]}  # compared when assembled
        assert sorted(p.name for p in part.iterdir()) == ["LICENSE", variant["path"].split("/")[0], "part.json"]


def test_verify_checks_a_part(matrix_run, tmp_path):
    part = matrix_run["parts"] / ("part-" + FOLDERS[2].replace("/", "__"))
    result = invoke("verify", part)
    assert result.exit_code == 0 and f"ok: part {part} (1 package)" in result.output, result.output
    copy = tmp_path / "part"
    shutil.copytree(part, copy)
    (copy / "notes.txt").write_text("x")
    result = invoke("verify", copy)
    assert result.exit_code == 1 and "notes.txt: not listed (an extra file)" in result.output


def test_list_is_a_matrix_with_runner_labels(matrix_run):
    include = matrix_run["matrix"]["include"]
    assert [e["variant"] for e in include] == FOLDERS
    assert [e["ep"] for e in include] == ["cpu", "cpu", "cuda", "cuda"]
    assert [e["runner"] for e in include] == ["ubuntu-latest", "ubuntu-latest", "gpu-runner", "gpu-runner"]
    assert all("revision" not in e for e in include)  # a local source: pinned by content, not by commit


def test_list_refuses_a_bad_runner_and_an_output(spec, tmp_path):
    result = invoke("release", spec, "--list", "--runner", "tpu=big")
    assert result.exit_code == 2 and "--runner tpu=big: expected EP=LABEL" in result.output
    result = invoke("release", spec, "--list", "-o", tmp_path / "x")
    assert result.exit_code == 2 and "--list prints the matrix" in result.output and not (tmp_path / "x").exists()


def test_list_pins_a_hub_revision_once(tmp_path, monkeypatch):
    """A Hub source's branch is resolved to its commit, given to every entry; a commit is kept."""
    from parts_harness import write_spec

    from gqa_export.release import load_spec
    from gqa_export.release import matrix as matrix_module

    spec = write_spec(tmp_path, source="acme/tiny", revision="main")
    asked = []
    monkeypatch.setattr(matrix_module, "_hub_commit", lambda repo, rev: asked.append((repo, rev)) or "a" * 40)
    include = matrix_module.matrix(load_spec(spec), {})["include"]
    assert asked == [("acme/tiny", "main")] and {e["revision"] for e in include} == {"a" * 40}
    include = matrix_module.matrix(load_spec(spec), {}, revision="b" * 40)["include"]
    assert asked == [("acme/tiny", "main")] and {e["revision"] for e in include} == {"b" * 40}


def _schema_check(path: Path) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.github-workflows", str(path)]
    return subprocess.run(command, capture_output=True, text=True, check=False)


def test_workflow_validates_against_githubs_schema(tmp_path):
    """SchemaStore's GitHub workflow schema, as check-jsonschema bundles it (no network)."""
    pytest.importorskip("check_jsonschema")
    result = _schema_check(WORKFLOW)
    assert result.returncode == 0, result.stdout + result.stderr
    # the check can fail: a job without runs-on, a step with both run and uses
    broken = yaml.safe_load(WORKFLOW.read_text())
    del broken["jobs"]["part"]["runs-on"]
    (tmp_path / "broken.yml").write_text(yaml.safe_dump(broken))
    assert _schema_check(tmp_path / "broken.yml").returncode != 0


def test_workflow_wires_list_to_parts_to_assemble():
    flow = yaml.safe_load(WORKFLOW.read_text())
    jobs = flow["jobs"]
    assert jobs["list"]["outputs"]["matrix"] == "${{ steps.list.outputs.matrix }}"
    assert jobs["part"]["needs"] == "list" and jobs["assemble"]["needs"] == "part"
    assert jobs["part"]["strategy"]["matrix"] == "${{ fromJSON(needs.list.outputs.matrix) }}"
    assert jobs["part"]["runs-on"] == "${{ matrix.runner }}"
    upload = next(s for s in jobs["part"]["steps"] if str(s.get("uses", "")).startswith("actions/upload-artifact"))
    download = next(s for s in jobs["assemble"]["steps"] if str(s.get("uses", "")).startswith("actions/download"))
    assert upload["with"]["name"] == "${{ matrix.artifact }}" and upload["with"]["path"] == "part/"
    assert download["with"] == {"pattern": "part-*", "path": "parts"}
    assert "parts/*" in next(s for s in jobs["assemble"]["steps"] if s.get("id") == "assemble")["run"]


def test_assemble_overwrites_its_own_release(spec, matrix_run, one_machine, tmp_path):
    out = tmp_path / "release"
    shutil.copytree(matrix_run["release"], out)
    parts = sorted(matrix_run["parts"].iterdir())
    result = invoke("release", "assemble", spec, *parts, "-o", out)
    assert result.exit_code == 2 and "already exists" in result.output
    result = invoke("release", "assemble", spec, *parts, "-o", out, "--overwrite", "--json")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert [p["variants"] for p in summary["parts"]] == [
        [f] for f in sorted(FOLDERS, key=lambda f: f.replace("/", "__"))
    ]
    assert files(out) == files(one_machine)
