"""One decoder layer in the spec's norm layout: the input norm, the token mixer (attention through
o_proj, a recurrent-state block, or both in parallel), the residual adds in the family's form and the
MLP (dense, experts, or both). graph/decoder.py runs it for every layer."""

from __future__ import annotations

from collections.abc import Callable

import onnx_ir as ir

from gqa_export.graph.affine_residual import affine_residual
from gqa_export.graph.augmented_residual import augmented_residual
from gqa_export.graph.blocks import LayerContext, linear, normalize
from gqa_export.graph.builder import float_scalar, typed
from gqa_export.graph.depth_scaled_residual import depth_scaled_terms
from gqa_export.graph.expert_attention import gated_expert_heads
from gqa_export.graph.gated_norm import gated_norm, is_gated
from gqa_export.graph.head_output_norm import head_output_norm
from gqa_export.graph.input_scaled_norm import input_scaled_norm
from gqa_export.graph.latent_attention import latent_output
from gqa_export.graph.learned_residual_gate import gated_terms
from gqa_export.graph.mlp import mlp_block
from gqa_export.graph.moe import dense_and_sparse_mlp, sparse_mlp
from gqa_export.graph.ngpt import interpolated_layer
from gqa_export.graph.normed_residual import normed_residual_layer
from gqa_export.graph.output_gate import gated_output
from gqa_export.graph.residual_convs import convolved_output
from gqa_export.graph.shortcut_moe import shortcut_mlp
from gqa_export.graph.standard import LayerKV
from gqa_export.graph.value_heads import narrowed_output
from gqa_export.graph.widened_heads import widened, widened_output

B, S = "batch_size", "sequence_length"


def _residual(lc: LayerContext, h: ir.Value, y: ir.Value, name: str) -> ir.Value:
    b, dims = lc.b, lc.dims
    shape = [B, S, dims.hidden_size]
    if (affine := lc.spec.layer.affine_residuals) is not None:  # ZAYA: both sides of the add scaled and shifted
        return affine_residual(lc, affine[0] if name == "residual_attn" else affine[1], h, y, name)
    if dims.residual_multiplier != 1.0:  # Granite
        y = b.op("Mul", y, float_scalar(b, dims.residual_multiplier, lc.params.dtype))
    if lc.spec.residual_scale == "add_index":  # Beam: block / sqrt(k) + residual * sqrt((k - 1) / k)
        h, y = depth_scaled_terms(lc, h, y, name)
    if (gates := lc.spec.layer.residual_gates) is not None:  # Ergo: a x block + sqrt(1 - a^2) x residual
        h, y = gated_terms(lc, gates[0] if name == "residual_attn" else gates[1], h, y, name)
    if (scales := lc.spec.layer.residual_scales) is not None:  # Doge: the residual times a vector before each add
        module = lc.name(scales[0] if name == "residual_attn" else scales[1], suffix="")
        h = b.op("Mul", h, b.initializer(module, lc.params.vector([module])), name=f"{name}_scale")
    return typed(b.op("Add", h, typed(y, lc.params.dtype, shape), name=name), lc.params.dtype, shape)


def block_norm(
    lc: LayerContext, x: ir.Value, module: str | None, name: str, eps: float | None = None, kind: str | None = None
) -> ir.Value:
    if module is None or (lc.spec.norms_where_stored and not lc.has(module)):  # ModernBERT's Identity at layer 0
        return x
    if is_gated(lc, module):  # A.X-K2: the RMSNorm times a low-rank sigmoid gate
        return gated_norm(lc, x, module, name)
    dims = lc.dims
    if kind == "input_scaled":  # Muse-Spark's post-feedforward norm: the input times (1 + w), then normed
        eps = dims.rms_eps if eps is None else eps
        return input_scaled_norm(lc.b, x, lc.name(module), lc.params, eps, dims.norm_offset, name, dims.hidden_size)
    return normalize(lc.b, x, lc.name(module), lc.params, dims, name, dims.hidden_size, eps=eps, kind=kind)


Mixer = Callable[[LayerContext, ir.Value], tuple[ir.Value, LayerKV | None]]


