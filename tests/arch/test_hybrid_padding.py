"""Hybrid decoders in a batch of prompts of different lengths (docs/hybrid-state.md §1.4).

onnxruntime-genai takes such a batch right-padded with pad_token_id and marks the trailing padding
with zeros in attention_mask; the recurrent-state mixers (short convolution, gated DeltaNet, Mamba,
Mamba2) must then leave each row's conv and recurrent state as they were at its last real token, so
that every row generates what HF generates from its own unpadded prompt. That check, batch 2
through ORT (logits) and onnxruntime-genai (greedy tokens), is every hybrid row's in the registry
(tests/families.py `hybrid`, tests/arch/test_families.py test_ragged_batch_*); here: the mutants
that let the padding in, which its ORT measure must catch, and left padding where no
GroupQueryAttention is in the way."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
from families import (
    BY_NAME,
    ORT_PAD,
    RAGGED,
    RAGGED_DECODE,
    require_registered,
    skip_where_the_reference_differs,
)
from reference import hf_model, ort_padded_batch, ragged_logits_error

from gqa_export.pipeline import BuildOptions, build

GRANITE = "granitemoehybrid"


def _copy(package: Path, to: Path) -> Path:
    shutil.copytree(package, to)
    return to


def _registered(family: str) -> None:
    require_registered(family)
    skip_where_the_reference_differs(BY_NAME[family])


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
    assert ragged_logits_error(package, hf_model(builds.checkpoint(family))) > 1e-2  # the registry's bound: 1e-4


@pytest.fixture(scope="module")
def conv_only(tmp_path_factory) -> tuple[Path, Path]:
    """An LFM2 of short-convolution layers only: no GroupQueryAttention, which reads a batch as
    right-padded whatever the mask says (docs/ort-ops.md §1.4), so left padding can be checked."""
    from dense_models import save_dense

    root = tmp_path_factory.mktemp("conv_only")
    checkpoint = save_dense(root / "ckpt", "lfm2", layer_types=["conv"] * 4)
    build(BuildOptions(str(checkpoint), root / "pkg"))  # its smoke run: the only genai run of a conv-only LFM2
    return checkpoint, root / "pkg"


def test_left_padded_batch_equals_hf_without_attention_layers(conv_only):
    """Left padding (zeros before the tokens): each row's prompt logits equal HF's with the same
    padding and its own unpadded run, and so do the decode steps; HF zeroes the mixer input at the
    padding, the graph too, so a row's state stays zero until its first token."""
    import torch

    checkpoint, package = conv_only
    hf = hf_model(checkpoint)
    assert ragged_logits_error(package, hf, left=True, cached=False) < 1e-4
    prompts = [list(p) for p in RAGGED]
    width = max(map(len, prompts))
    ids = torch.tensor([[ORT_PAD] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    with torch.no_grad():
        padded = hf(ids, attention_mask=mask, use_cache=False).logits.numpy()
    got = ort_padded_batch(package, prompts, [list(d) for d in RAGGED_DECODE], ORT_PAD, left=True)
    for row, prompt in enumerate(prompts):
        assert np.abs(got[row][: len(prompt)] - padded[row, width - len(prompt) :]).max() < 1e-4


def test_mutant_input_kept_at_padding_fails_left_padding(conv_only, tmp_path):
    checkpoint, package = conv_only
    package = _copy(package, tmp_path / "pkg")
    _mutate(package, _input_kept)
    assert ragged_logits_error(package, hf_model(checkpoint), left=True, cached=False) > 1e-2
