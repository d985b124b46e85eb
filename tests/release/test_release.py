"""`gqa-export release`: four variants from one fetch, all or nothing, a model card, verify, and
identical bytes on a rerun."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import onnx
import pytest
import yaml
from typer.testing import CliRunner

from gqa_export.cli import app
from gqa_export.errors import InputError
from gqa_export.quant.quantize import QuantOptions
from gqa_export.release import folder_name, load_spec
from gqa_export.release.card import front_matter

DATA = Path(__file__).resolve().parents[1] / "data"
TRAINED = DATA / "tiny-trained"
EVAL_TEXT = DATA / "tiny-text" / "eval.txt"
FOUR = [
    {"ep": "cpu", "precision": "fp32"},
    {"ep": "cpu", "precision": "int4", "gate": {"max_ppl_increase": 50}},
    {"ep": "cuda", "precision": "fp16"},
    {"ep": "cuda", "precision": "int4"},
]
FOLDERS = [
    "cpu_and_mobile/cpu-fp32",
    "cpu_and_mobile/cpu-int4-rtn-block-32-acc-level-4",
    "cuda/cuda-fp16",
    "cuda/cuda-int4-rtn-block-32",
]
runner = CliRunner()


def invoke(*args: object, env: dict[str, str] | None = None):
    return runner.invoke(app, [str(a) for a in args], env=env)


def write_spec(folder: Path, **fields: object) -> Path:
    spec = {"source": str(TRAINED), "eval": {"text": str(EVAL_TEXT), "window": 128}, "variants": FOUR, **fields}
    path = folder / "release.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def leftovers(parent: Path) -> list[str]:
    return [p.name for p in parent.iterdir() if ".partial-" in p.name or ".old-" in p.name]


@pytest.fixture(scope="module")
def released(tmp_path_factory) -> tuple[Path, dict, Path]:
    folder = tmp_path_factory.mktemp("release")
    spec = write_spec(folder)
    result = invoke("release", spec, "-o", folder / "out", "--json", env={"SOURCE_DATE_EPOCH": "1700000000"})
    assert result.exit_code == 0, result.output
    return folder / "out", json.loads(result.stdout), spec


def test_layout_and_summary(released):
    root, summary, _ = released
    assert [v["path"] for v in summary["variants"]] == FOLDERS
    for variant, folder in zip(summary["variants"], FOLDERS, strict=True):
        assert (root / folder / "model.onnx").is_file() and (root / folder / "manifest.json").is_file()
        # every package generated at build time (the CUDA ones on CPU: fp16 has CPU kernels)
        assert variant["smoke"] is not None and variant["smoke"]["ep"] == "cpu"
    assert sorted(p.name for p in root.iterdir()) == ["README.md", "cpu_and_mobile", "cuda", "release.json"]


def test_release_json_lists_every_file(released):
    root, _, _ = released
    document = json.loads((root / "release.json").read_text())
    assert document["license"] == "apache-2.0" and document["source"]["id"] == "tiny-trained"
    listed = set(document["files"]) | {f"{v['path']}/{n}" for v in document["variants"] for n in v["files"]}
    on_disk = {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()} - {"release.json"}
    assert listed == on_disk
    int4 = document["variants"][1]
    assert int4["gate"] == {"max_ppl_increase_pct": 50.0, "against": "cpu_and_mobile/cpu-fp32"}
    assert int4["eval"]["against"] == "cpu_and_mobile/cpu-fp32"
    assert document["eval"]["tokens"] > 1000 and document["eval"]["window"] == 128


def test_model_card(released):
    root, _, _ = released
    matter = front_matter(root / "README.md")
    assert matter["license"] == "apache-2.0" and matter["library_name"] == "onnxruntime-genai"
    assert matter["pipeline_tag"] == "text-generation" and "base_model" not in matter  # a local source
    assert {"onnx", "onnxruntime-genai", "int4", "fp16", "cpu", "cuda"} <= set(matter["tags"])
    card = (root / "README.md").read_text()
    for folder in FOLDERS:
        assert f"| `{folder}` |" in card


def test_quantized_perplexity_is_measured_against_float(released):
    _, summary, _ = released
    fp32, int4, fp16, cuda_int4 = (v["eval"] for v in summary["variants"])
    assert fp32["perplexity"] < 50  # trained: far from the vocabulary size
    assert abs(fp16["perplexity"] / fp32["perplexity"] - 1) < 0.01
    assert int4["perplexity_increase_pct"] > 0 and cuda_int4["against"] == "cuda/cuda-fp16"


def test_verify_passes_then_one_byte_fails(released, tmp_path):
    root, _, _ = released
    assert invoke("verify", root).exit_code == 0
    copy = tmp_path / "copy"
    shutil.copytree(root, copy)
    data = copy / FOLDERS[3] / "model.onnx.data"
    raw = bytearray(data.read_bytes())
    raw[len(raw) // 2] ^= 0x10
    data.write_bytes(bytes(raw))
    result = invoke("verify", copy)
    assert result.exit_code == 1 and f"{FOLDERS[3]}/model.onnx.data: changed" in result.output
    # one JSON shape for packages and releases: a variant's problem is that package's, once
    report = json.loads(invoke("verify", copy, "--json").stdout)
    variant = next(p for p in report["packages"] if p["path"] == FOLDERS[3])
    assert any(p.startswith(f"{FOLDERS[3]}/model.onnx.data: changed") for p in variant["problems"]), report
    assert report["problems"] == [] and not report["ok"]
    assert all(p["problems"] == [] for p in report["packages"] if p["path"] != FOLDERS[3])


def test_release_json_and_card_are_covered(released, tmp_path):
    root, _, _ = released
    copy = tmp_path / "copy"
    shutil.copytree(root, copy)
    card = copy / "README.md"
    card.write_text(card.read_text().replace("apache-2.0", "mit"))
    result = invoke("verify", copy)
    assert result.exit_code == 1 and "README.md: changed" in result.output
    report = json.loads(invoke("verify", copy, "--json").stdout)  # the root's own file: top level
    assert any(p.startswith("README.md: changed") for p in report["problems"])
    assert all(p["problems"] == [] for p in report["packages"])
    shutil.copyfile(root / "README.md", card)
    document = json.loads((copy / "release.json").read_text())
    document["license"] = "mit"
    (copy / "release.json").write_text(json.dumps(document, indent=2) + "\n")
    result = invoke("verify", copy)
    assert result.exit_code == 1 and "release.json" in result.output


def test_hub_download_extras_are_ignored(released, tmp_path):
    root, _, _ = released
    copy = tmp_path / "copy"
    shutil.copytree(root, copy)
    (copy / ".gitattributes").write_text("*.data filter=lfs\n")
    (copy / ".cache" / "huggingface").mkdir(parents=True)
    (copy / ".cache" / "huggingface" / "x.metadata").write_text("x")
    assert invoke("verify", copy).exit_code == 0
    (copy / "cuda" / "stray.bin").write_bytes(b"x")
    result = invoke("verify", copy)
    assert result.exit_code == 1 and "cuda/stray.bin: not listed" in result.output


# a rerun's identical bytes: tests/release/test_matrix.py compares two independent releases of one spec byte for
# byte (one machine in this process, the workflow's parts in subprocesses with other hash seeds and folders), which
# a second one-machine release in this process would only repeat


def test_a_tripped_gate_publishes_nothing_and_every_failing_gate_is_named(tmp_path):
    block16 = {"ep": "cpu", "precision": "int4", "block_size": 16, "gate": {"max_ppl_increase": 0.00001}}
    variants = [FOUR[0], {**FOUR[1], "gate": {"max_ppl_increase": 0.0001}}, block16]
    # the text's first 768 tokens (six windows) trip both gates (block 32: +0.18 %, measured; at 384
    # tokens it did not), half the time of the whole text
    evaluation = {"text": str(EVAL_TEXT), "window": 128, "max_tokens": 768}
    spec = write_spec(tmp_path, variants=variants, license="apache-2.0", eval=evaluation)
    result = invoke("release", spec, "-o", tmp_path / "out")
    assert result.exit_code == 1
    assert "exceeds its gate of 0.0001%" in result.output and "nothing was written" in result.output
    assert "block-16" in result.output and "exceeds its gate of 1e-05%" in result.output
    assert not (tmp_path / "out").exists() and leftovers(tmp_path) == []


@pytest.mark.parametrize("custom", [False, True], ids=["builtin-recipe", "custom-model_type-recipe"])
def test_eval_window_over_a_variant_max_length_fails_before_any_export(tmp_path, monkeypatch, custom):
    """Also for a fine-tune under its own model_type with the spec's `recipe:` (its config is read
    as the recipe's arch, as build reads it; it was refused as an unsupported architecture)."""
    from gqa_export.release import assemble

    def no_export(*args, **kwargs):
        raise AssertionError("a variant was exported before the eval section was checked")

    monkeypatch.setattr(assemble, "export", no_export)
    variants = [FOUR[0], {"ep": "cpu", "precision": "int4", "max_length": 64}]
    fields: dict[str, object] = {}
    if custom:
        source = Path(shutil.copytree(TRAINED, tmp_path / "my-llama"))
        config = json.loads((source / "config.json").read_text())
        (source / "config.json").write_text(json.dumps({**config, "model_type": "my-llama"}))
        recipe = json.loads(invoke("recipes", "show", "llama", "--json").stdout)
        (tmp_path / "my.yaml").write_text(json.dumps({**recipe, "match": {"model_types": ["my-llama"]}}))
        fields = {"source": str(source), "recipe": "my.yaml"}
    spec = write_spec(tmp_path, variants=variants, license="apache-2.0", **fields)
    result = invoke("release", spec, "-o", tmp_path / "out")
    assert result.exit_code == 2, result.output
    assert f"{spec}:2: eval.window 128 exceeds variant" in " ".join(result.output.split())
    assert "max_length 64" in result.output and not (tmp_path / "out").exists()


