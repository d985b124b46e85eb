"""The classic decoders (issue #24: Falcon, Bloom, MPT, CodeGen), what only they have: fused
query_key_value weights read in their own row orders (each read as another layout is a mutant that
fails parity), Falcon-40B's two parallel norms, ALiBi's per-head bias (mode bias only; gqa refused),
and the configs refused in one line. The checks every family gets, a right-padded batch through
onnxruntime-genai included, are their rows in tests/families.py (docs/architecture.md §2.3)."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from families import BY_NAME
from reference import parity_error

from gqa_export.errors import InputError
from gqa_export.graph.fused_qkv import qkv_runs
from gqa_export.pipeline import BuildOptions, build


def _mode(name: str) -> str:
    """The single-graph mode of a family's package: bias for the ALiBi families, else gqa."""
    return BY_NAME[name].logits_mode


def _stored_order(layout: str, heads: int, kv_heads: int, head_dim: int):
    """A mutant's change: the exported [in, q|k|v] weight's columns put back in the stored row
    order, i.e. the fused weight read as if it were already stacked q | k | v."""
    q, k, v = qkv_runs(layout, heads, kv_heads, head_dim)
    selected = np.concatenate([np.arange(a, z) for a, z in q + k + v])
    inverse = np.argsort(selected)
    return lambda w: w[..., inverse]


def _swap_kv(q_width: int, kv_width: int):
    def change(w: np.ndarray) -> np.ndarray:
        k, v = w[..., q_width : q_width + kv_width], w[..., q_width + kv_width :]
        return np.concatenate([w[..., :q_width], v, k], axis=-1)

    return change


# (family, initializer pattern, change): a planted bug in the mechanism each family adds
MUTANTS = {
    # Bloom's per-head q | k | v read as stacked; ALiBi's slopes scaled, reversed over the heads, dropped
    "bloom_qkv_read_stacked": ("bloom", "*.query_key_value.weight", _stored_order("grouped", 4, 4, 16)),
    "bloom_qkv_bias_read_stacked": ("bloom", "*.query_key_value.bias", _stored_order("grouped", 4, 4, 16)),
    "bloom_alibi_scaled": ("bloom", "const.alibi_slopes", lambda w: w * 1.5),
    "bloom_alibi_heads_reversed": ("bloom", "const.alibi_slopes", lambda w: w[:, ::-1]),
    "bloom_alibi_dropped": ("bloom", "const.alibi_slopes", np.zeros_like),
    "bloom_embedding_norm_scaled": ("bloom", "*.word_embeddings_layernorm.weight", lambda w: w * 1.5),
    # MPT: its slopes scaled and dropped, the clip_qkv bound widened x1.5
    "mpt_alibi_scaled": ("mpt", "const.alibi_slopes", lambda w: w * 1.5),
    "mpt_alibi_dropped": ("mpt", "const.alibi_slopes", np.zeros_like),
    "mpt_clip_widened": ("mpt", "const.clip_qkv*", lambda w: w * 1.5),
    # CodeGen's q | v | k blocks read as stacked q | k | v, or with k and v in the stored order
    "codegen_qkv_read_stacked": ("codegen", "*.qkv_proj.weight", _stored_order("blocks_qvk", 4, 4, 16)),
    "codegen_kv_swapped": ("codegen", "*.qkv_proj.weight", _swap_kv(64, 64)),
    # Falcon-7B: 4 query heads of 16 and one kv head; read as stacked it is the same (q | k | v)
    # by construction, so the bug planted is k and v exchanged
    "falcon_kv_swapped": ("falcon", "*.query_key_value.weight", _swap_kv(64, 16)),
    # Falcon-40B's grouped rows read as stacked, its kv exchanged, its MLP norm scaled
    "falcon_grouped_read_stacked": (
        "falcon_grouped", "*.query_key_value.weight", _stored_order("grouped", 4, 2, 16)
    ),
    "falcon_grouped_bias_read_stacked": (
        "falcon_grouped", "*.query_key_value.bias", _stored_order("grouped", 4, 2, 16)
    ),
    "falcon_grouped_kv_swapped": ("falcon_grouped", "*.query_key_value.weight", _swap_kv(64, 32)),
    "falcon_grouped_ln_mlp_scaled": ("falcon_grouped", "*.ln_mlp.weight", lambda w: w * 1.5),
}  # fmt: skip


