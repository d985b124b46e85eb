"""Quantized KV cache (kv_quant.py): calibrated GQA k_scale/v_scale, int8/int4 caches that run in
onnxruntime-genai, and a drift the manifest reports truthfully (recomputed here independently)."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from typer.testing import CliRunner

from gqa_export.cli import app
from gqa_export.graph.io_options import IoOptions
from gqa_export.pipeline import BuildOptions, build
from gqa_export.quant.kv_cache import DRIFT_STEPS, KvQuantOptions

runner = CliRunner()


@pytest.fixture(scope="module")
def kv_packages(checkpoints, tmp_path_factory):
    root = tmp_path_factory.mktemp("kv")
    made = {}

    def get(dtype: str | None, scales: str = "per-channel"):
        key = (dtype, scales)
        if key not in made:
            out = root / f"{dtype}-{scales}"
            made[key] = (out, build(BuildOptions(str(checkpoints.get("gqa")), out, kv=KvQuantOptions(dtype, scales))))
        return made[key]

    return get


def _decode_logits(package, prompt, forced):
    """Prompt, then the `forced` tokens one at a time; the decode steps' logits [steps, V]."""
    from reference import OrtStepper

    stepper = OrtStepper(package)
    stepper.kv = {
        name: type(buf).ortvalue_from_numpy(np.zeros(buf.shape(), _np_dtype(package, name)))
        for name, buf in stepper.kv.items()
    }
    stepper.step(prompt)
    return np.stack([stepper.step([t])[-1] for t in forced])


def _np_dtype(package, name):
    graph = onnx.load(str(package / "model.onnx"), load_external_data=False).graph
    elem = next(i for i in graph.input if i.name == name).type.tensor_type.elem_type
    return onnx.helper.tensor_dtype_to_np_dtype(elem)


@pytest.mark.parametrize(("dtype", "scales", "elem", "packed"), [
    ("int8", "per-channel", onnx.TensorProto.INT8, 1),
    ("int8", "per-tensor", onnx.TensorProto.INT8, 1),
    ("int4", "per-channel", onnx.TensorProto.UINT8, 2),
])  # fmt: skip
def test_quantized_cache_runs_and_reports_its_drift(kv_packages, dtype, scales, elem, packed):
    package, result = kv_packages(dtype, scales)
    float_package, _ = kv_packages(None)
    assert result.smoke is not None and len(result.smoke.tokens) == 16  # onnxruntime-genai generates
    graph = onnx.load(str(package / "model.onnx"), load_external_data=False).graph
    past = next(i for i in graph.input if i.name == "past_key_values.0.key").type.tensor_type
    float_past = next(
        i
        for i in onnx.load(str(float_package / "model.onnx"), load_external_data=False).graph.input
        if i.name == "past_key_values.0.key"
    ).type.tensor_type
    assert past.elem_type == elem and past.shape.dim[3].dim_value * packed == float_past.shape.dim[3].dim_value
    node = next(n for n in graph.node if n.op_type == "GroupQueryAttention")
    attrs = {a.name: a for a in node.attribute}
    assert attrs["kv_cache_bit_width"].i == {"int8": 8, "int4": 4}[dtype]
    assert attrs["k_quant_type"].s.decode() == scales.upper().replace("-", "_")
    scale = next(t for t in graph.initializer if t.name == node.input[12])
    kv, head = float_past.shape.dim[1].dim_value, float_past.shape.dim[3].dim_value
    assert list(scale.dims) == ([kv * head] if scales == "per-channel" else [1])

    report = json.loads((package / "manifest.json").read_text())["options"]["kv_cache"]
    assert report["dtype"] == dtype and report["scales"] == scales and report["drift"]["decode_steps"] == DRIFT_STEPS
    # the reported drift is what the two caches really give on a prompt of our own
    prompt, forced = [0, 5, 9, 13, 17, 21, 25, 29], [3, 7, 11, 2, 40, 8]
    diff = np.abs(_decode_logits(package, prompt, forced) - _decode_logits(float_package, prompt, forced))
    assert diff.max() > 0  # lossy: a cache that changed nothing was not quantized
    bound = {"int8": 1.0, "int4": 8.0}[dtype]  # logits of this tiny random model span about +-4
    assert diff.max() < bound and report["drift"]["max_abs_logit_diff"] < bound


