"""A real `gqa-export` process that stops itself at a chosen point: the harness of the signal and
swap fault tests.

A small driver (`python -c DRIVER`) imports the CLI, hooks one point of the run (a stage line
starting, the Nth weight written, a function called, a step of putting -o in place) to send a
signal to its own process, then calls `gqa_export.cli.app.main()` as the console script does (main
installs the SIGTERM/SIGINT handlers). `serve` runs many such cases from one fork server, which
imports the libraries once and forks a child per case (each a fresh `gqa-export` process in all but
its start-up); `spawn` runs one in a process of its own from interpreter start to exit.

A case is a dict: id, signal (SIGINT, SIGTERM, SIGKILL), at ("stage:NAME", "tensor:N",
"call:module.function", "init:C_EXTENSION_MODULE", "step:STEP"), args (the command line after
`gqa-export`), cwd, and for `serve` the stdout and stderr files. `python -c DRIVER --library WHAT
PACKAGE` runs the library's smoke run or CUDA probe alone (test_signals.py).
"""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

from common import PYTHON

DRIVER = r"""
import contextlib, importlib, json, os, signal, sys, time, traceback

app = importlib.import_module("gqa_export.cli.app")


def install(spec):
    # make the process send itself spec["signal"] at spec["at"]
    sig = getattr(signal, spec["signal"])

    def fire():
        sys.stdout.flush()
        sys.stderr.flush()
        os.kill(os.getpid(), sig)

    kind, target = spec["at"].split(":", 1)
    if kind == "stage":  # when a stage line whose name starts with `target` is printed
        stage = app.RichReporter.stage

        def hooked(self, name):
            stage(self, name)
            if name.startswith(target):
                fire()

        app.RichReporter.stage = hooked
    elif kind == "tensor":  # after the Nth weight was streamed into the data file
        task = app.RichReporter.task

        @contextlib.contextmanager
        def hooked(self, description, total):
            with task(self, description, total) as advance:
                done = [0]

                def step(n=1):
                    advance(n)
                    done[0] += 1
                    if done[0] == int(target):
                        fire()

                yield step

        app.RichReporter.task = hooked
    elif kind == "call":  # when module.function is called (patched where the caller looks it up)
        module, name = target.rsplit(".", 1)
        mod = importlib.import_module(module)
        real = getattr(mod, name)

        def hooked(*args, **kwargs):
            fire()
            return real(*args, **kwargs)

        setattr(mod, name, hooked)
    elif kind == "init":  # inside the init of the C extension module `target`, as a real Ctrl-C can land
        import _imp, ctypes, itertools, operator

        # raise(3) signals the calling thread, the one running the init (kill(2) of the pid may land on
        # another thread of the process, whose handler then runs after the init on a loaded machine)
        exec_dynamic, raise_signal, fired = _imp.exec_dynamic, getattr(ctypes.CDLL(None), "raise"), []

        def hooked(module):
            if module.__name__ != target or fired:
                return exec_dynamic(module)
            fired.append(target)
            sys.stdout.flush()
            sys.stderr.flush()
            # the signal, then the init, with no bytecode between them: the handler runs inside the init
            # (pybind11's first PyObject_Repr checks for signals), not in this function
            calls = [(raise_signal, sig), (exec_dynamic, module)]
            return list(itertools.starmap(operator.call, calls))[1]

        _imp.exec_dynamic = hooked
    elif kind == "step":  # when putting -o in place reaches a step (gqa_export/package/swap.py)
        swap = importlib.import_module("gqa_export.package.swap")
        real = swap.step_reached

        def hooked(step, output):
            real(step, output)
            if step == target and ".partial-" not in str(output):  # -o itself, not a release's variant
                fire()

        swap.step_reached = hooked

def run(spec, args):
    install(spec)
    sys.argv = ["gqa-export", *args]
    app.main()  # what the console script calls: installs the SIGTERM/SIGINT handlers


def serve(cases_file, results_file, workers, limit):
    # Import what every build imports, once; then fork one child per case (a fresh `gqa-export`
    # process in all but its start-up: main() installs its handlers in the child).
    app.hide_torch()
    importlib.import_module("gqa_export.cli")
    importlib.import_module("gqa_export.pipeline")
    importlib.import_module("gqa_export.requantize")
    importlib.import_module("gqa_export.release.assemble")
    importlib.import_module("gqa_export.release.combine")
    importlib.import_module("gqa_export.package.adapters")
    from transformers import AutoConfig  # noqa: F401

    queue, running, results = json.load(open(cases_file)), {}, {}
    while queue or running:
        while queue and len(running) < workers:
            case = queue.pop(0)
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                code = 1
                try:
                    os.chdir(case["cwd"])
                    for fd, name in ((1, "stdout"), (2, "stderr")):
                        os.dup2(os.open(case[name], os.O_WRONLY | os.O_CREAT | os.O_TRUNC), fd)
                    run(case, case["args"])
                    code = 0
                except SystemExit as exc:
                    code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
                except BaseException:
                    traceback.print_exc()
                finally:
                    sys.stdout.flush()
                    sys.stderr.flush()
                    os._exit(code)
            running[pid] = (case, time.monotonic())
        time.sleep(0.02)
        for pid, (case, began) in list(running.items()):
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                results[case["id"]] = os.waitstatus_to_exitcode(status)
                del running[pid]
            elif time.monotonic() - began > limit:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                results[case["id"]] = "timed out"
                del running[pid]
    json.dump(results, open(results_file, "w"))


def library(spec, what, package):
    # the library's smoke run or CUDA probe alone (no CLI, Python's own SIGINT handler): what leaves it
    import pathlib

    from gqa_export.runtime.run import smoke_run
    from gqa_export.runtime.providers import cuda_device_available

    # Python's own handler even where this process inherited SIGINT ignored (a test run started in the
    # background by a non-interactive shell): Python then keeps it ignored and no Ctrl-C can land
    signal.signal(signal.SIGINT, signal.default_int_handler)
    install(spec)
    try:
        smoke_run(pathlib.Path(package), "cpu") if what == "smoke_run" else cuda_device_available()
        print("returned")
    except BaseException as exc:
        print(type(exc).__name__, str(exc)[:300])


if sys.argv[1] == "--serve":
    serve(sys.argv[2], sys.argv[3], int(sys.argv[4]), float(sys.argv[5]))
elif sys.argv[1] == "--library":
    library(json.loads(os.environ["GQA_FAULT_AT"]), sys.argv[2], sys.argv[3])
else:
    run(json.loads(os.environ["GQA_FAULT_AT"]), sys.argv[1:])
"""


EXIT = {"SIGINT": 130, "SIGTERM": 143, "SIGKILL": -signal.SIGKILL}
WORKERS = 2
CHILD_SECONDS = 120


def serve(root: Path, cases: list[dict], env: dict[str, str]) -> dict[str, int | str]:
    """Run `cases` from one fork server, WORKERS at a time; each id -> exit status ("timed out")."""
    (root / "cases.json").write_text(json.dumps(cases))
    server = subprocess.run(
        [PYTHON, "-c", DRIVER, "--serve", str(root / "cases.json"), str(root / "results.json"), str(WORKERS),
         str(CHILD_SECONDS)],
        cwd=root, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert server.returncode == 0, f"the fork server failed:\n{server.stderr[-3000:]}"
    return json.loads((root / "results.json").read_text())


def spawn(case: dict, env: dict[str, str]) -> subprocess.Popen[str]:
    """One case in a `python -c` process of its own (collect it with `communicate`)."""
    return subprocess.Popen(
        [PYTHON, "-c", DRIVER, *case["args"]], cwd=case["cwd"], env={**env, "GQA_FAULT_AT": json.dumps(case)},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
