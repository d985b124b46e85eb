"""A cached virtualenv whose `onnxruntime` is the OpenVINO build (docs/eps.md §3).

`onnxruntime-openvino` installs its own `onnxruntime` module, so it cannot sit beside the parent
interpreter's onnxruntime. The venv gets `onnxruntime-openvino` and `onnxruntime-genai` (both with
--no-deps: their dependencies — numpy, protobuf, ... — come from the parent) in its own
site-packages, and a `.pth` naming the parent's site-packages. Python puts a venv's site-packages
on sys.path before any folder a `.pth` adds, so the venv's `onnxruntime` and `onnxruntime_genai`
shadow the parent's, and the parent supplies everything else (onnx_ir, torch, transformers). The
probe checks which `onnxruntime` is imported (the venv's, with the OpenVINO provider) and that
onnxruntime-genai loads against it; a cache that fails the probe is rebuilt, never reused.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

from layered_venv import create_layered, layered_venv

OPENVINO_ORT = "1.24.1"  # onnxruntime-openvino (its own onnxruntime module; docs/eps.md §3)
GENAI = "0.18.0"  # onnxruntime-genai, CPU build, loading whichever onnxruntime comes first
PROBE = (
    "import json, onnxruntime, onnxruntime_genai, onnx_ir;"
    "print(json.dumps({'ort': onnxruntime.__file__, 'version': onnxruntime.__version__,"
    " 'providers': onnxruntime.get_available_providers(), 'genai': onnxruntime_genai.__file__}))"
)


def openvino_env() -> tuple[Path | None, str]:
    """(the venv's python, "") when usable; (None, why) when the wheels cannot be installed."""
    env_dir = layered_venv(f"onnxruntime-openvino-{OPENVINO_ORT}")
    python = env_dir / "bin" / "python"
    if probe(python, env_dir) is not None:
        return python, ""
    python = create_layered(env_dir)
    install = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps",
         f"onnxruntime-openvino=={OPENVINO_ORT}", f"onnxruntime-genai=={GENAI}"],
        capture_output=True, text=True,
    )  # fmt: skip
    if install.returncode != 0:
        shutil.rmtree(env_dir, ignore_errors=True)
        last = (install.stderr.strip().splitlines() or ["no output"])[-1]
        return None, f"onnxruntime-openvino=={OPENVINO_ORT} could not be installed: {last}"
    found = probe(python, env_dir)
    assert found is not None, f"the OpenVINO venv {env_dir} does not import its own onnxruntime with OpenVINO"
    return python, ""


def probe(python: Path, env_dir: Path) -> dict | None:
    """What the venv imports, or None unless it is its own OpenVINO onnxruntime and genai."""
    if not python.exists():
        return None
    check = subprocess.run([str(python), "-c", PROBE], capture_output=True, text=True)
    if check.returncode != 0:
        return None
    found = json.loads(check.stdout.strip().splitlines()[-1])
    mine = all(Path(found[k]).resolve().is_relative_to(env_dir.resolve()) for k in ("ort", "genai"))
    ok = mine and "OpenVINOExecutionProvider" in found["providers"] and found["version"] == OPENVINO_ORT
    return found if ok else None


if __name__ == "__main__":
    print(openvino_env())
