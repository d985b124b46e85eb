"""Putting -o in place, stopped at every step by SIGINT, SIGTERM and SIGKILL in a real process.

Every command that writes is stopped inside gqa_export/package/swap.py (killer.py: the process
signals itself when `swap.step_reached` reports the step): build, quantize, release and `release
assemble` replacing an existing package with --overwrite (the journaled swap: journal, rename aside, rename in, journal
`committed`, trash, removed), a build into a fresh -o and adapter replacing its file (one rename:
ready, in). Build at every step (STEPS says which steps and signals each command gets: every step
and every command at least once, each command at each outcome of the swap).

SIGINT/SIGTERM: exit 130/143 and one line that tells the truth. A signal before the first rename
leaves the old output ("no partial output was left behind"); a later one is delivered once the new
output is committed, and the line says so. Nothing else is left.
SIGKILL: the next run (the same command without --overwrite, as in issue #34; adapter and a fresh
-o: the same command) says in one note line which output it kept and leaves that one whole.
Every time: the output verifies (`gqa-export verify`; an adapter is byte for byte the old or the
new file), no hidden name of the swap is left, and the foreign files beside -o are untouched.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from common import error_line, invoke, leftovers, subprocess_env, tree
from killer import EXIT, serve

from gqa_export.errors import InputError
from gqa_export.package import swap
from gqa_export.package.staging import StagedPackage

EPOCH = "1000000000"  # the new outputs' `created`, so they differ from the old package
CREATED = "2001-09-09T01:46:40+00:00"
SWAP_STEPS = ("swap-writing", "journal", "aside", "in", "committed-writing", "committed", "trash", "removed")
RENAME_STEPS = ("ready", "in")
ABANDONED = {"swap-writing", "journal", "ready"}  # SIGINT/SIGTERM there: -o keeps the old output
NOT_IN_PLACE = {*ABANDONED, "aside"}  # SIGKILL there: the new output never reached -o
RELEASES = {"release", "assemble"}  # the commands whose output is a release (release.json, not a manifest)
# Which (step, signal) each command is stopped at. Every command runs the same swap (package/swap.py),
# so build is stopped at every step by SIGTERM and SIGKILL (SIGINT takes SIGTERM's handler, another
# exit code: one step where the swap is abandoned, one where the signal waits for the commit); the
# other commands, at one step of each outcome: abandoned (journal), between the renames (aside: a
# SIGTERM waits for the commit, a SIGKILL leaves the old output to restore), the new output in place
# (in), and after the commit with the old one half deleted (trash), each by SIGTERM and SIGKILL, SIGINT once.
EVERY_STEP = [(step, sig) for step in SWAP_STEPS for sig in ("SIGTERM", "SIGKILL")]
EACH_OUTCOME = [(step, sig) for step in ("journal", "aside", "in", "trash") for sig in ("SIGTERM", "SIGKILL")]
STEPS = {
    "build": [*EVERY_STEP, ("journal", "SIGINT"), ("aside", "SIGINT")],
    "quantize": [*EACH_OUTCOME, ("aside", "SIGINT")],
    "release": [*EACH_OUTCOME, ("journal", "SIGINT")],
    "assemble": [*EACH_OUTCOME, ("in", "SIGINT")],  # `release assemble` of a part the fixture made
    "adapter": [(step, sig) for step in RENAME_STEPS for sig in ("SIGTERM", "SIGKILL")] + [("ready", "SIGINT")],
    "fresh": [(step, sig) for step in RENAME_STEPS for sig in ("SIGTERM", "SIGKILL")] + [("in", "SIGINT")],
}
# beside every -o: a user's files, and names that look like the swap's but are not a gone run's
FOREIGN = ("notes.md", "pkg.bak/model.onnx", ".pkg.old-backup/x", ".pkg.partial-1-0123abcd/x",
           ".pkgx.swap-999999-0123abcd", ".pkg.swap-notes")  # fmt: skip


@dataclass(frozen=True)
class Case:
    command: str  # build, quantize, release, assemble, adapter, or fresh (a build into an -o not there yet)
    step: str
    signal: str

    @property
    def id(self) -> str:
        return f"{self.command}-{self.step}-{self.signal}"

    @property
    def kept(self) -> str:
        """Which output -o holds in the end (after the next run, for SIGKILL): old or new."""
        if self.signal == "SIGKILL":
            return "old" if self.step in NOT_IN_PLACE and self.command not in ("adapter", "fresh") else "new"
        return "old" if self.step in ABANDONED else "new"


CASES = [Case(command, step, sig) for command, cases in STEPS.items() for step, sig in cases]
CAUGHT = [c for c in CASES if c.signal != "SIGKILL"]
KILLED = [c for c in CASES if c.signal == "SIGKILL"]


@dataclass
class Run:
    case: Case
    out: Path
    args: list[str]
    old: dict[str, str] | bytes | None  # what -o held before (a tree, an adapter's bytes, None)
    new: bytes | None  # the adapter the command writes
    returncode: int | str
    stderr: str


def foreign(parent: Path) -> None:
    for name in FOREIGN:
        path = parent / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"not gqa-export's: {name}\n")


FOREIGN_TREE = {name: hashlib.sha256(f"not gqa-export's: {name}\n".encode()).hexdigest() for name in FOREIGN}
FOREIGN_TOPS = tuple(name.split("/")[0] for name in FOREIGN)


def hidden(parent: Path) -> list[str]:
    """The swap's hidden names left in `parent`, the foreign look-alikes not counted."""
    return [item for item in leftovers(parent) if not item.startswith(FOREIGN_TOPS)]