@pytest.mark.parametrize(("max_length", "says"), [(100000, "exceeds the model's context length"), (0, "at least 1")])
def test_a_variant_max_length_is_refused_with_its_line(tmp_path, monkeypatch, max_length, says):
    """#34 item 12: a variant's max_length beyond the context was refused by its build as
    "--max-length must be between ..." (an option the spec does not have), with no file:line; here
    it is named with the spec's line and the variant, before anything is exported (eval or not)."""
    from gqa_export.release import assemble

    monkeypatch.setattr(assemble, "export", lambda *a, **k: pytest.fail("a variant was exported first"))
    spec = tmp_path / "release.yaml"
    variants = [FOUR[0], {"ep": "cpu", "precision": "int4", "max_length": max_length}]
    spec.write_text(yaml.safe_dump({"source": str(TRAINED), "license": "apache-2.0", "variants": variants}))
    result = invoke("release", spec, "-o", tmp_path / "out")
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert result.exit_code == 2 and len(errors) == 1, result.output
    items = [i + 1 for i, text in enumerate(spec.read_text().splitlines()) if text.startswith("- ")]
    assert f"{spec}:{items[1]}: variants[1]: max_length" in errors[0] and says in errors[0], errors[0]
    assert "--max-length" not in errors[0] and not (tmp_path / "out").exists()


