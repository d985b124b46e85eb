"""Tiny random mixture-of-experts checkpoints (transformers 5.24, CPU, fp32), with the tiny tokenizer.

    from make_tiny import save_moe, save_gpt_oss_mxfp4, FAMILIES
    p = save_moe("/tmp/x/qwen3", "qwen3_moe")                      # norm_topk_prob False, layer 1 dense
    p = save_moe("/tmp/x/qwen3n", "qwen3_moe", norm_topk_prob=True)
    p = save_moe("/tmp/x/mix_hf", "mixtral", hub_layout=False)     # transformers-internal (fused) names
    p = save_gpt_oss_mxfp4("/tmp/x/goss_mx")                       # experts as *_blocks/*_scales (MXFP4)

Common shape: hidden 64, 4 q heads, 2 kv heads, head_dim 16, 3 layers, vocab 384, bos 0 / eos 1 / pad 5,
max_position_embeddings 256.  `**overrides` are config kwargs (applied last).  `hub_layout` is passed to
save_pretrained(save_original_format=hub_layout): True = the on-hub names (per-expert tensors where the
family's conversion_mapping splits them), False = transformers-5 internal names (fused 3-D experts).
All randomization is seeded; the same seed gives bit-identical weights in both layouts.
"""

from __future__ import annotations

from pathlib import Path

import torch
import transformers
from derived_moe_models import CONFIGS as DERIVED_MOE_CONFIGS
from derived_moe_models import FAMILIES as DERIVED_MOE_FAMILIES
from derived_moe_models import finish as finish_derived
from tiny_models import save_tokenizer, spelled_for_installed_transformers
from transformers import AutoConfig, AutoModelForCausalLM

FAMILIES = [
    "qwen3_moe", "qwen2_moe", "mixtral", "gpt_oss", "olmoe", "granitemoe", "phimoe", "gemma4_text",
    "deepseek_v2", "deepseek_v3", "sarvam_mla", "glm4_moe_lite", *DERIVED_MOE_FAMILIES,
]  # fmt: skip

# multi-head latent attention: a key of 16 no-rope + 8 rope dims (24, a multiple of 8 for GQA), values
# of 16 (padded to 24 in the cache), a 32-wide latent; one kv head per query head, as HF expands
_LATENT = dict(
    num_key_value_heads=4, kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16,
    first_k_dense_replace=1, n_routed_experts=8, num_experts_per_tok=2, moe_intermediate_size=32,
    intermediate_size=96, n_shared_experts=1, rms_norm_eps=1e-5,
)  # fmt: skip

COMMON = dict(
    vocab_size=384,
    hidden_size=64,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    num_hidden_layers=3,
    max_position_embeddings=256,
    bos_token_id=0,
    eos_token_id=1,
    pad_token_id=5,
    initializer_range=0.1,
    tie_word_embeddings=False,
)


