"""gpt-oss GGUF files (docs/gguf.md §4): llama.cpp's converter splits the interleaved gate_up experts
and their biases into ffn_gate_exps / ffn_up_exps, transposes the expert matrices, keeps a release's
MXFP4 blocks (repacked to GGML's nibble order) and renames the attention sinks; the store rebuilds
the fused tensors the gpt_oss spec reads (source/gguf/gpt_oss.py).

On tiny checkpoints written as the converter writes them (tests/gguf_gpt_oss.py): an F32 file from
a float checkpoint, an MXFP4 file from an MXFP4 checkpoint's own blocks, a Q8_0-expert file:
- the package equals HF on the checkpoint's weights (the MXFP4 ones dequantized by the test's own
  MXFP4 decoder; Q8_0: the file's weights dequantized by the `gguf` package), prompt and decode
  steps, with the config llama.cpp reads: YaRN's correction range truncated, as ggml computes it;
- a right-padded batch of ragged prompts equals HF row by row; genai's greedy tokens equal HF generate;
- every expert weight in the package's MoE node equals the `gguf` package's dequantization of the
  file's gate / up / down tensors, re-interleaved, and the checkpoint's own MXFP4 values;
- planted bugs fail: gate and up not re-interleaved, gate and up swapped, biases not
  re-interleaved, sinks dropped or read from the next layer, two experts permuted, the truncation
  not applied.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from families import PROMPT, PROMPTS, TEXT_PROMPTS
from gguf_gpt_oss import write_gpt_oss_gguf
from gguf_reference import hf_generate_until, package_eos
from reference import (
    assert_varied,
    genai_prompt_then_greedy,
    hf_logits,
    hf_model,
    ort_prefill_and_decode,
    ragged_logits_error,
)

from gqa_export.errors import InputError
from gqa_export.pipeline import BuildOptions, build
from gqa_export.source.gguf import config as gguf_config
from gqa_export.source.gguf import gpt_oss

BOUND = 1e-4
KINDS = ("F32", "MXFP4", "Q8_0", "MXFP4_MOE")  # MXFP4_MOE: MXFP4 experts, other 2-D weights Q8_0 (llama-quantize)


class Files:
    """Checkpoints, their GGUF files, references and packages, made once per module."""

    def __init__(self, root: Path) -> None:
        from moe_models import save_gpt_oss_mxfp4, save_moe

        self.root = root
        self.float = save_moe(root / "hf" / "gpt_oss", "gpt_oss")
        self.mxfp4 = save_gpt_oss_mxfp4(root / "hf" / "gpt_oss_mx")
        self.files: dict[str, Path] = {}
        self.packages: dict[str, Path] = {}
        self.models: dict[str, object] = {}

    def checkpoint(self, kind: str) -> Path:
        return self.mxfp4 if kind.startswith("MXFP4") else self.float

    def gguf(self, kind: str) -> Path:
        if kind not in self.files:
            folder = self.root / "gguf" / kind
            folder.mkdir(parents=True)
            twin = folder / "twin" if kind == "Q8_0" else None
            experts, others = ("MXFP4", "Q8_0") if kind == "MXFP4_MOE" else (kind, "F32")
            path = folder / f"gpt-oss-{kind}.gguf"
            self.files[kind] = write_gpt_oss_gguf(self.checkpoint(kind), path, experts, twin, others)
        return self.files[kind]

    def package(self, kind: str) -> Path:
        if kind not in self.packages:
            out = self.root / "pkg" / kind
            build(BuildOptions(str(self.gguf(kind)), out, precision="fp32", smoke=False))
            self.packages[kind] = out
        return self.packages[kind]

    def model(self, kind: str, truncate: bool = True):
        """HF on the file's weights with the YaRN llama.cpp computes (`truncate`), fp32."""
        key = f"{kind}-{truncate}"
        if key not in self.models:
            self.gguf(kind)
            source = self.gguf(kind).parent / "twin" if kind == "Q8_0" else self.checkpoint(kind)
            folder = self.root / "ref" / key
            shutil.copytree(source, folder)
            config = json.loads((folder / "config.json").read_text())
            config["rope_parameters"]["truncate"] = truncate
            (folder / "config.json").write_text(json.dumps(config))
            if kind.startswith("MXFP4"):
                from moe_models import load_dequantized_reference

                self.models[key] = load_dequantized_reference(folder)
                if kind == "MXFP4_MOE":
                    _q8_0_round_trip(self.models[key])
            else:
                self.models[key] = hf_model(folder)
        return self.models[key]


