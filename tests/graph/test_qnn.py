"""QNN packages (docs/eps.md §7): static-shape prefill/decode graphs driven by onnxruntime-genai's
windowed-input path. No Snapdragon here, so the package is checked for structure and the SAME
package runs through onnxruntime-genai on CPU (the provider cleared, as `run` does without QNN):
greedy tokens = HF generate for prompts shorter than, equal to and longer than the 64-token window;
the static graphs run by hand (the runtime's window loop, tests' own copy) give HF's logits.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from reference import assert_varied, hf_generate, hf_logits, hf_model
from reference import ort_static_windows as run_static

from gqa_export.check.report import inspect_package
from gqa_export.eps import EPS
from gqa_export.errors import InputError
from gqa_export.graph import static_decoder
from gqa_export.pipeline import BuildOptions, build

QNN = EPS["qnn"]
W = QNN.static_window
CONTEXT = 256  # search.max_length: four windows
NEW = 20
LENGTHS = (1, 10, W, 150)  # one token, inside one window, exactly one, three windows (padded end)


def _prompt(n: int, pad: int, seed: int = 0) -> list[int]:
    """Random ids without the pad id: the runtime finds a prompt's end at its first pad id."""
    ids = np.random.default_rng(seed + n).integers(6, 384, n)
    assert pad not in ids
    return [int(t) for t in ids]


def _build(checkpoint: Path, out: Path, precision: str = "fp32", context: int = CONTEXT) -> Path:
    build(BuildOptions(str(checkpoint), out, ep="qnn", precision=precision, smoke=False, max_length=context))
    return out


@pytest.fixture(scope="module")
def qnn(checkpoints, tmp_path_factory):
    """(checkpoint, its fp32 QNN package, the HF model): built once for the module."""
    checkpoint = checkpoints.get("base")
    package = _build(checkpoint, tmp_path_factory.mktemp("qnn") / "pkg")
    return checkpoint, package, hf_model(checkpoint)


def _parity(package: Path, model, n: int = 70, steps: int = 3, relative: bool = False) -> float:
    """Max |static graphs - HF| over the prompt and decode positions (relative: / max(1, max |HF|))."""
    pad = json.loads((package / "genai_config.json").read_text())["model"]["pad_token_id"]
    tokens, got = run_static(package, _prompt(n, pad), steps)
    ref = hf_logits(model, tokens, n)
    return float(np.abs(got - ref).max()) / (max(1.0, float(np.abs(ref).max())) if relative else 1.0)


def test_qnn_package_is_static_and_lints_clean(qnn):
    """Two static graphs of the EP's ops only, the windowed-input config, the QNN provider entry;
    `inspect` (EP lint for the package's QNN entry) finds nothing."""
    _, package, _ = qnn
    config = json.loads((package / "genai_config.json").read_text())
    model, decoder = config["model"], config["model"]["decoder"]
    assert model["type"] == "decoder-pipeline" and model["context_length"] == CONTEXT
    assert decoder["session_options"]["provider_options"] == QNN.genai_provider_options()
    assert decoder["sliding_window"] == {
        "window_size": W, "pad_value": 0, "alignment": "left", "slide_key_value_cache": False, "slide_inputs": True,
    }  # fmt: skip
    stages = decoder["pipeline"][0]
    assert (stages["prefill"]["run_on_prompt"], stages["prefill"]["run_on_token_gen"]) == (True, False)
    assert (stages["decode"]["run_on_prompt"], stages["decode"]["run_on_token_gen"]) == (False, True)
    assert config["search"]["past_present_share_buffer"] and config["search"]["max_length"] == CONTEXT
    assert decoder["inputs"]["past_sequence_length"] == "past_sequence_length"
    for name, step in (("prefill", W), ("decode", 1)):
        graph = onnx.load(str(package / f"{name}.onnx"), load_external_data=False).graph
        dims = [d for v in [*graph.input, *graph.output] for d in v.type.tensor_type.shape.dim]
        assert all(d.HasField("dim_value") for d in dims), f"{name}: a symbolic dimension"
        assert [d.dim_value for d in graph.input[0].type.tensor_type.shape.dim] == [1, step]
        assert {n.op_type for n in graph.node} <= QNN.only_ops
        assert not {"GroupQueryAttention", "Attention", "MatMulNBits"} & {n.op_type for n in graph.node}
    assert [f for f in inspect_package(package)["findings"] if f["severity"] == "error"] == []


