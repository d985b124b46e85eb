"""The int4/int8 options of a build or `quantize`, as the command line gives them."""

from __future__ import annotations

from dataclasses import dataclass

from gqa_export.errors import InputError


@dataclass(frozen=True)
class QuantOptions:
    block_size: int = 32
    # None: the method's default -- zero points for rtn and k_quant (measured on a trained
    # checkpoint: int4 rtn block 32 +2.3% perplexity asymmetric vs +3.8% symmetric, for 0.7% more
    # bytes; CHANGELOG/#15), symmetric for search (its grid is symmetric only)
    asymmetric: bool | None = None
    method: str = "rtn"  # rtn (onnxruntime's block quantizer) | search (per-block scale search)
    accuracy_level: int | None = None  # None: 4 on CPU, 0 on CUDA
    keep_float: tuple[str, ...] = ()  # fnmatch patterns on weight or node names
    embeddings: bool = False  # int4/int8 embedding table even when untied (tied ones always share)
    activations: str | None = None  # CUDA: fp16 (default) or bf16; CPU: fp32 (default) or fp16
    mixed_precision: tuple[str, ...] = ()  # SELECTOR:int8|int4 (choices.MIXED_SELECTORS or a name pattern)


# the int4/int8 options and the flag that sets each (a float build ignores them: refused, not dropped)
_QUANT_FLAGS = {
    "block_size": "--block-size",
    "asymmetric": "--asymmetric/--symmetric",
    "method": "--quant-method",
    "accuracy_level": "--accuracy-level",
    "keep_float": "--keep-float",
    "embeddings": "--quant-embeddings",
    "activations": "--activations",
    "mixed_precision": "--mixed-precision",
}


def refuse_on_float(precision: str, quant: QuantOptions | None) -> None:
    """A float build has no quantization to apply the int4/int8 options to: name the first one set."""
    if quant is None:
        return
    default = QuantOptions()
    for field_name, flag in _QUANT_FLAGS.items():
        if getattr(quant, field_name) != getattr(default, field_name):
            raise InputError(
                f"{flag} applies to int4/int8 packages, not --precision {precision}; drop it or choose int4/int8"
            )
