"""WeightStore: lazy reads, shard/index validation, clear errors for broken checkpoints."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from gqa_export.errors import InputError
from gqa_export.source.weights import INDEX_FILE, WeightStore


def test_reads_sharded_bf16_checkpoint_lazily(checkpoints):
    folder = checkpoints.get("bf16_sharded")
    assert (folder / INDEX_FILE).exists() and len(list(folder.glob("*.safetensors"))) > 1
    store = WeightStore.open(folder)
    assert store.reads == 0  # opening reads headers only
    info = store.info("model.layers.1.mlp.down_proj.weight")
    assert info.dtype == "BF16" and info.shape == (64, 128)
    array = store.read(info.name)
    assert array.dtype.name == "bfloat16" and array.shape == (64, 128)
    assert store.reads == 1


def test_missing_shard_is_named(checkpoints, tmp_path):
    folder = shutil.copytree(checkpoints.get("bf16_sharded"), tmp_path / "ckpt")
    victim = sorted(folder.glob("*.safetensors"))[-1]
    victim.unlink()
    with pytest.raises(InputError, match=f"weight shard '{victim.name}' listed in {INDEX_FILE} is missing"):
        WeightStore.open(folder)


def test_truncated_shard_is_corrupt(checkpoints, tmp_path):
    folder = shutil.copytree(checkpoints.get("gqa"), tmp_path / "ckpt")
    shard = folder / "model.safetensors"
    shard.write_bytes(shard.read_bytes()[:-100])
    with pytest.raises(InputError, match=r"model\.safetensors is corrupt or truncated"):
        WeightStore.open(folder)


def test_garbage_header_is_corrupt(tmp_path):
    (tmp_path / "model.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00not json at all!")
    with pytest.raises(InputError, match="corrupt"):
        WeightStore.open(tmp_path)


def test_index_pointing_at_wrong_shard(checkpoints, tmp_path):
    folder = shutil.copytree(checkpoints.get("bf16_sharded"), tmp_path / "ckpt")
    index = json.loads((folder / INDEX_FILE).read_text())
    shards = sorted(set(index["weight_map"].values()))
    name = next(k for k, v in index["weight_map"].items() if v == shards[0])
    index["weight_map"][name] = shards[1]
    (folder / INDEX_FILE).write_text(json.dumps(index))
    with pytest.raises(InputError, match=f"tensor '{name}' is listed"):
        WeightStore.open(folder)


def test_pickle_only_checkpoint_is_refused(tmp_path):
    (tmp_path / "pytorch_model.bin").write_bytes(b"pickle")
    with pytest.raises(InputError, match="pickle checkpoints are never loaded"):
        WeightStore.open(tmp_path)


def test_unknown_tensor_name(checkpoints):
    store = WeightStore.open(checkpoints.get("gqa"))
    with pytest.raises(InputError, match="missing from the checkpoint"):
        store.info("model.layers.9.self_attn.q_proj.weight")
    assert np.asarray(store.read("model.norm.weight")).shape == (64,)
