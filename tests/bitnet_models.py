"""Tiny BitNet b1.58 checkpoints in transformers' packed ternary layout (quant_method "bitnet").

The tiny float BitNet of tests/dense_models.py is quantized the way BitNet b1.58 trains its weights
(transformers' `WeightQuant`: one scale per tensor, 1 / mean|W|; codes round(W * scale) clamped to
{-1, 0, 1}), and each decoder Linear is written as transformers' bitnet integration stores it
(its own `pack_weights`: four output rows a byte, `P.weight` uint8 [N/4, K], codes + 1), with
`P.weight_scale` [1] as the checkpoint's `linear_class` reads it: BitLinear divides the output by it
(weight_scale = 1 / mean|W|), AutoBitLinear multiplies (weight_scale = mean|W|). The lm_head and the
embeddings stay float, as transformers' quantizer leaves them. HF runs the result through BitLinear /
AutoBitLinear, int8 absmax activations per token included: that is the reference.

    save_bitnet_packed(folder, linear_class="bitlinear") -> folder
"""

from __future__ import annotations

import json
from pathlib import Path

LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def ternary(weight):
    """transformers' WeightQuant on W (fp32): codes in {-1, 0, 1} and the scale 1 / mean|W|."""

    scale = 1.0 / weight.abs().mean().clamp(min=1e-5)
    return (weight * scale).round().clamp(-1, 1), scale


def save_bitnet_packed(out_dir: Path, linear_class: str = "bitlinear", seed: int = 0, **overrides) -> Path:
    from dense_models import build_model
    from safetensors.torch import save_file
    from tiny_models import save_tokenizer
    from transformers.integrations.bitnet import pack_weights

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model = build_model("bitnet", seed, **overrides)
    tensors = {}
    tied = model.config.tie_word_embeddings  # the table is stored once, as save_pretrained does
    for name, value in model.state_dict().items():
        if tied and name == "lm_head.weight":
            continue
        module = name.removesuffix(".weight")
        if name.endswith(".weight") and module.rsplit(".", 1)[-1] in LINEARS:
            codes, scale = ternary(value.float())
            tensors[name] = pack_weights(codes.clone()).contiguous()
            kept = scale if linear_class == "bitlinear" else 1.0 / scale
            tensors[f"{module}.weight_scale"] = kept.reshape(1).to(value.dtype)
        else:
            tensors[name] = value.contiguous()
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    config = model.config.to_dict()
    config["quantization_config"] = {
        "quant_method": "bitnet", "linear_class": linear_class, "quantization_mode": "offline",
    }  # fmt: skip
    config.pop("dtype", None)
    config["architectures"] = ["BitNetForCausalLM"]
    (out / "config.json").write_text(json.dumps(config, indent=2))
    save_tokenizer(out, vocab_size=384)
    return out
