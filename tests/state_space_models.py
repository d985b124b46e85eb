"""Tiny random state-space checkpoints (issue #39 item 3; transformers 5.24, CPU, fp32), with the tiny
tokenizer: Bamba (Mamba2 + attention), Mamba2, Mamba and Falcon-Mamba (state layers only), Zamba2, Zamba and
RecurrentGemma (RG-LRU + local attention).

    from state_space_models import save_state_space
    p = save_state_space("/tmp/x/bamba", "bamba")
    p = save_state_space("/tmp/x/mamba2_tied", "mamba2", tie_word_embeddings=True)

Shapes as tests/dense_models.py's (hidden 64, vocab 384, bos 0 / eos 1 / pad 5), weights drawn by its
`_randomize` (norm weights 1 + 0.3 N, biases 0.2 N, depthwise kernels 0.5 N, D 1 + 0.5 N, A_log
-2 + 0.5 N, dt_bias 0.3 N); `**overrides` are config kwargs applied last. Same seed -> same checkpoint.
"""

from __future__ import annotations

from pathlib import Path

import torch
from dense_models import COMMON, _randomize
from tiny_models import save_tokenizer
from transformers import AutoConfig, AutoModelForCausalLM

# the configs' own spellings: Mamba's and Mamba2's classes name no attention keys
_SSM_COMMON = {k: COMMON[k] for k in ("vocab_size", "hidden_size", "bos_token_id", "eos_token_id", "pad_token_id")}


