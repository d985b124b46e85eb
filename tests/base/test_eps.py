"""The execution providers beyond CPU and CUDA (docs/eps.md): each package is built from its EP
table record only. WebGPU, DirectML and TensorRT-RTX cannot run here, so their packages are checked
for structure (ops, dtypes, the genai_config provider entry, the graph form the record asks for)
and their graphs run on CPU against HF (QNN's static-shape packages: tests/graph/test_qnn.py); the
precision / mode pairs an EP cannot run are refused in one line; `inspect` flags an op or dtype
the package's EP lacks. OpenVINO's own run is tests/compat/test_openvino.py.
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import onnx
import pytest
from reference import hf_logits, hf_model, ort_prefill_and_decode
from typer.testing import CliRunner

from gqa_export.check.op_facts import ir_facts
from gqa_export.check.report import inspect_package
from gqa_export.cli import app
from gqa_export.eps import EPS, graph_problems
from gqa_export.errors import InputError
from gqa_export.pipeline import BuildOptions, build
from gqa_export.quant.options import QuantOptions
from gqa_export.release.spec import folder_name

PROMPT = [1, 17, 93, 5, 250, 41, 8, 77, 3, 120, 64, 9, 200, 31]
BUILT = [
    ("webgpu", "fp16"), ("webgpu", "fp32"), ("webgpu", "int4"), ("webgpu", "int8"),
    ("dml", "fp16"), ("dml", "int4"), ("trt-rtx", "fp16"), ("trt-rtx", "bf16"), ("trt-rtx", "int4"),
    ("openvino", "fp32"), ("openvino", "fp16"), ("openvino", "int4"),
]  # fmt: skip
REFUSED = [(ep.name, p) for ep in EPS.values() for p in ep.refused if ep.name not in ("cpu", "cuda")]
FP16_BOUND = 3e-2  # relative to max |HF logit|, the fp16 CUDA graph's bound on CPU (tests/arch/test_families.py)


def _bound(precision: str, ref: np.ndarray) -> float:
    return 1e-4 if precision == "fp32" else FP16_BOUND * max(1.0, float(np.abs(ref).max()))


def _parity(package, checkpoint) -> tuple[float, np.ndarray]:
    tokens, got = ort_prefill_and_decode(package, PROMPT, steps=4)
    ref = hf_logits(hf_model(checkpoint), tokens, len(PROMPT))
    return float(np.abs(got - ref).max()), ref


@pytest.mark.parametrize(("ep", "precision"), BUILT)
def test_package_follows_its_ep_record(exports, ep, precision):
    """Provider entry, op set, GQA dtype and graph form are the record's; nothing it lacks."""
    record = EPS[ep]
    package = exports.get("base", ep=ep, precision=precision)
    config = json.loads((package / "genai_config.json").read_text())
    assert config["model"]["decoder"]["session_options"]["provider_options"] == record.genai_provider_options()
    model = onnx.load(str(package / "model.onnx"), load_external_data=False)
    import onnx_ir as ir

    facts = ir_facts(ir.from_proto(model))
    assert graph_problems(record, facts) == []
    ops = {op for op, _, _ in facts}
    gqa = [n for n in model.graph.node if n.op_type == "GroupQueryAttention"]
    assert gqa and all(any(a.name == "do_rotary" and a.i == int(record.fused_rope) for a in n.attribute) for n in gqa)
    assert all(bool(n.input[1]) is not record.packed_qkv for n in gqa)  # packed: key/value inputs empty
    assert ("SkipSimplifiedLayerNormalization" in ops) is record.skip_norm_fusion
    # an EP without the RMSNorm op gets it as primitive ops (docs/eps.md §2.8); the others keep the op
    assert ("SimplifiedLayerNormalization" in ops) is not record.lacks("SimplifiedLayerNormalization")
    assert not record.only_ops or ops <= record.only_ops
    assert ("MatMulNBits" in ops) is (precision.startswith("int") and record.int4_format == "matmulnbits")
    kv = {i.type.tensor_type.elem_type for i in model.graph.input if i.name.startswith("past_key_values.")}
    want = {"fp32": onnx.TensorProto.FLOAT, "bf16": onnx.TensorProto.BFLOAT16}.get(precision, onnx.TensorProto.FLOAT16)
    if precision.startswith("int"):
        want = onnx.TensorProto.FLOAT if record.quantized_activations[0] == "fp32" else onnx.TensorProto.FLOAT16
    assert kv == {want}


