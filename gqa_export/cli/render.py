"""Rich rendering of inspect reports and build summaries for the CLI: 80-column friendly on a
terminal, every value as a person reads it (yes/no, "-", no Python reprs)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from gqa_export.units import size

if TYPE_CHECKING:  # the library is imported by the commands that run it
    from gqa_export.pipeline import BuildResult
    from gqa_export.runtime.run import GenerationResult

SEVERITY_STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}


def _by_precision(entry: dict[str, Any]) -> str:
    """The weights this build quantized itself beside a checkpoint's own (docs/prequantized.md §2)."""
    count = entry.get("quantized_by_precision")
    return f", {count} quantized by --precision {entry['precision']}" if count else ""


def _ep_forms(forms: dict[str, Any]) -> str:
    """The graph forms a build took for ops its EP lacks, in one line (docs/eps.md §2.7, §2.8)."""
    parts = []
    if gather := forms.get("float_gather"):
        parts.append(f"float Gather of {', '.join(gather['tables'])}, quantized lm_head ({gather['why']})")
    if forms.get("primitive_norms"):
        parts.append(f"{forms['primitive_norms']} RMSNorms as primitive ops")
    return "; ".join(parts)


def gguf_summary(entry: dict[str, Any]) -> str:
    """A package built from a GGUF in one line: per GGML type, kept / float / re-quantized counts."""
    parts = []
    for kind, counts in sorted(entry["types"].items()):
        shown = [f"{n} {what}" for what, n in counts.items() if n]
        parts.append(f"{kind} {', '.join(shown)}")
    return f"{entry['file']} ({entry['architecture']}): " + "; ".join(parts)


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


def logits_summary(entry: dict[str, Any]) -> str:
    """quant_report.json's logits_vs_float in one line."""
    where = f"{entry['prompts']} prompts" + (f", {entry['positions']} positions" if "positions" in entry else "")
    return f"relative L2 {entry['relative_l2']:.4g}, next-token agreement {entry['next_token_agreement']:.2%} ({where})"


def _cache(layer: dict[str, Any]) -> str:
    """A layer's KV cache: its own (max_length or window-sized), or another layer's (KV-shared)."""
    source = layer.get("kv_source")
    if source is not None and source != layer["layer"]:
        return f"of {source}"
    return "window" if layer.get("window_cache") else "own"


def _draft_row(draft: dict[str, Any]) -> str:
    """A speculative package's draft model in one line: its graph, size and genai's options."""
    options = ", ".join(f"{k} {shown(v)}" for k, v in draft["speculative"].items())
    size_ = f"{draft['filename']}: {draft['layers']} layers, {draft['parameters'] / 1e6:.1f} M parameters"
    return f"{size_}; {options}" if options else size_