def state_space_config(model_type: str) -> dict:
    if model_type == "bamba":  # Mamba2 (conv + SSM state) at 0, 2, 3; Llama GQA with half-head RoPE at 1
        c = dict(COMMON)
        c.update(
            num_hidden_layers=4,
            attn_layer_indices=[1],
            mamba_n_heads=4,  # head dim 2 * 64 / 4 = 32
            mamba_n_groups=2,  # two consecutive heads per B/C group; the gated norm per group of 64
            mamba_d_state=16,
            mamba_d_conv=4,
            mamba_chunk_size=16,  # the 70-token prompt spans several of HF's chunks
            mamba_conv_bias=True,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
            rms_norm_eps=1e-6,
            tie_word_embeddings=False,
        )
        return c
    if model_type == "mamba2":  # Mamba2 (conv + SSM state) on every layer, no attention
        c = dict(_SSM_COMMON)
        c.update(
            num_hidden_layers=3,
            num_heads=4,  # 4 heads of 32 = 2 * 64
            head_dim=32,
            expand=2,
            n_groups=2,  # two consecutive heads per B/C group; the gated norm per group of 64
            state_size=16,
            conv_kernel=4,
            chunk_size=16,  # the 70-token prompt spans several of HF's chunks
            layer_norm_epsilon=1e-5,
            initializer_range=0.1,
            tie_word_embeddings=False,
        )
        return c
    if model_type in ("mamba", "falcon_mamba"):  # Mamba (v1) on every layer, no attention; 128 channels
        c = dict(_SSM_COMMON)
        c.update(
            num_hidden_layers=3,
            state_size=16,
            expand=2,
            conv_kernel=4,
            time_step_rank=8,
            layer_norm_epsilon=1e-5,
            initializer_range=0.1,
            tie_word_embeddings=True,  # the classes' default
        )
        if model_type == "falcon_mamba":
            c.update(mixer_rms_eps=1e-3)  # away from the other norms' eps, so that mixing them up shows
        return c
    if model_type == "zamba2":  # Mamba2 on every layer; shared blocks ahead of layers 1, 3 and 4
        c = dict(COMMON)
        c.update(
            num_hidden_layers=5,
            # block 0 at uses 0 and 2 (layers 1 and 4), block 1 at use 1 (layer 3)
            layers_block_type=["mamba", "hybrid", "mamba", "hybrid", "hybrid"],
            num_mem_blocks=2,
            num_key_value_heads=4,  # the q/k/v adapters are 2 H wide: every head has its kv head
            use_shared_attention_adapter=True,
            adapter_rank=8,
            use_mem_rope=True,  # RoPE over the whole head of 2 * 64 / 4 = 32
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
            n_mamba_heads=4,  # head dim 2 * 64 / 4 = 32
            mamba_ngroups=2,  # two consecutive heads per B/C group; the gated norm per group of 64
            mamba_d_state=16,
            mamba_d_conv=4,
            chunk_size=16,  # the 70-token prompt spans several of HF's chunks
            time_step_min=0.3,  # the prompt-only dt floor bites on a share of dt's values
            rms_norm_eps=1e-6,  # away from the gated norm's fixed 1e-5
            hidden_act="gelu",
        )
        return c
    if model_type == "zamba":  # Mamba (v1) in 2 heads on every layer; one shared block ahead of 1, 3 and 4
        c = dict(COMMON)
        c.update(
            num_hidden_layers=5,
            layers_block_type=["mamba", "hybrid", "mamba", "hybrid", "hybrid"],
            num_key_value_heads=2,  # GQA 4/2 with heads of 2 * 64 / 4 = 32
            n_mamba_heads=2,  # 128 channels: 2 heads of 64, each its own x_proj, dt_proj, B and C
            mamba_d_state=16,
            mamba_d_conv=4,
            mamba_dt_rank=8,
            mamba_conv_bias=True,
            rms_norm_eps=1e-6,
            hidden_act="gelu",
        )
        return c
    if model_type == "recurrent_gemma":  # RG-LRU at 0 and 2, local attention (MQA, window 8) at 1
        c = dict(_SSM_COMMON)
        c.update(
            hidden_size=48,  # sqrt(48) rounds to bfloat16 6.9375 (sqrt(64) = 8 would not show the rounding)
            num_hidden_layers=3,
            block_types=["recurrent", "attention", "recurrent"],
            num_attention_heads=3,  # heads of 16, RoPE on 8 channels; RG-LRU gate blocks of 16
            num_key_value_heads=1,
            intermediate_size=192,  # the MLP is 96 wide (intermediate_size // 2)
            lru_width=48,  # = hidden: HF's 1-token prompt reads a conv state of hidden_size channels
            attention_window_size=8,  # shorter than the 14- and 70-token prompts
            conv1d_width=4,
            logits_soft_cap=2.0,  # low enough to bend the tiny model's logits (30 in the 2B checkpoint)
            rms_norm_eps=1e-6,
        )
        return c
    if model_type == "rwkv":  # RWKV-4 blocks, no attention; 3 blocks rescaled after the second
        c = dict(_SSM_COMMON)
        c.update(
            num_hidden_layers=3,
            attention_hidden_size=64,  # HF's state is hidden_size wide: another width cannot use its cache
            intermediate_size=128,
            context_length=256,
            rescale_every=2,  # block 2's output weights / 2, the stream halved after block 1 (eval mode)
            tie_word_embeddings=False,  # the class's default
        )
        return c
    if model_type == "xlstm":  # mLSTM + SwiGLU blocks, no attention; 2 heads of q/k 32, v 64
        c = {k: v for k, v in _SSM_COMMON.items() if k != "hidden_size"}
        c.update(
            hidden_size=128,  # q/k width 64 and value width 128: multiples of 64, as HF's cache needs
            num_hidden_layers=2,
            num_heads=2,
            chunk_size=16,  # the 70-token prompt spans HF's chunkwise kernel (64, then 4 single steps)
            norm_eps=1e-5,
        )
        return c
    raise ValueError(model_type)


