"""A LoRA adapter the checkpoint carries, merged into the decoder's weights: W + scaling * B @ A.

Phi-4-multimodal's decoder runs a vision or a speech LoRA adapter by the prompt's modality, the base
weights on text. onnxruntime-genai runs one decoder graph for every prompt and cannot switch an adapter
per prompt in its multimodal pipeline (docs/lora.md §9), so a build merges one adapter, chosen
by the recipe key `merged_adapter` (`--set merged_adapter=NAME`): "auto" merges `vision` into a full
multimodal package and nothing into a text-only one; "none" merges nothing.

The adapters are found in either of the layouts the checkpoint may have:
- stored beside the base weights (the remote-code release): `<module>.lora_A.<name>.weight` [r, in] and
  `<module>.lora_B.<name>.weight` [out, r], their scaling `lora_alpha / r` from config.json's
  `<name>_lora` entry (the base weight is `<module>.base_layer.weight`, read by the spec's aliases);
- a PEFT folder `<name>-lora/` in the checkpoint (transformers' layout of the same release):
  adapter_config.json and `base_model.model.<module>.lora_A.weight` / `lora_B.weight`.
The merge is computed in float32 and stored back in the weight's own dtype, as PEFT's merge does.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from gqa_export.errors import InputError
from gqa_export.kernels import convert
from gqa_export.source.expert_views import Compute, ViewStore, view_info
from gqa_export.source.peft import lora_pairs, module_scaling, read_peft_config
from gqa_export.source.weights import DTYPES, TensorInfo, WeightStore

FOLDER_SUFFIX = "-lora"
_STORED = re.compile(r"(.+)\.lora_A\.([^.]+)\.weight")


@dataclass(frozen=True)
class StoredAdapter:
    """One named adapter: its modules' A and B tensors, the store that holds them, each module's scaling."""

    name: str
    store: WeightStore
    pairs: dict[str, tuple[str, str]]  # module path -> (lora_A name, lora_B name)
    scaling: Callable[[str, int], float]  # (module path, rank) -> the factor on B @ A


def stored_adapters(store: WeightStore, model_dir: Path, raw_config: dict[str, Any]) -> dict[str, StoredAdapter]:
    """Every adapter the checkpoint carries, by name: stored beside the weights, or as a PEFT folder."""
    found: dict[str, dict[str, tuple[str, str]]] = {}
    for tensor in store.names():
        if (match := _STORED.fullmatch(tensor)) is not None:
            module, name = match.groups()
            found.setdefault(name, {})[module] = (tensor, f"{module}.lora_B.{name}.weight")
    adapters = {
        name: StoredAdapter(name, store, pairs, _config_scaling(raw_config, name)) for name, pairs in found.items()
    }
    for folder in sorted(model_dir.glob(f"*{FOLDER_SUFFIX}")):
        name = folder.name.removesuffix(FOLDER_SUFFIX)
        if name in adapters or not (folder / "adapter_config.json").is_file():
            continue
        adapters[name] = _peft_adapter(name, folder)
    return adapters


def _config_scaling(raw_config: dict[str, Any], name: str) -> Callable[[str, int], float]:
    """lora_alpha / r from config.json's `<name>_lora`, as the remote code builds its LoraConfig."""

    def scaling(module: str, rank: int) -> float:
        entry = raw_config.get(f"{name}_lora")
        if not isinstance(entry, dict) or "lora_alpha" not in entry:
            raise InputError(
                f"config.json has no {name}_lora.lora_alpha: the stored {name} LoRA adapter cannot be scaled; "
                "add it (the release's value) or build with --set merged_adapter=none"
            )
        if int(entry.get("r", rank)) != rank:
            raise InputError(
                f"the stored {name} LoRA of {module} has rank {rank}, config.json's {name}_lora.r {entry['r']}"
            )
        return float(entry["lora_alpha"]) / rank

    return scaling


def _peft_adapter(name: str, folder: Path) -> StoredAdapter:
    config = read_peft_config(folder)
    peft = WeightStore.open(folder)
    pairs = lora_pairs(peft, folder)
    return StoredAdapter(name, peft, pairs, lambda module, rank: module_scaling(config, module, rank))


def choose_adapter(
    setting: str, full_package: bool, find_adapters: Callable[[], dict[str, StoredAdapter]]
) -> StoredAdapter | None:
    """The adapter `merged_adapter` names: auto is `vision` in a full multimodal package where stored.
    The checkpoint is searched for adapters only where the setting can choose one."""
    if setting == "none" or (setting == "auto" and not full_package):
        return None
    adapters = find_adapters()
    if setting == "auto" and "vision" not in adapters:
        return None
    name = "vision" if setting == "auto" else setting
    if name not in adapters:
        have = ", ".join(sorted(adapters)) or "none"
        raise InputError(
            f"--set merged_adapter={setting}: the checkpoint has no LoRA adapter named {name} (it has: {have})"
        )
    return adapters[name]


def merged_adapter_views(store: WeightStore, adapter: StoredAdapter) -> WeightStore:
    """`store` with each of the adapter's modules' weight read as W + scaling * B @ A."""
    views: dict[str, tuple[TensorInfo, Compute]] = {}
    for module, (a_name, b_name) in sorted(adapter.pairs.items()):
        weight = f"{module}.weight"
        info = store.info(weight)
        a_info, b_info = adapter.store.info(a_name), adapter.store.info(b_name)
        rank = a_info.shape[0]
        if len(info.shape) != 2 or a_info.shape != (rank, info.shape[1]) or b_info.shape != (info.shape[0], rank):
            raise InputError(
                f"the {adapter.name} LoRA of {module}: lora_A {list(a_info.shape)} and lora_B {list(b_info.shape)} "
                f"do not fit its weight {list(info.shape)}; the adapter belongs to another model"
            )
        scale = adapter.scaling(module, rank)

        def merged(
            w: str = weight, a: str = a_name, b: str = b_name, s: float = scale, dtype: str = info.dtype
        ) -> np.ndarray:
            f32 = np.dtype(np.float32)
            low_rank = convert(adapter.store.read(b), f32) @ convert(adapter.store.read(a), f32)
            return convert(convert(store.read(w), f32) + np.float32(s) * low_rank, DTYPES[dtype])

        views[weight] = (view_info(info, info.shape), merged)
    return ViewStore(store, views)
