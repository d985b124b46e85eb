"""A PEFT LoRA adapter folder's settings: adapter_config.json read and refused where the adapter is
not plain LoRA, each module's scaling, and its A/B tensor pairs (every tensor one). Read by
`gqa-export adapter` (package/adapters.py) and by a build that merges a checkpoint's own adapter into
the decoder (source/merged_adapter.py)."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gqa_export.errors import InputError

if TYPE_CHECKING:
    from gqa_export.source.weights import WeightStore

PEFT_PREFIX = "base_model.model."


def read_peft_config(peft_dir: Path) -> dict[str, Any]:
    """adapter_config.json, refused where the adapter is not plain LoRA the base can take."""
    path = peft_dir / "adapter_config.json"
    if not path.is_file():
        raise InputError(f"{peft_dir} has no adapter_config.json: give a PEFT LoRA adapter folder")
    try:
        config = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise InputError(f"{path}: not readable JSON ({exc})") from None
    kind = str(config.get("peft_type", "LORA")).upper()
    if kind != "LORA":
        raise InputError(f"{peft_dir}: peft_type {kind} is not LoRA; only LoRA adapters convert")
    if config.get("use_dora"):
        raise InputError(f"{peft_dir}: DoRA (use_dora) rescales each merged column; a LoRA base cannot add that")
    if config.get("bias", "none") != "none":
        raise InputError(f"{peft_dir}: LoRA biases (bias={config['bias']}) are not supported; train with bias='none'")
    if config.get("modules_to_save"):
        raise InputError(f"{peft_dir}: modules_to_save {config['modules_to_save']} replace base weights; merge instead")
    return config


def _pattern_value(patterns: dict[str, Any], module: str, default: Any) -> Any:
    """PEFT's rank_pattern / alpha_pattern: the first key that matches the module name's tail."""
    for key, value in patterns.items():
        if re.fullmatch(rf"(.*\.)?{key}", module):
            return value
    return default


def module_scaling(config: dict[str, Any], module: str, rank: int) -> float:
    """alpha / r, or alpha / √r with rsLoRA; per module where rank_pattern / alpha_pattern apply."""
    r = int(_pattern_value(config.get("rank_pattern") or {}, module, config.get("r", rank)))
    if r != rank:
        raise InputError(f"adapter module {module}: rank {rank} in the weights, {r} in adapter_config.json")
    alpha = float(_pattern_value(config.get("alpha_pattern") or {}, module, config.get("lora_alpha", r)))
    return alpha / math.sqrt(r) if config.get("use_rslora") else alpha / r


def lora_pairs(store: WeightStore, folder: Path) -> dict[str, tuple[str, str]]:
    """module -> (its lora_A, its lora_B tensor name) of a PEFT folder's safetensors, sorted by module; refused
    in one line where a tensor is not a LoRA A/B weight (an embedding LoRA, a DoRA magnitude) or a module lacks
    one of the two, so that no tensor of the adapter goes unread."""
    found: dict[str, dict[str, str]] = {}
    for name in store.names():
        match = re.fullmatch(r"(.+)\.(lora_A|lora_B)(?:\.default)?\.weight", name.removeprefix(PEFT_PREFIX))
        if match is None:
            raise InputError(f"{folder}: tensor {name} is not a LoRA A/B weight (embedding LoRA, DoRA magnitude?)")
        found.setdefault(match.group(1), {})[match.group(2)] = name
    for module, names in found.items():
        if set(names) != {"lora_A", "lora_B"}:
            raise InputError(f"{folder}: module {module} has {sorted(names)} only; LoRA needs lora_A and lora_B")
    if not found:
        raise InputError(f"{folder}: no LoRA weights in its safetensors")
    return {module: (names["lora_A"], names["lora_B"]) for module, names in sorted(found.items())}
