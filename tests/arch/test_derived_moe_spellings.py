"""What only the second round of issue #39 mixtures of experts have (the checks every family gets are
their rows in tests/families.py; mutants: test_derived_moe_mutants.py): the config spellings their
published checkpoints use, which transformers' config classes translate at load, and the config
values a class reads that the closest family reads otherwise.

Each registry checkpoint's config.json is written back in that spelling and exported through the CLI
with its defaults (smoke run included), then compared with transformers' own class read from the
same file (AutoModelForCausalLM, as a user loads it): prompt and decode logits, and greedy
onnxruntime-genai tokens against HF generate. No published file is downloaded (no hub access in the
tests): the spellings are the ones the config classes and the remote code document.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
from families import require_registered
from reference import hf_generate, hf_logits, hf_model, ort_prefill_and_decode, parity_error
from typer.testing import CliRunner

from gqa_export.cli import app
from gqa_export.pipeline import BuildOptions, build
from gqa_export.runtime.run import generate_greedy

PROMPT = [0, 17, 45, 99, 200, 3, 7, 120, 64, 33, 250, 11, 12, 13]
LONG_PROMPT = [(11 * i + 5) % 380 for i in range(30)]
NEW = 24


def _registered(family: str) -> None:
    require_registered(family)


def _respelled(checkpoint: Path, to: Path, drop: tuple[str, ...] = (), **changes) -> Path:
    shutil.copytree(checkpoint, to)
    config = json.loads((to / "config.json").read_text())
    config = {k: v for k, v in config.items() if k not in drop}
    (to / "config.json").write_text(json.dumps({**config, **changes}, indent=2))
    return to


def _hf(checkpoint: Path):
    import torch
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32).eval()


def _exports_like_hf(checkpoint: Path, out: Path) -> float:
    """Exported with the CLI's defaults; max |ORT - HF| over the prompt and 6 decode steps, after
    checking greedy genai tokens against HF generate."""
    result = CliRunner().invoke(app, ["build", str(checkpoint), "-o", str(out), "-q"])
    assert result.exit_code == 0, result.output
    hf = _hf(checkpoint)
    tokens, got = ort_prefill_and_decode(out, PROMPT, steps=6)
    error = float(np.abs(got - hf_logits(hf, tokens, len(PROMPT))).max())
    generated = generate_greedy(out, LONG_PROMPT, NEW, min_new_tokens=NEW).tokens
    assert generated == hf_generate(hf, LONG_PROMPT, NEW)
    assert len(set(generated)) > 3, f"degenerate generation {generated}: the comparison proves little"
    return error


def test_sarvam_moe_in_the_remote_code_spelling(builds, tmp_path):
    """sarvam-30b's config as its remote code wrote it: num_experts / num_shared_experts /
    use_qkv_bias (SarvamMoEConfig's attribute_map), top-level rope_theta and no
    partial_rotary_factor (the class's default: RoPE over the whole head, where GLM-4-MoE's is half),
    the remote code's unused keys, SarvamMoEForCausalLM with an auto_map."""
    _registered("sarvam_moe")
    saved = json.loads((builds.checkpoint("sarvam_moe") / "config.json").read_text())
    assert saved["rope_parameters"]["partial_rotary_factor"] == 1.0
    checkpoint = _respelled(
        builds.checkpoint("sarvam_moe"),
        tmp_path / "ckpt",
        drop=("n_routed_experts", "n_shared_experts", "attention_bias", "rope_parameters", "dtype"),
        architectures=["SarvamMoEForCausalLM"],
        auto_map={
            "AutoConfig": "configuration_sarvam_moe.SarvamMoEConfig",
            "AutoModelForCausalLM": "modeling_sarvam_moe.SarvamMoEForCausalLM",
        },
        num_experts=saved["n_routed_experts"],
        num_shared_experts=saved["n_shared_experts"],
        use_qkv_bias=saved["attention_bias"],
        use_bias=False,
        moe_router_enable_expert_bias=True,
        max_window_layers=saved["num_hidden_layers"],
        rope_theta=saved["rope_parameters"]["rope_theta"],
        torch_dtype="float32",
    )
    assert _exports_like_hf(checkpoint, tmp_path / "pkg") < 1e-4


def test_sarvam_moe_rope_over_half_the_head_fails_hf_parity(builds, tmp_path):
    """A config mutant: the package built as if the class's partial_rotary_factor were GLM-4-MoE's
    0.5 is compared with HF on the real one (1.0), and must fail: the registry's parity sees how much
    of each head RoPE rotates."""
    _registered("sarvam_moe")
    saved = json.loads((builds.checkpoint("sarvam_moe") / "config.json").read_text())
    checkpoint = _respelled(
        builds.checkpoint("sarvam_moe"),
        tmp_path / "ckpt",
        rope_parameters={**saved["rope_parameters"], "partial_rotary_factor": 0.5},
    )
    build(BuildOptions(str(checkpoint), tmp_path / "pkg", smoke=False, text_only=True))
    tokens, got = ort_prefill_and_decode(tmp_path / "pkg", PROMPT, steps=2)
    expected = hf_logits(hf_model(builds.checkpoint("sarvam_moe")), tokens, len(PROMPT))
    assert not np.allclose(got, expected, atol=1e-4, rtol=1e-4)


def test_minimax_m2_in_the_hub_spelling(builds, tmp_path):
    """MiniMax-M2's config as published: partial RoPE as rotary_dim (the config class converts it),
    top-level rope_theta, a null sliding_window, and keys MiniMaxM2 never reads that other families
    do: routed_scaling_factor (its router scales nothing), clip_qkv (OLMoE's clamp, its spec's base),
    mlp_only_layers / decoder_sparse_step (Qwen-MoE's placement of its experts)."""
    _registered("minimax_m2")
    saved = json.loads((builds.checkpoint("minimax_m2") / "config.json").read_text())
    rope = saved["rope_parameters"]
    checkpoint = _respelled(
        builds.checkpoint("minimax_m2"),
        tmp_path / "ckpt",
        drop=("rope_parameters", "dtype"),
        rotary_dim=int(rope["partial_rotary_factor"] * saved["head_dim"]),
        rope_theta=rope["rope_theta"],
        sliding_window=None,
        routed_scaling_factor=2.0,
        clip_qkv=0.5,
        mlp_only_layers=[0],  # Qwen-MoE's placement keys, which MiniMaxM2 never reads (experts on every layer)
        decoder_sparse_step=2,
        torch_dtype="float32",
    )
    assert _exports_like_hf(checkpoint, tmp_path / "pkg") < 1e-4


def test_flex_olmo_with_a_clip_qkv_its_attention_never_reads(builds, tmp_path):
    """FlexOlmo's attention is OLMo-2's: a clip_qkv in its config.json (an OLMoE-style key) clamps nothing
    in HF; the export clamped q/k/v at it before (logits off by 4.6 at clip 0.5). Nor do Qwen-MoE's placement
    keys place anything (experts on every layer): the export stopped on a missing dense MLP before."""
    _registered("flex_olmo")
    checkpoint = _respelled(
        builds.checkpoint("flex_olmo"), tmp_path / "ckpt", clip_qkv=0.5, mlp_only_layers=[1], decoder_sparse_step=2
    )
    build(BuildOptions(str(checkpoint), tmp_path / "pkg", smoke=False, text_only=True))
    assert parity_error(tmp_path / "pkg", checkpoint) < 1e-4


def test_afmoe_without_mup(builds, tmp_path):
    """An AFMoE config with mup_enabled false: no embedding scale (the registry row has it on), and
    layer_types left to the class (global_attn_every_n_layers)."""
    _registered("afmoe")
    checkpoint = _respelled(builds.checkpoint("afmoe"), tmp_path / "ckpt", drop=("layer_types",), mup_enabled=False)
    assert _exports_like_hf(checkpoint, tmp_path / "pkg") < 1e-4