def test_inspect_shows_the_smaller_cache(kv_packages):
    sizes = {}
    for dtype in (None, "int8", "int4"):
        shown = runner.invoke(app, ["inspect", str(kv_packages(dtype)[0]), "--json"])
        assert shown.exit_code == 0, shown.output
        sizes[dtype] = json.loads(shown.stdout)["summary"]["kv_cache_bytes_per_row"]
    assert sizes[None] == 4 * sizes["int8"] == 8 * sizes["int4"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--kv-cache", "int8", "--attention", "bias"], "needs GroupQueryAttention's k_scale/v_scale"),
        (["--kv-cache", "int8", "--ep", "cuda", "-p", "bf16"], "no bf16 GroupQueryAttention"),
        (["--kv-cache", "fp8"], "'fp8' is not one of"),
    ],
)
def test_kv_cache_refusals(checkpoints, tmp_path, args, message):
    out = tmp_path / "p"
    result = runner.invoke(app, ["build", str(checkpoints.get("gqa")), "-o", str(out), "--no-smoke", *args])
    assert result.exit_code == 2 and message in " ".join(result.output.replace("│", " ").split()), result.output
    assert not out.exists()


def test_cuda_fp16_package_gets_an_int8_cache(checkpoints, tmp_path):
    """CUDA's kernels take int8 caches with fp16 activations; the scales are calibrated by running
    the fp16 graph on CPU (checked structurally here: no GPU)."""
    out = tmp_path / "cuda"
    build(
        BuildOptions(str(checkpoints.get("gqa")), out, ep="cuda", precision="fp16", smoke=False,
                     kv=KvQuantOptions("int8")),
    )  # fmt: skip
    graph = onnx.load(str(out / "model.onnx"), load_external_data=False).graph
    kinds = {i.name: i.type.tensor_type.elem_type for i in graph.input}
    assert kinds["past_key_values.0.key"] == onnx.TensorProto.INT8
    assert kinds["input_ids"] == onnx.TensorProto.INT64
    scale = next(t for t in graph.initializer if t.name.endswith("k_scale"))
    assert scale.data_type == onnx.TensorProto.FLOAT  # GQA takes float32 scales with fp16 activations
    config = json.loads((out / "genai_config.json").read_text())
    assert config["search"]["past_present_share_buffer"] is True
    drift = json.loads((out / "manifest.json").read_text())["options"]["kv_cache"]["drift"]
    assert 0 < drift["max_abs_logit_diff"] < 1.0


def test_int8_cache_on_a_trained_model_costs_almost_no_perplexity(tmp_path):
    """On the trained tiny checkpoint (tests/data/tiny-trained) an int8 KV cache changes perplexity
    by well under 0.5% and int4 by more: measured through onnxruntime-genai, every token decoded
    against the quantized cache."""
    from pathlib import Path

    from gqa_export.runtime.evaluate import evaluate, read_text

    data = Path(__file__).parent / "data"
    text = read_text(data / "tiny-text" / "eval.txt")
    packages = {}
    for cache in ("float", "int8", "int4"):
        packages[cache] = tmp_path / cache
        # last-token logits: eval then decodes every token against the (quantized) cache
        build(BuildOptions(str(data / "tiny-trained"), packages[cache], attention="gqa", smoke=False,
                           kv=KvQuantOptions(cache), io=IoOptions(prune_lm_head=True)))  # fmt: skip
    increase = {}
    for cache in ("int8", "int4"):
        report = evaluate(packages[cache], text, packages["float"], window=256, stride=128, max_tokens=1024)
        increase[cache] = report["delta"]["perplexity_increase_pct"]
    assert abs(increase["int8"]) < 0.5 < increase["int4"]
