"""Lints over a loaded package: each finding has a stable id, a severity and a one-line fix.

What each rule relies on (docs/ortgenai.md, docs/ort-ops.md): share buffer binds one max_length
buffer as past and present, which only GQA (or an in-place TensorScatter) can use
(docs/ortgenai.md §3.3, §4.4); GQA's fused RoPE reads cos/sin rows up to the total length
(docs/ort-ops.md §1.6); the genai_config parser rejects unknown keys (docs/ortgenai.md §1.1);
pipeline stages share one KV cache matched by name and type (docs/ortgenai.md §4.1, §4.3).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from onnx import TensorProto

from gqa_export.check.draft_lints import draft_findings
from gqa_export.check.ep_lints import ep_findings
from gqa_export.check.expert_lints import expert_findings
from gqa_export.check.findings import Finding
from gqa_export.check.pad_lints import pad_findings
from gqa_export.check.processor_lints import processor_findings
from gqa_export.check.reader import Package, load_package
from gqa_export.check.state_lints import state_findings
from gqa_export.errors import PackageLintError
from gqa_export.model.config_reads import token_ids
from gqa_export.package.genai_schema import unknown_keys

KV_WARN_BYTES = 4 << 30  # a KV buffer above this per batch row is worth a second look


def lint(pkg: Package, kv_warn_bytes: int = KV_WARN_BYTES) -> list[Finding]:
    out: list[Finding] = []
    for rule in RULES:
        out.extend(rule(pkg, kv_warn_bytes))
    return out


def check_written(folder: Path, source: Path | None = None) -> list[Finding]:
    """Lint a package this tool just wrote: an error is a bug in gqa-export, never the input, and
    raises PackageLintError; the warnings are returned for the caller to report."""
    findings = lint(load_package(folder, source))
    errors = [f for f in findings if f.severity == "error"]
    if errors:
        raise PackageLintError(f"the written package fails lint {errors[0].id}: {errors[0].message}")
    return [f for f in findings if f.severity == "warning"]


def _missing_files(pkg: Package, _: int) -> list[Finding]:
    return [
        Finding("missing-file", "error", f"{name} is named in genai_config.json but missing", "re-export the package")
        for name in pkg.missing_files
    ]


def _external_data(pkg: Package, _: int) -> list[Finding]:
    return [
        Finding("external-data", "error", f"{g.filename}: {problem}", "re-export the package or restore the file")
        for g in pkg.graphs
        for problem in g.external_problems
    ]


def _unknown_keys(pkg: Package, _: int) -> list[Finding]:
    if pkg.config is None:
        return []
    return [
        Finding(
            "unknown-config-key",
            "error",
            f"genai_config key '{key}' is not in the runtime's schema; loading fails",
            f"remove '{key}' from genai_config.json",
        )
        for key in unknown_keys(pkg.config)
    ]


def _share_buffer(pkg: Package, _: int) -> list[Finding]:
    if pkg.config is None:
        return []
    share = bool((pkg.config.get("search") or {}).get("past_present_share_buffer"))
    ops = {a.op for g in pkg.graphs for a in g.attention}
    standard = [g for g in pkg.graphs if any(a.op != "GroupQueryAttention" for a in g.attention)]
    scattered = all(g.kv_written_in_place for g in standard)
    out = []
    in_place = [g.filename for g in standard if g.kv_written_in_place]
    if in_place and not share:
        out.append(
            Finding(
                "scatter-share-buffer-off",
                "error",
                f"{', '.join(in_place)} writes its KV cache in place (TensorScatter) but past_present_share_buffer is "
                "false: the runtime hands it a growing past and expects a longer present (shape error)",
                "set search.past_present_share_buffer to true",
            )
        )
    if "GroupQueryAttention" in ops and not share:
        out.append(
            Finding(
                "gqa-share-buffer-off",
                "error",
                "GroupQueryAttention graph with past_present_share_buffer false: the in-place KV cache is lost "
                "(past is copied into a new present every step)",
                "set search.past_present_share_buffer to true",
            )
        )
    cannot = sorted(ops - {"GroupQueryAttention", "PagedAttention"})
    if share and cannot and not scattered:
        out.append(
            Finding(
                "share-buffer-unsupported-op",
                "error",
                f"past_present_share_buffer true with {', '.join(cannot)} whose graph does not write each past "
                "buffer in place (TensorScatter into the matching present): the runtime fails with a shape error",
                "set search.past_present_share_buffer to false, or export with GroupQueryAttention",
            )
        )
    return out


def _sliding_window(pkg: Package, _: int) -> list[Finding]:
    """Each windowed layer's GroupQueryAttention carries its window (unless a bias holds it).

    The windows come from the export's own resolved reading, recorded in the manifest: config.json
    alone does not say which layers slide (Gemma-2 alternates by rule, Gemma-3 and Cohere2 spell a
    `sliding_window_pattern`, Qwen2 switches windows off with `use_sliding_window`)."""
    windows = pkg.attention_windows
    if windows is None:
        return []
    wrong = sorted(
        a.layer
        for g in pkg.graphs
        for a in g.attention
        if a.op == "GroupQueryAttention"
        and not a.attention_bias
        and a.layer is not None
        and a.layer < len(windows)
        and a.local_window_size != windows[a.layer]
    )
    if not wrong:
        return []
    want = sorted({windows[i] for i in wrong})
    return [
        Finding(
            "missing-sliding-window",
            "error",
            f"the export resolved windows {want} for layers {_ranges(wrong)} but their GroupQueryAttention "
            "has another local_window_size: outputs are wrong past the window",
            "re-export the package",
        )
    ]


def _window_cache(pkg: Package, _: int) -> list[Finding]:
    """Config-sized window buffers must meet kernels that expect them (docs/ortgenai.md §3.5, warning)."""
    window = pkg.decoder.get("sliding_window") or {}
    if not window or window.get("slide_key_value_cache", True) or not pkg.graphs:
        return []
    listed = window.get("layers")
    owners = {a.layer: a for g in pkg.graphs for a in g.attention if a.kv_source in (None, a.layer)}
    chosen = [owners[i] for i in sorted(owners) if listed is None or i in listed]
    no_kernel = [a.layer for a in chosen if a.op != "GroupQueryAttention" or not a.window_cache]
    size = window.get("window_size")
    other_size = [a.layer for a in chosen if a.layer not in no_kernel and a.local_window_size != size]
    no_cache = sorted(set(listed or ()) - set(owners))
    out = []
    if no_kernel:
        out.append(
            Finding(
                "sliding-window-cache-mismatch",
                "error",
                f"decoder.sliding_window gives layers {_ranges(no_kernel)} window-sized KV buffers but their "
                "attention has no GroupQueryAttention sliding_window_cache=1: outputs are wrong past the window",
                "remove decoder.sliding_window, or re-export with sliding_window_cache on those layers",
            )
        )
    if other_size or no_cache:
        layers = other_size or no_cache
        why = f"window_size {size} differs from their local_window_size" if other_size else "they own no KV cache"
        out.append(
            Finding(
                "sliding-window-size-mismatch",
                "error",
                f"decoder.sliding_window lists layers {_ranges(layers)} but {why}: the runtime sizes "
                "their buffers wrongly",
                "make decoder.sliding_window.window_size and layers match the graph's windowed layers",
            )
        )
    return out


def _rope_cache(pkg: Package, _: int) -> list[Finding]:
    max_length = pkg.max_length
    out = []
    for g in pkg.graphs:
        if g.rope_rows is not None and max_length and g.rope_rows < max_length:
            out.append(
                Finding(
                    "rope-cache-short",
                    "error",
                    f"{g.filename}: cos/sin caches have {g.rope_rows} rows but search.max_length is {max_length}; "
                    "GroupQueryAttention fails past that length",
                    f"lower search.max_length to {g.rope_rows} or re-export with longer caches",
                )
            )
    return out


def _kv_size(pkg: Package, kv_warn_bytes: int) -> list[Finding]:
    per_row = pkg.kv_bytes_per_row()
    if per_row is None or per_row <= kv_warn_bytes:
        return []
    return [
        Finding(
            "kv-cache-large",
            "warning",
            f"max_length {pkg.max_length} pre-allocates {per_row / 2**30:.1f} GiB of KV cache per batch row",
            "lower search.max_length to what you generate (e.g. 4096)",
        )
    ]


def _position_ids(pkg: Package, _: int) -> list[Finding]:
    out = []
    for g in pkg.graphs:
        if "position_ids" in g.unused_inputs or (
            any(i["name"] == "position_ids" for i in g.inputs)
            and g.attention
            and all(a.fused_rope for a in g.attention)
        ):
            out.append(
                Finding(
                    "position-ids-unused",
                    "info",
                    f"{g.filename}: position_ids input is not needed with fused RoPE; the runtime still feeds it",
                    "drop the position_ids graph input (GQA derives positions from seqlens_k)",
                )
            )
    return out


def _pruned_logits(pkg: Package, _: int) -> list[Finding]:
    """Last-token logits serve the Generator only: genai's other APIs need a row per token."""
    pruned = [
        g.filename for g in pkg.graphs if any(o["name"] == "logits" and o["shape"][1:2] == [1] for o in g.outputs)
    ]
    return [
        Finding(
            "last-token-logits",
            "info",
            f"{name}: logits are [B,1,V] (--prune-lm-head): og.Engine, n-gram and draft-model speculative "
            "decoding need a logits row per token",
            "rebuild without --prune-lm-head to serve it through those APIs",
        )
        for name in pruned
    ]


