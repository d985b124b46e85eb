"""A LoRA adapter the checkpoint carries, merged into the decoder (gqa_export/source/merged_adapter.py):
Phi-4-multimodal's vision adapter, stored beside the base weights (the remote-code release) or as a PEFT
folder (transformers' layout), held against transformers' class with the adapter merged by hand; the
scaling and the choice of adapter are mutants; a missing adapter or scale is refused in one line."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from reference import hf_logits, hf_model, ort_prefill_and_decode
from wrapped_models import save_wrapped

from gqa_export.errors import InputError
from gqa_export.pipeline import BuildOptions, build
from gqa_export.source import merged_adapter

PROMPT = [0, 17, 45, 300, 300, 99, 200, 301, 3, 7, 11, 12]
RANK, ALPHA = {"vision": 4, "speech": 2}, {"vision": 8.0, "speech": 6.0}
RECIPE = Path(__file__).parents[2] / "recipes" / "phi4_multimodal.yaml"


def _lora(rng: np.random.Generator, weight: np.ndarray, rank: int) -> tuple[np.ndarray, np.ndarray]:
    """A [r, in] and B [out, r] whose product moves the logits well past the bounds below."""
    a = rng.normal(0, 0.5, (rank, weight.shape[1])).astype(np.float32)
    return a, rng.normal(0, 0.5, (weight.shape[0], rank)).astype(np.float32)


@pytest.fixture(scope="module")
def layouts(tmp_path_factory) -> dict[str, Path]:
    """One tiny Phi-4-multimodal checkpoint in transformers' layout with `vision-lora/` and `speech-lora/`
    PEFT folders, the same weights and adapters in the remote-code layout, and the adapters' deltas."""
    from safetensors.numpy import load_file, save_file

    root = tmp_path_factory.mktemp("merged")
    checkpoint = save_wrapped(root / "hf", "phi4_multimodal", "phi4_multimodal", hub_layout=True)
    remote = shutil.copytree(checkpoint, root / "remote")
    config = json.loads((remote / "config.json").read_text())
    rope = config.pop("rope_parameters")
    config.update(
        model_type="phi4mm", architectures=["Phi4MMForCausalLM"],
        **{f"{name}_lora": {"r": RANK[name], "lora_alpha": ALPHA[name]} for name in RANK},
        partial_rotary_factor=rope.pop("partial_rotary_factor"), rope_theta=rope.pop("rope_theta"),
        rope_scaling={**rope, "type": rope.pop("rope_type")},
    )  # fmt: skip
    (remote / "config.json").write_text(json.dumps(config))
    rng = np.random.default_rng(0)
    peft: dict[str, dict[str, np.ndarray]] = {name: {} for name in RANK}
    for shard in remote.glob("*.safetensors"):
        stored = {}
        for name, tensor in load_file(shard).items():
            if not name.startswith("model.layers.") or not name.endswith("proj.weight"):
                stored[name] = tensor
                continue
            stem = name[: -len("weight")]
            stored[f"{stem}base_layer.weight"] = tensor
            for adapter, rank in RANK.items():
                a, b = _lora(rng, tensor, rank)
                stored[f"{stem}lora_A.{adapter}.weight"], stored[f"{stem}lora_B.{adapter}.weight"] = a, b
                peft[adapter][f"base_model.model.{stem}lora_A.weight"] = a
                peft[adapter][f"base_model.model.{stem}lora_B.weight"] = b
        save_file(stored, shard, metadata={"format": "pt"})
    for adapter, tensors in peft.items():
        folder = checkpoint / f"{adapter}-lora"
        folder.mkdir()
        save_file(tensors, folder / "adapter_model.safetensors", metadata={"format": "pt"})
        settings = {"peft_type": "LORA", "r": RANK[adapter], "lora_alpha": ALPHA[adapter], "bias": "none"}
        (folder / "adapter_config.json").write_text(json.dumps(settings))
    recipe = root / "phi4mm.yaml"
    text = RECIPE.read_text().replace("[phi4_multimodal]", "[phi4mm]")
    recipe.write_text(text.replace("[Phi4MultimodalForCausalLM]", "[Phi4MMForCausalLM]"))
    return {"hf": checkpoint, "remote": remote, "recipe": recipe}


