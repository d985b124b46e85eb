"""Multi-LoRA base graphs: a low-rank branch beside each targeted linear, fed by graph inputs.

Every targeted linear `y = x @ W` becomes `y = x @ W + (x @ A) @ B`, where `A` [in, r] and `B`
[r, out] are graph inputs named as PEFT names the module without its `base_model.model.` prefix
(`model.layers.0.self_attn.q_proj.lora_A.weight`), so the parameters of an `.onnx_adapter` bind
to them by name. Each input is also an initializer of rank 0 (`[in, 0]` and `[0, out]` zeros): with
no adapter active the branch adds exact zeros. Each module has its own symbolic rank dimension,
because onnxruntime's memory planner treats equal dim names as equal sizes and two active adapters
of different ranks then fail (docs/lora.md §3). A packed projection (q|k|v, gate|up) keeps one
branch per original module, each padded to its slice of the packed output (docs/lora.md §2).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx_ir as ir

from gqa_export.errors import InputError
from gqa_export.graph.builder import GraphBuilder
from gqa_export.graph.params import NUMPY_DTYPES

LORA_A, LORA_B = ".lora_A.weight", ".lora_B.weight"
RANK_DIM = "lora_r."  # + the module's name: one symbolic rank per module


@dataclass
class LoraPlan:
    """The module names (last component: q_proj, down_proj, ...) that get a LoRA branch, and the
    full module names the graph gave one (to refuse a target that matches nothing)."""

    targets: tuple[str, ...]
    matched: list[str] = field(default_factory=list)

    def wants(self, module: str) -> bool:
        return module.rpartition(".")[2] in self.targets


def parse_targets(text: str | None) -> tuple[str, ...]:
    """`q_proj,v_proj` -> ("q_proj", "v_proj"); module names only, no paths."""
    if not text:
        return ()
    names = tuple(dict.fromkeys(t.strip() for t in text.split(",") if t.strip()))
    bad = [n for n in names if not n.replace("_", "").isalnum()]
    if bad or not names:
        raise InputError(f"--lora-targets takes module names separated by commas (e.g. q_proj,v_proj), got {text!r}")
    return names


def lora_branch(
    b: GraphBuilder,
    plan: LoraPlan,
    x: ir.Value,
    y: ir.Value,
    modules: list[tuple[str, int]],
    width_in: int,
    reordered: bool,
    dtype: ir.DataType,
    node: str,
) -> ir.Value:
    """y plus the LoRA branch of each targeted module of this (possibly packed) linear, added where
    HF's merged weight acts: after the MatMul, before its bias and output multiplier (docs/lora.md §2).

    `modules`: (weight tensor name, out width) in the packed output's column order; `reordered`: a
    fused projection whose rows the graph reorders, which an adapter's B rows would have to follow."""
    if reordered:
        raise InputError(
            f"--lora-targets: {modules[0][0]} is a fused projection stored in another row order than q | k | v; "
            "LoRA on it is not supported (target other modules)"
        )
    total = sum(out for _, out in modules)
    offset, out_value = 0, y
    for weight, width_out in modules:
        prefix = weight.removesuffix(".weight")
        if plan.wants(prefix):
            plan.matched.append(prefix)
            a = _input(b, prefix + LORA_A, dtype, (width_in, 0), [width_in, RANK_DIM + prefix])
            bb = _input(b, prefix + LORA_B, dtype, (0, width_out), [RANK_DIM + prefix, width_out])
            short = prefix.rpartition(".")[2]
            with b.scope(node):
                delta = b.op("MatMul", b.op("MatMul", x, a, name=f"lora_A/{short}"), bb, name=f"lora_B/{short}")
                if width_out != total:  # its own slice of the packed output, zeros elsewhere
                    pads = b.const([offset, total - offset - width_out], f"lora_pads.{short}", "int64")
                    axis = b.const([-1], "lora_axis", "int64")
                    delta = b.op("Pad", delta, pads, None, axis, name=f"lora_pad/{short}")
                out_value = b.op("Add", out_value, delta, name=f"lora_add/{short}")
        offset += width_out
    return out_value


def _input(b: GraphBuilder, name: str, dtype: ir.DataType, empty: tuple[int, int], shape: list[int | str]) -> ir.Value:
    """A graph input with a default initializer of rank 0 (an overridable initializer)."""
    tensor = ir.Tensor(np.zeros(empty, NUMPY_DTYPES[dtype]), name=name)
    value = ir.Value(name=name, type=ir.TensorType(dtype), shape=ir.Shape(shape), const_value=tensor)
    b.graph.inputs.append(value)
    b.graph.register_initializer(value)
    return value


def check_lora_options(targets: tuple[str, ...], graphs: int, multimodal: bool, shared_blocks: bool = False) -> None:
    """LoRA inputs go into one decoder graph, which onnxruntime-genai binds adapters to. A shared
    block's Linears (Zamba2) are one weight read by several layers: one LoRA input per weight would
    feed every use, which no adapter file of ours describes, so they are refused."""
    if targets and shared_blocks:
        raise InputError("--lora-targets is not built for models whose shared blocks several layers reuse (Zamba)")
    if targets and graphs > 1:
        raise InputError("--lora-targets needs a single decoder graph: export with --attention gqa (not split)")
    if targets and multimodal:
        raise InputError("--lora-targets is for text decoders: add --text-only for a multimodal checkpoint")


def check_matched(plan: LoraPlan | None) -> None:
    """Refuse a target no linear of the model has (a typo would otherwise build a plain base)."""
    if plan is None:
        return
    found = {m.rpartition(".")[2] for m in plan.matched}
    missing = [t for t in plan.targets if t not in found]
    if missing:
        raise InputError(
            f"--lora-targets {missing[0]} matches no linear layer of this model's decoder layers "
            "(use the module names of its checkpoint, e.g. q_proj,v_proj,o_proj,down_proj)"
        )