def shown(value: Any) -> str:
    """A value as a person reads it: yes/no for booleans, "-" for nothing, `k v, ...` for a
    mapping, `[a, b]` for a shape; never Python's repr (None, True, {'ai.onnx': 21})."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, dict):
        return ", ".join(f"{k} {shown(v)}" for k, v in value.items()) or "-"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(shown(v) for v in value) + "]"
    return str(value)


def inspect_report(console: Console, report: dict[str, Any]) -> None:
    s = report["summary"]
    kv_row = size(s["kv_cache_bytes_per_row"]) + " per batch row at max_length"
    head = Table(show_header=False, box=None, pad_edge=False)
    for key, value in (
        ("package", s["path"]),
        ("model type", shown(s["model_type"])),
        ("providers", ", ".join(s["providers"])),
        ("parameters", f"{s['parameters'] / 1e6:.1f} M"),
        ("on disk", size(s["total_bytes"])),
        ("share buffer", shown(s["past_present_share_buffer"])),
        (
            "max_length",
            f"{s['max_length']} (context {shown(s['context_length'])})" if s["max_length"] is not None else "-",
        ),
        ("KV cache", kv_row if s["kv_cache_bytes_per_row"] is not None else "-"),
        *(
            [("recurrent state", size(s["recurrent_state_bytes_per_row"]) + " per batch row, any length")]
            if s.get("recurrent_state_bytes_per_row")
            else []
        ),
        ("I/O", ", ".join(f"{k} {shown(v)}" for k, v in s["io"].items())),
        *(
            [
                (
                    "LoRA",
                    f"{len(s['lora']['modules'])} modules take adapters ({', '.join(s['lora']['targets'])})"
                    + (f"; shipped: {', '.join(s['lora']['adapters'])}" if s["lora"].get("adapters") else ""),
                )
            ]
            if s.get("lora")
            else []
        ),
        *([("EP forms", _ep_forms(s["ep_forms"]))] if s.get("ep_forms") else []),
        *([("draft", _draft_row(s["draft"]))] if s.get("draft") else []),
        *(
            [
                (
                    "pre-quantized",
                    "{source_format}: {imported} weights imported as integers, {dequantized} dequantized".format(
                        **s["imported_quantization"]
                    )
                    + _by_precision(s["imported_quantization"]),
                )
            ]
            if s.get("imported_quantization")
            else []
        ),
        *([("GGUF", gguf_summary(s["gguf"]))] if s.get("gguf") else []),
    ):
        head.add_row(f"[bold]{key}[/]", escape(str(value)))
    console.print(head)
    for g in s["graphs"]:
        flags = f"prompt {shown(g['run_on_prompt'])}, token generation {shown(g['run_on_token_gen'])}"
        heading = f"({g['stage']}; {flags}; opsets {shown(g['opsets'])})"
        console.print(f"\n[bold]{escape(g['filename'])}[/] {escape(heading)}")
        weights = ", ".join(f"{k}: {v}" for k, v in g["weights"].items())
        console.print(escape(f"  attention: {', '.join(g['attention_ops']) or '-'}; weights: {weights or '-'}"))
        io = Table("", "name", "type", "shape", box=None, pad_edge=False)
        kv = [i for i in g["inputs"] if i["name"].startswith("past_")]
        lora = [i for i in g["inputs"] if ".lora_" in i["name"]]
        plain = [i for i in g["inputs"] if not i["name"].startswith("past_") and ".lora_" not in i["name"]]
        for i in plain + lora[:2] + kv[:2]:
            io.add_row("in", i["name"], i["dtype"], escape(shown(i["shape"])))
            if lora and i is lora[min(1, len(lora) - 1)] and len(lora) > 2:
                io.add_row("in", f"... {len(lora) - 2} more LoRA inputs", "", "")
        if len(kv) > 2:
            io.add_row("in", f"... {len(kv) - 2} more past_* inputs", "", "")
        outs = [o for o in g["outputs"] if not o["name"].startswith("present")]
        for o in outs:
            io.add_row("out", o["name"], o["dtype"], escape(shown(o["shape"])))
        if len(g["outputs"]) > len(outs):
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
    print_findings(console, report["findings"])


def print_findings(console: Console, findings: list[dict[str, Any]]) -> None:
    """inspect's findings, one per line with its fix; a message's brackets (shapes such as
    [batch, seq]) are text, never rich markup."""
    if not findings:
        console.print("[green]no findings[/]")
    for f in findings:
        line = escape(f"{f['id']}: {f['message']}\n  fix: {f['fix']}")
        console.print(f"[{SEVERITY_STYLE[f['severity']]}]{f['severity']}[/] {line}", soft_wrap=False)


def print_build(console: Console, result: BuildResult) -> None:
    """The text summary: where the package is, what it targets (KV cache dtype included), its size,
    the KV cache's measured drift, the accuracy report, the smoke run and the time."""
    kv = result.kv_cache_json
    rows = [
        ("package", str(result.output)),
        ("attention", f"{result.attention_mode} (recipe {result.recipe})"),
        ("target", f"{result.ep} {result.precision}, KV cache {kv['dtype']}, max_length {result.max_length}"),
        ("size", size(sum(result.files.values()))),
    ]
    if kv.get("drift"):
        rows.append(("KV cache", kv_cache_summary(kv)))
    print_summary(console, rows, result.report, result.smoke, result.seconds)


def print_summary(
    console: Console,
    rows: list[tuple[str, str]],
    report: dict[str, Any] | None,
    smoke: GenerationResult | None,
    seconds: float,
) -> None:
    """build's and quantize's summaries end alike: logits against float, smoke run, time."""
    if report and report.get("logits_vs_float"):
        rows.append(("logits vs float", logits_summary(report["logits_vs_float"])))
    if smoke is not None:
        rate, prefill = f"{smoke.decode_tokens_per_s:.1f} tok/s", f"prefill {smoke.prefill_ms:.1f} ms"
        rows.append(("smoke run", f"{smoke.ep}: {len(smoke.tokens)} tokens, {rate}, {prefill}"))
    rows.append(("time", f"{seconds:.1f} s"))
    table = Table(show_header=False, box=None, pad_edge=False)
    for key, text in rows:
        table.add_row(key, escape(text))
    console.print(table)


def gguf_report(console: Console, report: dict[str, Any]) -> None:
    """`inspect model.gguf` (source/gguf/summary.py): what the file holds, what a build makes of it."""
    family = report["family"] or "not imported"
    console.print(f"[bold]{escape(report['file'])}[/bold] ({size(report['bytes'])}, {report['parts']} part(s))")
    console.print(
        f"architecture {report['architecture']} -> {family}; {report['layers']} layers, "
        f"{report['parameters']:,} parameters, {report['bits_per_weight']:.2f} bits/weight"
        + (f", file type {report['file_type']}" if report["file_type"] else "")
    )
    tok = report["tokenizer"]
    console.print(
        f"tokenizer {tok['model'] or 'none'} ({tok['pre'] or '-'}, {tok['tokens']} tokens), "
        f"chat template {'yes' if tok['chat_template'] else 'no'}"
    )
    table = Table("type", "tensors", "parameters", "size", "bits/weight", "exported as", box=None)
    for kind, entry in report["types"].items():
        table.add_row(kind, str(entry["tensors"]), f"{entry['parameters']:,}", size(entry["bytes"]),
                      f"{entry['bits_per_weight']:.2f}", entry["exported_as"])  # fmt: skip
    console.print(table)
    verdict = "exportable" if report["exportable"] else f"not exportable as it is: {report['why_not']}"
    console.print(escape(verdict))
