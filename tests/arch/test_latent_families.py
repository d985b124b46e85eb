"""What only the latent-attention families of issue #39 item 3 have (the checks every family gets,
every mode and the latent cache included, are their rows in tests/families.py): the config
spellings their published checkpoints use, which transformers' config classes translate at load.

Each registry checkpoint's config.json is written back in that spelling (the remote-code era's:
`rope_scaling` with a `type`, top-level `rope_theta`, an `auto_map`, the architecture class the hub
names) and exported through the CLI with its defaults (smoke run included), then compared with
transformers' own class read from the same file: prompt and decode logits, and greedy
onnxruntime-genai tokens against HF generate. The spellings are the ones the config classes
document and convert (SarvamMLAConfig's legacy keys, MiniCPM3's longrope `rope_scaling`); no
published file is downloaded here (no hub access in the tests)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
from families import require_registered
from reference import hf_generate, hf_logits, ort_prefill_and_decode
from typer.testing import CliRunner

from gqa_export.cli import app
from gqa_export.runtime.run import generate_greedy

PROMPT = [0, 17, 45, 99, 200, 3, 7, 120, 64, 33, 250, 11, 12, 13]
LONG_PROMPT = [(11 * i + 5) % 380 for i in range(30)]
NEW = 24


def _respelled(checkpoint: Path, to: Path, drop: tuple[str, ...], **changes) -> Path:
    shutil.copytree(checkpoint, to)
    config = json.loads((to / "config.json").read_text())
    config = {k: v for k, v in config.items() if k not in drop}
    (to / "config.json").write_text(json.dumps({**config, **changes}, indent=2))
    return to


def _exports_like_hf(checkpoint: Path, out: Path) -> float:
    """Exported with the CLI's defaults; max |ORT - HF| over the prompt and 6 decode steps, after
    checking greedy genai tokens against HF generate (the reference: AutoModelForCausalLM, as a
    user loads the published file)."""
    import torch
    from transformers import AutoModelForCausalLM

    result = CliRunner().invoke(app, ["build", str(checkpoint), "-o", str(out), "-q"])
    assert result.exit_code == 0, result.output
    hf = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32).eval()
    tokens, got = ort_prefill_and_decode(out, PROMPT, steps=6)
    error = float(np.abs(got - hf_logits(hf, tokens, len(PROMPT))).max())
    generated = generate_greedy(out, LONG_PROMPT, NEW, min_new_tokens=NEW).tokens
    assert generated == hf_generate(hf, LONG_PROMPT, NEW)
    assert len(set(generated)) > 3, f"degenerate generation {generated}: the comparison proves little"
    return error


def _registered(family: str) -> None:
    require_registered(family)


def test_sarvam_mla_in_the_remote_code_spelling(builds, tmp_path):
    """sarvam-105b's config as its remote code wrote it: num_experts / num_shared_experts (the class's
    attribute_map), a head_dim of kv_lora_rank + qk_rope_head_dim and q_head_dim (both dropped at
    load), rope_scaling type "deepseek_yarn" (read as YaRN), SarvamMLAForCausalLM."""
    _registered("sarvam_mla")
    saved = json.loads((builds.checkpoint("sarvam_mla") / "config.json").read_text())
    rope = {k: v for k, v in saved["rope_parameters"].items() if k not in ("rope_type", "rope_theta")}
    checkpoint = _respelled(
        builds.checkpoint("sarvam_mla"),
        tmp_path / "ckpt",
        drop=("n_routed_experts", "n_shared_experts", "rope_parameters", "qk_head_dim", "dtype"),
        architectures=["SarvamMLAForCausalLM"],
        auto_map={
            "AutoConfig": "configuration_sarvam_mla.SarvamMLAConfig",
            "AutoModelForCausalLM": "modeling_sarvam_mla.SarvamMLAForCausalLM",
        },
        num_experts=saved["n_routed_experts"],
        num_shared_experts=saved["n_shared_experts"],
        head_dim=saved["kv_lora_rank"] + saved["qk_rope_head_dim"],
        q_head_dim=saved["qk_nope_head_dim"] + saved["qk_rope_head_dim"],
        rope_theta=saved["rope_parameters"]["rope_theta"],
        rope_scaling={"type": "deepseek_yarn", **rope},
        torch_dtype="float32",
    )
    assert _exports_like_hf(checkpoint, tmp_path / "pkg") < 1e-4  # measured 2.6e-6


def test_minicpm3_in_the_remote_code_spelling(builds, tmp_path):
    """MiniCPM3-4B's config as its remote code wrote it: rope_scaling type "longrope" with short and
    long factors and top-level rope_theta, no head_dim / v_head_dim (v_head_dim from hidden / heads),
    two eos ids, MiniCPM3ForCausalLM with an auto_map."""
    _registered("minicpm3")
    saved = json.loads((builds.checkpoint("minicpm3") / "config.json").read_text())
    rope = {k: v for k, v in saved["rope_parameters"].items() if k not in ("rope_type", "rope_theta")}
    assert saved["v_head_dim"] == saved["hidden_size"] // saved["num_attention_heads"]
    checkpoint = _respelled(
        builds.checkpoint("minicpm3"),
        tmp_path / "ckpt",
        drop=("rope_parameters", "head_dim", "qk_head_dim", "v_head_dim", "dtype"),
        auto_map={
            "AutoConfig": "configuration_minicpm.MiniCPM3Config",
            "AutoModelForCausalLM": "modeling_minicpm.MiniCPM3ForCausalLM",
        },
        eos_token_id=[1, 2],
        rope_theta=saved["rope_parameters"]["rope_theta"],
        rope_scaling={"type": "longrope", **rope},
        torch_dtype="float32",
    )
    assert _exports_like_hf(checkpoint, tmp_path / "pkg") < 1e-4


def test_glm4_moe_lite_reads_mlp_layer_types_not_first_k_dense_replace(tmp_path):
    """A config.json in GLM-4.7-Flash's spelling (DeepSeek-V3's keys: topk_method, rope_theta at the top,
    num_nextn_predict_layers, several eos ids), without mlp_layer_types and with a
    first_k_dense_replace of 2: Glm4MoeLiteConfig fills the list in as dense then sparse (layer 1 has experts) and never
    reads first_k_dense_replace; the export follows the class, not the key."""
    from moe_models import save_moe

    _registered("glm4_moe_lite")
    saved = save_moe(tmp_path / "saved", "glm4_moe_lite", mlp_layer_types=None)
    config = json.loads((saved / "config.json").read_text())
    assert config["mlp_layer_types"] == ["dense", "sparse", "sparse"]
    checkpoint = _respelled(
        saved,
        tmp_path / "ckpt",
        drop=("mlp_layer_types", "rope_parameters", "qk_head_dim", "dtype"),
        first_k_dense_replace=2,
        rope_theta=config["rope_parameters"]["rope_theta"],
        rope_scaling=None,
        partial_rotary_factor=1.0,
        topk_method="noaux_tc",  # DeepSeek-V3's name for this router; the class reads no such key
        num_nextn_predict_layers=1,  # the multi-token-prediction layer, not in the causal LM
        eos_token_id=[1, 2],
        torch_dtype="float32",
    )
    assert _exports_like_hf(checkpoint, tmp_path / "pkg") < 1e-4


def test_unknown_mlp_layer_type_is_refused_in_one_line(builds, tmp_path):
    """An entry other than "dense" / "sparse" (which HF's classes read differently: GLM-4-MoE-Lite
    builds experts only on "sparse", Cohere2-MoE everywhere but "dense"): exit 2, one line, nothing
    written."""
    _registered("glm4_moe_lite")
    checkpoint = _respelled(
        builds.checkpoint("glm4_moe_lite"), tmp_path / "ckpt", drop=(), mlp_layer_types=["sparse", "moe", "sparse"]
    )
    result = CliRunner().invoke(app, ["build", str(checkpoint), "-o", str(tmp_path / "pkg"), "--no-smoke"])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if "mlp_layer_types" in line]
    assert len(lines) == 1 and "'moe'" in lines[0] and "Traceback" not in result.output, result.output
    assert not (tmp_path / "pkg").exists()


def test_minicpm3_inputs_embeds_come_scaled(builds, tmp_path):
    """MiniCPM3's scale_emb lives in its embedding module (Gemma-3's scaled table), so inputs_embeds
    (a pipeline stage's input, --inputs-embeds) arrive scaled and the graph must not scale them again
    (Granite, whose forward multiplies inputs_embeds, is the other case): logits and hidden states
    against HF's forward(inputs_embeds=embed_tokens(ids))."""
    import onnxruntime as ort
    import torch

    from gqa_export.graph.io_options import IoOptions
    from gqa_export.pipeline import BuildOptions, build

    _registered("minicpm3")
    checkpoint, out = builds.checkpoint("minicpm3"), tmp_path / "pkg"
    io = IoOptions(prune_lm_head=False, inputs_embeds=True, hidden_states=True)
    build(BuildOptions(str(checkpoint), out, smoke=False, attention="gqa", io=io))
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32).eval()
    with torch.no_grad():
        embeds = model.get_input_embeddings()(torch.tensor([PROMPT]))
        want = model(inputs_embeds=embeds, output_hidden_states=True)
    session = ort.InferenceSession(str(out / "model.onnx"), providers=["CPUExecutionProvider"])
    feeds = {"inputs_embeds": embeds.numpy(), "attention_mask": np.ones((1, len(PROMPT)), np.int64)}
    for value in session.get_inputs():
        if value.name.startswith("past_key_values."):
            feeds[value.name] = np.zeros((1, value.shape[1], 0, value.shape[3]), np.float32)
    logits, hidden = session.run(["logits", "hidden_states"], feeds)
    np.testing.assert_allclose(logits[0], want.logits[0].numpy(), atol=1e-4, rtol=1e-4)
    np.testing.assert_allclose(hidden[0], want.hidden_states[-1][0].numpy(), atol=1e-4, rtol=1e-4)


def test_glm4_moe_lite_graph_has_no_value_padding_and_experts_by_the_list(builds):
    """Values as wide as keys (16 + 8 = 24): the expanded cache needs no Pad and no output slice;
    experts (MoE) on layers 0 and 2, the dense MLP of layer 1 between them, as mlp_layer_types says."""
    import onnx

    _registered("glm4_moe_lite")
    package = builds.package("glm4_moe_lite")
    decoder = json.loads((package / "genai_config.json").read_text())["model"]["decoder"]
    assert (decoder["head_size"], decoder["num_key_value_heads"]) == (24, 4)
    graph = onnx.load(str(package / "model.onnx"), load_external_data=False).graph
    ops = [n.op_type for n in graph.node]
    assert ops.count("MoE") == 2 and "Pad" not in ops
    names = {t.name for t in graph.initializer}
    # layer 1 is dense: its MLP (gate and up apart on CPU), no router
    assert "model.layers.1.mlp.gate_proj.weight" in names and "model.layers.1.mlp.gate.weight" not in names
    assert {"model.layers.0.mlp.gate.weight", "model.layers.2.mlp.gate.e_score_correction_bias"} <= names