def test_qnn_greedy_through_genai_windows_equals_hf(qnn):
    """The package through onnxruntime-genai 0.18's windowed path on CPU: for prompts of 1, 10, 64
    and 150 tokens (three windows, the last padded), 20 greedy tokens = HF generate."""
    _, package, model = qnn
    pad = json.loads((package / "genai_config.json").read_text())["model"]["pad_token_id"]
    prompts = [_prompt(n, pad) for n in LENGTHS]
    got = genai_greedy(package, prompts)
    assert got == [hf_generate(model, prompt, NEW) for prompt in prompts]
    assert_varied(got)


def genai_greedy(package: Path, prompts: list[list[int]]) -> list[list[int]]:
    """NEW greedy tokens per prompt through onnxruntime-genai on CPU (one model load)."""
    import onnxruntime_genai as og

    config = og.Config(str(package))
    config.clear_providers()
    genai, got = og.Model(config), []
    for prompt in prompts:
        params = og.GeneratorParams(genai)
        params.set_search_options(max_length=CONTEXT, min_length=CONTEXT)  # the pad ids count
        generator = og.Generator(genai, params)
        generator.append_tokens(prompt)
        tokens = []
        for _ in range(NEW):
            generator.generate_next_token()
            tokens.append(int(generator.get_next_tokens()[0]))
        got.append(tokens)
    return got


def test_qnn_static_graphs_give_hf_logits(qnn):
    """Prompt logits over two windows (the second padded) and decode-step logits within 1e-4."""
    _, package, model = qnn
    assert _parity(package, model) < 1e-4


def _mutant(monkeypatch, change) -> None:
    """Plant a bug in the per-graph step values (positions, write slots, biases)."""
    original = static_decoder.static_steps

    def planted(b, *args, **kwargs):
        return change(b, original(b, *args, **kwargs))

    monkeypatch.setattr(static_decoder, "static_steps", planted)


def _plus_one(b, value):
    return b.op("Add", value, b.const(1, "mutant_one", "int64"))


def _unmasked(b, steps):
    return {k: b.op("Mul", v, b.const(np.float32(0), "mutant_zero")) for k, v in steps.biases.items()}


def _within_run(b, steps):
    return b.op("Mod", steps.positions, b.const(steps.step, "mutant_step", "int64"))


@pytest.mark.parametrize(
    "change",
    [
        # the KV written one slot late: every key sits where the next position's should
        pytest.param(lambda b, s: replace(s, write_slots=_plus_one(b, s.write_slots)), id="kv_slot_off_by_one"),
        # RoPE positions counted from each run's start instead of the sequence's (a uniform shift
        # is invisible to RoPE: only relative positions reach the scores)
        pytest.param(lambda b, s: replace(s, positions=_within_run(b, s)), id="positions_offset"),
        # every query sees the whole window, the end padding of the prompt's last window included
        pytest.param(lambda b, s: replace(s, biases=_unmasked(b, s)), id="padding_unmasked"),
    ],
)
def test_qnn_mutants_fail(qnn, tmp_path, monkeypatch, change):
    checkpoint, _, model = qnn
    _mutant(monkeypatch, change)
    assert _parity(_build(checkpoint, tmp_path / "m"), model) > 1e-2


@pytest.mark.parametrize("name", ["mistral_window", "mqa_tied"])
def test_qnn_other_layouts_give_hf_logits(checkpoints, tmp_path, name):
    """A sliding-window model (window 8: keys past it hidden by the static mask), and one kv head
    with a tied lm_head (its Shape-built logits shape folded to a constant: QNN has no Shape)."""
    checkpoint = checkpoints.get(name)
    assert _parity(_build(checkpoint, tmp_path / "w"), hf_model(checkpoint), n=20, steps=12) < 1e-4


