"""Second-wave dense families against the HF classes: logits (prompt + decode) in every
attention mode's graph, greedy onnxruntime-genai tokens, int4 packages, fp16 CUDA graphs."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from dense_models import FAMILIES, VARIANTS, save_dense
from reference import assert_varied, genai_prompt_then_greedy, hf_generate, hf_logits, hf_model, ort_prefill_and_decode
from weight_layouts import INT4_MAX_ERROR, relative_errors

from gqa_export.pipeline import BuildOptions, build
from gqa_export.runtime.run import generate_greedy, load

PROMPT = [0, 17, 45, 99, 200, 3, 7, 120, 64, 33, 250, 11, 12, 13]  # longer than the windows (8)
PROMPTS = [[0], [0, 17, 45, 99, 200, 3, 7], [(11 * i + 5) % 380 for i in range(30)]]
NEW = 40
NAMES = [*FAMILIES, *VARIANTS]
# genai model types the runtime has for these families; the rest run as "decoder"
GENAI_TYPES = {"phi": "phi", "olmo": "olmo", "nemotron": "nemotron", "ernie4_5": "ernie4_5",
               "hunyuan_v1_dense": "hunyuandensev1"}  # fmt: skip


# transformers 4.x computes these differently from 5.x itself (the reference is the installed HF):
# 4.57's xIELU keeps its alpha/beta parameters in bf16 (logits off by ~6e-3), and 4.57 cannot
# build a StableLM with parallel residual and q/k LayerNorm from its own config (AttributeError in
# its weight init). Exact under 5.x; compared only there.
DIFFERENT_UNDER_4X = {"apertus", "stablelm_par_qkln"}


def _reference_comparable(name: str) -> None:
    import transformers

    if name in DIFFERENT_UNDER_4X and int(transformers.__version__.split(".")[0]) < 5:
        pytest.skip(f"transformers {transformers.__version__} computes {name} differently from 5.x (see above)")


@pytest.fixture(scope="module")
def dense(tmp_path_factory):
    root = tmp_path_factory.mktemp("dense")
    checkpoints: dict[str, object] = {}
    packages: dict[tuple, object] = {}

    def checkpoint(name: str):
        if name not in checkpoints:
            family, overrides = VARIANTS.get(name, (name, {}))
            checkpoints[name] = save_dense(root / name, family, **overrides)
        return checkpoints[name]

    def package(name: str, mode: str = "gqa", ep: str = "cpu", precision: str = "fp32"):
        key = (name, mode, ep, precision)
        if key not in packages:
            out = root / "-".join(key)
            build(BuildOptions(str(checkpoint(name)), out, ep=ep, precision=precision, attention=mode, smoke=False))
            packages[key] = out
        return packages[key]

    return checkpoint, package


@pytest.mark.parametrize("name", NAMES)
def test_logits_match_hf(dense, name):
    _reference_comparable(name)
    checkpoint, package = dense
    tokens, got = ort_prefill_and_decode(package(name), PROMPT, steps=6)
    ref = hf_logits(hf_model(checkpoint(name)), tokens, len(PROMPT))
    np.testing.assert_allclose(got, ref, atol=1e-4, rtol=1e-4)
    assert np.abs(ref).max() > 0.5
    family = VARIANTS.get(name, (name, {}))[0]
    config = json.loads((package(name) / "genai_config.json").read_text())
    assert config["model"]["type"] == GENAI_TYPES.get(family, "decoder")
    assert config["search"]["past_present_share_buffer"] is True


@pytest.mark.parametrize("name", FAMILIES)
def test_generates_like_hf(dense, name):
    checkpoint, package = dense
    hf, model = hf_model(checkpoint(name)), load(package(name), "cpu")
    seen: list[list[int]] = []
    for prompt in PROMPTS:
        got = generate_greedy(package(name), prompt, NEW, min_new_tokens=NEW, model=model).tokens
        assert got == hf_generate(hf, prompt, NEW), prompt
        seen.append(got)
    assert_varied(seen)


@pytest.mark.parametrize("mode", ["bias", "split"])
@pytest.mark.parametrize("name", NAMES)
def test_standard_attention_modes(dense, name, mode):
    """Plain-op RoPE (rotate-half and GPT-J pairs, partial), NoPE layers, per-head LayerNorms and
    HunYuan's norms after RoPE in the standard-Attention graphs: prompt logits and 16 tokens."""
    _reference_comparable(name)
    checkpoint, package = dense
    logits, tokens = genai_prompt_then_greedy(package(name, mode), PROMPT, 16)
    from reference import hf_prompt_then_greedy

    ref_logits, ref_tokens = hf_prompt_then_greedy(hf_model(checkpoint(name)), PROMPT, 16)
    np.testing.assert_allclose(logits, ref_logits, atol=1e-4, rtol=1e-4)
    assert tokens == ref_tokens


@pytest.mark.parametrize("name", FAMILIES)
def test_int4_weights_and_generation(dense, tmp_path, name):
    """Every linear in MatMulNBits, each dequantized independently (tests/weight_layouts.py) within
    INT4_MAX_ERROR of the checkpoint's weight (measured ~0.08; a layout bug ~0.4-1.4), and the
    package generates through onnxruntime-genai."""
    checkpoint, _ = dense
    result = build(BuildOptions(str(checkpoint(name)), tmp_path / "int4", precision="int4"))
    assert result.smoke is not None and result.smoke.tokens
    ops = {n.op_type for n in onnx.load(str(tmp_path / "int4" / "model.onnx"), load_external_data=False).graph.node}
    assert "MatMulNBits" in ops and "MatMul" not in ops
    errors = relative_errors(tmp_path / "int4", checkpoint(name))
    assert errors and max(errors.values()) < INT4_MAX_ERROR, errors


@pytest.mark.parametrize("name", ["phi", "cohere2", "glm4", "hunyuan_v1_dense", "apertus"])
def test_fp16_cuda_graph(dense, name):
    checkpoint, package = dense
    path = package(name, ep="cuda", precision="fp16")
    inputs = onnx.load(str(path / "model.onnx"), load_external_data=False).graph.input
    assert {i.name: i for i in inputs}["past_key_values.0.key"].type.tensor_type.elem_type == onnx.TensorProto.FLOAT16
    tokens, got = ort_prefill_and_decode(path, PROMPT, steps=3)
    ref = hf_logits(hf_model(checkpoint(name)), tokens, len(PROMPT))
    assert np.abs(got - ref).max() < 3e-2 * max(1.0, float(np.abs(ref).max()))
