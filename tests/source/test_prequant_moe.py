"""Pre-quantized MoE experts (GPTQ / AWQ / compressed-tensors, one Linear per expert) imported exactly.

Each checkpoint is a tiny Qwen3-MoE (one MoE layer, one dense layer; norm_topk_prob False, so QMoE
gets explicit router weights) or Mixtral (renormalized top 2, `w1`/`w3`/`w2` names) quantized for
real and written in the format's on-disk layout (tests/prequant_models.py), every expert with its own
act-order permutations; the twin holds the same integers dequantized in fp32. The package must equal
HF on the twin within 1e-4 (kernels at accuracy level 0 dequantize in fp32: measured ~2e-6), with
the experts in QMoE where its CPU kernel holds them exactly and in per-expert MatMulNBits otherwise
(docs/prequantized.md §7), never a g_idx input. Mutants of each mechanism break the bound.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
from families import PROMPT
from prequant_models import awq_pair, gptq_pair, packed_pair
from reference import (
    OrtStepper,
    assert_varied,
    genai_prompt_then_greedy,
    hf_generate,
    hf_logits,
    hf_model,
    parity_error,
)
from safetensors.numpy import load_file

from gqa_export.errors import InputError
from gqa_export.pipeline import BuildOptions, build
from gqa_export.quant import imported_experts
from gqa_export.source import native

BOUND = 1e-4
# name -> (maker, arguments, expected expert form)
CASES = {
    "gptq-v1-4bit-sym": (gptq_pair, dict(bits=4, group=32, act_order=False, sym=True, moe="qwen3_moe"), "QMoE"),
    "gptq-v2-4bit-asym-g16": (gptq_pair, dict(bits=4, group=16, act_order=False, v2=True, moe="qwen3_moe"), "QMoE"),
    # group 16: down_proj (K = 32) has two groups, so its permutation is not trivial either
    "gptq-v1-4bit-act-order": (gptq_pair, dict(bits=4, group=16, act_order=True, moe="qwen3_moe"), "experts"),
    # K not whole groups of 64 (the dense down_proj's 96, the experts' down 32): a last partial group, MatMulNBits'
    # padded last block (refused before)
    "gptq-v1-4bit-partial-group": (gptq_pair, dict(bits=4, group=64, act_order=False, moe="qwen3_moe"), "experts"),
    "gptq-v1-2bit": (gptq_pair, dict(bits=2, group=32, act_order=False, moe="qwen3_moe"), "QMoE"),  # block 16
    "awq-mixtral": (awq_pair, dict(group=32, moe="mixtral"), "QMoE"),
    "ct-8bit-channel-asym": (packed_pair, dict(bits=8, group=-1, moe="qwen3_moe"), "QMoE"),
    "ct-8bit-group-act-order": (packed_pair, dict(bits=8, group=32, act_order=True, moe="mixtral"), "experts"),
}


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """name -> (quantized checkpoint, twin, fp32 package), each built once per module."""
    cache: dict[str, tuple[Path, Path, Path]] = {}

    def get(name: str) -> tuple[Path, Path, Path]:
        if name not in cache:
            tmp = tmp_path_factory.mktemp(name)
            maker, kwargs, _ = CASES[name]
            quantized, twin = maker(tmp, **kwargs)
            cache[name] = (quantized, twin, export(quantized, tmp / "pkg"))
        return cache[name]

    return get


def export(src: Path, out: Path) -> Path:
    build(BuildOptions(str(src), out, precision="fp32", smoke=False))  # fp32: accuracy level 0
    return out


def graph_nodes(package: Path) -> list[onnx.NodeProto]:
    return list(onnx.load(str(package / "model.onnx"), load_external_data=False).graph.node)


@pytest.mark.parametrize("name", list(CASES))
def test_imported_experts_equal_dequantized_twin(made, name):
    quantized, twin, package = made(name)
    assert parity_error(package, twin) < BOUND
    markers = [k for k in load_file(quantized / "model.safetensors") if k.endswith((".qweight", ".weight_packed"))]
    nodes = graph_nodes(package)
    ops = [n.op_type for n in nodes]
    assert "MoE" not in ops
    assert all(len(n.input) <= 4 for n in nodes if n.op_type == "MatMulNBits")  # never a g_idx input
    form = CASES[name][2]
    qmoe = [n for n in nodes if n.op_type == "QMoE"]
    if form == "QMoE":
        assert qmoe
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in qmoe[0].attribute}
        assert attrs["expert_weight_bits"] == CASES[name][1].get("bits", 4)
        assert ("block_size" in attrs) == (CASES[name][1]["group"] > 0)
        symmetric = CASES[name][1].get("sym", False)
        assert all((len(n.input) > 11 and n.input[11] != "") != symmetric for n in qmoe)  # fc1 zero points
    else:
        assert not qmoe
        act_order = CASES[name][1].get("act_order", False)
        expert_gathers = [
            n for n in nodes if n.op_type == "Gather" and n.input[1].endswith("gate_up.input_permutation")
        ]
        experts = sum(".experts." in k for k in markers) // 3
        assert len(expert_gathers) == (experts if act_order else 0)  # one input permutation per expert
    manifest = json.loads((package / "manifest.json").read_text())["options"]["imported_quantization"]
    assert len(manifest["imported"]) == len(markers) and not manifest["dequantized"]
    label = "QMoE" if form == "QMoE" else "per-expert MatMulNBits"
    assert sum(label in how for how in manifest["imported"].values()) == sum(".experts." in k for k in markers)


@pytest.mark.parametrize("name", ["gptq-v1-4bit-sym", "ct-8bit-group-act-order"])
def test_one_token_prompt_and_genai_greedy(made, name):
    _, twin, package = made(name)
    assert parity_error(package, twin, [0]) < BOUND
    _, tokens = genai_prompt_then_greedy(package, list(PROMPT), 12)
    assert tokens == hf_generate(hf_model(twin), list(PROMPT), 12)
    assert_varied([tokens])


HF_PROMPT_LOGITS: dict[Path, np.ndarray] = {}


def prompt_error(package: Path, twin: Path) -> float:
    """Max |ORT - HF| over the prompt's logits (HF's computed once per twin): the mutants' check."""
    if twin not in HF_PROMPT_LOGITS:
        HF_PROMPT_LOGITS[twin] = hf_logits(hf_model(twin), list(PROMPT))
    return float(np.abs(OrtStepper(package).step(list(PROMPT)) - HF_PROMPT_LOGITS[twin]).max())


