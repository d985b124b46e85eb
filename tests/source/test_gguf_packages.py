"""Packages built from GGUF files against transformers loading the same file.

Per GGML type (every one the `gguf` package's writer and tests/gguf_quants.py can write, and the
Q4_K_M mix): the package's prompt and decode logits equal transformers' own GGUF load (dequantized,
fp32) within the project's fp32 bound, and greedy tokens through onnxruntime-genai equal HF
`generate` (the same end-of-generation ids suppressed). The manifest records each tensor's GGML
type, bits and form. Planted bug: llama.cpp's q/k row permutation left in place.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from families import PROMPT
from gguf_reference import hf_from_gguf, hf_generate_until, package_eos
from reference import assert_varied, genai_prompt_then_greedy, hf_logits, ort_prefill_and_decode

from gqa_export.pipeline import BuildOptions, build
from gqa_export.source.gguf import names

BOUND = 1e-4
TYPES = ["F32", "F16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "Q4_K_M"]
TRAINED = Path(__file__).resolve().parents[1] / "data" / "tiny-trained"


def parity(package: Path, gguf: Path) -> float:
    tokens, got = ort_prefill_and_decode(package, list(PROMPT), steps=6)
    return float(np.abs(got - hf_logits(hf_from_gguf(gguf), tokens, len(PROMPT))).max())


@pytest.mark.parametrize("type_name", TYPES)
def test_package_logits_equal_transformers_on_the_same_gguf(ggufs, type_name):
    package = ggufs.package("llama256", type_name)
    assert parity(package, ggufs.get("llama256", type_name)) < BOUND
    manifest = json.loads((package / "manifest.json").read_text())["options"]["gguf"]
    q = manifest["tensors"]["model.layers.0.self_attn.q_proj.weight"]
    expected = "Q4_K" if type_name == "Q4_K_M" else type_name
    assert q["gguf"] == "blk.0.attn_q.weight" and q["type"] == expected
    if type_name not in ("F32", "F16"):
        assert q["as"].startswith(f"{expected}: MatMulNBits") and q["bits"] > 2


@pytest.mark.parametrize(
    ("checkpoint", "type_name"), [("llama256", "Q4_K_M"), ("llama256", "Q8_0"), ("trained", "Q4_0")]
)
def test_genai_greedy_tokens_equal_hf_generate(ggufs, checkpoint, type_name):
    name = str(TRAINED) if checkpoint == "trained" else checkpoint
    package, gguf = ggufs.package(name, type_name), ggufs.get(name, type_name)
    _, tokens = genai_prompt_then_greedy(package, list(PROMPT), 12)
    assert tokens == hf_generate_until(hf_from_gguf(gguf), list(PROMPT), 12, package_eos(package))
    assert_varied([tokens])


def test_q4_k_m_packs_each_run_of_one_form(ggufs):
    """Q4_K_M keeps v_proj in Q6_K: the packed QKV is two MatMulNBits (q|k 4-bit, v 8-bit) concatenated."""
    package = ggufs.package("llama256", "Q4_K_M")
    graph = onnx.load(str(package / "model.onnx"), load_external_data=False).graph
    nbits = [n for n in graph.node if n.op_type == "MatMulNBits" and "layers.0" in n.name and "attn" in n.name]
    bits = sorted(next(a.i for a in n.attribute if a.name == "bits") for n in nbits)
    assert bits == [4, 4, 8], [n.name for n in nbits]  # q|k, o_proj (4-bit), v (8-bit)
    assert any(n.op_type == "Concat" and n.name == "model.layers.0.self_attn.qkv_proj/concat" for n in graph.node)


def test_mutant_qk_permutation_left_in_place(ggufs, tmp_path, monkeypatch):
    """llama.cpp permutes q/k rows per head for its rotary layout; read as they are, attention is wrong."""
    monkeypatch.setattr(names, "PERMUTED_QK", frozenset())
    gguf = ggufs.get("llama256", "Q8_0")
    build(BuildOptions(str(gguf), tmp_path / "pkg", precision="fp32", smoke=False))
    assert parity(tmp_path / "pkg", gguf) > 100 * BOUND


def test_split_gguf_and_folder_inputs_build_the_same_package(ggufs, tmp_path):
    """A split GGUF (any part named), a folder holding the file, and the file itself: same weights."""
    from gguf_models import write_gguf

    single = ggufs.get("llama256", "Q4_K")
    (tmp_path / "split").mkdir()
    write_gguf(ggufs.checkpoint("llama256"), tmp_path / "split" / "m.gguf", "Q4_K", split_max_tensors=7)
    parts = sorted((tmp_path / "split").glob("*.gguf"))
    assert len(parts) == 3
    made = {}
    for name, model, extra in [("file", single, {}), ("folder", single.parent, {}), ("split", parts[1], {}),
                               ("split-folder", tmp_path / "split", {"gguf_file": parts[0].name})]:  # fmt: skip
        out = tmp_path / f"pkg-{name}"
        build(BuildOptions(str(model), out, precision="fp32", smoke=False, **extra))
        made[name] = (out / "model.onnx.data").read_bytes()
    assert len(set(made.values())) == 1


def test_iq4_nl_with_dequantize_is_exact_float_then_precision(ggufs, tmp_path):
    """--dequantize reads IQ4_NL tensors as exact float (the gguf dequantizer's values) and keeps the
    other tensors' blocks; logits equal transformers' load of the same file."""
    from gguf_models import write_gguf

    def iq4_nl_for_down(name: str, shape: tuple[int, ...]) -> str:
        return "IQ4_NL" if name.endswith("ffn_down.weight") else ("F32" if len(shape) < 2 else "Q4_K")

    (tmp_path / "in").mkdir()
    gguf = write_gguf(ggufs.checkpoint("llama256"), tmp_path / "in" / "m.gguf", iq4_nl_for_down)
    build(BuildOptions(str(gguf), tmp_path / "pkg", precision="fp32", smoke=False, dequantize=True))
    assert parity(tmp_path / "pkg", gguf) < BOUND
    tensors = json.loads((tmp_path / "pkg" / "manifest.json").read_text())["options"]["gguf"]["tensors"]
    assert tensors["model.layers.0.mlp.down_proj.weight"]["type"] == "IQ4_NL"
    assert tensors["model.layers.0.mlp.down_proj.weight"]["as"] == "float"


@pytest.mark.parametrize(("checkpoint", "type_name"), [("trained", "Q4_1"), ("llama256", "Q4_K_M")])
def test_embedding_reads_the_file_blocks(ggufs, checkpoint, type_name):
    """The embedding stays in its blocks (GatherBlockQuantized): tied (the trained model, Q4_1), the
    lm_head's MatMulNBits reads the same codes tensor and the mins' per-block residual rows are
    gathered beside; untied (llama256's Q6_K table), no float copy either. Logits equal transformers'
    (every prompt token's embedding row goes through it)."""
    name = str(TRAINED) if checkpoint == "trained" else checkpoint
    gguf, package = ggufs.get(name, type_name), ggufs.package(name, type_name)
    graph = onnx.load(str(package / "model.onnx"), load_external_data=False).graph
    gathers = [n for n in graph.node if n.op_type == "GatherBlockQuantized"]
    assert len(gathers) == 1
    readers = [n.op_type for n in graph.node if gathers[0].input[0] in n.input]
    if checkpoint == "trained":
        assert sorted(readers) == ["GatherBlockQuantized", "MatMulNBits"]
        assert any(n.op_type == "Gather" and n.input[0].endswith("gather_residual") for n in graph.node)
    assert not any(i.name == "model.embed_tokens.weight" for i in graph.initializer)  # no float copy
    assert parity(package, gguf) < BOUND


def test_release_from_a_gguf_file(ggufs, tmp_path):
    """`release` with a GGUF source (a path relative to the spec) and `gguf_file` for a folder:
    one read of the file for every variant, the metadata's license on the card, verify passes, and
    the config/tokenizer folder written for the read is gone afterwards."""
    import tempfile

    import yaml
    from typer.testing import CliRunner

    from gqa_export.cli import app

    gguf = ggufs.get(str(TRAINED), "Q4_0")
    folder = tmp_path / "models"
    folder.mkdir()
    (folder / "tiny.gguf").write_bytes(gguf.read_bytes())
    variants = [
        {"ep": "cpu", "precision": "fp32", "path": "cpu-fp32"},
        {"ep": "cpu", "precision": "int4", "path": "cpu-int4"},
    ]
    spec = tmp_path / "release.yaml"
    spec.write_text(yaml.safe_dump({"source": "models", "gguf_file": "tiny.gguf", "license": "apache-2.0",
                                    "smoke": False, "variants": variants}, sort_keys=False))  # fmt: skip
    before = {p.name for p in Path(tempfile.gettempdir()).glob("gqa-export-gguf-*")}
    runner = CliRunner()
    result = runner.invoke(app, ["release", str(spec), "-o", str(tmp_path / "out"), "-q"])
    assert result.exit_code == 0, result.output
    assert {p.name for p in Path(tempfile.gettempdir()).glob("gqa-export-gguf-*")} <= before
    for variant in ("cpu-fp32", "cpu-int4"):
        manifest = json.loads(next((tmp_path / "out").rglob(f"{variant}/manifest.json")).read_text())
        assert manifest["options"]["gguf"]["file"] == "tiny.gguf"
    assert runner.invoke(app, ["verify", str(tmp_path / "out")]).exit_code == 0


def test_int4_from_a_q8_0_file_requantizes_with_a_note(ggufs, tmp_path):
    """--precision still applies: int4 from 8-bit blocks dequantizes them exactly and re-quantizes
    (said in the build notes and per tensor in the manifest), except an untied embedding, whose
    lookup keeps the file's blocks at any precision; int8 keeps them all as they are."""
    gguf = ggufs.get("llama256", "Q8_0")
    result = build(BuildOptions(str(gguf), tmp_path / "int4", precision="int4", smoke=False))
    # 14 linears and the lm_head re-quantized; the untied embedding keeps its 8-bit blocks (a lookup)
    assert any("1 weights keep" in note and "15 re-quantized by --precision int4" in note for note in result.notes)
    tensors = json.loads((tmp_path / "int4" / "manifest.json").read_text())["options"]["gguf"]["tensors"]
    assert tensors["model.layers.0.self_attn.q_proj.weight"]["as"].startswith("dequantized exactly, re-quantized")
    result = build(BuildOptions(str(gguf), tmp_path / "int8", precision="int8", smoke=False))
    assert any("16 weights keep the file's integer blocks" in note for note in result.notes), result.notes
