"""The tiny Kimi-Linear checkpoint (tests/dense_models.py family_config "kimi_linear": KDA layers 0 and 2,
NoPE latent attention at 1, a dense MLP at 0, then 8 experts in 4 groups, the top 2 of the 2 best groups)
in the three layouts its writers use:

- "hub": moonshotai's files: q/k/v_conv1d, f_a/f_b_proj, A_log and dt_bias under self_attn, per-expert
  w1/w3/w2 under block_sparse_moe, the dense MLP under mlp (their modeling code builds `self.mlp` there);
- "saved": transformers' save_pretrained in the hub's format (its default), which reverts the conversion
  mapping but moves the dense MLP under block_sparse_moe too;
- "v5": transformers 5.x's own names (save_original_format=False): one conv1d, self_attn.forget_gate.*,
  fused experts and every MLP under mlp.

    from kimi_models import save_kimi_linear
    p = save_kimi_linear("/tmp/x/kimi")
"""

from __future__ import annotations

import json
from pathlib import Path

from dense_models import build_model
from safetensors.torch import load_file, save_file
from tiny_models import save_tokenizer

LAYOUTS = ("hub", "saved", "v5")


def save_kimi_linear(out_dir, layout: str = "hub", seed: int = 0, **overrides) -> Path:
    """The tiny random Kimi-Linear (same seed: the same weights in every layout), saved in `layout`."""
    assert layout in LAYOUTS, layout
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    build_model("kimi_linear", seed, **overrides).save_pretrained(out, save_original_format=layout != "v5")
    save_tokenizer(out, vocab_size=384)
    if layout == "hub":
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