def decoder_layer(
    lc: LayerContext, h: ir.Value, attention: Mixer | None, state: Mixer | None
) -> tuple[ir.Value, LayerKV | None]:
    """One layer in the spec's norm layout (pre / sandwich / post). The token mixer is attention
    (projected here by o_proj), a recurrent-state block that projects its own output, or both on
    the same normed input with their outputs added (MixerSpec mixing "parallel": Falcon-H1). A
    layer that holds one block (LayerDims.blocks "mixer" or "mlp", Nemotron-H) is that block behind
    the input norm, added to the residual once."""
    L, b = lc.spec.layer, lc.b
    if _own_norms(lc):  # a parallel layer with a norm for each branch (Falcon-40B)
        x, x_mlp = (block_norm(lc, h, n, n) for n in L.parallel_norms or ())
    else:
        x = x_mlp = block_norm(lc, h, _state_input_norm(lc, state, attention) or L.input_norm, "input_layernorm")
    if lc.layer.blocks == "mlp":
        with b.scope("mlp"):
            return _residual(lc, h, layer_mlp(lc, x, h), "residual_mlp"), None
    y, kv = None, None
    if state is not None:
        with b.scope(lc.layer.mixer):
            y, _ = state(lc, x)
    if attention is not None:
        attended, kv = attention_block(lc, x, attention)
        y = attended if y is None else b.op("Add", y, attended, name="parallel_mixers")
    assert y is not None
    if lc.layer.blocks == "mixer":
        return _residual(lc, h, y, "residual_attn"), kv
    if lc.dims.parallel:  # both on the layer input: off one norm (Phi-2, Cohere, GPT-J, Falcon-7B), or
        # the MLP off its own (GPT-NeoX's post_attention_layernorm, Falcon-40B's ln_mlp)
        if not _own_norms(lc) and L.post_attention_norm is not None and lc.has(L.post_attention_norm):
            x_mlp = block_norm(lc, h, L.post_attention_norm, "post_attention_layernorm")
        with b.scope("mlp"):
            mlp = layer_mlp(lc, x_mlp, h)
        return _residual(lc, h, b.op("Add", y, mlp, name="parallel_sum"), "residual"), kv
    if lc.spec.ngpt is not None:  # nGPT: the normed input moved towards each normed block output (graph/ngpt.py)
        return interpolated_layer(lc, x, y, block_norm, layer_mlp), kv
    if lc.dims.residual_factors is not None:  # MiniMax: each block adds to its normed input, both scaled
        return normed_residual_layer(lc, x, y, "attention" if state is None else "state", block_norm, layer_mlp), kv
    if lc.spec.norm_layout == "post_residual":  # GPT-1: each residual sum normed, LN(h + block(h))
        h = block_norm(lc, _residual(lc, h, y, "residual_attn"), L.post_attention_norm, "post_attention_layernorm")
        with b.scope("mlp"):
            y = layer_mlp(lc, h, h)
        return block_norm(lc, _residual(lc, h, y, "residual_mlp"), L.post_feedforward_norm, "post_feedforward_norm"), kv
    if lc.spec.norm_layout == "pre" or _state_input_norm(lc, state, attention):
        h = _residual(lc, h, y, "residual_attn")
        x = block_norm(lc, h, L.post_attention_norm, "post_attention_layernorm")
        with b.scope("mlp"):
            return _residual(lc, h, layer_mlp(lc, x, h), "residual_mlp"), kv
    post = lc.dims.post_block_norms  # off: the sandwich's post-block norms do not exist (HyperCLOVAX's switch)
    post_eps = lc.dims.post_block_eps  # their own eps (Muse-Glimmer's post_norm_eps); None: the layer's
    kinds = lc.spec.post_norm_kinds or (None, None)  # their own kinds (Muse-Spark's); None: the layer's
    y = block_norm(lc, y, L.post_attention_norm if post else None, "post_attention_layernorm", post_eps, kinds[0])
    h = _residual(lc, h, y, "residual_attn")
    h = augmented_residual(lc, h, x) if lc.spec.augmented_residual else h  # LAuReL (Gemma-3n)
    x = block_norm(lc, h, L.pre_feedforward_norm, "pre_feedforward_layernorm")
    with b.scope("mlp"):
        y = layer_mlp(lc, x, h)
    y = block_norm(lc, y, L.post_feedforward_norm if post else None, "post_feedforward_layernorm", post_eps, kinds[1])
    return _residual(lc, h, y, "residual_mlp"), kv


def state_block(state: Mixer, lc: LayerContext, x: ir.Value) -> tuple[ir.Value, None]:
    """A recurrent-state mixer on the normed input `x` (it projects its own output and writes its states);
    no KV cache. The hyper-connection layers' token mixer where the layer is not attention (Qwen4-Exp)."""
    with lc.b.scope(lc.layer.mixer):
        y, _ = state(lc, x)
    return y, None