def _eos(pkg: Package, _: int) -> list[Finding]:
    if pkg.config is None or pkg.generation is None:
        return []
    want = set(token_ids(pkg.generation.get("eos_token_id"))) | set(
        token_ids((pkg.hf_config or {}).get("eos_token_id"))
    )
    have = set(token_ids(pkg.config.get("model", {}).get("eos_token_id")))
    vocab = pkg.config.get("model", {}).get("vocab_size")
    if isinstance(vocab, int):  # ids past the logits: no model emits them, genai refuses them (package/genai_config.py)
        want = {i for i in want if 0 <= i < vocab}
    missing = sorted(want - have)
    if not missing:
        return []
    return [
        Finding(
            "eos-incomplete",
            "warning",
            f"eos_token_id lacks {missing} from generation_config.json: generation may not stop",
            f"set model.eos_token_id to {sorted(want | have)}",
        )
    ]


def _pipeline_kv(pkg: Package, _: int) -> list[Finding]:
    if len(pkg.graphs) < 2:
        return []
    kv = [{i["name"]: i["dtype"] for i in g.inputs if i["name"].startswith("past_")} for g in pkg.graphs]
    out = []
    names = [set(k) for k in kv if k]
    if any(a != b and a & b for a in names for b in names):
        out.append(
            Finding(
                "pipeline-kv-mismatch",
                "error",
                "pipeline stages list overlapping but different KV names; the runtime rejects partial overlap",
                "give every stage the same past/present names (or disjoint ones)",
            )
        )
    for name in set().union(*names) if names else ():
        dtypes = {k[name] for k in kv if name in k}
        if len(dtypes) > 1:
            out.append(
                Finding(
                    "pipeline-kv-mismatch",
                    "error",
                    f"{name} has dtypes {sorted(dtypes)} across stages; the runtime fails with a type mismatch",
                    "export every stage with the same KV dtype",
                )
            )
            break
    return out


