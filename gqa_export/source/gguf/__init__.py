"""GGUF model files (llama.cpp, Ollama, LM Studio) read as checkpoints (docs/gguf.md).

The interface the rest of gqa-export uses:
- `gguf_in_folder(folder, name)` / `is_gguf(path)`: which GGUF a model argument stands for;
- `materialize(path, beside)`: the config.json / generation_config.json / tokenizer folder the file
  means, written from its metadata (files beside it win), and the `GgufOrigin` (parts, notes);
- `open_gguf(path)`: the checked, memory-mapped file; `GgufStore(file, config)`: its tensors under
  their transformers names, float on read, with `linear(name)` giving a quantized weight's own
  codes, scales and mins for MatMulNBits (quant/gguf_import.py).
"""

from __future__ import annotations

from pathlib import Path

from gqa_export.source.gguf.container import GgufFile, open_gguf
from gqa_export.source.gguf.folder import GgufOrigin, gguf_in_folder, materialize
from gqa_export.source.gguf.store import GgufLinear, GgufStore

__all__ = ["GgufFile", "GgufLinear", "GgufOrigin", "GgufStore", "gguf_in_folder", "is_gguf", "materialize", "open_gguf"]


def is_gguf(path: Path) -> bool:
    """A file named .gguf, or any file that starts with GGUF's magic."""
    if not path.is_file():
        return False
    if path.suffix.lower() == ".gguf":
        return True
    try:
        with path.open("rb") as f:
            return f.read(4) == b"GGUF"
    except OSError:
        return False
