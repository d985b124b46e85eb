"""Dory's nGPT layers and its middle layers run in a loop (registry row dory; graph/ngpt.py,
graph/ngpt_scales.py, graph/recurrent_loop.py; docs/coverage.md, the dory section): each planted bug must
move the prompt + decode logits far past the registry's tolerance (1e-4).

Package mutants (planted into a copy of the correct package, tests/mutants.py): the interpolation rates set
to 1 (each block's output replacing the stream: no interpolation) or without their alpha_init /
initializer_range factor, every L2 norm computed as an RMSNorm (the 1 / sqrt(d) weight set to ones), the
query's per-channel scale dropped, the output gate's and the MLP's scales dropped, the logit scale dropped,
and pass 1 of the loop reading pass 0's KV cache (one cache shared by two passes: the prompt is unchanged,
the decode steps are not). Build mutants: the loop run once more or once less than the config says (the
config edited, HF's reference from the original), and the stream reset before each pass dropped. Also:
each cache holds what HF's cache holds at the same index (HF's per_loop order), the shared weights are
written once, the released checkpoint layout (attention / MLP blocks as layers 2i / 2i + 1) and a config.json
without the "mlp" entries give the same package. The last_loop cache mode (row dory_last_loop): its caches are
HF's, only the last pass writes them; mutants: exported as per_loop, an earlier pass reading another layer's
cache."""

from __future__ import annotations

import json
import shutil

import numpy as np
import onnx
import pytest
from families import PROMPT
from mutants import copy_package, edit_initializers, times
from reference import OrtStepper, hf_logits, hf_model, ort_prefill_and_decode

TOLERANCE = 1e-4  # the registry's (tests/arch/test_families.py)
FAR = 100 * TOLERANCE
# the row's config (tests/llama_like_models.py): 1 input layer, 2 recurrent run 3 times, 1 output layer
STORED, LOOPS = 4, 3
# HF's cache order: stored layers 0-3 (pass 0 in 1-2), then pass 1's (4, 5), pass 2's (6, 7);
# graph layers in execution order: input 0, passes 1-6, output 7
SLOTS = (0, 1, 2, 4, 5, 6, 7, 3)
RATE = 0.05 / 0.1  # ngpt_alpha_init / initializer_range of the row's config


def _max_error(package, checkpoint) -> float:
    tokens, got = ort_prefill_and_decode(package, list(PROMPT), steps=2)
    return float(np.abs(got - hf_logits(hf_model(checkpoint), tokens, len(PROMPT))).max())


def test_the_correct_dory_package_passes(builds):
    assert _max_error(builds.package("dory"), builds.checkpoint("dory")) < TOLERANCE


def test_each_cache_holds_hfs_cache_at_its_index(builds):
    """After the prompt, past_key_values.N holds what HF's cache.layers[N] holds (the per_loop order:
    the extra passes' caches appended after the stored layers')."""
    import torch

    model = hf_model(builds.checkpoint("dory"))
    with torch.no_grad():
        cache = model(torch.tensor([list(PROMPT)]), use_cache=True).cache
    assert len(cache.layers) == STORED + (LOOPS - 1) * 2
    stepper = OrtStepper(builds.package("dory"))
    stepper.step(list(PROMPT))
    n = len(PROMPT)
    for slot, layer in enumerate(cache.layers):
        for part, hf in (("key", layer.keys), ("value", layer.values)):
            ours = stepper.kv[f"past_key_values.{slot}.{part}"].numpy()[:, :, :n]
            kept = hf.shape[2]  # a sliding layer keeps the last window's tokens
            np.testing.assert_allclose(ours[:, :, n - kept :], hf.numpy(), atol=1e-5, err_msg=f"{slot}.{part}")


def test_each_stored_layer_is_written_once(builds):
    model = onnx.load(str(builds.package("dory") / "model.onnx"), load_external_data=False)
    matrices = [t.name for t in model.graph.initializer if t.name.endswith("proj.weight")]
    assert len(matrices) == len(set(matrices)) and {m.split(".")[2] for m in matrices} == {"0", "1", "2", "3"}
    gqa = [n for n in model.graph.node if n.op_type == "GroupQueryAttention"]
    assert [n.input[3] for n in gqa] == [f"past_key_values.{s}.key" for s in SLOTS]


def _share_cache(package, layer: int, source: int) -> list[str]:
    path = package / "model.onnx"
    model = onnx.load(str(path), load_external_data=False)
    rewired = []
    for node in model.graph.node:
        for k, name in enumerate(node.input):
            for part in ("key", "value"):
                if name == f"past_key_values.{layer}.{part}":
                    node.input[k] = f"past_key_values.{source}.{part}"
                    rewired.append(name)
    onnx.save(model, str(path))
    return rewired


