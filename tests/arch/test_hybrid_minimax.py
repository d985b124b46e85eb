"""MiniMax's mechanisms (gqa_export/graph/lightning.py, graph/normed_residual.py; docs/hybrid-state.md
§8.16), each planted wrong into a copy of the correct registry package (tests/mutants.py): the
registry's HF parity (tests/arch/test_families.py row minimax) must break, so a graph that got the
mechanism wrong fails it.

The tiny checkpoint (tests/dense_models.py minimax): lightning at layers 0, 2, 3 (decay factors 1,
1/3 and ~0 of the per-head slopes), GQA at 1, 4 heads of 16, every alpha / beta away from 1 and from
each other. Mutants: the decay slope x 1.5 (layer 0), layer 2 given layer 0's slopes (the per-layer
factor dropped), the output gate dropped (the normed output straight into out_proj), alpha and beta
exchanged (the lightning block, the full-attention block, the MLP), and the residual taken from the
stream before the norm instead of the normed input. The computed slopes equal the buffers HF saves,
and a variant (transformers' default layer pattern, the released checkpoints' factors, no decay
buffers) matches HF. A config's rotary_dim is rotated as the released model was trained, which
transformers 5.24's minimax ignores: checked against HF with that partial RoPE patched in.
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import onnx
import pytest
from families import LONG_PROMPT
from mutants import copy_package, edit_initializers, times
from reference import hf_logits, hf_model, ort_prefill_and_decode, parity_error
from safetensors.numpy import load_file, save_file

from gqa_export.graph.lightning import slope_rates
from gqa_export.pipeline import BuildOptions, build

FAMILY = "minimax"
# the tiny config's (alpha, beta) per block (tests/dense_models.py)
FACTORS = {"lightning": (1.6, 0.8), "attention": (1.4, 0.9), "mlp": (1.2, 0.6)}
DECAY_BUFFERS = ("slope_rate", "query_decay", "key_decay", "diagonal_decay")  # HF's persistent buffers


def _parity(package, checkpoint) -> bool:
    prompt = list(LONG_PROMPT[:20])  # past one of HF's 16-token prompt blocks
    tokens, got = ort_prefill_and_decode(package, prompt, steps=2)
    return np.allclose(got, hf_logits(hf_model(checkpoint), tokens, len(prompt)), atol=1e-4, rtol=1e-4)


def _swapped(layer: int, residual: str, block: str):
    """(pattern, change) pairs giving layer `layer`'s residual constants each other's values."""
    alpha, beta = FACTORS[block]
    return [
        (f"const.layers.{layer}.{residual}_alpha", lambda v: np.full_like(v, beta)),
        (f"const.layers.{layer}.{residual}_beta", lambda v: np.full_like(v, alpha)),
    ]


MUTANTS = {
    "decay-slope-x1.5": [("model.layers.0.self_attn.decay", times(1.5))],
    "layer-factor-dropped": [("model.layers.2.self_attn.decay", lambda v: -slope_rates(4, 0, 4))],
    "lightning-alpha-beta-swapped": _swapped(0, "residual_attn", "lightning"),
    "attention-alpha-beta-swapped": _swapped(1, "residual_attn", "attention"),
    "mlp-alpha-beta-swapped": _swapped(2, "residual_mlp", "mlp"),
}


def test_the_correct_minimax_package_passes(builds):
    assert _parity(builds.package(FAMILY), builds.checkpoint(FAMILY))


@pytest.mark.parametrize("mutant", MUTANTS)
def test_mutant_minimax_constant_fails_hf_parity(builds, tmp_path, mutant):
    broken = copy_package(builds.package(FAMILY), tmp_path / mutant)
    for pattern, change in MUTANTS[mutant]:
        assert edit_initializers(broken, pattern, change), pattern
    assert not _parity(broken, builds.checkpoint(FAMILY))


def _rewired(package, edit) -> None:
    path = package / "model.onnx"
    model = onnx.load(str(path), load_external_data=False)
    assert edit(model.graph)
    onnx.save(model, str(path))


def _drop_output_gate(graph) -> int:
    """sigmoid(output_gate(x)) * norm(o) -> norm(o) in every lightning layer."""
    edited = 0
    for node in graph.node:
        if node.name.endswith("lightning/output_gated"):
            node.op_type, inputs = "Identity", [i for i in node.input if i.endswith("lightning/norm/output_0")]
            node.ClearField("input")
            node.input.extend(inputs)
            edited += 1
    return edited


def _residual_from_stream(graph) -> int:
    """Layer 1's attention residual: the stream entering the layer instead of its normed input."""
    for node in graph.node:
        if node.name == "/model/layers.1/residual_attn_alpha":
            node.input[0] = "/model/layers.0/residual_mlp/output_0"
            return 1
    return 0


