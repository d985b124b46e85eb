"""The EP lint: ops and dtypes the package's execution provider has no kernel for (docs/eps.md §5).

The data is the EP table's (`eps.graph_problems`): its `missing_ops`, `gqa_dtypes` and
`nbits_bits`. The same facts (`op_facts.ir_facts`) are read from a graph being built, so the build
refuses before writing, and from a written package (reader's `GraphInfo.op_facts`), so `inspect`
flags a package that was built elsewhere or edited.
"""

from __future__ import annotations

from typing import Any

from gqa_export.check.findings import Finding
from gqa_export.check.op_facts import ir_facts
from gqa_export.check.reader import Package
from gqa_export.eps import EPS, by_genai_provider, graph_problems
from gqa_export.errors import InputError


def ep_findings(pkg: Package, _: int) -> list[Finding]:
    if not pkg.config:
        return []
    decoder = (pkg.config.get("model") or {}).get("decoder") or {}
    session = decoder.get("session_options") or {}
    ep = by_genai_provider([next(iter(p), None) for p in session.get("provider_options") or [] if isinstance(p, dict)])
    out = []
    for g in [*pkg.graphs, *pkg.encoders]:  # a multimodal package's vision / embedding graphs too
        for problem in graph_problems(ep, {tuple(f) for f in g.op_facts}):
            out.append(
                Finding("ep-unsupported-op", "error", f"{g.filename}: {problem}",
                        f"rebuild for --ep {ep.name} with gqa-export (docs/eps.md §5), or for another EP")
            )  # fmt: skip
    return out


def check_ep_mode(ep: str, mode: str) -> None:
    """The build's attention mode must be one the EP runs (eps.attention_modes)."""
    modes = EPS[ep].attention_modes
    if mode not in modes:
        raise InputError(
            f"--ep {ep} runs --attention {' or '.join(modes)} only, not {mode} (docs/eps.md §2); "
            "export with --attention gqa or for --ep cpu"
        )


def check_ep_graph(ep: str, models: list[Any]) -> None:
    """Refuse, before anything is written, a graph holding an op or dtype the EP has no kernel for."""
    record = EPS[ep]
    for model in models:
        problems = graph_problems(record, ir_facts(model))
        if problems:
            raise InputError(f"--ep {ep} cannot run this model: {problems[0]} (docs/eps.md §2); export for --ep cpu")
        if record.max_tensor_bytes:
            sizes = {v.name: v.const_value.nbytes for v in model.graph.initializers.values() if v.const_value}
            name, size = max(sizes.items(), key=lambda item: item[1], default=("", 0))
            if size > record.max_tensor_bytes:
                raise InputError(
                    f"--ep {ep} allocates at most {record.max_tensor_bytes / 2**20:g} MiB per tensor, and {name} "
                    f"holds {size / 2**20:.2f} MiB (docs/eps.md §2); quantize it or export for --ep cpu"
                )
