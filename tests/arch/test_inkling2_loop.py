"""Inkling2-Loop (`inkling2_loop_text`, transformers 5.25), what only it has beyond Inkling2
(tests/arch/test_inkling2.py; the checks every family gets are its row in tests/families.py): short prompts through
the looped layers' convolution states, and a planted bug per mechanism that must break HF parity (docs/coverage.md,
its Inkling2-Loop section): the loop's passes (each from the loop's input), the messages (learned queries over the
previous pass's block states past its first) and their gates.

Tiny config (tests/derived_moe_models.py inkling2_loop_text): Inkling2's tiny layers, eight (sliding / full
alternating), blocks of 2 layers, layers 2 to 5 (two blocks) run 3 times, gates of rank 5."""

from __future__ import annotations

import numpy as np
import pytest
from families import LONG_PROMPT
from mutants import build_planted, copy_package, edit_initializers, times
from reference import hf_logits, hf_model, ort_prefill_and_decode
from typer.testing import CliRunner

from gqa_export.cli import app
from gqa_export.graph import block_residuals, loop_messages

LOOP = "inkling2_loop_text"
runner = CliRunner()


def _error(package, checkpoint, prompt=LONG_PROMPT, steps: int = 4) -> float:
    tokens, got = ort_prefill_and_decode(package, list(prompt), steps=steps)
    return float(np.abs(got - hf_logits(hf_model(checkpoint), tokens, len(prompt))).max())


def test_the_correct_package_matches_hf(builds):
    assert _error(builds.package(LOOP), builds.checkpoint(LOOP)) < 1e-3


@pytest.mark.parametrize("prompt", [(0,), (0, 17)], ids=["one_token", "two_tokens"])
def test_prompts_shorter_than_the_conv_state_match_hf(builds, prompt):
    assert _error(builds.package(LOOP), builds.checkpoint(LOOP), prompt, steps=6) < 1e-3


@pytest.mark.parametrize("mode", ["bias", "split"])
def test_standard_attention_modes_are_refused_in_one_line(builds, tmp_path, mode):
    args = ["build", str(builds.checkpoint(LOOP)), "-o", str(tmp_path / "p"), "--attention", mode]
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert errors == [
        "error: inkling2_loop's residual short-convolution layers keep their state in the GQA graph only: "
        "use --attention gqa"
    ]


# mutant -> (initializer pattern, planted bug) on a copy of the registry package
INITIALIZER_MUTANTS = {
    "message-queries-zeroed": ("model.message_input.query", times(0.0)),
    "messages-not-passed": ("*.message_gate_proj.weight", times(0.0)),
    "forget-gates-dropped": ("*.forget_gate_proj.weight", times(0.0)),
    "gate-down-projections-scaled": ("*_message_gate.down_proj.weight", times(0.5)),
}


@pytest.mark.parametrize("mutant", INITIALIZER_MUTANTS)
def test_initializer_mutant_fails_hf_parity(builds, tmp_path, mutant):
    pattern, change = INITIALIZER_MUTANTS[mutant]
    broken = copy_package(builds.package(LOOP), tmp_path / mutant)
    assert edit_initializers(broken, pattern, change), pattern
    assert _error(broken, builds.checkpoint(LOOP)) > 1e-2


class _Continuing(loop_messages.LoopMessages):
    """Each later pass continues from the previous pass's output instead of the loop's input."""

    def enter(self, i, h, blocks):
        out, messages = super().enter(i, h, blocks)
        return (h if self.loop.pass_start(i) not in (None, 0) else out), messages


class _FirstBlockKept(loop_messages.LoopMessages):
    """The messages also attend over the loop's input, the block the previous pass appended at its first layer."""

    @staticmethod
    def previous(blocks, before):
        return blocks[before:]


class _Swapped(loop_messages.LoopMessages):
    """The query and key messages exchanged."""

    def enter(self, i, h, blocks):
        out, messages = super().enter(i, h, blocks)
        return out, (None if messages is None else [messages[1], messages[0], *messages[2:]])


def _doubled_message(original):
    """The message doubled on its way into every gate (a scale bug in the gates' message path)."""

    def wrapped(lc, names, x, message, which):
        doubled = lc.b.op("Mul", message, lc.b.const(np.asarray(2.0, np.float32), "two"), name="message_doubled")
        return original(lc, names, x, doubled, which)

    return wrapped


# mutant -> (module, attribute, planted bug): the graph built with the attribute replaced
GRAPH_MUTANTS = {
    "passes-continue-from-previous-output": (loop_messages, "LoopMessages", lambda _c: _Continuing),
    "loop-input-block-kept": (loop_messages, "LoopMessages", lambda _c: _FirstBlockKept),
    "query-and-key-messages-swapped": (loop_messages, "LoopMessages", lambda _c: _Swapped),
    "messages-doubled": (block_residuals, "message_gate", _doubled_message),
}


@pytest.mark.parametrize("mutant", GRAPH_MUTANTS)
def test_graph_mutant_fails_hf_parity(builds, tmp_path, monkeypatch, mutant):
    module, name, plant = GRAPH_MUTANTS[mutant]
    broken = build_planted(
        builds.checkpoint(LOOP),
        tmp_path / mutant,
        monkeypatch,
        lambda m: m.setattr(module, name, plant(getattr(module, name))),
    )
    assert _error(broken, builds.checkpoint(LOOP)) > 1e-2
