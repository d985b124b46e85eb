"""The checks every registered family (tests/families.py) gets against the HF class itself: ORT
logits for the prompt and decode steps, greedy onnxruntime-genai tokens in each of its attention
modes, genai prompt logits in the standard-Attention graphs, a ragged (right-padded) batch row by
row through ORT and onnxruntime-genai, int4/int8 packages weight by weight, the fp16 CUDA graph on
CPU. Which of them apply to a family, and with which known differences, is its row in the
registry; family-specific checks live in the family modules (tests/arch/)."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from dense_models import FAMILIES as DENSE_FAMILIES
from dense_models import VARIANTS as DENSE_VARIANTS
from families import BY_NAME, RAGGED, RAGGED_NEW, REGISTERED, skip_where_the_reference_differs, transformers_major
from moe_models import FAMILIES as MOE_FAMILIES
from reference import (
    assert_varied,
    genai_padded_batch_greedy,
    genai_prompt_then_greedy,
    genai_whole_prompt_greedy,
    hf_batch_generates_of,
    hf_generates_of,
    hf_logits,
    hf_model,
    hf_prompt_then_greedy_of,
    ort_prefill_and_decode,
    ragged_logits_error,
)
from state_space_models import FAMILIES as STATE_SPACE_FAMILIES
from state_space_models import VARIANTS as STATE_SPACE_VARIANTS
from variants import FAMILY_VARIANTS, GEMMA4_VARIANTS, LLAMA_VARIANTS, MULTIMODAL_VARIANTS
from weight_layouts import INT4_MAX_ERROR, INT8_MAX_ERROR, dequantized_twin, relative_errors

from gqa_export.pipeline import BuildOptions, build
from gqa_export.quant.quantize import QuantOptions
from gqa_export.runtime.run import generate_greedy, load

WEIGHT_BOUNDS = {"int4": INT4_MAX_ERROR, "int8": INT8_MAX_ERROR}


def _each(fact: str | None = None, where: str | None = None) -> list:
    """One case per registered family (with `where` set), or per value of its `fact` (its modes or
    precisions), named after them."""
    families = [family for family in REGISTERED if where is None or getattr(family, where)]
    if fact is None:
        return [pytest.param(family, id=family.name) for family in families]
    return [
        pytest.param(family, value, id=f"{family.name}-{value}")
        for family in families
        for value in getattr(family, fact)
    ]


@pytest.mark.parametrize("family", _each())
def test_logits_match_hf(builds, family):
    """The single-graph gqa package (bias for ALiBi families): the prompt and 6 decode steps through ORT against HF; its
    genai_config names the runtime's model type and shares the past/present buffer."""
    skip_where_the_reference_differs(family)
    package, prompt = builds.package(family.name, family.logits_mode), list(family.prompt)
    tokens, got = ort_prefill_and_decode(package, prompt, steps=6)
    ref = hf_logits(hf_model(builds.checkpoint(family.name)), tokens, len(prompt))
    np.testing.assert_allclose(got, ref, atol=1e-4, rtol=1e-4)
    assert np.abs(ref).max() > family.signal
    config = json.loads((package / "genai_config.json").read_text())
    assert config["model"]["type"] == family.genai_type
    assert config["search"]["past_present_share_buffer"] is True


