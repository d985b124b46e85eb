"""DeepSeek-V2 / V3's multi-head latent attention and grouped routers, what only they have (the
checks every family gets, right-padded batches in every mode and in the latent cache included, are
their rows in tests/families.py): the expanded-cache graph and genai_config, a 1-token prompt,
variants (V2 with q-LoRA and group-limited routing under YaRN, V3 with rotate-half rope), the
refused router, and mutants of each mechanism (docs/latent-attention.md)."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import onnx
import pytest
from families import BY_NAME, require_registered, skip_where_the_reference_differs
from reference import (
    hf_generates_of,
    parity_error,
)

from gqa_export.errors import InputError
from gqa_export.pipeline import BuildOptions, build

V2, V3 = "deepseek_v2", "deepseek_v3"
FAMILIES = (V2, V3)
PROMPT = [0, 17, 45, 99, 200, 3, 7, 120, 64, 33, 250, 11, 12, 13]


def _registered(family: str, generation: bool = False) -> None:
    require_registered(family)
    skip_where_the_reference_differs(BY_NAME[family], generation)


def _with_config(checkpoint: Path, to: Path, **changes) -> Path:
    shutil.copytree(checkpoint, to)
    config = json.loads((to / "config.json").read_text())
    (to / "config.json").write_text(json.dumps({**config, **changes}))
    return to


def _package(checkpoint: Path, to: Path, **options) -> Path:
    build(BuildOptions(str(checkpoint), to, smoke=False, **options))
    return to


def test_expanded_cache_graph_and_genai_config(builds):
    """One kv head per query head of 16 + 8 = 24 channels; values padded from 16 to 24; the rope on
    the 8 rope channels by plain ops (GQA do_rotary=0); a dense MLP on layer 0, experts on 1 and 2."""
    _registered(V3)
    package = builds.package(V3)
    decoder = json.loads((package / "genai_config.json").read_text())["model"]["decoder"]
    assert (decoder["head_size"], decoder["num_key_value_heads"], decoder["num_attention_heads"]) == (24, 4, 4)
    graph = onnx.load(str(package / "model.onnx"), load_external_data=False).graph
    shapes = {i.name: [d.dim_value or d.dim_param for d in i.type.tensor_type.shape.dim] for i in graph.input}
    assert (
        shapes["past_key_values.0.key"]
        == shapes["past_key_values.2.value"]
        == ["batch_size", 4, "past_sequence_length", 24]
    )
    gqa = [n for n in graph.node if n.op_type == "GroupQueryAttention"]
    assert len(gqa) == 3 and all(a.i == 0 for n in gqa for a in n.attribute if a.name == "do_rotary")
    ops = [n.op_type for n in graph.node]
    assert ops.count("MoE") == 2 and ops.count("Pad") == 3
    names = {t.name for t in graph.initializer}
    assert (
        "model.layers.0.self_attn.q_b_proj.weight" in names
        and "model.layers.1.mlp.gate.e_score_correction_bias" in names
    )


@pytest.mark.parametrize("family", FAMILIES)
def test_one_token_prompt_and_decode_steps_match_hf(builds, family):
    _registered(family)
    assert parity_error(builds.package(family), builds.checkpoint(family), [0]) < 1e-4


def _v2_grouped(folder: Path) -> Path:
    """DeepSeek-V2 proper: q-LoRA, group_limited_greedy over 2 groups of 4 keeping 1 (with top-2 of
    softmax scores ranked by their group's maximum, the mask changes the choice only when fewer
    groups are kept than experts chosen), YaRN with mscale."""
    from moe_models import save_moe

    yarn = {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "original_max_position_embeddings": 64,
            "mscale": 0.707, "mscale_all_dim": 0.707, "beta_fast": 32.0, "beta_slow": 1.0}  # fmt: skip
    overrides = dict(q_lora_rank=32, topk_method="group_limited_greedy", n_group=2, topk_group=1)
    return save_moe(folder, V2, hub_layout=False, rope_parameters=yarn, **overrides)


@pytest.mark.parametrize("mode", ["gqa", "bias"])
def test_v2_with_q_lora_group_limited_routing_and_yarn_matches_hf(tmp_path, mode):
    _registered(V2)
    checkpoint = _v2_grouped(tmp_path / "ckpt")
    package = _package(checkpoint, tmp_path / "pkg", attention=mode)
    assert parity_error(package, checkpoint) < 1e-4  # measured 3.7e-6
    assert parity_error(package, checkpoint, [0]) < 1e-4


def test_v3_with_rotate_half_rope_matches_hf(builds, tmp_path):
    """rope_interleave false: the rope channels rotate in halves instead of GPT-J pairs."""
    _registered(V3)
    from moe_models import save_moe

    checkpoint = save_moe(tmp_path / "ckpt", V3, rope_interleave=False)
    assert parity_error(_package(checkpoint, tmp_path / "pkg"), checkpoint) < 1e-4


def test_v2_router_other_than_greedy_is_refused(builds, tmp_path):
    _registered(V2)
    checkpoint = _with_config(builds.checkpoint(V2), tmp_path / "ckpt", topk_method="noaux_tc")
    with pytest.raises(InputError, match="topk_method 'noaux_tc'"):
        _package(checkpoint, tmp_path / "pkg")


# ---- mutants: each mechanism planted wrong must break parity --------------------------------------


@pytest.mark.parametrize("family", FAMILIES)
def test_mutant_softmax_scale_times_1_5_fails_parity(builds, tmp_path, monkeypatch, family):
    from gqa_export.model import dims

    _registered(family)
    real = dims.latent_scale
    monkeypatch.setattr(dims, "latent_scale", lambda config, lat: 1.5 * real(config, lat))
    assert parity_error(_package(builds.checkpoint(family), tmp_path / "pkg"), builds.checkpoint(family)) > 1e-2


def test_mutant_mscale_left_out_of_the_scale_fails_parity(builds, tmp_path, monkeypatch):
    """YaRN's mscale(factor, mscale_all_dim)^2 on the softmax scale (V3's tiny config: 1.089)."""
    from gqa_export.model import dims

    _registered(V3)
    monkeypatch.setattr(dims, "latent_scale", lambda config, lat: float(lat.head_dim) ** -0.5)
    assert parity_error(_package(builds.checkpoint(V3), tmp_path / "pkg"), builds.checkpoint(V3)) > 1e-2


@pytest.mark.parametrize("family", FAMILIES)
def test_mutant_rope_pairs_rotated_as_halves_fails_parity(builds, tmp_path, monkeypatch, family):
    """The export told rope_interleave false while HF (V2 always, V3 by its config) pairs (2i, 2i+1); V2's class
    never names the key, so the mutant also reads it for every class."""
    from mutants import read_for_every_class

    read_for_every_class(monkeypatch, "rope_interleave")
    _registered(family)
    checkpoint = _with_config(builds.checkpoint(family), tmp_path / "ckpt", rope_interleave=False)
    assert parity_error(_package(checkpoint, tmp_path / "pkg"), builds.checkpoint(family)) > 1e-2


@pytest.mark.parametrize("family", FAMILIES)
def test_mutant_expert_groups_ignored_fails_parity(builds, tmp_path, monkeypatch, family):
    """The top-k taken over every expert instead of within the topk_group best groups (V3's tiny
    config; V2's group-limited variant): measured 2.5 and 0.96."""
    from gqa_export.model import moe

    _registered(family)
    checkpoint = builds.checkpoint(V3) if family == V3 else _v2_grouped(tmp_path / "ckpt")
    monkeypatch.setattr(moe, "expert_groups", lambda opt, spec, experts: (1, 1))
    assert parity_error(_package(checkpoint, tmp_path / "pkg"), checkpoint) > 1e-2


def test_mutant_selection_bias_dropped_fails_parity(builds, tmp_path, monkeypatch):
    """V3's e_score_correction_bias not added to the scores the experts are chosen on."""
    from gqa_export.arch import SPECS

    _registered(V3)
    spec = SPECS[V3]
    names = replace(spec.moe.names, expert_bias=None)  # type: ignore[union-attr]
    monkeypatch.setitem(SPECS, V3, replace(spec, moe=replace(spec.moe, names=names)))
    assert parity_error(_package(builds.checkpoint(V3), tmp_path / "pkg"), builds.checkpoint(V3)) > 1e-2


def test_mutant_routed_scaling_dropped_fails_parity(builds, tmp_path):
    """V2's top-k weights times routed_scaling_factor (1.5 in the tiny config), never renormalized."""
    _registered(V2)
    checkpoint = _with_config(builds.checkpoint(V2), tmp_path / "ckpt", routed_scaling_factor=1.0)
    assert parity_error(_package(checkpoint, tmp_path / "pkg"), builds.checkpoint(V2)) > 1e-2


# ---- the latent cache (recipe attention.latent_cache: one kv head of kv_lora_rank + qk_rope_head_dim) ----
LATENT_CACHE = ("attention.latent_cache=true",)


@pytest.mark.parametrize("family", FAMILIES)
def test_latent_cache_matches_hf_and_generates_like_hf(builds, family):
    """Keys [RMSNorm(c) | k_rope] as one kv head of 32 + 8 = 40 (values = keys), kv_b absorbed into
    the query and the output: prompt and decode logits of 14- and 1-token prompts, greedy genai
    tokens = HF generate (a right-padded batch of it: the registry's "gqa_latent" form, tests/families.py)."""
    _registered(family, generation=True)
    # mode gqa with LATENT_CACHE (tests/families.py MODE_SETTINGS), the build the registry's ragged batch reads
    package, checkpoint = builds.package(family, "gqa_latent"), builds.checkpoint(family)
    decoder = json.loads((package / "genai_config.json").read_text())["model"]["decoder"]
    assert (decoder["head_size"], decoder["num_key_value_heads"]) == (40, 1)
    assert parity_error(package, checkpoint) < 1e-4  # measured 3.4e-6 (V2), 3.3e-6 (V3)
    assert parity_error(package, checkpoint, [0]) < 1e-4
    # HF's tokens once per session (the registry's greedy check compares with the same)
    prompts = BY_NAME[family].prompts
    for prompt, want in zip(prompts, hf_generates_of(checkpoint, prompts, 40), strict=True):
        assert genai_greedy(package, list(prompt)) == want


def genai_greedy(package: Path, prompt: list[int]) -> list[int]:
    from gqa_export.runtime.run import generate_greedy

    return generate_greedy(package, prompt, 40, min_new_tokens=40).tokens


def test_latent_cache_outside_gqa_or_latent_attention_is_refused(builds, tmp_path):
    from gqa_export.graph.latent_attention import latent_cache_dims

    _registered(V2)
    with pytest.raises(InputError, match="mode gqa"):
        _package(builds.checkpoint(V2), tmp_path / "pkg", settings=LATENT_CACHE, attention="bias")
    with pytest.raises(InputError, match="multi-head latent attention"):
        latent_cache_dims(replace(_dims(builds.checkpoint(V2)), latent=None))


def _dims(checkpoint: Path):
    from transformers import AutoConfig

    from gqa_export.arch import get_spec
    from gqa_export.model.dims import read_dims

    return read_dims(AutoConfig.from_pretrained(checkpoint), get_spec(V2), None)


def test_mutant_absorbed_key_and_value_blocks_exchanged_fails_parity(builds, tmp_path, monkeypatch):
    """kv_b's key rows absorbed into the output and its value rows into the query (the tiny shapes
    agree: nope = v = 16)."""
    from gqa_export.graph import latent_attention

    _registered(V3)
    real = latent_attention._absorbed
    swapped = {"k": "v", "v": "k"}

    def exchanged(lc, part):
        value = real(lc, swapped[part])
        perm = [0, 2, 1]
        return lc.b.op("Transpose", value, perm=perm, name=f"mutant_{part}")

    monkeypatch.setattr(latent_attention, "_absorbed", exchanged)
    package = _package(builds.checkpoint(V3), tmp_path / "pkg", settings=LATENT_CACHE)
    assert parity_error(package, builds.checkpoint(V3)) > 1e-2
