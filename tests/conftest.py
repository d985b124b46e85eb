"""Shared fixtures: tiny random Llama checkpoints (made once per session) and their exports."""

from __future__ import annotations

import gc
import itertools
import os
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from gemma4_models import save_gemma4
from multimodal_models import save_multimodal
from tiny_models import save_model
from variants import FAMILY_VARIANTS, GEMMA4_VARIANTS, LLAMA_VARIANTS, MULTIMODAL_VARIANTS


def pytest_configure(config: pytest.Config) -> None:
    """transformers' log handler writes to the stderr it finds when the library first logs: create
    it now, on the session's stream, not inside a CliRunner invocation whose stream is closed after
    the command (a later warning would then print "--- Logging error ---" and a traceback)."""
    from transformers.utils import logging as hf_logging

    hf_logging.get_logger("transformers")
    # The CLI's consoles (gqa_export/cli/app.py) lay out as for a pipe, unbounded, unless COLUMNS is set when
    # they are made: an xdist worker's environment (or a shell's) says 80, which folds the one-line errors the
    # tests read. The tests check what is said, not how a terminal lays it out.
    os.environ.pop("COLUMNS", None)


# The session holds millions of long-lived objects (transformers' modeling modules, session fixtures, HF references),
# and a full collection walks them all: `gqa-export eval` collects after each model it scores (the model goes
# before the next loads), which cost seconds a call late in the suite (evaluate's gate test: 34 s, 4 s alone).
# Every FREEZE_EVERY tests what is alive moves to the permanent generation, as the CLI does once its libraries
# are loaded (cli/app.py): collections then walk only what later tests made. Garbage is collected first, so
# only objects alive at a freeze and in a reference cycle when released later stay allocated.
FREEZE_EVERY = 100
_TESTS_DONE = itertools.count(1)


def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    if next(_TESTS_DONE) % FREEZE_EVERY == 0:
        gc.collect()
        gc.freeze()


class Checkpoints:
    """Builds each named checkpoint once per test session."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._made: dict[str, Path] = {}

    def get(self, name: str, **kwargs: Any) -> Path:
        if name not in self._made and name in GEMMA4_VARIANTS:
            form, overrides = GEMMA4_VARIANTS[name]
            self._made[name] = save_gemma4(self.root / name, form, **{**overrides, **kwargs})
        if name not in self._made and name in MULTIMODAL_VARIANTS:
            arch, overrides = MULTIMODAL_VARIANTS[name]
            hub = "_v5" not in name
            self._made[name] = save_multimodal(self.root / name, arch, hub_layout=hub, **{**overrides, **kwargs})
        if name not in self._made:
            model_type, params = FAMILY_VARIANTS.get(name, ("llama", LLAMA_VARIANTS.get(name, {})))
            model_type = kwargs.pop("model_type", model_type)
            self._made[name] = save_model(self.root / name, model_type, **{**params, **kwargs})
        return self._made[name]


@pytest.fixture(scope="session")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> Checkpoints:
    return Checkpoints(tmp_path_factory.mktemp("checkpoints"))


class Exports:
    """Exports each (checkpoint, ep, precision) once per session, without the smoke run."""

    def __init__(self, root: Path, checkpoints: Checkpoints) -> None:
        self.root = root
        self.checkpoints = checkpoints
        self._made: dict[tuple[str, ...], Path] = {}

    def get(self, name: str, ep: str = "cpu", precision: str = "fp32", settings: tuple[str, ...] = ()) -> Path:
        key = (name, ep, precision, *settings)
        if key not in self._made:
            from gqa_export.pipeline import BuildOptions, build

            out = self.root / "-".join((name, ep, precision, *settings))
            options = BuildOptions(
                str(self.checkpoints.get(name)), out, ep=ep, precision=precision, smoke=False, text_only=True
            )
            build(BuildOptions(**{**vars(options), "settings": settings}))
            self._made[key] = out
        return self._made[key]


@pytest.fixture(scope="session")
def builds(request: pytest.FixtureRequest, checkpoints: Checkpoints, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The family registry's checkpoints and packages (tests/families.py FamilyBuilds), built once
    per session for every module that asks."""
    from families import FamilyBuilds

    return FamilyBuilds.of_session(request, checkpoints, tmp_path_factory)


@pytest.fixture(scope="session")
def exports(tmp_path_factory: pytest.TempPathFactory, checkpoints: Checkpoints) -> Exports:
    return Exports(tmp_path_factory.mktemp("exports"), checkpoints)


