"""Build options for inference efficiency and pipelines (io_options.py), proven against HF:
last-token logits (`--prune-lm-head`, opt-in) on every family, full logits by default,
inputs_embeds, hidden_states, no lm_head, CUDA graph, and one clear line for combinations that
cannot work."""

from __future__ import annotations

import json

import numpy as np
import pytest
from reference import genai_prompt_then_greedy, hf_generate, hf_logits, hf_model, ort_prefill_and_decode
from typer.testing import CliRunner
from variants import ALL_VARIANTS, GEMMA4_VARIANTS, MULTIMODAL_VARIANTS

from gqa_export.cli import app
from gqa_export.errors import InputError
from gqa_export.graph.io_options import IoOptions
from gqa_export.pipeline import BuildOptions, build

PROMPT = [0, 5, 9, 13, 17, 21, 25, 29, 33, 37, 41]  # longer than the tiny sliding windows (8)
runner = CliRunner()


PRUNED = IoOptions(prune_lm_head=True)


def _build(checkpoint, out, **kwargs):
    """Text decoders: a multimodal checkpoint's full package is
    tests/package/multimodal/test_multimodal_package.py's."""
    return build(BuildOptions(str(checkpoint), out, smoke=False, text_only=True, **kwargs))


def test_full_logits_by_default(checkpoints, tmp_path):
    """The default package keeps a logits row per prompt token: every onnxruntime-genai API (the
    Generator, og.Engine, speculative decoding) serves it (tests/runtime/test_serving.py)."""
    _build(checkpoints.get("gqa"), tmp_path / "pkg")
    assert json.loads((tmp_path / "pkg" / "manifest.json").read_text())["options"]["io"]["logits"] == "all"


@pytest.mark.parametrize("name", [*ALL_VARIANTS, *MULTIMODAL_VARIANTS, *GEMMA4_VARIANTS])
def test_last_token_logits_are_exact(checkpoints, tmp_path, name):
    """With --prune-lm-head the prompt pass returns [B,1,V]: the last prompt row and every decode
    step equal HF, and greedy tokens through onnxruntime-genai equal HF generate. A recipe that
    picks a decoder pipeline (split, for bidirectional runs) cannot prune: it says so, and its
    text-only gqa form prunes."""
    checkpoint = checkpoints.get(name)
    out = tmp_path / "pkg"
    try:
        _build(checkpoint, out, io=PRUNED)
    except InputError as exc:
        assert "--prune-lm-head is for single-graph packages" in str(exc)
        _build(checkpoint, out, io=PRUNED, attention="gqa")
    manifest = json.loads((out / "manifest.json").read_text())["options"]
    assert manifest["io"]["logits"] == "last" and len(manifest["graphs"]) == 1
    model = hf_model(checkpoint)
    tokens, got = ort_prefill_and_decode(out, PROMPT, steps=4)
    assert got.shape[0] == 5  # one prompt row, four decode rows
    want = hf_logits(model, tokens, len(PROMPT))[len(PROMPT) - 1 :]
    np.testing.assert_allclose(got, want, atol=1e-4, rtol=1e-4)
    _, genai_tokens = genai_prompt_then_greedy(out, PROMPT, 6)
    assert genai_tokens == hf_generate(model, PROMPT, 6)


@pytest.mark.parametrize(
    ("name", "attention", "precision"),
    [("mistral_window", "bias", "fp32"), ("gemma3_local_global", "bias", "fp32"), ("qwen3_qk_norm", "gqa", "int4")],
)
def test_last_token_logits_in_other_modes_and_precisions(checkpoints, tmp_path, name, attention, precision):
    """Pruned prompt logits with standard Attention on the shared buffer (windows shorter than the
    prompt) and with a quantized lm_head: the pruned package gives exactly the full package's rows."""
    checkpoint = checkpoints.get(name)
    pruned, full = tmp_path / "pruned", tmp_path / "full"
    _build(checkpoint, pruned, attention=attention, precision=precision, io=PRUNED)
    _build(checkpoint, full, attention=attention, precision=precision)
    tokens, got = ort_prefill_and_decode(pruned, PROMPT, steps=4)
    tokens_full, want = ort_prefill_and_decode(full, PROMPT, steps=4)
    assert tokens == tokens_full and got.shape[0] == 5
    np.testing.assert_allclose(got, want[len(PROMPT) - 1 :], atol=1e-5, rtol=1e-5)
    if precision == "fp32":
        _, genai_tokens = genai_prompt_then_greedy(pruned, PROMPT, 6)
        assert genai_tokens == hf_generate(hf_model(checkpoint), PROMPT, 6)


