"""Run inside the OpenVINO venv (openvino_env.py): greedy tokens of packages on an EP, as JSON.

argv: ep, prompt ids (comma separated), new tokens, package folders. Also reports which providers
an onnxruntime session of each package's graph is given, and onnxruntime's node placements
(its verbose log, on stderr) for `placements PACKAGE`, so the test knows what OpenVINO ran.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import onnxruntime

from gqa_export.eps import EPS
from gqa_export.runtime.run import generate_greedy


def main() -> None:
    if sys.argv[1] == "placements":  # onnxruntime logs "Node(s) placed on [EP]" and the nodes at verbose level
        options = onnxruntime.SessionOptions()
        options.log_severity_level = 0
        onnxruntime.InferenceSession(
            str(Path(sys.argv[2]) / "model.onnx"),
            options,
            providers=[("OpenVINOExecutionProvider", {"device_type": "CPU"}), "CPUExecutionProvider"],
        )
        return
    ep, prompt, new, *packages = sys.argv[1:]
    ids = [int(t) for t in prompt.split(",")]
    out = {"ort": onnxruntime.__file__, "version": onnxruntime.__version__, "packages": {}}
    for package in packages:
        options = {"device_type": "CPU"} if ep == "openvino" else {}
        session = onnxruntime.InferenceSession(
            str(Path(package) / "model.onnx"), providers=[(EPS[ep].ort_provider, options), "CPUExecutionProvider"]
        )
        result = generate_greedy(Path(package), ids, int(new), ep)
        out["packages"][package] = {"tokens": result.tokens, "session_providers": session.get_providers()}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
