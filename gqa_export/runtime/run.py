"""Generation through onnxruntime-genai: the build's smoke run and `gqa-export run`.

Provider choice goes through `og.Config`: `clear_providers()` leaves CPU, `append_provider("cuda")`
adds CUDA, overriding what genai_config.json says (a CUDA package can thus be run on CPU where
its dtype has CPU kernels).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gqa_export.eps import CPU, EPS
from gqa_export.errors import InputError, SmokeRunError, interruption
from gqa_export.jsonio import read_json
from gqa_export.runtime.acceptance import acceptance
from gqa_export.runtime.providers import explain_load_failure

SMOKE_PROMPT = "Hello"
SMOKE_NEW_TOKENS = 16


@dataclass(frozen=True)
class GenerationResult:
    ep: str
    prompt_tokens: int
    tokens: list[int]
    text: str
    prefill_ms: float
    decode_tokens_per_s: float
    note: str | None = None  # what the run changed of what was asked (fewer new tokens, dropped turns)
    speculative: dict[str, Any] | None = None  # acceptance statistics of a draft or n-gram run


class PromptTooLong(InputError):
    """The prompt alone fills the package's KV buffer (search.max_length)."""


def token_budget(package: Path) -> tuple[int, int]:
    """(search.max_length, the model's context length): the KV buffer a package was built with
    bounds prompt + new tokens; `--max-length` at build time can raise it up to the context."""
    model = _json_or_empty(package / "genai_config.json")
    context = int((model.get("model") or {}).get("context_length") or 0)
    return int((model.get("search") or {}).get("max_length") or context), context