def _merged_logits(checkpoint: Path, adapter: str | None, tokens: list[int]) -> np.ndarray:
    """transformers' class with `adapter`'s W + alpha / r * B @ A written into its projections, as PEFT merges."""
    import torch
    from safetensors.numpy import load_file

    model = hf_model(checkpoint)
    if adapter is not None:
        deltas = load_file(checkpoint / f"{adapter}-lora" / "adapter_model.safetensors")
        with torch.no_grad():
            for name, module in model.named_modules():
                a = deltas.get(f"base_model.model.{name}.lora_A.weight")
                if a is not None:
                    b = deltas[f"base_model.model.{name}.lora_B.weight"]
                    module.weight += torch.from_numpy(b @ a) * (ALPHA[adapter] / RANK[adapter])
    return hf_logits(model, tokens, len(PROMPT))


def _error(package: Path, checkpoint: Path, adapter: str | None) -> float:
    tokens, got = ort_prefill_and_decode(package, PROMPT, steps=3)
    return float(np.abs(got - _merged_logits(checkpoint, adapter, tokens)).max())


@pytest.mark.parametrize("layout", ["hf", "remote"])
def test_the_chosen_adapter_is_merged(layouts, tmp_path, layout):
    """--set merged_adapter=vision: the package computes the class's logits with the vision adapter merged
    (prompt + 3 decode steps), from its PEFT folder or from the tensors stored beside the base weights;
    the base weights alone, or the speech adapter, are far off (each adapter moves the logits by > 0.1)."""
    recipe = {"recipe": layouts["recipe"]} if layout == "remote" else {}
    options = BuildOptions(str(layouts[layout]), tmp_path / "pkg", smoke=False, text_only=True, **recipe)
    build(replace(options, settings=("merged_adapter=vision",)))
    assert _error(tmp_path / "pkg", layouts["hf"], "vision") < 1e-4
    assert _error(tmp_path / "pkg", layouts["hf"], None) > 0.1
    assert _error(tmp_path / "pkg", layouts["hf"], "speech") > 0.1


def test_a_text_only_package_keeps_the_base_weights(layouts, tmp_path):
    """The remote-code release (model_type phi4mm, Phi4MMForCausalLM: transformers 5.25 has no config class for it,
    so --recipe names it) stores each projection as `base_layer` beside its adapters: a text-only build (auto: no
    adapter) computes the transformers class's logits on the base weights, as the release's text mode does."""
    build(BuildOptions(str(layouts["remote"]), tmp_path / "pkg", smoke=False, text_only=True, recipe=layouts["recipe"]))
    assert _error(tmp_path / "pkg", layouts["hf"], None) < 1e-4
    assert _error(tmp_path / "pkg", layouts["hf"], "vision") > 0.1


def test_a_mis_scaled_merge_fails_the_bound(layouts, tmp_path, monkeypatch):
    """Mutant: the delta scaled by alpha (no / r) instead of alpha / r."""
    scaled = merged_adapter.module_scaling
    monkeypatch.setattr(merged_adapter, "module_scaling", lambda *a: scaled(*a) * RANK["vision"])
    options = BuildOptions(str(layouts["hf"]), tmp_path / "pkg", smoke=False, text_only=True)
    build(replace(options, settings=("merged_adapter=vision",)))
    assert _error(tmp_path / "pkg", layouts["hf"], "vision") > 1e-2


