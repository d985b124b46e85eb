"""Zamba2's and Zamba's own checks (tests/state_space_models.py zamba2; the checks every family gets are its row in
tests/families.py, its mutants tests/arch/test_shared_block_mutants.py): each use of a shared block
has its own KV cache while the block's weights are written once, config variants against HF, and
what is refused (docs/hybrid-state.md §8.12, §8.13; the standard-Attention modes: tests/arch/test_hybrid.py)."""

from __future__ import annotations

import json

import onnx
import pytest
from hybrid_checks import assert_variant_matches_hf
from mutants import edited_checkpoint
from typer.testing import CliRunner

from gqa_export.cli import app
from gqa_export.errors import InputError
from gqa_export.pipeline import BuildOptions, build

runner = CliRunner()
ZAMBA2 = "zamba2"


def test_each_use_has_its_own_cache_and_the_blocks_are_written_once(builds):
    """Layers 1, 3 and 4 run blocks 0, 1, 0: a KV cache each (heads of 2 H / 4 = 32), every layer's
    conv and SSM state; one copy of each block's weights, under its first layer, read by every use,
    and one adapter pair per use and projection."""
    package = builds.package(ZAMBA2)
    config = json.loads((package / "genai_config.json").read_text())["model"]
    assert config["type"] == "decoder" and "layer_types" not in config["decoder"]
    assert config["decoder"]["head_size"] == 32 and config["decoder"]["num_key_value_heads"] == 4
    graph = onnx.load(str(package / "model.onnx"), load_external_data=False).graph
    shapes = {i.name: [d.dim_value or d.dim_param for d in i.type.tensor_type.shape.dim] for i in graph.input}
    assert sorted(n for n in shapes if n.startswith("past_key_values")) == [
        f"past_key_values.{i}.{kv}" for i in (1, 3, 4) for kv in ("key", "value")
    ]
    assert shapes["past_key_values.4.key"] == ["batch_size", 4, "past_sequence_length", 32]
    assert [shapes[f"past.{i}.recurrent"] for i in range(5)] == [["batch_size", 4, 16, 32]] * 5
    names = [t.name for t in graph.initializer]
    qkv = [n for n in names if n.endswith("self_attn.qkv_proj.weight")]
    assert qkv == [f"model.layers.{i}.shared_transformer.self_attn.qkv_proj.weight" for i in (1, 3)]
    readers = {n: 0 for n in qkv}
    for node in graph.node:
        for name in node.input:
            if name in readers:
                readers[name] += 1
    assert readers == {qkv[0]: 2, qkv[1]: 1}  # block 0 by uses 0 and 2, block 1 by use 1
    adapters = sorted(n for n in names if "adapter_list" in n and n.endswith(".0.weight"))
    assert len(adapters) == 3 * 4  # uses x (q, k, v, gate_up)
    assert {n.split("adapter_list.")[1][0] for n in adapters} == {"0", "1", "2"}
    report = json.loads(runner.invoke(app, ["inspect", str(package), "--json"]).stdout)
    assert report["findings"] == []


@pytest.mark.parametrize(
    "overrides",
    [
        # one block for every use, no q/k/v adapters (GQA 4/2 then allowed), NoPE, every bias, one group
        dict(num_mem_blocks=1, use_shared_attention_adapter=False, num_key_value_heads=2, use_mem_rope=False,
             add_bias_linear=True, mamba_ngroups=1),
        # three blocks over four uses (0, 1, 2, 0), the first layer a hybrid one, tanh GELU
        dict(layers_block_type=["hybrid", "mamba", "hybrid", "hybrid", "hybrid"], num_mem_blocks=3,
             hidden_act="gelu_pytorch_tanh"),
        # untied: transformers 5.24 then ties no block either, and every use runs its layer's own copy
        dict(tie_word_embeddings=False),
    ],
    ids=["one_block_no_attention_adapters_biases", "three_blocks_first_layer_hybrid", "untied_blocks_per_layer"],
)  # fmt: skip
def test_zamba2_variants_match_hf(tmp_path, overrides):
    from state_space_models import save_state_space

    checkpoint = save_state_space(tmp_path / "ckpt", ZAMBA2, **overrides)
    package = tmp_path / "pkg"
    build(BuildOptions(str(checkpoint), package, smoke=False))  # genai runs it below
    assert_variant_matches_hf(package, checkpoint)


def test_attention_adapters_over_grouped_kv_heads_are_refused(builds, tmp_path):
    """The q/k/v adapters are 2 H wide: with fewer kv heads than heads HF's own forward fails; one line."""
    checkpoint = edited_checkpoint(builds.checkpoint(ZAMBA2), tmp_path / "ckpt", num_key_value_heads=2)
    with pytest.raises(InputError, match="use_shared_attention_adapter") as raised:
        build(BuildOptions(str(checkpoint), tmp_path / "pkg", smoke=False))
    assert "\n" not in str(raised.value) and not (tmp_path / "pkg").exists()


@pytest.mark.parametrize(
    "overrides",
    [
        # 4 Mamba heads of 32, in_proj / out_proj biases, no conv bias, every head its kv head, untied
        # (transformers 5.24 then ties no block: every hybrid layer runs its own copy)
        dict(n_mamba_heads=4, mamba_proj_bias=True, mamba_conv_bias=False, num_key_value_heads=4,
             tie_word_embeddings=False),
    ],
    ids=["four_heads_biases_untied"],
)  # fmt: skip
def test_zamba_variants_match_hf(tmp_path, overrides):
    from state_space_models import save_state_space

    checkpoint = save_state_space(tmp_path / "ckpt", "zamba", **overrides)
    package = tmp_path / "pkg"
    build(BuildOptions(str(checkpoint), package, smoke=False))  # genai runs it below
    assert_variant_matches_hf(package, checkpoint)


def test_multi_lora_targets_are_refused_for_shared_blocks(builds, tmp_path):
    """One LoRA input per shared weight would feed every use of the block: refused in one line, exit 2."""
    out = tmp_path / "pkg"
    args = ["build", str(builds.checkpoint(ZAMBA2)), "-o", str(out), "--lora-targets", "q_proj"]
    result = runner.invoke(app, args)
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert result.exit_code == 2 and len(errors) == 1 and "shared blocks" in errors[0], result.output
    assert not out.exists()
