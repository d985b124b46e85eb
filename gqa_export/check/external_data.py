"""Whether a graph's external weights are really there: each initializer stored outside the .onnx
names a file, an offset and a length; a missing or truncated data file would otherwise surface as
an onnxruntime load error (or a crash mid-quantization) that does not say which file is wrong."""

from __future__ import annotations

from pathlib import Path

from onnx import ModelProto, TensorProto


def external_data_problems(model: ModelProto, folder: Path) -> list[str]:
    """One sentence per missing or too-short data file (the first initializer it fails)."""
    sizes: dict[str, int | None] = {}
    problems: dict[str, str] = {}
    for tensor in model.graph.initializer:
        if tensor.data_location != TensorProto.EXTERNAL:
            continue
        info = {entry.key: entry.value for entry in tensor.external_data}
        location = info.get("location", "")
        if location in problems:
            continue
        if location not in sizes:
            path = folder / location
            sizes[location] = path.stat().st_size if path.is_file() else None
        size = sizes[location]
        end = int(info.get("offset", 0) or 0) + int(info.get("length", 0) or 0)
        if size is None:
            problems[location] = f"{location}, the data file of {tensor.name} and others, is missing"
        elif end > size:
            problems[location] = (
                f"{location} is {size} bytes, shorter than {tensor.name} needs (it ends at byte {end}): "
                "the file is truncated"
            )
    return list(problems.values())
