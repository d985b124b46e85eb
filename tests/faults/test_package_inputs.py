"""Broken packages given to every command that reads one (`inspect`, `run`, `eval`, `quantize`,
`adapter --base`, `verify`): a data file missing or cut short, a genai_config.json that is not JSON,
not an object, or without what onnxruntime-genai needs (a `model` object, `model.decoder`,
`model.vocab_size`), a model.onnx of garbage or gone, a manifest.json that is not JSON.

`inspect`, `run`, `eval`, `quantize` and `adapter`: exit 2 with one line naming what is wrong
(`inspect` may instead report a missing or short file as a lint error, exit 1, as it does for a
missing graph). `verify` reports problems as a failed check: exit 1, each problem on a "✗" line, no
traceback. `quantize` and `adapter` also write nothing.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from common import assert_clean, assert_fails, crashed, invoke

DATA = "model.onnx.data"


def cut_data(folder: Path) -> None:
    data = folder / DATA
    os.truncate(data, data.stat().st_size - 4096)  # the last initializer now ends past the end


def write(name: str, content: bytes):
    def edit(folder: Path) -> None:
        (folder / name).write_bytes(content)

    return edit


FAULTS = {
    # name -> (edit, what the message must say: a regex)
    "missing-data-file": (lambda f: (f / DATA).unlink(), r"model\.onnx\.data"),
    "short-data-file": (cut_data, r"model\.onnx\.data|past the end|out of bounds|truncated|shorter"),
    "genai-config-not-json": (write("genai_config.json", b"{not json"), r"genai_config\.json"),
    "genai-config-a-list": (write("genai_config.json", b"[1, 2, 3]"), r"genai_config\.json"),
    # valid JSON without what every command reads (was a KeyError or genai's bare RuntimeError)
    "genai-config-no-model": (write("genai_config.json", b"{}"), r"genai_config\.json has no model \(an object\)"),
    "genai-config-model-a-number": (write("genai_config.json", b'{"model": 5}'), r"genai_config\.json has model 5"),
    "genai-config-no-decoder": (
        lambda f: edit_config(f, lambda c: c["model"].pop("decoder")),
        r"genai_config\.json has no model\.decoder",
    ),
    "genai-config-no-vocab-size": (
        lambda f: edit_config(f, lambda c: c["model"].pop("vocab_size")),
        r"genai_config\.json has no model\.vocab_size \(a positive integer\)",
    ),
    "model-onnx-garbage": (write("model.onnx", os.urandom(4096)), r"model\.onnx"),
    "model-onnx-missing": (lambda f: (f / "model.onnx").unlink(), r"model\.onnx"),
    "manifest-not-json": (write("manifest.json", b"{not json"), r"manifest\.json"),
}
COMMANDS = {
    "inspect": lambda pkg, out: ["inspect", pkg],
    "run": lambda pkg, out: ["run", pkg, "--prompt", "Hello", "--max-new-tokens", "4"],
    "eval": lambda pkg, out: ["eval", pkg, "--text", pkg.parent / "text.txt", "--max-tokens", "8"],
    "quantize": lambda pkg, out: ["quantize", pkg, "-o", out, "-p", "int4", "--no-smoke"],
    "adapter": lambda pkg, out: ["adapter", pkg.parent / "peft", "--base", pkg, "-o", out],
    "verify": lambda pkg, out: ["verify", pkg],
}
# files inspect may report as a lint error (exit 1, "error missing-file: ...") instead of exit 2
LINTED = ("missing-data-file", "short-data-file", "model-onnx-missing")
# what each command does not read: a broken one is not a fault for it (adapter reads the base's
# genai_config.json and model.onnx graph, never its weights or manifest)
UNREAD = {
    "inspect": ("manifest-not-json",),
    "run": ("manifest-not-json",),
    "eval": ("manifest-not-json",),
    "adapter": ("manifest-not-json", "missing-data-file", "short-data-file"),
}
CASES = [(command, fault) for fault in FAULTS for command in COMMANDS if fault not in UNREAD.get(command, ())]


def edit_config(folder: Path, change) -> None:
    config = json.loads((folder / "genai_config.json").read_text())
    change(config)
    (folder / "genai_config.json").write_text(json.dumps(config))


@pytest.mark.parametrize(("command", "fault"), CASES, ids=[f"{c}-{f}" for c, f in CASES])
def test_broken_package(package, tmp_path, command, fault):
    edit, message = FAULTS[fault]
    edit(package)
    (tmp_path / "text.txt").write_text("Once upon a time there was a tiny model. " * 4)
    (tmp_path / "peft").mkdir()  # a LoRA adapter's config: the base is read next
    (tmp_path / "peft" / "adapter_config.json").write_text('{"peft_type": "LORA", "r": 4, "lora_alpha": 8}')
    out = tmp_path / ("int4" if command != "adapter" else "mine.onnx_adapter")
    result = invoke(*COMMANDS[command](package, out))
    pattern = re.compile(message)
    if command == "verify":
        trace = crashed(result)
        assert trace is None, f"uncaught {type(result.exception).__name__}:\n{trace}"
        assert result.exit_code == 1 and "Traceback" not in result.output, result.output
        problems = [line for line in result.output.splitlines() if line.startswith("✗")]
        assert problems and any(pattern.search(line) for line in problems), result.output
        assert "FAILED" in result.output
    elif command == "inspect" and result.exit_code == 1 and fault in LINTED:
        # reported as a lint error, like a missing graph file
        assert crashed(result) is None and "Traceback" not in result.output
        errors = [line for line in result.output.splitlines() if line.startswith("error ")]
        assert any(pattern.search(line) for line in errors), result.output
    else:
        if command == "inspect" and fault in LINTED:
            assert result.exit_code != 0, f"inspect found nothing wrong:\n{result.output[-2000:]}"
        assert_fails(result, 2, pattern)
    assert_clean(tmp_path, out)