@pytest.mark.parametrize("edit", [_drop_output_gate, _residual_from_stream])
def test_mutant_minimax_wiring_fails_hf_parity(builds, tmp_path, edit):
    broken = copy_package(builds.package(FAMILY), tmp_path / edit.__name__)
    _rewired(broken, edit)
    assert not _parity(broken, builds.checkpoint(FAMILY))


def test_computed_slopes_equal_the_buffers_hf_saves(builds):
    """The export's own slopes, for a checkpoint without slope_rate buffers: HF's get_slope_rate."""
    checkpoint = builds.checkpoint(FAMILY)
    config = json.loads((checkpoint / "config.json").read_text())
    tensors = load_file(str(checkpoint / "model.safetensors"))
    layers = config["num_hidden_layers"]
    lightning = [i for i, t in enumerate(config["layer_types"]) if t == "linear_attention"]
    for i in lightning:
        saved = tensors[f"model.layers.{i}.self_attn.slope_rate"].reshape(-1)
        np.testing.assert_allclose(slope_rates(config["num_attention_heads"], i, layers), saved, rtol=1e-6)


def test_minimax_variant_matches_hf(tmp_path):
    """transformers' default pattern (no layer_types: full attention first, then alternating),
    the released checkpoints' factors (alpha (2 L)^(1/4), beta 1: no Mul for a factor of 1), and no
    decay buffers in the checkpoint (the slopes computed at export, HF recomputing its own)."""
    from dense_models import save_dense

    alpha = (2 * 4) ** 0.25
    factors = {f"{kind}_alpha_factor": alpha for kind in ("full_attn", "linear_attn", "mlp")}
    factors |= {f"{kind}_beta_factor": 1.0 for kind in ("full_attn", "linear_attn", "mlp")}
    checkpoint = save_dense(tmp_path / "ckpt", FAMILY, layer_types=None, **factors)
    weights = checkpoint / "model.safetensors"
    kept = {k: v for k, v in load_file(str(weights)).items() if not k.endswith(DECAY_BUFFERS)}
    save_file(kept, str(weights), metadata={"format": "pt"})
    package = tmp_path / "pkg"
    build(BuildOptions(str(checkpoint), package))  # with its smoke run through onnxruntime-genai
    model = onnx.load(str(package / "model.onnx"), load_external_data=False)
    assert not [n for n in model.graph.node if n.name.endswith("_beta")]  # every beta is 1
    assert parity_error(package, checkpoint) < 1e-4


