"""A trained mixture of experts in a second: the trained tiny Llama (tests/data/tiny-trained)
upcycled into Mixtral.

Every expert is the trained MLP with its intermediate neurons permuted (a different permutation
per expert), which computes exactly the same function; Mixtral renormalizes its top-k routing
weights to sum to one, so the MoE computes the dense model and keeps its trained perplexity
whatever the (random) router picks. Quantization error and layout bugs in the experts then show
up as perplexity, where they mean something, instead of as logit noise of a random model. The
experts differ byte for byte, so each is quantized on its own weights.
"""

from __future__ import annotations

from pathlib import Path

TRAINED = Path(__file__).parent / "data" / "tiny-trained"
EXPERTS, TOP_K = 4, 2


def save_upcycled_mixtral(dest: Path, seed: int = 0) -> Path:
    import shutil

    import torch
    from transformers import AutoModelForCausalLM, MixtralConfig, MixtralForCausalLM

    dense = AutoModelForCausalLM.from_pretrained(TRAINED, dtype=torch.float32).eval()
    d = dense.config
    config = MixtralConfig(
        vocab_size=d.vocab_size,
        hidden_size=d.hidden_size,
        intermediate_size=d.intermediate_size,
        num_hidden_layers=d.num_hidden_layers,
        num_attention_heads=d.num_attention_heads,
        num_key_value_heads=d.num_key_value_heads,
        head_dim=d.head_dim,
        num_local_experts=EXPERTS,
        num_experts_per_tok=TOP_K,
        max_position_embeddings=d.max_position_embeddings,
        rms_norm_eps=d.rms_norm_eps,
        rope_theta=d.rope_parameters["rope_theta"],
        tie_word_embeddings=True,
        bos_token_id=d.bos_token_id,
        eos_token_id=d.eos_token_id,
        pad_token_id=d.pad_token_id,
        sliding_window=None,
    )
    moe = MixtralForCausalLM(config).eval()
    source = dense.state_dict()
    state = moe.state_dict()
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, value in source.items():
            if name in state and ".mlp." not in name:
                state[name].copy_(value)
        for i in range(config.num_hidden_layers):
            mlp = f"model.layers.{i}.mlp."
            gate, up, down = (source[f"{mlp}{p}_proj.weight"] for p in ("gate", "up", "down"))
            gate_up, down_all = state[f"{mlp}experts.gate_up_proj"], state[f"{mlp}experts.down_proj"]
            for e in range(EXPERTS):
                order = torch.randperm(gate.shape[0], generator=generator)
                gate_up[e].copy_(torch.cat([gate[order], up[order]]))
                down_all[e].copy_(down[:, order])
            state[f"{mlp}gate.weight"].normal_(0.0, 0.5, generator=generator)
    moe.load_state_dict(state)
    moe.save_pretrained(dest)
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "generation_config.json"):
        if (TRAINED / name).is_file():
            shutil.copy(TRAINED / name, dest / name)
    return dest
