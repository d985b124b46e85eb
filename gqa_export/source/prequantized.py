"""Pre-quantized checkpoints this tool does not import are refused up front, naming the format.

A quantized checkpoint stores integer or FP8 codes plus scales (and zero points) beside, or
instead of, each linear's `weight`. Read as if it were float, it exports a package that loads and
generates garbage (an FP8 block-quantized checkpoint did exactly that: its `weight_scale_inv`
tensors were ignored), or fails far from the cause ("q_proj.weight is missing" for GPTQ). So the
config's `quantization_config` (also inside `text_config`, or the older side files AutoGPTQ and
AutoAWQ write) and the tensor names are checked before anything is built. What each format is,
how it is declared and which variants are imported: its record in source/formats.py
(docs/prequantized.md §1); imported ones are read by source/imported.py, gpt-oss's MXFP4 experts
by the family's graph (graph/experts.py).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from gqa_export.errors import InputError
from gqa_export.source.formats import FORMATS, TENSOR_MARKS, declared

# the refusal's evidence for a config of an imported variant found where it is not imported from
NESTED = "a quantization_config inside text_config"


def imported_config(raw: dict[str, Any], dequantize: bool = False) -> dict[str, Any] | None:
    """The quantization_config of a checkpoint that source/imported.py imports (GPTQ, AWQ GEMM, ...;
    a format read only on request, bitsandbytes, with `dequantize`: build --dequantize), with its
    quant_method spelled as the table does; else None."""
    qc = declared_quantization(raw)  # a multimodal checkpoint's (in text_config) is not imported yet
    if not isinstance(qc, dict):
        return None
    fmt = declared(qc)
    if fmt is None or fmt.why_not is None or fmt.reader is None or (fmt.dequantize and not dequantize):
        return None
    return {**qc, "quant_method": fmt.methods[0]} if fmt.why_not(qc) is None else None


def declared_quantization(config: dict[str, Any]) -> Any:
    """config.json's quantization_config, a top-level `expert_dtype` folded in where it has none, as transformers'
    DeepSeek-V4 config folds it (that release ships `expert_dtype: fp4` beside its FP8 quantization_config)."""
    qc = config.get("quantization_config")
    if isinstance(qc, dict) and "expert_dtype" in config and "expert_dtype" not in qc:
        return {**qc, "expert_dtype": config["expert_dtype"]}
    return qc


def dequantized_on_request(qc: dict[str, Any] | None) -> bool:
    """Whether an imported config is a format only `build --dequantize` reads (bitsandbytes)."""
    fmt = declared(qc) if qc is not None else None
    return fmt is not None and fmt.dequantize


def check_config(raw: dict[str, Any], model_dir: Path, dequantize: bool = False) -> None:
    """Refuse a config that declares a quantization this tool does not import."""
    if imported_config(raw, dequantize) is not None:  # its side files (quantize_config.json) say the same
        return
    for config in (raw, raw.get("text_config")):
        if isinstance(config, dict) and config.get("quantization_config") is not None:
            _refuse_declared(declared_quantization(config), dequantize)
    for fmt in FORMATS:
        for name, says in fmt.side_files:
            if (model_dir / name).is_file():
                _refuse(says, f"it has {name}")


def check_tensors(names: Iterable[str]) -> None:
    """Refuse weights that carry quantization codes or scales, whatever config.json says."""
    for name in names:
        for mark in TENSOR_MARKS:
            if mark.found_in(name):  # `.weight.quant_state.bitsandbytes__nf4`
                _refuse(mark.says, f"it stores {name}")


def _refuse_declared(quantization: Any, dequantize: bool = False) -> None:
    if not isinstance(quantization, dict):
        _refuse("an unknown format", f"config.json's quantization_config is {quantization!r}")
    fmt = declared(quantization)
    method = quantization.get("quant_method")
    if fmt is None:
        _refuse(f"'{method}'", f"config.json's quantization_config says quant_method {method!r}")
    method = fmt.methods[0] if method is None else method  # declared by its older keys
    says = f"config.json's quantization_config says quant_method {method!r}"
    if fmt.why_not is None:  # never imported
        _refuse(fmt.refusal_name, says)
    why = fmt.why_not(quantization)
    if why is None and fmt.reader is None:  # the family's graph reads it wherever it is declared (MXFP4)
        return
    if fmt.dequantize:
        if dequantize:  # the flag was given: say what it does not read (here only a variant or a nested config)
            _refuse(fmt.refusal_name, f"{why or NESTED}; --dequantize does not read it")
        _refuse(fmt.refusal_name, why or says, dequantizable=True)
    _refuse(fmt.refusal_name, why or NESTED)  # imported in general, not this variant (or not there)


def _refuse(fmt: str, evidence: str, dequantizable: bool = False) -> None:
    """`dequantizable`: a declared config of a format `--dequantize` reads (docs/prequantized.md
    §3.9; bitsandbytes' exact onnxruntime forms are far slower on CPU)."""
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
