"""GLM-5-Next's text decoder (gqa_export/arch/hybrid_families.GLM5_NEXT_TEXT, docs/coverage.md "glm5_next"), what
only it has (the checks every family gets are its row `glm5_next_text_only` in tests/families.py): a mutant of
each mechanism it combines from other specs, planted into the spec or the graph builder the registry's package is
built from, must move the prompt logits far past the registry's bound (1e-4) against HF's on the same checkpoint;
the index_topk cap; a flat (text fields at the top level) config; a config without the KDA's lower bound refused in
one line."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from typing import Any

import pytest
from families import BY_NAME, require_registered
from mutants import build_planted
from reference import prompt_error
from typer.testing import CliRunner

from gqa_export.arch import SPECS
from gqa_export.cli import app
from gqa_export.graph import decoder, mlp

ROW = "glm5_next_text_only"
SPEC = "glm5_next_text"
BOUND = 1e-2  # every mutant must be off by more; measured in docs/coverage.md


@pytest.fixture(autouse=True)
def _registered() -> None:
    require_registered(ROW)


def _prompt_error(builds: Any, package: Any) -> float:
    """vs HF's logits on the row's prompt (placeholder ids 300 / 301 in it), one forward shared by every mutant."""
    return prompt_error(package, builds.checkpoint(ROW), BY_NAME[ROW].prompt)


def _head_first_copy(monkeypatch: pytest.MonkeyPatch) -> None:
    """The copies collapsed as copy 0 alone instead of their mean."""

    def first_copy(b: Any, streams: Any, dims: Any, spec: Any, params: Any) -> Any:
        first = b.op("Gather", streams, b.const(0, "first_copy", "int64"), axis=2)
        return first if params.dtype == first.dtype else b.op("Cast", first, to=params.dtype)

    monkeypatch.setattr(decoder, "collapse_streams", first_copy)


def _dense_unclipped(monkeypatch: pytest.MonkeyPatch) -> None:
    """The dense MLP's plain SwiGLU (its experts still clipped)."""
    from gqa_export.graph.activations import activation

    monkeypatch.setattr(mlp, "gated", lambda lc, gate, up: lc.b.op("Mul", activation(lc, gate), up))


_S = SPECS[SPEC]
assert _S.mixers is not None and _S.moe is not None and _S.latent_attention is not None
# mutant -> a spec change (fields of ArchSpec) or a graph-builder patch
MUTANTS: dict[str, Any] = {
    "kda-gate-unbounded": dict(mixers=replace(_S.mixers, bounded_decay=False)),  # Kimi's softplus decay
    "latent-norms-at-1e-6": dict(latent_attention=replace(_S.latent_attention, config_norm_eps=False)),
    "head-first-copy": _head_first_copy,
    "dense-mlp-unclipped": _dense_unclipped,
    "routed-experts-unclipped": dict(moe=replace(_S.moe, activation="swiglu")),
}


def test_the_correct_package_passes(builds):
    assert _prompt_error(builds, builds.package(ROW)) < 1e-4  # measured 6e-7


@pytest.mark.parametrize("mutant", MUTANTS)
def test_mutant_fails_hf_parity(builds, tmp_path, monkeypatch, mutant):
    out = build_planted(builds.checkpoint(ROW), tmp_path / mutant, monkeypatch, MUTANTS[mutant], SPEC)
    error = _prompt_error(builds, out)
    print(f"{mutant}: {error:.3g}")
    assert error > BOUND, (mutant, error)


def test_layer_kinds_swapped_builds_no_package(builds, tmp_path, monkeypatch):
    """Mutant: the KDA mixer on the indexed_attention layers and attention on the linear_attention ones: the weights
    refuse it before any graph (layer 0's q_proj is the KDA's [32, 64], not the latent query's)."""
    from types import MappingProxyType

    from gqa_export.errors import InputError

    swapped = dict(mixers=replace(_S.mixers, kinds=MappingProxyType({"full_attention": "gated_deltanet"})))
    with pytest.raises(InputError, match="q_proj"):
        build_planted(builds.checkpoint(ROW), tmp_path / "swapped", monkeypatch, swapped, SPEC)


def _refused(args: list[str], word: str) -> None:
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if word in line]
    assert len(lines) == 1 and "Traceback" not in result.output, result.output


def test_context_capped_at_index_topk(builds, tmp_path):
    """Within index_topk keys the pooled DSA indexer keeps every visible one: the package's context is 64."""
    assert json.loads((builds.package(ROW) / "genai_config.json").read_text())["search"]["max_length"] == 64
    _refused(["build", str(builds.checkpoint(ROW)), "-o", str(tmp_path / "pkg"), "--no-smoke", "--text-only",
              "--max-length", "65"], "index_topk")  # fmt: skip


def _edited(builds: Any, tmp_path: Any, edit: Any) -> Any:
    folder = tmp_path / "ckpt"
    shutil.copytree(builds.checkpoint(ROW), folder)
    config = json.loads((folder / "config.json").read_text())
    edit(config)
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def test_kda_without_lower_bound_is_refused_in_one_line(builds, tmp_path):
    folder = _edited(builds, tmp_path, lambda c: c["text_config"].update(linear_lower_bound=None))
    _refused(["build", str(folder), "-o", str(tmp_path / "pkg"), "--no-smoke", "--text-only"], "linear_lower_bound")


def _flattened(config: dict[str, Any]) -> None:
    """The text fields at the top level, no text_config (model_type glm5_next): the form the config class reads
    for text-only releases, forwarding them into its text_config."""
    text = config.pop("text_config")
    config.update({k: v for k, v in text.items() if k not in config and k != "model_type"})


def test_flat_text_only_config_matches_hf(builds, tmp_path):
    """The same weights under a flat config: the same package numbers (measured 6e-7)."""
    from gqa_export.pipeline import BuildOptions, build

    folder = _edited(builds, tmp_path, _flattened)
    build(BuildOptions(str(folder), tmp_path / "pkg", smoke=False, text_only=True))
    assert _prompt_error(builds, tmp_path / "pkg") < 1e-4
