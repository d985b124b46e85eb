"""Per-layer building blocks: linear layers, RMSNorm, projections with q/k norms, gated MLPs.

Weights become lazy initializers named after the checkpoint tensors they come from (packed ones
after the packed module, e.g. `...self_attn.qkv_proj.weight`), so later stages can address them.
A bias is used exactly when the checkpoint has one (Qwen2's q/k/v biases, Llama's
attention_bias, ...), so no config flag can make the graph disagree with the weights.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import onnx_ir as ir

from gqa_export.arch.spec import ArchSpec
from gqa_export.graph.adapters import low_rank_sum
from gqa_export.graph.builder import GraphBuilder, typed
from gqa_export.graph.fused_qkv import selected_rows
from gqa_export.graph.head_layer_norm import head_layer_norm
from gqa_export.graph.lora import LoraPlan, lora_branch
from gqa_export.graph.masks import StatePadding
from gqa_export.graph.ngpt_scales import l2_norm, squared, stored_scaled
from gqa_export.graph.params import NUMPY_DTYPES, Params
from gqa_export.graph.rotary import rotate
from gqa_export.graph.value_heads import padded_values
from gqa_export.graph.weightless_rms import weightless_rms
from gqa_export.model.dims import LayerDims, ModelDims

B, S = "batch_size", "sequence_length"


@dataclass(frozen=True)
class LayerContext:
    """What every block of layer `i` needs."""

    b: GraphBuilder
    i: int
    dims: ModelDims
    spec: ArchSpec
    params: Params
    packed_qkv: bool
    query_scale: ir.Value | None = None  # [B,S,1] per-token query multiplier (Ministral-3)
    padding: StatePadding | None = None  # this run's padding, for the recurrent-state mixers
    # the attention output gate [B,S,Nq*D] that qkv_projection splits off q_proj for the layer to
    # apply after attention (spec attention_output_gate, Qwen3.5)
    output_gate: dict[str, ir.Value] = field(default_factory=dict)
    # a bool [1]: this run is a prompt, which HF computes in its chunked Mamba2 form (more than one
    # token, or no past); set where a Mamba2 mixer has a prompt-only dt floor (Nemotron-H)
    prompt_step: ir.Value | None = None
    lora: LoraPlan | None = None  # the modules that get a LoRA branch (graph/lora.py)
    packed_gate_up: bool = True  # gate and up as one MatMul + Split (GraphOptions.packed_gate_up)
    # sparse outputs waiting for a later layer's residual, by that layer's index (graph/shortcut_moe.py)
    shortcut: dict[int, ir.Value] | None = None
    # a Linear -> the full name of its stored adapter pair's module, always added (Zamba2's per-use
    # adapters, graph/adapters.py)
    adapters: Mapping[str, str] = field(default_factory=dict)
    # a layer whose attention projections carry state (compressed convolutional attention, graph/cca.py):
    # its past states, and the dict its presents go to by layer
    state_io: tuple[tuple[ir.Value, ...], dict[int, tuple[ir.Value, ...]]] | None = None
    # values carried from one layer's block to the next layer's (ZAYA's router stream, graph/stream_router.py)
    carried: dict[str, ir.Value] | None = None

    def name(self, module: str, suffix: str = "weight") -> str:
        return self.spec.layer_tensor(self.i, module, suffix)

    def has(self, module: str, suffix: str = "weight") -> bool:
        return self.name(module, suffix) in self.params.store

    def held_spelling(self, modules: str | None, prefix: str = "", suffix: str = "weight") -> str | None:
        """The first of a module's spellings ("a|b", tried in order: a hub's name and transformers'
        rename of it) whose tensor the checkpoint holds, with `prefix`; None where it holds none."""
        spellings = (f"{prefix}{m}" for m in (modules or "").split("|") if m)
        return next((m for m in spellings if self.has(m, suffix)), None)

    def has_norm(self, module: str | None) -> bool:
        """A norm the checkpoint holds: its weight, or one weight per head (`{module}.norms.0`); every
        norm the spec names where they are weightless L2 norms (nGPT), which hold no tensor."""
        if module is not None and self.dims.norm_kind == "l2":
            return True
        return module is not None and (self.has(module) or self.has(f"{module}.norms.0"))

    @property
    def layer(self) -> LayerDims:
        return self.dims.layers[self.i]


def linear(lc: LayerContext, x: ir.Value, modules: list[str], packed_name: str | None, node: str) -> ir.Value:
    """x @ concat(W_m.T) (+ concat(b_m) when the checkpoint has the biases), with the spec's
    multipliers of these modules' input and output (model/multipliers.py) where the config sets them."""
    b, params = lc.b, lc.params
    x = _input_multiplier(lc, x, modules, node)
    graph_name = lc.name(packed_name) if packed_name else lc.name(modules[0])
    rows = _selected_rows(lc, modules)
    if rows is not None:  # a fused qkv stored in another order: its rows taken in [q | k | v] order
        weight_tensor = params.matmul_rows(lc.name(modules[0]), rows)
    elif lc.spec.linear_layout == "in_out":  # Conv1D (GPT-2): stored as MatMul's [in, out] already
        assert len(modules) == 1, f"{modules}: Conv1D weights are read one at a time"
        weight_tensor = params.matmul_stored(lc.name(modules[0]))
    else:
        weight_tensor = params.matmul_weight([lc.name(m) for m in modules])
    y = b.op("MatMul", x, b.initializer(graph_name, weight_tensor), name=f"{node}/MatMul")
    if lc.lora is not None and any(lc.lora.wants(m) for m in modules):  # before bias and multiplier, as HF merges
        axis = 1 if lc.spec.linear_layout == "in_out" else 0
        outs = [(lc.name(m), int(params.store.info(lc.name(m)).shape[axis])) for m in modules]
        y = lora_branch(b, lc.lora, x, y, outs, int(weight_tensor.shape[0]), rows is not None, params.dtype, node)
    if all(lc.has(m, "bias") for m in modules):
        bias_name = lc.name(packed_name, "bias") if packed_name else lc.name(modules[0], "bias")
        biases = [lc.name(m, "bias") for m in modules]
        bias_tensor = params.vector(biases) if rows is None else params.vector_rows(biases[0], rows)
        y = b.op("Add", y, b.initializer(bias_name, bias_tensor), name=f"{node}/Add")
    if any(m in lc.adapters for m in modules):  # after the bias: HF adds adapter(x) to the Linear's output
        assert all(m in lc.adapters for m in modules), f"{modules} are packed but not all have adapters"
        pairs = [(f"{lc.adapters[m]}.0.weight", f"{lc.adapters[m]}.1.weight") for m in modules]
        y = b.op("Add", y, low_rank_sum(b, x, pairs, params, node), name=f"{node}/adapted")
    return _output_multiplier(lc, y, modules, node)