def test_a_failed_smoke_run_publishes_nothing(tmp_path, monkeypatch):
    from gqa_export.errors import SmokeRunError
    from gqa_export.stages import finish

    real = finish.smoke_run

    def smoke(folder: Path, ep: str):
        if "cuda-fp16" in str(folder):
            raise SmokeRunError("smoke run on cpu failed: simulated")
        return real(folder, ep)

    monkeypatch.setattr(finish, "smoke_run", smoke)
    spec = write_spec(tmp_path)
    result = invoke("release", spec, "-o", tmp_path / "out")
    assert result.exit_code == 1 and "variant cuda/cuda-fp16 failed" in result.output
    assert not (tmp_path / "out").exists() and leftovers(tmp_path) == []


def test_existing_output_needs_overwrite(tmp_path):
    (tmp_path / "out").mkdir()
    result = invoke("release", write_spec(tmp_path, variants=FOUR[:1]), "-o", tmp_path / "out")
    assert result.exit_code == 2 and "--overwrite" in result.output


def test_license_and_files_carried_from_the_source(tmp_path):
    source = tmp_path / "src"
    shutil.copytree(TRAINED, source)
    (source / "README.md").write_text("---\nlicense: other\nlicense_name: tiny-license\nlicense_link: LICENSE\n---\n")
    (source / "LICENSE").write_text("Tiny license text.\n")
    spec = write_spec(
        tmp_path, source=str(source), variants=FOUR[:1], name="Tiny", base_model="acme/tiny", repo="acme/tiny-onnx"
    )
    spec_data = yaml.safe_load(spec.read_text())
    spec_data.pop("eval")
    spec.write_text(yaml.safe_dump(spec_data))
    result = invoke("release", spec, "-o", tmp_path / "out", "-q")
    assert result.exit_code == 0, result.output
    matter = front_matter(tmp_path / "out" / "README.md")
    assert matter["license"] == "other" and matter["license_name"] == "tiny-license"
    assert matter["base_model"] == "acme/tiny"
    card = (tmp_path / "out" / "README.md").read_text()
    assert "# Tiny for ONNX Runtime GenAI" in card
    assert 'hf download acme/tiny-onnx --include "cpu_and_mobile/cpu-fp32/*"' in card
    assert (tmp_path / "out" / "LICENSE").read_text() == "Tiny license text.\n"
    assert "LICENSE" in json.loads((tmp_path / "out" / "release.json").read_text())["files"]
    assert invoke("verify", tmp_path / "out").exit_code == 0


