"""Structure of the built graphs: GQA wiring, I/O names and dtypes, fp16/bf16 CUDA variants."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import onnx
import pytest
from reference import hf_logits, hf_model, ort_prefill_and_decode
from variants import FAMILY_VARIANTS

from gqa_export.runtime.run import generate_greedy


def load(package):
    return onnx.load(str(package / "model.onnx"), load_external_data=False)


def attrs(node):
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


@pytest.mark.parametrize(("ep", "precision", "elem"), [("cpu", "fp32", 1), ("cuda", "fp16", 10), ("cuda", "bf16", 16)])
def test_gqa_graph_structure(exports, ep, precision, elem):
    package = exports.get("gqa", ep, precision)
    model = load(package)
    graph = model.graph
    inputs = {i.name: i for i in graph.input}
    assert list(inputs)[:2] == ["input_ids", "attention_mask"] and "position_ids" not in inputs
    past = inputs["past_key_values.0.key"].type.tensor_type
    assert past.elem_type == elem
    dims = [d.dim_value or d.dim_param for d in past.shape.dim]
    assert dims == ["batch_size", 2, "past_sequence_length", 16]  # symbolic past: no fixed-shape mode
    gqa = [n for n in graph.node if n.op_type == "GroupQueryAttention"]
    assert len(gqa) == 2 and all(n.domain == "com.microsoft" for n in gqa)
    a = attrs(gqa[0])
    assert (a["num_heads"], a["kv_num_heads"], a["do_rotary"], a["local_window_size"]) == (4, 2, 1, -1)
    assert a["scale"] == pytest.approx(16**-0.5)
    assert gqa[0].input[1] == gqa[0].input[2] == ""  # packed QKV
    assert gqa[0].input[3] == "past_key_values.0.key" and gqa[0].output[1] == "present.0.key"
    ops = Counter(n.op_type for n in graph.node)
    assert ops["SkipSimplifiedLayerNormalization"] == 4 and ops["ReduceSum"] == 1
    logits = {o.name: o for o in graph.output}["logits"].type.tensor_type.elem_type
    assert logits == (1 if precision in ("fp32", "bf16") else 10)  # bf16 graphs emit fp32 logits
    config = json.loads((package / "genai_config.json").read_text())
    assert config["search"]["past_present_share_buffer"] is True
    options = config["model"]["decoder"]["session_options"]["provider_options"]
    assert options == ([] if ep == "cpu" else [{"cuda": {"enable_cuda_graph": "0"}}])
    weights = [t for t in graph.initializer if t.name.endswith("qkv_proj.weight")]
    assert weights and all(t.data_type == elem for t in weights)


def test_cos_sin_cover_max_length(exports):
    package = exports.get("gqa")
    cos = next(t for t in load(package).graph.initializer if t.name == "cos_cache")
    max_length = json.loads((package / "genai_config.json").read_text())["search"]["max_length"]
    assert cos.dims[0] >= max_length and cos.dims[1] == 8


def test_fp16_cuda_graph_runs_on_cpu_close_to_hf(checkpoints, exports):
    """The fp16 CUDA package generates on CPU (ORT inserts casts where CPU lacks fp16 kernels)."""
    package = exports.get("gqa", "cuda", "fp16")
    prompt = [0, 17, 45, 99, 200, 3, 7]
    tokens, got = ort_prefill_and_decode(package, prompt, steps=4)
    ref = hf_logits(hf_model(checkpoints.get("gqa")), tokens)
    scale = np.abs(ref).max()
    assert np.abs(got - ref).max() < 2e-2 * scale
    result = generate_greedy(package, prompt, 24, min_new_tokens=24)
    assert len(result.tokens) == 24


@pytest.mark.parametrize("variant", list(FAMILY_VARIANTS))
def test_every_family_builds_fp16_for_cuda_and_runs_on_cpu(checkpoints, exports, variant):
    """fp16 CUDA graphs of every family: GQA in fp16, share buffer on, close to HF on CPU."""
    package = exports.get(variant, "cuda", "fp16")
    model = load(package)
    assert all(attrs(n)["num_heads"] for n in model.graph.node if n.op_type == "GroupQueryAttention")
    assert {i.name: i for i in model.graph.input}["past_key_values.0.key"].type.tensor_type.elem_type == 10
    config = json.loads((package / "genai_config.json").read_text())
    assert config["search"]["past_present_share_buffer"] is True
    prompt = [0, 17, 45, 99, 200, 3, 7, 120, 64, 33, 250]
    tokens, got = ort_prefill_and_decode(package, prompt, steps=3)
    ref = hf_logits(hf_model(checkpoints.get(variant)), tokens, len(prompt))
    assert np.isfinite(got).all()
    assert np.abs(got - ref).max() < 3e-2 * max(1.0, float(np.abs(ref).max()))