def family_config(model_type: str) -> dict:
    c = dict(COMMON)
    if model_type in DERIVED_MOE_CONFIGS:  # tests/derived_moe_models.py
        overrides, dropped = DERIVED_MOE_CONFIGS[model_type]
        return {**{k: v for k, v in c.items() if k not in dropped}, **overrides}
    if model_type == "qwen3_moe":
        c.update(
            num_experts=8,
            num_experts_per_tok=3,
            moe_intermediate_size=32,
            intermediate_size=96,
            norm_topk_prob=False,
            decoder_sparse_step=1,
            mlp_only_layers=[1],  # layer 1 = dense Qwen3MoeMLP
            rope_parameters={"rope_type": "default", "rope_theta": 1e6},
            rms_norm_eps=1e-6,
        )
    elif model_type == "qwen2_moe":
        c.update(
            num_experts=6,
            num_experts_per_tok=2,
            moe_intermediate_size=32,
            intermediate_size=96,
            shared_expert_intermediate_size=48,
            norm_topk_prob=False,
            qkv_bias=True,
            decoder_sparse_step=1,
            mlp_only_layers=[],
            rope_parameters={"rope_type": "default", "rope_theta": 1e6},
            rms_norm_eps=1e-6,
        )
    elif model_type == "mixtral":
        c.update(
            num_local_experts=8,
            num_experts_per_tok=2,
            intermediate_size=32,
            sliding_window=8,
            rope_parameters={"rope_type": "default", "rope_theta": 1e6},
            rms_norm_eps=1e-5,
        )
    elif model_type == "gpt_oss":
        c.update(
            num_local_experts=8,
            num_experts_per_tok=4,
            intermediate_size=64,  # multiples of 32 for MXFP4
            sliding_window=8,
            layer_types=["sliding_attention", "full_attention", "sliding_attention"],
            swiglu_limit=7.0,
            attention_bias=True,
            rms_norm_eps=1e-5,
            rope_parameters={
                "rope_type": "yarn",
                "rope_theta": 150000.0,
                "factor": 4.0,
                "beta_fast": 32.0,
                "beta_slow": 1.0,
                "truncate": False,
                "original_max_position_embeddings": 64,
            },
        )
    elif model_type == "olmoe":
        c.update(
            num_experts=8,
            num_experts_per_tok=2,
            intermediate_size=32,
            norm_topk_prob=False,
            clip_qkv=2.0,  # real OLMoE releases: null. 2.0 clips ~5% of q/k/v entries here.
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
            rms_norm_eps=1e-5,
        )
        c.pop("head_dim")  # Olmoe derives head_dim = hidden/heads (=16)
    elif model_type == "granitemoe":
        c.update(
            num_local_experts=8,
            num_experts_per_tok=2,
            intermediate_size=32,
            tie_word_embeddings=True,
            embedding_multiplier=12.0,
            attention_multiplier=0.0625,
            residual_multiplier=0.22,
            logits_scaling=6.0,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
            rms_norm_eps=1e-6,
            # tied, embedding x12, residual x0.22: at 0.1 the model copies its last token forever
            initializer_range=0.7,
        )
        c.pop("head_dim")
    elif model_type == "phimoe":
        half = COMMON["head_dim"] // 2
        c.update(
            num_local_experts=8,
            num_experts_per_tok=2,
            intermediate_size=32,
            attention_bias=True,
            lm_head_bias=True,
            router_jitter_noise=0.1,
            input_jitter_noise=0.01,
            sliding_window=None,
            rms_norm_eps=1e-5,
            rope_parameters={
                "rope_type": "longrope",
                "rope_theta": 10000.0,
                "short_factor": [1.0 + 0.05 * i for i in range(half)],
                "long_factor": [1.0 + 1.5 * i for i in range(half)],
                "short_mscale": 1.243163121016122,
                "long_mscale": 1.243163121016122,
                "original_max_position_embeddings": 64,
            },
        )
        c.pop("head_dim")
    elif model_type == "gemma4_text":
        c.update(
            enable_moe_block=True,
            num_experts=8,
            top_k_experts=2,
            moe_intermediate_size=32,
            intermediate_size=64,
            hidden_size_per_layer_input=0,
            sliding_window=8,
            layer_types=["sliding_attention", "sliding_attention", "full_attention"],
            global_head_dim=32,
            attention_k_eq_v=True,
            num_global_key_value_heads=1,
            final_logit_softcapping=30.0,
            tie_word_embeddings=True,
            rms_norm_eps=1e-6,
            vocab_size_per_layer_input=384,
        )
    elif model_type == "deepseek_v2":  # V2-Lite-like: no q-LoRA, softmax greedy top-k, a dense first layer
        c.pop("head_dim")
        c.update(
            _LATENT,
            q_lora_rank=None,
            topk_method="greedy",
            routed_scaling_factor=1.5,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        )
    elif model_type == "deepseek_v3":  # q-LoRA, sigmoid grouped top-k with a selection bias, YaRN mscale
        c.pop("head_dim")
        c.update(
            _LATENT,
            q_lora_rank=32,
            n_group=4,
            topk_group=2,
            norm_topk_prob=True,
            routed_scaling_factor=2.5,
            rope_interleave=True,
            rope_parameters={
                "rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "original_max_position_embeddings": 64,
                "mscale": 1.0, "mscale_all_dim": 0.8, "beta_fast": 32.0, "beta_slow": 1.0,
            },
        )  # fmt: skip
    elif model_type == "sarvam_mla":  # sarvam-105b's shape: no q-LoRA, one expert group, YaRN (deepseek_yarn)
        c.pop("head_dim")
        c.update(
            _LATENT,
            q_lora_rank=None,
            n_group=1,
            topk_group=1,
            norm_topk_prob=True,
            routed_scaling_factor=2.5,
            rope_parameters={
                "rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "original_max_position_embeddings": 64,
                "mscale": 1.0, "mscale_all_dim": 1.0, "beta_fast": 32.0, "beta_slow": 1.0,
            },
        )  # fmt: skip
    elif model_type == "glm4_moe_lite":  # GLM-4.7-Flash's form: values as wide as keys, experts by mlp_layer_types
        c.pop("head_dim")
        c.update({k: v for k, v in _LATENT.items() if k != "first_k_dense_replace"})  # its class has no such key
        c.update(
            q_lora_rank=32,
            v_head_dim=24,  # = qk_nope + qk_rope, as GLM-4.7-Flash's 256 = 192 + 64: no value padding
            mlp_layer_types=["sparse", "dense", "sparse"],  # no first-k rule makes this pattern
            n_group=4,
            topk_group=2,
            norm_topk_prob=True,
            routed_scaling_factor=1.8,
            rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
        )
    else:
        raise ValueError(model_type)
    return c