def _genai_batch(package, prompts: list[list[int]], new: int, pad: int) -> list[list[int]]:
    """Greedy tokens for a right-padded batch of prompts (as onnxruntime-genai pads them)."""
    import onnxruntime_genai as og

    from gqa_export.runtime.run import load

    model = load(package, "cpu")
    width = max(map(len, prompts))
    params = og.GeneratorParams(model)
    params.set_search_options(do_sample=False, max_length=width + new, min_length=width + new, batch_size=len(prompts))
    generator = og.Generator(model, params)
    generator.append_tokens(np.array([p + [pad] * (width - len(p)) for p in prompts], dtype=np.int32))
    rows: list[list[int]] = [[] for _ in prompts]
    for _ in range(new):
        generator.generate_next_token()
        for row, token in zip(rows, generator.get_next_tokens(), strict=True):
            row.append(int(token))
    return rows


def test_last_token_logits_pick_each_padded_rows_last_real_token(checkpoints, tmp_path):
    """genai pads batched prompts on the right; the pruned graph must read each row's last real
    token (the last column is padding for the shorter row)."""
    checkpoint = checkpoints.get("gqa")
    pruned, full = tmp_path / "pruned", tmp_path / "full"
    _build(checkpoint, pruned, io=PRUNED)
    _build(checkpoint, full)
    pad = json.loads((pruned / "genai_config.json").read_text())["model"]["pad_token_id"]
    prompts = [PROMPT, PROMPT[:3]]
    want = [hf_generate(hf_model(checkpoint), p, 5) for p in prompts]
    assert _genai_batch(full, prompts, 5, pad) == want
    assert _genai_batch(pruned, prompts, 5, pad) == want


@pytest.mark.parametrize(
    "name",
    [
        "mqa_tied",  # tied: the lm_head still needs the embedding table
        "gemma_head_dim_32",  # the sqrt(hidden) scale is inside HF's embedding: inputs_embeds come scaled
        "gemma3_local_global",
        "granite_multipliers",  # HF multiplies inputs_embeds in forward: so does the graph
    ],
)
def test_inputs_embeds_and_hidden_states_match_hf(checkpoints, tmp_path, name):
    import onnxruntime as ort
    import torch

    checkpoint = checkpoints.get(name)
    out = tmp_path / "pkg"
    result = _build(
        checkpoint, out, attention="gqa", io=IoOptions(prune_lm_head=False, inputs_embeds=True, hidden_states=True)
    )
    config = json.loads((out / "genai_config.json").read_text())["model"]["decoder"]
    assert "inputs_embeds" in config["inputs"] and "input_ids" not in config["inputs"]
    assert config["outputs"]["hidden_states"] == "hidden_states"
    assert result.smoke is None
    model = hf_model(checkpoint)
    ids = torch.tensor([PROMPT])
    with torch.no_grad():
        embeds = model.get_input_embeddings()(ids)
        want = model(inputs_embeds=embeds, output_hidden_states=True)
    session = ort.InferenceSession(str(out / "model.onnx"), providers=["CPUExecutionProvider"])
    feeds = {"inputs_embeds": embeds.numpy(), "attention_mask": np.ones((1, len(PROMPT)), np.int64)}
    for value in session.get_inputs():
        if value.name.startswith("past_key_values."):
            feeds[value.name] = np.zeros((1, value.shape[1], 0, value.shape[3]), np.float32)
    logits, hidden = session.run(["logits", "hidden_states"], feeds)
    np.testing.assert_allclose(logits[0], want.logits[0].numpy(), atol=1e-4, rtol=1e-4)
    np.testing.assert_allclose(hidden[0], want.hidden_states[-1][0].numpy(), atol=1e-4, rtol=1e-4)