def _q8_0_round_trip(model) -> None:
    """The non-expert 2-D weights as an MXFP4_MOE file holds them: Q8_0, dequantized by `gguf`."""
    import torch
    from gguf_gpt_oss import _round_trip, requantized

    with torch.no_grad():
        for name, p in model.named_parameters():
            if ".experts." not in name and requantized(name, p.dim()):
                p.copy_(torch.from_numpy(_round_trip(p.detach().numpy(), "Q8_0")))


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Files:
    return Files(tmp_path_factory.mktemp("gpt_oss_gguf"))


def logits_error(package: Path, model) -> float:
    tokens, got = ort_prefill_and_decode(package, list(PROMPT), steps=6)
    return float(abs(got - hf_logits(model, tokens, len(PROMPT))).max())


@pytest.mark.parametrize("kind", KINDS)
def test_gpt_oss_gguf_package_equals_hf_and_generates_like_it(files, kind):
    package = files.package(kind)
    model = files.model(kind)
    assert logits_error(package, model) < BOUND
    assert ragged_logits_error(package, model) < BOUND  # a right-padded batch of ragged prompts, decode steps
    tensors = json.loads((package / "manifest.json").read_text())["options"]["gguf"]["tensors"]
    gate_up = tensors["model.layers.0.mlp.experts.gate_up_proj"]
    assert gate_up["gguf"] == "blk.0.ffn_gate_exps.weight + blk.0.ffn_up_exps.weight"
    assert gate_up["type"] == kind.removesuffix("_MOE")
    assert gate_up["as"] == ("float (dequantized exactly)" if kind.startswith("MXFP4") else "float")
    if kind == "MXFP4_MOE":  # the attention's and the lm_head's Q8_0 blocks kept as they are
        for name in ("model.layers.1.self_attn.q_proj.weight", "lm_head.weight"):
            assert tensors[name]["as"].startswith("Q8_0: MatMulNBits 8-bit block 32"), tensors[name]
    assert tensors["model.layers.2.self_attn.sinks"]["gguf"] == "blk.2.attn_sinks.weight"
    seen = []
    for prompt in (*PROMPTS, *TEXT_PROMPTS):
        _, tokens = genai_prompt_then_greedy(package, list(prompt), 24)
        assert tokens == hf_generate_until(model, list(prompt), 24, package_eos(package)), prompt
        seen.append(tokens)
    assert_varied(seen)


def test_int4_package_equals_the_safetensors_mxfp4_checkpoints(files, tmp_path):
    """`-p int4` re-quantizes the dequantized MXFP4 experts to QMoE exactly as the safetensors MXFP4
    import does: the same logits as the package of the checkpoint the file was converted from
    (its config with llama.cpp's truncated YaRN)."""
    files.model("MXFP4")  # writes the checkpoint's reference folder
    build(BuildOptions(str(files.gguf("MXFP4")), tmp_path / "gguf", precision="int4", smoke=False))
    build(BuildOptions(str(files.root / "ref" / "MXFP4-True"), tmp_path / "st", precision="int4", smoke=False))
    tokens, got = ort_prefill_and_decode(tmp_path / "gguf", list(PROMPT), steps=6)
    same, want = ort_prefill_and_decode(tmp_path / "st", list(PROMPT), steps=6)
    assert tokens == same
    np.testing.assert_array_equal(got, want)


def _initializers(package: Path) -> dict[str, np.ndarray]:
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(package / "model.onnx"))
    return {t.name: numpy_helper.to_array(t) for t in model.graph.initializer if ".moe." in t.name}


