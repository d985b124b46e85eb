"""The weight writer writes exactly what onnx-ir's own external-data save writes (the save path
before it), hashes what it wrote, and leaves nothing behind when a tensor fails."""

from __future__ import annotations

import hashlib
from pathlib import Path

import onnx_ir as ir
import pytest
from moe_models import save_moe

from gqa_export.package import writer
from gqa_export.pipeline import BuildOptions, build
from gqa_export.stages import finish

# mid-sized, so that the casts and transposes take the onnxruntime path (kernels.SMALL_ELEMENTS)
MID = dict(hidden_size=256, intermediate_size=704, num_attention_heads=4, num_key_value_heads=2)
CASES = {
    "fp32": ("mid", {}),
    "fp16-cuda": ("mid", {"ep": "cuda", "precision": "fp16"}),
    "bf16-cuda": ("mid", {"ep": "cuda", "precision": "bf16"}),
    "int4": ("mid", {"precision": "int4"}),
    "int8-cuda": ("mid", {"ep": "cuda", "precision": "int8"}),
    "split-int4": ("mid", {"precision": "int4", "attention": "split"}),
    "gemma4-int8": ("gemma4_mix_bf16", {"precision": "int8"}),
    "qwen3_moe-int4": ("qwen3_moe", {"precision": "int4"}),
    # Nemotron-H's ungated experts: per-expert Linears, and transformers' stacked [E, I, D] tensors
    # (graph/ungated_experts.py writes their [D, E*I] MatMul weight in place expert by expert)
    "nemotron_h_moe": ("nemotron_h_moe", {}),
    "nemotron_h_moe-stacked": ("nemotron_h_moe_stacked", {}),
}


@pytest.fixture(scope="module")
def source(checkpoints, tmp_path_factory):
    def get(name: str) -> Path:
        if name == "mid":
            return checkpoints.get("mid_llama", **MID)
        if name == "qwen3_moe":
            return save_moe(tmp_path_factory.mktemp("moe") / name, name)
        if name.startswith("nemotron_h_moe"):
            from dense_models import NEMOTRON_H_MOE, build_model
            from tiny_models import save_tokenizer

            folder = tmp_path_factory.mktemp("nemotron_h") / name
            build_model("nemotron_h", **NEMOTRON_H_MOE).save_pretrained(
                folder, save_original_format=not name.endswith("stacked")
            )
            save_tokenizer(folder, vocab_size=384)
            return folder
        return checkpoints.get(name)

    return get


@pytest.mark.parametrize("scatter", [False, True], ids=["rows", "scatter"])
@pytest.mark.parametrize("case", CASES)
def test_same_bytes_as_onnx_ir_save(source, tmp_path, monkeypatch, case, scatter):
    """`scatter`: every transposed float weight written in place by bands (as a 128k lm_head is)."""
    name, options = CASES[case]
    if scatter:
        from gqa_export.graph import params

        monkeypatch.setattr(params, "CHUNK_BYTES", 16 << 10)
        monkeypatch.setattr(params, "MIN_SLAB_ROWS", 1 << 30)
        monkeypatch.setattr(params, "MAPPED_BYTES", 64 << 10)  # several bands per weight
        scattered = []
        real_scatter = params.Params._scatter
        monkeypatch.setattr(params.Params, "_scatter", lambda *a: scattered.append(1) or real_scatter(*a))
    reference = tmp_path / "reference"
    reference.mkdir()
    hashes: dict[str, writer.WrittenFile] = {}

    def both(models, folder, data_file, on_tensor=None):
        first_name, first = models[0]
        ir.save(first, reference / first_name, external_data=data_file, size_threshold_bytes=writer.INLINE_BYTES)
        hashes.update(writer.save_models(models, folder, data_file, on_tensor))
        return hashes

    monkeypatch.setattr(finish, "save_models", both)
    out = tmp_path / "pkg"
    build(BuildOptions(str(source(name)), out, smoke=False, **options))
    files = sorted(p.name for p in reference.iterdir())
    assert files and all((out / f).read_bytes() == (reference / f).read_bytes() for f in files), files
    if scatter and options.get("precision", "fp32") in ("fp32", "fp16", "bf16"):
        assert scattered, "no weight took the in-place path"
    ((data_file, written),) = hashes.items()
    data = (out / data_file).read_bytes()
    assert written.bytes == len(data) and written.sha256 == hashlib.sha256(data).hexdigest()


def test_a_failing_tensor_stops_the_writer(tmp_path):
    """An error while a tensor is produced reaches the caller; the producer thread ends."""
    import numpy as np

    from gqa_export.graph.params import StreamedTensor

    def blocks():
        yield np.zeros((64, 64), np.float32)
        raise ValueError("shard vanished")

    graph = ir.Graph([], [], nodes=[], name="g")
    tensors = [ir.tensor(np.ones((64, 64), np.float32)), StreamedTensor(blocks, ir.DataType.FLOAT, (128, 64))]
    for i, tensor in enumerate(tensors):
        tensor.name = f"w{i}"
        value = ir.Value(name=f"w{i}", shape=ir.Shape(tensor.shape), type=ir.TensorType(tensor.dtype))
        value.const_value = tensor
        graph.register_initializer(value)
    model = ir.Model(graph, ir_version=10)
    with pytest.raises(ValueError, match="shard vanished"):
        writer.save_models([("model.onnx", model)], tmp_path, "model.onnx.data")
    import threading

    assert not [t for t in threading.enumerate() if t.name == "gqa-export-weights"]