def assert_untouched(parent: Path) -> None:
    found = tree(parent)
    assert {name: found.get(name) for name in FOREIGN} == FOREIGN_TREE, "a file gqa-export did not write changed"


@pytest.fixture(scope="module")
def lora(tiny, tmp_path_factory) -> dict[str, Path]:
    """A multi-LoRA base of the tiny model, two PEFT adapters, the old one converted."""
    from lora_models import save_adapter

    from gqa_export.package.adapters import convert_adapter
    from gqa_export.pipeline import BuildOptions, build

    root = tmp_path_factory.mktemp("lora")
    base = root / "base"
    build(BuildOptions(str(tiny), base, smoke=False, lora_targets=("q_proj", "v_proj")))
    made = {"base": base}
    for name, seed in (("old", 1), ("new", 2)):
        made[f"peft_{name}"] = save_adapter(root / f"peft_{name}", tiny, ["q_proj", "v_proj"], 4, 8.0, seed)
        made[name] = convert_adapter(made[f"peft_{name}"], base, root / f"{name}.onnx_adapter").output
    return made


@pytest.fixture(scope="module")
def runs(tiny, built, lora, tmp_path_factory) -> dict[str, Run]:
    """Every case from one fork server: -o prepared with its old output and foreign neighbours."""
    root = tmp_path_factory.mktemp("swap")
    spec = root / "spec" / "release.yaml"
    spec.parent.mkdir()
    spec.write_text(f"source: {tiny}\nlicense: apache-2.0\nsmoke: false\nvariants:\n  - {{ep: cpu, precision: fp32}}\n")
    part = root / "part"  # the one variant exported alone, as a CI job would: what `release assemble` reads
    variant = ("--variant", "cpu_and_mobile/cpu-fp32")
    made_part = invoke("release", spec, *variant, "-o", part, env={"SOURCE_DATE_EPOCH": EPOCH})
    assert made_part.exit_code == 0, made_part.output[-3000:]
    commands = {
        "build": ["build", str(tiny), "--no-smoke"],
        "fresh": ["build", str(tiny), "--no-smoke"],
        "quantize": ["quantize", str(built), "-p", "int8", "--no-smoke"],
        "release": ["release", str(spec)],
        "assemble": ["release", "assemble", str(spec), str(part)],
        "adapter": ["adapter", str(lora["peft_new"]), "--base", str(lora["base"])],
    }
    made, served = {}, []
    for case in CASES:
        parent = root / case.id
        parent.mkdir()
        foreign(parent)
        out = parent / ("pkg.onnx_adapter" if case.command == "adapter" else "pkg")
        old: dict[str, str] | bytes | None = None
        if case.command == "adapter":
            shutil.copy2(lora["old"], out)
            old = out.read_bytes()
        elif case.command != "fresh":
            shutil.copytree(built, out)
            old = tree(out)
        args = [*commands[case.command], "-o", str(out), *([] if case.command == "fresh" else ["--overwrite"])]
        new = lora["new"].read_bytes() if case.command == "adapter" else None
        made[case.id] = (out, args, old, new)
        files = {"stdout": str(parent / "stdout.txt"), "stderr": str(parent / "stderr.txt")}
        served.append({"id": case.id, "signal": case.signal, "at": f"step:{case.step}", "args": args,
                       "cwd": str(parent), **files})  # fmt: skip
    codes = serve(root, served, subprocess_env(SOURCE_DATE_EPOCH=EPOCH))
    runs = {}
    for case in CASES:
        out, args, old, new = made[case.id]
        runs[case.id] = Run(case, out, args, old, new, codes[case.id], (out.parent / "stderr.txt").read_text())
    return runs


