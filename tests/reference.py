"""The references every correctness test compares against.

- `hf_logits`: HF transformers (torch, fp32) logits for a whole token sequence.
- `OrtStepper`: runs an exported model.onnx with ONNX Runtime the way ORT GenAI does with
  `past_present_share_buffer: true` — one [B, kv_heads, max_length, head_dim] buffer per K and V,
  bound as both past input and present output (IOBinding), growing attention_mask.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

# HF reference outputs already computed this session, by checkpoint (folder and its files' sizes and
# mtimes: a rewritten checkpoint is another key), call and arguments: the same row's greedy tokens
# are compared in every attention mode, and HF generate is what such a check spends its time on
_SESSION_REFERENCES: dict[tuple, Any] = {}


def hf_model(model_dir: Path):
    """The checkpoint's own class (a multimodal `…ForConditionalGeneration` too), fp32, eval."""
    import torch
    import transformers

    architecture = json.loads((model_dir / "config.json").read_text())["architectures"][0]
    # transformers 4.x defaults to sdpa, which silently drops Gemma-2's attn_logit_softcapping (5.x
    # refuses sdpa for it): the reference is the eager path there
    eager = {"attn_implementation": "eager"} if int(transformers.__version__.split(".")[0]) < 5 else {}
    model = getattr(transformers, architecture).from_pretrained(model_dir, dtype=torch.float32, **eager).eval()
    # Kosmos-2's forward requires pixel values or image embeddings; its generate() runs its text model alone on a
    # prompt without an image, so that is the reference (Kosmos2TextForCausalLM, the class's own module)
    return model.text_model if architecture in TEXT_MODEL_GENERATES else model


# classes whose generate() on ids alone runs their `text_model` (the reference of a text prompt)
TEXT_MODEL_GENERATES = frozenset({"Kosmos2ForConditionalGeneration"})


# classes whose forward numbers a call's positions from 0 when not given position_ids, whatever the
# cache holds (BambaModel: torch.arange(seq_len); MiniMaxModel counts the past from layer 0's KV
# cache, empty when layer 0 is lightning attention); generate() passes them, so a decode step here does
POSITIONS_NOT_FROM_CACHE = frozenset({"bamba", "recurrent_gemma", "minimax"})
# classes whose forward takes its cache only as `cache` (and returns it so): the alias they still
# accept is cache_params, so a past_key_values argument would be dropped into **kwargs unread
CACHE_KEYWORD = frozenset(
    {
        "mamba", "mamba2", "falcon_mamba", "zamba2", "zamba", "recurrent_gemma", "minimax", "xlstm", "ergo", "dory",
        "inkling_text", "inkling2_text",
    }
)  # fmt: skip
# classes that keep their recurrent state in their modules and return no cache (RecurrentGemma): the
# states are reset and the attention cache made here, then passed to every call
STATEFUL = frozenset({"recurrent_gemma"})
# classes whose forward takes and returns their recurrent state as `state` (RWKV's five tensors)
STATE_KEYWORD = frozenset({"rwkv"})
# classes with no KV cache (GPT-1): generate() runs the whole sequence at every step, and so do the
# decode steps here (each step's logits are the last position's of one forward over every token so far);
# Granite-4-Vision's text model makes no cache when it is given none (generate() always passes one), so a
# step run with use_cache alone would see no history: it is read over the whole sequence too
UNCACHED = frozenset({"openai-gpt", "granite4_vision"})


# classes whose batched decode step is not each row's own: transformers 5.24's RWKV token shift adds
# the [B, H] shift state to the [B, 1, H] step input, which broadcasts to [B, B, H] when B > 1
# (docs/hybrid-state.md §8.18), so their references are generated one prompt at a time
ROW_BY_ROW = frozenset({"rwkv"})


def cache_keyword(model) -> str:
    """The keyword a class's forward takes its cache under, and the output attribute it returns it as."""
    model_type = getattr(model.config, "model_type", None)
    return "cache" if model_type in CACHE_KEYWORD else "state" if model_type in STATE_KEYWORD else "past_key_values"


