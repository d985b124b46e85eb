"""KV-cache scales recomputed from the float package's own K and V (issue #36).

An independent mutation check doubled every KV-cache scale and it passed the int8 per-channel drift
check and three of the four dequantization bounds: a doubled scale quantizes and dequantizes alike,
so it only coarsens the cache by one bit, within bounds set for the correct error. The scales are
defined (README, "Quantized KV cache"): each layer's max |K| and |V| over the calibration prompt
(per kv head and channel, or the layer's largest), x 1.25 headroom / qmax (127 for int8, 7 for int4).
Here the float package of the same checkpoint runs that prompt through onnxruntime directly (not
runtime/decode.py) and every k_scale / v_scale of every layout must equal the recomputation within
float32 rounding; a doubled or halved scale, a headroom or qmax off by any factor, scales of the
wrong layer or of K for V, or a shuffled channel order all break it by 50 % or more.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from mutants import copy_package, edit_initializers, times
from onnx import numpy_helper

from gqa_export.runtime.kv_calibration import CALIBRATION_TEXT, CALIBRATION_TOKENS, DRIFT_STEPS

HEADROOM = 1.25  # README: max |K|, |V| x 1.25 / qmax
QMAX = {8: 127.0, 4: 7.0}
LAYOUTS = [("int8", "per-channel"), ("int8", "per-tensor"), ("int4", "per-channel"), ("int4", "per-tensor")]
BOUND = 1e-4  # relative; measured 0 (the same float32 arithmetic on the same K and V)


def calibration_prompt(package: Path) -> list[int]:
    """The built-in calibration text as HF's tokenizer of the package gives it, repeated to
    CALIBRATION_TOKENS, within the room the drift's decode steps leave in max_length."""
    from transformers import AutoTokenizer

    ids = AutoTokenizer.from_pretrained(str(package))(CALIBRATION_TEXT)["input_ids"]
    max_length = json.loads((package / "genai_config.json").read_text())["search"]["max_length"]
    count = min(CALIBRATION_TOKENS, max(2, max_length - DRIFT_STEPS - 1))
    return (ids * (1 + count // len(ids)))[:count]


def float_absmax(float_package: Path, prompt: list[int]) -> dict[tuple[int, str], np.ndarray]:
    """(layer, "key"/"value") -> max |present| over the prompt's positions, [kv heads, head_dim]."""
    session = ort.InferenceSession(str(float_package / "model.onnx"), providers=["CPUExecutionProvider"])
    feed = {"input_ids": np.array([prompt], np.int64), "attention_mask": np.ones((1, len(prompt)), np.int64)}
    for value in session.get_inputs():
        if value.name.startswith("past_key_values."):
            feed[value.name] = np.zeros((1, value.shape[1], 0, value.shape[3]), np.float32)
    names = [o.name for o in session.get_outputs() if o.name.startswith("present.")]
    out = {}
    for name, present in zip(names, session.run(names, feed), strict=True):
        _, layer, which = name.split(".")
        out[(int(layer), which)] = np.abs(present[0, :, : len(prompt)]).max(axis=1)
    return out


def package_scales(package: Path) -> dict[tuple[int, str], tuple[np.ndarray, int, str]]:
    """(layer, "key"/"value") -> (the GQA node's k_scale or v_scale, its bit width, its quant type)."""
    model = onnx.load(str(package / "model.onnx"))
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    out = {}
    for node in model.graph.node:
        if node.op_type != "GroupQueryAttention":
            continue
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        layer = int(node.input[3].split(".")[1])  # past_key_values.<layer>.key
        for which, index in (("key", 12), ("value", 13)):
            out[(layer, which)] = (inits[node.input[index]], attrs["kv_cache_bit_width"], attrs["k_quant_type"])
    return out


def scale_errors(package: Path, float_package: Path) -> dict[tuple[int, str], float]:
    """Each scale's largest relative difference from max |K or V| x HEADROOM / qmax."""
    absmax = float_absmax(float_package, calibration_prompt(float_package))
    scales = package_scales(package)
    assert scales.keys() == absmax.keys(), (sorted(scales), sorted(absmax))
    errors = {}
    for key, (scale, bits, kind) in scales.items():
        amax = absmax[key].reshape(-1) if kind == b"PER_CHANNEL" else np.array([absmax[key].max()])
        expected = np.maximum(amax * HEADROOM, 1e-6) / QMAX[bits]
        assert scale.shape == expected.shape, (key, scale.shape, expected.shape)
        errors[key] = float(np.max(np.abs(scale.astype(np.float64) / expected - 1)))
    return errors


@pytest.mark.parametrize("layout", LAYOUTS, ids="-".join)
def test_scales_are_the_calibrated_range(trained_kv, layout):
    errors = scale_errors(trained_kv(*layout), trained_kv(None))
    assert len(errors) == 4 and max(errors.values()) < BOUND, errors  # 2 layers x (K, V)


MUTANTS = {"x2": times(2.0), "x0.5": times(0.5), "shuffled": lambda a: np.random.default_rng(0).permutation(a)}


@pytest.mark.parametrize(
    ("layout", "mutant"),
    [(layout, m) for layout in LAYOUTS for m in ("x2", "x0.5")] + [(("int4", "per-channel"), "shuffled")],
    ids=lambda v: "-".join(v) if isinstance(v, tuple) else v,
)
def test_mutant_scales_fail(trained_kv, tmp_path, layout, mutant):
    """The package's scales doubled (the planted bug), halved or shuffled: the recomputation sees it."""
    broken = copy_package(trained_kv(*layout), tmp_path / mutant)
    changed = edit_initializers(broken, "*_scale", MUTANTS[mutant])
    assert len(changed) == 4, changed
    assert max(scale_errors(broken, trained_kv(None)).values()) > 0.4  # x2: 1.0, x0.5: 0.5