# AFMoE's router Linear is mlp.router.gate (its class initialises it to zeros)
ROUTER_LINEAR_SUFFIXES = (
    "mlp.gate", "mlp.router", "block_sparse_moe.router", "router.proj", "router.gate", "mlp.gate.linear",
)  # fmt: skip


def _randomize(model, model_type: str, g: torch.Generator):
    def rn(t, std, mean=0.0):
        return (torch.randn(t.shape, generator=g) * std + mean).to(t.dtype)

    with torch.no_grad():
        for name, p in model.named_parameters():
            leaf = name.rsplit(".", 1)[-1]
            mod = name.rsplit(".", 1)[0]
            is_norm = "norm" in mod.rsplit(".", 1)[-1]  # the module's own name (DBRX's norm_attn_norm.attn is not)
            if is_norm and leaf == "weight":  # RMSNorm / LayerNorm weights, q/k norms
                p.copy_(rn(p, 0.3, 1.0))
            elif is_norm and leaf == "bias":  # phimoe LayerNorm bias
                p.copy_(rn(p, 0.2))
            elif leaf == "bias" or leaf.endswith("_bias"):  # attn/lm_head/expert/router biases
                p.copy_(rn(p, 0.5 if model_type == "gpt_oss" else 0.2))
            elif leaf == "sinks":
                p.copy_(rn(p, 1.0))
            elif "layernorm.mlp.fc" in mod and leaf == "weight":  # A.X-K2's gated norms: a gate that varies by token
                p.copy_(rn(p, 0.5))
            elif mod.endswith(ROUTER_LINEAR_SUFFIXES) and leaf == "weight":
                p.copy_(rn(p, 0.5))  # router: logits std ~4 -> varied routing
            elif mod.endswith("router") and leaf == "scale":  # gemma4 router.scale [H]
                p.copy_(rn(p, 0.3, 1.0))
            elif leaf == "per_expert_scale":  # gemma4 [E]
                p.copy_((torch.rand(p.shape, generator=g) + 0.5).to(p.dtype))
            elif model_type == "gpt_oss" and leaf == "gate_up_proj":
                p.copy_(rn(p, 1.0))  # pre-activations beyond swiglu_limit=7
            elif model_type == "gpt_oss" and leaf == "down_proj":
                p.copy_(rn(p, 0.05))
        for name, b in model.named_buffers():
            if name.endswith("layer_scalar"):  # gemma4 (persistent buffer)
                b.copy_(torch.rand(b.shape, generator=g) * 0.5 + 0.6)
            elif name.endswith("e_score_correction_bias"):  # DeepSeek-V3: steers which experts are chosen
                b.copy_(torch.randn(b.shape, generator=g) * 0.2)


