"""int4/int8 weight-only quantization: MatMulNBits layout against a float reference, packages
that generate, logits within a justified bound of the float export, re-quantizing packages."""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper
from typer.testing import CliRunner

from gqa_export.cli import app
from gqa_export.pipeline import BuildOptions, build
from gqa_export.quant.nbits import NBitsConfig, dequantize, quantize_rows
from gqa_export.quant.quantize import QuantOptions
from gqa_export.runtime.run import generate_greedy

runner = CliRunner()


def run_matmul_nbits(a: np.ndarray, packed, scales, zero_points, n: int, k: int, cfg: NBitsConfig) -> np.ndarray:
    inits = [
        helper.make_tensor("B", TensorProto.UINT8, packed.shape, packed.tobytes(), raw=True),
        helper.make_tensor("S", TensorProto.FLOAT, scales.shape, scales.astype(np.float32).tobytes(), raw=True),
    ]
    inputs = ["A", "B", "S"]
    if not cfg.symmetric:
        inits.append(helper.make_tensor("Z", TensorProto.UINT8, zero_points.shape, zero_points.tobytes(), raw=True))
        inputs.append("Z")
    node = helper.make_node(
        "MatMulNBits", inputs, ["Y"], domain="com.microsoft", K=k, N=n, bits=cfg.bits, block_size=cfg.block_size
    )
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("A", TensorProto.FLOAT, ["M", k])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["M", n])], inits,
    )  # fmt: skip
    opsets = [helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)]
    model = helper.make_model(graph, opset_imports=opsets, ir_version=10)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"A": a})[0]


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize(("k", "block"), [(64, 32), (70, 32), (200, 128), (48, 16)])
@pytest.mark.parametrize(("method", "symmetric"), [("rtn", True), ("rtn", False), ("search", True)])
def test_layout_matches_float_reference(bits, symmetric, k, block, method):
    rng = np.random.default_rng(k + bits)
    n = 24
    w = rng.standard_normal((n, k)).astype(np.float32)
    a = rng.standard_normal((5, k)).astype(np.float32)
    cfg = NBitsConfig(bits, block, symmetric, method)
    packed, scales, zps = quantize_rows(w, cfg)
    assert packed.shape == (n, -(-k // block), block * bits // 8)
    w_hat = dequantize(packed, scales, zps, k, cfg)
    got = run_matmul_nbits(a, packed, scales, zps, n, k, cfg)
    np.testing.assert_allclose(got, a @ w_hat.T, rtol=1e-4, atol=1e-4)  # ORT reads our layout exactly
    rel = np.linalg.norm(w_hat - w) / np.linalg.norm(w)
    assert rel < {4: 0.12, 8: 0.008}[bits]  # uniform-quantization error of Gaussian weights
    assert np.linalg.norm(got - a @ w.T) / np.linalg.norm(a @ w.T) < {4: 0.15, 8: 0.01}[bits]


def test_search_never_worse_than_rtn():
    rng = np.random.default_rng(7)
    w = (rng.standard_t(3, (64, 256))).astype(np.float32)  # heavy tails: clipping helps
    errors = {}
    for method in ("rtn", "search"):
        cfg = NBitsConfig(4, 32, True, method)
        p, s, z = quantize_rows(w, cfg)
        errors[method] = np.linalg.norm(dequantize(p, s, z, 256, cfg) - w)
    assert errors["search"] < errors["rtn"]


@pytest.fixture(scope="module")
def int_packages(checkpoints, tmp_path_factory):
    root = tmp_path_factory.mktemp("quant")
    made = {}

    def get(
        precision: str,
        method: str = "rtn",
        keep: tuple[str, ...] = (),
        level: int | None = 0,
        asymmetric: bool | None = None,
        mixed: tuple[str, ...] = (),
    ) -> tuple:
        """level 0 (fp32 compute) by default, so that the logit error measures the weights alone;
        CPU's default level 4 also quantizes activations to int8."""
        key = (precision, method, keep, level, asymmetric, mixed)
        if key not in made:
            out = root / f"{precision}-{method}-{len(keep)}-{level}-{asymmetric}-{len(mixed)}"
            quant = QuantOptions(
                method=method, keep_float=keep, accuracy_level=level, asymmetric=asymmetric, mixed_precision=mixed
            )
            result = build(
                BuildOptions(str(checkpoints.get("gqa")), out, precision=precision, quant=quant, report=True)
            )
            made[key] = (out, result)
        return made[key]

    return get


@pytest.mark.parametrize(("precision", "method"), [("int4", "rtn"), ("int4", "search"), ("int8", "rtn")])
def test_int_packages_generate_and_stay_close_to_float(int_packages, precision, method):
    package, result = int_packages(precision, method)
    assert result.smoke is not None and len(result.smoke.tokens) == 16
    report = json.loads((package / "quant_report.json").read_text())
    worst = report["weights_summary"]["max_relative_l2"]
    e2e = report["logits_vs_float"]
    # Bound: a weight error e perturbs each linear output by ~e (relative); through 2 layers of
    # attention + MLP and the lm_head these compound to a few e. Measured ~5.5e on this model for
    # both widths; 8e leaves room for noise, while a layout error gives ~1.0 relative error.
    assert e2e["relative_l2"] < 8 * worst
    if precision == "int8":
        assert e2e["next_token_agreement"] > 0.85
    graph = onnx.load(str(package / "model.onnx"), load_external_data=False).graph
    assert {n.op_type for n in graph.node} >= {"MatMulNBits"} and "MatMul" not in {n.op_type for n in graph.node}
    full_manifest = json.loads((package / "manifest.json").read_text())
    assert "quant_report.json" in full_manifest["files"]
    manifest = full_manifest["options"]["quantization"]
    assert manifest["bits"] == {"int4": 4, "int8": 8}[precision] and manifest["method"] == method
    assert manifest["block_size"] == 32 and manifest["accuracy_level"] == 0


def _weight_error(int_packages, *args, **kwargs) -> float:
    report = json.loads((int_packages(*args, **kwargs)[0] / "quant_report.json").read_text())
    return report["weights_summary"]["mean_relative_l2"]


def test_searches_beat_round_to_nearest_of_their_own_kind(int_packages):
    """search (symmetric) vs symmetric rtn; k_quant (asymmetric) vs asymmetric rtn, the default."""
    assert _weight_error(int_packages, "int4", "search") < _weight_error(int_packages, "int4", "rtn", asymmetric=False)
    assert _weight_error(int_packages, "int4", "k_quant") < _weight_error(int_packages, "int4", "rtn")


def test_mixed_precision_makes_the_selected_weights_8_bit(int_packages):
    package, result = int_packages("int4", "k_quant", mixed=("last_matmul:int8", "sensitive_layers:int8"))
    assert result.smoke is not None and len(result.smoke.tokens) == 16
    graph = onnx.load(str(package / "model.onnx"), load_external_data=False).graph
    bits = {
        n.name: next(a.i for a in n.attribute if a.name == "bits") for n in graph.node if n.op_type == "MatMulNBits"
    }
    eight = sorted(name for name, b in bits.items() if b == 8)
    # 2 layers: both are "sensitive" (first/last eighth rounds to layer 0.. and every third)
    assert any("lm_head" in name for name in eight) and any("down_proj" in name for name in eight)
    assert any(b == 4 for b in bits.values())
    manifest = json.loads((package / "manifest.json").read_text())["options"]["quantization"]
    assert manifest["mixed_precision"] == ["last_matmul:int8", "sensitive_layers:int8"]
    assert manifest["weights_by_bits"]["int8"] == len({n for n in eight})
    assert _weight_error(int_packages, "int4", "k_quant", mixed=("last_matmul:int8", "sensitive_layers:int8")) < (
        _weight_error(int_packages, "int4", "k_quant")
    )


def test_keep_float_lm_head(int_packages):
    package, _ = int_packages("int4", "rtn", ("lm_head*",), None)
    graph = onnx.load(str(package / "model.onnx"), load_external_data=False).graph
    matmuls = [n for n in graph.node if n.op_type == "MatMul"]
    assert len(matmuls) == 1 and "lm_head" in matmuls[0].name
    manifest = json.loads((package / "manifest.json").read_text())
    assert manifest["options"]["quantization"]["excluded"] == ["lm_head.weight"]
    assert manifest["options"]["quantization"]["accuracy_level"] == 4  # the CPU default: int8 compute


def test_requantize_package_equals_direct_build(int_packages, exports, tmp_path):
    """`quantize` on the fp32 package gives the same bytes as building int4 directly."""
    out = tmp_path / "requant"
    args = ["quantize", str(exports.get("gqa")), "-o", str(out), "-p", "int4", "--accuracy-level", "0", "--json"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    direct, _ = int_packages("int4", "rtn")
    assert (out / "model.onnx.data").read_bytes() == (direct / "model.onnx.data").read_bytes()
    prompt = [0, 17, 45, 99]
    assert generate_greedy(out, prompt, 12).tokens == generate_greedy(direct, prompt, 12).tokens
    again = runner.invoke(app, ["quantize", str(out), "-o", str(tmp_path / "twice"), "-p", "int4"])
    assert again.exit_code == 2 and "already int4" in again.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["-p", "int4", "--block-size", "48"], "--block-size must be a power of two from 16 to 256"),
        (["-p", "int4", "--quant-method", "gptq"], "'gptq' is not one of"),
        (["-p", "int4", "--quant-method", "search", "--asymmetric"], "search is symmetric only"),
        # silent no-ops are refused: a pattern that keeps nothing float, int4 options on a float build
        (["-p", "int4", "--keep-float", "lm_haed*"], "--keep-float lm_haed* matches no weight or node"),
        (["-p", "fp32", "--block-size", "64"], "--block-size applies to int4/int8 packages, not --precision fp32"),
        (["-p", "fp16", "--quant-method", "k_quant"], "--quant-method applies to int4/int8 packages"),
        (["-p", "fp32", "--keep-float", "lm_head*"], "--keep-float applies to int4/int8 packages"),
    ],
)
def test_bad_quant_options(checkpoints, tmp_path, args, message):
    result = runner.invoke(app, ["build", str(checkpoints.get("gqa")), "-o", str(tmp_path / "p"), *args])
    assert result.exit_code == 2 and message in result.output