def _selected_rows(lc: LayerContext, modules: list[str]) -> list[tuple[int, int]] | None:
    """The row selection of a fused qkv stored in another order than [q | k | v] (spec qkv_layout:
    GPT-NeoX's and Bloom's head by head, Falcon's per kv group, CodeGen's q | v | k blocks)."""
    if lc.spec.qkv_layout == "stacked" or modules != [lc.spec.layer.qkv]:
        return None
    shape = (lc.dims.num_heads, lc.layer.num_kv_heads, lc.layer.head_dim)
    return selected_rows(lc.params, lc.name(modules[0]), lc.spec.qkv_layout, shape)


def _input_multiplier(lc: LayerContext, x: ir.Value, modules: list[str], node: str) -> ir.Value:
    """x times the modules' input multiplier (one for all of them: they are packed into one MatMul)."""
    if not lc.dims.multipliers:
        return x
    found = {lc.dims.multipliers.get((m, "input"), ((0, 1.0),)) for m in modules}
    assert len(found) == 1, f"{modules} are packed but have different input multipliers"
    ((_, value),) = found.pop()
    if value == 1.0:
        return x
    scalar = lc.b.const(_in_dtype(lc, value), f"layers.{lc.i}.{node}.input_multiplier")
    return lc.b.op("Mul", x, scalar, name=f"{node}/input_multiplier")


