"""Full Qwen multimodal packages from `gqa-export build` (docs/multimodal.md §11.4): tiny
Qwen2.5-VL, deepstack-free Qwen3-VL, Qwen3.5 (DeltaNet state), Qwen3.5-MoE, Qwen2-VL (LayerNorm /
QuickGELU tower, run as genai's qwen2_5_vl) and Qwen3-VL-MoE (experts under a deepstack tower, run as
qwen3_vl) checkpoints (tests/qwen_vl_package.py KINDS) through onnxruntime-genai's MultiModalProcessor and greedy
generation against HF generate with the same images; the M-RoPE and vision mutants; what is
refused; `run --image`; an int4 decoder with an image; the tower and expert mutants of Qwen2-VL and
Qwen3-VL-MoE and the hub's transposed expert layout. Qwen2.5-VL's pixels, window mutant and
bias mode are tests/package/multimodal/test_qwen_vl_package.py's."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from qwen_vl_package import IMAGE, KINDS, MARKER, VIDEO, VISION_START, assemble, genai_greedy, hf_greedy, png
from qwen_vl_package import save_qwen_vl as save
from reference import assert_varied

from gqa_export.pipeline import BuildOptions, build

pytest.importorskip("PIL")  # PNG test images and HF's image processor
NEW = 20
# per patch size: an image that needs no resize (sides multiples of patch x merge) and one that does
# and a larger one whose 8 x 8 merged grid spreads the h and w positions (the mutants')
SIZES = {
    14: {"fits": (56, 84), "resized": (120, 50), "large": (224, 224)},
    16: {"fits": (64, 96), "resized": (120, 50), "large": (256, 256)},
}
CASES = {
    "fits": ("hi " + MARKER + " tell", ["fits"]),
    "resized": ("look " + MARKER + " ok", ["resized"]),
    "two": ("x " + MARKER + " and " + MARKER + " y", ["fits", "resized"]),
    "text": ("just text", []),
}
LARGE = {"large": ("see " + MARKER + " now", ["large"])}


class _Kinds:
    """Each kind's checkpoint, package, images and HF model, made once per module."""

    def __init__(self, root: Path) -> None:
        self.root, self.made = root, {}

    def get(self, kind: str) -> dict[str, Any]:
        if kind not in self.made:
            import transformers as tf

            folder = self.root / kind
            checkpoint = save(folder / "checkpoint", kind)
            patch = KINDS[kind][3]["patch_size"]
            images = {n: png(folder / f"{n}.png", w, h, s) for s, (n, (w, h)) in enumerate(SIZES[patch].items())}
            hf = getattr(tf, KINDS[kind][1]).from_pretrained(checkpoint).eval()
            package = assemble(checkpoint, folder / "package")
            self.made[kind] = dict(checkpoint=checkpoint, package=package, images=images, hf=hf, pre=KINDS[kind][4])
        return self.made[kind]


@pytest.fixture(scope="module")
def kinds(tmp_path_factory: pytest.TempPathFactory) -> _Kinds:
    return _Kinds(tmp_path_factory.mktemp("qwen_full"))


def _compare(made: dict[str, Any], case: str, package: Path | None = None) -> tuple[float, list[int], list[int]]:
    """(max |prompt logits - HF's|, genai's greedy tokens, HF generate's) for one CASES prompt."""
    prompt, names = {**CASES, **LARGE}[case]
    paths = [made["images"][n] for n in names]
    ids, logits, tokens = genai_greedy(package or made["package"], prompt, paths, NEW)
    assert int((ids == VISION_START).sum()) == len(paths)
    ref_logits, ref_tokens = hf_greedy(made["hf"], ids, paths, NEW, made["pre"])
    return float(np.abs(logits - ref_logits).max()), tokens, ref_tokens


FULL = ["qwen3_vl", "qwen3_5", "qwen3_5_moe", "qwen2_vl", "qwen3_vl_moe"]
# the genai type of each kind's package: genai has no qwen2_vl nor qwen3_vl_moe type (§11.6)
GENAI_TYPE = {"qwen2_vl": "qwen2_5_vl", "qwen3_vl_moe": "qwen3_vl"}