@pytest.fixture(scope="module")
def qnn_int4(qnn, tmp_path_factory) -> Path:
    return _build(qnn[0], tmp_path_factory.mktemp("qnn4") / "pkg", "int4")


def test_qnn_int4_is_qdq_and_fp16_runs_like_hf(qnn, qnn_int4, tmp_path):
    """int4: DequantizeLinear + MatMul (no MatMulNBits) with fp16 activations and cache. fp16: the
    static graphs on CPU within the fp16 bound of the other structural EPs (tests/base/test_eps.py)."""
    checkpoint, _, model = qnn
    package = qnn_int4
    graph = onnx.load(str(package / "decode.onnx"), load_external_data=False).graph
    ops = {n.op_type for n in graph.node}
    assert "DequantizeLinear" in ops and "MatMulNBits" not in ops and ops <= QNN.only_ops
    kv = {i.type.tensor_type.elem_type for i in graph.input if i.name.startswith("past_key_values.")}
    assert kv == {onnx.TensorProto.FLOAT16}
    assert _parity(_build(checkpoint, tmp_path / "h", "fp16"), model, relative=True) < 3e-2


def test_qnn_refusals_are_one_line(checkpoints, qnn, tmp_path):
    checkpoint = str(checkpoints.get("base"))
    for options, message in (
        (dict(max_length=100), "multiple of the 64-token window"),
        (dict(attention="gqa"), "runs --attention static only"),
        (dict(report=True), "--report needs every position's logits"),
    ):
        with pytest.raises(InputError, match=message) as err:
            build(BuildOptions(checkpoint, tmp_path / "x", ep="qnn", smoke=False, **options))
        assert "\n" not in str(err.value) and not (tmp_path / "x").exists()
    from gqa_export.speculative import build_with_draft  # refused before the draft is built

    with pytest.raises(InputError, match="--draft cannot pair with --ep qnn") as err:
        build_with_draft(BuildOptions(checkpoint, tmp_path / "x", ep="qnn", smoke=False), checkpoint)
    assert "\n" not in str(err.value) and not (tmp_path / "x").exists()
    # `run`: the window padding counts against max_length; a pad id inside a prompt is refused
    from gqa_export.runtime.run import prompt_slots

    package = qnn[1]
    assert prompt_slots(package, [7] * 70) == 2 * W
    with pytest.raises(InputError, match="holds pad_token_id 5"):
        prompt_slots(package, [7, 5, 9])
    from gqa_export.runtime.evaluate import check_window  # eval scores whole sequences

    with pytest.raises(InputError, match="runs prompts in static windows"):
        check_window(package, None, None)
    from gqa_export.arch import get_spec
    from gqa_export.graph.options import GraphOptions

    spec, opts = get_spec("llama"), GraphOptions(ir.DataType.FLOAT, ir.DataType.FLOAT, 256)
    dims = _dims(checkpoint)
    moe = replace(dims, layers=tuple(replace(layer, sparse=True) for layer in dims.layers))
    with pytest.raises(InputError, match="cannot hold mixture-of-experts layers"):
        static_decoder.build_static_decoder(moe, spec, None, opts, W, CONTEXT)  # type: ignore[arg-type]
    from gqa_export.model.stream import HyperDims

    hyper = replace(dims, hyper=HyperDims(3, 2.0, 1e-6))  # HunYuan-V4's copies of the residual
    with pytest.raises(InputError, match="cannot hold hyper-connection residual streams"):
        static_decoder.build_static_decoder(hyper, spec, None, opts, W, CONTEXT)  # type: ignore[arg-type]


def _dims(checkpoint: str):
    from transformers import AutoConfig

    from gqa_export.arch import get_spec
    from gqa_export.model.dims import read_dims

    return read_dims(AutoConfig.from_pretrained(checkpoint), get_spec("llama"), None)


