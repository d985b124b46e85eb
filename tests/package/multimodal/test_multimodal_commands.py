"""Commands and refusals around full multimodal packages (docs/multimodal.md): the attention
modes and options a full package cannot have, `--text-only`, `run --image`, `inspect`,
`quantize`, the processor configuration read from the checkpoint. Fixtures: tests/conftest.py."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import onnx
import pytest
from gemma3_full import NEW, genai_generate
from multimodal_models import save_multimodal

from gqa_export.errors import InputError
from gqa_export.graph.io_options import IoOptions
from gqa_export.pipeline import BuildOptions, build
from gqa_export.progress import NullReporter
from gqa_export.quant.kv_cache import KvQuantOptions

pytest.importorskip("PIL")  # PNG test images


class Notes(NullReporter):
    """What a command says on stderr (`note:` lines), recorded."""

    def __init__(self) -> None:
        self.notes: list[str] = []

    def note(self, message: str) -> None:
        self.notes.append(message)


def test_full_build_says_it_skips_the_smoke_run(checkpoint, tmp_path):
    """#34 item 6: the skipped smoke run of a full package is said (stderr), not only in the notes."""
    said = Notes()
    result = build(BuildOptions(str(checkpoint), tmp_path / "full"), said)
    skipped = [n for n in result.notes if n.startswith("no smoke run: a multimodal package")]
    assert result.smoke is None and len(skipped) == 1 and skipped[0] in said.notes


# short names for the session fixtures of tests/conftest.py
@pytest.fixture(scope="module")
def checkpoint(gemma3_full_checkpoint: Path) -> Path:
    return gemma3_full_checkpoint


@pytest.fixture(scope="module")
def package(gemma3_full_package: Path) -> Path:
    return gemma3_full_package


@pytest.fixture(scope="module")
def images(png_images: dict[str, Path]) -> dict[str, Path]:
    return png_images


@pytest.mark.parametrize(
    ("options", "phrase"),
    [({"attention": "split"}, "--attention split cannot run a full multimodal package"), ({"attention": "gqa"}, "gqa")],
)
def test_refused_attention_modes(checkpoint, tmp_path, options, phrase):
    with pytest.raises(InputError, match=phrase):
        build(BuildOptions(str(checkpoint), tmp_path / "x", smoke=False, **options))


@pytest.mark.parametrize(
    ("options", "phrase"),
    [
        ({"io": IoOptions(no_lm_head=True)}, "--no-lm-head"),
        ({"io": IoOptions(inputs_embeds=True)}, "--inputs-embeds"),
        ({"kv": KvQuantOptions("int8")}, "--kv-cache"),
        ({"precision": "int4", "report": True}, "--report"),
    ],
)
def test_refused_options(checkpoint, tmp_path, options, phrase):
    with pytest.raises(InputError, match=f"{phrase}.*full multimodal package: add --text-only"):
        build(BuildOptions(str(checkpoint), tmp_path / "x", smoke=False, **options))


