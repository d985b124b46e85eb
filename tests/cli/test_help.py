"""`--help` tells the truth: every choice an option shows is generated from the table the code
validates against, every command has a MODEL-style usage line and examples, options sit in panels."""

from __future__ import annotations

import re
from typing import Any

import pytest
import typer

from gqa_export import choices, eps
from gqa_export.cli import app
from gqa_export.errors import InputError
from gqa_export.quant.quantize import plan_precision
from gqa_export.recipes import ATTENTION_MODES, EPS, PRECISIONS, SCHEMA

# (command, option) -> the table whose keys are its only accepted values
CHOICE_TABLES = {
    ("build", "--ep"): choices.EPS,
    ("build", "--precision"): choices.PRECISIONS,
    ("build", "--attention"): choices.ATTENTION_MODES,
    ("build", "--quant-method"): choices.QUANT_METHODS,
    ("build", "--activations"): choices.ALL_ACTIVATIONS,
    ("quantize", "--quant-method"): choices.QUANT_METHODS,
    ("quantize", "--precision"): ("int4", "int8"),
    ("run", "--ep"): choices.EPS,
    ("eval", "--ep"): choices.EPS,
    ("build", "--encoder-precision"): choices.ENCODER_PRECISIONS,  # #34 item 12: shown as <float|int8>
}


# typer may vendor its own click: parameters are told apart by click's `param_type_name`.
def _command(name: str) -> Any:
    return typer.main.get_command(app).commands[name]  # type: ignore[attr-defined]


def _options(command: str) -> list[Any]:
    return [p for p in _command(command).params if p.param_type_name == "option"]


def _option(command: str, flag: str) -> Any:
    return next(p for p in _options(command) if flag in p.opts)


def _choices(option: Any) -> list[str]:
    """The values an option accepts (click's Choice, or newer typers' type descriptor)."""
    holder = getattr(option, "type", None) or option.type_descriptor
    return [getattr(choice, "value", choice) for choice in holder.choices]


@pytest.mark.parametrize(("command", "flag"), list(CHOICE_TABLES))
def test_choices_are_the_validators_tables(command, flag):
    option = _option(command, flag)
    assert _choices(option) == list(CHOICE_TABLES[command, flag])


def test_tables_agree_with_the_validators():
    """Every (EP, precision) pair the tables offer is accepted and every other is refused with the
    table's reason; anything else escaping the validator (a crash) fails the test."""
    assert set(SCHEMA["precision"]) == set(EPS) == set(choices.EPS) == set(eps.EPS)
    assert set(ATTENTION_MODES) == set(choices.ATTENTION_MODES) and set(PRECISIONS) == set(choices.PRECISIONS)
    for ep in choices.EPS:
        for precision in choices.PRECISIONS:
            if precision in choices.SUPPORTED[ep]:
                assert plan_precision(ep, precision).name == precision
            else:
                with pytest.raises(InputError, match=re.escape(eps.EPS[ep].refused[precision])):
                    plan_precision(ep, precision)


def test_help_text_lists_what_each_ep_supports():
    text = _option("build", "--precision").help or ""
    for ep, precisions in choices.SUPPORTED.items():
        assert f"{ep}: {' '.join(precisions)}" in text
    method_help = _option("build", "--quant-method").help or ""
    assert all(f"{name}: {what}" in method_help for name, what in choices.QUANT_METHODS.items())


@pytest.mark.parametrize("name", ["build", "fetch", "quantize", "inspect", "run", "release", "verify", "eval"])
def test_usage_names_the_argument_and_shows_examples(name):
    command = _command(name)
    usage = " ".join(command.collect_usage_pieces(command.context_class(command, info_name=name)))
    argument = next(p for p in command.params if p.param_type_name == "argument")
    assert argument.metavar and argument.metavar.isupper() and usage.endswith(argument.metavar), usage
    assert "{" not in usage
    assert command.epilog and "gqa-export " in command.epilog


def test_build_options_are_grouped_in_panels():
    panels = {p.rich_help_panel for p in _options("build")}
    assert panels == {"Target", "Attention", "Quantization (int4/int8)", "Inputs and outputs", "Output", "Recipe"}


COMMANDS = ["build", "fetch", "quantize", "inspect", "run", "adapter", "release", "verify", "eval"]


@pytest.mark.parametrize("name", COMMANDS)
def test_a_command_puts_all_its_options_in_panels_or_none(name):
    """#34 item 12: `release --quiet` (and -o) sat in the unnamed "Options" box beside an "Output"
    panel; a command uses panels for every option or for none."""
    panels = {p.rich_help_panel for p in _options(name) if "--help" not in p.opts}
    assert None not in panels or panels == {None}, (name, panels)


def test_quantize_activations_help_is_about_the_input_package():
    """#34 item 12: quantize has no --ep (it keeps the package's), so its --activations help does
    not list the dtypes of all seven EPs as build's does."""
    text = _option("quantize", "--activations").help or ""
    assert "input package's own" in text and "cuda fp16 or bf16" in text
    assert not any(f"{ep}:" in text for ep in choices.EPS), text
    build = _option("build", "--activations").help or ""
    assert all(f"{ep}:" in build for ep in choices.EPS)