def assert_kept(run: Run, kept: str) -> None:
    """-o holds the whole old or new output (`kept`), as the case expects."""
    out = run.out
    if run.case.command == "adapter":
        assert out.read_bytes() == (run.old if kept == "old" else run.new), f"{out} is not the {kept} adapter"
        return
    if kept == "old" and run.old is None:  # a fresh -o
        assert not out.exists(), f"{out} was created: {sorted(os.listdir(out))[:10]}"
        return
    assert out.is_dir(), f"{out} is gone; stderr:\n{run.stderr[-2000:]}"
    if kept == "old":
        assert tree(out) == run.old, f"{out} is not the old package"
        return
    assert tree(out) != run.old, f"{out} is still the old package"
    record = json.loads((out / ("release.json" if run.case.command in RELEASES else "manifest.json")).read_text())
    assert record["created"] == CREATED, f"{out} is not the output this run wrote: {record['created']}"
    verified = invoke("verify", out)
    assert verified.exit_code == 0, verified.output[-2000:]


@pytest.mark.parametrize("case", CAUGHT, ids=[c.id for c in CAUGHT])
def test_signal_at_every_step_leaves_one_whole_output_and_says_which(runs, case):
    run = runs[case.id]
    assert isinstance(run.returncode, int), f"{run.returncode}:\n{run.stderr[-2000:]}"
    said = "no partial output was left behind" if case.kept == "old" else "the new output was committed"
    error_line(run.stderr, EXIT[case.signal], run.returncode, said)
    assert_kept(run, case.kept)
    assert hidden(run.out.parent) == [], f"left behind: {hidden(run.out.parent)}"
    assert_untouched(run.out.parent)