def _output_multiplier(lc: LayerContext, y: ir.Value, modules: list[str], node: str) -> ir.Value:
    """y times the modules' output multipliers: one scalar, or a vector over the output channels
    when they differ between the packed modules or between segments of one (a Mamba2 in_proj)."""
    if not lc.dims.multipliers:
        return y
    segments: list[tuple[int, float]] = []
    for m in modules:
        width = lc.params.store.info(lc.name(m)).shape[0]
        for part, value in lc.dims.multipliers.get((m, "output"), ((0, 1.0),)):
            segments.append((part or width, value))
    if all(value == 1.0 for _, value in segments):
        return y
    values = {value for _, value in segments}
    scale = (
        _in_dtype(lc, values.pop())
        if len(values) == 1
        else np.concatenate([np.full(width, _in_dtype(lc, value)) for width, value in segments])
    )
    multiplier = lc.b.const(scale, f"layers.{lc.i}.{node}.output_multiplier")
    return lc.b.op("Mul", y, multiplier, name=f"{node}/output_multiplier")


def _in_dtype(lc: LayerContext, value: float) -> np.ndarray:
    """A multiplier in the graph's dtype, rounded through float32 as the weights are."""
    return np.asarray(value, dtype=np.float32).astype(NUMPY_DTYPES[lc.params.dtype])


def normalize(
    b: GraphBuilder,
    x: ir.Value,
    weight_name: str,
    params: Params,
    dims: ModelDims,
    name: str,
    width: int,
    *,
    kind: str | None = None,
    eps: float | None = None,
    offset: float | None = None,
) -> ir.Value:
    """The family's norm over the last axis, fp32 inside (stash_type=1): ORT's
    SimplifiedLayerNormalization (RMSNorm), or LayerNormalization with the checkpoint's bias when
    the spec says `layer` (PhiMoE).

    The spec's norm_offset turns the stored weight w into (offset + w) (Gemma's RMSNorm). `kind`, `eps`
    and `offset` stand for the family's where one norm differs from its others (Muse-Glimmer's weightless
    embedding norm, its post-block norms' eps, its final norm's plain w).
    """
    kind = kind or dims.norm_kind
    eps = dims.rms_eps if eps is None else eps
    if kind == "l2":  # nGPT's weightless L2 norm (graph/ngpt_scales.py)
        out = l2_norm(b, x, width, params, eps, name)
        return typed(out, params.dtype, [B, S, width])
    if kind == "rms_free":  # NanoChat's F.rms_norm: no weight
        out = weightless_rms(b, x, width, params.dtype, eps, name)
        return typed(out, params.dtype, [B, S, width]) if width else out
    if kind == "layer_free":  # OLMo's F.layer_norm: no weight, no bias
        ones = b.const(np.ones(width or 1, NUMPY_DTYPES[params.dtype]), f"{name}_ones")
        out = b.op("LayerNormalization", x, ones, axis=-1, epsilon=eps, stash_type=1, name=name)
        return typed(out, params.dtype, [B, S, width]) if width else out
    offset = dims.norm_offset if offset is None else offset
    w = b.initializer(weight_name, params.vector([weight_name], offset=offset))
    if kind == "layer":
        bias_name = params.held_bias(weight_name)
        bias = b.initializer(bias_name, params.vector([bias_name])) if bias_name is not None else None
        out = b.op("LayerNormalization", x, w, bias, axis=-1, epsilon=eps, stash_type=1, name=name)
    else:
        out = b.op("SimplifiedLayerNormalization", x, w, axis=-1, epsilon=eps, stash_type=1, name=name)
    return typed(out, params.dtype, [B, S, width]) if width else out