def test_no_license_anywhere_is_refused(tmp_path, checkpoints):
    spec = write_spec(tmp_path, source=str(checkpoints.get("gqa")), variants=FOUR[:1])
    result = invoke("release", spec, "-o", tmp_path / "out")
    assert result.exit_code == 2 and "set license:" in result.output and not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("source: x\nvariants:\n  - {ep: cpu, precision: fp32, colour: red}\n", ":3: unknown key 'variants[0].colour'"),
        ("source: x\nsource: y\nvariants: []\n", ":2: key 'source' is given twice"),
        ("variants:\n  - {ep: cpu, precision: fp32}\n", "missing required key 'source'"),
        ("source: x\nvariants: []\n", ":2: variants: the list is empty"),
        ("source: x\nvariants:\n  - {ep: tpu, precision: fp32}\n", ":3: variants[0].ep: expected one of cpu, cuda"),
        ("source: x\nvariants:\n  - {ep: cpu, precision: bf16}\n", ":3: variants[0]: --precision bf16 cannot run"),
        ("source: x\nvariants:\n  - {ep: cpu, precision: int4, block_size: 48}\n", "--block-size must be a power"),
        ("source: x\nvariants:\n  - {ep: cpu, precision: fp32, block_size: 64}\n", "apply to int4/int8 variants"),
        (
            "source: x\nvariants:\n  - {ep: cpu, precision: fp32}\n  - {ep: cpu, precision: fp32}\n",
            ":4: variants[1] lands in cpu_and_mobile/cpu-fp32, the same folder as variants[0]",
        ),
        ("source: x\nvariants:\n  - {ep: cpu, precision: fp32, path: ../up}\n", "must be a relative folder"),
        (
            "source: x\nvariants:\n  - {ep: cpu, precision: fp32, path: a}\n"
            "  - {ep: cpu, precision: int4, path: a/b}\n",
            ":4: variants[1] lands in a/b, nested with variants[0] (a)",
        ),
        (
            "source: x\nvariants:\n  - {ep: cpu, precision: fp32}\n"
            "  - {ep: cpu, precision: int4, gate: {max_ppl_increase: 1}}\n",
            "a variant has a gate but the spec has no eval.text",
        ),
        (
            "source: x\neval: {text: t.txt}\nvariants:\n  - {ep: cpu, precision: int4, gate: {max_ppl_increase: 1}}\n",
            "no float variant to compare against",
        ),
        ("source: x\neval: {text: nowhere.txt}\nvariants:\n  - {ep: cpu, precision: fp32}\n", "eval.text nowhere.txt"),
        (
            "source: x\nvariants:\n  - {ep: cpu, precision: fp32}\neval: {text: t.txt, window: 8, stride: 8}\n",
            ":4: eval.stride must be at least 1 and the window less one (7), got 8",
        ),
        ("source: x\neval: {text: t.txt, window: 1}\nvariants:\n  - {ep: cpu, precision: fp32}\n", ":2: eval.window"),
        ("source: x\neval: {text: t.txt, max_tokens: 1}\nvariants:\n  - {ep: cpu, precision: fp32}\n", "max_tokens"),
        ("source: [x\n", "not valid YAML"),
        ("", "the release spec is empty"),
    ],
)
def test_spec_errors_name_file_line_and_key(tmp_path, text, message):
    (tmp_path / "t.txt").write_text("some text")
    spec = tmp_path / "release.yaml"
    spec.write_text(text)
    with pytest.raises(InputError, match=None) as info:
        load_spec(spec)
    assert message in str(info.value) and str(spec) in str(info.value)
    result = invoke("release", spec, "-o", tmp_path / "out")
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) <= 2


