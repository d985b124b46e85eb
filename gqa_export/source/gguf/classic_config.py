"""GGUF metadata of the classic decoders, Nemotron and LFM2 read as their transformers configs
(source/gguf/config.py's FAMILIES), as llama.cpp reads them: Bloom / Falcon / GPT-2 in their own
key spellings with widths from the tensors (the converter writes 4 x hidden as their
feed_forward_length), Falcon's 7B and 40B layouts, LFM2's kv heads per layer as its layer types.
"""

from __future__ import annotations

from typing import Any

from gqa_export.errors import InputError
from gqa_export.source.gguf.container import GgufFile
from gqa_export.source.gguf.decoder_keys import decoder, has, layer_norm, one, rows


def classic(f: GgufFile, config: dict[str, Any]) -> tuple[int, int, int]:
    """(hidden, heads, layers) of Bloom / Falcon / GPT-2 files, and their LayerNorm epsilon."""
    hidden, heads = int(f.key("embedding_length")), int(one(f, "attention.head_count"))
    eps = f.key("attention.layer_norm_epsilon")
    if eps is not None:
        config["layer_norm_epsilon"] = float(eps)
    return hidden, heads, int(f.key("block_count"))


def bloom(f: GgufFile, config: dict[str, Any]) -> None:
    """ALiBi, no positions to read; the MLP is always 4 x hidden in BloomConfig."""
    hidden, heads, layers = classic(f, config)
    if rows(f, ".ffn_up.weight") != 4 * hidden:
        raise InputError(f"{f.path.name}: a Bloom MLP of width {rows(f, '.ffn_up.weight')} (not 4 x {hidden})")
    config.update(hidden_size=hidden, n_head=heads, n_layer=layers, apply_residual_connection_post_layernorm=False)


def falcon(f: GgufFile, config: dict[str, Any]) -> None:
    """llama.cpp's falcon: RoPE over the whole head, attention and MLP in parallel off the layer
    input; one kv head (Falcon-7B's multi-query) or, with the second norm (attn_norm_2: ln_mlp),
    Falcon-40B's grouped layout."""
    hidden, heads, layers = classic(f, config)
    kv = int(one(f, "attention.head_count_kv", 1))
    grouped = has(f, ".attn_norm_2.weight")
    if not grouped and kv not in (1, heads):
        raise InputError(f"{f.path.name}: a Falcon of {kv} kv heads without ln_mlp is not a Falcon layout")
    config.update(
        hidden_size=hidden, num_attention_heads=heads, num_hidden_layers=layers, num_kv_heads=kv,
        new_decoder_architecture=grouped, multi_query=kv == 1, parallel_attn=True, alibi=False,
        bias=has(f, ".attn_qkv.bias"), activation="gelu", ffn_hidden_size=rows(f, ".ffn_up.weight"),
        max_position_embeddings=int(f.key("context_length", 2048)),
        rope_theta=float(f.key("rope.freq_base", 10000.0)),
    )  # fmt: skip


def gpt2(f: GgufFile, config: dict[str, Any]) -> None:
    hidden, heads, layers = classic(f, config)
    config.update(
        n_embd=hidden, n_head=heads, n_layer=layers, n_positions=rows(f, "position_embd.weight"),
        n_inner=rows(f, ".ffn_up.weight"), activation_function="gelu_new",
    )  # fmt: skip


def nemotron(f: GgufFile, config: dict[str, Any]) -> None:
    """LayerNorm1P (stored 1 + w), squared-ReLU MLP, partial RoPE."""
    decoder(f, config)
    layer_norm(f, config, "norm_eps")
    config["hidden_act"] = "relu2"
    config["attention_bias"] = has(f, ".attn_q.bias")
    config["mlp_bias"] = has(f, ".ffn_up.bias")


def lfm2(f: GgufFile, config: dict[str, Any]) -> None:
    """LFM2: head_count_kv per layer, 0 for a short-convolution layer (the layer types), the MLP
    width as stored (llama.cpp's converter writes it already adjusted), the convolution's cache."""
    hidden, heads, layers = (
        int(f.key("embedding_length")),
        int(f.key("attention.head_count")),
        int(f.key("block_count")),
    )
    kv = f.key("attention.head_count_kv", heads)
    per_layer = [int(v) for v in kv] if isinstance(kv, list) else [int(kv)] * layers
    attention = sorted({v for v in per_layer if v})
    if len(attention) != 1 or len(per_layer) != layers:
        raise InputError(
            f"{f.path.name}: lfm2.attention.head_count_kv {kv} is not one kv head count per attention layer"
        )
    width = rows(f, ".ffn_gate.weight")
    config.update(
        hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=attention[0],
        max_position_embeddings=int(f.key("context_length", 128000)), intermediate_size=width, block_ff_dim=width,
        block_auto_adjust_ff_dim=False, layer_types=["full_attention" if v else "conv" for v in per_layer],
        conv_L_cache=int(f.key("shortconv.l_cache", 3)), conv_bias=has(f, ".shortconv.in_proj.bias"),
        norm_eps=float(f.key("attention.layer_norm_rms_epsilon", 1e-5)),
        rope_theta=float(f.key("rope.freq_base", 1000000.0)),
    )  # fmt: skip