def qkv_projection(
    lc: LayerContext, x: ir.Value, separate: bool = False, qk_norms: bool = True
) -> tuple[ir.Value, ir.Value | None, ir.Value | None]:
    """GQA's query/key/value inputs: one packed tensor, or three when q/k/v need their norms or
    the caller (standard Attention) needs them apart. The weights are the same either way.

    A KV-shared layer projects only its query (key and value come from another layer's cache). A
    k = v layer (Gemma-4 full layers with attention_k_eq_v) has no v_proj: its values are the raw
    key projection, before the key norm (and RoPE). qk_norms False leaves q/k un-normed for a
    caller that normalizes them after RoPE (`qk_norms_after_rope`)."""
    L, dims, layer = lc.spec.layer, lc.dims, lc.layer
    gated = lc.spec.attention_output_gate  # q_proj is twice as wide: [query | gate] per head
    q_width, kv_width = dims.num_heads * layer.head_dim * (2 if gated else 1), layer.num_kv_heads * layer.head_dim
    v_width = layer.num_kv_heads * (dims.value_head_dim or layer.head_dim)  # narrower values: padded below
    # q/k norms where the spec has them and the checkpoint holds them (optional in Phi-2, StableLM, Cohere)
    # scaleless ones (no tensor) before RoPE where the spec does not put them after it (Muse-Glimmer)
    scaleless = dims.scaleless_qk_norm and not lc.spec.qk_norm_after_rope
    qk_norm = lc.spec.qk_norm is not None and qk_norms and (lc.has_norm(L.q_norm) or scaleless)
    attention = L.q.rpartition(".")[0]  # packed projections are named in the attention module (self_attn, mixer)
    if layer.shares_kv:
        q = _split_output_gate(lc, linear(lc, x, [L.q], None, "q_proj"))
        return _scale_query(lc, _head_norm(lc, q, L.q_norm, "q_norm", dims.num_heads) if qk_norm else q), None, None
    split = (
        gated or qk_norm or separate or layer.k_eq_v or lc.spec.v_norm or lc.query_scale is not None or dims.clip_qkv
    ) or v_width != kv_width
    attention = L.q.rpartition(".")[0]  # packed weights are named in the attention's own module
    if L.qkv:  # a checkpoint that stores the fused projection (Phi-3; in its own row order: spec qkv_layout)
        packed = linear(lc, x, [L.qkv], None, "qkv_proj")
    elif layer.k_eq_v:
        packed = linear(lc, x, [L.q, L.k], f"{attention}.qk_proj", "qk_proj")
    elif lc.packed_qkv:
        packed = linear(lc, x, [L.q, L.k, L.v], f"{attention}.qkv_proj", "qkv_proj")
    else:
        q, k, v = (linear(lc, x, [m], None, n) for m, n in ((L.q, "q_proj"), (L.k, "k_proj"), (L.v, "v_proj")))
        return _qkv_norms(lc, q, k, _padded(lc, v), qk_norm)
    if not split:
        return packed, None, None
    if layer.k_eq_v:
        sizes = lc.b.const([q_width, kv_width], "qk_split", "int64")
        q, k = lc.b.op_multi("Split", packed, sizes, axis=-1, outputs=2, name="qk_split")
        return _qkv_norms(lc, q, k, k, qk_norm)
    sizes = lc.b.const([q_width, kv_width, v_width], "qkv_split", "int64")
    q, k, v = lc.b.op_multi("Split", packed, sizes, axis=-1, outputs=3, name="qkv_split")
    return _qkv_norms(lc, q, k, _padded(lc, v), qk_norm)


def _padded(lc: LayerContext, v: ir.Value) -> ir.Value:
    """Values narrower than head_dim zero-padded to it (graph/value_heads.py)."""
    return padded_values(lc.b, v, lc.layer.num_kv_heads, lc.dims.value_head_dim, lc.layer.head_dim)


def _qkv_norms(
    lc: LayerContext, q: ir.Value, k: ir.Value, v: ir.Value, qk_norm: bool = True
) -> tuple[ir.Value, ir.Value, ir.Value]:
    L, dims, b, layer = lc.spec.layer, lc.dims, lc.b, lc.layer
    q = _split_output_gate(lc, q)
    if lc.spec.v_norm:  # Gemma-4: RMSNorm over head_dim without a weight
        v = _head_norm(lc, v, None, "v_norm", layer.num_kv_heads)
    if qk_norm and lc.spec.qk_norm == "full":  # OLMo-2: one RMSNorm over all heads' channels
        assert L.q_norm and L.k_norm
        q = normalize(b, q, lc.name(L.q_norm), lc.params, dims, "q_norm", dims.num_heads * layer.head_dim)
        k = normalize(b, k, lc.name(L.k_norm), lc.params, dims, "k_norm", layer.num_kv_heads * layer.head_dim)
    elif qk_norm and lc.spec.qk_norm == "scaleless":  # Muse-Glimmer: weightless RMSNorms over head_dim, before RoPE
        q = _head_norm(lc, q, None, "q_norm", dims.num_heads)
        k = _head_norm(lc, k, None, "k_norm", layer.num_kv_heads)
    elif qk_norm and lc.spec.qk_norm in ("head", "head_layer"):
        assert L.q_norm and L.k_norm
        q = _head_norm(lc, q, L.q_norm, "q_norm", dims.num_heads)
        k = _head_norm(lc, k, L.k_norm, "k_norm", layer.num_kv_heads)
    if dims.clip_qkv:  # OLMoE: q, k and v clamped after the norms, before RoPE
        low, high = (
            b.const(np.asarray(c, NUMPY_DTYPES[lc.params.dtype]), "clip_qkv") for c in (-dims.clip_qkv, dims.clip_qkv)
        )
        q, k, v = (b.op("Clip", t, low, high, name=f"{n}_clip") for t, n in ((q, "q"), (k, "k"), (v, "v")))
    return _scale_query(lc, q), k, v


