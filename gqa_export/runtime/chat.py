"""A generation session for `gqa-export run`: one-shot prompts and multi-turn chat.

Multi-turn chat re-feeds the whole conversation through the chat template every turn, in a new
generator: onnxruntime-genai 0.18 loses the last sampled token's KV when `append_tokens` follows
`generate_next_token` (docs/split-pipeline.md §4), so continuing one generator would be wrong.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import IO, Any

from rich.console import Console
from rich.markup import escape

from gqa_export.errors import InputError
from gqa_export.package.paths import check_package_path
from gqa_export.runtime.providers import explain_load_failure
from gqa_export.runtime.run import (
    GenerationResult,
    PromptTooLong,
    Sampling,
    check_prompt_fits,
    load,
    load_adapters,
    prompt_slots,
    prompt_tokens,
    stream,
)
from gqa_export.runtime.standalone import check_generates


class Session:
    def __init__(
        self,
        package: Path,
        ep: str,
        max_new_tokens: int,
        sampling: tuple[float | None, float | None, int | None, int | None],
        chat: bool,
        system: str | None,
        adapters: tuple[Path, ...] = (),
        speculative: dict[str, Any] | None = None,
    ) -> None:
        check_package_path(package, files=False)  # a folder with a readable genai_config.json
        check_generates(package)  # not a pipeline stage (--inputs-embeds, --no-lm-head)
        self.package, self.ep, self.max_new_tokens = package, ep, max_new_tokens
        self.sampling = Sampling(*sampling)
        self.chat = chat
        self.speculative = speculative  # run-time speculative options (`run --ngram`)
        self.history: list[dict[str, str]] = [{"role": "system", "content": system}] if system else []
        try:
            self.model = load(package, ep)
        except Exception as exc:  # onnxruntime-genai raises RuntimeError for everything
            raise InputError(explain_load_failure(exc, package, ep)) from None
        self.adapters = None
        if adapters:  # LoRA adapters of a multi-LoRA base, active together (docs/lora.md §5)
            from gqa_export.package.adapters import check_adapters

            check_adapters(list(adapters), package)
            self.adapters = load_adapters(self.model, list(adapters))

    def turn(self, text: str, on_text: Callable[[str], None] | None) -> GenerationResult:
        dropped = 0
        while True:
            messages = [*self.history, {"role": "user", "content": text}] if self.chat else None
            ids = prompt_tokens(self.package, self.model, text, messages)
            try:
                check_prompt_fits(self.package, prompt_slots(self.package, ids))  # window padding counts
                break
            except PromptTooLong:
                if not self._drop_oldest_turn():
                    raise
                dropped += 1
        result = stream(
            self.package,
            self.model,
            ids,
            self.max_new_tokens,
            self.sampling,
            on_text or (lambda _: None),
            self.ep,
            self.adapters,
            self.speculative,
        )
        if dropped:
            note = f"dropped the {dropped} oldest turn(s) of the conversation to fit the package's max_length"
            result = replace(result, note="; ".join(n for n in (note, result.note) if n))
        if self.chat:
            self.history += [{"role": "user", "content": text}, {"role": "assistant", "content": result.text}]
        return result

    def _drop_oldest_turn(self) -> bool:
        """Forget the oldest user/assistant exchange (the system prompt stays); False if none is left."""
        start = 1 if self.history and self.history[0]["role"] == "system" else 0
        if len(self.history) - start < 2:
            return False
        del self.history[start : start + 2]
        return True

    def interactive(self, stdin: IO[str], write: Callable[[str], Any], console: Console) -> None:
        console.print("[dim]chat: an empty line or end of input quits[/]")
        while True:
            console.print("[bold]> [/]", end="")
            line = stdin.readline()
            if not line or not line.strip():
                return
            result = self.turn(line.rstrip("\n"), write)
            write("\n")
            if result.note:  # turns dropped or new tokens capped: said, never silent
                console.print(f"[yellow]note:[/] {escape(result.note)}", highlight=False)
            console.print(f"[dim]{len(result.tokens)} tokens, {result.decode_tokens_per_s:.1f} tok/s[/]")

    @staticmethod
    def result_json(result: GenerationResult) -> dict[str, Any]:
        return {
            "text": result.text,
            "prompt_tokens": result.prompt_tokens,
            "new_tokens": len(result.tokens),
            "prefill_ms": round(result.prefill_ms, 3),
            "decode_tokens_per_s": round(result.decode_tokens_per_s, 2),
            "note": result.note,
            # acceptance statistics of a draft / n-gram run (docs/speculative.md §6); null for a plain run
            "speculative": result.speculative,
        }
