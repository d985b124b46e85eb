"""What the issue #39 mixtures of experts refuse (gqa_export/arch/derived_moe_families.py): one
line naming the config key, exit 2 from the CLI, nothing written."""

from __future__ import annotations

import pytest
from mutants import edited_checkpoint
from typer.testing import CliRunner

from gqa_export.cli import app
from gqa_export.errors import InputError
from gqa_export.pipeline import BuildOptions, build

# (registry row, config edit, what the line names)
REFUSED = {
    "cohere2_moe_selection": ("cohere2_moe", dict(expert_selection_fn="relu"), "expert_selection_fn 'relu'"),
    "cohere2_moe_combination": (
        "cohere2_moe",
        dict(shared_expert_combination_strategy="max"),
        "shared_expert_combination_strategy 'max'",
    ),
    "dbrx_p_norm": (
        "dbrx",
        dict(
            ffn_config={
                "ffn_hidden_size": 32,
                "moe_num_experts": 8,
                "moe_top_k": 2,
                "moe_normalize_expert_weights": 2.0,
            }
        ),
        "2.0-norm",
    ),
    # transformers' cache would window the decode steps (not the prompt) by it
    "minimax_m2_window": ("minimax_m2", dict(sliding_window=4), "sliding_window=4"),
    # (a router logit softcap, Laguna's key, in Mellum's config is not refused: Mellum's class never names it, so
    # HF and the export both ignore it, tests/model/test_class_reads.py)
}


@pytest.mark.parametrize("case", REFUSED)
def test_refused_in_one_line_nothing_written(builds, tmp_path, case):
    row, edit, named = REFUSED[case]
    checkpoint = edited_checkpoint(builds.checkpoint(row), tmp_path / "ckpt", **edit)
    with pytest.raises(InputError, match=named) as raised:
        build(BuildOptions(str(checkpoint), tmp_path / "pkg", smoke=False))
    assert "\n" not in str(raised.value) and not (tmp_path / "pkg").exists()


def test_refusal_exits_2_from_the_cli(builds, tmp_path):
    row, edit, named = REFUSED["cohere2_moe_selection"]
    checkpoint = edited_checkpoint(builds.checkpoint(row), tmp_path / "ckpt", **edit)
    result = CliRunner().invoke(app, ["build", str(checkpoint), "-o", str(tmp_path / "pkg"), "--no-smoke"])
    assert result.exit_code == 2 and named in result.output, result.output
