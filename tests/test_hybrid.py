"""Hybrid decoders, what only they have: short-convolution layers (LFM2) carry a fixed-size state
(past.N.conv / present.N.conv) next to the GQA layers' KV cache, gated-DeltaNet layers (Qwen3.5) a
conv and a recurrent state (past.N.conv, past.N.recurrent; Qwen3-Next's too, its projections
fused per key head in the checkpoint), and so do Mamba2 layers (Granite-4.0-H: its SSM state as
past.N.recurrent). The checks every family gets (logits
and greedy tokens against HF, int4, fp16 CUDA) are LFM2's and Qwen3.5's rows in tests/families.py; here:
the state is really carried from step to step (a graph that drops it fails the decode steps),
genai_config describes it the way onnxruntime-genai binds it, inspect accounts for it, the lints
catch a config the runtime would misbind, and the standard-Attention modes are refused."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
from families import PROMPT, FamilyBuilds
from reference import genai_prompt_then_greedy, hf_generate, hf_logits, hf_model, ort_prefill_and_decode
from typer.testing import CliRunner

from gqa_export.cli import app
from gqa_export.graph.gated_deltanet import grouped_rows
from gqa_export.pipeline import BuildOptions, build

runner = CliRunner()


@pytest.fixture(scope="session")
def builds(request, checkpoints, tmp_path_factory) -> FamilyBuilds:
    return FamilyBuilds.of_session(request, checkpoints, tmp_path_factory)


def _copy(package: Path, to: Path) -> Path:
    shutil.copytree(package, to)
    return to


def _parity_error(package: Path, checkpoint: Path) -> float:
    tokens, got = ort_prefill_and_decode(package, list(PROMPT), steps=6)
    return float(np.abs(got - hf_logits(hf_model(checkpoint), tokens, len(PROMPT))).max())


def test_genai_config_describes_the_state_as_the_runtime_binds_it(builds):
    config = json.loads((builds.package("lfm2") / "genai_config.json").read_text())["model"]["decoder"]
    assert config["layer_types"] == ["conv", "full_attention", "conv", "conv"]
    assert config["num_hidden_layers"] == 4 and config["conv_cache_size"] == 2  # kernel 3
    assert config["inputs"]["past_conv_names"] == "past.%d.conv"
    assert config["outputs"]["present_conv_names"] == "present.%d.conv"
    graph = onnx.load(str(builds.package("lfm2") / "model.onnx"), load_external_data=False).graph
    pasts = sorted(i.name for i in graph.input if i.name.startswith("past"))
    assert pasts == ["past.0.conv", "past.2.conv", "past.3.conv", "past_key_values.1.key", "past_key_values.1.value"]


def test_inspect_accounts_for_the_state(builds):
    result = runner.invoke(app, ["inspect", str(builds.package("lfm2")), "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["summary"]["recurrent_state_bytes_per_row"] == 3 * 2 * 64 * 4  # 3 conv layers, K-1 x H fp32
    assert report["findings"] == []
    text = runner.invoke(app, ["inspect", str(builds.package("lfm2"))]).output
    assert "recurrent state" in text and "1.5 KiB per batch row" in text


LINT_MUTANTS = [  # (family, a genai_config edit the runtime would misbind, the lint that must say so)
    ("lfm2", lambda d: d.update(layer_types=["conv", "conv", "conv", "full_attention"]), "state-layer-types"),
    ("lfm2", lambda d: d.pop("layer_types"), "state-layer-types"),
    ("lfm2", lambda d: d["outputs"].update(present_conv_names="present.%d.conv_state"), "state-names"),
    ("qwen3_5_text", lambda d: d.update(layer_types=["conv", "full_attention", "conv", "full_attention"]),
     "state-layer-types"),
    ("qwen3_5_text", lambda d: d["inputs"].pop("past_recurrent_names"), "state-names"),
    ("qwen3_5_text", lambda d: d["outputs"].update(present_recurrent_names="present.%d.ssm"), "state-names"),
    ("granitemoehybrid", lambda d: d.update(layer_types=["mamba", "full_attention", "mamba", "mamba"]),
     "state-layer-types"),
    ("granitemoehybrid", lambda d: d["inputs"].pop("past_recurrent_names"), "state-names"),
    ("granitemoehybrid", lambda d: d["outputs"].update(present_conv_names="present.%d.conv_state"), "state-names"),
]  # fmt: skip


@pytest.mark.parametrize(("family", "edit", "finding"), LINT_MUTANTS)
def test_mutant_genai_config_fails_the_state_lints(builds, tmp_path, family, edit, finding):
    package = _copy(builds.package(family), tmp_path / "pkg")
    path = package / "genai_config.json"
    config = json.loads(path.read_text())
    edit(config["model"]["decoder"])
    path.write_text(json.dumps(config))
    result = runner.invoke(app, ["inspect", str(package), "--json"])
    assert result.exit_code == 1 and finding in {f["id"] for f in json.loads(result.stdout)["findings"]}


@pytest.mark.parametrize(
    ("family", "op"),
    [
        ("lfm2", "CausalConvWithState"),
        ("qwen3_5_text", "LinearAttention"),
        ("qwen3_5_text", "CausalConvWithState"),
        ("granitemoehybrid", "LinearAttention"),
        ("granitemoehybrid", "CausalConvWithState"),
    ],
)
def test_mutant_graph_that_drops_a_state_fails_the_decode_steps(builds, tmp_path, family, op):
    """A state (conv, recurrent or SSM) not read back, each step starting from zeros: the prompt's
    logits still match, the decode steps do not."""
    package = _copy(builds.package(family), tmp_path / "pkg")
    model = onnx.load(str(package / "model.onnx"), load_external_data=False)
    for node in model.graph.node:
        if node.op_type == op:
            node.input[3] = ""  # optional past state: zeros
    onnx.save(model, str(package / "model.onnx"))
    checkpoint = builds.checkpoint(family)
    assert _parity_error(builds.package(family), checkpoint) < 1e-4
    tokens, got = ort_prefill_and_decode(package, list(PROMPT), steps=6)
    ref = hf_logits(hf_model(checkpoint), tokens, len(PROMPT))
    np.testing.assert_allclose(got[: len(PROMPT)], ref[: len(PROMPT)], atol=1e-4, rtol=1e-4)
    assert np.abs(got[len(PROMPT) :] - ref[len(PROMPT) :]).max() > 1e-2


def test_mutant_graph_with_swapped_gates_fails_parity(builds, tmp_path):
    """B and C of in_proj's split exchanged: a plausible layout bug, caught at the prompt."""
    package = _copy(builds.package("lfm2"), tmp_path / "pkg")
    model = onnx.load(str(package / "model.onnx"), load_external_data=False)
    for node in model.graph.node:
        if node.op_type == "Split" and node.name.endswith("split_bcx"):
            outputs = list(node.output)
            node.output[:] = [outputs[1], outputs[0], outputs[2]]
    onnx.save(model, str(package / "model.onnx"))
    assert _parity_error(package, builds.checkpoint("lfm2")) > 1e-2


