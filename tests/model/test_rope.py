"""Our numpy rope tables equal transformers' own ROPE_INIT_FUNCTIONS + rotary forward."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from variants import LLAMA3_ROPE

from gqa_export.model.rope import cos_sin_tables, read_rope

ROPES = {
    "default": {"rope_type": "default", "rope_theta": 10000.0},
    "linear": {"rope_type": "linear", "factor": 4.0, "rope_theta": 10000.0},
    "llama3": LLAMA3_ROPE,
    # YaRN's attention factor scales cos/sin: 0.1 ln(factor) + 1, or DeepSeek's mscale ratio
    "yarn": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 128, "rope_theta": 10000.0},
    "yarn_mscale": {
        "rope_type": "yarn",
        "factor": 4.0,
        "original_max_position_embeddings": 128,
        "rope_theta": 10000.0,
        "mscale": 0.707,
        "mscale_all_dim": 1.0,
    },
}


@pytest.mark.parametrize("name", list(ROPES))
def test_tables_match_hf_rotary_embedding(name):
    import torch
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    config = LlamaConfig(
        hidden_size=128, num_attention_heads=2, max_position_embeddings=512, rope_parameters=ROPES[name]
    )
    positions = torch.arange(512)[None]
    cos_ref, sin_ref = LlamaRotaryEmbedding(config)(torch.zeros(1, dtype=torch.float32), positions)
    cos, sin = cos_sin_tables(read_rope(config, 64), 512, 512)
    half = cos.shape[1]
    assert half == 32
    # float32 angles: one ulp of inv_freq times position ~500 is ~3e-5 rad, on both sides.
    np.testing.assert_allclose(cos, cos_ref[0, :, :half].numpy(), atol=1e-4)
    np.testing.assert_allclose(sin, sin_ref[0, :, :half].numpy(), atol=1e-4)


def test_v4_rope_scaling_spelling_is_read():
    v4_config = SimpleNamespace(rope_scaling={"type": "linear", "factor": 2.0}, rope_theta=5e5)
    rope = read_rope(v4_config, 64)
    assert (rope.rope_type, rope.theta, rope.params) == ("linear", 5e5, {"factor": 2.0})


@pytest.mark.parametrize("spelled", [{"rotary_dim": 64}, {"partial_rotary_factor": 2.0}])
def test_more_rotated_channels_than_the_head_has_are_refused_in_one_line(spelled):
    """A rotated width past head_dim would write a graph onnxruntime cannot load (a Split of more
    channels than the head holds): refused before any graph is built."""
    from gqa_export.errors import InputError

    config = SimpleNamespace(rope_parameters={"rope_type": "default", "rope_theta": 1e4}, **spelled)
    with pytest.raises(InputError, match=r"rotates 64 channels of each head .* but head_dim is 32") as refused:
        read_rope(config, head_dim=32)
    assert "\n" not in str(refused.value)


def test_rope_parameters_partial_factor_decides_over_a_stray_rotary_dim():
    """MiniMax-M2's config converts the hub's rotary_dim into partial_rotary_factor only when none is given
    (setdefault), and its rotary reads that factor alone: a config with both, disagreeing, rotates
    head_dim x factor channels (12 here, not 10: logits off by ~5 at fp32 before the fix). GPT-J's
    rotary_dim, with no factor in its rope parameters, still decides."""
    from transformers import GPTJConfig, MiniMaxM2Config

    both = MiniMaxM2Config(head_dim=24, rotary_dim=10, partial_rotary_factor=0.5)
    assert read_rope(both, 24).rotary_dim == 12
    assert read_rope(MiniMaxM2Config(head_dim=24, rotary_dim=10), 24).rotary_dim == 10
    assert read_rope(GPTJConfig(rotary_dim=16), 64).rotary_dim == 16


def test_an_odd_rotated_width_of_a_scaled_type_is_refused_in_one_line():
    """An odd int(head_dim x partial_rotary_factor) rotates its half rounded up pairs (MiMo-V2-Flash's 13 of
    40: 14 channels, tests/arch/test_mimo_v2_flash.py); the types whose frequencies are not the default
    ones (YaRN's ramp has dim // 2 entries: HF's own tables do not fit) are refused."""
    from gqa_export.errors import InputError

    assert (
        read_rope(SimpleNamespace(rope_parameters={"rope_theta": 1e4, "partial_rotary_factor": 0.334}), 40).rotary_dim
        == 14
    )
    config = SimpleNamespace(rope_parameters={**ROPES["yarn"], "partial_rotary_factor": 0.334})
    with pytest.raises(InputError, match=r"odd 13 channels .* rope type 'yarn'") as refused:
        read_rope(config, head_dim=40)
    assert "\n" not in str(refused.value)
