"""The closed sets of values the options take, one table each.

The validators (quantize.plan_precision, recipes, release specs) and the CLI read these tables: the
CLI's enums and the help text that lists the choices are generated from them, so `--help` cannot
drift from what the code accepts (tests/cli/test_help.py checks it).
"""

from __future__ import annotations

EPS: dict[str, str] = {
    "cpu": "CPUExecutionProvider",
    "cuda": "CUDAExecutionProvider",
}
PRECISIONS: dict[str, str] = {
    "fp32": "float32 weights and activations",
    "fp16": "float16 weights and activations",
    "bf16": "bfloat16 weights and activations, fp32 logits",
    "int4": "4-bit MatMulNBits weights, float activations",
    "int8": "8-bit MatMulNBits weights, float activations",
}
# Precisions each EP has kernels for, and why the others are refused.
SUPPORTED: dict[str, tuple[str, ...]] = {
    "cpu": ("fp32", "fp16", "int4", "int8"),
    "cuda": ("fp16", "bf16", "int4", "int8"),
}
WHY_NOT: dict[tuple[str, str], str] = {
    ("cpu", "bf16"): "ORT's CPU GroupQueryAttention has no bf16 kernel",
    ("cuda", "fp32"): "ORT's CUDA GroupQueryAttention has no fp32 kernel",
}
ATTENTION_MODES: dict[str, str] = {
    "gqa": "GroupQueryAttention on the in-place KV buffer",
    "bias": "standard Attention with an additive mask on the in-place buffer",
    "split": "prefill Attention+bias / decode GQA on one shared buffer (decoder pipeline)",
    "auto": "the recipe's measured choice for the model and EP",
}
QUANT_METHODS: dict[str, str] = {
    "rtn": "round to nearest per block (onnxruntime's quantizer); fast, the default",
    "search": "per-block clipped-scale search minimizing squared error; slower, symmetric only",
    "k_quant": "asymmetric blocks, scale and zero point searched against an importance-weighted error "
    "(llama.cpp's k-quant idea); slowest, writes zero points",
}
# --mixed-precision selectors (besides weight-name patterns): which MatMuls get another bit width.
MIXED_SELECTORS: dict[str, str] = {
    "last_matmul": "the lm_head",
    "sensitive_layers": "attention V (the packed QKV) and MLP down projections of the first and last eighth "
    "of the layers and every third layer between (llama.cpp's use_more_bits rule)",
}
# int4/int8 activation dtypes: MatMulNBits/GQA kernels exist for fp32 on CPU, fp16/bf16 on CUDA.
ACTIVATIONS: dict[str, tuple[str, ...]] = {"cpu": ("fp32",), "cuda": ("fp16", "bf16")}
ALL_ACTIVATIONS: tuple[str, ...] = ("fp32", "fp16", "bf16")


def listing(table: dict[str, str] | tuple[str, ...], conjunction: str = "or") -> str:
    """'a, b or c' for the keys of a table (the wording of the help text and of error messages)."""
    names = list(table)
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} {conjunction} {names[-1]}"


def precision_help() -> str:
    per_ep = "; ".join(f"{ep}: {' '.join(SUPPORTED[ep])}" for ep in EPS)
    return f"{listing(PRECISIONS)} ({per_ep}). Default: the recipe's for the EP."


def described(table: dict[str, str]) -> str:
    """'a (what a is); b (what b is)': a table's choices with their one-line descriptions."""
    return "; ".join(f"{name}: {what}" for name, what in table.items())
