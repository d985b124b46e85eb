"""LongCat-Flash (issue #39 item 3, gqa_export/arch/latent_families.py): the mechanisms it brought,
each planted broken into the registry's package (tests/mutants.py) or into the build, must break
HF parity (the registry's check, tests/arch/test_families.py): the zero (identity) experts dropped,
the shortcut MoE output added at the end of the first sublayer instead of the second, the router's
selection bias ignored, routed_scaling_factor dropped, each MLA lora scale dropped. The sublayer
layout: 4 KV caches for the tiny config's 2 layers, as HF's cache holds."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
from families import require_registered
from mutants import copy_package, edit_initializers
from reference import parity_error

from gqa_export.pipeline import BuildOptions, build

FAMILY = "longcat_flash"
# the tiny config's constants (tests/derived_moe_models.py): sqrt(64 / 32) for both lora scales, 2.5
CONSTANTS = {
    "q-lora-scale-dropped": ("*q_lora_scale*", 2**0.5),
    "kv-lora-scale-dropped": ("*kv_lora_scale*", 2**0.5),
    "routed-scaling-dropped": ("*routed_scaling*", 2.5),
}


@pytest.fixture(autouse=True)
def _registered() -> None:
    require_registered(FAMILY)


def _set_to_one(value: float):
    def change(values: np.ndarray) -> np.ndarray:
        return np.where(np.isclose(values, np.float32(value), rtol=1e-6), 1.0, values).astype(values.dtype)

    return change


def _broken_build(builds, tmp_path) -> float:
    checkpoint = builds.checkpoint(FAMILY)
    build(BuildOptions(str(checkpoint), tmp_path / "pkg", smoke=False))
    return parity_error(tmp_path / "pkg", checkpoint)


def test_the_correct_package_passes_with_a_cache_per_sublayer(builds):
    package = builds.package(FAMILY)
    assert parity_error(package, builds.checkpoint(FAMILY)) < 1e-4  # measured 1.8e-6
    genai = json.loads((package / "genai_config.json").read_text())
    assert genai["model"]["decoder"]["num_hidden_layers"] == 4  # 2 layers x 2 attention sublayers


@pytest.mark.parametrize("mutant", CONSTANTS)
def test_mutant_constant_dropped_fails_hf_parity(builds, tmp_path, mutant):
    pattern, value = CONSTANTS[mutant]
    package = builds.package(FAMILY)
    broken = copy_package(package, tmp_path / mutant)
    before = (package / "model.onnx").read_bytes()
    assert edit_initializers(broken, pattern, _set_to_one(value)), pattern
    assert (broken / "model.onnx").read_bytes() != before, f"{mutant}: no constant of {value} in the graph"
    assert parity_error(broken, builds.checkpoint(FAMILY)) > 1e-2


def test_mutant_zero_experts_dropped_fails_hf_parity(builds, tmp_path, monkeypatch):
    """The zero experts' identity term left out (their weights still taken from the real experts')."""
    from gqa_export.graph import moe

    def dropped(lc, x, dense, dims):
        real, identity = moe_zero(lc, x, dense, dims)
        return real, lc.b.op("Mul", identity, lc.b.op("Sub", identity, identity))

    moe_zero = moe.zero_experts
    monkeypatch.setattr(moe, "zero_experts", dropped)
    assert _broken_build(builds, tmp_path) > 1e-2


def test_the_registry_prompts_route_tokens_to_zero_experts_only(builds):
    """The registry's prompts exercise the case graph/zero_experts.py guards: a token whose k choices
    are all zero experts (HF's router, measured: under transformers 5.24, 9 of the 14 tokens of the
    parity prompt in layer 0; under 5.25, whose experts hold no zero-expert rows, so the tiny model's
    initial draws differ, 1 token of the 30-token greedy prompt). onnxruntime 1.31.1's CPU MoE returns
    finite rows even for an all -inf router input (parity holds with the guard removed), so the guard
    has no failing mutant on CPU; it keeps log(0) out of the op for kernels that would not."""
    import torch
    from families import PROMPT, PROMPTS
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(builds.checkpoint(FAMILY), dtype=torch.float32)
    chosen: list[torch.Tensor] = []
    hooks = [
        layer.mlp.router.register_forward_hook(lambda _m, _a, out: chosen.append(out[2]))
        for layer in model.model.layers
    ]
    with torch.no_grad():
        for prompt in (PROMPT, *PROMPTS):
            model(torch.tensor([list(prompt)]))
    for hook in hooks:
        hook.remove()
    real = model.config.n_routed_experts
    assert sum(int((c >= real).all(-1).sum()) for c in chosen) > 0
    assert sum(int((c < real).any(-1).sum()) for c in chosen) > 0


def test_mutant_shortcut_added_a_sublayer_early_fails_hf_parity(builds, tmp_path, monkeypatch):
    """The sparse output added at the end of the pair's first sublayer, not after the second's MLP."""
    from gqa_export.graph import shortcut_moe

    sparse = shortcut_moe.sparse_mlp

    def early(lc, x):
        lc.shortcut[lc.i] = sparse(lc, x)
        return shortcut_moe.mlp_block(lc, x)

    from gqa_export.graph import decoder_layer

    monkeypatch.setattr(decoder_layer, "shortcut_mlp", early)
    assert _broken_build(builds, tmp_path) > 1e-2


def test_mutant_selection_bias_ignored_fails_hf_parity(builds, tmp_path, monkeypatch):
    """The top k chosen on the probabilities alone (e_score_correction_bias not read)."""
    from gqa_export.arch import SPECS

    spec = SPECS[FAMILY]
    moe = replace(spec.moe, names=replace(spec.moe.names, expert_bias=None))
    monkeypatch.setitem(SPECS, FAMILY, replace(spec, moe=moe))
    assert _broken_build(builds, tmp_path) > 1e-2


# config edits the export refuses (one line naming the key, nothing written): the classifier bias HF's
# router never adds, rope tables of another width than the rope channels, no query LoRA (transformers
# 5.24's strict config class refuses a null q_lora_rank first; the spec's own check stands behind it)
REFUSED = {
    "router_bias": (dict(router_bias=True), "router_bias=True"),
    "head_dim": (dict(head_dim=16), "head_dim=16"),
    "q_lora_rank": (dict(q_lora_rank=None), "q_lora_rank"),
}


@pytest.mark.parametrize("case", REFUSED)
def test_refused_in_one_line_nothing_written(builds, tmp_path, case):
    import shutil

    from gqa_export.errors import InputError

    edit, named = REFUSED[case]
    checkpoint = tmp_path / "ckpt"
    shutil.copytree(builds.checkpoint(FAMILY), checkpoint)
    data = json.loads((checkpoint / "config.json").read_text())
    (checkpoint / "config.json").write_text(json.dumps({**data, **edit}))
    with pytest.raises(InputError, match=named) as raised:
        build(BuildOptions(str(checkpoint), tmp_path / "pkg", smoke=False))
    assert "\n" not in str(raised.value) and not (tmp_path / "pkg").exists()
