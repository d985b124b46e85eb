"""A release variant's LoRA adapters: converted into the variant's folder, listed in its manifest.

A variant with `lora_targets` and `adapters: [PEFT folders]` ships each adapter as
`<folder name>.onnx_adapter` beside its base (converted by `gqa-export adapter`'s own code, checked
against that base, in its activation dtype), so the folder is a self-contained multi-LoRA package.
The base's manifest is then sealed again: its `files` gain the adapters' hashes and its `adapters`
entry says where each came from (the PEFT files' sha256, modules, ranks, scaling, dtype), so
`verify` covers them and a rebuild gives the same bytes (docs/lora.md §8).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gqa_export.package.adapters import convert_adapter
from gqa_export.package.manifest import MANIFEST, sealed_problems, sha256_file, write_sealed
from gqa_export.package.staging import file_digests

SUFFIX = ".onnx_adapter"
PEFT_FILES = ("adapter_config.json", "adapter_model.safetensors")


def ship_adapters(folder: Path, adapters: tuple[str, ...]) -> dict[str, dict[str, Any]]:
    """Convert each PEFT folder into `folder` and re-seal the package's manifest; returns its entry."""
    shipped: dict[str, dict[str, Any]] = {}
    for peft in map(Path, adapters):
        name = peft.name + SUFFIX
        result = convert_adapter(peft, folder, folder / name, into_base=True)
        shipped[name] = {
            "source": peft.name,
            "sha256": {f: sha256_file(peft / f) for f in PEFT_FILES if (peft / f).is_file()},
            "modules": result.modules,
            "ranks": dict(sorted(result.ranks.items())),
            "scaling": dict(sorted(result.scaling.items())),
            "dtype": result.dtype,
        }
    manifest, problems = sealed_problems(folder / MANIFEST)
    assert manifest is not None and not problems, problems
    manifest["adapters"] = shipped
    manifest["files"] = file_digests(folder, manifest["files"])
    write_sealed(folder / MANIFEST, manifest)
    return shipped
