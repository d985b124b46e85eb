"""GGUF model files (llama.cpp, Ollama, LM Studio) read as checkpoints (docs/gguf.md).

The reader of the GGUF record of the source-format table (source/formats.py `GGUF.file`, which
recognizes the file by its suffix or magic). The interface the rest of gqa-export uses:
- `in_folder(folder, name)` (= `gguf_in_folder`) / `is_gguf(path)`: which GGUF a model argument stands for;
- `materialize(path, beside)`: the config.json / generation_config.json / tokenizer folder the file
  means, written from its metadata (files beside it win), and the `GgufOrigin` (parts, notes);
- `open_gguf(path)`: the checked, memory-mapped file; `GgufStore(file, config)` (`open_store(path,
  config)`): its tensors under their transformers names, float on read, with `linear(name)` giving
  a quantized weight's own codes, scales and mins for MatMulNBits (quant/gguf_import.py);
- `remove_made(folder)`: the config/tokenizer folder `materialize` wrote, removed.
"""

from __future__ import annotations

from pathlib import Path

from gqa_export.source.gguf.container import GgufFile, open_gguf
from gqa_export.source.gguf.folder import GgufOrigin, gguf_in_folder, materialize, remove_made
from gqa_export.source.gguf.store import GgufLinear, GgufStore

__all__ = [
    "GgufFile", "GgufLinear", "GgufOrigin", "GgufStore", "gguf_in_folder", "in_folder", "is_gguf", "materialize",
    "open_gguf", "open_store", "remove_made",
]  # fmt: skip
in_folder = gguf_in_folder


def is_gguf(path: Path) -> bool:
    """A file named .gguf, or any file that starts with GGUF's magic (the table's GGUF record)."""
    from gqa_export.source.formats import GGUF

    return GGUF.file is not None and GGUF.file.matches(path)


def open_store(path: Path, config: dict) -> GgufStore:
    """The file's tensors under their HF names, read with the config its metadata means."""
    return GgufStore(open_gguf(path), config)