def _split_output_gate(lc: LayerContext, q: ir.Value) -> ir.Value:
    """The query of a q_proj whose heads are [query (D) | gate (D)] (spec attention_output_gate);
    the gate, flattened to [B,S,Nq*D], is left in lc.output_gate for the layer to apply."""
    if not lc.spec.attention_output_gate:
        return q
    b, heads, d = lc.b, lc.dims.num_heads, lc.layer.head_dim
    per_head = b.op("Reshape", q, b.const([0, 0, heads, 2 * d], "q_gate_heads", "int64"))
    query, gate = b.op_multi("Split", per_head, b.const([d, d], "q_gate_split", "int64"), axis=-1, outputs=2,
                             name="q_gate_split")  # fmt: skip
    flat = b.const([0, 0, heads * d], "q_gate_flat", "int64")
    lc.output_gate["gate"] = b.op("Reshape", gate, flat, name="output_gate_flat")
    return b.op("Reshape", query, flat, name="query_flat")


def _scale_query(lc: LayerContext, q: ir.Value) -> ir.Value:
    return q if lc.query_scale is None else lc.b.op("Mul", q, lc.query_scale, name="query_scale")


def _head_norm(lc: LayerContext, x: ir.Value, module: str | None, name: str, heads: int) -> ir.Value:
    """The head norm on x [B,S,heads*D] (see `head_norm`)."""
    b, d = lc.b, lc.layer.head_dim
    per_head = b.op("Reshape", x, b.const([0, 0, heads, d], f"{name}_heads", "int64"))
    y = head_norm(lc, per_head, module, name, heads)
    return b.op("Reshape", y, b.const([0, 0, heads * d], f"{name}_flat", "int64"))


def head_norm(lc: LayerContext, x: ir.Value, module: str | None, name: str, heads: int) -> ir.Value:
    """The family's norm over each head's head_dim channels of x [B,S,heads,D]; module None: an
    RMSNorm without weight (Gemma-4's v-norm). LayerNorm families store the weight per head in one
    of three ways: one [D] shared by the heads (+ bias, Phi-2), [heads, D] (Cohere), or one module
    per head `{module}.norms.{h}` (StableLM)."""
    b, d, params, dims = lc.b, lc.layer.head_dim, lc.params, lc.dims
    if dims.norm_kind == "l2":  # nGPT: each head's q / k on the unit sphere
        return l2_norm(b, x, d, params, dims.rms_eps, name)
    if module is not None and lc.spec.qk_norm == "head_layer":  # Chameleon: [heads, D] weight and bias tables
        eps = dims.rms_eps if lc.spec.qk_norm_eps is None else lc.spec.qk_norm_eps
        return head_layer_norm(b, x, lc.name(module), params, eps, name)
    if module is None:
        weight = b.const(np.ones(d, NUMPY_DTYPES[params.dtype]), f"{name}_unit_weight")
        return b.op("SimplifiedLayerNormalization", x, weight, axis=-1, epsilon=dims.rms_eps, stash_type=1, name=name)
    if dims.norm_kind != "layer":
        return normalize(b, x, lc.name(module), params, dims, name, 0)
    weight_name = lc.name(module)
    if weight_name in params.store and len(params.store.info(weight_name).shape) == 1:
        return normalize(b, x, weight_name, params, dims, name, 0)  # LayerNorm with the shared [D] weight (+ bias)
    per_head = [lc.name(f"{module}.norms.{h}") for h in range(heads)] if weight_name not in params.store else []
    ones = b.const(np.ones(d, NUMPY_DTYPES[params.dtype]), f"{name}_ones")
    y = b.op("LayerNormalization", x, ones, axis=-1, epsilon=dims.rms_eps, stash_type=1, name=name)
    weights = (
        b.initializer(weight_name, params.flat([weight_name]))
        if not per_head
        else b.initializer(f"{lc.name(module, '')}.weight", params.flat(per_head))
    )
    shape = b.const([heads, d], f"{name}_weight_shape", "int64")
    return b.op("Mul", y, b.op("Reshape", weights, shape), name=f"{name}_scale")


