"""llama.cpp itself as a reference for GGUF tests: llama-cpp-python in a venv of its own.

The venv is not made by the tests (building llama.cpp from source takes about an hour on two
cores): `benchmarks/llama_cpp_env.sh DIR` makes it (pip install llama-cpp-python, which compiles
llama.cpp, plus the unpacked sdist, whose vendor/llama.cpp/convert_hf_to_gguf.py is llama.cpp's
own converter). Tests look for it at $GQA_EXPORT_LLAMA_CPP_VENV, else at
$GQA_EXPORT_TEST_CACHE/llama-cpp (default ~/.cache/gqa-export-tests/llama-cpp), and skip
without it, naming the script.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

RUNNER = Path(__file__).parent / "llama_cpp_runner.py"


def venv() -> Path:
    given = os.environ.get("GQA_EXPORT_LLAMA_CPP_VENV")
    if given:
        return Path(given)
    cache = Path(os.environ.get("GQA_EXPORT_TEST_CACHE", Path.home() / ".cache" / "gqa-export-tests"))
    return cache / "llama-cpp"


def python_or_skip() -> Path:
    python = venv() / "bin" / "python"
    if not python.is_file():
        pytest.skip(f"no llama-cpp-python venv at {venv()}: make one with benchmarks/llama_cpp_env.sh")
    return python


def converter_or_skip() -> Path:
    found = sorted(venv().glob("src/*/vendor/llama.cpp/convert_hf_to_gguf.py"))
    if not found:
        pytest.skip(f"no llama.cpp source beside the venv at {venv()}: make it with benchmarks/llama_cpp_env.sh")
    return found[-1].parent


def run(job: dict[str, Any], timeout: int = 600) -> dict[str, Any]:
    done = subprocess.run([str(python_or_skip()), str(RUNNER), json.dumps(job)], capture_output=True, text=True,
                          timeout=timeout)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


# the converter imports sentencepiece before it looks for a tokenizer.model; its pre-tokenizer
# check hashes a test string through the tokenizer and knows only
# published tokenizers; the tiny ones split like GPT-2 (ByteLevel with GPT-2's regex), so say so
CONVERT = """
import importlib.machinery, runpy, sys, types
src = sys.argv.pop(1)
sys.path[:0] = [src + "/gguf-py", src]
stub = types.ModuleType("sentencepiece")  # the tiny checkpoints have no tokenizer.model: never used
stub.__spec__ = importlib.machinery.ModuleSpec("sentencepiece", None)
stub.SentencePieceProcessor = object
sys.modules.setdefault("sentencepiece", stub)
import conversion.base as base
base.TextModel.get_vocab_base_pre = lambda self, tokenizer: "gpt-2"
runpy.run_path(src + "/convert_hf_to_gguf.py", run_name="__main__")
"""


def convert(checkpoint: Path, out: Path, outtype: str = "f32") -> Path:
    """llama.cpp's own convert_hf_to_gguf.py on a tiny checkpoint (it needs torch: the test venv's python)."""
    import sys

    src = converter_or_skip()
    args = [sys.executable, "-c", CONVERT, str(src), str(checkpoint), "--outfile", str(out), "--outtype", outtype]
    done = subprocess.run(args, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return out