def test_asymmetric_int4_cuda_graph_is_fp16(checkpoints, tmp_path):
    out = tmp_path / "cuda-int4"
    build(
        BuildOptions(
            str(checkpoints.get("gqa")),
            out,
            ep="cuda",
            precision="int4",
            quant=QuantOptions(asymmetric=True),
            smoke=False,
        )
    )
    graph = onnx.load(str(out / "model.onnx"), load_external_data=False).graph
    nbits = [n for n in graph.node if n.op_type == "MatMulNBits"]
    assert nbits and all(len(n.input) == 4 for n in nbits)  # zero points present
    scales = {t.name: t for t in graph.initializer if t.name.endswith(".scales")}
    assert scales and all(t.data_type == TensorProto.FLOAT16 for t in scales.values())
    accuracy = {helper.get_attribute_value(a) for n in nbits for a in n.attribute if a.name == "accuracy_level"}
    assert accuracy == {0}


@pytest.mark.parametrize(("precision", "asymmetric"), [("int4", False), ("int4", True), ("int8", True)])
def test_tied_embedding_and_lm_head_share_one_quantized_tensor(tmp_path, precision, asymmetric):
    from pathlib import Path

    shipped = Path(__file__).resolve().parents[1] / "data" / "tiny-llama"  # tie_word_embeddings: true
    out = tmp_path / "tied"
    result = build(BuildOptions(str(shipped), out, precision=precision, quant=QuantOptions(asymmetric=asymmetric)))
    assert result.smoke is not None and len(result.smoke.tokens) == 16
    graph = onnx.load(str(out / "model.onnx"), load_external_data=False).graph
    gbq = [n for n in graph.node if n.op_type == "GatherBlockQuantized"]
    lm_head = [n for n in graph.node if n.op_type == "MatMulNBits" and "lm_head" in n.name]
    assert len(gbq) == 1 and len(lm_head) == 1
    assert gbq[0].input[0] == lm_head[0].input[1] == "model.embed_tokens.qweight"
    names = [t.name for t in graph.initializer]
    assert names.count("model.embed_tokens.qweight") == 1 and "model.embed_tokens.weight" not in names