def _ones(values: np.ndarray) -> np.ndarray:
    return np.ones_like(values)


PACKAGE_MUTANTS = {
    "interpolation-rate-one": lambda p: edit_initializers(p, "model.layers.*.lambda_*", _ones),
    "interpolation-rate-unscaled": lambda p: edit_initializers(p, "model.layers.*.lambda_*", times(1 / RATE)),
    "l2-norms-as-rms": lambda p: edit_initializers(p, "const.*l2_weight*", _ones),
    "query-channel-scale-dropped": lambda p: edit_initializers(p, "model.layers.*.self_attn.sqk", _ones),
    "gate-scale-dropped": lambda p: edit_initializers(p, "model.layers.*.self_attn.s_gate", _ones),
    "mlp-scales-dropped": lambda p: edit_initializers(p, "model.layers.*.mlp.suv_*", _ones),
    "logit-scale-dropped": lambda p: edit_initializers(p, "lm_head.logit_scale", _ones),
    # pass 1's first layer (cache 4) reading pass 0's (cache 1)
    "per-pass-cache-shared": lambda p: _share_cache(p, layer=4, source=1),
}


@pytest.mark.parametrize("mutant", PACKAGE_MUTANTS)
def test_mutant_dory_package_fails_hf_parity(builds, tmp_path, mutant):
    broken = copy_package(builds.package("dory"), tmp_path / mutant)
    assert PACKAGE_MUTANTS[mutant](broken)
    assert _max_error(broken, builds.checkpoint("dory")) > FAR


def _with_config(builds, tmp_path, name: str, **changes):
    checkpoint = shutil.copytree(builds.checkpoint("dory"), tmp_path / name)
    config = json.loads((checkpoint / "config.json").read_text())
    (checkpoint / "config.json").write_text(json.dumps({**config, **changes}))
    return checkpoint


@pytest.mark.parametrize("loops", [LOOPS - 1, LOOPS + 1])
def test_mutant_loop_count_off_by_one_fails_hf_parity(builds, tmp_path, loops):
    from gqa_export.pipeline import BuildOptions, build

    checkpoint = _with_config(builds, tmp_path, f"loops{loops}", n_recurrent_loops=loops)
    build(BuildOptions(str(checkpoint), tmp_path / "package", smoke=False, text_only=True))
    assert _max_error(tmp_path / "package", builds.checkpoint("dory")) > FAR


def test_mutant_loop_stream_reset_dropped_fails_hf_parity(builds, tmp_path, monkeypatch):
    from gqa_export.graph.recurrent_loop import LoopStream
    from gqa_export.pipeline import BuildOptions, build

    monkeypatch.setattr(LoopStream, "enter", lambda self, i, h: h)
    build(BuildOptions(str(builds.checkpoint("dory")), tmp_path / "package", smoke=False, text_only=True))
    assert _max_error(tmp_path / "package", builds.checkpoint("dory")) > FAR


def _same_package(builds, tmp_path, checkpoint) -> None:
    from gqa_export.pipeline import BuildOptions, build

    build(BuildOptions(str(checkpoint), tmp_path / "package", smoke=False, text_only=True))
    for name in ("model.onnx", "model.onnx.data"):
        assert (tmp_path / "package" / name).read_bytes() == (builds.package("dory") / name).read_bytes(), name


def test_a_config_without_mlp_entries_gives_the_same_package(builds, tmp_path):
    """The class's own spelling: layer_types one per layer and the counts not doubled."""
    config = json.loads((builds.checkpoint("dory") / "config.json").read_text())
    assert "mlp" in config["layer_types"] and config["num_hidden_layers"] == 2 * STORED  # as released
    halved = {
        k: config[k] // 2 for k in ("num_hidden_layers", "n_input_layers", "n_recurrent_layers", "n_output_layers")
    }
    checkpoint = _with_config(builds, tmp_path, "halved", layer_types=config["layer_types"][::2], **halved)
    _same_package(builds, tmp_path, checkpoint)


def test_the_released_layer_pair_layout_gives_the_same_package(builds, tmp_path):
    """Released checkpoints store layer i's attention as block 2i (mixer.*, attn_alpha) and its MLP as block
    2i + 1 (mixer.*, mlp_alpha), read as transformers' LayerPairCollapse reads them."""
    import re

    from safetensors.numpy import load_file, save_file

    checkpoint = shutil.copytree(builds.checkpoint("dory"), tmp_path / "pairs")
    tensors = load_file(checkpoint / "model.safetensors")

    def paired(name: str) -> str:
        match = re.match(r"(backbone\.layers\.)(\d+)\.(.*)", name)
        if match is None:
            return name
        head, i, rest = match[1], int(match[2]), match[3]
        if rest == "lambda_1":
            return f"{head}{2 * i}.attn_alpha"
        if rest == "lambda_2":
            return f"{head}{2 * i + 1}.mlp_alpha"
        block, _, leaf = rest.partition(".")
        return f"{head}{2 * i + (block == 'mlp')}.mixer.{leaf}"

    renamed = {paired(name): tensor for name, tensor in tensors.items()}
    assert "backbone.layers.7.mixer.down_proj.weight" in renamed and "backbone.layers.6.attn_alpha" in renamed
    save_file(renamed, checkpoint / "model.safetensors", metadata={"format": "pt"})
    _same_package(builds, tmp_path, checkpoint)