def test_no_lm_head_outputs_hidden_states_only(checkpoints, tmp_path):
    import onnx

    out = tmp_path / "pkg"
    result = runner.invoke(app, ["build", str(checkpoints.get("gqa")), "-o", str(out), "--no-lm-head", "--json"])
    assert result.exit_code == 0, result.output
    outputs = [o.name for o in onnx.load(str(out / "model.onnx"), load_external_data=False).graph.output]
    assert outputs[0] == "hidden_states" and "logits" not in outputs
    config = json.loads((out / "genai_config.json").read_text())["model"]["decoder"]["outputs"]
    assert "logits" not in config and config["hidden_states"] == "hidden_states"
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert any("no smoke run" in note for note in summary["notes"])
    shown = json.loads(runner.invoke(app, ["inspect", str(out), "--json"]).stdout)["summary"]["io"]
    assert shown["logits"] == "none" and shown["hidden_states"] is True


def test_cuda_graph_sets_the_provider_option(checkpoints, tmp_path):
    out = tmp_path / "pkg"
    _build(checkpoints.get("gqa"), out, ep="cuda", precision="fp16", attention="gqa", io=IoOptions(cuda_graph=True))
    config = json.loads((out / "genai_config.json").read_text())
    assert config["model"]["decoder"]["session_options"]["provider_options"] == [{"cuda": {"enable_cuda_graph": "1"}}]
    assert config["search"]["past_present_share_buffer"] is True and config["search"]["num_beams"] == 1
    shown = runner.invoke(app, ["inspect", str(out), "--json"])
    assert json.loads(shown.stdout)["summary"]["io"] == {
        "logits": "all", "inputs_embeds": False, "hidden_states": False, "cuda_graph": True,
    }  # fmt: skip


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--cuda-graph"], "--cuda-graph is a CUDA provider option"),
        (["--ep", "cuda", "-p", "fp16", "--attention", "bias", "--cuda-graph"], "--cuda-graph needs the GQA graph"),
        (["--no-lm-head", "--prune-lm-head"], "--no-lm-head has no lm_head to prune"),
        (["--no-lm-head", "--hidden-states"], "--no-lm-head already outputs hidden_states"),
        (["--attention", "split", "--prune-lm-head"], "--prune-lm-head is for single-graph packages"),
        (["-p", "int4", "--mixed-precision", "lm_head"], "--mixed-precision takes SELECTOR:int8"),
        (["-p", "int4", "--mixed-precision", "*.nothing:int8"], "selects no weight"),
        (["-p", "int4", "--quant-method", "k_quant", "--symmetric"], "k_quant searches a zero point"),
    ],
)
def test_invalid_combinations_exit_2(checkpoints, tmp_path, args, message):
    out = tmp_path / "pkg"
    result = runner.invoke(app, ["build", str(checkpoints.get("gqa")), "-o", str(out), "--no-smoke", *args])
    assert result.exit_code == 2, result.output
    assert message in result.output and "Traceback" not in result.output
    assert not out.exists()


def test_inputs_embeds_refuses_features_that_read_ids(checkpoints, tmp_path):
    result = runner.invoke(
        app, ["build", str(checkpoints.get("gemma4_causal")), "-o", str(tmp_path / "p"), "--inputs-embeds"]
    )
    assert result.exit_code == 2 and "--inputs-embeds cannot be used with" in result.output


def test_recipe_build_defaults_apply_unless_the_command_line_says_otherwise(checkpoints, tmp_path):
    recipe = tmp_path / "mine.yaml"
    recipe.write_text(
        "name: mine\nmatch:\n  model_types: [llama]\narch: llama\n"
        "build:\n  prune_lm_head: true\n  kv_cache: int8\n  kv_scales: per-tensor\n"
    )
    checkpoint = str(checkpoints.get("gqa"))
    result = runner.invoke(app, ["build", checkpoint, "-o", str(tmp_path / "a"), "--recipe", str(recipe), "--no-smoke"])
    assert result.exit_code == 0, result.output
    options = json.loads((tmp_path / "a" / "manifest.json").read_text())["options"]
    assert options["io"]["logits"] == "last" and options["kv_cache"]["scales"] == "per-tensor"
    args = ["build", checkpoint, "-o", str(tmp_path / "b"), "--recipe", str(recipe), "--no-smoke"]
    result = runner.invoke(app, [*args, "--no-prune-lm-head", "--kv-cache", "float"])
    assert result.exit_code == 0, result.output
    options = json.loads((tmp_path / "b" / "manifest.json").read_text())["options"]
    assert options["io"]["logits"] == "all" and options["kv_cache"] is None