@pytest.mark.parametrize("case", KILLED, ids=[c.id for c in KILLED])
def test_sigkill_at_every_step_is_finished_or_undone_by_the_next_run(runs, case):
    run = runs[case.id]
    parent = run.out.parent
    assert run.returncode == EXIT["SIGKILL"], f"exit {run.returncode}:\n{run.stderr[-2000:]}"
    if case.step == "in" and case.command in ("adapter", "fresh"):  # one rename: done, nothing to recover
        assert_kept(run, "new")
        assert hidden(parent) == [] and (assert_untouched(parent) is None)
        return
    assert hidden(parent), "the killed run left nothing: it was not stopped inside the swap"
    if case.step == "trash":  # as if the deletion had begun: a half-deleted old package is never put back
        (trash,) = [p for p in parent.iterdir() if ".trash-" in p.name]
        (trash / "manifest.json").unlink()
    again = invoke(
        *(a for a in run.args if a != "--overwrite" or case.command == "adapter"), env={"SOURCE_DATE_EPOCH": EPOCH}
    )
    notes = [line for line in again.stderr.splitlines() if line.startswith("note:")]
    if case.command in ("adapter", "fresh"):  # nothing to replace, or --overwrite is the command's own
        assert again.exit_code == 0, again.output[-3000:]
    else:  # the case: the next run without --overwrite finds one whole package and refuses
        error_line(again.stderr, 2, again.exit_code, "already exists; pass --overwrite")
    recovered = [line for line in notes if "interrupted" in line]
    assert len(recovered) == 1, f"expected one line about the interrupted run:\n{again.stderr}"
    if case.command not in ("adapter", "fresh"):
        said = (
            "the previous package"
            if case.kept == "old"
            else f"the new {'release' if case.command in RELEASES else 'package'}"
        )
        assert said in recovered[0], recovered[0]
    assert_kept(run, case.kept)
    assert hidden(parent) == [], f"left behind: {hidden(parent)}"
    assert_untouched(parent)


# --- the journal's decisions, in this process


def dead_pid() -> int:
    """The pid of a process that has exited (a tag no live run holds)."""
    return int(subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                              text=True, check=True).stdout)  # fmt: skip


def fake_package(folder: Path, text: str) -> dict[str, str]:
    """A folder gqa-export's ownership check takes as its own package; returns its tree."""
    folder.mkdir(parents=True)
    (folder / "model.onnx").write_text(text)
    (folder / "manifest.json").write_text(json.dumps({"tool": {"name": "gqa-export"}, "files": {"model.onnx": {}}}))
    return tree(folder)


class Stop(Exception):
    """Raised by the test's own SIGTERM handler."""


@contextmanager
def sigterm_raises_stop():
    def stop(signum, frame):
        raise Stop

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def sigterm_at(step: str, monkeypatch) -> None:
    real = swap.step_reached

    def hooked(reached: str, output: Path) -> None:
        real(reached, output)
        if reached == step:
            os.kill(os.getpid(), signal.SIGTERM)

    monkeypatch.setattr(swap, "step_reached", hooked)


def overwrite_with_sigterm_at(tmp_path: Path, step: str, monkeypatch) -> Path:
    out = tmp_path / "pkg"
    fake_package(out, "old")
    sigterm_at(step, monkeypatch)
    swap.forget_committed()
    with sigterm_raises_stop(), pytest.raises(Stop), StagedPackage(out, overwrite=True) as staged:
        (staged.path / "model.onnx").write_text("new")
        staged.path.joinpath("manifest.json").write_text((out / "manifest.json").read_text())
        staged.commit()
    return out


def test_a_signal_between_the_renames_waits_for_the_commit(tmp_path, monkeypatch):
    out = overwrite_with_sigterm_at(tmp_path, "aside", monkeypatch)
    assert (out / "model.onnx").read_text() == "new" and hidden(tmp_path) == []
    assert swap.committed_outputs() == [out.resolve()]  # what the CLI's interrupt line names


def test_mutant_without_deferred_signals_breaks_the_swap(tmp_path, monkeypatch):
    """The planted bug: signals handled mid-swap. The checks above then see the journal and the
    moved-aside package left, -o empty: they fail."""

    @contextmanager
    def not_deferred():
        yield []

    monkeypatch.setattr(swap, "deferred_signals", not_deferred)
    out = overwrite_with_sigterm_at(tmp_path, "aside", monkeypatch)
    assert not out.exists() and any(".swap-" in item for item in hidden(tmp_path))


def test_a_signal_before_the_first_rename_abandons_the_swap(tmp_path, monkeypatch):
    out = overwrite_with_sigterm_at(tmp_path, "swap-writing", monkeypatch)
    assert (out / "model.onnx").read_text() == "old" and hidden(tmp_path) == []
    assert swap.committed_outputs() == []


def journal(out: Path, tag: str, step: str) -> Path:
    path = swap.SwapNames(out.resolve(), tag).journal
    path.write_text(json.dumps(swap.SwapNames(out.resolve(), tag).record(step)))
    return path