@pytest.mark.parametrize(
    ("ep", "precision", "quant", "folder"),
    [
        ("cpu", "fp32", QuantOptions(), "cpu_and_mobile/cpu-fp32"),
        ("cpu", "int4", QuantOptions(), "cpu_and_mobile/cpu-int4-rtn-block-32-acc-level-4"),
        ("cpu", "int8", QuantOptions(block_size=128, accuracy_level=0), "cpu_and_mobile/cpu-int8-rtn-block-128"),
        ("cuda", "fp16", QuantOptions(), "cuda/cuda-fp16"),
        ("cuda", "bf16", QuantOptions(), "cuda/cuda-bf16"),
        ("cuda", "int4", QuantOptions(), "cuda/cuda-int4-rtn-block-32"),
        ("cuda", "int4", QuantOptions(asymmetric=True, activations="bf16"), "cuda/cuda-int4-rtn-block-32-bf16"),
        ("cuda", "int4", QuantOptions(method="search", accuracy_level=4), "cuda/cuda-int4-search-block-32-acc-level-4"),
        ("dml", "int4", QuantOptions(), "directml/directml-int4-rtn-block-32"),
        ("dml", "fp16", QuantOptions(), "directml/directml-fp16"),
        ("webgpu", "int4", QuantOptions(), "webgpu/webgpu-int4-rtn-block-32-acc-level-4"),
        ("openvino", "int4", QuantOptions(), "openvino/openvino-int4-rtn-block-32-acc-level-4"),
        ("trt-rtx", "bf16", QuantOptions(), "trt-rtx/trt-rtx-bf16"),
    ],
)
def test_folder_names_follow_the_published_layout(ep, precision, quant, folder):
    assert folder_name(ep, precision, quant) == folder


def test_spec_variants_take_the_build_options(tmp_path):
    spec = tmp_path / "release.yaml"
    spec.write_text(
        "source: x\nvariants:\n"
        "  - {ep: cpu, precision: int4, quant_method: k_quant, mixed_precision: [last_matmul:int8],\n"
        "     prune_lm_head: false, kv_cache: int8, kv_scales: per-tensor}\n"
        "  - {ep: cuda, precision: fp16, cuda_graph: true, hidden_states: true}\n"
    )
    first, second = load_spec(spec).variants
    assert first.options.quant.mixed_precision == ("last_matmul:int8",) and first.options.quant.method == "k_quant"
    assert first.options.io.prune_lm_head is False
    assert (first.options.kv.dtype, first.options.kv.scales) == ("int8", "per-tensor")
    assert second.options.io.cuda_graph and second.options.io.hidden_states


def test_multimodal_source_releases_full_and_text_only_variants(gemma3_full_checkpoint, tmp_path):
    """A multimodal source: the default variant is the full package (vision, embedding, processor),
    `text_only: true` the text decoder alone, `encoder_precision: int8` the full package with 8-bit
    vision linears; all are sealed and verified like any variant."""
    pytest.importorskip("PIL")
    spec = tmp_path / "release.yaml"
    variants = [{"ep": "cpu", "precision": "fp32", "path": "full"},
                {"ep": "cpu", "precision": "fp32", "path": "text", "text_only": True},
                {"ep": "cpu", "precision": "int4", "path": "int8-vision", "encoder_precision": "int8"}]  # fmt: skip
    fields = {"source": str(gemma3_full_checkpoint), "license": "apache-2.0", "variants": variants}
    spec.write_text(yaml.safe_dump(fields))
    result = invoke("release", spec, "-o", tmp_path / "out")
    assert result.exit_code == 0, result.output
    full, text = tmp_path / "out" / "full", tmp_path / "out" / "text"
    assert {"vision.onnx", "embedding.onnx", "processor_config.json"} <= {p.name for p in full.iterdir()}
    assert not (text / "vision.onnx").exists() and not (text / "processor_config.json").exists()
    assert json.loads((full / "genai_config.json").read_text())["model"]["type"] == "gemma3"
    assert json.loads((text / "genai_config.json").read_text())["model"]["type"] != "gemma3"
    int8_vision = tmp_path / "out" / "int8-vision"
    assert json.loads((int8_vision / "manifest.json").read_text())["options"]["encoder_precision"] == "int8"
    vision_ops = {node.op_type for node in onnx.load(int8_vision / "vision.onnx", load_external_data=False).graph.node}
    full_ops = {node.op_type for node in onnx.load(full / "vision.onnx", load_external_data=False).graph.node}
    assert "MatMulNBits" in vision_ops and "MatMulNBits" not in full_ops
    for folder in (full, text, int8_vision):
        assert invoke("verify", folder).exit_code == 0


