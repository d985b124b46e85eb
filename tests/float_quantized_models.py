"""Tiny compressed-tensors `float-quantized` (FP8) checkpoints and their dequantized float twins.

llm-compressor's FP8 schemes store each quantized Linear `P` as float8 e4m3 `P.weight` [N, K] and
`P.weight_scale` in the model dtype: [1] (strategy tensor), [N, 1] (channel, FP8_DYNAMIC),
[N, K/group] (group) or [ceil(N/bn), ceil(K/bk)] (block, `block_structure` [bn, bk]), plus
`P.input_scale` when the activations are static FP8. The twin holds float(w8) * scale in fp32.

    ct_fp8_pair(tmp, strategy="channel", scale_dtype="bfloat16") -> (quantized, twin)
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from prequant_models import fp8_block_scales, write_fp8_pair

BLOCK = (32, 48)  # not square, partial last blocks of the 64- and 128-wide weights
GROUP = 32


def _cover(strategy: str, n: int, k: int) -> tuple[int, int]:
    """The [rows, cols] one scale covers."""
    return {"tensor": (n, k), "channel": (1, k), "group": (1, GROUP), "block": BLOCK}[strategy]


def ct_fp8_pair(tmp: Path, strategy: str = "channel", scale_dtype: str = "bfloat16") -> tuple[Path, Path]:
    import torch

    weights = {"num_bits": 8, "type": "float", "symmetric": True, "strategy": strategy, "dynamic": False,
               "group_size": GROUP if strategy == "group" else None,
               "block_structure": list(BLOCK) if strategy == "block" else None}  # fmt: skip
    static = strategy == "tensor"  # FP8 static: a per-tensor input_scale; else FP8_DYNAMIC per token
    activations = {"num_bits": 8, "type": "float", "symmetric": True, "dynamic": not static,
                   "strategy": "tensor" if static else "token"}  # fmt: skip
    qc = {"quant_method": "compressed-tensors", "format": "float-quantized", "quantization_status": "compressed",
          "ignore": ["lm_head"], "config_groups": {"group_0": {
              "targets": ["Linear"], "weights": weights, "input_activations": activations,
              "output_activations": None, "format": "float-quantized"}}}  # fmt: skip

    def scales(w: np.ndarray) -> tuple[np.ndarray, dict[str, object]]:
        amax, rows, cols = fp8_block_scales(w, *_cover(strategy, *w.shape))
        scale = torch.from_numpy(amax).to(getattr(torch, scale_dtype))
        stored = {"weight_scale": scale.reshape(1) if strategy == "tensor" else scale}
        if static:
            stored["input_scale"] = torch.tensor([0.02], dtype=getattr(torch, scale_dtype))
        return scale.float().numpy()[rows][:, cols], stored

    return write_fp8_pair(tmp, f"ct-fp8-{strategy}", qc, scales)


def _is_quantized_linear(key: str, value: np.ndarray) -> bool:
    """What FP8 MoE releases quantize: every 2-D linear inside the layers (attention, MLA's low-rank
    projections, experts, shared experts), not the router (`mlp.gate`), norms, embeddings or lm_head."""
    return key.startswith("model.layers.") and key.endswith(".weight") and value.ndim == 2 and ".mlp.gate." not in key


def fp8_moe_pair(tmp: Path, moe: str, scheme: str = "block", block: tuple[int, int] = (16, 24)) -> tuple[Path, Path]:
    """A tests/moe_models.py MoE checkpoint (hub layout: one Linear per expert, 2 layers) in FP8.

    scheme "block": `quant_method: fp8`, fp32 `weight_scale_inv` [ceil(N/bn), ceil(K/bk)] (DeepSeek-V3 /
    Qwen3 FP8's layout; (16, 24) leaves partial last blocks on every 64-, 40- and 32-wide side);
    "channel": compressed-tensors float-quantized, bf16 `weight_scale` [N, 1] (FP8_DYNAMIC)."""
    import torch
    from moe_models import save_moe

    extra = {"mlp_only_layers": [1]} if moe == "qwen3_moe" else {}
    base = save_moe(tmp / f"{moe}-{scheme}-float", moe, num_hidden_layers=2, **extra)

    def scales(w: np.ndarray) -> tuple[np.ndarray, dict[str, object]]:
        amax, rows, cols = fp8_block_scales(w, *(block if scheme == "block" else (1, w.shape[1])))
        scale = torch.from_numpy(amax)
        if scheme == "channel":
            scale = scale.to(torch.bfloat16)
        return scale.float().numpy()[rows][:, cols], {
            "weight_scale_inv" if scheme == "block" else "weight_scale": scale
        }

    if scheme == "block":
        qc = {"quant_method": "fp8", "activation_scheme": "dynamic", "fmt": "e4m3", "weight_block_size": list(block)}
    else:
        weights = {"num_bits": 8, "type": "float", "symmetric": True, "strategy": "channel", "dynamic": False}
        activations = {"num_bits": 8, "type": "float", "symmetric": True, "dynamic": True, "strategy": "token"}
        group = {"targets": ["Linear"], "weights": weights, "input_activations": activations,
                 "format": "float-quantized"}  # fmt: skip
        qc = {"quant_method": "compressed-tensors", "format": "float-quantized",
              "ignore": ["lm_head", "re:.*mlp.gate$"], "config_groups": {"group_0": group}}  # fmt: skip
    return write_fp8_pair(tmp, f"{moe}-fp8-{scheme}", qc, scales, base=base, quantizes=_is_quantized_linear)
