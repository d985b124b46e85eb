"""MiMo-V2-Flash's attention (gqa_export/arch/derived_moe_families.py): what its registry rows
(tests/families.py: gqa logits, greedy tokens, ragged batch, int4/int8, fp16, the 5.x layout) do not
show. The graph's shape per layer type (sinks and twice the kv heads on the sliding layers only,
values zero-padded to the key width and cut before o_proj), the one-line refusal of the
standard-Attention modes (the sinks need GroupQueryAttention), and mutants, each planted into a copy
of the registry package or into the spec and each breaking HF parity: the sinks dropped, the value
scale dropped, the padded channels kept in place of the values', the kv heads not doubled (the build
stops: the weights follow the rule), RoPE's theta shared across layer types."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace

import numpy as np
import onnx
import pytest
from families import require_registered
from mutants import copy_package, edit_initializers
from reference import parity_error
from typer.testing import CliRunner

from gqa_export.cli import app
from gqa_export.pipeline import BuildOptions, build

FAMILY = "mimo_v2_flash"
SLIDING = (1, 2)  # the tiny config's layer_types: full, sliding, sliding, full


@pytest.fixture(autouse=True)
def _registered() -> None:
    require_registered(FAMILY)


def _attention_nodes(package) -> list[dict]:
    graph = onnx.load(str(package / "model.onnx"), load_external_data=False).graph
    nodes = [n for n in graph.node if n.op_type == "GroupQueryAttention"]
    return [
        {
            "kv": next(a.i for a in n.attribute if a.name == "kv_num_heads"),
            "window": next(a.i for a in n.attribute if a.name == "local_window_size"),
            "sink": len(n.input) > 11 and bool(n.input[11]),
        }
        for n in nodes
    ]


def test_sliding_layers_have_sinks_and_twice_the_kv_heads(builds):
    nodes = _attention_nodes(builds.package(FAMILY))
    assert [(n["kv"], n["window"], n["sink"]) for n in nodes] == [
        (2, 8, True) if i in SLIDING else (1, -1, False) for i in range(4)
    ]
    graph = onnx.load(str(builds.package(FAMILY) / "model.onnx"), load_external_data=False).graph
    ops = [n.name for n in graph.node]
    assert sum(n.endswith("/v_pad") for n in ops) == 4 and sum(n.endswith("/drop_v_padding") for n in ops) == 4
    decoder = json.loads((builds.package(FAMILY) / "genai_config.json").read_text())["model"]["decoder"]
    assert decoder["head_size"] == 24  # the keys' width; values padded to it


@pytest.mark.parametrize("mode", ["bias", "split"])
def test_standard_attention_modes_are_refused_in_one_line(builds, tmp_path, mode):
    out = tmp_path / "pkg"
    args = ["build", str(builds.checkpoint(FAMILY)), "-o", str(out), "--no-smoke", "--attention", mode]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if "sinks" in line]
    assert len(lines) == 1 and "--attention gqa" in lines[0] and "Traceback" not in result.output, result.output
    assert not out.exists()


@pytest.mark.parametrize("head_dim", [24, 40])
@pytest.mark.parametrize("spec_default", [0.334, None], ids=["spec", "mutant-top-level-or-1"])
def test_rope_share_the_per_type_parameters_leave_out(spec_default, head_dim, monkeypatch):
    """rope_parameters by layer type without partial_rotary_factor: HF's class rotates
    int(head_dim * 0.334) channels there (never the top-level key); the export's rotary width must be
    the inv_freq HF builds. The mutant (the spec's default dropped: the top-level key or 1) differs.
    head_dim 40: an odd 13, whose 7 frequencies theta^(-2j/13) HF rotates over 14 channels (before the
    fix a 13-wide rope whose graph onnxruntime refused to load); the tables equal HF's cos / sin."""
    from transformers import AutoConfig
    from transformers.models.mimo_v2_flash.modeling_mimo_v2_flash import MiMoV2FlashRotaryEmbedding

    from gqa_export.arch import SPECS
    from gqa_export.model.dims import read_dims

    ropes = {t: {"rope_type": "default", "rope_theta": 1e4} for t in ("full_attention", "sliding_attention")}
    config = AutoConfig.for_model(
        FAMILY, head_dim=head_dim, v_head_dim=16, partial_rotary_factor=0.5, rope_parameters=ropes
    )
    rotary = MiMoV2FlashRotaryEmbedding(config)
    hf = {t: 2 * len(getattr(rotary, f"{t}_inv_freq")) for t in ropes}
    monkeypatch.setitem(SPECS, FAMILY, replace(SPECS[FAMILY], rope_partial_default=spec_default))
    exported = read_dims(config, SPECS[FAMILY], None).ropes
    got = {key: rope.rotary_dim for key, rope in exported.items()}
    assert (got == hf) == (spec_default is not None), (got, hf)  # HF: 8 of 24, 14 of 40
    if spec_default is not None:
        import torch

        from gqa_export.model.rope import cos_sin_tables

        cos, _ = rotary(torch.zeros(1), torch.arange(64)[None], "sliding_attention")
        table, _ = cos_sin_tables(exported["sliding_attention"], 64, 64)
        np.testing.assert_allclose(table, cos[0, :, : hf["sliding_attention"] // 2].numpy(), atol=1e-5)


def test_the_correct_package_passes(builds):
    assert parity_error(builds.package(FAMILY), builds.checkpoint(FAMILY)) < 1e-4  # measured 2.1e-6


def _planted(builds, tmp_path, name: str, pattern: str, change) -> float:
    broken = copy_package(builds.package(FAMILY), tmp_path / name)
    assert edit_initializers(broken, pattern, change), pattern
    return parity_error(broken, builds.checkpoint(FAMILY))


def test_mutant_sinks_dropped_fails_hf_parity(builds, tmp_path):
    """The sliding layers' sink logits at -1e4: exp(sink) adds nothing to the softmax denominator."""
    assert _planted(builds, tmp_path, "sinks", "*attention_sink_bias", lambda v: np.full_like(v, -1e4)) > 1e-2


def test_mutant_value_scale_dropped_fails_hf_parity(builds, tmp_path):
    """attention_value_scale (0.707) on v_proj's output set to 1."""

    def unscaled(values: np.ndarray) -> np.ndarray:
        return np.where(np.isclose(values, np.float32(0.707)), 1.0, values).astype(values.dtype)

    assert _planted(builds, tmp_path, "*output_multiplier", "*output_multiplier", unscaled) > 1e-2


def test_mutant_values_padded_in_front_fails_hf_parity(builds, tmp_path):
    """The values' 8 zero channels put before their 16 instead of after: the output's first 16 channels,
    which o_proj reads, are then half padding."""

    def in_front(pads: np.ndarray) -> np.ndarray:
        return np.concatenate([pads[4:], pads[:4]])

    assert _planted(builds, tmp_path, "pads", "const.v_pads*", in_front) > 1e-2


def test_mutant_kv_heads_not_doubled_cannot_build(builds, tmp_path, monkeypatch):
    """num_key_value_heads on every layer (the plain config rule): the sliding layers' k/v weights
    hold twice as many heads, which config.json against the weights refuses in one line (source/consistency.py;
    before that check the package was written and failed to load: its qkv split did not add up)."""
    from gqa_export.arch import SPECS
    from gqa_export.errors import InputError

    monkeypatch.setitem(SPECS, FAMILY, replace(SPECS[FAMILY], kv_heads_rule="config"))
    with pytest.raises(
        InputError, match=r"num_key_value_heads / head_dim gives \d+ but model\.layers\.1\.self_attn\.k_proj"
    ):
        build(BuildOptions(str(builds.checkpoint(FAMILY)), tmp_path / "pkg", smoke=False))
    assert not (tmp_path / "pkg").exists()


def test_mutant_one_rope_theta_fails_hf_parity(builds, tmp_path):
    """The sliding layers' RoPE tables (theta 1e4) replaced by the full layers' (theta 5e6)."""
    package = builds.package(FAMILY)
    graph = onnx.load(str(package / "model.onnx")).graph  # the tables with their external data
    full = {t.name: onnx.numpy_helper.to_array(t) for t in graph.initializer if t.name.startswith("full_attention.")}
    broken = copy_package(package, tmp_path / "rope")
    for part in ("cos_cache", "sin_cache"):
        assert edit_initializers(broken, f"sliding_attention.{part}", lambda v, p=part: full[f"full_attention.{p}"])
    assert parity_error(broken, builds.checkpoint(FAMILY)) > 1e-2


def test_heads_not_a_multiple_of_the_sliding_kv_heads_are_refused(builds, tmp_path):
    """5 query heads over 1 kv head on full layers, 2 on sliding ones: transformers' sliding attention
    fails on it (a size mismatch), and the export refuses it in one line, from the config alone (a checkpoint
    whose weights hold the 5 heads was written as a package whose GroupQueryAttention failed when run: hidden 40,
    head_dim 8; here the registry's weights hold 4 heads, which the config check reaches first)."""
    from gqa_export.errors import InputError

    checkpoint = tmp_path / "ckpt"
    shutil.copytree(builds.checkpoint(FAMILY), checkpoint)
    config = json.loads((checkpoint / "config.json").read_text())
    (checkpoint / "config.json").write_text(json.dumps({**config, "num_attention_heads": 5}))
    with pytest.raises(InputError, match="num_attention_heads 5 is not a multiple of the 2 kv heads of the sliding"):
        build(BuildOptions(str(checkpoint), tmp_path / "pkg", smoke=False))
    assert not (tmp_path / "pkg").exists()
