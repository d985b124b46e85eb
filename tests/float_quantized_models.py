"""Tiny compressed-tensors `float-quantized` (FP8) checkpoints and their dequantized float twins.

llm-compressor's FP8 schemes store each quantized Linear `P` as float8 e4m3 `P.weight` [N, K] and
`P.weight_scale` in the model dtype: [1] (strategy tensor), [N, 1] (channel, FP8_DYNAMIC),
[N, K/group] (group) or [ceil(N/bn), ceil(K/bk)] (block, `block_structure` [bn, bk]), plus
`P.input_scale` when the activations are static FP8. The twin holds float(w8) * scale in fp32.

    ct_fp8_pair(tmp, strategy="channel", scale_dtype="bfloat16") -> (quantized, twin)
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
from prequant_models import LINEARS
from safetensors.numpy import load_file, save_file
from tiny_models import save_llama

BLOCK = (32, 48)  # not square, partial last blocks of the 64- and 128-wide weights
GROUP = 32


def _cover(strategy: str, n: int, k: int) -> tuple[int, int]:
    """The [rows, cols] one scale covers."""
    return {"tensor": (n, k), "channel": (1, k), "group": (1, GROUP), "block": BLOCK}[strategy]


def ct_fp8_pair(tmp: Path, strategy: str = "channel", scale_dtype: str = "bfloat16") -> tuple[Path, Path]:
    import ml_dtypes
    import torch
    from safetensors.torch import save_file as save_torch

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
    base = save_llama(tmp / f"ct-fp8-{strategy}-float")
    tensors = load_file(base / "model.safetensors")
    quantized: dict[str, torch.Tensor] = {}
    twin = dict(tensors)
    for key, w in tensors.items():
        if key.split(".")[-2] not in LINEARS or not key.endswith(".weight"):
            quantized[key] = torch.from_numpy(w)
            continue
        n, k = w.shape
        bn, bk = _cover(strategy, n, k)
        rows, cols = np.arange(n) // bn, np.arange(k) // bk
        amax = np.zeros((-(-n // bn), -(-k // bk)), np.float32)
        np.maximum.at(amax, (rows[:, None], cols[None, :]), np.abs(w))
        scale = torch.from_numpy(amax / 448.0).to(getattr(torch, scale_dtype))
        if strategy == "tensor":
            scale = scale.reshape(1)
        full = scale.float().numpy().reshape(amax.shape)[rows][:, cols]
        w8 = (w / full).astype(ml_dtypes.float8_e4m3fn)
        twin[key] = w8.astype(np.float32) * full
        prefix = key.removesuffix(".weight")
        quantized[key] = torch.from_numpy(w8.view(np.uint8)).view(torch.float8_e4m3fn)
        quantized[f"{prefix}.weight_scale"] = scale
        if static:
            quantized[f"{prefix}.input_scale"] = torch.tensor([0.02], dtype=getattr(torch, scale_dtype))
    name = f"ct-fp8-{strategy}"
    out_q, out_t = tmp / name, tmp / f"{name}-twin"
    shutil.copytree(base, out_q)
    shutil.copytree(base, out_t)
    save_torch({k: v.contiguous() for k, v in quantized.items()}, str(out_q / "model.safetensors"),
               metadata={"format": "pt"})  # fmt: skip
    save_file({k: np.ascontiguousarray(v) for k, v in twin.items()}, str(out_t / "model.safetensors"),
              metadata={"format": "pt"})  # fmt: skip
    config = json.loads((out_q / "config.json").read_text())
    config["quantization_config"] = qc
    (out_q / "config.json").write_text(json.dumps(config))
    return out_q, out_t


def _is_quantized_linear(key: str, value: np.ndarray) -> bool:
    """What FP8 MoE releases quantize: every 2-D linear inside the layers (attention, MLA's low-rank
    projections, experts, shared experts), not the router (`mlp.gate`), norms, embeddings or lm_head."""
    return key.startswith("model.layers.") and key.endswith(".weight") and value.ndim == 2 and ".mlp.gate." not in key


def fp8_moe_pair(tmp: Path, moe: str, scheme: str = "block", block: tuple[int, int] = (16, 24)) -> tuple[Path, Path]:
    """A tests/moe_models.py MoE checkpoint (hub layout: one Linear per expert, 2 layers) in FP8.

    scheme "block": `quant_method: fp8`, fp32 `weight_scale_inv` [ceil(N/bn), ceil(K/bk)] (DeepSeek-V3 /
    Qwen3 FP8's layout; (16, 24) leaves partial last blocks on every 64-, 40- and 32-wide side);
    "channel": compressed-tensors float-quantized, bf16 `weight_scale` [N, 1] (FP8_DYNAMIC)."""
    import ml_dtypes
    import torch
    from moe_models import save_moe
    from safetensors.torch import save_file as save_torch

    extra = {"mlp_only_layers": [1]} if moe == "qwen3_moe" else {}
    base = save_moe(tmp / f"{moe}-{scheme}-float", moe, num_hidden_layers=2, **extra)
    tensors = load_file(base / "model.safetensors")
    quantized: dict[str, torch.Tensor] = {}
    twin = dict(tensors)
    for key, w in tensors.items():
        if not _is_quantized_linear(key, w):
            quantized[key] = torch.from_numpy(w)
            continue
        n, k = w.shape
        bn, bk = block if scheme == "block" else (1, k)
        rows, cols = np.arange(n) // bn, np.arange(k) // bk
        amax = np.zeros((-(-n // bn), -(-k // bk)), np.float32)
        np.maximum.at(amax, (rows[:, None], cols[None, :]), np.abs(w))
        scale = torch.from_numpy(amax / 448.0)
        if scheme == "channel":
            scale = scale.to(torch.bfloat16)
        full = scale.float().numpy()[rows][:, cols]
        w8 = (w / full).astype(ml_dtypes.float8_e4m3fn)
        twin[key] = w8.astype(np.float32) * full
        prefix = key.removesuffix(".weight")
        quantized[key] = torch.from_numpy(w8.view(np.uint8)).view(torch.float8_e4m3fn)
        quantized[f"{prefix}.weight_scale_inv" if scheme == "block" else f"{prefix}.weight_scale"] = scale
    if scheme == "block":
        qc = {"quant_method": "fp8", "activation_scheme": "dynamic", "fmt": "e4m3", "weight_block_size": list(block)}
    else:
        weights = {"num_bits": 8, "type": "float", "symmetric": True, "strategy": "channel", "dynamic": False}
        activations = {"num_bits": 8, "type": "float", "symmetric": True, "dynamic": True, "strategy": "token"}
        group = {"targets": ["Linear"], "weights": weights, "input_activations": activations,
                 "format": "float-quantized"}  # fmt: skip
        qc = {"quant_method": "compressed-tensors", "format": "float-quantized",
              "ignore": ["lm_head", "re:.*mlp.gate$"], "config_groups": {"group_0": group}}  # fmt: skip
    out_q, out_t = tmp / f"{moe}-fp8-{scheme}", tmp / f"{moe}-fp8-{scheme}-twin"
    shutil.copytree(base, out_q)
    shutil.copytree(base, out_t)
    save_torch({k: v.contiguous() for k, v in quantized.items()}, str(out_q / "model.safetensors"),
               metadata={"format": "pt"})  # fmt: skip
    save_file({k: np.ascontiguousarray(v) for k, v in twin.items()}, str(out_t / "model.safetensors"),
              metadata={"format": "pt"})  # fmt: skip
    config = json.loads((out_q / "config.json").read_text())
    config["quantization_config"] = qc
    (out_q / "config.json").write_text(json.dumps(config))
    return out_q, out_t
