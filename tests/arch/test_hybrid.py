"""Hybrid decoders, what only they have: short-convolution layers (LFM2) carry a fixed-size state
(past.N.conv / present.N.conv) next to the GQA layers' KV cache, gated-DeltaNet layers (Qwen3.5) a
conv and a recurrent state (past.N.conv, past.N.recurrent; Qwen3-Next's too, its projections
fused per key head in the checkpoint, tests/arch/test_hybrid_qwen3_next.py), and so do Mamba2 layers
(Granite-4.0-H: its SSM state as past.N.recurrent; Falcon-H1, whose every layer has a KV cache too)
and Mamba layers (Jamba, tests/arch/test_hybrid_jamba.py). The checks every family gets (logits and
greedy tokens against HF, int4, fp16 CUDA) are their rows in tests/families.py; here:
the state is really carried from step to step (a graph that drops it fails the decode steps),
genai_config describes it the way onnxruntime-genai binds it, inspect accounts for it, the lints
catch a config the runtime would misbind, and the standard-Attention modes are refused."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from families import PROMPT
from hybrid_checks import assert_variant_matches_hf, copy_tree, refused_build_errors
from reference import genai_prompt_then_greedy, hf_generate, hf_logits, hf_model, ort_prefill_and_decode, parity_error
from typer.testing import CliRunner

from gqa_export.cli import app
from gqa_export.pipeline import BuildOptions, build

runner = CliRunner()


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
    ("jamba", lambda d: d["inputs"].pop("past_recurrent_names"), "state-names"),
]  # fmt: skip


@pytest.mark.parametrize(("family", "edit", "finding"), LINT_MUTANTS)
def test_mutant_genai_config_fails_the_state_lints(builds, tmp_path, family, edit, finding):
    package = copy_tree(builds.package(family), tmp_path / "pkg")
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
        ("jamba", "LinearAttention"),
        ("jamba", "CausalConvWithState"),
        ("falcon_h1", "LinearAttention"),
        ("falcon_h1", "CausalConvWithState"),
        ("bamba", "LinearAttention"),
        ("bamba", "CausalConvWithState"),
        ("mamba2", "LinearAttention"),
        ("mamba2", "CausalConvWithState"),
        ("mamba", "LinearAttention"),
        ("mamba", "CausalConvWithState"),
        ("zamba2", "LinearAttention"),
        ("zamba2", "CausalConvWithState"),
        ("zamba", "LinearAttention"),
        ("zamba", "CausalConvWithState"),
        ("recurrent_gemma", "LinearAttention"),
        ("recurrent_gemma", "CausalConvWithState"),
        ("minimax", "LinearAttention"),
    ],
)
def test_mutant_graph_that_drops_a_state_fails_the_decode_steps(builds, tmp_path, family, op):
    """A state (conv, recurrent or SSM) not read back, each step starting from zeros: the prompt's
    logits still match, the decode steps do not."""
    package = copy_tree(builds.package(family), tmp_path / "pkg")
    model = onnx.load(str(package / "model.onnx"), load_external_data=False)
    for node in list(model.graph.node):
        if node.op_type == op == "LinearAttention":
            node.input[3] = ""  # optional past state: zeros
        if op == "CausalConvWithState" and node.name.endswith("past_and_run"):  # the conv's concat(past, x)
            zeros = f"{node.input[0]}.zeroed"
            model.graph.node.insert(0, onnx.helper.make_node("Sub", [node.input[0]] * 2, [zeros]))
            node.input[0] = zeros
    onnx.save(model, str(package / "model.onnx"))
    checkpoint = builds.checkpoint(family)
    assert parity_error(builds.package(family), checkpoint) < 1e-4
    tokens, got = ort_prefill_and_decode(package, list(PROMPT), steps=6)
    ref = hf_logits(hf_model(checkpoint), tokens, len(PROMPT))
    np.testing.assert_allclose(got[: len(PROMPT)], ref[: len(PROMPT)], atol=1e-4, rtol=1e-4)
    assert np.abs(got[len(PROMPT) :] - ref[len(PROMPT) :]).max() > 1e-2


def test_mutant_graph_with_swapped_gates_fails_parity(builds, tmp_path):
    """B and C of in_proj's split exchanged: a plausible layout bug, caught at the prompt."""
    package = copy_tree(builds.package("lfm2"), tmp_path / "pkg")
    model = onnx.load(str(package / "model.onnx"), load_external_data=False)
    for node in model.graph.node:
        if node.op_type == "Split" and node.name.endswith("split_bcx"):
            outputs = list(node.output)
            node.output[:] = [outputs[1], outputs[0], outputs[2]]
    onnx.save(model, str(package / "model.onnx"))
    assert parity_error(package, builds.checkpoint("lfm2")) > 1e-2


