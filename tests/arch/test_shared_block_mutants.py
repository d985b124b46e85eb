"""Mutants of Zamba2's shared transformer blocks (gqa_export/graph/shared_block.py, docs/hybrid-state.md
§8.12), each planted into a copy of the registry package (tests/families.py zamba2: Mamba2 on 5
layers, shared blocks at layers 1, 3 and 4 = uses 0, 1, 2 of blocks 0, 1, 0) and required to break
HF parity, the bound the registry checks (1e-4): the embeddings not concatenated (the layer input
twice), the per-use adapters dropped, the blocks not alternating (use 2 running block 1's weights),
two uses sharing one KV cache (use 2 attending over use 0's past), and the scores scaled by
head_dim ** -0.5 instead of (head_dim / 2) ** -0.5. And the Mamba2 mixer's two Zamba2 numerics: the
gated norm at the model's rms_norm_eps (1e-6) instead of its hard-coded 1e-5, and the prompt-only dt
floor at time_step_min (0.3 in the tiny config) dropped. Zamba (the same layer layout, one block, Mamba
(v1) in two heads): the embeddings, the shared cache and the score scale as Zamba2's, and its mixer's
in_proj read in halves instead of de-interleaved, head 1 given head 0's x_proj (one B and C for
both), and the dt bias dropped."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
from mutants import copy_package, edit_initializers, times
from reference import parity_error

ZAMBA2, ZAMBA = "zamba2", "zamba"
LAST_USE = "/model/layers.4/"  # use 2: block 0 again, its own cache past_key_values.4.*


def _rewire(package: Path, change: Callable[[onnx.NodeProto], bool]) -> None:
    """Edit model.onnx's nodes in place (initializers untouched: their external data stays valid);
    `change` returns whether it changed the node, and some node must change."""
    path = package / "model.onnx"
    model = onnx.load(str(path), load_external_data=False)
    assert sum(change(node) for node in model.graph.node), "the mutant changed no node"
    onnx.save(model, str(path))


def _embeddings_not_concatenated(node: onnx.NodeProto) -> bool:
    if not node.name.endswith("/with_embeddings"):
        return False
    node.input[1] = node.input[0]  # [h | h]: the layer's input twice, no embeddings
    return True


def _block_not_alternating(node: onnx.NodeProto) -> bool:
    """Use 2 reads block 1's shared weights (layer 3's copy) instead of block 0's; its adapters stay."""
    if not node.name.startswith(LAST_USE):
        return False
    hits = [j for j, name in enumerate(node.input) if name.startswith("model.layers.1.shared_transformer.")
            and "adapter_list" not in name]  # fmt: skip
    for j in hits:
        node.input[j] = node.input[j].replace("model.layers.1.", "model.layers.3.", 1)
    return bool(hits)


def _cache_shared(node: onnx.NodeProto) -> bool:
    """Use 2 attends over use 0's past keys and values (one cache for both uses)."""
    if not node.name.startswith(LAST_USE) or node.op_type != "GroupQueryAttention":
        return False
    node.input[3], node.input[4] = "past_key_values.1.key", "past_key_values.1.value"
    return True


def _full_head_dim_scale(node: onnx.NodeProto) -> bool:
    if node.op_type != "GroupQueryAttention":
        return False
    (scale,) = [a for a in node.attribute if a.name == "scale"]
    scale.f = 32**-0.5  # head_dim 32: the usual scale, not (32 / 2) ** -0.5
    return True


def _gated_norm_at_model_eps(node: onnx.NodeProto) -> bool:
    if not node.name.endswith("/gated_norm"):
        return False
    (eps,) = [a for a in node.attribute if a.name == "epsilon"]
    eps.f = 1e-6  # the tiny config's rms_norm_eps
    return True


REWIRED = {
    "embeddings-not-concatenated": _embeddings_not_concatenated,
    "blocks-not-alternating": _block_not_alternating,
    "uses-share-one-cache": _cache_shared,
    "scores-by-full-head-dim": _full_head_dim_scale,
    "gated-norm-at-model-eps": _gated_norm_at_model_eps,
}
EDITED = {
    "adapters-dropped": ("*adapter_list.*.1.weight", times(0.0)),  # up(down(x)) = 0
    "dt-floor-dropped": ("const.dt_floor*", times(0.0)),
}


def test_the_correct_zamba2_package_passes(builds):
    assert parity_error(builds.package(ZAMBA2), builds.checkpoint(ZAMBA2)) < 1e-4


@pytest.mark.parametrize("mutant", REWIRED)
def test_zamba2_mutant_graph_fails_parity(builds, tmp_path, mutant):
    broken = copy_package(builds.package(ZAMBA2), tmp_path / mutant)
    _rewire(broken, REWIRED[mutant])
    assert parity_error(broken, builds.checkpoint(ZAMBA2)) > 1e-2


def _halves(weight: np.ndarray) -> np.ndarray:
    """in_proj's MatMul weight [H, 2I] as if the stored rows were [x | z] halves, not x_c, z_c pairs."""
    inner = weight.shape[1] // 2
    order = np.array([2 * c for c in range(inner)] + [2 * c + 1 for c in range(inner)])
    return weight[:, np.argsort(order)]


def _one_head(weight: np.ndarray) -> np.ndarray:
    return np.repeat(weight[:1], weight.shape[0], axis=0)  # every head with head 0's x_proj


ZAMBA_REWIRED = {name: REWIRED[name] for name in ("embeddings-not-concatenated", "uses-share-one-cache",
                                                  "scores-by-full-head-dim")}  # fmt: skip
ZAMBA_EDITED = {
    "in-proj-in-halves": ("*.mamba.in_proj.weight", _halves),
    "one-x-proj-for-every-head": ("*.mamba.x_proj_weight", _one_head),
    "dt-bias-dropped": ("*.mamba.dt_proj_bias", times(0.0)),
}


def test_the_correct_zamba_package_passes(builds):
    assert parity_error(builds.package(ZAMBA), builds.checkpoint(ZAMBA)) < 1e-4


@pytest.mark.parametrize("mutant", ZAMBA_REWIRED)
def test_zamba_mutant_graph_fails_parity(builds, tmp_path, mutant):
    broken = copy_package(builds.package(ZAMBA), tmp_path / mutant)
    _rewire(broken, ZAMBA_REWIRED[mutant])
    assert parity_error(broken, builds.checkpoint(ZAMBA)) > 1e-2


@pytest.mark.parametrize("mutant", ZAMBA_EDITED)
def test_zamba_mutant_weights_fail_parity(builds, tmp_path, mutant):
    pattern, change = ZAMBA_EDITED[mutant]
    broken = copy_package(builds.package(ZAMBA), tmp_path / mutant)
    assert edit_initializers(broken, pattern, change), pattern
    assert parity_error(broken, builds.checkpoint(ZAMBA)) > 1e-2


@pytest.mark.parametrize("mutant", EDITED)
def test_zamba2_mutant_weights_fail_parity(builds, tmp_path, mutant):
    pattern, change = EDITED[mutant]
    broken = copy_package(builds.package(ZAMBA2), tmp_path / mutant)
    assert edit_initializers(broken, pattern, change), pattern
    assert parity_error(broken, builds.checkpoint(ZAMBA2)) > 1e-2