@pytest.mark.parametrize("mode", ["bias", "split"])
@pytest.mark.parametrize(
    ("family", "mixer"),
    [
        ("lfm2", "lfm2's short-convolution"),
        ("qwen3_5_text", "qwen3_5's gated-DeltaNet"),
        ("granitemoehybrid", "granitemoehybrid's Mamba2"),
    ],
)
def test_standard_attention_modes_are_refused_in_one_line(builds, tmp_path, mode, family, mixer):
    args = ["build", str(builds.checkpoint(family)), "-o", str(tmp_path / "p"), "--attention", mode]
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert errors == [f"error: {mixer} layers keep their state in the GQA graph only: use --attention gqa"]
    assert not (tmp_path / "p").exists()


# Qwen3.5 (tests/dense_models.py qwen3_5_text): DeltaNet at layers 0 and 2, gated GQA at 1 and 3;
# K 4 over 2 x 2 x 16 + 4 x 16 = 128 channels, state [4 value heads, 16, 16]
QWEN = "qwen3_5_text"


def test_qwen3_5_genai_config_describes_both_states_as_the_runtime_binds_them(builds):
    config = json.loads((builds.package(QWEN) / "genai_config.json").read_text())["model"]
    decoder = config["decoder"]
    assert config["type"] == "qwen3_5_text" and decoder["num_hidden_layers"] == 4
    assert decoder["inputs"]["past_conv_names"] == "past.%d.conv"
    assert decoder["inputs"]["past_recurrent_names"] == "past.%d.recurrent"
    assert decoder["outputs"]["present_conv_names"] == "present.%d.conv"
    assert decoder["outputs"]["present_recurrent_names"] == "present.%d.recurrent"
    assert "layer_types" not in decoder  # it would bind the conv states twice (docs/hybrid-state.md §1.1)
    graph = onnx.load(str(builds.package(QWEN) / "model.onnx"), load_external_data=False).graph
    shapes = {i.name: [d.dim_value or d.dim_param for d in i.type.tensor_type.shape.dim] for i in graph.input}
    assert shapes["past.0.conv"] == shapes["past.2.conv"] == ["batch_size", 3, 128]
    assert shapes["past.0.recurrent"] == shapes["past.2.recurrent"] == ["batch_size", 4, 16, 16]
    assert sorted(n for n in shapes if n.startswith("past_key_values")) == [
        "past_key_values.1.key", "past_key_values.1.value", "past_key_values.3.key", "past_key_values.3.value"
    ]  # fmt: skip
    ops = [n.op_type for n in graph.node]
    assert ops.count("LinearAttention") == ops.count("CausalConvWithState") == 2