@pytest.mark.parametrize("mode", ["bias", "split"])
@pytest.mark.parametrize(
    ("family", "mixer"),
    [
        ("lfm2", "lfm2's short-convolution"),
        ("qwen3_5_text", "qwen3_5's gated-DeltaNet"),
        ("olmo_hybrid", "olmo_hybrid's gated-DeltaNet"),
        ("kimi_linear", "kimi_linear's gated-DeltaNet"),
        ("bailing_hybrid", "bailing_hybrid's gated-DeltaNet"),
        ("granitemoehybrid", "granitemoehybrid's Mamba2"),
        ("jamba", "jamba's Mamba"),
        ("falcon_h1", "falcon_h1's Mamba2"),
        ("bamba", "bamba's Mamba2"),
        ("mamba2", "mamba2's Mamba2"),
        ("mamba", "mamba's Mamba"),
        ("zamba2", "zamba2's Mamba2"),
        ("zamba", "zamba's Mamba"),
        ("recurrent_gemma", "recurrent_gemma's RG-LRU"),
        ("minimax", "minimax's lightning-attention"),
        ("rwkv", "rwkv's RWKV"),
        ("xlstm", "xlstm's mLSTM"),
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
    package = copy_tree(builds.package(QWEN), tmp_path / "pkg")
    model = onnx.load(str(package / "model.onnx"), load_external_data=False)
    for node in model.graph.node:
        if node.op_type == "Split" and node.name.endswith(split):
            outputs = list(node.output)
            node.output[:2] = [outputs[1], outputs[0]]
    onnx.save(model, str(package / "model.onnx"))
    assert parity_error(package, builds.checkpoint(QWEN)) > 1e-2


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
    build(BuildOptions(str(qwen3_5_conditional), package, text_only=True))
    assert json.loads((package / "genai_config.json").read_text())["model"]["type"] == "qwen3_5_text"
    assert parity_error(package, qwen3_5_conditional) < 1e-4
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
    assert parity_error(builds.package("lfm2_moe"), checkpoint) < 1e-4
    package = copy_tree(builds.package("lfm2_moe"), tmp_path / "pkg")
    assert edit_initializers(package, pattern, change), f"{pattern} matched nothing"
    assert parity_error(package, checkpoint) > 1e-2


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
    package = copy_tree(builds.package(GRANITE), tmp_path / "pkg")
    model = onnx.load(str(package / "model.onnx"), load_external_data=False)
    for node in model.graph.node:
        if node.op_type == "Split" and node.name.endswith("split_x_b_c"):
            outputs = list(node.output)
            node.output[1:] = [outputs[2], outputs[1]]
    onnx.save(model, str(package / "model.onnx"))
    assert parity_error(package, builds.checkpoint(GRANITE)) > 1e-2


def test_granite_hybrid_mutant_without_the_d_skip_fails_parity(builds, tmp_path):
    """D x, the skip around the recurrence, left out (D zeroed)."""
    from mutants import edit_initializers

    package = copy_tree(builds.package(GRANITE), tmp_path / "pkg")
    assert edit_initializers(package, "*mamba.D", lambda values: values * 0), "mamba.D matched nothing"
    assert parity_error(package, builds.checkpoint(GRANITE)) > 1e-2


# dt clamped to [0.4, 1.0] in prompts: on the tiny model about a fifth of the prompt's dt values lie
# below 0.4 and a quarter above 1.0 (softplus(dt + dt_bias) spans 0.1-2.9)
TIME_STEP_LIMIT = (0.4, 1.0)


@pytest.fixture(scope="module")
def granite_dt_limited(tmp_path_factory) -> tuple[Path, Path]:
    """(checkpoint, package) of the Granite-4.0-H checkpoint with TIME_STEP_LIMIT."""
    from dense_models import save_dense

    folder = tmp_path_factory.mktemp("granite_dt_limit")
    checkpoint = save_dense(folder / "ckpt", GRANITE, time_step_limit=TIME_STEP_LIMIT)
    build(BuildOptions(str(checkpoint), folder / "pkg", smoke=False))  # genai runs it below
    return checkpoint, folder / "pkg"


def test_granite_hybrid_time_step_limit_clamps_prompts_only_as_hf(granite_dt_limited):
    """HF clamps dt with time_step_limit in its chunked form (prompts) and not in its single-token
    step; the graph does the same (a floor and a ceiling, each where the run is a prompt)."""
    checkpoint, package = granite_dt_limited
    graph = onnx.load(str(package / "model.onnx"), load_external_data=False).graph
    clamps = [n.name.rpartition("/")[2] for n in graph.node if n.op_type == "Where" and "prompt_dt" in n.name]
    assert clamps == ["prompt_dt_floor", "prompt_dt_ceiling"] * 3  # Mamba2 at layers 0, 2 and 3
    assert_variant_matches_hf(package, checkpoint)
    assert parity_error(package, checkpoint, prompt=[0]) < 1e-4  # a first forward is HF's chunked form too


def _where_edit(package: Path, which: str, edit) -> None:
    model = onnx.load(str(package / "model.onnx"), load_external_data=False)
    nodes = [n for n in model.graph.node if n.op_type == "Where" and n.name.endswith(which)]
    assert nodes, which
    for node in nodes:
        edit(node)
    onnx.save(model, str(package / "model.onnx"))


@pytest.mark.parametrize(
    ("which", "edit", "broken"),
    [
        ("prompt_dt_floor", lambda n: n.input.__setitem__(1, n.input[2]), "prompt"),  # no floor
        ("prompt_dt_ceiling", lambda n: n.input.__setitem__(1, n.input[2]), "prompt"),  # no ceiling
        ("prompt_dt_ceiling", lambda n: n.input.__setitem__(2, n.input[1]), "decode"),  # in decode steps too
    ],
    ids=["no_floor", "no_ceiling", "ceiling_always"],
)
def test_granite_hybrid_mutant_time_step_limit_fails_parity(granite_dt_limited, tmp_path, which, edit, broken):
    """The limit ignored (either bound) breaks the prompt; applied to decode steps as well, the
    prompt still matches (it is HF's chunked form either way) and the decode steps break."""
    checkpoint, package = granite_dt_limited
    package = copy_tree(package, tmp_path / "pkg")
    _where_edit(package, which, edit)
    prompt = [(7 * i + 3) % 380 for i in range(14)]
    tokens, got = ort_prefill_and_decode(package, prompt, steps=6)
    errors = np.abs(got - hf_logits(hf_model(checkpoint), tokens, len(prompt))).max(axis=-1)
    prompt_error, decode_error = errors[: len(prompt)].max(), errors[len(prompt) :].max()
    if broken == "prompt":
        assert prompt_error > 1e-2, prompt_error
    else:
        assert prompt_error < 1e-4 and decode_error > 1e-2, (prompt_error, decode_error)


def test_granite_hybrid_time_step_limit_not_a_range_is_refused_in_one_line(builds, tmp_path):
    errors = refused_build_errors(builds.checkpoint(GRANITE), tmp_path, {"time_step_limit": [1.0, 0.4]})
    assert errors == [
        "error: granitemoehybrid: time_step_limit (1.0, 0.4) must be a range 0 <= min <= max; fix config.json"
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
    build(BuildOptions(str(checkpoint), package, smoke=False))  # genai runs it below
    assert_variant_matches_hf(package, checkpoint)