def prompt_slots(package: Path, prompt_ids: list[int]) -> int:
    """Sequence slots a prompt takes: a static-shape package's prompt is padded to whole windows,
    the pad ids count against search.max_length, and a pad id inside the prompt would end it
    there for the runtime (docs/eps.md §7.1): refused."""
    model = _json_or_empty(package / "genai_config.json").get("model") or {}
    window = (model.get("decoder") or {}).get("sliding_window") or {}
    size = int(window.get("window_size") or 0) if window.get("slide_inputs", True) else 0
    if size and model.get("pad_token_id") in prompt_ids:
        pad = model["pad_token_id"]
        raise InputError(f"the prompt holds pad_token_id {pad}, where {package}'s windowed inputs would end it")
    return -(-len(prompt_ids) // size) * size if size else len(prompt_ids)


def check_prompt_fits(package: Path, prompt_tokens: int) -> int:
    """The room left for new tokens; PromptTooLong (exit 2, one line) when there is none."""
    limit, context = token_budget(package)
    if limit and prompt_tokens >= limit:
        raise PromptTooLong(
            f"the prompt is {prompt_tokens} tokens but {package} holds at most {limit} (search.max_length, its "
            f"KV buffer); shorten the prompt or rebuild with --max-length up to {context or limit}"
        )
    return limit - prompt_tokens if limit else 1 << 30


def load(package: Path, ep: str, graphs: dict[str, bytes] | None = None):  # -> og.Model
    """The package's model on `ep`; `graphs` replaces graph files by in-memory bytes (external
    data still resolves from the package folder; the caller keeps the bytes alive)."""
    import onnxruntime_genai as og

    config = og.Config(str(package))
    config.clear_providers()
    provider = EPS[ep].genai_provider
    if provider is not None:
        config.append_provider(provider)
    if ep not in (CPU.name, "cuda"):  # the other EPs' options (OpenVINO's device_type) as the table writes them
        for entry in EPS[ep].genai_provider_options():
            for key, value in entry[provider].items():
                config.set_provider_option(provider, key, value)
    for name, data in (graphs or {}).items():
        config.add_model_data(name, data)
    return og.Model(config)


def load_adapters(model: Any, files: list[Path]) -> tuple[Any, list[str]]:  # -> (og.Adapters, names)
    """`.onnx_adapter` files loaded into one og.Adapters container (a generator takes one), each
    under its file's stem; activated together by `_generate` (docs/lora.md §5)."""
    import onnxruntime_genai as og

    adapters, names = og.Adapters(model), []
    for file in files:
        name = file.stem if file.stem not in names else f"{file.stem}.{len(names)}"
        try:
            adapters.load(str(file), name)
        except Exception as exc:  # onnxruntime-genai raises a plain RuntimeError
            raise InputError(f"--adapter {file}: {str(exc).splitlines()[0]}") from None
        names.append(name)
    return adapters, names


def _generate(
    model: Any,
    prompt: list[int] | Any,
    options: dict[str, Any],
    on_token: Callable[[int], None] | None = None,
    adapters: tuple[Any, list[str]] | None = None,
    speculative: dict[str, Any] | None = None,
    pad: int | None = None,
) -> tuple[list[int], float, float, dict[str, Any]]:
    """The one generation loop, for token ids and for a multimodal processor's named inputs (`run
    --image`): (new tokens, prefill ms, decode tokens/s, speculative statistics). `pad`: the
    package's pad id, which a prompt of ids may end with (`prompt_parts`).

    Prefill is the time until the first new token is known (the prompt pass: for ids
    `append_tokens`, for named inputs `set_inputs` + the first `generate_next_token`, which runs
    vision, embedding and decoder); decode tokens/s counts the tokens after the first over the time
    after it, so the two kinds of prompt report alike. `speculative`: run-time options (n-gram
    lookup, docs/speculative.md §5) over the package's own."""
    import onnxruntime_genai as og

    params = og.GeneratorParams(model)
    params.set_search_options(**options)
    try:
        if speculative:
            params.set_speculative_options(**speculative)
        generator = og.Generator(model, params)
    except Exception as exc:  # genai's own sentence: a range, or a package that cannot verify
        if not speculative:
            raise
        raise InputError(f"speculative options {speculative}: {str(exc).strip().splitlines()[0]}") from None
    if adapters is not None:
        for name in adapters[1]:
            generator.set_active_adapter(adapters[0], name)
    tokens: list[int] = []
    start = time.perf_counter()
    if isinstance(prompt, list):
        for part in prompt_parts(prompt, pad):
            generator.append_tokens(part)
    else:
        generator.set_inputs(prompt)
    first = time.perf_counter()
    while not generator.is_done():
        generator.generate_next_token()
        tokens.append(int(generator.get_next_tokens()[0]))
        if len(tokens) == 1:
            first = time.perf_counter()
        if on_token is not None:
            on_token(tokens[-1])
    decode = time.perf_counter() - first
    rate = (len(tokens) - 1) / decode if decode > 0 and len(tokens) > 1 else 0.0
    return tokens, (first - start) * 1e3, rate, acceptance(generator)


def package_pad_id(package: Path) -> int | None:
    """genai_config's model.pad_token_id (None when absent or not an integer)."""
    pad = (_json_or_empty(package / "genai_config.json").get("model") or {}).get("pad_token_id")
    return pad if isinstance(pad, int) else None


def prompt_parts(prompt: list[int], pad: int | None) -> list[list[int]]:
    """The prompt as onnxruntime-genai must be fed it to stay exact: a tail of pad ids one token per
    append. With full logits the runtime takes a prompt's trailing pad ids for padding and samples
    from the last non-pad position's logits; an append of one token has one row, read as it is
    (docs/ortgenai.md §5.4). A package whose pad id no tokenizer emits never needs this."""
    keep = len(prompt)
    while keep > 1 and prompt[keep - 1] == pad:
        keep -= 1
    return [prompt[:keep], *([token] for token in prompt[keep:])]


def prompt_length(prompt: list[int] | Any) -> int:
    """Tokens in a prompt: token ids, or a multimodal processor's named inputs (their input_ids)."""
    return len(prompt) if isinstance(prompt, list) else int(prompt["input_ids"].as_numpy().shape[-1])


def generate_greedy(
    package: Path, prompt_ids: list[int], max_new_tokens: int, ep: str = "cpu", min_new_tokens: int = 0, model=None
) -> GenerationResult:
    """Greedy generation from token ids, timing prefill and decode separately."""
    import onnxruntime_genai as og

    model = model or load(package, ep)
    slots = prompt_slots(package, prompt_ids)
    options = {"do_sample": False, "max_length": slots + max_new_tokens, "min_length": slots + min_new_tokens}
    tokens, prefill_ms, rate, stats = _generate(model, prompt_ids, options, pad=package_pad_id(package))
    text = og.Tokenizer(model).decode(tokens) if tokens else ""
    return GenerationResult(ep, len(prompt_ids), tokens, text, prefill_ms, rate, speculative=stats or None)


def smoke_run(package: Path, ep: str) -> GenerationResult:
    """Load the package and greedily generate a few tokens; any failure is a SmokeRunError."""
    try:
        import onnxruntime_genai as og

        model = load(package, ep)
        prompt_ids = [int(t) for t in og.Tokenizer(model).encode(SMOKE_PROMPT)]
        # a model whose context is shorter than prompt + 16 (max_position_embeddings 16) generates what fits
        room = check_prompt_fits(package, prompt_slots(package, prompt_ids))
        return generate_greedy(package, prompt_ids, min(SMOKE_NEW_TOKENS, room), ep, model=model)
    except SmokeRunError:
        raise
    except Exception as exc:  # onnxruntime-genai raises plain RuntimeError for everything
        if interruption(exc) is not None:  # Ctrl-C in onnxruntime-genai's import: not a failed package
            raise KeyboardInterrupt from exc
        raise SmokeRunError(f"smoke run on {ep} failed: {explain_load_failure(exc, package, ep)}") from exc


@dataclass(frozen=True)
class Sampling:
    """Greedy unless any of temperature / top_p / top_k is given."""

    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    seed: int | None = None

    def search_options(self) -> dict[str, Any]:
        if self.temperature is None and self.top_p is None and self.top_k is None:
            return {"do_sample": False}
        options: dict[str, Any] = {"do_sample": True}
        if self.temperature is not None:
            options["temperature"] = self.temperature
        if self.top_p is not None:
            options["top_p"] = self.top_p
        if self.top_k is not None:
            options["top_k"] = self.top_k
        if self.seed is not None:
            options["random_seed"] = self.seed
        return options


def adds_bos(package: Path) -> bool:
    """Whether HF's tokenizer would put BOS in front of plain text (onnxruntime-genai 0.18's
    encode never does): tokenizer_config add_bos_token, or a TemplateProcessing post-processor
    that starts with a special token (Llama-3 style)."""
    config = _json_or_empty(package / "tokenizer_config.json")
    if "add_bos_token" in config:
        return bool(config["add_bos_token"])
    post = _json_or_empty(package / "tokenizer.json").get("post_processor")
    post = post if isinstance(post, dict) else {}
    steps = post.get("processors", [post]) if post.get("type") == "Sequence" else [post]
    for step in steps if isinstance(steps, list) else []:  # a hand-edited file may hold anything
        single = step.get("single") if isinstance(step, dict) else None
        if step.get("type") == "TemplateProcessing" and isinstance(single, list) and single:
            return isinstance(single[0], (dict, str)) and "SpecialToken" in single[0]
    return False


def _json_or_empty(path: Path) -> dict[str, Any]:
    return read_json(path) or {}


def chat_prompt(tokenizer: Any, messages: list[dict[str, str]]) -> str:
    """The tokenizer's chat template (from tokenizer_config.json) applied to the messages."""
    return tokenizer.apply_chat_template(json.dumps(messages), add_generation_prompt=True)


def prompt_tokens(package: Path, model: Any, text: str, messages: list[dict[str, str]] | None) -> list[int]:
    import onnxruntime_genai as og

    tokenizer = og.Tokenizer(model)
    if messages is not None:
        return [int(t) for t in tokenizer.encode(chat_prompt(tokenizer, messages))]
    ids = [int(t) for t in tokenizer.encode(text)]
    bos = _json_or_empty(package / "genai_config.json").get("model", {}).get("bos_token_id")
    if bos is not None and adds_bos(package) and (not ids or ids[0] != bos):
        ids = [int(bos), *ids]
    return ids


def stream(
    package: Path,
    model: Any,
    prompt: list[int] | Any,
    max_new_tokens: int,
    sampling: Sampling,
    on_text: Callable[[str], None],
    ep: str = "cpu",
    adapters: tuple[Any, list[str]] | None = None,
    speculative: dict[str, Any] | None = None,
) -> GenerationResult:
    """Generate from token ids or a multimodal processor's named inputs, calling `on_text` with
    each decoded piece as it comes."""
    import onnxruntime_genai as og

    length = prompt_length(prompt)
    slots = prompt_slots(package, prompt) if isinstance(prompt, list) else length
    room = check_prompt_fits(package, slots)
    note = None
    if max_new_tokens > room:
        note = f"{room} new tokens at most: the prompt's {length} and the new ones share max_length"
        max_new_tokens = room
    max_length = slots + max_new_tokens
    tokenizer_stream = og.Tokenizer(model).create_stream()
    pieces: list[str] = []

    def on_token(token: int) -> None:
        piece = tokenizer_stream.decode(token)
        if piece:
            pieces.append(piece)
            on_text(piece)

    options = {"max_length": max_length, **sampling.search_options()}
    pad = package_pad_id(package)
    tokens, prefill_ms, rate, stats = _generate(model, prompt, options, on_token, adapters, speculative, pad)
    return GenerationResult(ep, length, tokens, "".join(pieces), prefill_ms, rate, note, stats or None)
