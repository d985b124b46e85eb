"""RoPE applied with plain ops: the standard-Attention graphs, and GQA graphs whose rotary dim or
style the fused RoPE refuses (docs/ort-ops.md §1.6: cos width a multiple of 8 and <= head_size / 2,
head_size % 16 for rotary; transformers' rotate-half or GPT-J's interleaved pairs).

The cos/sin tables are the ones GQA's fused RoPE reads (rows = positions, rotary_dim / 2 columns),
so both forms share initializers (`rope_caches` writes them once per rope kind, with longrope's
switch to its long table as an If, or as an offset into one concatenated table where the EP has no
If kernel); positions come from attention_mask (cumsum - 1), as HF's.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from gqa_export.arch.spec import ArchSpec
from gqa_export.graph.builder import GraphBuilder
from gqa_export.graph.options import GraphOptions
from gqa_export.graph.params import Params
from gqa_export.model.dims import ModelDims
from gqa_export.model.rope import RopeConfig, cos_sin_tables, longrope_switch


def rope_tables(
    b: GraphBuilder, positions: ir.Value, caches: dict[str, tuple[ir.Value, ir.Value]]
) -> dict[str, tuple[ir.Value, ir.Value]]:
    """cos/sin rows for this step's positions, [B,S,1,rot/2], once per rope key."""
    out = {}
    with b.scope("rope"):
        axis = b.const([2], "head_axis", "int64")
        for key, (cos, sin) in caches.items():
            out[key] = (
                b.op("Unsqueeze", b.op("Gather", cos, positions), axis, name=f"{key}_cos"),
                b.op("Unsqueeze", b.op("Gather", sin, positions), axis, name=f"{key}_sin"),
            )
    return out