def attention_block(lc: LayerContext, x: ir.Value, attention: Mixer) -> tuple[ir.Value, LayerKV | None]:
    """The attention on the normed input `x` through o_proj, with the heads' output gates and norms."""
    L, b = lc.spec.layer, lc.b
    with b.scope("attn"):
        out, kv = attention(lc, x)
        if lc.spec.head_output_norm:  # Muse-Spark's o_norm: each head's output normed, weightless, before the gate
            out = head_output_norm(lc, out)
        out = gated_output(lc, x, out)  # Qwen3.5's q_proj gate, AFMoE's, Laguna's, LFM3's, Ling 3's own Linear
        if widened(lc):  # DiffLlama's head pairs differenced, Doge's values over their weight
            out = widened_output(lc, out)
        elif lc.dims.latent is not None:  # latent attention: the padded value channels dropped
            out = latent_output(lc, out)
        else:  # values narrower than keys (MiMo-V2-Flash): the padded channels dropped
            out = narrowed_output(b, out, lc.dims.num_heads, lc.dims.value_head_dim, lc.layer.head_dim)
        if lc.spec.attention_experts is not None:  # JetMoE: each expert's heads times its gate
            out = gated_expert_heads(lc, x, out)
        if L.attention_output_norm is not None:  # BitNet: a norm over the heads' output before o_proj
            width = lc.dims.num_heads * lc.layer.head_dim
            out = normalize(b, out, lc.name(L.attention_output_norm), lc.params, lc.dims, "sub_norm", width)
        return convolved_output(lc, linear(lc, out, [L.o], None, "o_proj"), "attention"), kv


def _state_input_norm(lc: LayerContext, state: Mixer | None, attention: Mixer | None) -> str | None:
    """The input norm of a recurrent-state layer laid out pre-norm in a post-norm family
    (MixerSpec.state_input_norm, OLMo-Hybrid), None for every other layer."""
    mixers = lc.spec.mixers
    return mixers.state_input_norm if mixers is not None and state is not None and attention is None else None


def _own_norms(lc: LayerContext) -> bool:
    """Whether a parallel layer has its own attention and MLP norms (LayerNames.parallel_norms) in the checkpoint."""
    norms = lc.spec.layer.parallel_norms
    return lc.dims.parallel and norms is not None and lc.has(norms[0])


def layer_mlp(lc: LayerContext, x: ir.Value, residual: ir.Value) -> ir.Value:
    """The layer's MLP: dense, sparse (mixture of experts), or Gemma-4's dense + experts pair; then its
    residual convolution where the layer has one (Inkling, graph/residual_convs.py)."""
    return convolved_output(lc, _layer_mlp(lc, x, residual), "mlp")


def _layer_mlp(lc: LayerContext, x: ir.Value, residual: ir.Value) -> ir.Value:
    if not lc.layer.sparse:
        return scaled_mlp_output(lc, mlp_block(lc, x))
    if lc.shortcut is not None:  # LongCat-Flash: the sparse block's output is added a sublayer later
        return shortcut_mlp(lc, x)
    if lc.spec.moe is not None and lc.spec.moe.routing == "normed_residual":
        return dense_and_sparse_mlp(lc, x, residual, block_norm)
    out = sparse_mlp(lc, x)
    spellings = lc.spec.moe.names.output_norm  # type: ignore[union-attr]
    if not spellings:
        return out
    # A.X-K1: the block's output normed before the residual add (none held: the read names the first)
    module = lc.held_spelling(spellings) or spellings.split("|")[0]
    return block_norm(lc, out, module, "sparse_output_norm")


def scaled_mlp_output(lc: LayerContext, y: ir.Value) -> ir.Value:
    """The dense MLP's output times its stored scalar where the checkpoint holds one (Inkling's mlp.global_scale)."""
    module = lc.spec.layer.mlp_output_scale
    if module is None or not lc.has(module, suffix=""):
        return y
    name = lc.name(module, suffix="")
    return lc.b.op("Mul", y, lc.b.initializer(name, lc.params.vector([name])), name="mlp_output_scale")


def layer_scalar(lc: LayerContext, h: ir.Value) -> ir.Value:
    """Gemma-4's stored per-layer scalar multiplies the whole residual stream, when the checkpoint has it."""
    module = lc.spec.layer.layer_scalar
    if module is None or not lc.has(module, suffix=""):  # a buffer: stored without a .weight suffix
        return h
    name = lc.name(module, suffix="")
    scalar = lc.b.initializer(name, lc.params.vector([name]))
    return typed(lc.b.op("Mul", h, scalar, name="layer_scalar"), lc.params.dtype, [B, S, lc.dims.hidden_size])