def test_recovery_follows_the_journal_and_touches_nothing_else(tmp_path):
    tag = f"{dead_pid()}-0123abcd"
    out = tmp_path / "pkg"
    names = swap.SwapNames(out.resolve(), tag)
    old = fake_package(names.old, "old")  # killed between the renames
    fake_package(names.staging, "new")
    journal(out, tag, "swap")
    foreign(tmp_path)
    (done,) = swap.recover(out)
    assert done.startswith(f"restored the previous package at {out.resolve()} from {names.old.name}"), done
    assert tree(out) == old and hidden(tmp_path) == []
    assert_untouched(tmp_path)


def test_the_new_package_in_place_is_kept(tmp_path):
    tag = f"{dead_pid()}-0123abcd"
    out = tmp_path / "pkg"
    names = swap.SwapNames(out.resolve(), tag)
    fake_package(names.old, "old")
    new = fake_package(out, "new")  # killed after the second rename, before `committed`
    journal(out, tag, "swap")
    names.journal.with_name(names.journal.name + swap.WRITING).write_text('{"step": "comm')  # half written
    (done,) = swap.recover(out)
    assert done.startswith(f"kept the new package at {out.resolve()}"), done
    assert tree(out) == new and hidden(tmp_path) == []


def test_a_half_written_journal_means_nothing_moved(tmp_path):
    tag = f"{dead_pid()}-0123abcd"
    out = tmp_path / "pkg"
    names = swap.SwapNames(out.resolve(), tag)
    old = fake_package(out, "old")
    fake_package(names.staging, "new")
    names.journal.with_name(names.journal.name + swap.WRITING).write_text('{"tool": "gqa-exp')
    (done,) = swap.recover(out)
    assert done.startswith(f"kept the previous package at {out.resolve()}"), done
    assert tree(out) == old and hidden(tmp_path) == []


def test_a_committed_journal_never_puts_a_trash_folder_back(tmp_path):
    """-o removed by hand after the commit, the old package half deleted under the trash name."""
    tag = f"{dead_pid()}-0123abcd"
    out = tmp_path / "pkg"
    names = swap.SwapNames(out.resolve(), tag)
    fake_package(names.trash, "old")
    (names.trash / "manifest.json").unlink()
    journal(out, tag, "committed")
    swap.recover(out)
    assert not out.exists() and hidden(tmp_path) == []


@pytest.mark.parametrize("problem", ["unreadable", "output-appeared"])
def test_a_journal_that_cannot_decide_is_refused_and_nothing_touched(tmp_path, problem):
    tag = f"{dead_pid()}-0123abcd"
    out = tmp_path / "pkg"
    names = swap.SwapNames(out.resolve(), tag)
    fake_package(names.old, "old")
    fake_package(names.staging, "new")
    if problem == "unreadable":
        names.journal.write_text("{}")
    else:
        journal(out, tag, "swap")
        out.mkdir()
        (out / "mine.txt").write_text("a user's")
    before = tree(tmp_path)
    with pytest.raises(InputError, match="is not a swap journal" if problem == "unreadable" else "appeared after"):
        swap.recover(out)
    assert tree(tmp_path) == before


@pytest.mark.parametrize("whole", [True, False], ids=["whole", "half-deleted"])
def test_a_journal_less_old_folder_of_0_1_0_is_put_back_only_whole(tmp_path, whole):
    """gqa-export 0.1.0 moved -o aside without a journal; issue #34's half-deleted `.old-` holding
    only genai_config.json was put back as the package."""
    out = tmp_path / "pkg"
    old = tmp_path / f".pkg.old-{dead_pid()}-0123abcd"
    before = fake_package(old, "old")
    if not whole:
        (old / "model.onnx").unlink()
    (done,) = swap.recover(out)
    assert ("restored" in done) == whole, done
    assert (tree(out) == before) if whole else not out.exists()
    assert hidden(tmp_path) == []
