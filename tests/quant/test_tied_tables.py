"""A tied embedding in int4/int8 builds for every EP (quant/tables.py, docs/eps.md §2.7).

The default int build of a tied checkpoint succeeds on each EP and passes that EP's op list. Where
the EP has no GatherBlockQuantized for the table (QNN, TensorRT-RTX, DirectML, OpenVINO; WebGPU's
kernel for 4-bit zero points one a byte), the Gather reads the float table and the lm_head is quantized in the
EP's own form, said in the manifest, by `inspect` and in the build notes. Run on CPU, that package
computes what the MatMulNBits package (fp16, accuracy level 0) of its untied twin computes: the same
checkpoint with the lm_head stored, whose untied embedding stays float and whose lm_head is
quantized the same way (HF's float logits are not the reference: int4 itself is far from them).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from reference import OrtStepper, ort_static_windows

from gqa_export.check.report import inspect_package
from gqa_export.eps import EPS
from gqa_export.errors import InputError
from gqa_export.pipeline import BuildOptions, build
from gqa_export.quant.options import QuantOptions
from gqa_export.quant.tables import float_gather

TIED = "mqa_tied"  # one kv head, tie_word_embeddings (tests/variants.py)
TABLE = "model.embed_tokens.weight"
INT_BUILDS = [(ep.name, p) for ep in EPS.values() for p in ep.precisions if p.startswith("int")]
PROMPT = [int(t) for t in np.random.default_rng(3).integers(6, 384, 70)]  # two QNN windows, the second padded
BOUND = 1e-2  # relative to max |logit|: fp16 rounding between two int4 graph forms (docs/eps.md §2.6)


def _float_form(ep: str, precision: str) -> str:
    from gqa_export.quant.quantize import plan_precision

    return float_gather(EPS[ep], plan_precision(ep, precision, QuantOptions()).nbits)  # type: ignore[arg-type]


FLOAT_FORM = [(ep, p) for ep, p in INT_BUILDS if _float_form(ep, p)]


@pytest.fixture(scope="module")
def tied(checkpoints, tmp_path_factory):
    """(the tied checkpoint, a builder of its default packages by (ep, precision), built once each)."""
    checkpoint, root, made = checkpoints.get(TIED), tmp_path_factory.mktemp("tied"), {}

    def get(ep: str, precision: str) -> Path:
        if (ep, precision) not in made:
            made[(ep, precision)] = root / f"{ep}-{precision}"
            build(BuildOptions(str(checkpoint), made[(ep, precision)], ep=ep, precision=precision, smoke=False))
        return made[(ep, precision)]

    return checkpoint, get


@pytest.fixture(scope="module")
def twin(tied, tmp_path_factory):
    """A builder of the untied twin's packages by (ep, precision): the same weights with
    lm_head.weight stored, so its embedding stays float and its lm_head is quantized as usual."""
    from tiny_models import save_untied_twin

    root = tmp_path_factory.mktemp("twin")
    twin = save_untied_twin(tied[0], root / "checkpoint")
    made: dict[tuple[str, str], Path] = {}

    def get(ep: str, precision: str) -> Path:
        if (ep, precision) not in made:
            made[(ep, precision)] = root / f"{ep}-{precision}"
            build(BuildOptions(str(twin), made[(ep, precision)], ep=ep, precision=precision, smoke=False))
        return made[(ep, precision)]

    return get


def _ops(package: Path) -> dict[str, set[str]]:
    """op -> the names of every node input of that op, over the package's graphs."""
    found: dict[str, set[str]] = {}
    for graph in package.glob("*.onnx"):
        for node in onnx.load(str(graph), load_external_data=False).graph.node:
            found.setdefault(node.op_type, set()).update(node.input)
    return found


@pytest.mark.parametrize(("ep", "precision"), INT_BUILDS)
def test_default_int_build_of_a_tied_model_runs_on_its_ep(tied, ep, precision):
    """Every EP's int build succeeds and `inspect` finds nothing its EP lacks; the table is a float
    Gather exactly where the EP has no GatherBlockQuantized for it, recorded and shown, and the tied
    lm_head is quantized either way (MatMulNBits, or DequantizeLinear for the QDQ EPs)."""
    package = tied[1](ep, precision)
    report = inspect_package(package)
    assert [f for f in report["findings"] if f["severity"] == "error"] == []
    ops, why = _ops(package), _float_form(ep, precision)
    lm_head = ops.get("MatMulNBits", set()) | ops.get("DequantizeLinear", set())
    assert any(name.startswith("model.embed_tokens.q") for name in lm_head)
    manifest = json.loads((package / "manifest.json").read_text())["options"]
    if why:
        assert "GatherBlockQuantized" not in ops and TABLE in ops["Gather"]
        assert manifest["ep_forms"]["float_gather"] == {"tables": [TABLE], "why": why}
        assert report["summary"]["ep_forms"]["float_gather"]["tables"] == [TABLE]
    else:
        assert "GatherBlockQuantized" in ops and "float_gather" not in manifest.get("ep_forms", {})