def test_quant_embeddings_flag_for_untied(checkpoints, tmp_path):
    out = tmp_path / "untied"
    build(
        BuildOptions(
            str(checkpoints.get("gqa")), out, precision="int8", quant=QuantOptions(embeddings=True), smoke=False
        )
    )
    ops = [n.op_type for n in onnx.load(str(out / "model.onnx"), load_external_data=False).graph.node]
    assert "GatherBlockQuantized" in ops and "Gather" in ops  # Gather stays only in the mask subgraph
    # against int8 with the float table (the only difference: the table's int8 rounding): greedy genai
    # tokens equal, prompt logits within 0.07 relative L2 (measured 0.040); the table's scales x1.5, a
    # planted bug, measure 0.104 and change the tokens
    from mutants import copy_package, edit_initializers, times
    from reference import OrtStepper

    plain = tmp_path / "plain"
    build(BuildOptions(str(checkpoints.get("gqa")), plain, precision="int8", smoke=False))
    prompt = [0, 5, 7, 20, 31, 42, 53, 64, 75, 86]
    expected = OrtStepper(plain).step(prompt)

    def error(package):
        return float(np.linalg.norm(OrtStepper(package).step(prompt) - expected) / np.linalg.norm(expected))

    tokens = generate_greedy(out, [0, 5, 7], 8).tokens
    assert tokens == generate_greedy(plain, [0, 5, 7], 8).tokens and len(set(tokens)) > 2
    assert error(out) < 0.07
    broken = copy_package(out, tmp_path / "broken")
    assert edit_initializers(broken, "model.embed_tokens.scales", times(1.5))
    assert error(broken) > 0.07 and generate_greedy(broken, [0, 5, 7], 8).tokens != tokens