def _decorrelate_routers(model, g: torch.Generator):
    """The residual stream of a random tiny model has a large token-independent component, which can make every
    token pick the same experts.  Layer by layer, remove from each router weight the direction of the mean router
    input (over a random calibration batch), so that routing depends on the token."""
    mods = [
        (n, m)
        for n, m in model.named_modules()
        if n.endswith(ROUTER_LINEAR_SUFFIXES)
        and isinstance(getattr(m, "weight", None), torch.nn.Parameter)
        and m.weight.dim() == 2
    ]
    ids = torch.randint(6, model.config.vocab_size, (2, 32), generator=g)
    for _name, mod in mods:
        cap: dict = {}

        def grab(_module, args, cap=cap):
            cap.setdefault("x", args[0].detach().reshape(-1, args[0].shape[-1]))

        h = mod.register_forward_pre_hook(grab)
        with torch.no_grad():
            model(ids)
        h.remove()
        mean = cap["x"].float().mean(0)
        u = mean / mean.norm()
        with torch.no_grad():
            W = mod.weight.float()
            mod.weight.copy_((W - (W @ u)[:, None] * u[None]).to(mod.weight.dtype))


# causal LMs transformers 5.25 leaves out of AutoModelForCausalLM (Mistral-4: image-text-to-text's mapping only)
NOT_AUTO_CAUSAL = {"mistral4": "Mistral4ForCausalLM"}


def build_model(model_type: str, seed: int = 0, **overrides):
    cfg_kw = family_config(model_type)
    cfg_kw.update(overrides)
    # under transformers 4.x, written the way 4.x writes real checkpoints (tiny_models.py)
    config = AutoConfig.for_model(model_type, **spelled_for_installed_transformers(cfg_kw, model_type))
    torch.manual_seed(seed)
    if model_type in NOT_AUTO_CAUSAL:
        model = getattr(transformers, NOT_AUTO_CAUSAL[model_type])._from_config(config, dtype=torch.float32)
    else:
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.eval()
    g = torch.Generator().manual_seed(seed + 1)
    _randomize(model, model_type, g)
    _decorrelate_routers(model, g)
    finish_derived(model, model_type, g)
    return model


def save_moe(out_dir, model_type: str, seed: int = 0, hub_layout: bool = True, **overrides) -> Path:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model = build_model(model_type, seed, **overrides)
    model.save_pretrained(out, save_original_format=hub_layout)
    save_tokenizer(out, vocab_size=384)
    return out


# ----------------------------------------------------------------------------------------------------------
# gpt-oss MXFP4 (format of the openai/gpt-oss-* releases; see transformers/integrations/mxfp4.py)
# ----------------------------------------------------------------------------------------------------------
FP4_VALUES = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]