@pytest.mark.parametrize("kind", ["qwen2_5_vl", *FULL])
def test_package_files_and_config(kinds, kind):
    """vision / embedding sections, image_grid_thw named (genai's default name is image_sizes),
    patch keys, the ids genai's Qwen processor reads; the decoder takes inputs_embeds and 3-D
    position_ids, no input_ids (no image-run mask), in one GQA graph."""
    package = kinds.get(kind)["package"]
    assert {"vision.onnx.data", "embedding.onnx.data", "processor_config.json"} <= {p.name for p in package.iterdir()}
    model = json.loads((package / "genai_config.json").read_text())["model"]
    assert model["type"] == GENAI_TYPE.get(kind, kind)
    assert (model["image_token_id"], model["video_token_id"], model["vision_start_token_id"]) == (
        IMAGE, VIDEO, VISION_START
    )  # fmt: skip
    vision = model["vision"]
    assert vision["inputs"] == {"pixel_values": "pixel_values", "image_grid_thw": "image_grid_thw"}
    assert (vision["patch_size"], vision["spatial_merge_size"]) == (KINDS[kind][3]["patch_size"], 2)
    graph = onnx.load(str(package / "model.onnx"), load_external_data=False).graph
    shapes = {i.name: [d.dim_value or d.dim_param for d in i.type.tensor_type.shape.dim] for i in graph.input}
    assert shapes["position_ids"] == [3, "batch_size", "sequence_length"] and "input_ids" not in shapes
    assert "inputs_embeds" in shapes and "input_ids" not in model["decoder"]["inputs"]
    assert json.loads((package / "manifest.json").read_text())["options"]["attention"] == "gqa"
    from typer.testing import CliRunner

    from gqa_export.cli import app

    report = json.loads(CliRunner().invoke(app, ["inspect", str(package), "--json"]).stdout)
    assert report["findings"] == [] and [g["filename"] for g in report["summary"]["graphs"]] == [
        "model.onnx", "vision.onnx", "embedding.onnx"
    ]  # fmt: skip


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("kind", FULL)
def test_genai_greedy_equals_hf_generate(kinds, kind, case):
    """genai's processor + 20 greedy tokens = HF generate on the same ids and PNGs, prompt logits
    within 1e-4: an image that needs no resize, one that does, two images, text only."""
    error, tokens, ref_tokens = _compare(kinds.get(kind), case)
    assert error < 1e-4, error  # measured <= 2.3e-5 (Qwen3.5's DeltaNet layers), Qwen2-VL 1.7e-5, Qwen3-VL-MoE 9.6e-6
    assert_varied([ref_tokens])
    assert tokens == ref_tokens


def test_generated_image_pad_embeds_as_a_token(kinds):
    """Qwen3.5's text-only greedy generates the image-pad id (pinned for this seed): genai's 0
    feature rows after the prompt leave it embedded from the table, as HF embeds it."""
    _, tokens, ref_tokens = _compare(kinds.get("qwen3_5"), "text")
    assert IMAGE in ref_tokens and tokens == ref_tokens


def _rows_as_t(original: Any) -> Any:
    return lambda rope: np.zeros_like(original(rope))


@pytest.mark.parametrize("kind", ["qwen2_5_vl", "qwen3_5"])
def test_mutant_one_d_positions_fail(kinds, kind, tmp_path, monkeypatch):
    """M-RoPE off (every frequency reads the t row: 1-D positions): the image prompt's logits
    leave the bound."""
    from gqa_export.graph import mrope

    monkeypatch.setattr(mrope, "mrope_rows", _rows_as_t(mrope.mrope_rows))
    made = kinds.get(kind)
    error, _, _ = _compare(made, "large", assemble(made["checkpoint"], tmp_path / "mutant"))
    assert error > 1e-3, error


@pytest.mark.parametrize("kind", ["qwen2_5_vl", "qwen3_5"])
def test_mutant_position_table_or_window_fails(kinds, kind, tmp_path):
    """The vision tower's windows of 2 x 2 merge blocks (Qwen2.5-VL's are 3 x 3), or its learned
    position table x1.5 (Qwen3.5): the image prompt's logits leave the bound."""
    made = kinds.get(kind)
    mutant = assemble(made["checkpoint"], tmp_path / "mutant", **({"window_size": 56} if kind == "qwen2_5_vl" else {}))
    if kind == "qwen3_5":
        _edit_initializer(mutant / "vision.onnx", "pos_embed.weight", lambda t: t * np.float32(1.5))
    error, _, _ = _compare(made, "two", mutant)
    assert error > 1e-3, error


def _edit_initializer(graph: Path, suffix: str, change: Any) -> None:
    model = onnx.load(str(graph))
    tensor = next(t for t in model.graph.initializer if t.name.endswith(suffix))
    tensor.CopyFrom(onnx.numpy_helper.from_array(change(onnx.numpy_helper.to_array(tensor)), tensor.name))
    onnx.save(model, str(graph), save_as_external_data=True, location=graph.name + ".data")