@pytest.mark.parametrize(
    ("ep", "precision"), [("webgpu", "fp32"), ("webgpu", "fp16"), ("dml", "fp16"), ("trt-rtx", "fp16")]
)
def test_ep_graph_runs_on_cpu_like_hf(exports, checkpoints, ep, precision):
    """The same graph on ORT's CPU kernels: fp32 within 1e-4 of HF, fp16 within the fp16 bound."""
    error, ref = _parity(exports.get("base", ep=ep, precision=precision), checkpoints.get("base"))
    assert error < _bound(precision, ref), f"{ep} {precision}: max |ORT - HF| = {error}"


def test_dml_unpacked_plain_rope_mutant_fails(exports, checkpoints, tmp_path):
    """DML's own graph form (separate Q/K/V MatMuls, RoPE in plain ops): q_proj scaled x1.5 breaks
    the fp16 bound, so the bound above checks that form."""
    from mutants import copy_package, edit_initializers, times

    package = copy_package(exports.get("base", ep="dml", precision="fp16"), tmp_path / "dml")
    assert edit_initializers(package, "*q_proj*", times(1.5))
    error, ref = _parity(package, checkpoints.get("base"))
    assert error > _bound("fp16", ref)


@pytest.mark.parametrize(("ep", "precision"), REFUSED)
def test_refused_pairs_are_one_line(checkpoints, tmp_path, ep, precision):
    with pytest.raises(InputError) as err:
        build(BuildOptions(str(checkpoints.get("base")), tmp_path / "x", ep=ep, precision=precision, smoke=False))
    assert "\n" not in str(err.value) and EPS[ep].refused[precision] in str(err.value)
    assert not (tmp_path / "x").exists()


def test_refusals_exit_2_on_the_command_line(checkpoints, tmp_path):
    runner = CliRunner()
    for args in (
        ["--ep", "qnn", "--precision", "bf16"],
        ["--ep", "dml", "--precision", "fp32"],
        ["--ep", "dml", "--attention", "bias"],
        ["--ep", "openvino", "--attention", "split"],
    ):
        result = runner.invoke(app, ["build", str(checkpoints.get("base")), "-o", str(tmp_path / "x"), *args])
        assert result.exit_code == 2, (args, result.output)
        assert not (tmp_path / "x").exists()


# Phi-3 longrope (original_max_position_embeddings 32): a prompt that crosses the switch while
# decoding, and one past it from the start (tests/graph/test_decoder.py runs the CPU If form)
LONGROPE_RUNS = ((28, 6), (40, 2))


def _longrope_error(package, checkpoint) -> tuple[float, float]:
    """Max |ORT - HF| over both LONGROPE_RUNS, and the largest |HF logit|."""
    model, error, top = hf_model(checkpoint), 0.0, 0.0
    for prompt_len, steps in LONGROPE_RUNS:
        tokens, got = ort_prefill_and_decode(package, [(7 * i + 3) % 384 for i in range(prompt_len)], steps)
        ref = hf_logits(model, tokens, prompt_len)
        error, top = max(error, float(np.abs(got - ref).max())), max(top, float(np.abs(ref).max()))
    return error, top


@pytest.mark.parametrize(("ep", "precision"), [("webgpu", "fp32"), ("dml", "fp16"), ("trt-rtx", "fp16")])
def test_if_less_longrope_offset_like_hf(exports, checkpoints, ep, precision):
    """longrope on EPs with no If kernel: one [short rows; long table] cos/sin table and a Slice at
    the offset Where picks from the total length (docs/eps.md §2.4), no provider option; the graph on
    CPU within 1e-4 (fp32) or the fp16 bound of HF, short and long prompts."""
    package = exports.get("phi3_longrope", ep=ep, precision=precision)
    model = onnx.load(str(package / "model.onnx"), load_external_data=False)
    assert "If" not in {n.op_type for n in model.graph.node}
    rows = {i.name: i.dims[0] for i in model.graph.initializer if i.name in ("cos_cache", "sin_cache")}
    config = json.loads((package / "genai_config.json").read_text())
    max_length = config["search"]["max_length"]
    assert len(rows) == 2 and all(r >= 32 + max_length for r in rows.values())
    assert config["model"]["decoder"]["session_options"]["provider_options"] == EPS[ep].genai_provider_options()
    error, top = _longrope_error(package, checkpoints.get("phi3_longrope"))
    bound = 1e-4 if precision == "fp32" else FP16_BOUND * max(1.0, top)
    assert error < bound, f"{ep} {precision}: max |ORT - HF| = {error}"


