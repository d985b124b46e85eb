"""How the source-format table (source/formats.py) recognizes a checkpoint *file* format (GGUF)."""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType


@dataclass(frozen=True)
class FileReader:
    """A checkpoint *file* format (GGUF): the file itself is the checkpoint, recognized by its name
    or its first bytes rather than by a quantization_config, and read by a source package of its
    own. The package (imported on use, so its dependencies load only for such a file) offers
    `in_folder(folder, name)` (the file a folder or a Hub download stands for), `materialize(path,
    beside)` (the config/tokenizer folder its metadata means, and the origin a Source keeps),
    `open_store(path, raw_config)` (its tensors under their HF names) and `remove_made(folder)`."""

    suffixes: tuple[str, ...]  # lower case, with the dot
    magic: bytes  # the first bytes of every such file
    package: str  # the module that reads it

    def matches(self, path: Path) -> bool:
        """A file named with one of the suffixes, or any file that starts with the magic."""
        if not path.is_file():
            return False
        if path.suffix.lower() in self.suffixes:
            return True
        try:
            with path.open("rb") as f:
                return f.read(len(self.magic)) == self.magic
        except OSError:
            return False

    def in_folder(self, folder: Path) -> bool:
        """Whether a folder holds files of this format (by name)."""
        return any(any(folder.glob(f"*{suffix}")) for suffix in self.suffixes)

    def module(self) -> ModuleType:
        return importlib.import_module(self.package)
