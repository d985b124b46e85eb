"""Stage 5: write the package folder atomically.

Everything is written into a hidden staging folder next to `-o` and renamed into place only when
complete (and, if asked, smoke-tested), so a failed or interrupted build never leaves a half
package; replacing an existing `-o` is swap.py's journaled transaction. The weights themselves are
streamed by writer.py.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from gqa_export.errors import InputError, RunError
from gqa_export.package.ownership import check_clear_of, check_clear_of_cwd, check_replaceable
from gqa_export.package.swap import SwapNames, commit_new, deferred_signals, forget_committed, recover, swap_in
from gqa_export.source.fetch import TOKENIZER_FILES
from gqa_export.units import size

# tokenizer classes onnxruntime-extensions knows; transformers v5 writes "TokenizersBackend",
# which means "a tokenizer.json", i.e. PreTrainedTokenizerFast.
_V5_BACKEND_CLASSES = ("TokenizersBackend",)


def check_output(
    out_dir: Path,
    overwrite: bool,
    inputs: Sequence[tuple[Path, str]] = (),
    note: Callable[[str], None] | None = None,
) -> None:
    """Fail before any work when -o is in the way, cannot be written, or --overwrite would replace
    something gqa-export did not write. `inputs`: (folder, what) pairs -o must stay clear of.

    What a killed run left beside -o is recovered first (`swap.recover`, each step told to `note`),
    so the checks see the output that is really there: a replaced package put back needs
    --overwrite like any other."""
    if out_dir.exists() and not out_dir.is_dir():
        raise InputError(f"output path {out_dir} is a file; choose a folder for -o")
    check_clear_of_cwd(out_dir)
    for folder, what in inputs:
        check_clear_of(out_dir, folder, what, inside_ok=what == SPEC_FOLDER)
    parent = _nearest_existing(out_dir.resolve().parent)
    if not parent.is_dir():
        raise InputError(f"{parent} is a file, so -o {out_dir} cannot be created; choose another -o")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise InputError(f"cannot write into {parent}; choose another -o or fix the folder's permissions")
    _recover(out_dir, note)
    if out_dir.exists() and not overwrite:
        raise InputError(f"output folder {out_dir} already exists; pass --overwrite to replace it or choose another -o")
    if out_dir.exists():
        check_replaceable(out_dir)


def _recover(out_dir: Path, note: Callable[[str], None] | None) -> None:
    for done in recover(out_dir):
        if note:
            note(done)


def _nearest_existing(path: Path) -> Path:
    """The nearest existing ancestor (or `path`): the folder -o is created in and written through."""
    while not path.exists():
        path = path.parent
    return path


SPEC_FOLDER = "release spec's folder"  # -o may lie inside it (next to the spec), not be or hold it


def check_outside(out_dir: Path, model_dir: Path, what: str = "model folder") -> None:
    """-o must not be the input folder, inside it or around it: a package there would be read back
    as part of the input, and --overwrite would replace the input itself."""
    check_clear_of(out_dir, model_dir, what)


def check_free_space(out_dir: Path, needed: int) -> None:
    """Refuse early when the disk cannot hold the weights: `needed` is their exact byte count.

    Sizes are in the unit that fits (a tiny package's 0.00 GiB said nothing), and the shortfall is
    named too: it is never 0, where needed and free can round to the same figure."""
    parent = _nearest_existing(out_dir.resolve().parent)
    free = shutil.disk_usage(parent).free
    if free < needed:
        raise RunError(
            f"not enough free space in {parent}: the package needs at least {size(needed)} and {size(free)} "
            f"are free ({size(needed - free)} short); free some space there or choose another -o"
        )


class StagedPackage:
    """A staging folder that becomes `out_dir` on `commit()` and vanishes on any failure.

    A KeyboardInterrupt (Ctrl-C, or SIGTERM as the CLI maps it) unwinds through `__exit__` too.
    A SIGKILL cannot be caught: the staging folder then stays, named after the dead process, and
    the next run for the same -o removes it (`swap.recover`) and says so. Replacing an existing -o
    is the journaled swap of swap.py (docs/architecture.md §6).
    """

    def __init__(self, out_dir: Path, overwrite: bool, note: Callable[[str], None] | None = None) -> None:
        self.out_dir = out_dir.resolve()
        self.overwrite = overwrite
        self.note = note
        self.names = SwapNames(self.out_dir, f"{os.getpid()}-{uuid.uuid4().hex[:8]}")
        self.tag = self.names.tag
        self.path = self.names.staging

    def __enter__(self) -> StagedPackage:
        self.out_dir.parent.mkdir(parents=True, exist_ok=True)
        _recover(self.out_dir, self.note)
        self.path.mkdir()
        return self

    def __exit__(self, *exc: object) -> None:
        with deferred_signals():  # a second Ctrl-C does not leave the staging folder half removed
            shutil.rmtree(self.path, ignore_errors=True)
        forget_committed(under=self.path)  # outputs committed inside it (a release's variants) went with it

    def commit(self) -> Path:
        if self.out_dir.exists():
            if not self.overwrite:
                raise InputError(f"output folder {self.out_dir} appeared during the build; pass --overwrite")
            check_replaceable(self.out_dir)  # it may have changed hands since the pre-flight check
            swap_in(self.names)
        else:
            commit_new(self.path, self.out_dir)
        return self.out_dir


def shared_initializers(folder: Path, graph_file: str) -> list[dict[str, Any]]:
    """genai_config `decoder.shared_initializers` for every external weight of a saved graph.

    onnxruntime-genai (0.18, CUDA) reads each entry's bytes from `data_file` once into GPU memory
    and adds it to the decoder's session options with AddInitializer, which every pipeline stage
    without its own session_options uses, so ORT's CUDA EP uses the one buffer in place instead of
    uploading the weights once per session. On CPU the runtime throws ("GetMemoryInfo for CPU
    should not be used"): CPU packages share the mapped file instead (disabled prepacking)."""
    import onnx

    model = onnx.load(str(folder / graph_file), load_external_data=False)
    entries = []
    for tensor in model.graph.initializer:
        if tensor.data_location != onnx.TensorProto.EXTERNAL:
            continue
        info = {entry.key: entry.value for entry in tensor.external_data}
        entries.append(
            {
                "name": tensor.name,
                "data_file": info["location"],
                "offset": info.get("offset", "0"),
                "length": info["length"],
                "data_type": tensor.data_type,
                "shape": list(tensor.dims) or [1],
            }
        )
    return entries


def copy_tokenizer(source: Path, dest: Path) -> list[str]:
    """Copy the tokenizer files ORT GenAI (onnxruntime-extensions) reads.

    transformers v5 keeps the chat template in chat_template.jinja and writes tokenizer_class
    "TokenizersBackend"; the runtime reads the template and class from tokenizer_config.json, so
    both are folded back in.
    """
    copied = [name for name in TOKENIZER_FILES if (source / name).is_file()]
    for name in copied:
        shutil.copy2(source / name, dest / name)
    if "tokenizer.json" not in copied and "tokenizer.model" not in copied:
        raise InputError(f"{source} has no tokenizer.json or tokenizer.model; the package needs a tokenizer")
    config_path = dest / "tokenizer_config.json"
    config: dict[str, Any] = json.loads(config_path.read_text()) if config_path.exists() else {}
    changed = False
    template = _chat_template(source)
    if template and not config.get("chat_template"):
        config["chat_template"] = template
        changed = True
    if config.get("tokenizer_class") in _V5_BACKEND_CLASSES or (
        "tokenizer_class" not in config and "tokenizer.json" in copied
    ):
        config["tokenizer_class"] = "PreTrainedTokenizerFast"
        changed = True
    if changed:
        config_path.write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n")
        if "tokenizer_config.json" not in copied:
            copied.append("tokenizer_config.json")
    return copied


def _chat_template(source: Path) -> str | None:
    jinja = source / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text()
    as_json = source / "chat_template.json"
    if as_json.is_file():
        return json.loads(as_json.read_text()).get("chat_template")
    return None


def file_digests(folder: Path, known: dict[str, dict[str, Any]] | None = None) -> dict[str, dict[str, Any]]:
    """sha256 and size of every file in the package (the manifest itself excluded); `known`:
    entries already computed while the file was written (the weights), trusted as they are."""
    out = {}
    known = known or {}
    for path in sorted(p for p in folder.iterdir() if p.is_file() and p.name != "manifest.json"):
        if path.name in known and known[path.name]["bytes"] == path.stat().st_size:
            out[path.name] = known[path.name]
            continue
        digest = hashlib.sha256()
        with path.open("rb") as f:
            for chunk in iter(lambda: f.read(1 << 22), b""):
                digest.update(chunk)
        out[path.name] = {"sha256": digest.hexdigest(), "bytes": path.stat().st_size}
    return out