def rotate(
    b: GraphBuilder, x: ir.Value, cos: ir.Value, sin: ir.Value, rope: RopeConfig, head_dim: int, name: str
) -> ir.Value:
    """RoPE on x [B,S,N,D]: the first rotary_dim channels rotate, the rest pass through.

    Rotate-half (HF default) pairs channel i with i + rotary_dim/2; interleaved (GPT-J, Cohere,
    GLM) pairs 2i with 2i + 1."""
    rotary = rope.rotary_dim
    sizes = [rotary] + ([head_dim - rotary] if head_dim > rotary else [])
    parts = list(b.op_multi("Split", x, b.const(sizes, "rope_part", "int64"), axis=-1, outputs=len(sizes),
                            name=f"{name}/part")) if len(sizes) > 1 else [x]  # fmt: skip
    if rope.interleaved:
        pairs = b.op("Reshape", parts[0], b.const([0, 0, 0, rotary // 2, 2], "rope_pairs", "int64"))
        even, odd = b.op_multi("Split", pairs, b.const([1, 1], "rope_halves", "int64"), axis=-1, outputs=2)
        even, odd = (b.op("Squeeze", v, b.const([-1], "rope_last", "int64")) for v in (even, odd))
        new_even = b.op("Sub", b.op("Mul", even, cos), b.op("Mul", odd, sin))
        new_odd = b.op("Add", b.op("Mul", odd, cos), b.op("Mul", even, sin))
        unsq = b.const([-1], "rope_last_u", "int64")
        stacked = b.op("Concat", b.op("Unsqueeze", new_even, unsq), b.op("Unsqueeze", new_odd, unsq), axis=-1)
        rotated = b.op("Reshape", stacked, b.const([0, 0, 0, rotary], "rope_flat", "int64"), name=f"{name}/pairs")
    else:
        half = rotary // 2
        x1, x2 = b.op_multi("Split", parts[0], b.const([half, half], "rope_split", "int64"), axis=-1, outputs=2)
        out1 = b.op("Sub", b.op("Mul", x1, cos), b.op("Mul", x2, sin))
        out2 = b.op("Add", b.op("Mul", x2, cos), b.op("Mul", x1, sin))
        rotated = b.op("Concat", out1, out2, axis=-1, name=f"{name}/halves")
    if len(parts) == 1:
        return rotated
    return b.op("Concat", rotated, parts[1], axis=-1, name=f"{name}/Concat")


def rotated_if(
    b: GraphBuilder,
    x: ir.Value,
    table: tuple[ir.Value, ir.Value] | None,
    rope: RopeConfig | None,
    width: int,
    name: str,
) -> ir.Value:
    """x [B,S,N,width] rotated by `table` (cos, sin) with `rope`, or x itself where the table is None (GQA's
    fused RoPE rotates it instead)."""
    if table is None or rope is None:
        return x
    return rotate(b, x, table[0], table[1], rope, width, f"{name}_rope")


def fused_rope_ok(rope: RopeConfig, head_dim: int) -> bool:
    """Whether GQA's fused RoPE (do_rotary=1) computes this rope exactly (docs/ort-ops.md §1.6)."""
    return (
        head_dim % 16 == 0
        and rope.rotary_dim % 16 == 0
        and rope.rotary_dim <= head_dim
        and (not rope.interleaved or rope.rotary_dim == head_dim)
    )


def learned_frequency_scale(spec: ArchSpec, params: Params) -> np.ndarray | None:
    """exp(alpha) of the spec's learned per-frequency rope scale (Mistral-Large-4's LeRoPE, rotary_emb.alpha:
    HF's inv_freq * alpha.float().exp(), in float32), else None."""
    names = spec.latent_attention
    if names is None or names.rope_frequency_scale is None:
        return None
    return np.exp(params.store.read(spec.tensor(names.rope_frequency_scale)).astype(np.float32)).astype(np.float32)


def rope_caches(
    b: GraphBuilder,
    dims: ModelDims,
    params: Params,
    opts: GraphOptions,
    total: ir.Value,
    frequency_scale: np.ndarray | None = None,
) -> dict[str, tuple[ir.Value, ir.Value]]:
    """cos/sin initializers per rope key; for longrope an If picks the long table past the switch,
    or (`rope_switch="offset"`, the EPs without an If kernel) an offset into one table.
    `frequency_scale`: a learned factor per inverse frequency (`learned_frequency_scale`)."""
    caches = {}
    used = {layer.rope for layer in dims.layers if layer.rope is not None}
    for key in sorted(used):
        rope = dims.ropes[key]
        prefix = "" if key == "default" else f"{key}."
        tables = cos_sin_tables(rope, opts.rope_rows, dims.max_position_embeddings, frequency_scale=frequency_scale)
        switch = longrope_switch(rope)
        if switch is not None and opts.rope_switch == "offset":
            long = cos_sin_tables(rope, opts.rope_rows, dims.max_position_embeddings, long=True)
            caches[key] = _offset_tables(b, prefix, tables, long, switch, params, total)
            continue
        cos, sin = (
            b.initializer(f"{prefix}{n}_cache", params.table(t)) for n, t in zip(("cos", "sin"), tables, strict=True)
        )
        if switch is not None:
            long = cos_sin_tables(rope, opts.rope_rows, dims.max_position_embeddings, long=True)
            long_cos, long_sin = (
                b.initializer(f"{prefix}{n}_cache_long", params.table(t))
                for n, t in zip(("cos", "sin"), long, strict=True)
            )
            with b.scope("longrope"):
                use_long = b.op("Greater", total, b.const(switch, "switch", "int32"))
                cos = _select(b, use_long, long_cos, cos, "cos")
                sin = _select(b, use_long, long_sin, sin, "sin")
        caches[key] = (cos, sin)
    return caches


def _select(b: GraphBuilder, cond: ir.Value, then: ir.Value, other: ir.Value, name: str) -> ir.Value:
    """If(cond) -> then else other, with the branches reading the outer-scope tables."""

    def branch(value: ir.Value, tag: str) -> ir.Graph:
        out = ir.Value(name=f"{name}_{tag}_out", type=value.type, shape=value.shape)
        node = ir.Node("", "Identity", [value], outputs=[out], name=f"/longrope/{name}_{tag}")
        return ir.Graph([], [out], nodes=[node], name=f"{name}_{tag}")

    return b.op("If", cond, then_branch=branch(then, "long"), else_branch=branch(other, "short"), name=f"{name}_select")


def _offset_tables(
    b: GraphBuilder,
    prefix: str,
    short: tuple[np.ndarray, np.ndarray],
    long: tuple[np.ndarray, np.ndarray],
    switch: int,
    params: Params,
    total: ir.Value,
) -> tuple[ir.Value, ir.Value]:
    """longrope without an If (docs/eps.md §2.4): one table per cos/sin, the short rows below the
    switch followed by the whole long table, and a Slice of `rows` rows starting at 0 or at the
    switch, chosen by Where on the total length. Short positions never reach past the switch, so the
    long rows a short slice includes are never read; the op reading the slice sees an ordinary table
    (no provider option: an EP told the concatenation offset would add it a second time)."""
    rows = short[0].shape[0]
    offset_rows = min(switch, rows)
    with b.scope("longrope"):
        use_long = b.op("Greater", total, b.const(switch, "switch", "int32"))
        long_start, short_start = b.const([offset_rows], "long_start", "int64"), b.const([0], "short_start", "int64")
        start = b.op("Where", use_long, long_start, short_start)
        end = b.op("Add", start, b.const([rows], "rows", "int64"))
        axis = b.const([0], "rows_axis", "int64")
        out = []
        for name, s, lng in zip(("cos", "sin"), short, long, strict=True):
            table = b.initializer(f"{prefix}{name}_cache", params.table(np.concatenate([s[:offset_rows], lng])))
            out.append(b.op("Slice", table, start, end, axis, name=f"{name}_rows"))
    return out[0], out[1]