def _randomize_xlstm(model, g: torch.Generator) -> None:
    """Gates that matter: input-gate biases N(-2, 1.5) (the normalizer's floor e^(-m) and the
    query scale it brings in bind at some positions, |q . n| at others) and forget-gate biases
    N(2, 1) (the state outlives a few tokens), norm weights 1 + 0.3 N, Linears N(0, 0.15)."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("igate_preact.bias"):
                p.copy_(torch.randn(p.shape, generator=g) * 1.5 - 2.0)
            elif name.endswith("fgate_preact.bias"):
                p.copy_(torch.randn(p.shape, generator=g) + 2.0)
            elif "norm" in name:
                p.copy_(torch.randn(p.shape, generator=g) * 0.3 + 1.0)
            elif "embeddings" in name:
                p.copy_(torch.randn(p.shape, generator=g))
            else:
                p.copy_(torch.randn(p.shape, generator=g) * 0.15)


def _randomize_rwkv(model, g: torch.Generator) -> None:
    """RWKV's own parameters away from HF's schedules: decays exp(N(0, 1)) per channel, a time_first
    bonus N(0, 1), token-shift mixes U(0, 1), LayerNorm weights 1 + 0.3 N and biases 0.2 N, unit
    embeddings (HF's 1e-4-gain table would vanish in pre_ln's eps), Linears N(0, 0.25)."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            leaf = name.rsplit(".", 1)[-1]
            if leaf in ("time_decay", "time_first"):
                p.copy_(torch.randn(p.shape, generator=g))
            elif leaf.startswith("time_mix_"):
                p.copy_(torch.rand(p.shape, generator=g))
            elif ".ln" in name or "pre_ln" in name:
                p.copy_(torch.randn(p.shape, generator=g) * (0.3 if leaf == "weight" else 0.2) + (leaf == "weight"))
            elif "embeddings" in name:
                p.copy_(torch.randn(p.shape, generator=g))
            else:
                p.copy_(torch.randn(p.shape, generator=g) * 0.25)


FAMILIES = ["bamba", "mamba2", "mamba", "falcon_mamba", "zamba2", "zamba", "recurrent_gemma", "rwkv", "xlstm"]
# extra variants: tag -> (model_type, overrides)
VARIANTS: dict[str, tuple[str, dict]] = {}


def build_state_space(model_type: str, seed: int = 0, **overrides):
    kwargs = state_space_config(model_type)
    kwargs.update(overrides)
    config = AutoConfig.for_model(model_type, **kwargs)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.eval()  # (no forward here: an RWKV forward in eval mode would rescale the weights it saves)
    if model_type in ("rwkv", "xlstm"):
        (_randomize_rwkv if model_type == "rwkv" else _randomize_xlstm)(model, torch.Generator().manual_seed(seed + 1))
    else:
        _randomize(model, model_type, torch.Generator().manual_seed(seed + 1))
    if model_type == "recurrent_gemma":
        _randomize_rglru(model, torch.Generator().manual_seed(seed + 2))
    return model


def _randomize_rglru(model, g: torch.Generator) -> None:
    """RecurrentGemma's own parameters: Linear weights 1.5 N / sqrt(fan_in) and the (tied) embedding
    0.1 N (its init of std 0.05 leaves greedy decoding one repeated id), (1 + w) norms around 1
    (w = 0.3 N), block-diagonal gates with logits of order 1, recurrent_param ~ -2 + 0.5 N so that
    a = exp(-8 r softplus(c)) spreads over ~0.3-0.9 (sqrt(1 - a^2) far from 1 and from 0), depthwise
    kernels 0.5 N."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("embed_tokens.weight"):
                p.copy_(torch.randn(p.shape, generator=g) * 0.1)
            elif p.dim() == 2:
                p.copy_(torch.randn(p.shape, generator=g) * 1.5 / p.shape[1] ** 0.5)
            elif name.endswith("norm.weight"):
                p.copy_(torch.randn(p.shape, generator=g) * 0.3)
            elif name.endswith("gate_weight"):
                p.copy_(torch.randn(p.shape, generator=g) * 0.3)
            elif name.endswith("recurrent_param"):
                p.copy_(torch.randn(p.shape, generator=g) * 0.5 - 2.0)
            elif name.endswith("conv_1d.weight"):
                p.copy_(torch.randn(p.shape, generator=g) * 0.5)


def save_state_space(out_dir, model_type: str, seed: int = 0, **overrides) -> Path:
    """Build the tiny random model (see module doc) and save_pretrained it (safetensors) to out_dir."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    build_state_space(model_type, seed, **overrides).save_pretrained(out)
    save_tokenizer(out, vocab_size=384)
    return out
