"""Regenerate tests/data/tiny-trained: a tiny Llama actually trained on tests/data/tiny-text.

Random weights give near-flat logits, so a perplexity test on them cannot tell a correct
export from a broken one. This checkpoint has learned the story grammar of make_text.py,
so its perplexity on eval.txt is low and any wiring mistake (RoPE, GQA, KV cache, tied
head) shows up as a large jump. It stays small (~1 MB float32) and trains in a few minutes
on two CPU cores:

    python tests/data/make_text.py        # only if tiny-text/ is missing or the grammar changed
    python tests/data/train_tiny.py       # --steps N to train longer or shorter

Seeds are fixed, but float sums on CPU can differ across machines and torch versions, so a
rerun elsewhere gives a close model, not necessarily the same bytes.
"""

from __future__ import annotations

import argparse
import math
import re
import sys
import time
from bisect import bisect_left
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE.parent))

from tiny_models import CHAT_TEMPLATE, SPECIAL_TOKENS  # noqa: E402

TEXT = HERE / "tiny-text"
OUT = HERE / "tiny-trained"
VOCAB_SIZE = 512
CONFIG: dict[str, Any] = dict(
    vocab_size=VOCAB_SIZE,
    hidden_size=96,
    intermediate_size=256,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=512,
    tie_word_embeddings=True,
    rms_norm_eps=1e-5,
    rope_theta=10000.0,
)


def train_tokenizer(text: str) -> Any:
    """Byte-level BPE with the Llama-3 specials and BOS template of tests/tiny_models.py.

    Byte-level means every string round-trips, which the tests rely on; clean-up of spaces
    before punctuation is off so decode(encode(x)) == x exactly.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(text.splitlines(keepends=True), trainer=trainer)
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
        clean_up_tokenization_spaces=False,
        model_max_length=CONFIG["max_position_embeddings"],
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def story_starts(tokenizer: Any, text: str) -> tuple[torch.Tensor, list[int]]:
    """Token ids of the whole text (no BOS) and the token index where each story begins."""
    enc = tokenizer.backend_tokenizer.encode(text, add_special_tokens=False)
    starts = [s for s, _ in enc.offsets]
    firsts = [bisect_left(starts, m.start()) for m in re.finditer(r"(?m)^Story \d+:", text)]
    return torch.tensor(enc.ids, dtype=torch.long), firsts


def batches(
    ids: torch.Tensor, firsts: list[int], bos: int, batch: int, seq: int, gen: torch.Generator
) -> Iterator[torch.Tensor]:
    """Random crops of `seq` tokens; some open with BOS at a story start.

    Plain crops match the strided eval, whose later windows start mid-text without BOS;
    BOS crops match a prompt, which the tokenizer always opens with BOS.
    """
    limit = len(ids) - seq
    usable = [f for f in firsts if f < limit]
    while True:
        rows = []
        for _ in range(batch):
            if torch.rand((), generator=gen).item() < 0.3:
                at = usable[int(torch.randint(len(usable), (), generator=gen))]
                rows.append(torch.cat([torch.tensor([bos]), ids[at : at + seq - 1]]))
            else:
                at = int(torch.randint(limit, (), generator=gen))
                rows.append(ids[at : at + seq])
        yield torch.stack(rows)


def lr_at(step: int, steps: int, peak: float, warmup: int) -> float:
    """Linear warmup, then cosine decay to a tenth of the peak."""
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = (step - warmup) / max(1, steps - warmup)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


@torch.no_grad()
def perplexity(model: Any, ids: torch.Tensor, window: int = 256, stride: int = 128) -> float:
    """Strided-window perplexity, as in the Hugging Face perplexity guide.

    Each window scores only the tokens the previous one did not, with up to
    `window - stride` tokens of context before them.
    """
    model.eval()
    nll_sum, n_tokens, prev_end = 0.0, 0, 0
    for begin in range(0, ids.size(1), stride):
        end = min(begin + window, ids.size(1))
        trg_len = end - prev_end
        input_ids = ids[:, begin:end]
        labels = input_ids.clone()
        labels[:, :-trg_len] = -100
        loss = model(input_ids, labels=labels).loss
        n_valid = int((labels[:, 1:] != -100).sum())  # labels are shifted inside the model
        nll_sum += float(loss) * n_valid
        n_tokens += n_valid
        prev_end = end
        if end == ids.size(1):
            break
    return math.exp(nll_sum / n_tokens)


def model_card(steps: int, seconds: float, train_loss: float, ppl: float, ppl_random: float) -> str:
    """Hub-style card: the license and where the weights came from."""
    return f"""---
