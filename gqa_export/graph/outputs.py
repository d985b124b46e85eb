"""What the decoder outputs: logits (all positions or the last), hidden states, or both.

Last-token logits (`logits: last`, opt-in with `--prune-lm-head`: og.Engine and speculative
decoding need every position, docs/ortgenai.md §5.2): the prompt pass computes the lm_head for one
position per row (runtime/decode.py bypasses the gather below to score every position).
onnxruntime-genai 0.18 pads batched prompts on the right and, given [B,1,V] logits, uses the row
as it is (it picks `input_sequence_lengths[b] - 1` itself only from full [B,S,V] logits), so the
position must be each row's last real token, not the last column:
idx = clamp(sum(attention_mask) - past_length - 1, 0, S-1), past_length = T - S.
(The official builder takes the last column, which is wrong for a right-padded shorter row.
Probed with genai 0.18 in issue #15; the runtime side is docs/ortgenai.md §5.1.)
"""

from __future__ import annotations

from dataclasses import dataclass

import onnx_ir as ir

from gqa_export.arch.spec import ArchSpec
from gqa_export.errors import InputError
from gqa_export.graph.activations import soft_cap
from gqa_export.graph.builder import GraphBuilder, float_scalar
from gqa_export.graph.head_transform import head_transform
from gqa_export.graph.masked_logits import masked_logits
from gqa_export.graph.ngpt_scales import logit_scaled
from gqa_export.graph.options import GraphOptions
from gqa_export.graph.params import Params
from gqa_export.model.dims import ModelDims

B, S = "batch_size", "sequence_length"


@dataclass(frozen=True)
class OutputContext:
    dims: ModelDims
    spec: ArchSpec
    params: Params
    opts: GraphOptions


def check_io(dims: ModelDims, opts: GraphOptions) -> None:
    """Refuse pipeline I/O a model cannot have: features that read token ids need input_ids."""
    if not opts.inputs_embeds or opts.embeds_with_ids:
        return
    needs_ids = {
        "per-layer embeddings (gathered by input_ids)": dims.per_layer_input_size,
        "bidirectional token ids": opts.bidirectional_ids,
    }
    for what, present in needs_ids.items():
        if present:
            raise InputError(f"--inputs-embeds cannot be used with {what}; export with input_ids")


def add_outputs(
    b: GraphBuilder, x: ir.Value, embed: ir.Value | None, attention_mask: ir.Value, tokens: ir.Value, oc: OutputContext
) -> None:
    """`hidden_states` (the final norm's output) and/or `logits`, per GraphOptions."""
    dims, opts = oc.dims, oc.opts
    if opts.hidden_states or opts.logits == "none":
        b.output(b.op("Identity", x), "hidden_states", opts.io_dtype, [B, S, dims.hidden_size])
    if opts.logits == "none":
        return
    if opts.logits == "last":
        x = last_real_position(b, x, attention_mask, tokens)
    b.output(
        lm_head(b, x, embed, oc), "logits", opts.logits_dtype, [B, 1 if opts.logits == "last" else S, dims.logits_width]
    )


def last_real_position(b: GraphBuilder, x: ir.Value, attention_mask: ir.Value, tokens: ir.Value) -> ir.Value:
    """x [B,S,H] -> [B,1,H] at each row's last real (unpadded) token of this run."""
    with b.scope("last_token"):
        total = b.op("Shape", attention_mask, start=1, end=2)
        run = b.op("Shape", tokens, start=1, end=2)
        real = b.op("ReduceSum", attention_mask, b.const([1], "axis", "int64"), keepdims=0)  # [B]
        idx = b.op("Sub", b.op("Sub", real, b.op("Sub", total, run)), b.const([1], "one", "int64"))
        idx = b.op(
            "Max", b.op("Min", idx, b.op("Sub", run, b.const([1], "one_", "int64"))), b.const([0], "zero", "int64")
        )
        picked = b.op("GatherND", x, b.op("Unsqueeze", idx, b.const([1], "axis1", "int64")), batch_dims=1)  # [B,H]
        return b.op("Unsqueeze", picked, b.const([1], "seq_axis", "int64"))


def lm_head(b: GraphBuilder, x: ir.Value, embed: ir.Value | None, oc: OutputContext) -> ir.Value:
    dims, spec, params, opts = oc.dims, oc.spec, oc.params, oc.opts
    x = head_transform(b, x, spec, params, dims)  # ModernBERT-decoder's prediction head, where the spec has one
    with b.scope("lm_head"):
        if dims.tie_word_embeddings:
            if embed is None:  # inputs_embeds: the tied lm_head still reads the table
                embed = b.initializer(spec.tensor(spec.embed), params.matrix(spec.tensor(spec.embed)))
            # Tied: Gemm(transB=1) reads the embedding table itself, so neither the file nor the
            # session holds a transposed copy (a MatMul on Transpose(E) would be folded into one).
            flat = b.op("Reshape", x, b.const([-1, dims.hidden_size], "flat", "int64"))
            logits2d = b.op("Gemm", flat, embed, transB=1)
            out_shape = b.op("Concat", b.op("Shape", x, end=2), b.const([dims.logits_width], "vocab", "int64"), axis=0)
            logits = b.op("Reshape", logits2d, out_shape)
        else:
            rows = params.store.info(spec.lm_head).shape[0]
            if dims.logits_vocab and rows > dims.logits_vocab:  # a full head whose logits past them are dropped
                weight = params.matmul_rows(spec.lm_head, [(0, dims.logits_vocab)])
            else:
                weight = params.matmul_weight([spec.lm_head])
            logits = b.op("MatMul", x, b.initializer(spec.lm_head, weight))
        bias_name = params.held_bias(spec.lm_head)
        if bias_name is not None:  # PhiMoE's lm_head bias; ERNIE-4.5-MoE's use_bias, tied or not
            logits = b.op("Add", logits, b.initializer(bias_name, params.vector([bias_name])))
        if opts.logits_dtype != opts.io_dtype:
            logits = b.op("Cast", logits, to=opts.logits_dtype)

        if spec.ngpt is not None and dims.ngpt is not None:  # nGPT: times logit_scale / initializer_range, fp32
            tensor = spec.lm_head.removesuffix("weight") + spec.ngpt.logit_scale.rpartition(".")[2]
            logits = logit_scaled(b, logits, params, tensor, dims.ngpt.logit_scale(), opts.logits_dtype)
        if dims.logits_multiplier != 1.0:  # Cohere's logit_scale
            logits = b.op("Mul", logits, float_scalar(b, dims.logits_multiplier, opts.logits_dtype, "logit_scale"))
        if dims.logits_divisor != 1.0:  # Granite's logits_scaling
            logits = b.op("Div", logits, float_scalar(b, dims.logits_divisor, opts.logits_dtype, "logits_scaling"))
        if dims.final_softcap:  # Gemma-2: cap * tanh(logits / cap)
            cap = float_scalar(b, dims.final_softcap, opts.logits_dtype, "final_softcap")
            logits = soft_cap(b, logits, cap, "final_softcap")
        # Chameleon: its image tokens' logits at the lowest value
        logits = masked_logits(b, logits, dims.masked_logit_ids, dims.logits_width, opts.logits_dtype)
    return logits
