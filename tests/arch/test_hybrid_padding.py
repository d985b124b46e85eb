"""Hybrid decoders in a batch of prompts of different lengths (docs/hybrid-state.md §1.4).

onnxruntime-genai takes such a batch right-padded with pad_token_id and marks the trailing padding
with zeros in attention_mask; the recurrent-state mixers (short convolution, gated DeltaNet, Mamba2)
must then leave each row's conv and recurrent state as they were at its last real token, so that
every row generates what HF generates from its own unpadded prompt. The family checks of
tests/test_hybrid.py and tests/test_families.py run batch 1; here: batch 2 through ORT (logits) and
through onnxruntime-genai (greedy tokens), left padding where no GroupQueryAttention is in the way,
and mutants that let the padding in."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
from families import BY_NAME, REGISTERED, skip_where_the_reference_differs
from reference import assert_varied, genai_padded_batch_greedy, hf_generate, hf_logits, hf_model, ort_padded_batch

from gqa_export.pipeline import BuildOptions, build

GRANITE = "granitemoehybrid"


def _copy(package: Path, to: Path) -> Path:
    shutil.copytree(package, to)
    return to


# A batch of two prompts of different lengths (docs/hybrid-state.md §1.4): onnxruntime-genai takes it
# right-padded with pad_token_id (5 in every tiny checkpoint) and marks the trailing padding with
# zeros in attention_mask; each row must come out as HF on its own unpadded prompt. The short row
# is longer than every conv kernel (3 and 4), the long one ends well past it.
RAGGED = ([0, 45, 319, 81, 17], [(7 * i + 3) % 380 for i in range(13)])
RAGGED_DECODE = ([17, 99, 3, 250], [64, 12, 200, 7])
PAD = 5
# ORT reads padding from attention_mask alone: its runs pad with another id, since HF zero-initialises
# pad_token_id's embedding row, which would zero the mixers' input at the padding whatever the mask
ORT_PAD = 9
HYBRIDS = (
    "lfm2",
    "lfm2_moe",
    "qwen3_5_text",
    "qwen3_5_moe_text",
    GRANITE,
    "jamba",
    "falcon_h1",
    "qwen3_next",
    "nemotron_h",
    "nemotron_h_moe",
)


def _registered(family: str, generation: bool = False) -> None:
    if BY_NAME[family] not in REGISTERED:
        pytest.skip(f"{family} needs a newer transformers")
    skip_where_the_reference_differs(BY_NAME[family], generation)


def _hf_rows(
    model, prompts: tuple[list[int], ...], decode: tuple[list[int], ...], cached: bool = True
) -> list[np.ndarray]:
    """HF logits per row, the row alone: its prompt in one forward, then its decode tokens one at a
    time through HF's cache, as generation runs them (Nemotron-H's dt floor applies to prompts
    only, so an uncached forward over prompt + decode tokens is not what HF generates from);
    `cached` False: one uncached forward over both (an LFM2 without attention layers cannot use
    HF's cache, docs/hybrid-state.md §4)."""
    import torch

    if cached:
        return [hf_logits(model, p + d, len(p)) for p, d in zip(prompts, decode, strict=True)]
    with torch.no_grad():
        rows = [torch.tensor([p + d]) for p, d in zip(prompts, decode, strict=True)]
        return [model(row, use_cache=False).logits[0].numpy() for row in rows]


def _ragged_error(package: Path, model, left: bool = False) -> float:
    """Max |ORT - HF| over each row's real prompt positions and its decode steps."""
    got = ort_padded_batch(package, list(RAGGED), list(RAGGED_DECODE), ORT_PAD, left=left)
    want = _hf_rows(model, RAGGED, RAGGED_DECODE, cached=not left)
    return max(float(np.abs(g - w).max()) for g, w in zip(got, want, strict=True))


@pytest.mark.parametrize("family", HYBRIDS)
def test_ragged_batch_through_ort_equals_hf_row_by_row(builds, family):
    """Right-padded batch 2 through ORT as genai feeds it: prompt and decode-step logits of each row
    within 1e-4 of HF on the unpadded row (HF's own right-padded run lets the padding into the
    states: its decode steps differ from its unpadded ones)."""
    _registered(family)
    assert _ragged_error(builds.package(family), hf_model(builds.checkpoint(family))) < 1e-4


@pytest.mark.parametrize("family", HYBRIDS)
def test_ragged_batch_through_genai_equals_hf_generate_row_by_row(builds, family):
    _registered(family, generation=True)
    got = genai_padded_batch_greedy(builds.package(family), list(RAGGED), PAD, 20)
    hf = hf_model(builds.checkpoint(family))
    assert got == [hf_generate(hf, p, 20) for p in RAGGED]
    assert_varied(got)


def _mutate(package: Path, edit) -> None:
    model = onnx.load(str(package / "model.onnx"), load_external_data=False)
    edit(model.graph)
    onnx.save(model, str(package / "model.onnx"))


def _ones_mask(graph) -> None:
    """The mixers' padding read from an all-ones mask: padding enters the states."""
    node = next(n for n in graph.node if n.name.startswith("/model/state_padding/") and n.op_type == "Slice")
    graph.node.insert(0, onnx.helper.make_node("Max", ["attention_mask", "mutant.one"], ["mutant.ones"]))
    graph.initializer.append(onnx.numpy_helper.from_array(np.ones(1, np.int64), "mutant.one"))
    node.input[0] = "mutant.ones"


def _input_kept(graph) -> None:
    """The mixers' input not zeroed at pad positions (HF's apply_mask_to_padding_states left out)."""
    graph.initializer.append(onnx.numpy_helper.from_array(np.ones(1, np.float32), "mutant.one"))
    nodes = [n for n in graph.node if n.name.endswith("keep_tokens")]
    assert nodes
    for node in nodes:
        node.input[1] = "mutant.one"


@pytest.mark.parametrize("family", ["lfm2", "qwen3_5_text", GRANITE])
def test_mutant_padding_not_applied_fails_the_ragged_batch(builds, tmp_path, family):
    _registered(family)
    package = _copy(builds.package(family), tmp_path / "pkg")
    _mutate(package, _ones_mask)
    assert _ragged_error(package, hf_model(builds.checkpoint(family))) > 1e-2


@pytest.fixture(scope="module")
def conv_only(tmp_path_factory) -> tuple[Path, Path]:
    """An LFM2 of short-convolution layers only: no GroupQueryAttention, which reads a batch as
    right-padded whatever the mask says (docs/ort-ops.md §1.4), so left padding can be checked."""
    from dense_models import save_dense

    root = tmp_path_factory.mktemp("conv_only")
    checkpoint = save_dense(root / "ckpt", "lfm2", layer_types=["conv"] * 4)
    build(BuildOptions(str(checkpoint), root / "pkg"))
    return checkpoint, root / "pkg"


def test_left_padded_batch_equals_hf_without_attention_layers(conv_only):
    """Left padding (zeros before the tokens): each row's prompt logits equal HF's with the same
    padding and its own unpadded run, and so do the decode steps; HF zeroes the mixer input at the
    padding, the graph too, so a row's state stays zero until its first token."""
    import torch

    checkpoint, package = conv_only
    hf = hf_model(checkpoint)
    assert _ragged_error(package, hf, left=True) < 1e-4
    width = max(map(len, RAGGED))
    ids = torch.tensor([[ORT_PAD] * (width - len(p)) + p for p in RAGGED])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in RAGGED])
    with torch.no_grad():
        padded = hf(ids, attention_mask=mask, use_cache=False).logits.numpy()
    got = ort_padded_batch(package, list(RAGGED), list(RAGGED_DECODE), ORT_PAD, left=True)
    for row, prompt in enumerate(RAGGED):
        assert np.abs(got[row][: len(prompt)] - padded[row, width - len(prompt) :]).max() < 1e-4


def test_mutant_input_kept_at_padding_fails_left_padding(conv_only, tmp_path):
    checkpoint, package = conv_only
    package = _copy(package, tmp_path / "pkg")
    _mutate(package, _input_kept)
    assert _ragged_error(package, hf_model(checkpoint), left=True) > 1e-2