@pytest.mark.parametrize("kind", ("MXFP4", "Q8_0"))
def test_every_expert_weight_is_the_dequantizers(files, kind):
    """fc1 [E, 2I, H] (rows gate_0, up_0, gate_1, ...) and fc2 [E, H, I] of each layer's MoE node, and
    the fc1 bias, equal the `gguf` package's dequantization of the file's tensors; MXFP4 experts
    also equal the checkpoint's own MXFP4 values (what the safetensors MXFP4 import reads)."""
    from gguf import GGUFReader
    from gguf.quants import dequantize

    reader = {t.name: t for t in GGUFReader(files.gguf(kind)).tensors}

    def file(name: str) -> np.ndarray:
        t = reader[name]
        return np.asarray(t.data, np.float32) if t.tensor_type.name == "F32" else dequantize(t.data, t.tensor_type)

    got = _initializers(files.package(kind))
    if kind == "MXFP4":
        from moe_models import mxfp4_dequantize
        from safetensors.torch import load_file

        stored = load_file(str(files.mxfp4 / "model.safetensors"))
    for i in range(3):
        gate, up = file(f"blk.{i}.ffn_gate_exps.weight"), file(f"blk.{i}.ffn_up_exps.weight")
        fc1 = np.stack([gate, up], axis=2).reshape(gate.shape[0], -1, gate.shape[2])
        np.testing.assert_array_equal(got[f"model.layers.{i}.moe.fc1"], fc1)
        np.testing.assert_array_equal(got[f"model.layers.{i}.moe.fc2"], file(f"blk.{i}.ffn_down_exps.weight"))
        bias = np.stack([file(f"blk.{i}.ffn_gate_exps.bias"), file(f"blk.{i}.ffn_up_exps.bias")], axis=-1)
        np.testing.assert_array_equal(got[f"model.layers.{i}.moe.fc1_bias"], bias.reshape(bias.shape[0], -1))
        if kind == "MXFP4":
            for proj, op in (("gate_up_proj", "fc1"), ("down_proj", "fc2")):
                base = f"model.layers.{i}.mlp.experts.{proj}"
                own = mxfp4_dequantize(stored[f"{base}_blocks"], stored[f"{base}_scales"]).numpy()
                np.testing.assert_array_equal(got[f"model.layers.{i}.moe.{op}"], own)


# --- planted layout bugs ----------------------------------------------------------------------------
def _remap(monkeypatch: pytest.MonkeyPatch, change) -> None:
    """Plant a bug in the file -> HF mapping (store.map_file reads gpt_oss.map_gpt_oss per call)."""
    made = gpt_oss.map_gpt_oss
    monkeypatch.setattr(gpt_oss, "map_gpt_oss", lambda names, shapes: change(made(names, shapes)))


def _not_interleaved(monkeypatch: pytest.MonkeyPatch) -> None:
    def halves(m, e, r0, r1, c0, c1, rows):  # [gate; up] stacked instead of gate_j, up_j pairs
        if m.interleaved is None:
            return rows(m.gguf, e, r0, r1, c0, c1)
        n = rows(m.gguf, e, 0, 1 << 30, c0, c1).shape[0]
        both = np.concatenate([rows(m.gguf, e, 0, n, c0, c1), rows(m.interleaved, e, 0, n, c0, c1)])
        return both[r0:r1]

    monkeypatch.setattr(gpt_oss, "_expert_rows", halves)


def _biases_not_interleaved(monkeypatch: pytest.MonkeyPatch) -> None:
    whole = gpt_oss._whole

    def halves(m, file_shape, rows):
        if len(file_shape) == 3 or m.interleaved is None:
            return whole(m, file_shape, rows)
        n, k = file_shape
        return np.concatenate([rows(m.gguf, None, 0, n, 0, k), rows(m.interleaved, None, 0, n, 0, k)], axis=-1)

    monkeypatch.setattr(gpt_oss, "_whole", halves)