@pytest.mark.parametrize("mutant", MUTANTS)
def test_classic_mutants_fail_parity(builds, tmp_path, mutant):
    from mutants import edit_initializers

    family, pattern, change = MUTANTS[mutant]
    package = shutil.copytree(builds.package(family, _mode(family)), tmp_path / "pkg")
    assert edit_initializers(package, pattern, change), f"{pattern} matched nothing"
    assert parity_error(package, builds.checkpoint(family)) > 1e-2


@pytest.mark.parametrize("name", ["falcon", "falcon_grouped", "bloom", "mpt", "codegen"])
def test_classic_one_token_prompt_matches_hf(builds, name):
    assert parity_error(builds.package(name, _mode(name)), builds.checkpoint(name), (0,)) < 1e-4


def test_falcon_alibi_is_refused_in_one_line(tmp_path):
    from dense_models import save_dense

    checkpoint = save_dense(tmp_path / "ckpt", "falcon", alibi=True)
    with pytest.raises(InputError, match="ALiBi variant") as refused:
        build(BuildOptions(str(checkpoint), tmp_path / "pkg", smoke=False))
    assert "\n" not in str(refused.value)


@pytest.mark.parametrize(
    ("mode", "settings"),
    [("gqa", ()), ("split", ()), ("bias", ("attention.bias_op=gqa",))],
    ids=["gqa", "split", "bias_op_gqa"],
)
def test_alibi_without_standard_attention_is_refused_in_one_line(builds, tmp_path, mode, settings):
    """GroupQueryAttention takes no per-head additive bias: every graph with it is refused."""
    with pytest.raises(InputError, match="ALiBi position bias") as refused:
        build(BuildOptions(str(builds.checkpoint("bloom")), tmp_path / "pkg", attention=mode, settings=settings))
    assert "\n" not in str(refused.value) and "--attention bias" in str(refused.value)


def test_bloom_post_layernorm_residual_is_refused(tmp_path):
    from dense_models import save_dense

    checkpoint = save_dense(tmp_path / "ckpt", "bloom", apply_residual_connection_post_layernorm=True)
    with pytest.raises(InputError, match="apply_residual_connection_post_layernorm"):
        build(BuildOptions(str(checkpoint), tmp_path / "pkg", smoke=False))


@pytest.mark.parametrize("heads", [4, 6, 12, 16, 20])
def test_alibi_slopes_are_hf_own(heads):
    """Both slope kinds, powers of two and not (the odd extras, MPT's odd-first order), against HF's
    own builders, to one float32 ulp (torch's pow rounds the last bit by the CPU's vector unit: one
    slope of 16 differs by an ulp on an AMD EPYC); the graph's bias is checked end to end by the
    registry rows and the mutants."""
    import torch
    from transformers.models.bloom.modeling_bloom import build_alibi_tensor
    from transformers.models.mpt.modeling_mpt import build_mpt_alibi_tensor

    from gqa_export.model.alibi import alibi_slopes

    bloom = build_alibi_tensor(torch.ones(1, 2, dtype=torch.long), heads, torch.float32)[:, 0, 1]  # slope x 1
    np.testing.assert_array_max_ulp(np.asarray(alibi_slopes("geometric", heads), np.float32), bloom.numpy(), 1)
    mpt = -build_mpt_alibi_tensor(heads, 2)[:, 0, 0]  # slope x (1 - 2)
    np.testing.assert_array_max_ulp(np.asarray(alibi_slopes("bias_max", heads), np.float32), mpt.numpy(), 1)


def _edited(checkpoint: Path, to: Path, **attn: object) -> Path:
    """A copy of the MPT checkpoint with attn_config keys changed."""
    import json

    copy = shutil.copytree(checkpoint, to)
    config = json.loads((copy / "config.json").read_text())
    config["attn_config"] = {**config["attn_config"], **attn}
    (copy / "config.json").write_text(json.dumps(config))
    return copy