def test_qnn_lint_flags_ops_outside_its_list(qnn, tmp_path):
    """The EP lint reads QNN's op list: a package whose graph holds an op QNN has no builder for
    (TensorScatter for the KV write here) is an `ep-unsupported-op` error; GQA is flagged too."""
    from mutants import copy_package

    from gqa_export.eps import graph_problems

    package = copy_package(qnn[1], tmp_path / "lint")
    model = onnx.load(str(package / "decode.onnx"), load_external_data=False)
    next(n for n in model.graph.node if n.op_type == "ScatterND").op_type = "TensorScatter"
    onnx.save(model, str(package / "decode.onnx"))
    errors = [f["message"] for f in inspect_package(package)["findings"] if f["id"] == "ep-unsupported-op"]
    assert errors == ["decode.onnx: TensorScatter has no qnn kernel"]
    assert graph_problems(QNN, {("GroupQueryAttention", "float16", 0)}) == ["GroupQueryAttention has no qnn kernel"]


def test_qnn_longrope_within_the_switch_like_hf_else_refused(checkpoints, tmp_path, monkeypatch):
    """longrope: HF keeps the short table while the sequence fits original_max_position_embeddings;
    a buffer within it is exact (the offset form folds to the short table), a longer one is refused
    in one line (docs/eps.md §7.5). Mutant: the refusal dropped at 128 slots folds to the long table."""
    from tiny_models import save_model
    from variants import FAMILY_VARIANTS

    with pytest.raises(InputError, match="cannot switch longrope to its long table past 32") as err:
        _build(checkpoints.get("phi3_longrope"), tmp_path / "x")
    assert "\n" not in str(err.value) and not (tmp_path / "x").exists()
    params = {**FAMILY_VARIANTS["phi3_longrope"][1], "original_max_position_embeddings": W}
    checkpoint = save_model(tmp_path / "ckpt", "phi3", **params)
    model = hf_model(checkpoint)
    assert _parity(_build(checkpoint, tmp_path / "p", context=W), model, n=20, steps=12) < 1e-4
    monkeypatch.setattr(static_decoder, "_check_longrope", lambda *_: None)
    assert _parity(_build(checkpoint, tmp_path / "m", context=2 * W), model, n=20, steps=12) > 1e-2


def test_qnn_unfoldable_shape_is_an_input_error():
    """A Shape whose output is not the tied lm_head's Concat -> Reshape is refused naming the ops."""
    from gqa_export.graph.builder import GraphBuilder

    b = GraphBuilder("g", static_decoder.OPSET)
    x = b.input("x", ir.DataType.FLOAT, [1, 2, 3])
    b.output(b.op("Cast", b.op("Shape", x), to=ir.DataType.FLOAT), "y", ir.DataType.FLOAT, [3])
    with pytest.raises(InputError, match="cannot fold a Shape whose Shape feeds Cast, not one Concat"):
        static_decoder._fold_shapes(b, [1, 2, 3])


def test_qnn_chat_counts_the_window_padding_when_dropping_turns(qnn):
    """A history whose prompt fits max_length unpadded but not padded to whole windows: the chat
    drops its oldest turn (the padded length is what the runtime holds) instead of failing."""
    from gqa_export.runtime.chat import Session
    from gqa_export.runtime.run import prompt_tokens

    package = qnn[1]
    session = Session(package, "cpu", 4, (None, None, None, None), chat=True, system=None)
    words, length = 1, 0
    while length <= CONTEXT - W:  # the history + "Hello" between three and four windows
        words += 1
        turn = [{"role": "user", "content": "word " * words}, {"role": "assistant", "content": "word " * words}]
        length = len(prompt_tokens(package, session.model, "Hello", [*turn * 2, {"role": "user", "content": "Hello"}]))
    assert length < CONTEXT
    session.history = turn * 2
    result = session.turn("Hello", None)
    assert result.note and "dropped the 1 oldest turn" in result.note


# int4 QDQ vs the MatMulNBits package of the same quantization (the CUDA record's: fp16
# activations, accuracy level 0), both on CPU with ORT's DQ+MatMul fusion at level 0 (its default 4
# quantizes activations: docs/eps.md §2.6). Measured 1.4e-3 of max |logit| (fp16 rounding of two
# graph forms); against HF's float logits int4 itself errs 0.69, so that is not the reference.
QDQ_BOUND = 1e-2


