"""`gqa-export inspect` as data: load a package, describe it, lint it (one JSON-ready dict)."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

from gqa_export.check.lints import lint
from gqa_export.check.reader import Package, load_package
from gqa_export.source.formats import reported_as


def inspect_package(path: Path, source: Path | None = None) -> dict[str, Any]:
    pkg = load_package(path, source)
    if source is not None:
        from gqa_export.source.checkpoint import source_dims  # transformers: only when a source is cross-checked

        pkg.source_windows = [layer.window for layer in source_dims(source).layers]
    return {
        "summary": summary(pkg),
        "layers": layers(pkg),
        "experts": experts(pkg),
        "findings": [asdict(f) for f in lint(pkg)],
    }


def summary(pkg: Package) -> dict[str, Any]:
    model = (pkg.config or {}).get("model") or {}
    options = (pkg.decoder.get("session_options") or {}).get("provider_options") or []
    first = pkg.graphs[0] if pkg.graphs else None
    lora = _lora(first, pkg.manifest)
    # graph forms the build took because the EP lacks an op (docs/eps.md §2.7, §2.8)
    forms = ((pkg.manifest or {}).get("options") or {}).get("ep_forms")
    draft = _draft(pkg)
    return {
        **({"lora": lora} if lora else {}),
        **({"ep_forms": forms} if forms else {}),
        **({"draft": draft} if draft else {}),
        "path": str(pkg.path),
        "model_type": model.get("type"),
        "providers": [next(iter(p)) for p in options] or ["cpu"],
        "provider_options": options,
        "past_present_share_buffer": ((pkg.config or {}).get("search") or {}).get("past_present_share_buffer"),
        "max_length": pkg.max_length,
        "context_length": model.get("context_length"),
        "parameters": first.parameters if first else 0,
        "files": pkg.files,
        "total_bytes": sum(pkg.files.values()),
        "kv_cache_bytes_per_row": pkg.kv_bytes_per_row(),
        "recurrent_state_bytes_per_row": pkg.state_bytes_per_row(),
        "io": _io(first, options),
        "imported_quantization": _imported(pkg),
        "gguf": _gguf(pkg),
        "graphs": [
            {
                "filename": g.filename,
                "stage": g.role,
                "run_on_prompt": g.run_on_prompt,
                "run_on_token_gen": g.run_on_token_gen,
                "attention_ops": sorted({a.op for a in g.attention}),
                "weights": g.weights,
                "inputs": [{k: v for k, v in i.items() if k != "elem_type"} for i in g.inputs],
                "outputs": [{k: v for k, v in o.items() if k != "elem_type"} for o in g.outputs],
                "ops": g.ops,
                "opsets": g.opsets,
            }
            for g in _all_graphs(pkg)
        ],
    }


def _all_graphs(pkg: Package) -> list[Any]:
    """The decoder's graphs, a multimodal package's encoders and a speculative draft."""
    return [*pkg.graphs, *pkg.encoders, *([pkg.draft] if pkg.draft else [])]


def _draft(pkg: Package) -> dict[str, Any] | None:
    """A speculative-decoding package's draft model and its options (docs/speculative.md)."""
    if pkg.draft is None:
        return None
    options = (pkg.config or {}).get("speculative")
    return {"filename": pkg.draft.filename, "layers": len(pkg.draft.attention), "parameters": pkg.draft.parameters,
            "speculative": options if isinstance(options, dict) else {}}  # fmt: skip


def _lora(graph: Any, manifest: dict[str, Any] | None) -> dict[str, Any] | None:
    """A multi-LoRA base's adapter inputs (docs/lora.md): the modules, their short names, and the
    adapter files a release shipped beside it (docs/lora.md §8)."""
    names = [i["name"] for i in (graph.inputs if graph else []) if i["name"].endswith(".lora_A.weight")]
    if not names:
        return None
    modules = [n.removesuffix(".lora_A.weight") for n in names]
    shipped = sorted((manifest or {}).get("adapters") or {})
    return {"modules": modules, "targets": sorted({m.rpartition(".")[2] for m in modules}),
            **({"adapters": shipped} if shipped else {})}  # fmt: skip


def _imported(pkg: Package) -> dict[str, Any] | None:
    """Where the weights' quantization came from, for a pre-quantized source (docs/prequantized.md §2)."""
    entry = ((pkg.manifest or {}).get("options") or {}).get("imported_quantization")
    if not entry:
        return None
    docs = ", ".join(f.docs for f in reported_as(str(entry.get("source_format"))))  # source/formats.py
    return {"source_format": entry.get("source_format"), "imported": len(entry.get("imported") or {}),
            "dequantized": len(entry.get("dequantized") or []), "precision": entry.get("precision"),
            "quantized_by_precision": len(entry.get("quantized_by_precision") or []), "docs": docs}  # fmt: skip


def _gguf(pkg: Package) -> dict[str, Any] | None:
    """A package built from a GGUF: the file, and per GGML type how many tensors kept their integer
    blocks, were read as float, or were re-quantized by --precision (docs/gguf.md §5)."""
    entry = ((pkg.manifest or {}).get("options") or {}).get("gguf")
    if not entry:
        return None
    types: dict[str, dict[str, int]] = {}
    for tensor in (entry.get("tensors") or {}).values():
        how = str(tensor.get("as", ""))
        kind = "float" if how == "float" else "requantized" if "re-quantized" in how else "kept"
        counts = types.setdefault(str(tensor.get("type")), {"kept": 0, "float": 0, "requantized": 0})
        counts[kind] += 1
    return {"file": entry.get("file"), "architecture": entry.get("architecture"), "types": types}


def _io(graph: Any, provider_options: list[dict[str, Any]]) -> dict[str, Any]:
    """The build's I/O options as the graph shows them (io_options.py): logits all | last | none."""
    inputs = {i["name"]: i for i in graph.inputs} if graph else {}
    outputs = {o["name"]: o for o in graph.outputs} if graph else {}
    logits = outputs.get("logits")
    mode = "none" if logits is None else ("last" if list(logits.get("shape") or [])[1:2] == [1] else "all")
    cuda = next((p["cuda"] for p in provider_options if "cuda" in p), {})
    return {
        "logits": mode,
        "inputs_embeds": "inputs_embeds" in inputs,
        "hidden_states": "hidden_states" in outputs,
        "cuda_graph": cuda.get("enable_cuda_graph") == "1",
    }


def layers(pkg: Package) -> list[dict[str, Any]]:
    return [asdict(a) for g in _decoders(pkg) for a in g.attention]


def experts(pkg: Package) -> list[dict[str, Any]]:
    return [{k: v for k, v in asdict(e).items() if k != "attributes"} for g in _decoders(pkg) for e in g.experts]


def _decoders(pkg: Package) -> list[Any]:
    return [*pkg.graphs, *([pkg.draft] if pkg.draft else [])]
