"""Lints for a multimodal package's image processor configuration (docs/multimodal.md §7).

onnxruntime-genai 0.18 reads `model.vision.config_filename` (default `processor_config.json`) as an
onnxruntime-extensions transform list. Two mistakes load without error and feed the vision model
wrong pixels: `ConvertRGB` after `DecodeImage` (DecodeImage already yields RGB, so ConvertRGB swaps
the channels to BGR, docs/multimodal.md §7 and §11.2), and a list that does not start by decoding
the image. A vision section whose processor file is missing fails only when the first image is run.
"""

from __future__ import annotations

from typing import Any

from gqa_export.check.findings import Finding
from gqa_export.check.reader import Package
from gqa_export.jsonio import read_json

DEFAULT_PROCESSOR = "processor_config.json"  # genai's default vision.config_filename


def processor_findings(pkg: Package, _: int) -> list[Finding]:
    vision = ((pkg.config or {}).get("model") or {}).get("vision")
    if not vision:
        return []
    name = vision.get("config_filename", DEFAULT_PROCESSOR)
    path = pkg.path / name
    if not path.is_file():
        return [
            Finding(
                "processor-missing",
                "error",
                f"model.vision names the image processor {name}, which the package lacks",
                "re-export the package (gqa-export build writes it from the checkpoint's preprocessor_config.json)",
            )
        ]
    kinds = _transform_kinds(read_json(path))
    if not kinds or kinds[0] != "DecodeImage":
        return [
            Finding(
                "processor-decode",
                "error",
                f"{name}: the transforms do not start with DecodeImage ({', '.join(kinds) or 'none'})",
                "re-export the package",
            )
        ]
    if "ConvertRGB" in kinds:
        return [
            Finding(
                "processor-convert-rgb",
                "error",
                f"{name}: ConvertRGB after DecodeImage swaps the channels (DecodeImage already yields RGB): "
                "the vision model sees BGR pixels",
                f"remove the ConvertRGB transform from {name}",
            )
        ]
    return []


def _transform_kinds(config: Any) -> list[str]:
    transforms = (((config or {}).get("processor") or {}).get("transforms")) or []
    return [str(((t or {}).get("operation") or {}).get("type")) for t in transforms]
