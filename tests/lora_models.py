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

import numpy as np
import torch
from reference import hf_generate, hf_model

from gqa_export.runtime.run import load, load_adapters

# the shipped tiny Llama the LoRA tests build their bases from, the prompt they compare on, the
# greedy tokens they generate, and the bound on |genai - HF merged| prompt logits (fp32)
CHECKPOINT = Path(__file__).resolve().parent / "data" / "tiny-llama"
PROMPT = [0, 20, 31, 44, 52, 67, 70, 83, 91, 120, 150, 200]
NEW = 12
BOUND = 1e-4


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


def genai(package: Path, files: list[Path], prompts: list[list[int]] | None = None) -> tuple[np.ndarray, list]:
    """onnxruntime-genai with `files` active together: (first row's prompt logits, greedy tokens per
    row). Several prompts run as one batch, right-padded with the pad id 5 as genai expects."""
    import onnxruntime_genai as og

    prompts = prompts or [PROMPT]
    model = load(package, "cpu")
    active = load_adapters(model, files) if files else None
    width = max(map(len, prompts))
    params = og.GeneratorParams(model)
    params.set_search_options(do_sample=False, batch_size=len(prompts), max_length=width + NEW, min_length=width + NEW)
    generator = og.Generator(model, params)
    if active is not None:
        for name in active[1]:
            generator.set_active_adapter(active[0], name)
    generator.append_tokens(np.array([p + [5] * (width - len(p)) for p in prompts], dtype=np.int32))
    logits = np.asarray(generator.get_output("logits"))[0]
    while not generator.is_done():
        generator.generate_next_token()
    return logits, [[int(t) for t in generator.get_sequence(r)][width:] for r in range(len(prompts))]


def hf_reference(adapter_dirs: list[Path], prompt: list[int] = PROMPT) -> tuple[np.ndarray, list[int]]:
    model = merged_model(CHECKPOINT, adapter_dirs) if adapter_dirs else hf_model(CHECKPOINT)
    with torch.no_grad():
        logits = model(torch.tensor([prompt])).logits[0].numpy()
    return logits, hf_generate(model, prompt, NEW)