def test_text_only_keeps_the_decoder_package(checkpoint, tmp_path):
    """`build --text-only`: the text decoder alone (input_ids), as before this option existed."""
    from typer.testing import CliRunner

    from gqa_export.cli import app

    out = tmp_path / "text"
    args = ["build", str(checkpoint), "-o", str(out), "--attention", "split", "--text-only", "--no-smoke", "--json"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert not any("no effect" in note for note in json.loads(result.stdout)["notes"])  # it had one here
    assert not (out / "vision.onnx").exists() and not (out / "processor_config.json").exists()
    model = json.loads((out / "genai_config.json").read_text())["model"]
    assert model["type"] == "decoder-pipeline" and "vision" not in model


def test_checkpoint_genai_cannot_run_is_refused(tmp_path):
    """A tower pooling to 4 tokens: genai's gemma3 processor writes 256 placeholders per image."""
    checkpoint = save_multimodal(tmp_path / "g3", "gemma3")
    with pytest.raises(InputError, match=r"256 image tokens.*--text-only"):
        build(BuildOptions(str(checkpoint), tmp_path / "x", smoke=False))


def test_run_with_images_inserts_the_marker(package, images):
    """`gqa-export run PKG --image A --image B --prompt TEXT`: a prompt without <start_of_image>
    gets one per image in front, and the BOS in front of all where HF's tokenizer adds one."""
    from typer.testing import CliRunner

    from gqa_export.cli import app

    files = [images["resized"], images["exact"]]
    args = ["run", str(package), "--image", str(files[0]), "--image", str(files[1]), "--prompt", "Look at this"]
    result = CliRunner().invoke(app, [*args, "--max-new-tokens", str(NEW), "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    ids, _, tokens = genai_generate(package, "<|begin_of_text|><start_of_image><start_of_image>Look at this", files)
    assert ids[0, 0] == 0  # the BOS HF's processor writes (the fixture tokenizer adds it; genai's processor never)
    assert report["prompt_tokens"] == ids.shape[1] and report["new_tokens"] == len(tokens) == NEW
    # one generation loop with the text prompts (runtime/run._generate): the same --json fields,
    # prefill up to the first token, tokens/s over the tokens after it
    text = CliRunner().invoke(app, ["run", str(package), "--prompt", "Look", "--max-new-tokens", "2", "--json"])
    assert set(json.loads(text.stdout)) == set(report)
    assert report["prefill_ms"] > 0 and report["decode_tokens_per_s"] > 0


def test_run_with_images_explains_a_load_failure(package, images, tmp_path):
    """A package genai cannot load (vision.onnx not a graph): one line saying so, exit 2."""
    import shutil

    from typer.testing import CliRunner

    from gqa_export.cli import app

    broken = tmp_path / "broken"
    shutil.copytree(package, broken)
    (broken / "vision.onnx").write_bytes(b"not a graph")
    result = CliRunner().invoke(app, ["run", str(broken), "--image", str(images["exact"]), "--prompt", "x"])
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert result.exit_code == 2 and len(errors) == 1 and "cannot load" in errors[0], result.output


def test_run_with_a_file_that_is_no_image_is_one_line(package, tmp_path):
    """`run --image README.md` (#34 item 11): genai 0.18 hands it to libjpeg, which ends the process
    with a bare "Not a JPEG file: starts with 0x23 0x20" and exit 1, so this runs in a process of its
    own (a regression must fail this test, not end the test session). One line naming the file, exit 2."""
    import subprocess
    import sys

    readme = tmp_path / "README.md"
    readme.write_text("# notes\n\nnot a picture\n")
    command = [sys.executable, "-m", "gqa_export", "run", str(package), "--image", str(readme), "--prompt", "x"]
    env = {**__import__("os").environ, "PYTHONPATH": str(Path(__import__("gqa_export").__file__).parents[1])}
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env)
    errors = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 2 and done.stdout == "", (done.returncode, done.stdout, done.stderr)
    assert errors == [f"error: --image {readme}: not an image; onnxruntime-genai reads PNG and JPEG images only: "
                      "convert it (e.g. to PNG)"], done.stderr  # fmt: skip


def test_run_with_an_image_genai_cannot_decode_is_one_line(package, images, tmp_path):
    """A whole PNG whose compressed data is damaged: genai's decoder raises, and the line names the file."""
    from typer.testing import CliRunner

    from gqa_export.cli import app

    data = bytearray(images["exact"].read_bytes())
    data[data.find(b"IDAT") + 6] ^= 0xFF
    damaged = tmp_path / "damaged.png"
    damaged.write_bytes(bytes(data))
    result = CliRunner().invoke(app, ["run", str(package), "--image", str(damaged), "--prompt", "x"])
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert result.exit_code == 2 and len(errors) == 1 and "Traceback" not in result.output, result.output
    assert f"--image {damaged}: onnxruntime-genai cannot read it ([ImageDecoder]" in errors[0], errors[0]


@pytest.mark.parametrize(
    ("prompt", "text_only", "phrase"),
    [("A<start_of_image>B<start_of_image>", False, "2 '<start_of_image>' markers for 1"), ("x", True, "no vision")],
)
def test_run_with_images_refusals(package, checkpoint, images, tmp_path, prompt, text_only, phrase):
    from typer.testing import CliRunner

    from gqa_export.cli import app

    target = package
    if text_only:
        target = tmp_path / "text"
        build(BuildOptions(str(checkpoint), target, smoke=False, attention="bias", text_only=True))
    result = CliRunner().invoke(app, ["run", str(target), "--image", str(images["exact"]), "--prompt", prompt])
    assert result.exit_code == 2 and phrase in result.output


def test_inspect_lists_every_model(package):
    from typer.testing import CliRunner

    from gqa_export.cli import app

    result = CliRunner().invoke(app, ["inspect", str(package), "--json"])
    assert result.exit_code == 0, result.output
    graphs = {g["filename"]: g for g in json.loads(result.stdout)["summary"]["graphs"]}
    assert list(graphs) == ["model.onnx", "vision.onnx", "embedding.onnx"]
    assert graphs["vision.onnx"]["stage"] == "vision" and not graphs["vision.onnx"]["run_on_token_gen"]
    assert [o["shape"] for o in graphs["vision.onnx"]["outputs"]] == [["num_images", 256, 64]]


def test_quantize_keeps_the_vision_and_embedding_models(package, images, tmp_path):
    """`gqa-export quantize` of a full package: the decoder in MatMulNBits, vision.onnx and
    embedding.onnx copied as they are (float, as build writes them), and genai runs it with an image."""
    from gqa_export.quant.quantize import QuantOptions
    from gqa_export.requantize import requantize

    out = tmp_path / "int4"
    said = Notes()
    result = requantize(package, out, "int4", QuantOptions(), smoke=True, reporter=said)
    assert result.smoke is None and any("no smoke run" in note for note in result.notes)
    assert [n for n in said.notes if "no smoke run" in n] == [n for n in result.notes if "no smoke run" in n]
    for name in ("vision.onnx", "vision.onnx.data", "embedding.onnx", "embedding.onnx.data"):
        assert (out / name).read_bytes() == (package / name).read_bytes()
    ops = {n.op_type for n in onnx.load(str(out / "model.onnx"), load_external_data=False).graph.node}
    assert "MatMulNBits" in ops
    _, _, tokens = genai_generate(out, "Look<start_of_image> at this", [images["exact"]])
    assert len(tokens) == NEW


def test_processor_config_reads_the_checkpoint_preprocessor(checkpoint, tmp_path):
    """mean, std, rescale factor and resampling from preprocessor_config.json (PIL's 3: bicubic)."""
    import shutil

    source = tmp_path / "ckpt"
    shutil.copytree(checkpoint, source)
    pre = {"image_mean": [0.4, 0.5, 0.6], "image_std": [0.2, 0.3, 0.4], "rescale_factor": 0.5, "resample": 3}
    (source / "preprocessor_config.json").write_text(json.dumps(pre))
    build(BuildOptions(str(source), tmp_path / "pkg", smoke=False))
    config = json.loads((tmp_path / "pkg" / "processor_config.json").read_text())
    attrs = {t["operation"]["type"]: t["operation"]["attrs"] for t in config["processor"]["transforms"]}
    assert attrs["Resize"] == {"height": 64, "width": 64, "interpolation": "CUBIC", "keep_aspect_ratio": 0}
    assert attrs["Rescale"] == {"rescale_factor": 0.5}
    assert attrs["Normalize"] == {"mean": pre["image_mean"], "std": pre["image_std"]}


def _vision_features(package: Path) -> np.ndarray:
    import onnxruntime as ort

    pixels = np.random.default_rng(0).uniform(-1, 1, (1, 3, 64, 64)).astype(np.float32)
    session = ort.InferenceSession(str(package / "vision.onnx"), providers=["CPUExecutionProvider"])
    return session.run(None, {"pixel_values": pixels})[0]


def _int8_error(checkpoint: Path, package: Path, out: Path) -> float:
    build(BuildOptions(str(checkpoint), out, smoke=False, encoder_precision="int8"))
    reference = _vision_features(package)
    return float(np.linalg.norm(_vision_features(out) - reference) / np.linalg.norm(reference))


def test_int8_encoder_within_its_bound(package, checkpoint, images, tmp_path):
    """--encoder-precision int8 (docs/multimodal.md §17): the vision linears in 8-bit MatMulNBits,
    the embedding float; features within 2 % (relative, measured 0.75 %) of the float package's and
    the same greedy tokens with an image; refused with --text-only."""
    out = tmp_path / "int8"
    assert _int8_error(checkpoint, package, out) < 2e-2
    nodes = onnx.load(str(out / "vision.onnx"), load_external_data=False).graph.node
    bits = {a.i for n in nodes if n.op_type == "MatMulNBits" for a in n.attribute if a.name == "bits"}
    assert bits == {8} and (out / "embedding.onnx.data").read_bytes() == (package / "embedding.onnx.data").read_bytes()
    assert json.loads((out / "manifest.json").read_text())["options"]["encoder_precision"] == "int8"
    prompt = "Look<start_of_image> at this"
    assert genai_generate(out, prompt, [images["exact"]])[2] == genai_generate(package, prompt, [images["exact"]])[2]
    with pytest.raises(InputError, match="--encoder-precision int8 is for a full multimodal package"):
        build(BuildOptions(str(checkpoint), tmp_path / "t", smoke=False, text_only=True, encoder_precision="int8"))


def test_mutant_int4_encoder_breaks_the_bound(package, checkpoint, tmp_path, monkeypatch):
    """The same plan with 4-bit weights leaves the 2 % bound: it is one 8-bit weights keep."""
    import dataclasses

    from gqa_export.plan import model_phase

    plan = model_phase.encoder_plan

    def four_bits(precision, ep, dtype):
        found = plan(precision, ep, dtype)
        return found and dataclasses.replace(found, nbits=dataclasses.replace(found.nbits, bits=4))

    monkeypatch.setattr(model_phase, "encoder_plan", four_bits)
    assert _int8_error(checkpoint, package, tmp_path / "int4") > 2e-2


def test_processor_ignores_a_list_of_prompts(package, images):
    """genai 0.18's Gemma processor reads no list of prompts (docs/multimodal.md §18): with images,
    a list gives the ids of an empty prompt, one row; no batch of image prompts can run."""
    import onnxruntime_genai as og

    processor = og.Model(str(package)).create_multimodal_processor()
    files = [str(images["exact"]), str(images["resized"])]
    prompts = ["A<start_of_image> one", "B<start_of_image> two"]
    listed = processor(prompts, images=og.Images.open(*files))["input_ids"].as_numpy()
    empty = processor("", images=og.Images.open(*files))["input_ids"].as_numpy()
    assert listed.shape[0] == 1 and np.array_equal(listed, empty)


@pytest.mark.parametrize("ep", ["dml", "openvino", "trt-rtx", "qnn"])
def test_int8_encoder_refused_where_the_ep_has_no_8_bit_kernels(checkpoint, tmp_path, ep):
    """An EP without 8-bit MatMulNBits refuses --encoder-precision int8 in one line naming that
    option and the EP, not `--precision int8` (which the build was not given)."""
    with pytest.raises(InputError, match=f"--encoder-precision int8 cannot run with --ep {ep}") as err:
        options = BuildOptions(str(checkpoint), tmp_path / "p", ep=ep, precision="int4", encoder_precision="int8")
        build(replace(options, smoke=False))
    assert "--precision int8" not in str(err.value) and "\n" not in str(err.value)
    assert not (tmp_path / "p").exists()