def _stepper(package: Path) -> OrtStepper:
    """A stepper whose DequantizeLinear + MatMul fuse at accuracy level 0 on CPU, not ORT's default 4,
    which quantizes activations (docs/eps.md §2.6)."""
    import onnxruntime as ort

    stepper = OrtStepper(package)
    stepper.session = ort.InferenceSession(str(package / "model.onnx"), _level_0(), providers=["CPUExecutionProvider"])
    return stepper


def _level_0():
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.add_session_config_entry("session.qdq_matmulnbits_accuracy_level", "0")
    return options


def _run(package: Path, prompt: list[int], then: list[int] | None) -> tuple[list[int], np.ndarray]:
    """(tokens, logits) over the prompt and 3 decode steps: greedy, or feeding `then` (QNN's static
    graphs through the runtime's window loop)."""
    if (package / "prefill.onnx").exists():
        if then is None:
            return ort_static_windows(package, prompt, 3, _level_0())
        tokens = prompt + then
        return tokens, ort_static_windows(package, tokens, 0, _level_0())[1]  # type: ignore[arg-type]
    stepper, tokens = _stepper(package), list(prompt)
    rows = [stepper.step(tokens)]
    for step in range(3):
        tokens.append(int(rows[-1][-1].argmax()) if then is None else then[step])
        rows.append(stepper.step([tokens[-1]]))
    return tokens, np.concatenate(rows)


def _error(package: Path, reference: Path) -> float:
    """Max |package - reference| over a 70-token prompt and the reference's 3 greedy decode steps,
    relative to max |logit|."""
    tokens, want = _run(reference, PROMPT, None)
    got = _run(package, PROMPT, tokens[len(PROMPT) :])[1]
    return float(np.abs(got - want).max() / max(1.0, float(np.abs(want).max())))


@pytest.mark.parametrize(("ep", "precision"), FLOAT_FORM)
def test_float_gather_package_computes_the_untied_twin(tied, twin, ep, precision):
    """Against the twin's package for the same EP (measured 0 for DirectML, WebGPU, OpenVINO and TensorRT-RTX,
    5.4e-4 for QNN, whose tied lm_head is a Gemm), and, where MatMulNBits runs at accuracy level 0
    as the CUDA record's does, against the twin's CUDA int4 package (MatMulNBits, fp16)."""
    package = tied[1](ep, precision)
    assert _error(package, twin(ep, precision)) < BOUND
    if EPS[ep].accuracy_level == 0:
        assert _error(package, twin("cuda", "int4")) < BOUND


def test_mutant_lm_head_scales_fail_the_bound(tied, twin, tmp_path):
    """The tied lm_head's block scales x1.5 in the QNN package (both graphs)."""
    from mutants import copy_package, edit_initializers, times

    package = copy_package(tied[1]("qnn", "int4"), tmp_path / "m")
    for graph in ("prefill.onnx", "decode.onnx"):
        assert edit_initializers(package, "model.embed_tokens.qdq_scales", times(1.5), graph)
    assert _error(package, twin("qnn", "int4")) > BOUND


@pytest.mark.parametrize(("ep", "precision"), FLOAT_FORM)
def test_mutant_table_left_gather_block_quantized_is_refused(tied, tmp_path, monkeypatch, ep, precision):
    """Without the rule the table is GatherBlockQuantized, which these EPs cannot run: refused
    before anything is written, naming the op."""
    from gqa_export.quant import quantize

    monkeypatch.setattr(quantize, "float_gather", lambda *args: "")
    with pytest.raises(InputError, match="GatherBlockQuantized"):
        build(BuildOptions(str(tied[0]), tmp_path / "x", ep=ep, precision=precision, smoke=False))
    assert not (tmp_path / "x").exists()