@pytest.mark.parametrize("family", _each(where="one_token_logits"))
def test_one_token_prompt_logits_match_hf(builds, family):
    """A 1-token prompt then 5 decode steps through ORT against HF's one forward over them all."""
    tokens, got = ort_prefill_and_decode(builds.package(family.name), [0], steps=5)
    ref = hf_logits(hf_model(builds.checkpoint(family.name)), tokens)
    np.testing.assert_allclose(got, ref, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize(("family", "mode"), _each("generate_modes"))
def test_generates_like_hf(builds, family, mode):
    """Greedy onnxruntime-genai tokens (EOS suppressed) equal HF generate for every prompt, and
    some continuation (each, where the row says so) is varied (a model copying its last token
    passes any exporter)."""
    skip_where_the_reference_differs(family, generation=True)
    package, new = builds.package(family.name, mode), family.new_tokens
    model = load(package, "cpu")
    # HF's tokens once per session per row: every mode compares with the same ones
    references = hf_generates_of(builds.checkpoint(family.name), family.prompts, new)
    seen: list[list[int]] = []
    for prompt, reference in zip(map(list, family.prompts), references, strict=True):
        got = generate_greedy(package, prompt, new, min_new_tokens=new, model=model).tokens
        assert got == reference, (mode, prompt)
        if family.each_varied:
            assert_varied([got])
        seen.append(got)
    assert_varied(seen)


@pytest.mark.parametrize("family", _each())
def test_prompts_ending_with_eos_bos_or_pad_generate_like_hf(builds, family):
    """A prompt ending with eos, bos or the package's pad id: onnxruntime-genai samples the first
    token of a prompt ending with its pad id from the position before (docs/ortgenai.md §5.4), so
    the package pads with an id no prompt ends with where the model has one. Through the runtime's
    own API (the prompt appended whole) eos and bos endings, and the pad ending where the pad is a
    spare embedding row, give HF generate's tokens; through `run`'s loop every ending does."""
    skip_where_the_reference_differs(family, generation=True)
    package, checkpoint = builds.package(family.name, family.logits_mode), builds.checkpoint(family.name)
    config = json.loads((package / "genai_config.json").read_text())["model"]
    rule = json.loads((package / "manifest.json").read_text())["model"]["pad"]["rule"]
    eos, pad = np.atleast_1d(config["eos_token_id"])[0], config["pad_token_id"]
    assert rule != "eos-fallback" and pad != eos and pad != config.get("bos_token_id")
    base = next((list(p) for p in family.prompts if len(p) > 1), list(family.prompts[0]))
    prompts = {"eos": [*base, int(eos)], "bos": [*base, config["bos_token_id"]], "pad": [*base, pad]}
    # one batched HF generate (no padding: equal lengths) under 5.x; 4.57's hybrid caches take no batch
    generates = hf_batch_generates_of if transformers_major() >= 5 else hf_generates_of
    references = dict(zip(prompts, generates(checkpoint, list(prompts.values()), 6), strict=True))
    model = load(package, "cpu")
    for name, prompt in prompts.items():
        assert generate_greedy(package, prompt, 6, min_new_tokens=6, model=model).tokens == references[name], name
        if name != "pad" or rule == "unused-row":
            assert genai_whole_prompt_greedy(model, prompt, 6) == references[name], name


@pytest.mark.parametrize(("family", "mode"), _each("logits_modes"))
def test_standard_attention_matches_hf(builds, family, mode):
    """Plain-op RoPE (rotate-half and GPT-J pairs, partial), NoPE layers, per-head LayerNorms and
    HunYuan's norms after RoPE in the standard-Attention graphs: prompt logits and 16 tokens."""
    skip_where_the_reference_differs(family)
    prompt = list(family.prompt)
    logits, tokens = genai_prompt_then_greedy(builds.package(family.name, mode), prompt, 16)
    ref_logits, ref_tokens = hf_prompt_then_greedy_of(builds.checkpoint(family.name), prompt, 16)
    np.testing.assert_allclose(logits, ref_logits, atol=1e-4, rtol=1e-4)
    assert tokens == ref_tokens


@pytest.mark.parametrize(("family", "mode"), _each("ragged_logits_modes"))
def test_ragged_batch_through_ort_equals_hf_row_by_row(builds, family, mode):
    """Two prompts of different lengths right-padded as onnxruntime-genai feeds them (zeros in
    attention_mask at the padding), then 4 decode steps: each row's prompt and decode-step logits
    within 1e-4 of HF on the unpadded row. The short row's decode steps follow the zeros, so its
    positions (RoPE, learned tables, ALiBi) must be counted from the mask, and a recurrent state must
    stop at its last real token (HF's own right-padded run lets the padding into the states)."""
    skip_where_the_reference_differs(family)
    package, checkpoint = builds.package(family.name, mode), builds.checkpoint(family.name)
    assert ragged_logits_error(package, hf_model(checkpoint)) < 1e-4


@pytest.mark.parametrize(("family", "mode"), _each("ragged_generate_modes"))
def test_ragged_batch_through_genai_equals_hf_generate_row_by_row(builds, family, mode):
    """The same two prompts as one onnxruntime-genai batch, right-padded with the package's
    pad_token_id as its batched append_tokens expects: each row's greedy tokens equal HF generate
    on the row alone, and some row is varied (a model copying its last token passes any exporter)."""
    skip_where_the_reference_differs(family, generation=True)
    package, prompts = builds.package(family.name, mode), [list(p) for p in RAGGED]
    pad = json.loads((package / "genai_config.json").read_text())["model"]["pad_token_id"]
    got = genai_padded_batch_greedy(package, prompts, pad, RAGGED_NEW)
    assert got == hf_generates_of(builds.checkpoint(family.name), prompts, RAGGED_NEW)  # HF's once per row
    assert_varied(got)


@pytest.mark.parametrize(("family", "precision"), _each("quantized"))
def test_quantized_package(builds, tmp_path, family, precision):
    """Every linear in MatMulNBits (fused experts in QMoE, plain-op experts float), each weight
    dequantized independently (tests/weight_layouts.py) within the precision's bound of the
    checkpoint's (correct: int4 ~0.08, int8 ~0.005; a layout bug ~0.4-1.4), the registered
    embedding tables gathered quantized, and the package generates through onnxruntime-genai
    (the build's smoke run). Where the family sets a bound, the int8 export's prompt logits stay
    within it of the fp32 export's (relative L2, the quant report); int4's end-to-end error on
    these tiny random models (0.11-0.89 measured) bounds nothing."""
    checkpoint, out = builds.checkpoint(family.name), tmp_path / precision
    quant, report = QuantOptions(accuracy_level=family.accuracy_level), family.int8_relative_l2 is not None
    result = build(BuildOptions(str(checkpoint), out, precision=precision, quant=quant, report=report, text_only=True))
    assert result.smoke is not None and result.smoke.tokens
    meets_eos = len(result.smoke.tokens) < 16 and result.smoke.tokens[-1] == 1
    assert meets_eos is (transformers_major() in family.smoke_meets_eos)
    graphs = sorted(out.glob("*.onnx"))  # a split package (gemma3_vision's auto) has two
    assert graphs
    for graph in graphs:
        nodes = onnx.load(str(graph), load_external_data=False).graph.node
        ops = {n.op_type for n in nodes}
        assert "MatMulNBits" in ops and "MoE" not in ops, ops
        assert ("MatMul" in ops) is (family.experts == "plain" or family.float_matmuls), ops
        assert ("QMoE" in ops) is (family.experts == "fused"), ops
        assert {n.input[0] for n in nodes if n.op_type == "GatherBlockQuantized"} == family.gathered_tables
        errors = relative_errors(out, checkpoint, graph.name)
        assert errors and max(errors.values()) < WEIGHT_BOUNDS[precision], errors
    if report:
        logits = json.loads((out / "quant_report.json").read_text())["logits_vs_float"]
        if precision == "int8":
            assert logits["relative_l2"] < family.int8_relative_l2 and logits["next_token_agreement"] > 0.75
    if graphs == [out / "model.onnx"] and family.experts != "fused":  # the package computes what its weights say
        assert dequantized_twin_error(builds, family, out, tmp_path) < QUANTIZED_GRAPH_BOUND


# relative L2 of the prompt logits: measured 0.011 (phi), 0.039 (lfm2), 0.061 (gpt2), MatMulNBits' int8
# activations at accuracy level 4; one MatMulNBits fed another's input (a planted bug): 0.83 (phi), 1.12 (gpt2)
QUANTIZED_GRAPH_BOUND = 0.15


def dequantized_twin_error(builds, family, package, tmp_path) -> float:
    """The quantized package's prompt logits against the fp32 package (proven against HF above) with
    the quantized package's own weights dequantized into it (tests/weight_layouts.py): only
    MatMulNBits' int8 activations (accuracy level 4) and a table gathered untied differ. (QMoE experts
    are not MatMulNBits: their packages are left to the weight check and QMoE's own tests.)"""
    twin = tmp_path / "dequantized-twin"
    replaced = dequantized_twin(package, builds.package(family.name, family.logits_mode), twin)
    assert replaced, "no weight of the quantized package found in the float package"
    prompt = list(family.prompt)
    got, ref = ort_prefill_and_decode(package, prompt, 0)[1], ort_prefill_and_decode(twin, prompt, 0)[1]
    kept = ref > np.finfo(ref.dtype).min  # logits a class masks to the lowest value (Chameleon's image tokens)
    return float(np.linalg.norm(got[kept] - ref[kept]) / np.linalg.norm(ref[kept]))


@pytest.mark.parametrize("name", ["phi", "gpt2"])
def test_mutant_miswired_int4_graph_fails_the_dequantized_twin(builds, tmp_path, name):
    """A planted graph bug the weight-by-weight check cannot see: one MatMulNBits reads another
    layer's input (same K). The int4 package's weights are all still right; its logits are not."""
    family = BY_NAME[name]
    package = tmp_path / "int4"
    build(BuildOptions(str(builds.checkpoint(name)), package, precision="int4", smoke=False, text_only=True))
    assert dequantized_twin_error(builds, family, package, tmp_path / "good") < QUANTIZED_GRAPH_BOUND
    graph = onnx.load(str(package / "model.onnx"), load_external_data=False)
    nodes = [n for n in graph.graph.node if n.op_type == "MatMulNBits"]  # in topological order
    by_k: dict[int, list] = {}
    for node in nodes:
        by_k.setdefault(next(a.i for a in node.attribute if a.name == "K"), []).append(node)
    group = next(group for group in by_k.values() if len({n.input[0] for n in group}) > 1)
    earlier = group[0]
    later = next(n for n in group if n.input[0] != earlier.input[0])
    later.input[0] = earlier.input[0]  # reads an earlier activation: the graph stays acyclic
    onnx.save(graph, str(package / "model.onnx"))
    assert dequantized_twin_error(builds, family, package, tmp_path / "broken") > QUANTIZED_GRAPH_BOUND


@pytest.mark.parametrize("family", _each(where="fp16_cuda"))
def test_fp16_cuda_graph(builds, family):
    """The fp16 CUDA package (fp16 cache, fused experts' weights in fp16) runs on CPU close to HF."""
    skip_where_the_reference_differs(family, fp16=True)  # its reference runs the decode steps through HF's cache
    package = builds.package(family.name, ep="cuda", precision="fp16")
    graph = onnx.load(str(package / "model.onnx"), load_external_data=False).graph
    pasts = [i for i in graph.input if i.name.startswith("past")]  # KV caches and recurrent state
    wide = {p.name for p in pasts if family.fp32_recurrent_state and p.name.endswith(".recurrent")}
    assert pasts and all(p.type.tensor_type.elem_type == onnx.TensorProto.FLOAT16 for p in pasts if p.name not in wide)
    assert all(p.type.tensor_type.elem_type == onnx.TensorProto.FLOAT for p in pasts if p.name in wide)
    if family.experts == "fused":
        inits = {t.name: t for t in graph.initializer}
        experts = [n for n in graph.node if n.op_type == "MoE"]
        assert experts and all(inits[n.input[2]].data_type == onnx.TensorProto.FLOAT16 for n in experts)
    prompt = list(family.prompt)
    tokens, got = ort_prefill_and_decode(package, prompt, steps=3)
    ref = hf_logits(hf_model(builds.checkpoint(family.name)), tokens, len(prompt))
    assert np.abs(got - ref).max() < 3e-2 * max(1.0, float(np.abs(ref).max()))


def test_every_tiny_checkpoint_is_registered():
    """A checkpoint added to a maker's list without a registry row would be checked by nothing."""
    made = {*LLAMA_VARIANTS, *FAMILY_VARIANTS, *DENSE_FAMILIES, *DENSE_VARIANTS, *MOE_FAMILIES, *GEMMA4_VARIANTS}
    made |= set(MULTIMODAL_VARIANTS) | set(STATE_SPACE_FAMILIES) | set(STATE_SPACE_VARIANTS)
    assert made - set(BY_NAME) == set()