def _unpacked(dim: Any, elem_type: int) -> Any:
    return dim * 2 if isinstance(dim, int) and elem_type == TensorProto.UINT8 else dim


def _kv_shape(pkg: Package, _: int) -> list[Finding]:
    """ORT GenAI allocates each layer's cache from the graph's concrete kv-head / head-dim dims and
    falls back to decoder.num_key_value_heads / head_size for symbolic ones (docs/gemma4.md §4). A
    config matching none of the layers is stale; layers that differ need per-layer allocation."""
    decoder = pkg.decoder
    want = (decoder.get("num_key_value_heads"), decoder.get("head_size"))
    out = []
    for g in pkg.graphs:
        # a 4-bit cache (uint8, kv_quant.py) stores two values a byte: head_dim / 2 on the graph
        shapes = {
            i["name"]: (i["shape"][1], _unpacked(i["shape"][3], i["elem_type"]))
            for i in g.inputs
            if i["name"].startswith("past_key_values.") and i["name"].endswith(".key") and len(i["shape"]) == 4
        }
        concrete = {s for s in shapes.values() if all(isinstance(d, int) for d in s)}
        if concrete and None not in want and want not in concrete:
            name, (kv, dim) = next(iter(shapes.items()))
            out.append(
                Finding(
                    "kv-shape-mismatch",
                    "error",
                    f"{g.filename}: {name} is [*, {kv}, *, {dim}] but genai_config says "
                    f"{want[0]} kv heads of size {want[1]}",
                    "make decoder.num_key_value_heads/head_size match the graph",
                )
            )
        if len(concrete) > 1:
            sizes = ", ".join(f"{kv}x{dim}" for kv, dim in sorted(concrete))
            out.append(
                Finding(
                    "per-layer-kv-shapes",
                    "info",
                    f"{g.filename}: KV layers have different kv-heads x head_dim ({sizes}); onnxruntime-genai "
                    ">= 0.18 allocates each layer from the graph's concrete dims",
                    "use onnxruntime-genai >= 0.18",
                )
            )
        if out:
            return out
    return out


def _ranges(values: list[int]) -> str:
    return ", ".join(str(v) for v in values[:8]) + (" ..." if len(values) > 8 else "")


RULES = (
    processor_findings,
    _window_cache,
    _missing_files,
    _external_data,
    _unknown_keys,
    _share_buffer,
    _sliding_window,
    _rope_cache,
    _kv_size,
    _position_ids,
    _pruned_logits,
    _eos,
    pad_findings,
    _pipeline_kv,
    _kv_shape,
    expert_findings,
    state_findings,
    ep_findings,
    draft_findings,
)