def test_qwen3_5_inspect_counts_both_states(builds):
    result = runner.invoke(app, ["inspect", str(builds.package(QWEN)), "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["summary"]["recurrent_state_bytes_per_row"] == 2 * (3 * 128 + 4 * 16 * 16) * 4
    assert report["findings"] == []
    text = runner.invoke(app, ["inspect", str(builds.package("lfm2"))]).output
    assert "recurrent state" in text and "1.5 KiB per batch row" in text


@pytest.mark.parametrize("split", ["split_qkv", "q_gate_split"])
def test_qwen3_5_mutant_graph_with_swapped_halves_fails_parity(builds, tmp_path, split):
    """q and k of the DeltaNet's conv output, or the attention's query and output gate, exchanged."""
    package = _copy(builds.package(QWEN), tmp_path / "pkg")
    model = onnx.load(str(package / "model.onnx"), load_external_data=False)
    for node in model.graph.node:
        if node.op_type == "Split" and node.name.endswith(split):
            outputs = list(node.output)
            node.output[:2] = [outputs[1], outputs[0]]
    onnx.save(model, str(package / "model.onnx"))
    assert _parity_error(package, builds.checkpoint(QWEN)) > 1e-2


@pytest.fixture(scope="module")
def qwen3_5_conditional(tmp_path_factory) -> Path:
    """The same text decoder inside Qwen3_5ForConditionalGeneration (model.language_model.*, a
    vision tower the export never reads, config under text_config)."""
    import transformers
    from dense_models import build_model
    from tiny_models import save_tokenizer

    text = build_model(QWEN)
    vision = dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=64, patch_size=16)
    config = transformers.Qwen3_5Config(text_config=text.config.to_dict(), vision_config=vision)
    model = transformers.Qwen3_5ForConditionalGeneration(config).eval()
    state = {k.replace("model.", "model.language_model.", 1): v for k, v in text.state_dict().items()}
    missing = model.load_state_dict(state, strict=False).missing_keys
    assert all(k.startswith("model.visual.") for k in missing), missing
    out = tmp_path_factory.mktemp("qwen3_5_conditional")
    model.save_pretrained(out)
    save_tokenizer(out, vocab_size=384)
    return out


def test_qwen3_5_conditional_generation_text_decoder_matches_hf(qwen3_5_conditional, tmp_path):
    package = tmp_path / "pkg"
    build(BuildOptions(str(qwen3_5_conditional), package))
    assert json.loads((package / "genai_config.json").read_text())["model"]["type"] == "qwen3_5_text"
    assert _parity_error(package, qwen3_5_conditional) < 1e-4
    prompt = [0, 17, 45, 99, 200, 3, 7]
    _, tokens = genai_prompt_then_greedy(package, prompt, 20)
    assert tokens == hf_generate(hf_model(qwen3_5_conditional), prompt, 20)


@pytest.mark.parametrize(
    ("pattern", "change"),
    [
        ("*expert_bias", lambda values: values * 0),  # the selection bias ignored: other experts chosen
        ("*expert_bias", lambda values: -values),  # applied with the wrong sign
    ],
)
def test_mutant_lfm2_moe_routing_fails_parity(builds, tmp_path, pattern, change):
    """LFM2-MoE chooses experts on sigmoid scores + expert_bias but weights them by the scores
    alone; a package whose bias is dropped or flipped picks other experts."""
    from mutants import edit_initializers

    checkpoint = builds.checkpoint("lfm2_moe")
    assert _parity_error(builds.package("lfm2_moe"), checkpoint) < 1e-4
    package = _copy(builds.package("lfm2_moe"), tmp_path / "pkg")
    assert edit_initializers(package, pattern, change), f"{pattern} matched nothing"
    assert _parity_error(package, checkpoint) > 1e-2


# Granite-4.0-H (tests/dense_models.py granitemoehybrid): Mamba2 at layers 0, 2 and 3, NoPE GQA at 1;
# K 4 over 128 + 2 x 2 x 16 = 192 channels, SSM state [4 heads, state 16, head dim 32]
GRANITE = "granitemoehybrid"


def test_granite_hybrid_genai_config_describes_both_states_as_the_runtime_binds_them(builds):
    config = json.loads((builds.package(GRANITE) / "genai_config.json").read_text())["model"]
    decoder = config["decoder"]
    assert config["type"] == "granitemoehybrid" and decoder["num_hidden_layers"] == 4
    assert decoder["inputs"]["past_conv_names"] == "past.%d.conv"
    assert decoder["inputs"]["past_recurrent_names"] == "past.%d.recurrent"
    assert decoder["outputs"]["present_conv_names"] == "present.%d.conv"
    assert decoder["outputs"]["present_recurrent_names"] == "present.%d.recurrent"
    assert "layer_types" not in decoder  # the RecurrentState finds the layers (docs/hybrid-state.md §1.1, §8.2)
    graph = onnx.load(str(builds.package(GRANITE) / "model.onnx"), load_external_data=False).graph
    shapes = {i.name: [d.dim_value or d.dim_param for d in i.type.tensor_type.shape.dim] for i in graph.input}
    assert [shapes[f"past.{i}.conv"] for i in (0, 2, 3)] == [["batch_size", 3, 192]] * 3
    assert [shapes[f"past.{i}.recurrent"] for i in (0, 2, 3)] == [["batch_size", 4, 16, 32]] * 3
    assert sorted(n for n in shapes if n.startswith("past_key_values")) == [
        "past_key_values.1.key", "past_key_values.1.value"
    ]  # fmt: skip
    nodes = [n for n in graph.node if n.op_type == "LinearAttention"]
    assert len(nodes) == 3 and [n.op_type for n in graph.node].count("CausalConvWithState") == 3
    attributes = {a.name: onnx.helper.get_attribute_value(a) for a in nodes[0].attribute}
    assert attributes["update_rule"] == b"gated" and (attributes["q_num_heads"], attributes["kv_num_heads"]) == (2, 4)


def test_granite_hybrid_inspect_counts_both_states(builds):
    result = runner.invoke(app, ["inspect", str(builds.package(GRANITE)), "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["summary"]["recurrent_state_bytes_per_row"] == 3 * (3 * 192 + 4 * 16 * 32) * 4
    assert report["findings"] == []


def test_granite_hybrid_mutant_graph_with_swapped_b_and_c_fails_parity(builds, tmp_path):
    """B and C (the key and the query of the recurrence) exchanged after the conv."""
    package = _copy(builds.package(GRANITE), tmp_path / "pkg")
    model = onnx.load(str(package / "model.onnx"), load_external_data=False)
    for node in model.graph.node:
        if node.op_type == "Split" and node.name.endswith("split_x_b_c"):
            outputs = list(node.output)
            node.output[1:] = [outputs[2], outputs[1]]
    onnx.save(model, str(package / "model.onnx"))
    assert _parity_error(package, builds.checkpoint(GRANITE)) > 1e-2


def test_granite_hybrid_mutant_without_the_d_skip_fails_parity(builds, tmp_path):
    """D x, the skip around the recurrence, left out (D zeroed)."""
    from mutants import edit_initializers

    package = _copy(builds.package(GRANITE), tmp_path / "pkg")
    assert edit_initializers(package, "*mamba.D", lambda values: values * 0), "mamba.D matched nothing"
    assert _parity_error(package, builds.checkpoint(GRANITE)) > 1e-2


def test_granite_hybrid_time_step_limit_is_refused_in_one_line(builds, tmp_path):
    """HF clamps dt with a time_step_limit in its chunked prompt form only: no one graph matches."""
    checkpoint = _copy(builds.checkpoint(GRANITE), tmp_path / "ckpt")
    config = json.loads((checkpoint / "config.json").read_text())
    (checkpoint / "config.json").write_text(json.dumps({**config, "time_step_limit": [0.0, 0.1]}))
    result = runner.invoke(app, ["build", str(checkpoint), "-o", str(tmp_path / "p")])
    assert result.exit_code == 2, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert errors == [
        "error: granitemoehybrid: time_step_limit (0.0, 0.1) is not exported (HF clamps dt with it in prompts only)"
    ]


@pytest.mark.parametrize(
    "overrides",
    [
        # Granite-4.0-H-Micro's shape: no experts (the shared MLP alone), RoPE on, one B/C group
        dict(
            num_local_experts=0,
            position_embedding_type="rope",
            mamba_n_groups=1,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        ),
        dict(mamba_conv_bias=False, mamba_proj_bias=True),  # in_proj / out_proj biases, a conv without
    ],
    ids=["dense_rope_one_group", "projection_biases"],
)
def test_granite_hybrid_variants_match_hf(tmp_path, overrides):
    from dense_models import save_dense

    checkpoint = save_dense(tmp_path / "ckpt", GRANITE, **overrides)
    package = tmp_path / "pkg"
    build(BuildOptions(str(checkpoint), package))
    assert _parity_error(package, checkpoint) < 1e-4
    prompt = [0, 17, 45, 99, 200, 3, 7]
    _, tokens = genai_prompt_then_greedy(package, prompt, 20)
    assert tokens == hf_generate(hf_model(checkpoint), prompt, 20) and len(set(tokens)) >= 4


# Qwen3-Next (tests/dense_models.py qwen3_next): Qwen3.5's layers at 0, 2 (DeltaNet) and 1, 3 (gated GQA)
# with Hk 2, Hv 4, dk 16, dv 32; K 4 over 2 x 2 x 16 + 4 x 32 = 192 channels; experts on 0, 1, 3 and a
# dense MLP on 2 (mlp_only_layers); the DeltaNet projections fused per key head in the checkpoint
NEXT = "qwen3_next"


def test_qwen3_next_genai_config_and_graph_carry_both_states_and_the_selected_rows(builds):
    config = json.loads((builds.package(NEXT) / "genai_config.json").read_text())["model"]
    decoder = config["decoder"]
    assert config["type"] == "decoder" and decoder["num_hidden_layers"] == 4  # genai 0.18 has no qwen3_next
    assert decoder["inputs"]["past_recurrent_names"] == "past.%d.recurrent" and "layer_types" not in decoder
    graph = onnx.load(str(builds.package(NEXT) / "model.onnx"), load_external_data=False).graph
    shapes = {i.name: [d.dim_value or d.dim_param for d in i.type.tensor_type.shape.dim] for i in graph.input}
    assert shapes["past.0.conv"] == shapes["past.2.conv"] == ["batch_size", 3, 192]
    assert shapes["past.0.recurrent"] == shapes["past.2.recurrent"] == ["batch_size", 4, 16, 32]
    assert sorted(n for n in shapes if n.startswith("past_key_values")) == [
        "past_key_values.1.key", "past_key_values.1.value", "past_key_values.3.key", "past_key_values.3.value"
    ]  # fmt: skip
    weights = {t.name: list(t.dims) for t in graph.initializer if ".linear_attn.in_proj" in t.name}
    assert {n.removeprefix("model.layers.0.linear_attn.") for n in weights if ".layers.0." in n} == {
        "in_proj_qkv.weight", "in_proj_z.weight", "in_proj_b.weight", "in_proj_a.weight"
    }  # fmt: skip
    assert weights["model.layers.0.linear_attn.in_proj_qkv.weight"] == [64, 192]
    assert weights["model.layers.0.linear_attn.in_proj_z.weight"] == [64, 128]
    ops = [n.op_type for n in graph.node]
    assert ops.count("LinearAttention") == ops.count("CausalConvWithState") == 2 and ops.count("MoE") == 3


def test_qwen3_next_one_token_prompt_and_decode_steps_match_hf(builds):
    """A prompt shorter than the conv kernel: the state starts from zeros, then 6 decode steps."""
    checkpoint = builds.checkpoint(NEXT)
    tokens, got = ort_prefill_and_decode(builds.package(NEXT), [0], steps=6)
    ref = hf_logits(hf_model(checkpoint), tokens, 1)
    np.testing.assert_allclose(got, ref, atol=1e-4, rtol=1e-4)
    assert np.abs(ref).max() > 1.0


def _contiguous_rows(d, part):
    """The fused weights read as if they held all of q, then k, v, z (and b, then a): the row
    selection undone."""
    sizes = {"q": d.key_heads * d.key_dim, "k": d.key_heads * d.key_dim}
    sizes.update(v=d.value_heads * d.value_dim, z=d.value_heads * d.value_dim, b=d.value_heads, a=d.value_heads)
    order = "ba" if part in ("b", "a") else "qkvz"
    starts = dict(zip(order, np.cumsum([0] + [sizes[p] for p in order]).tolist(), strict=False))
    return [(starts[p], starts[p] + sizes[p]) for p in part]


def _b_a_swapped(d, part):
    return grouped_rows(d, {"b": "a", "a": "b"}.get(part, part))


@pytest.mark.parametrize("rows", [_contiguous_rows, _b_a_swapped], ids=["reordering_undone", "b_a_swapped"])
def test_qwen3_next_mutant_row_selection_fails_parity(builds, tmp_path, monkeypatch, rows):
    """The DeltaNet's q | k | v, z, b and a rows taken from the fused per-key-head projections
    without their grouping, or with beta's and the decay's rows exchanged."""
    from gqa_export.graph import gated_deltanet

    monkeypatch.setattr(gated_deltanet, "grouped_rows", rows)
    package = tmp_path / "pkg"
    build(BuildOptions(str(builds.checkpoint(NEXT)), package, smoke=False))
    assert _parity_error(package, builds.checkpoint(NEXT)) > 1e-2  # measured 4.4 and 4.7


def test_qwen3_next_mutant_renormalized_top_k_fails_parity(builds, tmp_path):
    """The tiny config says norm_topk_prob false: a package exported as if it were true (the top-k
    weights renormalized, as Qwen3.5-MoE always does) departs from HF on the same weights."""
    checkpoint = _copy(builds.checkpoint(NEXT), tmp_path / "ckpt")
    config = json.loads((checkpoint / "config.json").read_text())
    assert config["norm_topk_prob"] is False
    (checkpoint / "config.json").write_text(json.dumps({**config, "norm_topk_prob": True}))
    package = tmp_path / "pkg"
    build(BuildOptions(str(checkpoint), package, smoke=False))
    assert _parity_error(package, builds.checkpoint(NEXT)) > 1e-2  # measured 1.7


def test_qwen3_next_sparse_step_variant_matches_hf(tmp_path):
    """Experts every second layer (decoder_sparse_step 2: dense MLPs on 0 and 2), four value heads
    per key head (r = 4, dv = dk), top-k renormalized (norm_topk_prob true, the hub's setting)."""
    from dense_models import save_dense

    overrides = dict(decoder_sparse_step=2, mlp_only_layers=[], norm_topk_prob=True)
    checkpoint = save_dense(tmp_path / "ckpt", NEXT, linear_num_value_heads=8, linear_value_head_dim=16, **overrides)
    package = tmp_path / "pkg"
    build(BuildOptions(str(checkpoint), package))
    graph = onnx.load(str(package / "model.onnx"), load_external_data=False).graph
    assert [n.op_type for n in graph.node].count("MoE") == 2
    assert _parity_error(package, checkpoint) < 1e-4
    prompt = [0, 17, 45, 99, 200, 3, 7]
    _, tokens = genai_prompt_then_greedy(package, prompt, 20)
    assert tokens == hf_generate(hf_model(checkpoint), prompt, 20) and len(set(tokens)) >= 4
