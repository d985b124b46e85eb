"""The closed sets of values the options take, one table each.

The validators (quantize.plan_precision, recipes, release specs) and the CLI read these tables: the
CLI's enums and the help text that lists the choices are generated from them, so `--help` cannot
drift from what the code accepts (tests/cli/test_help.py checks it). What differs per execution
provider comes from the EP table (eps.py); the views below are derived from it.
"""

from __future__ import annotations

from gqa_export import eps as _eps

EPS: dict[str, str] = {ep.name: ep.ort_provider for ep in _eps.EPS.values()}
PRECISIONS: dict[str, str] = {
    "fp32": "float32 weights and activations",
    "fp16": "float16 weights and activations",
    "bf16": "bfloat16 weights and activations, fp32 logits",
    "int4": "4-bit MatMulNBits weights, float activations",
    "int8": "8-bit MatMulNBits weights, float activations",
}
# Precisions each EP has kernels for, and why the others are refused.
SUPPORTED: dict[str, tuple[str, ...]] = {ep.name: ep.precisions for ep in _eps.EPS.values()}
WHY_NOT: dict[tuple[str, str], str] = {
    (ep.name, precision): why for ep in _eps.EPS.values() for precision, why in ep.refused.items()
}
ATTENTION_MODES: dict[str, str] = {
    "gqa": "GroupQueryAttention on the in-place KV buffer",
    "bias": "standard Attention with an additive mask on the in-place buffer",
    "split": "prefill Attention+bias / decode GQA on one shared buffer (decoder pipeline)",
    "auto": "the recipe's measured choice for the model and EP",
}
# --encoder-precision: a full multimodal package's vision model (docs/multimodal.md §17)
ENCODER_PRECISIONS: dict[str, str] = {
    "float": "the activation dtype, exact (the default)",
    "int8": "8-bit MatMulNBits linears, features about 1 % off",
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
ACTIVATIONS: dict[str, tuple[str, ...]] = {ep.name: ep.quantized_activations for ep in _eps.EPS.values()}
KV_CACHE_DTYPES: dict[str, str] = {
    "float": "the activation dtype (default)",
    "int8": "int8 cache, 1 byte a value",
    "int4": "4-bit cache, two values a byte",
}
KV_SCALES: dict[str, str] = {"per-channel": "one scale per kv head and channel", "per-tensor": "one scale per layer"}
ALL_ACTIVATIONS: tuple[str, ...] = ("fp32", "fp16", "bf16")


def listing(table: dict[str, str] | tuple[str, ...], conjunction: str = "or") -> str:
    """'a, b or c' for the keys of a table (the wording of the help text and of error messages)."""
    names = list(table)
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} {conjunction} {names[-1]}"


def precision_help() -> str:
    per_ep = "; ".join(f"{ep}: {' '.join(SUPPORTED[ep]) or 'none (refused)'}" for ep in EPS)
    return f"{listing(PRECISIONS)} ({per_ep}). Default: the recipe's for the EP."


def described(table: dict[str, str]) -> str:
    """'a (what a is); b (what b is)': a table's choices with their one-line descriptions."""
    return "; ".join(f"{name}: {what}" for name, what in table.items())