license: apache-2.0
library_name: transformers
pipeline_tag: text-generation
tags:
- llama
- tiny
- test-fixture
---

# tiny-trained

A tiny Llama (2 layers, hidden 96, 4 query / 2 key-value heads, tied embeddings, vocab 512,
float32) used as a test fixture by gqa-export.

Trained by tests/data/train_tiny.py on tests/data/tiny-text/train.txt, the synthetic story
text generated by tests/data/make_text.py; the byte-level BPE tokenizer was trained on the
same file.

- training: {steps} steps, AdamW, CPU, {seconds:.0f} s, final train loss {train_loss:.3f}
- perplexity on tests/data/tiny-text/eval.txt (windows of 256 tokens, stride 128):
  {ppl:.2f} (the same config with random weights: {ppl_random:.1f})

It knows nothing but the story grammar; it is for checking exports, not for use.
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=700, help="optimizer steps (default: %(default)s)")
    parser.add_argument("--batch", type=int, default=32, help="sequences per step")
    parser.add_argument("--seq", type=int, default=256, help="tokens per sequence")
    parser.add_argument("--lr", type=float, default=3e-3, help="peak learning rate")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument(
        "--config", action="append", default=[], metavar="KEY=INT",
        help="override one size of CONFIG (e.g. --config hidden_size=192): a larger model, same text and tokenizer",
    )  # fmt: skip
    args = parser.parse_args()
    sizes = {key: int(value) for key, _, value in (item.partition("=") for item in args.config)}
    unknown = sorted(set(sizes) - set(CONFIG))
    if unknown:
        parser.error(f"--config: unknown key(s) {unknown}; known: {', '.join(CONFIG)}")

    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    torch.set_num_threads(2)
    torch.manual_seed(args.seed)
    train_text = (TEXT / "train.txt").read_text(encoding="utf-8")
    eval_text = (TEXT / "eval.txt").read_text(encoding="utf-8")

    tokenizer = train_tokenizer(train_text)
    ids, firsts = story_starts(tokenizer, train_text)
    print(f"train.txt: {len(train_text):,} chars -> {len(ids):,} tokens, {len(firsts)} stories")

    config = LlamaConfig(
        **{**CONFIG, **sizes},
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    model = LlamaForCausalLM(config)
    print(f"parameters: {sum(p.numel() for p in model.parameters()):,}")
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    optim = torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.05}, {"params": no_decay, "weight_decay": 0.0}],
        lr=args.lr,
        betas=(0.9, 0.95),
    )
    gen = torch.Generator().manual_seed(args.seed)
    data = batches(ids, firsts, tokenizer.bos_token_id, args.batch, args.seq, gen)
    warmup = max(1, args.steps // 20)

    model.train()
    start = time.perf_counter()
    smooth = float("nan")
    for step in range(args.steps):
        for group in optim.param_groups:
            group["lr"] = lr_at(step, args.steps, args.lr, warmup)
        batch = next(data)
        loss = model(batch, labels=batch).loss
        optim.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optim.step()
        value = loss.item()
        smooth = value if math.isnan(smooth) else 0.95 * smooth + 0.05 * value
        if step % 50 == 0 or step == args.steps - 1:
            elapsed = time.perf_counter() - start
            lr = optim.param_groups[0]["lr"]
            print(f"step {step:5d}  loss {value:.3f}  avg {smooth:.3f}  lr {lr:.2e}  {elapsed:6.1f}s")
    seconds = time.perf_counter() - start

    eval_ids = tokenizer(eval_text, return_tensors="pt", verbose=False).input_ids
    ppl = perplexity(model, eval_ids)
    torch.manual_seed(args.seed + 1)
    ppl_random = perplexity(LlamaForCausalLM(config), eval_ids)
    print(f"eval.txt: {eval_ids.size(1):,} tokens, perplexity {ppl:.3f} trained, {ppl_random:.1f} random weights")

    args.out.mkdir(parents=True, exist_ok=True)
    model.generation_config = GenerationConfig(
        bos_token_id=config.bos_token_id,
        eos_token_id=config.eos_token_id,
        pad_token_id=config.pad_token_id,
    )
    model.eval().save_pretrained(args.out, safe_serialization=True)
    tokenizer.save_pretrained(args.out)
    if not sizes:  # the card describes the fixture's own shape
        (args.out / "README.md").write_text(model_card(args.steps, seconds, smooth, ppl, ppl_random))
    print(f"saved {args.out} in {seconds:.0f} s of training")


if __name__ == "__main__":
    main()