def test_bf16_decay_tables_are_said_and_are_the_whole_difference(builds, tmp_path):
    """A bf16 save (as the releases are) stores HF's prompt decay tables rounded: HF's prompt reads them, the
    package computes the exact decay at the stored slope_rate. The build says so (the float32 registry build
    does not), and the difference is the tables' alone: against HF with the tables recomputed in float32 from
    the stored slopes the package is within 1e-4 (measured 1.4e-6; 1.7e-3 against HF as loaded)."""
    import torch
    from safetensors.torch import load_file as load_torch
    from safetensors.torch import save_file as save_torch

    checkpoint = tmp_path / "ckpt"
    shutil.copytree(builds.checkpoint(FAMILY), checkpoint)
    weights = checkpoint / "model.safetensors"
    save_torch({k: v.to(torch.bfloat16) for k, v in load_torch(str(weights)).items()}, str(weights), {"format": "pt"})
    package = tmp_path / "pkg"
    said = [n for n in build(BuildOptions(str(checkpoint), package, smoke=False)).notes if "decay tables" in n]
    assert said and "BF16" in said[0], said
    fp32 = build(BuildOptions(str(builds.checkpoint(FAMILY)), tmp_path / "fp32", smoke=False))
    assert not [n for n in fp32.notes if "decay tables" in n]
    prompt = list(LONG_PROMPT)  # 70 tokens: four of HF's 16-token prompt blocks and a partial one
    tokens, got = ort_prefill_and_decode(package, prompt, steps=2)
    model = hf_model(checkpoint)
    loaded = np.abs(got - hf_logits(model, tokens, len(prompt))).max()
    assert loaded > 5e-4, loaded  # measured 1.7e-3
    with torch.no_grad():
        for module in model.modules():
            if hasattr(module, "decay_factors") and hasattr(module, "slope_rate"):
                for name, table in zip(DECAY_BUFFERS[1:], module.decay_factors(module.slope_rate), strict=True):
                    getattr(module, name).copy_(table)
    recomputed = np.abs(got - hf_logits(model, tokens, len(prompt))).max()
    assert recomputed < 1e-4, recomputed  # measured 1.4e-6


def _released_rope(model, rotary: int, theta: float, monkeypatch) -> None:
    """HF's MiniMax with the released model's partial RoPE: the first `rotary` channels of each
    head rotated (rotate-half within them, frequencies over `rotary`), the rest passed through, as
    the original code and transformers' MiniMax-M2 fix compute it; transformers 5.24's minimax
    ignores rotary_dim and rotates every channel."""
    import torch
    from transformers.models.minimax import modeling_minimax as hf

    def apply(q, k, cos, sin, unsqueeze_dim=1):
        cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)

        def turn(x):
            rotated, passed = x[..., :rotary], x[..., rotary:]
            return torch.cat([rotated * cos + hf.rotate_half(rotated) * sin, passed], -1)

        return turn(q), turn(k)

    monkeypatch.setattr(hf, "apply_rotary_pos_emb", apply)
    model.model.rotary_emb.inv_freq = 1.0 / theta ** (torch.arange(0, rotary, 2, dtype=torch.float) / rotary)


def test_rotary_dim_rotates_as_the_released_model(tmp_path, monkeypatch):
    """The released configs' rotary_dim (64 of head_dim 128) is rotated as the model was trained:
    within 1e-4 of HF with that partial RoPE, and off the installed HF, which rotates every channel
    (docs/hybrid-state.md §8.16)."""
    from dense_models import save_dense

    checkpoint = save_dense(tmp_path / "ckpt", FAMILY, rotary_dim=8)  # of head_dim 16
    package = tmp_path / "pkg"
    result = build(BuildOptions(str(checkpoint), package, smoke=False))
    assert any(n.startswith("RoPE on 8 of 16 channels per head") for n in result.notes), result.notes
    prompt = list(LONG_PROMPT[:20])
    tokens, got = ort_prefill_and_decode(package, prompt, steps=2)
    as_installed = hf_logits(hf_model(checkpoint), tokens, len(prompt))
    model = hf_model(checkpoint)
    _released_rope(model, 8, 10000.0, monkeypatch)
    assert np.abs(got - hf_logits(model, tokens, len(prompt))).max() < 1e-4  # measured 1.6e-6
    assert np.abs(got - as_installed).max() > 1e-2  # measured 0.61


def test_sliding_window_is_refused_in_one_line(builds, tmp_path):
    """transformers slides every full-attention layer by config.sliding_window while layer_types
    marks them full_attention: refused before any weight is read, exit 2, nothing written."""
    from cli_runner import invoke

    checkpoint = tmp_path / "ckpt"
    shutil.copytree(builds.checkpoint(FAMILY), checkpoint)
    config = json.loads((checkpoint / "config.json").read_text())
    (checkpoint / "config.json").write_text(json.dumps({**config, "sliding_window": 8}))
    result = invoke("build", checkpoint, "-o", tmp_path / "p")
    assert result.exit_code == 2, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert errors == [
        "error: MiniMax with a sliding_window is not exported: its attention layers would slide while "
        "layer_types marks them full_attention (sliding_window=8)"
    ]
    assert not (tmp_path / "p").exists()