def qk_norms_after_rope(lc: LayerContext, q: ir.Value, k: ir.Value | None) -> tuple[ir.Value, ir.Value | None]:
    """HunYuan's per-head q/k norms, or Llama-4's scaleless ones (on RoPE layers only where the spec's
    qk_norm_layers says so), applied to the rotated [B,S,N,D] tensors."""
    L, dims, layer = lc.spec.layer, lc.dims, lc.layer
    if dims.scaleless_qk_norm:
        if lc.spec.qk_norm_layers == "rope" and layer.rope is None:
            return q, k
        q = head_norm(lc, q, None, "q_norm", dims.num_heads)
        return q, None if k is None else head_norm(lc, k, None, "k_norm", layer.num_kv_heads)
    if not lc.has_norm(L.q_norm):
        return q, k
    assert L.q_norm and L.k_norm
    q = head_norm(lc, q, L.q_norm, "q_norm", dims.num_heads)
    return q, None if k is None else head_norm(lc, k, L.k_norm, "k_norm", layer.num_kv_heads)


def rotated_heads(
    lc: LayerContext, x: ir.Value, table: tuple[ir.Value, ir.Value] | None, reshape_v: bool
) -> dict[str, ir.Value]:
    """The one q/k rotation path of the graphs that apply RoPE with plain ops (standard Attention,
    and GQA with do_rotary=0): q and k projected and shaped [B,S,N,D], rotated by `table` (cos,
    sin; None for a NoPE layer), then the q/k norms that follow RoPE (HunYuan). v is shaped too
    when `reshape_v`, else returned as projected. A KV-shared layer gets only "q"."""
    b, dims, layer = lc.b, lc.dims, lc.layer
    after = lc.spec.qk_norm_after_rope
    q, k, v = qkv_projection(lc, x, separate=True, qk_norms=not after)
    heads = {"q": dims.num_heads, "k": layer.num_kv_heads, "v": layer.num_kv_heads}
    shaped: dict[str, ir.Value] = {}
    for name, value in (("q", q), ("k", k), ("v", v)):
        if value is None:  # KV-shared: only the query is projected
            continue
        if name == "v" and not reshape_v:
            shaped[name] = value
            continue
        shaped[name] = b.op("Reshape", value, b.const([0, 0, heads[name], layer.head_dim], f"{name}_heads", "int64"))
        if name != "v" and table is not None:
            rope = dims.ropes[layer.rope]  # type: ignore[index]
            shaped[name] = rotate(b, shaped[name], table[0], table[1], rope, layer.head_dim, f"{name}_rope")
    if after:  # HunYuan: q/k norms after RoPE
        shaped["q"], key = qk_norms_after_rope(lc, shaped["q"], shaped.get("k"))
        if key is not None:
            shaped["k"] = key
    if lc.spec.ngpt is not None and lc.dims.ngpt is not None:  # nGPT: the query times (sqk x c) ** 2 after RoPE
        tensor, shape = lc.name(lc.spec.ngpt.query_scale, suffix=""), (dims.num_heads, layer.head_dim)
        factor = lc.dims.ngpt.query_scale(layer.head_dim)
        shaped["q"] = stored_scaled(
            b, shaped["q"], lc.params, tensor, lambda v: squared(factor)(v).reshape(shape), "sqk", shape
        )
    return shaped
