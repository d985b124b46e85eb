"""Rich rendering of inspect reports and run summaries for the CLI (80-column friendly)."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

SEVERITY_STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}


def size(n: float | None) -> str:
    if n is None:
        return "?"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{int(n)} B" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def kv_cache_summary(entry: dict[str, Any]) -> str:
    """A quantized KV cache in one line: how it was calibrated and how far its logits drift from
    the float cache's (the manifest's options.kv_cache)."""
    drift = entry["drift"]
    text = "the built-in text" if entry["calibration"] == "builtin" else entry["calibration"]
    return (
        f"{entry['dtype']} {entry['scales']}, calibrated on {text} "
        f"({entry['calibration_tokens']} tokens); vs the float cache over {drift['decode_steps']} decode steps: "
        f"max |logit diff| {drift['max_abs_logit_diff']:.4g}, mean {drift['mean_abs_logit_diff']:.4g}, "
        f"top-1 agreement {drift['top1_agreement']:.1%}"
    )


def _cache(layer: dict[str, Any]) -> str:
    """A layer's KV cache: its own (max_length or window-sized), or another layer's (KV-shared)."""
    source = layer.get("kv_source")
    if source is not None and source != layer["layer"]:
        return f"of {source}"
    return "window" if layer.get("window_cache") else "own"


def inspect_report(console: Console, report: dict[str, Any]) -> None:
    s = report["summary"]
    head = Table(show_header=False, box=None, pad_edge=False)
    for key, value in (
        ("package", s["path"]),
        ("model type", s["model_type"] or "-"),
        ("providers", ", ".join(s["providers"])),
        ("parameters", f"{s['parameters'] / 1e6:.1f} M"),
        ("on disk", size(s["total_bytes"])),
        ("share buffer", str(s["past_present_share_buffer"])),
        ("max_length", f"{s['max_length']} (context {s['context_length']})"),
        ("KV cache", f"{size(s['kv_cache_bytes_per_row'])} per batch row at max_length"),
        ("I/O", ", ".join(f"{k}={v}" for k, v in s["io"].items())),
    ):
        head.add_row(f"[bold]{key}[/]", str(value))
    console.print(head)
    for g in s["graphs"]:
        flags = f"prompt={g['run_on_prompt']} token_gen={g['run_on_token_gen']}"
        console.print(f"\n[bold]{g['filename']}[/] ({g['stage']}; {flags}; opsets {g['opsets']})")
        weights = ", ".join(f"{k}: {v}" for k, v in g["weights"].items())
        console.print(f"  attention: {', '.join(g['attention_ops']) or '-'}; weights: {weights or '-'}")
        io = Table("", "name", "type", "shape", box=None, pad_edge=False)
        kv = [i for i in g["inputs"] if i["name"].startswith("past_")]
        for i in [i for i in g["inputs"] if not i["name"].startswith("past_")] + kv[:2]:
            io.add_row("in", i["name"], i["dtype"], str(i["shape"]))
        if len(kv) > 2:
            io.add_row("in", f"... {len(kv) - 2} more past_* inputs", "", "")
        outs = [o for o in g["outputs"] if not o["name"].startswith("present")]
        for o in outs:
            io.add_row("out", o["name"], o["dtype"], str(o["shape"]))
        io.add_row("out", f"{len(g['outputs']) - len(outs)} present_* outputs", "", "")
        console.print(io)
        ops = ", ".join(f"{k} {v}" for k, v in list(g["ops"].items())[:10])
        console.print(f"  ops: {ops}")
    for graph in dict.fromkeys(a["graph"] for a in report["layers"]):
        columns = ("layer", "op", "q", "kv", "dim", "cache", "rope", "win", "cap", "qkv")
        table = Table(*columns, title=f"{graph}: attention")
        for a in (a for a in report["layers"] if a["graph"] == graph):
            table.add_row(
                str(a["layer"]), a["op"].replace("GroupQueryAttention", "GQA"), str(a["num_heads"]),
                str(a["kv_heads"]), str(a["head_dim"]), _cache(a), "fused" if a["fused_rope"] else "-",
                str(a["local_window_size"]) if a["local_window_size"] > 0 else "-",
                f"{a['softcap']:g}" if a["softcap"] else "-", "packed" if a["packed_qkv"] else "-",
            )  # fmt: skip
        console.print(table)
    for graph in dict.fromkeys(e["graph"] for e in report.get("experts", [])):
        table = Table("layer", "op", "experts", "top-k", "precision", "activation", "renorm", title=f"{graph}: experts")
        for e in (e for e in report["experts"] if e["graph"] == graph):
            table.add_row(
                str(e["layer"]), e["op"], str(e["experts"]), str(e["top_k"]), e["precision"], e["activation"],
                "yes" if e["normalize"] else "no",
            )  # fmt: skip
        console.print(table)
    findings = report["findings"]
    if not findings:
        console.print("[green]no findings[/]")
    for f in findings:
        style = SEVERITY_STYLE[f["severity"]]
        console.print(f"[{style}]{f['severity']}[/] {f['id']}: {f['message']}\n  fix: {f['fix']}", soft_wrap=False)