def _int4_error(package: Path, exports) -> float:
    import onnxruntime as ort
    from reference import OrtStepper

    options = ort.SessionOptions()
    options.add_session_config_entry("session.qdq_matmulnbits_accuracy_level", "0")
    n = 70  # two windows, the second padded
    tokens, got = run_static(package, _prompt(n, 5), 3, options)
    stepper = OrtStepper(exports.get("base", ep="cuda", precision="int4"))
    want = np.concatenate([stepper.step(tokens[:n]), *(stepper.step([t]) for t in tokens[n:])])
    return float(np.abs(got - want).max() / max(1.0, float(np.abs(want).max())))


def test_qnn_int4_graphs_compute_the_matmulnbits_weights(qnn_int4, exports):
    assert _int4_error(qnn_int4, exports) < QDQ_BOUND


def test_qnn_int4_scales_mutant_fails(qnn_int4, exports, tmp_path):
    """q/k/v block scales x1.5 in both graphs: measured 0.62."""
    from mutants import copy_package, edit_initializers, times

    package = copy_package(qnn_int4, tmp_path / "m")
    for graph in ("prefill.onnx", "decode.onnx"):
        assert edit_initializers(package, "*self_attn.[qkv]_proj.qdq_scales", times(1.5), graph)
    assert _int4_error(package, exports) > QDQ_BOUND


def test_qnn_pad_is_an_id_prompts_do_not_hold(tmp_path):
    """No pad_token_id in the checkpoint, a tokenizer shorter than vocab_size: the windowed package
    pads with the first unused row (not eos), so a prompt holding eos (a chat's earlier turn) runs
    through onnxruntime-genai like HF; the eos fallback is said in the notes and linted."""
    from mutants import copy_package
    from tiny_models import save_model, save_tokenizer

    from gqa_export.package.pad_id import choose_pad_id

    checkpoint = save_model(tmp_path / "c", pad_token_id=None, tokenizer=False)
    save_tokenizer(checkpoint, vocab_size=352)
    result = build(
        BuildOptions(str(checkpoint), tmp_path / "p", ep="qnn", precision="fp32", smoke=False, max_length=CONTEXT)
    )
    package = tmp_path / "p"
    config = json.loads((package / "genai_config.json").read_text())["model"]
    assert (config["pad_token_id"], config["eos_token_id"]) == (352, 1)
    manifest = json.loads((package / "manifest.json").read_text())
    assert manifest["model"]["pad"] == {"pad_token_id": 352, "rule": "unused-row"}
    assert not [n for n in result.notes if "pad_token_id" in n]
    prompts = [[*_prompt(10, 352), 1, *_prompt(12, 352, seed=1)], [*_prompt(70, 352), 1, 0, *_prompt(5, 352)]]
    model = hf_model(checkpoint)
    want = [hf_generate(model, prompt, NEW) for prompt in prompts]
    assert genai_greedy(package, prompts) == want
    assert not [f for f in inspect_package(package)["findings"] if f["id"] == "windowed-pad-id"]
    # no unused row: the model's pad token (5), said in the notes as a held id; the windowed cut
    # is named; with pad = eos (the mutant) `inspect` warns
    dims = replace(_dims(str(checkpoint)), vocab_size=352)
    choice = choose_pad_id(dims, checkpoint, lambda row: True, windowed=True)
    assert (choice.id, choice.rule) == (5, "tokenizer-pad") and "windowed inputs cut a prompt" in str(choice.note)
    mutant = copy_package(package, tmp_path / "m")
    data = json.loads((mutant / "genai_config.json").read_text())
    data["model"]["pad_token_id"] = 1
    (mutant / "genai_config.json").write_text(json.dumps(data))
    assert genai_greedy(mutant, prompts) != want  # eos as pad: the prompts are cut at their eos
    warnings = [f for f in inspect_package(mutant)["findings"] if f["id"] == "windowed-pad-id"]
    assert [f["severity"] for f in warnings] == ["warning"] and "pad_token_id 1 is an eos/bos id" in warnings[0][
        "message"
    ]