def mxfp4_quantize(w_out_in: torch.Tensor):
    """w [E, N, K] (out x in, K % 32 == 0) -> blocks uint8 [E, N, K/32, 16], scales uint8 [E, N, K/32].
    value = FP4_VALUES[nibble] * 2**(scale - 127); element 2j in the LOW nibble of byte j, 2j+1 in the high."""
    E, N, K = w_out_in.shape
    assert K % 32 == 0
    w = w_out_in.float().reshape(E, N, K // 32, 32)
    amax = w.abs().amax(-1).clamp(min=2.0**-126)
    # pick e so that amax / 2**e <= 6 (largest FP4 magnitude)
    e = torch.ceil(torch.log2(amax / 6.0)).clamp(-127, 127)
    scales = (e + 127).to(torch.uint8)
    q = w / torch.pow(2.0, e)[..., None]
    lut = torch.tensor(FP4_VALUES[:8])
    idx = (q.abs()[..., None] - lut).abs().argmin(-1)  # nearest magnitude (ties -> smaller)
    nib = (idx + 8 * (q < 0)).to(torch.uint8)  # sign bit = 8
    blocks = (nib[..., 0::2] | (nib[..., 1::2] << 4)).contiguous()  # [E,N,K/32,16]
    return blocks, scales


def mxfp4_dequantize(blocks: torch.Tensor, scales: torch.Tensor, dtype=torch.float32) -> torch.Tensor:
    """Inverse of mxfp4_quantize -> [E, N, K] (out x in); identical to transformers' _convert_moe_packed_tensors
    before its final transpose(1, 2)."""
    lut = torch.tensor(FP4_VALUES, dtype=torch.float32)
    lo, hi = lut[(blocks & 0x0F).long()], lut[(blocks >> 4).long()]
    vals = torch.stack([lo, hi], -1).reshape(*blocks.shape[:-1], 32)
    vals = torch.ldexp(vals, (scales.to(torch.int32) - 127)[..., None].float())
    return vals.reshape(*blocks.shape[:-2], -1).to(dtype)


def save_gpt_oss_mxfp4(out_dir, seed: int = 0, dtype=torch.bfloat16, **overrides) -> Path:
    """gpt_oss checkpoint whose experts are MXFP4: `experts.gate_up_proj_blocks` [E, 2I, H/32, 16] u8,
    `experts.gate_up_proj_scales` [E, 2I, H/32] u8, `experts.down_proj_blocks` [E, H, I/32, 16] u8,
    `experts.down_proj_scales` [E, H, I/32] u8; biases/attention/router/norms fp32 as usual; config gets
    quantization_config {"quant_method": "mxfp4", "modules_to_not_convert": [...]} like the real release.
    Non-expert tensors (and expert biases) are stored in `dtype` (bf16 like the release; config "dtype" follows).
    Returns the path; the model equivalent to it is `load_dequantized_reference(path)`.
    transformers 5.24 on CPU loads it only with quantization_config=Mxfp4Config(dequantize=True) (without
    `accelerate` installed, the default path raises ImportError in Mxfp4HfQuantizer.validate_environment)."""
    from safetensors.torch import save_file

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model = build_model("gpt_oss", seed, **overrides)
    sd = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
    new = {}
    for k, v in sd.items():
        if k.endswith("experts.gate_up_proj") or k.endswith("experts.down_proj"):
            b, s = mxfp4_quantize(v.transpose(1, 2))  # HF param is [E, in, out] -> quantize rows of [E, out, in]
            new[k + "_blocks"], new[k + "_scales"] = b, s
        else:
            new[k] = v.to(dtype)
    if model.config.tie_word_embeddings:
        new.pop("lm_head.weight", None)
    model.config.quantization_config = {
        "quant_method": "mxfp4",
        "modules_to_not_convert": [
            "model.layers.*.self_attn",
            "model.layers.*.mlp.router",
            "model.embed_tokens",
            "lm_head",
        ],
    }
    model.config.dtype = dtype
    model.config.save_pretrained(out)
    model.generation_config.save_pretrained(out)
    save_file(new, str(out / "model.safetensors"), metadata={"format": "pt"})
    save_tokenizer(out, vocab_size=384)
    return out


def load_dequantized_reference(path, dtype=torch.float32):
    """Build GptOssForCausalLM with the MXFP4 experts dequantized by mxfp4_dequantize (our own code, not HF's)."""
    from safetensors.torch import load_file
    from transformers import GptOssConfig, GptOssForCausalLM

    cfg = GptOssConfig.from_pretrained(path)
    cfg.quantization_config = None
    del cfg.quantization_config
    sd = load_file(str(Path(path) / "model.safetensors"))
    full = {}
    for k, v in sd.items():
        if k.endswith("_blocks"):
            base = k[: -len("_blocks")]
            full[base] = mxfp4_dequantize(v, sd[base + "_scales"]).transpose(1, 2).contiguous()
        elif k.endswith("_scales"):
            continue
        else:
            full[k] = v
    m = GptOssForCausalLM(cfg)
    missing, unexpected = m.load_state_dict(full, strict=False)
    assert not unexpected and all("lm_head" in x for x in missing), (missing, unexpected)
    for p in m.parameters():  # cast parameters only: from_pretrained(dtype=bf16) keeps rotary inv_freq fp32,
        p.data = p.data.to(dtype)  # while model.to(bf16) would round it (0.14 logit change on this tiny model)
    return m.eval()