def test_spec_refuses_an_unknown_encoder_precision(tmp_path):
    spec = tmp_path / "release.yaml"
    spec.write_text("source: x\nvariants:\n  - {ep: cpu, precision: int4, encoder_precision: int4}\n")
    with pytest.raises(InputError, match="encoder_precision"):
        load_spec(spec)


@pytest.mark.parametrize("keys", ["lora_targets: [q_proj]", "lora_targets: [q_proj], adapters: [a]", "adapters: [a]"])
def test_spec_refuses_a_draft_with_lora_up_front(tmp_path, keys):
    """A draft variant with a multi-LoRA base or adapters is refused when the spec is read, in one
    line naming the variant, not after the fetch and build."""
    spec = tmp_path / "release.yaml"
    spec.write_text(f"source: x\nvariants:\n  - {{ep: cpu, precision: fp32, draft: d, {keys}}}\n")
    with pytest.raises(InputError, match=r"variants\[0\]: (--)?draft with (--lora-targets|adapters) is not") as err:
        load_spec(spec)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("keys", "message"),
    [
        ("ep: qnn, precision: int4, draft: d", "static-shape windows cannot verify drafts"),
        ("ep: cpu, precision: fp32, draft: d, prune_lm_head: true", "needs full logits"),
        ("ep: cpu, precision: fp32, draft: d, attention: split", "decoder pipeline"),
        ("ep: dml, precision: int4, encoder_precision: int8", "cannot run with --ep dml"),
        ("ep: cpu, precision: int4, encoder_precision: int8, text_only: true", "full multimodal package"),
    ],
)
def test_spec_refuses_what_build_would_refuse_up_front(tmp_path, keys, message):
    """`build --draft`'s option checks and the encoder-precision checks run when the spec is read
    (before the fetch), in one line naming the variant."""
    spec = tmp_path / "release.yaml"
    spec.write_text(f"source: x\nvariants:\n  - {{{keys}}}\n")
    with pytest.raises(InputError, match=message) as err:
        load_spec(spec)
    assert "\n" not in str(err.value) and "variants[0]" in str(err.value)


def test_spec_takes_the_new_eps_and_refuses_what_they_cannot_run(tmp_path):
    """Release variants for the EPs of docs/eps.md: their folders, and one-line refusals naming the line."""
    spec = tmp_path / "release.yaml"
    spec.write_text(
        "source: x\nvariants:\n  - {ep: openvino, precision: int4}\n  - {ep: dml, precision: int4}\n"
        "  - {ep: webgpu, precision: fp16}\n  - {ep: trt-rtx, precision: bf16}\n  - {ep: qnn, precision: int4}\n"
    )
    assert [v.path for v in load_spec(spec).variants] == [
        "openvino/openvino-int4-rtn-block-32-acc-level-4", "directml/directml-int4-rtn-block-32",
        "webgpu/webgpu-fp16", "trt-rtx/trt-rtx-bf16", "qnn/qnn-int4-rtn-block-32",
    ]  # fmt: skip
    for variant, message in (
        ("{ep: dml, precision: fp32}", "fp16 kernels only"),
        ("{ep: qnn, precision: int8}", "4-bit QDQ"),
    ):
        spec.write_text(f"source: x\nvariants:\n  - {variant}\n")
        with pytest.raises(InputError, match=rf"release.yaml:3: .*{message}") as err:
            load_spec(spec)
        assert "\n" not in str(err.value)
    # eval scores whole sequences, which a static-shape package's windows cut up: refused before any build
    (tmp_path / "eval.txt").write_text("text")
    variants = "  - {ep: cpu, precision: fp32}\n  - {ep: qnn, precision: int4}\n"
    spec.write_text(f"source: x\neval: {{text: eval.txt}}\nvariants:\n{variants}")
    with pytest.raises(InputError, match=r"release.yaml:2: eval: variant qnn/qnn-int4.* eval cannot score") as err:
        load_spec(spec)
    assert "\n" not in str(err.value)
