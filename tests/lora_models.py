"""PEFT LoRA adapters written by hand (the peft package is not a test dependency) and the HF
reference with adapters merged into the base weights.

A PEFT adapter folder is `adapter_config.json` plus `adapter_model.safetensors` holding
`base_model.model.<module>.lora_A.weight` [r, in] and `....lora_B.weight` [out, r]; PEFT computes
`x @ Aᵀ @ Bᵀ * scaling` (scaling = lora_alpha / r, or / √r with use_rslora), so merging is
`W += scaling * B @ A`.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import torch


def save_adapter(
    out_dir: Path,
    checkpoint: Path,
    targets: list[str],
    r: int,
    alpha: float,
    seed: int,
    layers: list[int] | None = None,
    use_rslora: bool = False,
    std: float = 0.3,
    **config: Any,
) -> Path:
    """A random LoRA adapter on `targets` (module names) of the checkpoint's decoder layers."""
    from reference import hf_model
    from safetensors.torch import save_file

    model = hf_model(checkpoint)
    generator = torch.Generator().manual_seed(seed)
    tensors = {}
    for name, module in model.named_modules():
        if not isinstance(module, torch.nn.Linear) or name.rpartition(".")[2] not in targets:
            continue
        layer = int(name.split("layers.")[1].split(".")[0])
        if layers is not None and layer not in layers:
            continue
        out_f, in_f = module.weight.shape
        tensors[f"base_model.model.{name}.lora_A.weight"] = torch.randn(r, in_f, generator=generator) * std
        tensors[f"base_model.model.{name}.lora_B.weight"] = torch.randn(out_f, r, generator=generator) * std
    out_dir.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(out_dir / "adapter_model.safetensors"))
    settings = {
        "peft_type": "LORA",
        "r": r,
        "lora_alpha": alpha,
        "use_rslora": use_rslora,
        "target_modules": targets,
        "bias": "none",
        "use_dora": False,
        "fan_in_fan_out": False,
        "modules_to_save": None,
        **config,
    }
    (out_dir / "adapter_config.json").write_text(json.dumps(settings))
    return out_dir


def merged_model(checkpoint: Path, adapters: list[Path]) -> Any:
    """HF's model with every adapter merged: W += scaling * B @ A per module."""
    from reference import hf_model
    from safetensors.torch import load_file

    model = hf_model(checkpoint)
    modules = dict(model.named_modules())
    for folder in adapters:
        config = json.loads((folder / "adapter_config.json").read_text())
        tensors = load_file(str(folder / "adapter_model.safetensors"))
        for key, a in tensors.items():
            if ".lora_A." not in key:
                continue
            b = tensors[key.replace(".lora_A.", ".lora_B.")]
            r = a.shape[0]
            scaling = config["lora_alpha"] / (math.sqrt(r) if config.get("use_rslora") else r)
            name = key.removeprefix("base_model.model.").removesuffix(".lora_A.weight")
            with torch.no_grad():
                modules[name].weight += scaling * (b @ a)
    return model