@pytest.mark.parametrize(
    ("name", "edits"),
    [("offset_off_by_one", {"*long_start*": 31}), ("short_long_swapped", {"*long_start*": 0, "*short_start*": 32})],
)
def test_if_less_longrope_mutant_fails(exports, checkpoints, tmp_path, name, edits):
    """The offset one row early, or the short and long halves exchanged, break the 1e-4 bound."""
    from mutants import copy_package, edit_initializers

    package = copy_package(exports.get("phi3_longrope", ep="webgpu", precision="fp32"), tmp_path / name)
    for pattern, value in edits.items():
        assert edit_initializers(package, pattern, lambda v, value=value: np.full_like(v, value))
    error, _ = _longrope_error(package, checkpoints.get("phi3_longrope"))
    assert error > 1e-4, f"{name}: max |ORT - HF| = {error}"


def _retarget(package, dest, ep: str):
    """A copy of `package` whose genai_config names `ep`'s provider (graph unchanged)."""
    shutil.copytree(package, dest)
    config = json.loads((dest / "genai_config.json").read_text())
    config["model"]["decoder"]["session_options"]["provider_options"] = EPS[ep].genai_provider_options()
    (dest / "genai_config.json").write_text(json.dumps(config))
    return dest


def _ep_findings(package) -> list[str]:
    return [f["message"] for f in inspect_package(package)["findings"] if f["id"] == "ep-unsupported-op"]


@pytest.mark.parametrize(("ep", "precision"), BUILT)
def test_inspect_passes_each_ep_package(exports, ep, precision):
    assert _ep_findings(exports.get("base", ep=ep, precision=precision)) == []


def test_inspect_flags_fp32_gqa_in_a_dml_package_mutant(exports, tmp_path):
    """A CPU fp32 graph under DML's provider entry: its fp32 GroupQueryAttention is a finding."""
    package = _retarget(exports.get("base", ep="cpu", precision="fp32"), tmp_path / "dml", "dml")
    assert any("GroupQueryAttention in float has no dml kernel" in m for m in _ep_findings(package))


def test_inspect_flags_nbits_and_skip_norm_in_a_trt_rtx_package_mutant(exports, tmp_path):
    package = _retarget(exports.get("base", ep="cpu", precision="int4"), tmp_path / "trt", "trt-rtx")
    found = " ".join(_ep_findings(package))
    assert "MatMulNBits has no trt-rtx kernel" in found and "SkipSimplifiedLayerNormalization" in found
    runner = CliRunner()
    result = runner.invoke(app, ["inspect", str(package), "--json"])
    assert result.exit_code != 0 or "ep-unsupported-op" in result.stdout


def test_release_folders_follow_the_published_layout():
    assert folder_name("dml", "int4", QuantOptions()) == "directml/directml-int4-rtn-block-32"
    assert folder_name("webgpu", "int4", QuantOptions()) == "webgpu/webgpu-int4-rtn-block-32-acc-level-4"
    assert folder_name("openvino", "fp32", QuantOptions()) == "openvino/openvino-fp32"
    assert folder_name("trt-rtx", "fp16", QuantOptions()) == "trt-rtx/trt-rtx-fp16"


def test_inspect_flags_standard_attention_in_an_openvino_package_mutant(checkpoints, tmp_path):
    """OpenVINO's ONNX frontend rejects the standard Attention op (probed): a bias-mode graph under
    OpenVINO's provider entry is a finding."""
    build(BuildOptions(str(checkpoints.get("base")), tmp_path / "bias", attention="bias", smoke=False))
    package = _retarget(tmp_path / "bias", tmp_path / "ov", "openvino")
    assert any("Attention has no openvino kernel" in m for m in _ep_findings(package))


def test_webgpu_refuses_a_tensor_over_its_buffer_limit(checkpoints, tmp_path, monkeypatch):
    """WebGPU's 256 MiB per-buffer limit, checked at build time: with the limit lowered to 64 KiB the
    tiny model's embedding (384 x 64 fp16 = 48 KiB passes, fp32 = 96 KiB does not) is refused."""
    from dataclasses import replace

    from gqa_export.check import ep_lints

    small = {**EPS, "webgpu": replace(EPS["webgpu"], max_tensor_bytes=64 << 10)}
    monkeypatch.setattr(ep_lints, "EPS", small)
    with pytest.raises(InputError, match=r"at most 0.0625 MiB per tensor, and .*embed"):
        build(BuildOptions(str(checkpoints.get("base")), tmp_path / "x", ep="webgpu", precision="fp32", smoke=False))
    assert not (tmp_path / "x").exists()