def _rebuilt(made, name: str, tmp_path: Path) -> tuple[Path, Path]:
    quantized, twin, _ = made(name)
    return export(quantized, tmp_path / "pkg"), twin


def test_mutant_experts_permuted(made, tmp_path, monkeypatch):
    original = imported_experts.expert_linears

    def rotated(store, node):
        found = original(store, node)
        if found is None:
            return None
        return imported_experts.Experts(*(ms[1:] + ms[:1] for ms in (found.gate, found.up, found.down)))

    monkeypatch.setattr(imported_experts, "expert_linears", rotated)
    monkeypatch.setattr("gqa_export.quant.imported.expert_linears", rotated)
    assert prompt_error(*_rebuilt(made, "gptq-v1-4bit-sym", tmp_path)) > 100 * BOUND


def test_mutant_gate_up_not_interleaved(made, tmp_path, monkeypatch):
    """QMoE's fc1 wants gate/up rows interleaved (docs/moe.md §3): stacked halves are wrong."""
    monkeypatch.setattr(imported_experts, "_interleaved", lambda g, u, c: np.concatenate([g, u]))
    assert prompt_error(*_rebuilt(made, "awq-mixtral", tmp_path)) > 100 * BOUND


def test_mutant_nibbles_swapped(made, tmp_path, monkeypatch):
    unpack = native.unpack_fields

    def swapped(u8: np.ndarray, bits: int) -> np.ndarray:
        fields = unpack(u8, bits)
        return fields.reshape(*fields.shape[:-1], -1, 8 // bits)[..., ::-1].reshape(fields.shape)

    monkeypatch.setattr(native, "unpack_fields", swapped)
    assert prompt_error(*_rebuilt(made, "gptq-v1-4bit-sym", tmp_path)) > 100 * BOUND


def test_mutant_zero_point_off_by_one(made, tmp_path):
    """gptq_v2 data declared v1: every expert zero point off by one."""
    quantized, twin, _ = made("gptq-v2-4bit-asym-g16")
    mutant = tmp_path / "mutant"
    shutil.copytree(quantized, mutant)
    config = json.loads((mutant / "config.json").read_text())
    config["quantization_config"]["checkpoint_format"] = "gptq"
    (mutant / "config.json").write_text(json.dumps(config))
    assert prompt_error(export(mutant, tmp_path / "pkg"), twin) > 100 * BOUND


@pytest.mark.parametrize("dropped", ["input", "down"])
def test_mutant_act_order_permutation_dropped(made, tmp_path, monkeypatch, dropped):
    """Each expert's gate/up input Gather, and down's permutation folded into the gate/up rows."""
    if dropped == "input":
        monkeypatch.setattr(imported_experts, "_permuted_input", lambda b, x, name, perm: x)
    else:
        monkeypatch.setattr(imported_experts.Experts, "channels", lambda self, e: None)
    assert prompt_error(*_rebuilt(made, "gptq-v1-4bit-act-order", tmp_path)) > 100 * BOUND


def test_mutant_per_expert_routing_not_renormalized(made, tmp_path, monkeypatch):
    """The per-expert form's routing: Mixtral renormalizes its top 2; dropping that is wrong."""
    original = imported_experts._routing_weights
    monkeypatch.setattr(imported_experts, "_routing_weights", lambda b, logits, k, norm: original(b, logits, k, False))
    assert prompt_error(*_rebuilt(made, "ct-8bit-group-act-order", tmp_path)) > 100 * BOUND


def test_gate_and_up_with_different_permutations_are_refused(tmp_path, monkeypatch):
    """An expert's gate and up read one input: packed in one MatMulNBits they need one permutation."""
    import prequant_models

    monkeypatch.setattr(prequant_models, "SHARED_INPUT", {"q_proj": "qkv", "k_proj": "qkv", "v_proj": "qkv"})
    quantized, _ = prequant_models.gptq_pair(tmp_path, moe="qwen3_moe")
    with pytest.raises(
        InputError, match=r"experts\.0\.gate_proj and .*experts\.0\.up_proj read the same input .*gptq v1"
    ) as err:
        export(quantized, tmp_path / "out")
    assert "\n" not in str(err.value)
    assert not (tmp_path / "out").exists()


def test_fp16_package_runs_the_per_expert_form(made, tmp_path):
    """The CPU ScatterND adds float32 only: an fp16 package sums the experts' rows in fp32 (casts)."""
    quantized, twin, _ = made("gptq-v1-4bit-act-order")
    build(BuildOptions(str(quantized), tmp_path / "pkg", precision="fp16", smoke=False))
    assert prompt_error(tmp_path / "pkg", twin) < 2e-2  # fp16 activations (measured 4.3e-3)
