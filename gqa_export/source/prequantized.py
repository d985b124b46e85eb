"""Pre-quantized checkpoints this tool does not import are refused up front, naming the format.

A quantized checkpoint stores integer or FP8 codes plus scales (and zero points) beside, or
instead of, each linear's `weight`. Read as if it were float, it exports a package that loads and
generates garbage (an FP8 block-quantized checkpoint did exactly that: its `weight_scale_inv`
tensors were ignored), or fails far from the cause ("q_proj.weight is missing" for GPTQ). So the
config's `quantization_config` (also inside `text_config`, or the older side files AutoGPTQ and
AutoAWQ write) and the tensor names are checked before anything is built. Imported: gpt-oss's
MXFP4 experts, dequantized exactly while streaming (graph/experts.py); GPTQ / AWQ GEMM /
compressed-tensors pack-quantized / Quark int4 linears, whose integers go into MatMulNBits as they are; FP8
linears, dequantized exactly (source/imported.py, docs/prequantized.md).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from gqa_export.errors import InputError
from gqa_export.source.bnb import is_bitsandbytes, why_not_bitsandbytes
from gqa_export.source.imported import is_imported, why_not_imported

IMPORTED = frozenset({"mxfp4"})
# imported when the variant is (source/imported.py, docs/prequantized.md §1): the integers kept, or
# FP8 dequantized exactly
NATIVE = frozenset({"gptq", "awq", "compressed-tensors", "fp8", "quark"})
# quant_method -> the format's name as its users know it
FORMATS = {
    "gptq": "GPTQ",
    "awq": "AWQ",
    "compressed-tensors": "compressed-tensors (llm-compressor)",
    "quark": "Quark",
    "fp8": "FP8 (block-quantized, weight_scale_inv)",
    "fbgemm_fp8": "FBGEMM FP8",
    "bitsandbytes": "bitsandbytes",
    "hqq": "HQQ",
    "olive": "Olive",
    "modelopt": "ModelOpt",
    "torchao": "torchao",
    "eetq": "EETQ",
    "aqlm": "AQLM",
    "vptq": "VPTQ",
    "bitnet": "BitNet",
    "higgs": "HIGGS",
    "spqr": "SpQR",
    "fp_quant": "FP-Quant",
    "gguf": "GGUF",
}
# files older quantizers write beside config.json instead of a quantization_config
SIDE_FILES = {
    "quantize_config.json": "GPTQ (AutoGPTQ quantize_config.json)",
    "quant_config.json": "AWQ (quant_config.json)",
}
# tensor name endings that carry quantization codes, scales or zero points -> the format
TENSOR_MARKS = (
    (".qweight", "GPTQ or AWQ (qweight / qzeros / scales tensors)"),
    (".qzeros", "GPTQ or AWQ (qweight / qzeros / scales tensors)"),
    (".g_idx", "GPTQ (g_idx tensors)"),
    (".weight_scale_inv", "FP8 (block-quantized, weight_scale_inv tensors)"),
    (".weight_packed", "compressed-tensors pack-quantized (weight_packed tensors)"),
    (".weight_scale", "FP8 or compressed-tensors (weight_scale tensors)"),
    (".weight_zero_point", "compressed-tensors (weight_zero_point tensors)"),
    (".input_scale", "FP8 (input_scale tensors)"),
    (".absmax", "bitsandbytes 4-bit (absmax tensors)"),
    (".quant_map", "bitsandbytes 4-bit (quant_map tensors)"),
    (".SCB", "bitsandbytes 8-bit (SCB tensors)"),
    (".quant_state", "bitsandbytes 4-bit (quant_state tensors)"),
    (".W_q", "HQQ (W_q tensors)"),
)


def imported_config(raw: dict[str, Any], dequantize: bool = False) -> dict[str, Any] | None:
    """The quantization_config of a checkpoint that is imported (GPTQ, AWQ GEMM, ..., bitsandbytes
    with `dequantize`: build --dequantize), else None."""
    qc = raw.get("quantization_config")  # a multimodal checkpoint's (in text_config) is not imported yet
    if dequantize and isinstance(qc, dict) and is_bitsandbytes(qc) and why_not_bitsandbytes(qc) is None:
        return {**qc, "quant_method": "bitsandbytes"}
    if not isinstance(qc, dict) or str(qc.get("quant_method", "")).lower() not in NATIVE:
        return None
    return qc if is_imported(qc) else None


def check_config(raw: dict[str, Any], model_dir: Path, dequantize: bool = False) -> None:
    """Refuse a config that declares a quantization this tool does not import."""
    if imported_config(raw, dequantize) is not None:  # its side files (quantize_config.json) say the same
        return
    for config in (raw, raw.get("text_config")):
        if isinstance(config, dict) and config.get("quantization_config") is not None:
            _refuse_declared(config["quantization_config"], dequantize)
    for name, fmt in SIDE_FILES.items():
        if (model_dir / name).is_file():
            _refuse(fmt, f"it has {name}")


def check_tensors(names: Iterable[str]) -> None:
    """Refuse weights that carry quantization codes or scales, whatever config.json says."""
    for name in names:
        for ending, fmt in TENSOR_MARKS:
            if name.endswith(ending) or f"{ending}." in name:  # `.weight.quant_state.bitsandbytes__nf4`
                _refuse(fmt, f"it stores {name}")


def _refuse_declared(quantization: Any, dequantize: bool = False) -> None:
    if not isinstance(quantization, dict):
        _refuse("an unknown format", f"config.json's quantization_config is {quantization!r}")
    method = quantization.get("quant_method")
    if method is None and (quantization.get("load_in_4bit") or quantization.get("load_in_8bit")):
        method = "bitsandbytes"
    if method is None and quantization.get("quant_algo"):
        method = "modelopt"
    if method in IMPORTED:
        return
    fmt = FORMATS.get(str(method).lower(), f"'{method}'")
    if method == "bitsandbytes":
        declared = "config.json's quantization_config says quant_method 'bitsandbytes'"
        why = why_not_bitsandbytes(quantization)
        if dequantize:  # the flag was given: say what it does not read (here only a variant or a nested config)
            _refuse(fmt, f"{why or 'a quantization_config inside text_config'}; --dequantize does not read it")
        _refuse(fmt, why or declared, dequantizable=True)
    if str(method).lower() in NATIVE:  # imported in general, not this variant
        _refuse(fmt, f"{why_not_imported(quantization)}")
    _refuse(fmt, f"config.json's quantization_config says quant_method {method!r}")


def _refuse(fmt: str, evidence: str, dequantizable: bool = False) -> None:
    """`dequantizable`: a declared bitsandbytes config, which `--dequantize` reads (docs/prequantized.md
    §3.9; its exact onnxruntime forms are far slower on CPU)."""
    if dequantizable:
        raise InputError(
            f"this is a pre-quantized {fmt} checkpoint ({evidence}), which gqa-export does not import as it is; "
            "pass --dequantize to dequantize it exactly and follow --precision (int4/int8 re-quantize it), "
            "or export the model's float checkpoint"
        )
    raise InputError(
        f"this is a pre-quantized {fmt} checkpoint ({evidence}), which gqa-export does not import yet; "
        "export the model's float (fp16/bf16/fp32) checkpoint and choose --precision int4/int8 instead"
    )