def test_int4_cuda_bf16_activations(checkpoints, tmp_path):
    out = tmp_path / "bf16"
    quant = QuantOptions(activations="bf16")
    result = build(BuildOptions(str(checkpoints.get("gqa")), out, ep="cuda", precision="int4", quant=quant))
    assert result.smoke is None and any(
        "bf16 activations have no CPU kernels" in n and "skipped" in n for n in result.notes
    )
    graph = onnx.load(str(out / "model.onnx"), load_external_data=False).graph
    scales = [t for t in graph.initializer if t.name.endswith(".scales")]
    assert scales and all(t.data_type == TensorProto.BFLOAT16 for t in scales)
    inputs = {i.name: i.type.tensor_type.elem_type for i in graph.input}
    assert inputs["past_key_values.0.key"] == TensorProto.BFLOAT16
    assert {o.name: o.type.tensor_type.elem_type for o in graph.output}["logits"] == TensorProto.FLOAT
    refused = runner.invoke(
        app, ["build", str(checkpoints.get("gqa")), "-o", str(tmp_path / "x"), "-p", "int4", "--activations", "bf16"]
    )
    assert refused.exit_code == 2 and "--activations bf16 is not available with --ep cpu" in refused.output


def test_tied_table_is_quantized_when_blocks_do_not_divide_the_hidden_size(tmp_path):
    """hidden 96 at block 64: the table's last block is padded and the gathered rows cut back to
    96 (it used to stay float: 486 KB instead of 227 KB). Every weight, the table included, is
    within the int4 bound when dequantized independently, and perplexity stays close to fp32."""
    from pathlib import Path

    from weight_layouts import INT4_MAX_ERROR, relative_errors

    from gqa_export.runtime.evaluate import evaluate, read_text

    data = Path(__file__).resolve().parents[1] / "data"
    out, reference = tmp_path / "b64", tmp_path / "fp32"
    quant = QuantOptions(block_size=64)
    build(BuildOptions(str(data / "tiny-trained"), out, precision="int4", quant=quant, smoke=False))
    build(BuildOptions(str(data / "tiny-trained"), reference, smoke=False))
    graph = onnx.load(str(out / "model.onnx"), load_external_data=False).graph
    tables = {n.input[0]: n.op_type for n in graph.node if n.op_type in ("Gather", "GatherBlockQuantized")}
    assert tables.get("model.embed_tokens.qweight") == "GatherBlockQuantized", tables
    assert "model.embed_tokens.weight" not in tables  # no float copy of the table
    quantization = json.loads((out / "manifest.json").read_text())["options"]["quantization"]
    assert quantization["block_size"] == 64 and quantization["excluded"] == []
    errors = relative_errors(out, data / "tiny-trained")
    assert "model.embed_tokens" in errors and max(errors.values()) < INT4_MAX_ERROR, errors
    text = read_text(data / "tiny-text" / "eval.txt")
    report = evaluate(out, text, reference, window=256, stride=128, max_tokens=1024)
    assert 0 < report["delta"]["perplexity_increase_pct"] < 5.0  # measured +2.5% (2048 tokens)