@pytest.fixture(scope="session")
def trained_kv(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """(cache dtype or None for the float cache, scales) -> a package of the trained tiny Llama
    (tests/data/tiny-trained), built once per session for the KV-cache layout and drift tests."""
    from gqa_export.pipeline import BuildOptions, build
    from gqa_export.quant.kv_cache import KvQuantOptions

    trained = Path(__file__).parent / "data" / "tiny-trained"
    root = tmp_path_factory.mktemp("kv-trained")
    made: dict[tuple[str | None, str], Path] = {}

    def get(dtype: str | None, scales: str = "per-channel") -> Path:
        if (dtype, scales) not in made:
            out = root / f"{dtype}-{scales}"
            build(BuildOptions(str(trained), out, smoke=False, kv=KvQuantOptions(dtype, scales)))
            made[(dtype, scales)] = out
        return made[(dtype, scales)]

    return get


@pytest.fixture(scope="session")
def ggufs(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """GGUF files written from tiny checkpoints, and their packages, once per session (gguf_reference.py)."""
    from gguf_reference import GgufFiles

    return GgufFiles(tmp_path_factory.mktemp("gguf"))


@pytest.fixture(scope="session")
def gemma3_full_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny Gemma3ForConditionalGeneration genai can run with images (multimodal_models.py)."""
    return save_multimodal(tmp_path_factory.mktemp("ckpt") / "gemma3_full", "gemma3_full")


@pytest.fixture(scope="session")
def gemma3_full_package(gemma3_full_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Its full multimodal package (vision, embedding, decoder, processor config)."""
    from gqa_export.pipeline import BuildOptions, build

    out = tmp_path_factory.mktemp("pkg") / "full"
    build(BuildOptions(str(gemma3_full_checkpoint), out, smoke=False))
    return out


@pytest.fixture(scope="session")
def gemma4_full_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny Gemma4ForConditionalGeneration genai can run with images (gemma4_models.py "full")."""
    from gemma4_models import save_gemma4

    return save_gemma4(tmp_path_factory.mktemp("ckpt") / "gemma4_full", "full")


@pytest.fixture(scope="session")
def gemma4_full_package(gemma4_full_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Its full package (vision, embedding, decoder, processor config)."""
    from gqa_export.pipeline import BuildOptions, build

    out = tmp_path_factory.mktemp("pkg") / "gemma4_full"
    build(BuildOptions(str(gemma4_full_checkpoint), out, smoke=False))
    return out


@pytest.fixture(scope="session")
def gemma4_png_images(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """An 84 x 120 PNG Gemma-4's processor keeps as is and a 48 x 64 one it resizes (gemma4_full)."""
    pytest.importorskip("PIL")
    from gemma4_full import save_images

    return save_images(tmp_path_factory.mktemp("gemma4_images"))


@pytest.fixture(scope="session")
def png_images(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """PNGs that need resizing and that do not (gemma3_full.save_images)."""
    pytest.importorskip("PIL")
    from gemma3_full import save_images

    return save_images(tmp_path_factory.mktemp("images"))


@pytest.fixture(scope="session")
def draft_sources(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Speculative decoding's checkpoints: a 3-layer target, a 1-layer draft, a draft of another
    vocabulary (tests/runtime/test_speculative.py, tests/check/test_draft_pairing.py)."""
    root = tmp_path_factory.mktemp("speculative-sources")
    return {
        "target": save_model(root / "target", "llama", seed=0, num_hidden_layers=3),
        "draft": save_model(root / "draft", "llama", seed=1, num_hidden_layers=1),
        "other_vocab": save_model(root / "other_vocab", "llama", seed=1, num_hidden_layers=1, vocab_size=320),
    }


@pytest.fixture(scope="session")
def draft_packages(draft_sources: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """plain: the target alone; paired: with a 1-layer draft; self: the target as its own draft
    (every drafted token is accepted); other_vocab: a draft package of another vocabulary."""
    from gqa_export.pipeline import BuildOptions, build
    from gqa_export.speculative import build_with_draft

    root = tmp_path_factory.mktemp("speculative-packages")
    out = {"plain": root / "plain", "paired": root / "paired", "self": root / "self", "other_vocab": root / "ov"}
    build(BuildOptions(str(draft_sources["target"]), out["plain"], smoke=False))
    build(BuildOptions(str(draft_sources["other_vocab"]), out["other_vocab"], smoke=False))
    build_with_draft(BuildOptions(str(draft_sources["target"]), out["paired"]), str(draft_sources["draft"]))
    build_with_draft(BuildOptions(str(draft_sources["target"]), out["self"], smoke=False), str(draft_sources["target"]))
    return out


# registry checks the floor run leaves to 5.x for every row: a ragged batch compares with the same HF
# generate and cached forward the kept checks call (batch 1, one row at a time), through the exporter's
# own padding, which no transformers code computes
LEFT_TO_5X_CHECKS = frozenset({"test_ragged_batch_through_ort_equals_hf_row_by_row",
                               "test_ragged_batch_through_genai_equals_hf_generate_row_by_row"})  # fmt: skip


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    _select_floor_subset(config, items)


def _select_floor_subset(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under the transformers floor run (tests/compat/test_transformers_floor.py sets
    GQA_EXPORT_FLOOR_LEFT_OUT), keep the family registry's cases of every row it does not name, each in the
    row's first greedy mode and first standard-Attention mode, and its quantized packages only for
    the rows GQA_EXPORT_FLOOR_QUANTIZED names: the attention modes and the quantization are the
    exporter's own (no transformers in them), checked for every row under the installed 5.x."""

    if "GQA_EXPORT_FLOOR_LEFT_OUT" not in os.environ:
        return
    from families import BY_NAME

    left_out = set(os.environ["GQA_EXPORT_FLOOR_LEFT_OUT"].split(","))
    quantized = set(os.environ.get("GQA_EXPORT_FLOOR_QUANTIZED", "").split(","))
    unknown = (left_out | quantized) - set(BY_NAME) - {""}
    assert not unknown, f"the floor run names rows the registry does not have: {sorted(unknown)}"
    kept, dropped = [], []
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        family = params.get("family")
        module = getattr(item, "module", None)
        if module is None or module.__name__ != "test_families" or family is None:
            kept.append(item)
            continue
        first = {
            "test_generates_like_hf": family.generate_modes[:1],
            "test_standard_attention_matches_hf": family.logits_modes[:1],
        }
        name = item.originalname
        modes = first.get(name)  # a mode-parametrized test not listed here runs in every mode
        keep = family.name not in left_out and (modes is None or params.get("mode", None) in (*modes, None))
        keep = keep and name not in LEFT_TO_5X_CHECKS
        keep = keep and (name != "test_quantized_package" or family.name in quantized)
        (kept if keep else dropped).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept
