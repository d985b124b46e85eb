"""`release SPEC --resume -o PARTS`: a folder of parts is completed where it is not, and a part's
export killed mid-way (a real process, SIGKILL) is made again alone, to the same bytes."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from parts_harness import FOLDERS, cli_env, files, invoke


def slot(folder: str) -> str:
    return "part-" + folder.replace("/", "__")


def _kill_inside(process: subprocess.Popen, staging_of: Path, timeout: float = 300) -> None:
    """SIGKILL `process` once a staging folder for `staging_of` holds a file: mid-export."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert process.poll() is None, "the export finished before it could be killed:\n" + process.stdout.read()
        for staging in staging_of.parent.glob(f".{staging_of.name}.partial-*"):
            if any(p.is_file() for p in staging.rglob("*")):
                process.send_signal(signal.SIGKILL)
                process.wait()
                return
        time.sleep(0.02)
    process.kill()
    raise AssertionError("no staging folder appeared")


def test_resume_after_a_kill_gives_the_same_bytes(spec, matrix_run, one_machine, tmp_path):
    parts = tmp_path / "parts"
    parts.mkdir()
    for folder in FOLDERS[:3]:  # three jobs finished; the fourth never ran
        shutil.copytree(matrix_run["parts"] / slot(folder), parts / slot(folder))
    data = parts / slot(FOLDERS[1]) / FOLDERS[1] / "model.onnx.data"  # and one part's download went bad
    raw = bytearray(data.read_bytes())
    raw[len(raw) // 2] ^= 0x01
    data.write_bytes(bytes(raw))
    command = [sys.executable, "-m", "gqa_export", "release", str(spec), "--resume", "-o", str(parts)]
    process = subprocess.Popen(command, env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    _kill_inside(process, parts / slot(FOLDERS[3]))  # the bad part was made again first, then killed in the next
    assert process.returncode == -signal.SIGKILL
    assert not (parts / slot(FOLDERS[3])).exists()
    assert len(list(parts.glob(f".{slot(FOLDERS[3])}.partial-*"))) == 1  # what a SIGKILL leaves: the staging
    assert files(parts / slot(FOLDERS[1])) == files(matrix_run["parts"] / slot(FOLDERS[1]))  # remade, same bytes

    result = invoke("release", spec, "--resume", "-o", parts, "--json")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert sorted(summary["skipped"]) == sorted(FOLDERS[:3])
    assert [p["output"] for p in summary["parts"]] == [str(parts / slot(FOLDERS[3]))]
    assert sorted(p.name for p in parts.iterdir()) == sorted(slot(f) for f in FOLDERS)  # the staging removed
    release = tmp_path / "release"
    result = invoke("release", "assemble", spec, *sorted(parts.iterdir()), "-o", release)
    assert result.exit_code == 0, result.output
    assert files(release) == files(one_machine)

    # every part verifies now: nothing to do
    result = invoke("release", spec, "--resume", "-o", parts, "--json")
    assert result.exit_code == 0 and json.loads(result.stdout)["parts"] == []


def test_resume_refuses_to_replace_what_it_did_not_write(spec, matrix_run, tmp_path):
    parts = tmp_path / "parts"
    shutil.copytree(matrix_run["parts"] / slot(FOLDERS[0]), parts / slot(FOLDERS[0]))
    (parts / slot(FOLDERS[0]) / "notes.txt").write_text("mine")  # no longer verifies, and holds a user's file
    result = invoke("release", spec, "--variant", FOLDERS[0], "--resume", "-o", parts)
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert result.exit_code == 2 and len(errors) == 1 and "notes.txt" in errors[0], result.output
    assert (parts / slot(FOLDERS[0]) / "notes.txt").read_text() == "mine"
    assert (
        files(parts / slot(FOLDERS[0]))["part.json"]
        == (matrix_run["parts"] / slot(FOLDERS[0]) / "part.json").read_bytes()
    )
