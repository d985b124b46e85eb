"""The weight writer: every external initializer streamed into one data file, hashed as written.

It writes byte for byte what `onnx_ir.save(model, path, external_data=..., size_threshold_bytes=
INLINE_BYTES)` writes (onnx-ir 1.1: the initializers above the threshold, over all graphs in
declaration order, packed densely), with the work in two threads:
- a producer materializes each tensor block by block: reads, casts, transposes, quantizes (numpy
  and onnxruntime release the GIL while they work);
- the calling thread writes each block and feeds it to sha256, so the manifest never re-reads the
  file it just wrote.
At most `QUEUE_BLOCKS` blocks (each <= CHUNK_BYTES) wait in between, so memory stays bounded.
Blocks of one tensor come in order and tensors in declaration order: a quantized weight's scales
are only asked for after its packed rows were produced, as the quantizer expects.
"""

from __future__ import annotations

import hashlib
import os
import queue
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np
import onnx_ir as ir

from gqa_export.graph.params import StreamedTensor

CHUNK = 8 << 20  # read-back size when hashing a scattered tensor
INLINE_BYTES = 1024  # smaller tensors stay inside the .onnx (docs/split-pipeline.md §4)
QUEUE_BLOCKS = 2
_END = object()


@dataclass(frozen=True)
class WrittenFile:
    sha256: str
    bytes: int

    def as_entry(self) -> dict[str, object]:
        return {"sha256": self.sha256, "bytes": self.bytes}


def external_values(model: ir.Model) -> list[ir.Value]:
    """The initializers that go to the data file, in the order onnx-ir writes them."""
    return [
        value
        for graph in model.graphs()
        for value in graph.initializers.values()
        if value.const_value is not None and value.const_value.nbytes > INLINE_BYTES
    ]


def save_models(
    models: list[tuple[str, ir.Model]], folder: Path, data_file: str, on_tensor: Callable[[], None] | None = None
) -> dict[str, WrittenFile]:
    """Save the graphs with their weights in one `data_file`, each weight stored once.

    The first graph's weights are streamed into the file. Later graphs (the prefill graph of a
    split pipeline) get, for every initializer the first one has, a reference to the same bytes,
    so the weights are on disk once and both sessions can map them. Returns the data file's hash.
    """
    first_name, first = models[0]
    values = external_values(first)
    written = _write(values, folder / data_file, on_tensor)
    externals = {value.name or "": value.const_value for value in values}
    ir.save(first, folder / first_name)
    for name, model in models[1:]:
        for value_name, value in model.graph.initializers.items():
            stored = externals.get(value_name)
            if stored is not None:
                value.const_value = stored
            elif value.const_value is not None and value.const_value.nbytes > INLINE_BYTES:
                raise AssertionError(f"{name}: initializer {value_name} is not shared with {first_name}")
        ir.save(model, folder / name)
    return {data_file: written}


def _write(values: list[ir.Value], path: Path, on_tensor: Callable[[], None] | None) -> WrittenFile:
    """Write the tensors' bytes back to back, hashing them; each value's tensor becomes the
    ExternalTensor of its bytes as soon as they are written, which frees what the lazy tensor
    held (a quantized weight's scales: 1 GB over an 8B model in int4)."""
    blocks: queue.Queue = queue.Queue(maxsize=QUEUE_BLOCKS)
    stop = threading.Event()
    failure: list[BaseException] = []

    def put(item: object) -> bool:
        """Hand over one item; False once the writer gave up (it raised), so the producer ends."""
        while not stop.is_set():
            try:
                blocks.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for value in values:
                tensor = value.const_value
                scattered = isinstance(tensor, StreamedTensor) and tensor.scatter is not None
                # a scattered tensor is written by the writing thread itself, in place
                for item in [_Scatter(tensor)] if scattered else _blocks(tensor):  # type: ignore[arg-type]
                    if not put(item):
                        return
                if not put(_END):
                    return
        except BaseException as exc:  # re-raised in the writing thread
            failure.append(exc)
            put(None)

    producer = threading.Thread(target=produce, name="gqa-export-weights", daemon=True)
    producer.start()
    digest, offset = _Hasher(), 0
    try:
        with path.open("w+b") as f:
            for value in values:
                tensor = value.const_value
                assert tensor is not None
                start = offset
                while (block := blocks.get()) is not _END:
                    if block is None:
                        raise failure[0]
                    if isinstance(block, _Scatter):
                        offset = block.write(f, start, digest)
                        continue
                    f.write(block)
                    digest.update(block)  # in its own thread, while the next block is written
                    offset += len(block)
                if offset - start != tensor.nbytes:
                    raise AssertionError(f"{value.name}: wrote {offset - start} bytes, expected {tensor.nbytes}")
                value.const_value = ir.ExternalTensor(
                    os.path.normpath(path.name), start, tensor.nbytes, tensor.dtype, shape=tensor.shape,
                    name=tensor.name, base_dir=os.path.normpath(path.parent),
                )  # fmt: skip
                if on_tensor is not None:
                    on_tensor()
    finally:
        stop.set()
        producer.join()
        sha256 = digest.hexdigest()
    return WrittenFile(sha256, offset)


@dataclass(frozen=True)
class _Scatter:
    """A tensor that writes itself out of order (StreamedTensor.scatter): its bytes land in place
    with pwrite, then are read back (from the page cache) in order for the hash."""

    tensor: StreamedTensor

    def write(self, f: BinaryIO, start: int, digest: _Hasher) -> int:
        f.flush()
        fd = f.fileno()
        assert self.tensor.scatter is not None
        self.tensor.scatter(lambda at, data: _pwrite_all(fd, data, start + at))
        end = start + self.tensor.nbytes
        for at in range(start, end, CHUNK):
            digest.update(memoryview(os.pread(fd, min(CHUNK, end - at), at)))
        f.seek(end)
        return end


def _pwrite_all(fd: int, data: memoryview, at: int) -> None:
    while data:
        done = os.pwrite(fd, data, at)
        data, at = data[done:], at + done


class _Hasher:
    """sha256 of the blocks fed to it, computed in a thread of its own (hashlib releases the GIL),
    so that hashing a block overlaps writing the next; at most QUEUE_BLOCKS wait."""

    def __init__(self) -> None:
        self._digest = hashlib.sha256()
        self._queue: queue.Queue = queue.Queue(maxsize=QUEUE_BLOCKS)
        self._thread = threading.Thread(target=self._run, name="gqa-export-sha256", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while (block := self._queue.get()) is not None:
            self._digest.update(block)

    def update(self, block: memoryview) -> None:
        self._queue.put(block)

    def hexdigest(self) -> str:
        """Waits for the blocks fed so far; the hasher takes no more after this."""
        self._queue.put(None)
        self._thread.join()
        return self._digest.hexdigest()


def _blocks(tensor: ir.TensorProtocol | None) -> Iterator[memoryview]:
    """A tensor's bytes in row-major order: a streamed tensor block by block, others whole."""
    assert tensor is not None
    if isinstance(tensor, StreamedTensor):
        for block in tensor.blocks():
            yield memoryview(np.ascontiguousarray(block).reshape(-1).view(np.uint8))
    else:
        yield memoryview(tensor.tobytes())