def _permuted_experts(monkeypatch: pytest.MonkeyPatch) -> None:
    expert_rows = gpt_oss._expert_rows
    swap = {0: 1, 1: 0}
    monkeypatch.setattr(gpt_oss, "_expert_rows", lambda m, e, *rest: expert_rows(m, swap.get(e, e), *rest))


def _swapped(mapping: dict) -> dict:
    return {hf: replace(m, gguf=m.interleaved, interleaved=m.gguf) if m.interleaved else m for hf, m in mapping.items()}


def _sinks_of_next_layer(mapping: dict) -> dict:
    def shifted(m):
        layer = int(m.gguf.split(".")[1])
        return replace(m, gguf=f"blk.{(layer + 1) % 3}.attn_sinks.weight")

    return {hf: shifted(m) if hf.endswith(".sinks") else m for hf, m in mapping.items()}


def _sinks_dropped(mapping: dict) -> dict:
    return {hf: m for hf, m in mapping.items() if not hf.endswith(".sinks")}


def _not_truncated(monkeypatch: pytest.MonkeyPatch) -> None:
    fill = gguf_config._gpt_oss

    def untruncated(f, config):
        fill(f, config)
        config["rope_parameters"]["truncate"] = False

    monkeypatch.setitem(gguf_config.FAMILIES, "gpt-oss", replace(gguf_config.FAMILIES["gpt-oss"], fill=untruncated))


MUTANTS = {
    "gate and up not re-interleaved": _not_interleaved,
    "gate and up swapped": lambda mp: _remap(mp, _swapped),
    "expert biases not re-interleaved": _biases_not_interleaved,
    "sinks from the next layer": lambda mp: _remap(mp, _sinks_of_next_layer),
    "sinks dropped": lambda mp: _remap(mp, _sinks_dropped),
    "experts 0 and 1 permuted": _permuted_experts,
    "yarn correction range not truncated": _not_truncated,
}


@pytest.mark.parametrize("kind", ("F32", "MXFP4"))
@pytest.mark.parametrize("mutant", list(MUTANTS))
def test_mutant_layout_bug_fails(files, kind, mutant, tmp_path, monkeypatch):
    gguf, model = files.gguf(kind), files.model(kind)
    MUTANTS[mutant](monkeypatch)
    try:
        build(BuildOptions(str(gguf), tmp_path / "pkg", precision="fp32", smoke=False))
    except InputError:
        assert mutant == "sinks dropped"  # the spec's tensor missing: refused, not exported without it
        return
    assert logits_error(tmp_path / "pkg", model) > 100 * BOUND


def test_an_up_tensor_without_its_gate_is_refused():
    """A file missing half of an expert pair (or with mismatched halves) is one line, not a partial model."""
    shapes = {"blk.0.ffn_up_exps.weight": (8, 64, 64), "blk.0.ffn_gate_exps.weight": (8, 32, 64)}
    with pytest.raises(InputError, match=r"no matching 'blk\.0\.ffn_up_exps\.weight'"):
        gpt_oss.map_gpt_oss(list(shapes), shapes)
    with pytest.raises(InputError, match="has no gate tensor"):
        gpt_oss.map_gpt_oss(["blk.0.ffn_up_exps.weight"], shapes)


def test_a_config_beside_the_file_is_compared_on_its_rope_base(files, tmp_path):
    """gpt-oss's rope base lives in rope_parameters on both sides: a config.json beside the file that
    disagrees with the metadata's rope.freq_base is named in the note (and used)."""
    from gqa_export.source.gguf import materialize

    beside = tmp_path / "side"
    beside.mkdir()
    config = json.loads((files.float / "config.json").read_text())
    (beside / "config.json").write_text(json.dumps(config))
    _, origin = materialize(files.gguf("F32"), beside)
    assert not [n for n in origin.notes if "disagrees" in n]
    config["rope_parameters"]["rope_theta"] = 10000.0
    (beside / "config.json").write_text(json.dumps(config))
    _, origin = materialize(files.gguf("F32"), beside)
    assert any("rope_theta 150000.0 (GGUF) vs 10000.0 (config.json)" in n for n in origin.notes), origin.notes
