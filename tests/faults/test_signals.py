"""SIGTERM at every stage, SIGINT at four and SIGKILL where staging exists, in a real `gqa-export`
process (killer.py: the process stops itself at a stage line, the Nth weight written, a function
called or inside a C extension's init). The processes run concurrently (they are mostly start-up
time); each test waits for its own. The steps of putting -o in place are test_swap.py's.

SIGINT/SIGTERM: exit 130/143, one "error:" line, nothing at -o (or the package that was there,
with --overwrite, byte for byte), no staging folder. SIGKILL cannot be handled: the staging
folder stays, and the next run for the same -o removes it and says so.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
from common import PYTHON, assert_clean, assert_fails, error_line, invoke, leftovers, squash, subprocess_env, tree
from killer import DRIVER, EXIT, serve, spawn

HUB_ID = "acme/tiny-llama"
COMMIT = "0123456789abcdef0123456789abcdef01234567"
# stage -> (hook, extra build arguments); "fetch" builds a Hub id from an offline cache
STAGES = {
    "fetch": ("stage:fetch", ["--no-smoke"]),
    "build": ("stage:build", ["--no-smoke"]),
    "optimize": ("stage:optimize", ["--no-smoke"]),
    "quantize": ("stage:quantize", ["--no-smoke"]),
    "package": ("stage:package", ["--no-smoke"]),
    "weights-streaming": ("tensor:3", ["--no-smoke"]),
    "smoke-run": ("stage:smoke-run", []),
    # the smoke run's first import of onnxruntime-genai: pybind11's init fails, the package retries
    # the import and reports 'type "GeneratorParams" is already registered' (was exit 1)
    "smoke-run-genai-init": ("init:onnxruntime_genai.onnxruntime_genai", []),
    "float-reference": ("call:gqa_export.stages.package.logit_error", ["--no-smoke", "-p", "int4", "--report"]),
}


@dataclass(frozen=True)
class Case:
    signal: str
    stage: str
    overwrite: bool = False
    plain: bool = False  # its own `python -c` process instead of a child of the fork server

    @property
    def id(self) -> str:
        name = f"{self.signal}-{self.stage}" + ("-overwrite" if self.overwrite else "")
        return f"plain-{name}" if self.plain else name


# SIGINT and SIGTERM take the same handler (cli/app.py `_interrupt`: a KeyboardInterrupt that
# unwinds the stages), so SIGTERM stops every stage and SIGINT, whose exit code and line differ, a
# stage before the weights, one while they stream, the smoke run and its C extension's init
SIGINT_STAGES = ("build", "weights-streaming", "smoke-run", "smoke-run-genai-init")
CASES = [
    *[Case("SIGTERM", stage) for stage in STAGES],
    *[Case("SIGINT", stage) for stage in SIGINT_STAGES],
    *[Case("SIGTERM", stage, True) for stage in ("package", "smoke-run")],
    Case("SIGINT", "package", True),
    Case("SIGTERM", "weights-streaming", True),
    # the same, each in a process of its own from interpreter start to exit
    Case("SIGTERM", "package", plain=True),
    Case("SIGINT", "weights-streaming", True, plain=True),
    Case("SIGINT", "smoke-run-genai-init", plain=True),
]
KILLS = {
    # the staging folder exists and holds the graph and weights when the tokenizer is copied
    "package": "call:gqa_export.stages.package.copy_tokenizer",
    "package-overwrite": "call:gqa_export.stages.package.copy_tokenizer",
    "commit-overwrite": "step:aside",  # between the swap's two renames: -o moved aside, the new one not in
}


@dataclass
class Run:
    out: Path
    args: list[str]  # the command line, -o included
    before: dict[str, str] | None  # the package that was at -o (--overwrite)
    returncode: int | str
    stdout: str
    stderr: str


def prepare(root: Path, name: str, args: list[str], built: Path, overwrite: bool) -> tuple[Path, list[str], dict]:
    parent = root / name
    parent.mkdir()
    out = parent / "pkg"
    before = None
    if overwrite:
        shutil.copytree(built, out)
        before = tree(out)
        args = [*args, "--overwrite"]
    return out, [*args, "-o", str(out)], before


@pytest.fixture(scope="module")
def runs(tiny, built, tmp_path_factory) -> dict[str, Run]:
    """Every case: one fork server for most (start-up paid once), plain processes alongside."""
    root = tmp_path_factory.mktemp("signals")
    cache = root / "hub"
    snapshot = cache / f"models--{HUB_ID.replace('/', '--')}" / "snapshots" / COMMIT
    shutil.copytree(tiny, snapshot)
    (snapshot.parent.parent / "refs").mkdir()
    (snapshot.parent.parent / "refs" / "main").write_text(COMMIT)
    env = subprocess_env(HF_HUB_CACHE=str(cache), HF_HOME=str(root / "hf-home"))
    specs = []  # (id, signal, at, args, overwrite, plain)
    for name, at in KILLS.items():
        specs.append((f"SIGKILL-{name}", "SIGKILL", at, ["build", str(tiny), "--no-smoke"], "overwrite" in name, False))
    for case in CASES:
        at, extra = STAGES[case.stage]
        model = HUB_ID if case.stage == "fetch" else str(tiny)
        specs.append((case.id, case.signal, at, ["build", model, *extra], case.overwrite, case.plain))
    served, plain, made = [], {}, {}
    for name, sig, at, args, overwrite, alone in specs:
        out, full, before = prepare(root, name, args, built, overwrite)
        made[name] = (out, full, before)
        spec = {"id": name, "signal": sig, "at": at, "args": full, "cwd": str(out.parent)}
        if alone:
            plain[name] = spawn(spec, env)
        else:
            served.append({**spec, "stdout": str(out.parent / "stdout.txt"), "stderr": str(out.parent / "stderr.txt")})
    codes = serve(root, served, env)
    runs = {}
    for name, (out, full, before) in made.items():
        if name in plain:
            stdout, stderr = plain[name].communicate(timeout=300)
            runs[name] = Run(out, full, before, plain[name].returncode, stdout, stderr)
        else:
            read = (out.parent / "stdout.txt").read_text(), (out.parent / "stderr.txt").read_text()
            runs[name] = Run(out, full, before, codes[name], *read)
    return runs


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_interrupted_build_leaves_nothing(runs, case):
    run = runs[case.id]
    stage_hook = STAGES[case.stage][0]
    if stage_hook.startswith("stage:"):  # the signal came where the test meant it to
        assert f"> {stage_hook[6:]}" in run.stderr, f"exit {run.returncode}:\n{run.stderr[-2000:]}"
    assert isinstance(run.returncode, int), f"{run.returncode}:\n{run.stderr[-2000:]}"
    error_line(run.stderr, EXIT[case.signal], run.returncode, "interrupted")
    assert_clean(run.out.parent, run.out, run.before)


@pytest.mark.parametrize("name", list(KILLS))
def test_sigkill_leaves_staging_that_the_next_run_removes(runs, name):
    run = runs[f"SIGKILL-{name}"]
    parent = run.out.parent
    assert run.returncode == EXIT["SIGKILL"], f"exit {run.returncode}: {run.stderr[-2000:]}"
    left = leftovers(parent)
    assert any(".partial-" in item for item in left), f"no staging folder left by the killed run: {left}"
    if run.before is not None and name != "commit-overwrite":
        assert tree(run.out) == run.before, "the package that was there changed"
    if name == "commit-overwrite":
        assert any(".old-" in item for item in left), f"no backup of the replaced package: {left}"
    # the same command again, in this process: it removes what the killed run left, and says so
    again = invoke(*run.args)
    assert again.exit_code == 0 and again.exception is None, again.output[-3000:]
    assert leftovers(parent) == [], f"still left: {leftovers(parent)}"
    assert (run.out / "manifest.json").is_file()
    for removed in (item for item in left if ".swap-" not in item):  # the journal is the swap's bookkeeping
        assert squash(removed) in squash(again.stderr), f"{removed} not named in:\n{again.stderr}"


@pytest.mark.parametrize("hooked", [False, True], ids=["plain", "interrupted-in-genai-init"])
@pytest.mark.parametrize("what", ["smoke_run", "cuda_device_available"])
def test_library_gives_back_the_interrupt(built, hooked, what):
    """The library's smoke run and CUDA probe (the first to import onnxruntime-genai), without the
    CLI: Ctrl-C inside onnxruntime-genai's import (which then fails twice over as ImportErrors)
    leaves them as KeyboardInterrupt, not as a SmokeRunError saying the package does not load or
    as "no GPU". Unhooked, the same driver returns (the hook is what fails)."""
    spec = {"signal": "SIGINT", "at": "init:onnxruntime_genai.onnxruntime_genai" if hooked else "none:"}
    env = {**subprocess_env(), "GQA_FAULT_AT": json.dumps(spec)}
    done = subprocess.run(
        [PYTHON, "-c", DRIVER, "--library", what, str(built)], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split(" ")[0].strip() == ("KeyboardInterrupt" if hooked else "returned"), done.stdout


def interrupt() -> None:
    raise KeyboardInterrupt


def interrupt_turned_into_other_errors() -> None:
    """What an interrupted pybind11 import leaves, wrapped once more by a caller."""
    try:
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as exc:
            raise ImportError("initialization failed") from exc
    except ImportError:
        try:
            raise ImportError('generic_type: type "GeneratorParams" is already registered!')
        except ImportError as exc:
            raise RuntimeError("smoke run failed") from exc


@pytest.mark.parametrize("raised", [interrupt, interrupt_turned_into_other_errors], ids=["plain", "wrapped"])
def test_keyboard_interrupt_without_the_cli_signal_handlers(tiny, tmp_path, monkeypatch, raised):
    """Ctrl-C with Python's own SIGINT handling (main() not called: CliRunner, or the app embedded):
    a KeyboardInterrupt in the middle of the weights still exits 130 and leaves nothing, also when
    it comes back as other errors raised from it."""
    import contextlib
    import importlib

    app = importlib.import_module("gqa_export.cli.app")
    real_task = app.RichReporter.task

    @contextlib.contextmanager
    def task(self, description, total):
        with real_task(self, description, total) as advance:

            def step(n=1):
                advance(n)
                raised()

            yield step

    monkeypatch.setattr(app.RichReporter, "task", task)
    monkeypatch.setattr(app, "_received", [])
    out = tmp_path / "pkg"
    result = invoke("build", tiny, "-o", out, "--no-smoke")
    assert_fails(result, 130, "interrupted")
    assert_clean(tmp_path, out)