def test_an_adapter_the_checkpoint_lacks_is_refused(layouts, tmp_path):
    """A name no adapter has, and a stored adapter without its config scale: one line each, nothing written."""
    options = BuildOptions(str(layouts["hf"]), tmp_path / "pkg", smoke=False, text_only=True)
    with pytest.raises(InputError, match=r"no LoRA adapter named audio \(it has: speech, vision\)"):
        build(replace(options, settings=("merged_adapter=audio",)))
    remote = shutil.copytree(layouts["remote"], tmp_path / "remote")
    config = json.loads((remote / "config.json").read_text())
    del config["vision_lora"]["lora_alpha"]
    (remote / "config.json").write_text(json.dumps(config))
    options = BuildOptions(str(remote), tmp_path / "pkg2", smoke=False, text_only=True, recipe=layouts["recipe"])
    with pytest.raises(InputError, match=r"config\.json has no vision_lora\.lora_alpha"):
        build(replace(options, settings=("merged_adapter=vision",)))
    assert not (tmp_path / "pkg").exists() and not (tmp_path / "pkg2").exists()


def test_a_peft_tensor_the_merge_would_not_read_is_refused(layouts, tmp_path):
    """An adapter folder holding a tensor that is no module's lora_A / lora_B (an embedding LoRA here) is refused
    in one line, as `gqa-export adapter` refuses it, rather than merged without it."""
    from safetensors.numpy import load_file, save_file

    checkpoint = Path(shutil.copytree(layouts["hf"], tmp_path / "hf"))
    weights = checkpoint / "vision-lora" / "adapter_model.safetensors"
    tensors = load_file(weights)
    tensors["base_model.model.model.embed_tokens.lora_embedding_A"] = np.zeros((4, 8), np.float32)
    save_file(tensors, weights)
    options = BuildOptions(str(checkpoint), tmp_path / "pkg", smoke=False, text_only=True)
    with pytest.raises(InputError, match=r"lora_embedding_A is not a LoRA A/B weight"):
        build(replace(options, settings=("merged_adapter=vision",)))
    assert not (tmp_path / "pkg").exists()


def _decoder_weights(package: Path) -> dict[str, np.ndarray]:
    import onnx_ir as ir

    model = ir.load(package / "model.onnx")
    return {name: value.const_value.numpy() for name, value in model.graph.initializers.items() if "proj" in name}


def test_a_full_package_merges_the_vision_adapter_by_default(tmp_path):
    """A full phi4mm package (the default build) takes the checkpoint's vision-lora merged and says so; its
    decoder's projections are the text-only package's with merged_adapter=vision, and `none` keeps the base."""
    from phi4mm_models import save_phi4mm
    from safetensors.numpy import load_file, save_file

    checkpoint = save_phi4mm(tmp_path / "phi4mm")
    rng = np.random.default_rng(1)
    tensors = {}
    for shard in checkpoint.glob("*.safetensors"):
        for name, weight in load_file(shard).items():
            if name.startswith("model.layers.") and name.endswith("proj.weight"):
                a, b = _lora(rng, weight, RANK["vision"])
                stem = f"base_model.model.{name[: -len('.weight')]}"
                tensors[f"{stem}.lora_A.weight"], tensors[f"{stem}.lora_B.weight"] = a, b
    (checkpoint / "vision-lora").mkdir()
    save_file(tensors, checkpoint / "vision-lora" / "adapter_model.safetensors")
    settings = {"peft_type": "LORA", "r": RANK["vision"], "lora_alpha": ALPHA["vision"], "bias": "none"}
    (checkpoint / "vision-lora" / "adapter_config.json").write_text(json.dumps(settings))
    full = build(BuildOptions(str(checkpoint), tmp_path / "full", smoke=False))
    assert any("vision LoRA adapter, merged" in note for note in full.notes), full.notes
    text = BuildOptions(str(checkpoint), tmp_path / "text", smoke=False, text_only=True)
    build(replace(text, settings=("merged_adapter=vision",)))
    base = BuildOptions(str(checkpoint), tmp_path / "base", smoke=False)
    build(replace(base, settings=("merged_adapter=none",)))
    merged, alone, plain = (_decoder_weights(tmp_path / n) for n in ("full", "text", "base"))
    assert merged.keys() == alone.keys() == plain.keys() and len(merged) >= 4, sorted(merged)
    for name, weight in merged.items():
        np.testing.assert_array_equal(weight, alone[name])
    assert max(float(np.abs(merged[n] - plain[n]).max()) for n in merged) > 0.1