def hf_logits(model, tokens: list[int], prompt_len: int | None = None) -> np.ndarray:
    """Logits for every position: the first `prompt_len` tokens in one forward (all of them when
    None), then one token at a time through HF's KV cache, as generation runs them. Incremental
    matters where the positions' rope depends on the sequence length seen so far (longrope)."""
    import torch
    import transformers

    n = len(tokens) if prompt_len is None else prompt_len
    # transformers 4.x's Qwen3-VL places a decode step at position 0 unless told its cache position
    # (generate() always tells it); every 4.x class takes the argument
    told = int(transformers.__version__.split(".")[0]) < 5
    model_type = getattr(model.config, "model_type", None)
    positioned = model_type in POSITIONS_NOT_FROM_CACHE
    keyword = cache_keyword(model)
    given: dict = {}
    if model_type in STATEFUL:  # a 1-token prompt runs HF's decode path, which reads the stored conv state
        model._setup_cache(model.config, 1, "cpu", torch.float32)
        given = {"cache": transformers.DynamicCache(config=model.config), "position_ids": torch.arange(n)[None]}
    if model_type in UNCACHED:
        with torch.no_grad():
            whole = model(input_ids=torch.tensor([tokens])).logits[0]
        return whole.float().numpy()
    with torch.no_grad():
        out = model(input_ids=torch.tensor([tokens[:n]]), use_cache=True, **given)
        logits, past = [out.logits[0]], given["cache"] if given else getattr(out, keyword)
        for i, t in enumerate(tokens[n:], start=n):
            where = {"cache_position": torch.tensor([i])} if told else {}
            if positioned:
                where["position_ids"] = torch.tensor([[i]])
            out = model(input_ids=torch.tensor([[t]]), use_cache=True, **{keyword: past}, **where)
            logits.append(out.logits[0])
            past = given["cache"] if given else getattr(out, keyword)
    return torch.cat(logits).float().numpy()


def assert_varied(sequences: list[list[int]], least: int = 4) -> None:
    """Greedy continuations that prove something: at least one holds `least` distinct ids. Equal
    token lists of one repeated id (a model that copies its last token) pass any exporter."""
    distinct = [len(set(s)) for s in sequences]
    assert max(distinct, default=0) >= least, f"degenerate continuations (distinct ids per prompt: {distinct})"


def hf_generate(model, prompt: list[int], new_tokens: int) -> list[int]:
    """Greedy HF generate, EOS suppressed for `new_tokens` steps (as genai's min_length does)."""
    import torch

    with torch.no_grad():
        out = model.generate(
            torch.tensor([prompt]),
            attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
            max_new_tokens=new_tokens,
            min_new_tokens=new_tokens,
            do_sample=False,
            pad_token_id=model.generation_config.pad_token_id,
        )
    return out[0, len(prompt) :].tolist()