def test_packages_for_absent_eps_run_on_cpu_where_their_dtypes_allow(exports):
    """`run`/`verify` on a machine without the EP: the graph runs on CPU (fp16), bf16 cannot."""
    from gqa_export.runtime.providers import package_ep, runnable_ep
    from gqa_export.runtime.run import smoke_run

    dml = exports.get("base", ep="dml", precision="fp16")
    assert package_ep(dml) == "dml"
    ep, note = runnable_ep(dml)
    assert ep == "cpu" and "DmlExecutionProvider" in (note or "")
    assert smoke_run(dml, ep).tokens
    assert runnable_ep(exports.get("base", ep="trt-rtx", precision="bf16"))[0] is None


def _qdq_logits(package, tokens: list[int]) -> np.ndarray:
    """Prompt + decode logits with ORT's DQ+MatMul -> MatMulNBits fusion at accuracy level 0 (its
    CPU default, 4, quantizes activations to int8: docs/eps.md §2.6)."""
    import onnxruntime as ort
    from reference import OrtStepper

    stepper = OrtStepper(package)
    options = ort.SessionOptions()
    options.add_session_config_entry("session.qdq_matmulnbits_accuracy_level", "0")
    stepper.session = ort.InferenceSession(str(package / "model.onnx"), options, providers=["CPUExecutionProvider"])
    return np.concatenate([stepper.step(tokens[: len(PROMPT)]), *(stepper.step([t]) for t in tokens[len(PROMPT) :])])


QDQ_BOUND = 1e-2  # fp16 rounding between the two int4 forms, relative to max |logit|


def _qdq_error(package, exports) -> float:
    reference = exports.get("base", ep="cuda", precision="int4")  # MatMulNBits, fp16, accuracy level 0
    tokens, want = ort_prefill_and_decode(reference, PROMPT, steps=4)
    got = _qdq_logits(package, tokens)
    return float(np.abs(got - want).max() / max(1.0, float(np.abs(want).max())))


def test_trt_rtx_int4_is_qdq_and_computes_the_matmulnbits_weights(exports):
    """TensorRT-RTX int4: DequantizeLinear(uint4, blocked) + MatMul, no MatMulNBits; on CPU the same
    logits as the MatMulNBits package of the same quantization."""
    package = exports.get("base", ep="trt-rtx", precision="int4")
    ops = {n.op_type for n in onnx.load(str(package / "model.onnx"), load_external_data=False).graph.node}
    assert "DequantizeLinear" in ops and "MatMulNBits" not in ops
    assert _qdq_error(package, exports) < QDQ_BOUND


def test_trt_rtx_qdq_scales_mutant_fails(exports, tmp_path):
    from mutants import copy_package, edit_initializers, times

    package = copy_package(exports.get("base", ep="trt-rtx", precision="int4"), tmp_path / "trt")
    assert edit_initializers(package, "*qkv_proj.qdq_scales", times(1.5))
    assert _qdq_error(package, exports) > QDQ_BOUND


def test_quantize_command_writes_each_eps_int4_form(exports, tmp_path):
    """`gqa-export quantize` of a float package follows the package's EP as build does: QDQ for
    TensorRT-RTX, MatMulNBits for DirectML."""
    from gqa_export.quant.options import QuantOptions as Q
    from gqa_export.requantize import requantize

    for ep, want, absent in (
        ("trt-rtx", "DequantizeLinear", "MatMulNBits"),
        ("dml", "MatMulNBits", "DequantizeLinear"),
    ):
        out = tmp_path / ep
        requantize(exports.get("base", ep=ep, precision="fp16"), out, "int4", Q(), smoke=False)
        ops = {n.op_type for n in onnx.load(str(out / "model.onnx"), load_external_data=False).graph.node}
        assert want in ops and absent not in ops
        assert _ep_findings(out) == []


def test_vision_graph_is_checked_against_the_ep_mutant(
    gemma3_full_checkpoint, gemma3_full_package, tmp_path, monkeypatch
):
    """A full multimodal package's vision graph is checked too, at build time and by inspect: a CPU
    record that lacks the vision tower's Conv (an op only vision.onnx has) refuses the build and
    flags the written package's vision.onnx."""
    from dataclasses import replace

    from gqa_export.check import ep_lints

    pytest.importorskip("PIL")
    no_conv = {**EPS, "cpu": replace(EPS["cpu"], missing_ops=frozenset({"Conv"}))}
    monkeypatch.setattr(ep_lints, "EPS", no_conv)
    with pytest.raises(InputError, match="Conv"):
        build(BuildOptions(str(gemma3_full_checkpoint), tmp_path / "x", smoke=False))
    assert not (tmp_path / "x").exists()
    monkeypatch.setattr(ep_lints, "by_genai_provider", lambda names: no_conv["cpu"])
    assert any(m.startswith("vision.onnx:") and "Conv" in m for m in _ep_findings(gemma3_full_package))
