"""Checkpoints made from published config.json files in the spellings people download.

Each file in tests/data/real-configs keeps every key of a real model's config (transformers 4.x
era: no `layer_types`, `sliding_window_pattern`, `rope_scaling` dicts or null, Qwen2's
`use_sliding_window: false` beside a `sliding_window`, Phi-3's longrope lists; multimodal classes' text_config
naming only a few keys, LLaVA-1.5's and LLaVA-NeXT-Mistral's without a head count), only the sizes
shrunk; windows are shorter than the prompt. The weights are random, made by transformers from
that very file, and config.json is written back byte for byte after saving. Each is exported with
the CLI's defaults (smoke run included), then compared with transformers: prompt and decode
logits, and greedy onnxruntime-genai tokens against HF generate.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from families import transformers_major
from reference import hf_generate, hf_logits, hf_model, ort_prefill_and_decode
from tiny_models import randomize_norms, save_tokenizer
from typer.testing import CliRunner

from gqa_export.cli import app
from gqa_export.runtime.run import generate_greedy, load

CONFIGS = Path(__file__).resolve().parents[1] / "data" / "real-configs"
NAMES = sorted(p.stem for p in CONFIGS.glob("*.json"))
PROMPT = [0, 17, 45, 99, 200, 3, 7, 120, 64, 33, 250, 11, 12, 13, 90, 91]  # twice the windows (8)
# generation starts past Phi-3's longrope switch (original_max 32): HF generate re-runs the whole
# sequence with the long factors at the step that crosses it, which no decode graph does
# (tests/families.py, the phi3_longrope row); the crossing itself is compared step by step in the logits test
LONG_PROMPT = [(11 * i + 5) % 380 for i in range(40)]
NEW = 24
# published configs whose HF reference differs between transformers majors (the export follows 5.x):
# name -> why; under 4.x they are exported and checked for their config only
REFERENCE_DIFFERS_UNDER_4X = {
    "deepseek-ai--DeepSeek-V2-Lite-Chat": (
        "4.57's DeepSeek-V2 computes this config's legacy YaRN rope_scaling otherwise than 5.x (its logits "
        "agree at position 0 and part from position 1)"
    ),
}


def real_checkpoint(name: str, folder: Path) -> Path:
    """Random weights for the published config `name`, saved with that config.json unchanged."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForImageTextToText

    folder.mkdir(parents=True)
    shutil.copy(CONFIGS / f"{name}.json", folder / "config.json")
    config = AutoConfig.from_pretrained(folder)
    torch.manual_seed(0)
    auto = AutoModelForImageTextToText if multimodal(name) else AutoModelForCausalLM
    model = auto.from_config(config, dtype=torch.float32).eval()
    randomize_norms(model)
    # logits that separate (greedy is no tie) without copying the last token: Gemma multiplies its
    # embedding by sqrt(hidden), Granite by its embedding_multiplier, so their tables are drawn that much smaller
    embedding = model.get_input_embeddings().weight
    text = config.get_text_config()
    scale = text.hidden_size**0.5 if text.model_type.startswith("gemma") else getattr(text, "embedding_multiplier", 1)
    embedding_std = 0.2 / scale
    with torch.no_grad():
        for param in model.parameters():
            if param.dim() == 2:
                param.normal_(0.0, embedding_std if param is embedding else 0.2)
    model.save_pretrained(folder)
    shutil.copy(CONFIGS / f"{name}.json", folder / "config.json")  # the published spelling, as downloaded
    save_tokenizer(folder, vocab_size=text.vocab_size)
    return folder


def multimodal(name: str) -> bool:
    """A published multimodal class's config (a text_config beside its towers): its decoder exported with
    --text-only and compared with the class itself on a text prompt (docs/coverage.md §21)."""
    return "text_config" in json.loads((CONFIGS / f"{name}.json").read_text())


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    root = tmp_path_factory.mktemp("real-configs")
    done: dict[str, tuple[Path, Path]] = {}

    def get(name: str) -> tuple[Path, Path]:
        if name not in done:
            checkpoint = real_checkpoint(name, root / name)
            out = root / f"{name}-onnx"
            text_only = ["--text-only"] if multimodal(name) else []
            result = CliRunner().invoke(app, ["build", str(checkpoint), "-o", str(out), "-q", *text_only])
            assert result.exit_code == 0, result.output
            done[name] = checkpoint, out
        return done[name]

    return get


@pytest.mark.parametrize("name", NAMES)
def test_exports_and_matches_hf(exported, name):
    checkpoint, package = exported(name)
    assert json.loads((checkpoint / "config.json").read_text()) == json.loads((CONFIGS / f"{name}.json").read_text())
    if name in REFERENCE_DIFFERS_UNDER_4X and transformers_major() < 5:
        pytest.skip(REFERENCE_DIFFERS_UNDER_4X[name])
    tokens, got = ort_prefill_and_decode(package, PROMPT, steps=24)
    hf = hf_model(checkpoint)
    ref = hf_logits(hf, tokens, len(PROMPT))
    np.testing.assert_allclose(got, ref, atol=1e-4, rtol=1e-4)
    assert np.abs(ref).max() > 0.5
    generated = generate_greedy(package, LONG_PROMPT, NEW, min_new_tokens=NEW, model=load(package, "cpu")).tokens
    assert generated == hf_generate(hf, LONG_PROMPT, NEW)
    assert len(set(generated)) > 3, f"degenerate generation {generated}: the comparison proves little"


def test_windows_recorded_as_resolved(exported):
    """The manifest records each layer's window as the export read it; the lints read that record."""
    windows = {
        name: json.loads((exported(name)[1] / "manifest.json").read_text())["model"]["attention_windows"]
        for name in ("google--gemma-2-2b-it", "google--gemma-3-1b-it", "CohereForAI--c4ai-command-r7b-12-2024")
    }
    assert windows["google--gemma-2-2b-it"] == [8, -1, 8, -1]  # alternates by rule, even layers slide
    assert windows["google--gemma-3-1b-it"] == [8, 8, 8, 8, 8, -1, 8]  # sliding_window_pattern 6
    assert windows["CohereForAI--c4ai-command-r7b-12-2024"] == [8, 8, 8, -1, 8]  # pattern 4
    qwen = json.loads((exported("Qwen--Qwen2.5-0.5B-Instruct")[1] / "manifest.json").read_text())
    assert set(qwen["model"]["attention_windows"]) == {-1}  # use_sliding_window: false
