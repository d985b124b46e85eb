"""Mutants of HRM-Text's weight-shared stacks run in cycles (graph/recurrent_stacks.py, registry row hrm_text):
each planted into a copy of the correct package (tests/mutants.py), or built from a changed schedule, must move
the prompt + decode logits far past the registry's tolerance (1e-4).

Package mutants: z_L_init zeroed (the low stream starting from zeros, as at HF's init), the embedding scale
dropped (1 instead of embedding_scale), the output gate constant (gate_proj zeroed: sigmoid 0.5 everywhere),
and two invocations of one stored layer sharing a KV cache slot (graph layer 2, the second low-stack call's
first layer, reading layer 0's past: the prompt is unchanged, the decode steps are not). Schedule mutant: the
stream order swapped (each high cycle running the H stack before its L_cycles L calls, so the lm_head reads
the low stream), built through the pipeline with the schedule changed. Also: each stored layer's matrices
written once, one cache per graph layer, and transformers' own checkpoint layout giving the same package as
the hub's fused gqkv_proj / gate_up_proj."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from families import PROMPT
from mutants import copy_package, edit_initializers, times
from reference import hf_logits, hf_model, ort_prefill_and_decode

TOLERANCE = 1e-4  # the registry's (tests/arch/test_derived_mutants.py _parity)
FAR = 100 * TOLERANCE


def _max_error(package, checkpoint) -> float:
    tokens, got = ort_prefill_and_decode(package, list(PROMPT), steps=2)
    return float(np.abs(got - hf_logits(hf_model(checkpoint), tokens, len(PROMPT))).max())


def test_the_correct_hrm_text_package_passes(builds):
    assert _max_error(builds.package("hrm_text"), builds.checkpoint("hrm_text")) < TOLERANCE


def test_each_stored_layer_is_written_once(builds):
    model = onnx.load(str(builds.package("hrm_text") / "model.onnx"), load_external_data=False)
    matrices = [t.name for t in model.graph.initializer if t.name.endswith("proj.weight")]
    # 2 stacks x 2 stored layers, each matrix once, for 12 graph layers
    layers = [name.rsplit(".", 3)[0] for name in matrices]
    stored = {f"model.{s}_module.layers.{i}" for s in "LH" for i in range(2)}
    assert len(matrices) == len(set(matrices)) and set(layers) == stored
    assert all(layers.count(layer) == len(matrices) // 4 for layer in stored)
    gqa = [n for n in model.graph.node if n.op_type == "GroupQueryAttention"]
    assert len(gqa) == 12 and {n.input[3] for n in gqa} == {f"past_key_values.{i}.key" for i in range(12)}


def test_transformers_own_layout_gives_the_same_package(builds, tmp_path):
    """save_original_format=False keeps gate/q/k/v, gate/up and self_attn.o_proj apart: the same package."""
    from dense_models import build_model
    from tiny_models import save_tokenizer

    from gqa_export.pipeline import BuildOptions, build

    checkpoint = tmp_path / "own_layout"
    build_model("hrm_text").save_pretrained(checkpoint, save_original_format=False)
    save_tokenizer(checkpoint, vocab_size=384)
    header = (checkpoint / "model.safetensors").read_bytes()[:8192].decode("latin-1")
    assert "L_module.layers.0.self_attn.q_proj.weight" in header and "gqkv_proj" not in header
    build(BuildOptions(str(checkpoint), tmp_path / "package", smoke=False, text_only=True))
    for name in ("model.onnx", "model.onnx.data"):
        assert (tmp_path / "package" / name).read_bytes() == (builds.package("hrm_text") / name).read_bytes(), name


def _share_cache_slot(package, layer: int, source: int) -> None:
    path = package / "model.onnx"
    model = onnx.load(str(path), load_external_data=False)
    rewired = 0
    for node in model.graph.node:
        for k, name in enumerate(node.input):
            for part in ("key", "value"):
                if name == f"past_key_values.{layer}.{part}":
                    node.input[k] = f"past_key_values.{source}.{part}"
                    rewired += 1
    assert rewired == 2
    onnx.save(model, str(path))


PACKAGE_MUTANTS = {
    "z-l-init-zeroed": lambda p: edit_initializers(p, "model.z_L_init", times(0.0)),
    "embedding-scale-dropped": lambda p: edit_initializers(p, "const.scale", lambda v: np.ones_like(v)),
    "output-gate-constant": lambda p: edit_initializers(
        p, "model.*_module.layers.*.self_attn.gate_proj.weight", times(0.0)
    ),
    "cache-slot-shared": lambda p: _share_cache_slot(p, layer=2, source=0) or ["rewired"],
}


@pytest.mark.parametrize("mutant", PACKAGE_MUTANTS)
def test_mutant_hrm_text_package_fails_hf_parity(builds, tmp_path, mutant):
    broken = copy_package(builds.package("hrm_text"), tmp_path / mutant)
    assert PACKAGE_MUTANTS[mutant](broken)
    assert _max_error(broken, builds.checkpoint("hrm_text")) > FAR


def test_mutant_hrm_text_stream_order_swapped_fails_hf_parity(builds, tmp_path, monkeypatch):
    from gqa_export.model.stream import RecurrentStackDims
    from gqa_export.pipeline import BuildOptions, build

    checkpoint = builds.checkpoint("hrm_text")
    # each high cycle's first invocation runs the H stack, then the L stack L_cycles times
    monkeypatch.setattr(
        RecurrentStackDims, "is_high", lambda self, i: (i // self.per_stack) % (self.low_cycles + 1) == 0
    )
    build(BuildOptions(str(checkpoint), tmp_path / "swapped", smoke=False, text_only=True))
    assert _max_error(tmp_path / "swapped", checkpoint) > FAR


def test_each_graph_layer_reads_its_invocations_stored_layer():
    from gqa_export.arch import SPECS
    from gqa_export.errors import InputError
    from gqa_export.model.stream import recurrent_stack_dims, stack_layer_prefixes

    spec, values = SPECS["hrm_text"], {"layers_per_stack": 2, "high_cycles": 2, "low_cycles": 2}
    stacks = recurrent_stack_dims(values.get, spec, 12)
    assert stacks is not None and stacks.invocations == 6
    low, high = ["L_module.layers.0.", "L_module.layers.1."], ["H_module.layers.0.", "H_module.layers.1."]
    assert stack_layer_prefixes(spec.recurrent_stacks, stacks) == tuple(2 * (low + low + high))
    with pytest.raises(InputError, match="num_layers_per_stack 2"):  # a config not rewritten by its class
        recurrent_stack_dims(values.get, spec, 2)


def test_a_config_holding_the_per_stack_count_exports_the_same_model(builds, tmp_path):
    """A config.json as first written (num_hidden_layers the per-stack count, no num_layers_per_stack, no
    embedding_scale: 1 / initializer_range) is read through the class, which rewrites both."""
    import json
    import shutil

    from gqa_export.pipeline import BuildOptions, build

    checkpoint = shutil.copytree(builds.checkpoint("hrm_text"), tmp_path / "first_written")
    config = json.loads((checkpoint / "config.json").read_text())
    del config["num_layers_per_stack"], config["embedding_scale"]
    (checkpoint / "config.json").write_text(json.dumps({**config, "num_hidden_layers": 2}))
    build(BuildOptions(str(checkpoint), tmp_path / "package", smoke=False, text_only=True))
    assert (
        json.loads((tmp_path / "package" / "genai_config.json").read_text())["model"]["decoder"]["num_hidden_layers"]
        == 12
    )
    assert _max_error(tmp_path / "package", checkpoint) < TOLERANCE
