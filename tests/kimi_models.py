"""The tiny Kimi-Linear checkpoint (tests/dense_models.py family_config "kimi_linear": KDA layers 0 and 2,
NoPE latent attention at 1, a dense MLP at 0, then 8 experts in 4 groups, the top 2 of the 2 best groups)
written in the hub's layout: transformers' save_pretrained reverts its conversion mapping (q/k/v_conv1d,
f_a/f_b_proj, A_log and dt_bias under self_attn, per-expert w1/w3/w2 under block_sparse_moe) but moves
the dense MLP under block_sparse_moe too, where moonshotai's checkpoints keep it at mlp (their modeling
code builds `self.mlp` on the dense layers); it is moved back here.

    from kimi_models import save_kimi_linear
    p = save_kimi_linear("/tmp/x/kimi")
"""

from __future__ import annotations

import json
from pathlib import Path

from dense_models import save_dense
from safetensors.torch import load_file, save_file


def save_kimi_linear(out_dir, **overrides) -> Path:
    """save_dense's kimi_linear with the dense layers' MLP renamed block_sparse_moe. -> mlp."""
    out = save_dense(out_dir, "kimi_linear", **overrides)
    config = json.loads((out / "config.json").read_text())
    dense = [i for i, kind in enumerate(config["mlp_layer_types"]) if kind == "dense"]
    path = out / "model.safetensors"
    tensors = load_file(path)
    for i in dense:
        for part in ("gate_proj", "up_proj", "down_proj"):
            old = f"model.layers.{i}.block_sparse_moe.{part}.weight"
            tensors[f"model.layers.{i}.mlp.{part}.weight"] = tensors.pop(old)
    save_file(tensors, path, metadata={"format": "pt"})
    return out
