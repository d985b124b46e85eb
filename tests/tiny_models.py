"""Tiny random-weight Hugging Face checkpoints and a small trained tokenizer for tests.

Everything here is made offline: the tokenizer is trained with `tokenizers` on a generated
corpus, the model weights are random (seeded) and saved with `save_pretrained` as safetensors.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "<|start_header_id|>{{ message['role'] }}<|end_header_id|>\n\n"
    "{{ message['content'] }}<|eot_id|>{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"
)
SPECIAL_TOKENS = [
    "<|begin_of_text|>",
    "<|end_of_text|>",
    "<|start_header_id|>",
    "<|end_header_id|>",
    "<|eot_id|>",
    "<|pad|>",
]
_WORDS = (
    "the a an of to and in is it that for on with as was by at from this be are or "
    "model token export graph onnx runtime cache key value attention layer head rope "
    "hello world quick brown fox jumps over lazy dog story once upon time there lived "
    "small large fast slow red green blue river mountain city night day sun moon star "
    "read write build run test check weight shard tensor batch length window prompt"
).split()


def corpus(lines: int = 400, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    out = []
    for _ in range(lines):
        n = rng.randint(4, 16)
        words = [rng.choice(_WORDS) for _ in range(n)]
        out.append(" ".join(words).capitalize() + rng.choice([".", "!", "?", ","]))
    return out


def save_tokenizer(out_dir: Path, vocab_size: int = 384, extra_specials: tuple[str, ...] = ()) -> Any:
    """Train a byte-level BPE tokenizer (Llama-3 style specials, then `extra_specials` from id 6)
    and save it HF-style."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[*SPECIAL_TOKENS, *extra_specials],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus(), trainer=trainer)
    bos_id = tok.token_to_id("<|begin_of_text|>")
    tok.post_processor = processors.TemplateProcessing(
        single="<|begin_of_text|> $A",
        pair="<|begin_of_text|> $A <|begin_of_text|> $B",
        special_tokens=[("<|begin_of_text|>", bos_id)],
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<|begin_of_text|>",
        eos_token="<|end_of_text|>",
        pad_token="<|pad|>",
    )
    fast.chat_template = CHAT_TEMPLATE
    out_dir.mkdir(parents=True, exist_ok=True)
    fast.save_pretrained(out_dir)
    return fast


BASE: dict[str, Any] = dict(
    vocab_size=384,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=256,
    rms_norm_eps=1e-5,
    bos_token_id=0,
    eos_token_id=1,
    pad_token_id=5,
    initializer_range=0.2,
)


def save_model(
    out_dir: Path,
    model_type: str = "llama",
    dtype: str = "float32",
    seed: int = 0,
    tokenizer: bool = True,
    max_shard_size: str | None = None,
    **overrides: Any,
) -> Path:
    """Save a random-weight HF causal LM of `model_type` (safetensors) plus the tiny tokenizer."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.for_model(model_type, **spelled_for_installed_transformers({**BASE, **overrides}, model_type))
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
    randomize_norms(model)
    kwargs = {"max_shard_size": max_shard_size} if max_shard_size else {}
    model.to(getattr(torch, dtype)).save_pretrained(out_dir, **kwargs)
    if tokenizer:
        save_tokenizer(out_dir, vocab_size=config.vocab_size)
    return out_dir


def spelled_for_installed_transformers(kwargs: dict[str, Any], model_type: str) -> dict[str, Any]:
    """The fixtures speak transformers 5.x (`rope_parameters`, per layer type where a family has
    several). transformers 4.x stores that as an unknown attribute and its models ignore it, so
    under 4.x the same checkpoint is written the way 4.x writes real ones: rope_theta /
    rope_scaling / top-level partial_rotary_factor, and Gemma-3's rope_local_base_freq."""
    import transformers

    if int(transformers.__version__.split(".")[0]) >= 5 or "rope_parameters" not in kwargs:
        return kwargs
    kwargs = dict(kwargs)
    params = dict(kwargs.pop("rope_parameters"))
    if all(isinstance(v, dict) for v in params.values()):  # per layer type
        sliding = params.get("sliding_attention", {})
        params = dict(params["full_attention"])
        if model_type.startswith("gemma3") and "rope_theta" in sliding:
            kwargs["rope_local_base_freq"] = sliding["rope_theta"]
    if "rope_theta" in params:
        kwargs["rope_theta"] = params.pop("rope_theta")
    if "partial_rotary_factor" in params:
        kwargs["partial_rotary_factor"] = params.pop("partial_rotary_factor")
    if params.get("rope_type", "default") != "default" or len(params) > 1:
        kwargs["rope_scaling"] = params
    return kwargs


def randomize_norms(model: Any, biases: bool = False) -> None:
    """HF inits norm weights (and biases) to constants; random ones test the offsets and wiring."""
    import torch

    with torch.no_grad():
        for name, param in model.named_parameters():
            if "norm" in name:
                param.add_(torch.randn_like(param) * 0.3)
            elif biases and name.endswith(".bias"):
                param.add_(torch.randn_like(param) * 0.05)


def save_llama(out_dir: Path, **kwargs: Any) -> Path:
    return save_model(out_dir, "llama", **kwargs)


def save_untied_twin(checkpoint: Path, out_dir: Path) -> Path:
    """A copy of a tied checkpoint with lm_head.weight stored (the embedding's values) and
    tie_word_embeddings false: the same model, built untied (its embedding stays a float table in
    int builds; docs/eps.md §2.7)."""
    import json
    import shutil

    from safetensors.numpy import load_file, save_file

    shutil.copytree(checkpoint, out_dir)
    tensors = load_file(str(out_dir / "model.safetensors"))
    save_file(
        {**tensors, "lm_head.weight": tensors["model.embed_tokens.weight"].copy()}, str(out_dir / "model.safetensors")
    )
    config = json.loads((out_dir / "config.json").read_text())
    (out_dir / "config.json").write_text(json.dumps({**config, "tie_word_embeddings": False}))
    return out_dir
