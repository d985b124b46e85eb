"""gpt-oss GGUF tensors rebuilt into the fused, transposed, interleaved experts the gpt_oss spec reads.

llama.cpp's converter splits gpt-oss's experts (docs/gguf.md §4): `mlp.experts.gate_up_proj`
[E, H, 2I], whose columns alternate gate_j and up_j, becomes `blk.{i}.ffn_gate_exps` (the even
columns) and `ffn_up_exps` (the odd ones), each transposed to the file's [E, I, H] (MXFP4 blocks
in a converted release, any type otherwise); `down_proj` [E, I, H] is stored transposed,
[E, H, I]; the interleaved `gate_up_proj_bias` [E, 2I] is split the same way into the two
tensors' `.bias`; `self_attn.sinks` is renamed `attn_sinks.weight`. Here each HF tensor is one
`Mapped` over the file: `interleaved` names the up tensor whose rows alternate with the gate
tensor's, `transposed` (3-D) that HF holds each expert's file matrix [N, K] as [K, N]. A read
decodes only the file rows (HF columns) and columns (HF rows) it covers, one expert at a time,
through the store's exact dequantizer: MXFP4 blocks become exactly the values the safetensors
MXFP4 import computes (docs/moe.md §5), which is also what that import keeps (float, then
--precision).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from gqa_export.errors import InputError
from gqa_export.source.gguf.names import Mapped

# GGUF name (block index as {i}) -> HF name, suffix included (the sinks have none in HF)
_PLAIN = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
    "blk.{i}.attn_norm.weight": "model.layers.{i}.input_layernorm.weight",
    "blk.{i}.post_attention_norm.weight": "model.layers.{i}.post_attention_layernorm.weight",
    **{
        f"blk.{{i}}.attn_{g}.{s}": f"model.layers.{{i}}.self_attn.{h}_proj.{s}"
        for g, h in (("q", "q"), ("k", "k"), ("v", "v"), ("output", "o"))
        for s in ("weight", "bias")
    },
    "blk.{i}.attn_sinks.weight": "model.layers.{i}.self_attn.sinks",
    "blk.{i}.ffn_gate_inp.weight": "model.layers.{i}.mlp.router.weight",
    "blk.{i}.ffn_gate_inp.bias": "model.layers.{i}.mlp.router.bias",
    "blk.{i}.ffn_down_exps.weight": "model.layers.{i}.mlp.experts.down_proj",  # transposed per expert
    "blk.{i}.ffn_down_exps.bias": "model.layers.{i}.mlp.experts.down_proj_bias",
}
# gate tensor -> (its up partner, the HF tensor whose rows (weights: columns) alternate gate_j, up_j)
_INTERLEAVED = {
    "blk.{i}.ffn_gate_exps.weight": ("blk.{i}.ffn_up_exps.weight", "model.layers.{i}.mlp.experts.gate_up_proj"),
    "blk.{i}.ffn_gate_exps.bias": ("blk.{i}.ffn_up_exps.bias", "model.layers.{i}.mlp.experts.gate_up_proj_bias"),
}
_PARTNERS = frozenset(up for up, _ in _INTERLEAVED.values())
# HF [E, in, out] of the file's [E, out, in]: the expert weights
TRANSPOSED_EXPERTS = (".ffn_gate_exps.weight", ".ffn_down_exps.weight")


def _template(name: str) -> tuple[str, str | None]:
    parts = name.split(".")
    if parts[0] == "blk" and len(parts) > 2 and parts[1].isdigit():
        return "blk.{i}." + ".".join(parts[2:]), parts[1]
    return name, None


def map_gpt_oss(names: list[str], shapes: dict[str, tuple[int, ...]]) -> dict[str, Mapped]:
    """HF name -> Mapped for every tensor of a gpt-oss file (module doc)."""
    out: dict[str, Mapped] = {}
    present = set(names)
    for name in names:
        template, layer = _template(name)

        def fill(text: str, layer: str | None = layer) -> str:
            return text if layer is None else text.replace("{i}", layer)

        if template in _PARTNERS:
            continue  # read with its gate tensor
        if template in _INTERLEAVED:
            up_template, hf_template = _INTERLEAVED[template]
            up = fill(up_template)
            if up not in present or shapes[up] != shapes[name]:
                why = "missing" if up not in present else f"of shape {list(shapes[up])}, not {list(shapes[name])}"
                raise InputError(
                    f"gpt-oss GGUF tensor '{name}' has no matching '{up}' ({why}); the converter writes gate and "
                    "up experts in pairs"
                )
            hf = fill(hf_template)
            out[hf] = Mapped(name, hf, interleaved=up, transposed=name.endswith(TRANSPOSED_EXPERTS))
            continue
        hf_template = _PLAIN.get(template)
        if hf_template is None:
            raise InputError(
                f"GGUF tensor '{name}' has no transformers counterpart gqa-export knows for architecture 'gpt-oss'; "
                "the file holds a variant this import does not read"
            )
        hf = fill(hf_template)
        out[hf] = Mapped(name, hf, transposed=name.endswith(TRANSPOSED_EXPERTS) and len(shapes[name]) == 3)
    for name in names:  # an up tensor without its gate tensor would be silently dropped
        template, layer = _template(name)
        if template in _PARTNERS and not any(m.interleaved == name for m in out.values()):
            raise InputError(f"gpt-oss GGUF tensor '{name}' has no gate tensor beside it; the file is incomplete")
    return out


def is_composite(m: Mapped, file_shape: tuple[int, ...]) -> bool:
    """Whether a mapped tensor is read here: interleaved, or an expert stack held transposed."""
    return m.interleaved is not None or (m.transposed and len(file_shape) == 3)


def hf_shape(m: Mapped, file_shape: tuple[int, ...]) -> tuple[int, ...]:
    shape = list(file_shape)
    if m.interleaved is not None:  # weights: rows (axis 1) doubled; biases: the last axis
        shape[1 if len(shape) == 3 else -1] *= 2
    if len(shape) == 3 and m.transposed:
        shape[1], shape[2] = shape[2], shape[1]
    return tuple(shape)


RowReader = Callable[[str, int | None, int, int, int, int], np.ndarray]


def _expert_rows(m: Mapped, e: int, r0: int, r1: int, c0: int, c1: int, rows: RowReader) -> np.ndarray:
    """Rows [r0, r1) x columns [c0, c1) of expert e's [N, K] matrix as the HF model orders its rows
    (interleaved: row 2j is the gate tensor's row j, row 2j + 1 the up tensor's), float32."""
    gate, up = m.gguf, m.interleaved
    if up is None:
        return rows(gate, e, r0, r1, c0, c1)
    lo, hi = r0 // 2, (r1 + 1) // 2
    both = np.stack([rows(gate, e, lo, hi, c0, c1), rows(up, e, lo, hi, c0, c1)], axis=1)
    return both.reshape(2 * (hi - lo), c1 - c0)[r0 - 2 * lo : r1 - 2 * lo]


def read(m: Mapped, file_shape: tuple[int, ...], index: tuple, rows: RowReader) -> np.ndarray:
    """HF tensor `m` (or `index` of it) as float32 from the file, decoding only what it covers."""
    shape = hf_shape(m, file_shape)
    full = tuple(index) + (slice(None),) * (len(shape) - len(index))
    if len(shape) != 3 or len(full) != 3 or not all(isinstance(i, slice | int) for i in full):
        whole = _whole(m, file_shape, rows)
        return whole[tuple(index)] if index else whole
    picks = [
        np.arange(*i.indices(d)) if isinstance(i, slice) else np.array([i % d])
        for i, d in zip(full, shape, strict=True)
    ]
    transposed = m.transposed
    out_axis, in_axis = (2, 1) if transposed else (1, 2)
    r, c = picks[out_axis], picks[in_axis]
    blocks = []
    for e in picks[0]:
        if not r.size or not c.size:
            part = np.zeros((r.size, c.size), np.float32)
        else:
            r0, r1, c0, c1 = int(r.min()), int(r.max()) + 1, int(c.min()), int(c.max()) + 1
            part = _expert_rows(m, int(e), r0, r1, c0, c1, rows)[np.ix_(r - r0, c - c0)]
        blocks.append(part.T if transposed else part)
    out = np.stack(blocks) if blocks else np.zeros((0, *shape[1:]), np.float32)
    squeeze = tuple(axis for axis, i in enumerate(full) if isinstance(i, int))
    return out.squeeze(squeeze) if squeeze else out


def _whole(m: Mapped, file_shape: tuple[int, ...], rows: RowReader) -> np.ndarray:
    """The whole HF tensor (biases [E, 2I] interleaved along their last axis; small)."""
    if len(file_shape) == 3:
        return read(m, file_shape, (slice(None),) * 3, rows)
    n, k = file_shape
    gate = rows(m.gguf, None, 0, n, 0, k)
    up = m.interleaved
    if up is None:
        return gate
    return np.stack([gate, rows(up, None, 0, n, 0, k)], axis=-1).reshape(n, 2 * k)