@pytest.mark.parametrize("kind", ["qwen2_5_vl", "qwen3_5", "qwen3_vl_moe"])
def test_int4_decoder_runs_with_an_image(kinds, kind, tmp_path):
    """An int4 build (the decoder in MatMulNBits, Qwen3-VL-MoE's experts in QMoE, the towers float)
    generates with an image."""
    made = kinds.get(kind)
    out = tmp_path / "int4"
    build(BuildOptions(str(made["checkpoint"]), out, smoke=False, precision="int4"))
    ops = {n.op_type for n in onnx.load(str(out / "model.onnx"), load_external_data=False).graph.node}
    assert "MatMulNBits" in ops and ("QMoE" in ops) is (kind == "qwen3_vl_moe")
    prompt, names = CASES["two"]
    _, logits, tokens = genai_greedy(out, prompt, [made["images"][n] for n in names], NEW)
    assert len(tokens) == NEW and np.isfinite(logits).all()


def test_run_with_images_inserts_the_qwen_marker(kinds):
    """`gqa-export run PKG --image A --prompt TEXT`: the Qwen marker is put in front of the prompt."""
    from typer.testing import CliRunner

    from gqa_export.cli import app

    made = kinds.get("qwen3_5")
    package, image = made["package"], made["images"]["fits"]
    args = ["run", str(package), "--image", image, "--prompt", " tell", "--max-new-tokens", str(NEW), "--json"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    ids, _, _ = genai_greedy(package, "<|begin_of_text|>" + MARKER + " tell", [image], 1)
    assert int((ids == IMAGE).sum()) == 6  # 64 x 96 pixels: 4 x 6 patches of 16, merged 2 x 2
    assert report["prompt_tokens"] == ids.shape[1] and report["new_tokens"] >= 1


@pytest.mark.parametrize(
    ("kind", "change", "flags", "phrase"),
    [
        ("qwen3_vl", "deepstack indexes without mergers", [], "deepstack mergers"),
        ("qwen2_5_vl", {}, ["--attention", "split"], "--attention split cannot run a full multimodal package"),
        ("qwen3_5", {}, ["--attention", "bias"], "state in the GQA graph only"),
        ("qwen2_5_vl", "no preprocessor", [], "no preprocessor_config.json"),
        ("qwen3_5", "contiguous sections", [], "interleaves its M-RoPE sections"),
    ],
)
def test_refused_in_one_line(tmp_path, kind, change, flags, phrase):
    """deepstack_visual_indexes naming blocks without a merger, a split pipeline (genai's multimodal path
    runs one decoder), bias for a hybrid decoder, no image mean/std, a config whose M-RoPE
    interleaving differs from the class's: exit 2, one line."""
    from typer.testing import CliRunner

    from gqa_export.cli import app

    checkpoint = save(tmp_path / "ckpt", kind, **(change if isinstance(change, dict) else {}))
    if change == "no preprocessor":
        (checkpoint / "preprocessor_config.json").unlink()
    if change == "deepstack indexes without mergers":
        config = json.loads((checkpoint / "config.json").read_text())
        config["vision_config"]["deepstack_visual_indexes"] = [0, 1]
        (checkpoint / "config.json").write_text(json.dumps(config))
    if change == "contiguous sections":  # the class interleaves whatever the config says
        config = json.loads((checkpoint / "config.json").read_text())
        config["text_config"]["rope_parameters"]["mrope_interleaved"] = False
        (checkpoint / "config.json").write_text(json.dumps(config))
    result = CliRunner().invoke(app, ["build", str(checkpoint), "-o", str(tmp_path / "p"), *flags])
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert result.exit_code == 2 and len(errors) == 1 and phrase in errors[0], result.output
    assert not (tmp_path / "p").exists()


def test_text_only_keeps_the_decoder_package(tmp_path):
    """--text-only: the decoder alone under the text type, as before; also for a deepstack Qwen3-VL."""
    checkpoint = save(tmp_path / "ckpt", "qwen3_5")
    deepstack = save(tmp_path / "ds", "qwen3_vl", deepstack_visual_indexes=[0])
    build(BuildOptions(str(deepstack), tmp_path / "ds_text", smoke=False, text_only=True))
    text = json.loads((tmp_path / "ds_text" / "genai_config.json").read_text())["model"]
    assert "vision" not in text and text["decoder"]["hidden_size"] == 64
    build(BuildOptions(str(checkpoint), tmp_path / "text", smoke=False, text_only=True))
    model = json.loads((tmp_path / "text" / "genai_config.json").read_text())["model"]
    assert model["type"] == "qwen3_5_text" and "vision" not in model


DEEPSTACK = "qwen3_vl_deepstack"


def test_deepstack_package_equals_hf(kinds):
    """Qwen3-VL with deepstack (§11.5): genai_config's decoder.hidden_size is 64 x (1 + 2), the
    vision output and inputs_embeds that wide; genai greedy (20 tokens) = HF generate and prompt
    logits within 1e-4 for one image, two images of different grids, and text only."""
    made = kinds.get(DEEPSTACK)
    package = made["package"]
    model = json.loads((package / "genai_config.json").read_text())["model"]
    assert model["type"] == "qwen3_vl" and model["decoder"]["hidden_size"] == 192

    def width(name: str, io: str) -> Any:
        graph = onnx.load(str(package / name), load_external_data=False).graph
        return {v.name: v.type.tensor_type.shape.dim[-1].dim_value for v in getattr(graph, io)}

    assert width("vision.onnx", "output")["image_features"] == 192
    assert width("embedding.onnx", "output")["inputs_embeds"] == 192 == width("model.onnx", "input")["inputs_embeds"]
    for case in ("fits", "two", "text"):
        error, tokens, ref_tokens = _compare(made, case)
        assert error < 1e-4, (case, error)  # measured <= 1.1e-5
        assert_varied([ref_tokens])
        assert tokens == ref_tokens, case


@pytest.mark.parametrize("kind", [DEEPSTACK, "qwen3_vl_moe"])
def test_deepstack_decode_steps_equal_hf(kinds, kind):
    """Decode-step logits (6 steps, where the widened inputs_embeds carry zeros past the prompt)
    within 1e-4 of HF generate's, after an image prompt and after a 1-token prompt (measured
    1.4e-5 / 4.3e-6; EOS left out: genai's min_length masks it); Qwen3-VL-MoE's experts too."""
    import onnxruntime_genai as og
    import torch
    from qwen_vl_package import genai_inputs, hf_pixels

    made = kinds.get(kind)
    for prompt, names in (CASES["fits"], ("q", [])):
        model, inputs = genai_inputs(made["package"], prompt, [made["images"][n] for n in names])
        ids = np.asarray(inputs["input_ids"].as_numpy()).astype(np.int64).reshape(1, -1)
        params = og.GeneratorParams(model)
        params.set_search_options(do_sample=False, max_length=ids.shape[1] + 6, min_length=ids.shape[1] + 6)
        generator = og.Generator(model, params)
        generator.set_inputs(inputs)
        steps = []
        while not generator.is_done():
            generator.generate_next_token()
            steps.append(np.delete(np.asarray(generator.get_output("logits"))[0, -1], 1))
        kwargs = {}
        if names:
            pixels = hf_pixels([made["images"][n] for n in names], made["pre"])
            kwargs = {k: torch.from_numpy(v) for k, v in pixels.items()}
            kwargs["mm_token_type_ids"] = torch.from_numpy((ids == IMAGE).astype(np.int64))
        tokens = torch.from_numpy(ids)
        with torch.no_grad():
            out = made["hf"].generate(input_ids=tokens, attention_mask=torch.ones_like(tokens), max_new_tokens=6,
                                      min_new_tokens=6, do_sample=False, output_logits=True,
                                      return_dict_in_generate=True, **kwargs)  # fmt: skip
        errors = [np.abs(a - np.delete(b[0].numpy(), 1)).max() for a, b in zip(steps, out.logits, strict=True)]
        assert max(errors) < 1e-4, errors


@pytest.mark.parametrize("mutant", ["dropped", "one_layer_late"])
def test_mutant_deepstack_add_fails(kinds, tmp_path, monkeypatch, mutant):
    """The decoder's deepstack adds dropped, or each added one layer late: the image prompt's
    logits leave the bound (measured 1.95 / 1.44)."""
    from gqa_export.graph import decoder

    add = decoder.add_layer_features
    wrong = {"dropped": lambda b, h, f, i: h, "one_layer_late": lambda b, h, f, i: add(b, h, f, i - 1) if i else h}
    monkeypatch.setattr(decoder, "add_layer_features", wrong[mutant])
    made = kinds.get(DEEPSTACK)
    error, _, _ = _compare(made, "fits", assemble(made["checkpoint"], tmp_path / "mutant"))
    assert error > 1e-3, error


@pytest.mark.parametrize("kind", ["qwen2_vl", "qwen3_vl_moe"])
def test_bias_mode_equals_hf(kinds, kind, tmp_path):
    """The one standard-Attention graph (`--attention bias`) of the new kinds: two images, prompt
    logits within 1e-4 and genai greedy = HF generate (auto is gqa, tested above; split is refused)."""
    made = kinds.get(kind)
    error, tokens, ref_tokens = _compare(made, "two", assemble(made["checkpoint"], tmp_path / "bias", "bias"))
    assert error < 1e-4, error
    assert tokens == ref_tokens


def _tower_norms_as_rms(monkeypatch: pytest.MonkeyPatch) -> None:
    from gqa_export.graph.encoders import qwen_vision

    has = qwen_vision._Tower.has
    norm_biases = ("norm1.bias", "norm2.bias", "ln_q.bias")
    monkeypatch.setattr(qwen_vision._Tower, "has", lambda self, n: not n.endswith(norm_biases) and has(self, n))


def _router_not_renormalized(monkeypatch: pytest.MonkeyPatch) -> None:
    from dataclasses import replace

    from gqa_export import arch

    spec = arch.SPECS["qwen3_vl_moe"]
    monkeypatch.setitem(arch.SPECS, spec.name, replace(spec, moe=replace(spec.moe, normalize=False)))


@pytest.mark.parametrize(
    ("kind", "mutant"),
    [
        ("qwen2_vl", "tower-norms-as-rmsnorm"),
        ("qwen2_vl", "tower-quick-gelu-as-gelu"),
        ("qwen3_vl_moe", "experts-rolled"),
        ("qwen3_vl_moe", "router-not-renormalized"),
    ],
)
def test_mutant_qwen2_vl_tower_or_qwen3_vl_moe_experts_fail(kinds, tmp_path, monkeypatch, kind, mutant):
    """Qwen2-VL's tower LayerNorms built as RMSNorms (their biases ignored) or its QuickGELU as exact
    GELU; Qwen3-VL-MoE's experts rolled by one (each chosen expert computes with another's weights) or
    its router's top k left unnormalized (Qwen3-MoE without norm_topk_prob): the image prompt's logits
    leave the bound (measured 4.3, 0.029, 5.1, 1.6)."""
    from mutants import edit_initializers

    made = kinds.get(kind)
    if mutant == "tower-norms-as-rmsnorm":
        _tower_norms_as_rms(monkeypatch)
    if mutant == "router-not-renormalized":
        _router_not_renormalized(monkeypatch)
    package = assemble(made["checkpoint"], tmp_path / "mutant", **({"hidden_act": "gelu"} if "gelu" in mutant else {}))
    if mutant == "experts-rolled":
        assert edit_initializers(package, "*.moe.fc[12]", lambda v: np.roll(v, 1, axis=0))
    error, _, _ = _compare(made, "fits", package)
    assert error > 1e-3, error


def test_hub_expert_layout_builds_the_same_decoder(kinds, tmp_path):
    """Qwen3-VL-MoE's experts as the hub stores them (gate_up [E, H, 2I] halves, down [E, I, H];
    transformers 5.x saves them untransposed): the same decoder, byte for byte."""
    import shutil

    from multimodal_models import transpose_experts

    made = kinds.get("qwen3_vl_moe")
    hub = tmp_path / "hub"
    shutil.copytree(made["checkpoint"], hub)
    transpose_experts(hub)
    build(BuildOptions(str(hub), tmp_path / "p", smoke=False))
    for name in ("model.onnx", "model.onnx.data"):
        assert (tmp_path / "p" / name).read_bytes() == (made["package"] / name).read_bytes(), name


def test_square_gate_up_beside_transposed_down_is_refused():
    """gate_up [E, H, H] (2I = H) cannot say whether it is transposed; with a transposed down_proj
    it is refused in one line (transformers would read it untransposed, the hub's transposed)."""
    from types import SimpleNamespace

    from gqa_export.errors import InputError
    from gqa_export.graph.experts import ExpertLayout, fused_or_transposed

    shapes = {"e.gate_up_proj": (4, 64, 64), "e.down_proj": (4, 32, 64)}
    store = SimpleNamespace(info=lambda name: SimpleNamespace(shape=shapes[name]))
    with pytest.raises(InputError, match="cannot be told"):
        fused_or_transposed(store, ExpertLayout(4, 32, 64, fused=("e.gate_up_proj", "e.down_proj")), "layer 0")  # type: ignore[arg-type]