@pytest.mark.parametrize("attn", [dict(clip_qkv=None), dict(softmax_scale=None)], ids=["no_clip", "default_scale"])
def test_mpt_mutant_config_without_its_attention_options_fails_parity(builds, tmp_path, attn):
    """The checkpoint's clip_qkv / softmax_scale dropped from the config: a wrong model."""
    checkpoint = _edited(builds.checkpoint("mpt"), tmp_path / "ckpt", **attn)
    build(BuildOptions(str(checkpoint), tmp_path / "pkg", smoke=False))
    assert parity_error(tmp_path / "pkg", builds.checkpoint("mpt")) > 1e-2


@pytest.mark.parametrize(
    ("attn", "match"),
    [
        (dict(qk_ln=True), "qk_ln"),
        (dict(alibi=False), "learned position embeddings"),
        (dict(prefix_lm=True), "prefix_lm"),
        (dict(alibi_bias_max=16), "alibi_bias_max 16"),
    ],
    ids=["qk_ln", "no_alibi", "prefix_lm", "bias_max"],
)
def test_mpt_options_transformers_lacks_are_refused_in_one_line(builds, tmp_path, attn, match):
    checkpoint = _edited(builds.checkpoint("mpt"), tmp_path / "ckpt", **attn)
    with pytest.raises(InputError, match=match) as refused:
        build(BuildOptions(str(checkpoint), tmp_path / "pkg", smoke=False))
    assert "\n" not in str(refused.value)


def test_codegen_mutant_rotating_the_whole_head_fails_parity(builds, tmp_path):
    """rotary_dim set to the whole head (RoPE on all 16 channels instead of 8): a wrong model."""
    import json

    checkpoint = shutil.copytree(builds.checkpoint("codegen"), tmp_path / "ckpt")
    config = json.loads((checkpoint / "config.json").read_text())
    (checkpoint / "config.json").write_text(json.dumps({**config, "rotary_dim": 16}))
    build(BuildOptions(str(checkpoint), tmp_path / "pkg", smoke=False))
    assert parity_error(tmp_path / "pkg", builds.checkpoint("codegen")) > 1e-2


def test_codegen_full_rotary_matches_hf(tmp_path):
    """rotary_dim = head_dim: GPT-J pairs over the whole head (GQA's fused RoPE)."""
    from dense_models import save_dense

    checkpoint = save_dense(tmp_path / "ckpt", "codegen", rotary_dim=16)
    build(BuildOptions(str(checkpoint), tmp_path / "pkg", smoke=False))
    assert parity_error(tmp_path / "pkg", checkpoint) < 1e-4


def test_codegen_heads_straddling_its_qkv_blocks_match_hf(tmp_path):
    """transformers 5.x splits CodeGen's fused projection into 4 blocks by width, not by head: 5 heads of
    16 are 4 blocks of 20 channels (was refused; 4.x cannot run it, its blocks hold whole heads)."""
    from dense_models import save_dense
    from families import transformers_major

    if transformers_major() < 5:
        pytest.skip("transformers 4.x's CodeGen requires whole heads per qkv block")
    checkpoint = save_dense(tmp_path / "ckpt", "codegen", n_embd=80, n_head=5, n_layer=1, vocab_size=257)
    build(BuildOptions(str(checkpoint), tmp_path / "pkg", smoke=False))
    assert parity_error(tmp_path / "pkg", checkpoint) < 1e-4


def test_alibi_fp16_package_runs_close_to_hf(builds):
    """ALiBi's slopes stay float32 in a 16-bit package (the bias is cast after): the fp16 build was an
    AssertionError (an fp32 initializer in an fp16 plan; MPT's too, the same graph/alibi.py); on CPU it is
    within fp16's bound of HF."""
    from reference import hf_logits, hf_model, ort_prefill_and_decode

    package = builds.package("bloom", "bias", precision="fp16")
    tokens, got = ort_prefill_and_decode(package, [0, 17, 45, 99, 200, 3, 7, 120, 64, 33], steps=3)
    ref = hf_logits(hf_model(builds.checkpoint("bloom")), tokens, 10)
    assert np.abs(got - ref).max() < 3e-2 * max(1.0, float(np.abs(ref).max()))