def test_last_loop_caches_are_hfs_and_only_the_last_pass_writes(builds):
    """last_loop: one cache per stored layer (HF's cache.layers[0:4]; its readers appended after them hold
    nothing of their own), equal to HF's after the prompt; the earlier passes' attentions read slots 1 and 2
    and their presents are not outputs."""
    import torch

    model = hf_model(builds.checkpoint("dory_last_loop"))
    with torch.no_grad():
        cache = model(torch.tensor([list(PROMPT)]), use_cache=True).cache
    package = builds.package("dory_last_loop")
    graph = onnx.load(str(package / "model.onnx"), load_external_data=False).graph
    assert sorted(i.name for i in graph.input if i.name.endswith(".key")) == [
        f"past_key_values.{s}.key" for s in range(4)
    ]
    gqa = [n for n in graph.node if n.op_type == "GroupQueryAttention"]
    assert [n.input[3] for n in gqa] == [f"past_key_values.{s}.key" for s in (0, 1, 2, 1, 2, 1, 2, 3)]
    outputs = {o.name for o in graph.output}
    assert [n.output[1] in outputs for n in gqa] == [True, False, False, False, False, True, True, True]
    stepper = OrtStepper(package)
    stepper.step(list(PROMPT))
    n = len(PROMPT)
    for slot in range(STORED):
        layer = cache.layers[slot]
        for part, hf in (("key", layer.keys), ("value", layer.values)):
            ours = stepper.kv[f"past_key_values.{slot}.{part}"].numpy()[:, :, :n]
            np.testing.assert_allclose(ours[:, :, n - hf.shape[2] :], hf.numpy(), atol=1e-5, err_msg=f"{slot}.{part}")


def test_mutant_last_loop_exported_as_per_loop_fails_hf_parity(builds, tmp_path):
    """The earlier passes writing caches of their own (per_loop) where HF's last_loop has them read the last
    pass's: the prompt agrees, the decode steps do not."""
    from gqa_export.pipeline import BuildOptions, build

    checkpoint = shutil.copytree(builds.checkpoint("dory_last_loop"), tmp_path / "per_loop")
    config = json.loads((checkpoint / "config.json").read_text())
    (checkpoint / "config.json").write_text(json.dumps({**config, "recurrent_kv_cache_mode": "per_loop"}))
    build(BuildOptions(str(checkpoint), tmp_path / "package", smoke=False, text_only=True))
    assert _max_error(tmp_path / "package", builds.checkpoint("dory_last_loop")) > FAR


def test_mutant_last_loop_earlier_pass_reading_another_layers_cache_fails_hf_parity(builds, tmp_path):
    package = copy_package(builds.package("dory_last_loop"), tmp_path / "rewired")
    path = package / "model.onnx"
    model = onnx.load(str(path), load_external_data=False)
    first = next(n for n in model.graph.node if n.op_type == "GroupQueryAttention" and n.input[3].endswith(".1.key"))
    first.input[3], first.input[4] = "past_key_values.2.key", "past_key_values.2.value"
    onnx.save(model, str(path))
    assert _max_error(package, builds.checkpoint("dory_last_loop")) > FAR


def test_rope_runs_before_gqa_and_the_static_graphs_refuse_the_loop(builds, tmp_path):
    """The query scale follows RoPE and differs within a rotation pair: every GroupQueryAttention gets
    rotated q / k (do_rotary 0). The static-shape (QNN) pair is refused in one line (it names the output
    gate, the first of its reasons; the loop is another)."""
    from gqa_export.errors import InputError
    from gqa_export.pipeline import BuildOptions, build

    model = onnx.load(str(builds.package("dory") / "model.onnx"), load_external_data=False)
    gqa = [n for n in model.graph.node if n.op_type == "GroupQueryAttention"]
    assert all({a.name: a.i for a in n.attribute}.get("do_rotary", 0) == 0 for n in gqa)
    with pytest.raises(InputError, match=r"static-shape \(QNN\) graph cannot hold") as refused:
        build(BuildOptions(str(builds.checkpoint("dory")), tmp_path / "qnn", ep="qnn", smoke=False, text_only=True))
    assert "\n" not in str(refused.value)