@pytest.mark.parametrize(
    ("ep", "weights", "identical"),
    [("cpu", "float16", True), ("cuda", "float16", True), ("cpu", "float32", False)],
    ids=["cpu-fp16-checkpoint", "cuda-fp16-checkpoint", "cpu-fp32-checkpoint"],
)
def test_requantize_fp16_package_keeps_fp16_activations(checkpoints, tmp_path, ep, weights, identical):
    """`quantize` of an fp16 package (CPU too) makes int4 with fp16 activations, what the package
    has: the bytes of a direct `build -p int4 --activations fp16` when the checkpoint's weights are
    fp16 exactly; from an fp32 checkpoint the fp16 package holds rounded weights and some blocks
    quantize differently (why README promises a direct build's bytes from fp32 packages only).
    Either way its logits stay within the int4 bound of the fp16 package it came from."""
    checkpoint = str(checkpoints.get(f"gqa-{weights}", dtype=weights))
    fp16, direct, out = tmp_path / "fp16", tmp_path / "direct", tmp_path / "int4"
    build(BuildOptions(checkpoint, fp16, ep=ep, precision="fp16", smoke=False))
    int4_fp16 = QuantOptions(activations="fp16", accuracy_level=0)
    build(BuildOptions(checkpoint, direct, ep=ep, precision="int4", quant=int4_fp16, smoke=False))
    args = ["quantize", str(fp16), "-o", str(out), "-p", "int4", "--accuracy-level", "0", "--json"]
    args += ["--activations", "fp16", "--no-smoke"] if ep == "cuda" else ["--report"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    graph = onnx.load(str(out / "model.onnx"), load_external_data=False).graph
    assert {i.name: i.type.tensor_type.elem_type for i in graph.input}["past_key_values.0.key"] == TensorProto.FLOAT16
    assert "MatMulNBits" in {n.op_type for n in graph.node}
    same = (out / "model.onnx.data").read_bytes() == (direct / "model.onnx.data").read_bytes()
    assert same == identical
    if identical:
        assert (out / "model.onnx").read_bytes() == (direct / "model.onnx").read_bytes()
    if ep == "cpu":  # it runs on CPU with fp16 activations: 16 smoke tokens, logits near the fp16 package's
        report = json.loads(result.stdout)
        assert report["smoke"]["ep"] == "cpu" and report["smoke"]["new_tokens"] == 16
        worst = report["report"]["weights_summary"]["max_relative_l2"]
        assert report["report"]["logits_vs_float"]["relative_l2"] < 8 * worst  # the bound of the fp32 test above


def test_requantize_refuses_activations_it_cannot_keep(checkpoints, exports, tmp_path):
    """quantize replaces weights only: another --activations, or a dtype the EP's int4 kernels do not
    take, is one line naming what works (it said "needs fp32 activations" with no way out)."""
    fp16 = exports.get("gqa", "cpu", "fp16")
    args = ["quantize", str(fp16), "-o", str(tmp_path / "a"), "-p", "int4", "--activations", "fp32"]
    other = runner.invoke(app, args)
    assert other.exit_code == 2, other.output
    assert "quantize keeps" in other.output and "--activations fp32 from the checkpoint" in other.output
    openvino = tmp_path / "ov-fp16"
    build(BuildOptions(str(checkpoints.get("gqa")), openvino, ep="openvino", precision="fp16", smoke=False))
    refused = runner.invoke(app, ["quantize", str(openvino), "-o", str(tmp_path / "b"), "-p", "int4"])
    assert refused.exit_code == 2, refused.output
    assert "runs fp32 activations" in refused.output and "build --ep openvino --precision fp32" in refused.output
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_requantize_bf16_package_keeps_bf16_activations(exports, tmp_path):
    """A CUDA bf16 package quantizes to int4 with bf16 activations and fp32 logits, as `build -p int4
    --activations bf16` writes them (it was refused: CUDA's default int4 activations are fp16)."""
    out = tmp_path / "int4"
    result = runner.invoke(app, ["quantize", str(exports.get("gqa", "cuda", "bf16")), "-o", str(out), "--no-smoke"])
    assert result.exit_code == 0, result.output
    graph = onnx.load(str(out / "model.onnx"), load_external_data=False).graph
    scales = [t for t in graph.initializer if t.name.endswith(".scales")]
    assert scales and all(t.data_type == TensorProto.BFLOAT16 for t in scales)
    assert {o.name: o.type.tensor_type.elem_type for o in graph.output}["logits"] == TensorProto.FLOAT