def _checkpoint_key(checkpoint: Path) -> tuple:
    files = sorted(p for p in Path(checkpoint).iterdir() if p.is_file())
    return (str(Path(checkpoint).resolve()), *((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in files))


def hf_embeds_then_greedy(model, embeds, new_tokens: int, eos: int = 1) -> tuple[np.ndarray, list[int]]:
    """A multimodal reference: HF's decoder on prompt embeddings (image rows already placed), then
    `new_tokens` greedy ids through its cache with `eos` suppressed; (the prompt's logits, the ids)."""
    import torch

    with torch.no_grad():
        out = model(inputs_embeds=embeds, use_cache=True)
        prompt_logits, tokens = out.logits[0].numpy().copy(), []
        for _ in range(new_tokens):
            logits = out.logits[0, -1]
            logits[eos] = -np.inf
            tokens.append(int(logits.argmax()))
            out = model(torch.tensor([tokens[-1:]]), past_key_values=out.past_key_values, use_cache=True)
    return prompt_logits, tokens


def hf_generates_of(checkpoint: Path, prompts: Sequence[Sequence[int]], new_tokens: int) -> list[list[int]]:
    """`hf_generate` of the checkpoint's own class (`hf_model`) for each prompt, computed once per
    session per (checkpoint, prompt, new_tokens): for checks that compare several packages of one
    unmodified checkpoint with the same HF greedy tokens."""
    key, model = _checkpoint_key(checkpoint), None
    for prompt in prompts:
        entry = ("generate", key, tuple(prompt), new_tokens)
        if entry not in _SESSION_REFERENCES:
            model = hf_model(Path(checkpoint)) if model is None else model
            _SESSION_REFERENCES[entry] = hf_generate(model, list(prompt), new_tokens)
    return [list(_SESSION_REFERENCES["generate", key, tuple(prompt), new_tokens]) for prompt in prompts]


def hf_batch_generates_of(checkpoint: Path, prompts: Sequence[Sequence[int]], new_tokens: int) -> list[list[int]]:
    """`hf_generates_of` for prompts of one length, in one batched HF generate (no padding, so each
    row is the single-prompt result; one call's fixed cost instead of one per prompt)."""
    import torch

    key = _checkpoint_key(checkpoint)
    missing = [p for p in prompts if ("generate", key, tuple(p), new_tokens) not in _SESSION_REFERENCES]
    if missing and json.loads((Path(checkpoint) / "config.json").read_text()).get("model_type") in ROW_BY_ROW:
        return hf_generates_of(checkpoint, prompts, new_tokens)
    if missing:
        assert len({len(p) for p in missing}) == 1, "a batch without padding needs prompts of one length"
        model = hf_model(Path(checkpoint))
        with torch.no_grad():
            out = model.generate(
                torch.tensor([list(p) for p in missing]),
                attention_mask=torch.ones(len(missing), len(missing[0]), dtype=torch.long),
                max_new_tokens=new_tokens,
                min_new_tokens=new_tokens,
                do_sample=False,
                pad_token_id=model.generation_config.pad_token_id,
            )
        for prompt, row in zip(missing, out, strict=True):
            _SESSION_REFERENCES["generate", key, tuple(prompt), new_tokens] = row[len(prompt) :].tolist()
    return [list(_SESSION_REFERENCES["generate", key, tuple(p), new_tokens]) for p in prompts]


def hf_prompt_then_greedy_of(checkpoint: Path, prompt: Sequence[int], new: int) -> tuple[np.ndarray, list[int]]:
    """`hf_prompt_then_greedy` of the checkpoint's own class without extra prompt inputs, computed
    once per session per (checkpoint, prompt, new)."""
    key = ("prompt_then_greedy", _checkpoint_key(checkpoint), tuple(prompt), new)
    if key not in _SESSION_REFERENCES:
        _SESSION_REFERENCES[key] = hf_prompt_then_greedy(hf_model(Path(checkpoint)), list(prompt), new)
    logits, tokens = _SESSION_REFERENCES[key]
    return logits.copy(), list(tokens)


def hf_prompt_then_greedy(model, prompt: list[int], new: int, **prompt_inputs) -> tuple[np.ndarray, list[int]]:
    """HF prompt logits with extra prompt-only inputs (a 4D mask, token_type_ids, ...), then greedy
    decoding through HF's cache with the plain causal mask, EOS suppressed as genai's min_length does.
    Returns (prompt logits [S, V], new tokens)."""
    import torch

    with torch.no_grad():
        out = model(torch.tensor([prompt]), use_cache=True, **prompt_inputs)
        logits, past, tokens = [out.logits[0].float().numpy()], _cache_of(model, out), []
        eos = model.generation_config.eos_token_id
        for _ in range(new):
            scores = logits[-1][-1].copy()
            scores[eos] = -np.inf
            tokens.append(int(scores.argmax()))
            step, past = _decode_step(model, past, prompt + tokens)
            logits.append(step)
    return logits[0], tokens


def _cache_of(model, out) -> Any:
    """The cache a forward returned, None for a class without one (UNCACHED)."""
    if getattr(model.config, "model_type", None) in UNCACHED:
        return None
    return out.cache if cache_keyword(model) == "cache" else out.past_key_values


def _decode_step(model, past: Any, sequence: list[int]) -> tuple[np.ndarray, Any]:
    """The logits [1, V] of the sequence's last token and the cache after it: that token through HF's
    cache, or the whole sequence in one forward for a class without a cache (UNCACHED, past None)."""
    import torch

    if past is None:
        return model(torch.tensor([sequence])).logits[0, -1:].float().numpy(), None
    out = model(torch.tensor([sequence[-1:]]), **{cache_keyword(model): past}, use_cache=True)
    return out.logits[0].float().numpy(), _cache_of(model, out)


def hf_prompt_then_steps(model, prompt: list[int], tokens: list[int], **prompt_inputs) -> np.ndarray:
    """HF logits of the prompt (with extra prompt-only inputs: pixels, token types, audio features)
    and of each of `tokens` fed after it through HF's cache: [len(prompt) + len(tokens), V]."""
    import torch

    with torch.no_grad():
        out = model(torch.tensor([prompt]), use_cache=True, **prompt_inputs)
        logits, past = [out.logits[0].float().numpy()], _cache_of(model, out)
        for i in range(len(tokens)):
            step, past = _decode_step(model, past, prompt + tokens[: i + 1])
            logits.append(step)
    return np.concatenate(logits)


def _greedy(generator: Any) -> list[int]:
    tokens = []
    while not generator.is_done():
        generator.generate_next_token()
        tokens.append(int(generator.get_next_tokens()[0]))
    return tokens


def _generator(model: Any, length: int) -> Any:  # -> og.Generator, EOS suppressed up to `length`
    import onnxruntime_genai as og

    params = og.GeneratorParams(model)
    params.set_search_options(do_sample=False, max_length=length, min_length=length)
    return og.Generator(model, params)


def genai_whole_prompt_greedy(model: Any, prompt: list[int], new: int) -> list[int]:
    """`new` greedy tokens (EOS suppressed) of a loaded og.Model with the prompt appended whole, as
    an application calls onnxruntime-genai (`gqa-export run` feeds a trailing pad tail apart)."""
    generator = _generator(model, len(prompt) + new)
    generator.append_tokens(prompt)
    return _greedy(generator)


def genai_prompt_then_greedy(package: Path, prompt: list[int], new: int) -> tuple[np.ndarray, list[int]]:
    """onnxruntime-genai: the prompt's logits, then `new` greedy tokens (EOS suppressed)."""
    from gqa_export.runtime.run import load

    generator = _generator(load(package, "cpu"), len(prompt) + new)
    generator.append_tokens(prompt)
    prompt_logits = np.asarray(generator.get_output("logits"))[0]
    return prompt_logits, _greedy(generator)


def genai_media_inputs(
    model: Any, prompt: str, names: Sequence[str], images: Sequence[Path] = (), audios: Sequence[Path] = ()
) -> tuple[Any, dict[str, np.ndarray]]:
    """onnxruntime-genai's MultiModalProcessor on (prompt, image files, audio clips): its named
    inputs, and input_ids plus `names` as arrays. `model`: an og.Model or a package folder."""
    import onnxruntime_genai as og

    if isinstance(model, (str, Path)):
        model = og.Model(str(model))
    payload = {"images": og.Images.open(*map(str, images)) if images else None,
               "audios": og.Audios.open(*map(str, audios)) if audios else None}  # fmt: skip
    inputs = model.create_multimodal_processor()(prompt, **payload)
    return inputs, {name: inputs[name].as_numpy() for name in ("input_ids", *names)}


def genai_media_greedy(
    model: Any, prompt: str, new: int, names: Sequence[str], images: Sequence[Path] = (), audios: Sequence[Path] = ()
) -> tuple[dict[str, np.ndarray], list[int]]:
    """genai_media_inputs, then `new` greedy tokens through onnxruntime-genai (EOS suppressed)."""
    import onnxruntime_genai as og

    if isinstance(model, (str, Path)):
        model = og.Model(str(model))
    inputs, arrays = genai_media_inputs(model, prompt, names, images, audios)
    generator = _generator(model, arrays["input_ids"].shape[1] + new)
    generator.set_inputs(inputs)
    return arrays, _greedy(generator)


def ort_embedded_greedy(
    package: Path, prompt: list[int], rows: dict[str, np.ndarray], steps: int, max_length: int = 256
) -> tuple[np.ndarray, list[int]]:
    """embedding.onnx then model.onnx as onnxruntime-genai steps a full multimodal package: the
    prompt with its feature rows (embedding input name -> rows; the other feature inputs get 0 rows),
    then `steps` greedy tokens with 0 rows everywhere. Returns (logits [S + steps, V], tokens)."""
    import onnxruntime as ort

    embedding, decoder = ort.InferenceSession(str(package / "embedding.onnx")), OrtStepper(package, max_length)
    hidden = json.loads((package / "genai_config.json").read_text())["model"]["decoder"]["hidden_size"]
    none = np.zeros((0, hidden), np.float32)
    names = [value.name for value in embedding.get_inputs() if value.name != "input_ids"]

    def step(ids: list[int], given: dict[str, np.ndarray]) -> np.ndarray:
        feed = {"input_ids": np.array([ids], np.int64), **{name: given.get(name, none) for name in names}}
        return decoder.step(ids, {"inputs_embeds": embedding.run(None, feed)[0]})

    logits, tokens = [step(prompt, rows)], []
    for _ in range(steps):
        tokens.append(int(logits[-1][-1].argmax()))
        logits.append(step([tokens[-1]], {}))
    return np.concatenate(logits), tokens


class OrtStepper:
    """Prefill then one-token decode steps over a shared max_length KV buffer."""

    def __init__(
        self, package: Path, max_length: int = 128, provider: str = "CPUExecutionProvider", batch: int = 1
    ) -> None:
        import onnxruntime as ort

        self.session = ort.InferenceSession(str(package / "model.onnx"), providers=[provider])
        self.input_names = {value.name for value in self.session.get_inputs()}
        # one buffer per cache input, shaped from its concrete dims (per-layer shapes, KV-shared layers
        # without inputs), as onnxruntime-genai allocates them
        self.kv = {}
        for value in self.session.get_inputs():
            if value.name.startswith("past_key_values."):
                dtype = np.float16 if "float16" in value.type else np.float32
                shape = (batch, value.shape[1], max_length, value.shape[3])
                self.kv[value.name] = ort.OrtValue.ortvalue_from_numpy(np.zeros(shape, dtype))
        # recurrent state (short-convolution layers' past.N.conv): zeros of the input's static
        # shape, replaced by the present after every step, as onnxruntime-genai swaps them
        self.state = {
            value.name: np.zeros((batch, *value.shape[1:]), np.float16 if "float16" in value.type else np.float32)
            for value in self.session.get_inputs()
            if value.name.startswith("past.")
        }
        self.length = 0

    def step(self, tokens: list[int], extra: dict[str, np.ndarray] | None = None) -> np.ndarray:
        """Feed `tokens` (batch 1); returns their logits [len(tokens), vocab] as float32."""
        self.length += len(tokens)
        return self.run(np.array([tokens], np.int64), np.ones((1, self.length), np.int64), extra)[0]

    def run(self, ids: np.ndarray, mask: np.ndarray, extra: dict[str, np.ndarray] | None = None) -> np.ndarray:
        """One run of ids [B, S] with the whole attention_mask [B, T] (a padded batch: zeros at
        the padding); returns the logits [B, S, vocab] as float32. `extra`: more inputs by name
        (a multimodal decoder's inputs_embeds)."""
        io = self.session.io_binding()
        io.bind_output("logits")
        if "input_ids" in self.input_names:  # a multimodal decoder may take inputs_embeds alone
            io.bind_cpu_input("input_ids", ids.astype(np.int64))
        io.bind_cpu_input("attention_mask", mask.astype(np.int64))
        for name, value in (extra or {}).items():
            io.bind_cpu_input(name, value)
        for name, buf in self.kv.items():
            io.bind_ortvalue_input(name, buf)
            io.bind_ortvalue_output(name.replace("past_key_values.", "present."), buf)
        for name, state in self.state.items():
            io.bind_cpu_input(name, state)
            io.bind_output(name.replace("past.", "present.", 1))
        self.session.run_with_iobinding(io)
        outputs = io.copy_outputs_to_cpu()
        for name, present in zip(self.state, outputs[len(outputs) - len(self.state) :], strict=True):
            self.state[name] = present
        return outputs[0].astype(np.float32)


def ort_padded_batch(
    package: Path, prompts: list[list[int]], decode: list[list[int]], pad: int, left: bool = False
) -> list[np.ndarray]:
    """A batch of prompts of different lengths through ORT as onnxruntime-genai feeds it: padded
    with `pad` (on the right, zeros in attention_mask there; `left` pads before the tokens), then
    one token of each row of `decode` per step, the mask growing by a column of ones. Returns each
    row's logits [len(prompt) + len(decode), vocab]: its real prompt positions, then the steps."""
    width = max(map(len, prompts))
    rows = [([pad] * (width - len(p)) + p) if left else (p + [pad] * (width - len(p))) for p in prompts]
    real = [slice(width - len(p), width) if left else slice(0, len(p)) for p in prompts]
    mask = np.zeros((len(prompts), width), np.int64)
    for r, columns in enumerate(real):
        mask[r, columns] = 1
    stepper = OrtStepper(package, batch=len(prompts))
    runs = [stepper.run(np.array(rows), mask)]
    for k in range(len(decode[0])):
        mask = np.concatenate([mask, np.ones((len(prompts), 1), np.int64)], axis=1)
        runs.append(stepper.run(np.array([[d[k]] for d in decode]), mask))
    return [np.concatenate([runs[0][r, real[r]], *(run[r] for run in runs[1:])]) for r in range(len(prompts))]


def ragged_logits_error(package: Path, model, left: bool = False, cached: bool = True) -> float:
    """Max |ORT - HF| over a ragged batch (families.RAGGED, padded with families.ORT_PAD as
    `ort_padded_batch` pads it) at each row's real prompt positions and its decode steps, HF on the
    row alone: its prompt in one forward, then its decode tokens one at a time through HF's cache, as
    generation runs them (Nemotron-H's dt floor applies to prompts only, so an uncached forward over
    prompt + decode tokens is not what HF generates from); `cached` False: one uncached forward over
    both (an LFM2 without attention layers cannot use HF's cache, docs/hybrid-state.md §4). The number
    the registry's ragged check bounds by 1e-4 and the padding mutants push past 1e-2."""
    import torch
    from families import ORT_PAD, RAGGED, RAGGED_DECODE

    prompts, decode = [list(p) for p in RAGGED], [list(d) for d in RAGGED_DECODE]
    got = ort_padded_batch(package, prompts, decode, ORT_PAD, left=left)
    if cached:
        want = [hf_logits(model, p + d, len(p)) for p, d in zip(prompts, decode, strict=True)]
    else:
        with torch.no_grad():
            want = [
                model(torch.tensor([p + d]), use_cache=False).logits[0].numpy()
                for p, d in zip(prompts, decode, strict=True)
            ]
    return max(float(np.abs(g - w).max()) for g, w in zip(got, want, strict=True))


def genai_padded_batch_greedy(package: Path, prompts: list[list[int]], pad: int, new: int) -> list[list[int]]:
    """onnxruntime-genai's greedy `new` tokens per row of a batch of prompts of different lengths,
    right-padded with `pad` (the config's pad_token_id) as its batched append_tokens expects."""
    import onnxruntime_genai as og

    from gqa_export.runtime.run import load

    model = load(package, "cpu")
    width = max(map(len, prompts))
    params = og.GeneratorParams(model)
    params.set_search_options(do_sample=False, batch_size=len(prompts), max_length=width + new, min_length=width + new)
    generator = og.Generator(model, params)
    generator.append_tokens(np.array([p + [pad] * (width - len(p)) for p in prompts], dtype=np.int32))
    while not generator.is_done():
        generator.generate_next_token()
    return [[int(t) for t in generator.get_sequence(r)][width:] for r in range(len(prompts))]


def parity_error(package: Path, checkpoint: Path, prompt: Sequence[int] | None = None) -> float:
    """Max |ORT - HF| over a prompt's logits (the registry's 14 tokens by default) and 6 greedy
    decode steps: the number every family's parity and mutant checks compare with their bound."""
    from families import PROMPT

    prompt = list(PROMPT if prompt is None else prompt)
    tokens, got = ort_prefill_and_decode(package, prompt, steps=6)
    return float(np.abs(got - hf_logits(hf_model(checkpoint), tokens, len(prompt))).max())


def hf_prompt_logits_of(checkpoint: Path, prompt: Sequence[int]) -> np.ndarray:
    """HF's logits over `prompt` in one forward of the checkpoint's own class, computed once per session per
    (checkpoint, prompt): the reference every mutant of one checkpoint is held against."""
    key = ("prompt_logits", _checkpoint_key(checkpoint), tuple(prompt))
    if key not in _SESSION_REFERENCES:
        _SESSION_REFERENCES[key] = hf_logits(hf_model(Path(checkpoint)), list(prompt), len(prompt))
    return _SESSION_REFERENCES[key]


def prompt_error(package: Path, checkpoint: Path, prompt: Sequence[int]) -> float:
    """Max |ORT - HF| over a prompt's logits alone (one onnxruntime step, no decode)."""
    return float(np.abs(OrtStepper(package).step(list(prompt)) - hf_prompt_logits_of(checkpoint, prompt)).max())


def ort_prefill_and_decode(package: Path, prompt: list[int], steps: int) -> tuple[list[int], np.ndarray]:
    """Greedy: prompt logits then `steps` decode logits. Returns (all tokens, logits per position)."""
    stepper = OrtStepper(package)
    tokens = list(prompt)
    logits = [stepper.step(tokens)]
    for _ in range(steps):
        tokens.append(int(logits[-1][-1].argmax()))
        logits.append(stepper.step([tokens[-1]]))
    return tokens, np.concatenate(logits, axis=0)


def ort_static_windows(package: Path, prompt: list[int], steps: int, options=None) -> tuple[list[int], np.ndarray]:
    """The runtime's window loop (docs/eps.md §7.1) over the two graphs in onnxruntime: the prompt
    padded at its end to whole windows, past_sequence_length = last slot of each window, then the
    prompt length and +1 per generated token; one fixed buffer per cache. Returns (tokens, logits of
    every real position)."""
    import onnx
    import onnxruntime as ort

    config = json.loads((package / "genai_config.json").read_text())
    window = config["model"]["decoder"]["sliding_window"]["window_size"]
    pad, n = config["model"]["pad_token_id"], len(prompt)
    sessions = {name: ort.InferenceSession(str(package / f"{name}.onnx"), options) for name in ("prefill", "decode")}
    caches = {
        i.name: np.zeros([d.dim_value for d in i.type.tensor_type.shape.dim], onnx.helper.tensor_dtype_to_np_dtype(
            i.type.tensor_type.elem_type))
        for i in onnx.load(str(package / "decode.onnx"), load_external_data=False).graph.input
        if i.name.startswith("past_key_values.")
    }  # fmt: skip
    total = np.array([config["search"]["max_length"]], np.int32)

    def run(name: str, ids: list[int], last: int) -> np.ndarray:
        feeds = {"input_ids": np.array([ids], np.int32), "past_sequence_length": np.array([[last]], np.int32)}
        out = sessions[name].run(None, {**feeds, "total_sequence_length": total, **caches})
        names = [o.name for o in sessions[name].get_outputs()]
        for key, value in zip(names, out, strict=True):
            if key.startswith("present."):
                caches[key.replace("present.", "past_key_values.")] = value
        return out[0][0]

    padded = prompt + [pad] * (-n % window)
    logits = [run("prefill", padded[s : s + window], s + window - 1) for s in range(0, len(padded), window)]
    rows = [np.concatenate(logits)[:n]]
    tokens = list(prompt)
    for step in range(steps):
        tokens.append(int(rows[-1][-1].argmax()))
        rows.append(run("decode", [tokens[-1]], n + step))
    return tokens, np.concatenate(rows).astype(np.float32)
