"""`gqa-export inspect model.gguf`: what a GGUF holds and what a build would make of it.

Architecture and the transformers family it maps to (or why not), the tensors by GGML type (count,
parameters, bytes, bits per weight), the file's own quantization name, the tokenizer, and per type
the form a build gives it (MatMulNBits with the file's blocks, float, or refused without
--dequantize). Read from the metadata and tensor descriptions only: nothing is dequantized.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gqa_export.errors import InputError
from gqa_export.source.gguf.blocks import EXACT_FLOAT_TYPES, FLOAT_TYPES, FORMS
from gqa_export.source.gguf.config import FAMILIES, read_config
from gqa_export.source.gguf.container import GgufFile, open_gguf

# llama.cpp's general.file_type values (llama_ftype) for the names users know
FILE_TYPES = {0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1", 10: "Q2_K", 11: "Q3_K_S",
              12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M", 16: "Q5_K_S", 17: "Q5_K_M", 18: "Q6_K",
              19: "IQ2_XXS", 20: "IQ2_XS", 21: "Q2_K_S", 22: "IQ3_XS", 23: "IQ3_XXS", 24: "IQ1_S", 25: "IQ4_NL",
              26: "IQ3_S", 27: "IQ3_M", 28: "IQ2_S", 29: "IQ2_M", 30: "IQ4_XS", 31: "IQ1_M", 32: "BF16",
              36: "TQ1_0", 37: "TQ2_0", 38: "MXFP4_MOE"}  # fmt: skip


def form_of(type_name: str) -> str:
    """What a build makes of tensors of this type (docs/gguf.md §3)."""
    form = FORMS.get(type_name)
    if form is not None:
        mins = " + block-sum min correction" if form.mins else ""
        return f"MatMulNBits {form.bits}-bit block {form.block}{mins} (the file's blocks, exact)"
    if type_name in FLOAT_TYPES:
        return "float"
    if type_name in EXACT_FLOAT_TYPES:
        return "float (dequantized exactly)"
    return "refused without --dequantize (then dequantized exactly, --precision decides)"


def summarize(path: Path) -> dict[str, Any]:
    """The `inspect` report of a GGUF file (module doc)."""
    f = open_gguf(path)
    arch = f.architecture
    family = FAMILIES.get(arch)
    by_type: dict[str, dict[str, Any]] = {}
    for tensor in f.tensors.values():
        entry = by_type.setdefault(tensor.type_name, {"tensors": 0, "parameters": 0, "bytes": 0})
        params = 1
        for d in tensor.shape:
            params *= d
        entry["tensors"] += 1
        entry["parameters"] += params
        entry["bytes"] += tensor.nbytes
    for kind, entry in by_type.items():
        entry["bits_per_weight"] = round(8 * entry["bytes"] / max(1, entry["parameters"]), 4)
        entry["exported_as"] = form_of(kind)
    parameters = sum(e["parameters"] for e in by_type.values())
    weight_bytes = sum(e["bytes"] for e in by_type.values())
    tokens = f.metadata.get("tokenizer.ggml.tokens") or []
    file_type = f.metadata.get("general.file_type")
    report: dict[str, Any] = {
        "file": str(f.path),
        "parts": len(f.paths),
        "bytes": f.file_bytes(),
        "architecture": arch,
        "name": f.metadata.get("general.name"),
        "family": _model_type(f, family.model_type if family else None),
        "file_type": FILE_TYPES.get(int(file_type), str(file_type)) if file_type is not None else None,
        "tensors": len(f.tensors),
        "parameters": parameters,
        "bits_per_weight": round(8 * weight_bytes / max(1, parameters), 4),
        "types": dict(sorted(by_type.items(), key=lambda kv: -kv[1]["bytes"])),
        "tokenizer": {
            "model": f.metadata.get("tokenizer.ggml.model"),
            "pre": f.metadata.get("tokenizer.ggml.pre"),
            "tokens": len(tokens),
            "chat_template": bool(f.metadata.get("tokenizer.chat_template")),
        },
        "context_length": f.key("context_length"),
        "layers": f.key("block_count"),
    }
    report["exportable"], report["why_not"] = _exportable(path, arch, by_type)
    return report


def _model_type(f: GgufFile, default: str | None) -> str | None:
    """The model type the metadata reads as (a `llama` file with experts is Mixtral), else the family's."""
    try:
        return str(read_config(f)["model_type"])
    except InputError:
        return default


def _exportable(path: Path, arch: str, by_type: dict[str, dict[str, Any]]) -> tuple[bool, str | None]:
    from gqa_export.source.gguf.config import family_of, read_config
    from gqa_export.source.gguf.store import map_file

    f = open_gguf(path)
    try:
        family_of(f)
        config = read_config(f)
        map_file(arch, list(f.tensors), {n: t.shape for n, t in f.tensors.items()}, config)
    except InputError as exc:
        return False, str(exc)
    odd = [k for k in by_type if k not in FORMS and k not in FLOAT_TYPES and k not in EXACT_FLOAT_TYPES]
    if odd:
        return False, f"{', '.join(sorted(odd))} tensors need --dequantize"
    if not f.metadata.get("tokenizer.ggml.model"):
        return False, "no tokenizer in the file: put tokenizer.json beside it"
    return True, None
