"""Gemma-3 full packages of checkpoints other than the gemma3_full fixture (docs/multimodal.md §4, §8):
a SigLIP grid the 16 x 16 pooling does not divide (HF pools with kernel grid // 16 and drops the
last rows and columns), and ShieldGemma2ForImageClassification, which holds the same
Gemma3ForConditionalGeneration under `model.` (its decoder at model.model.language_model.model. as
transformers 5.x saves it, model.model.language_model. as it holds it). Each against the HF class
on the same weights: the vision features and the prompt (with an image) + decode-step logits."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from gemma3_full import BOI, EOI, IMAGE, IMAGE_TOKENS
from multimodal_models import save_multimodal
from reference import hf_model, hf_prompt_then_steps, ort_embedded_greedy

from gqa_export.pipeline import BuildOptions, build

PROMPT = [0, 17, 45, BOI, *[IMAGE] * IMAGE_TOKENS, EOI, 99, 200, 3, 7]


def _features(package: Path, pixels: np.ndarray) -> np.ndarray:
    import onnxruntime as ort

    return ort.InferenceSession(str(package / "vision.onnx")).run(None, {"pixel_values": pixels})[0]


def _errors(package: Path, gemma3, size: int) -> tuple[float, float]:
    """(max |vision.onnx - HF get_image_features|, max |prompt + 4 decode-step logits - HF|) on one image."""
    import torch

    pixels = np.random.default_rng(1).uniform(-1, 1, (1, 3, size, size)).astype(np.float32)
    features = _features(package, pixels)
    with torch.no_grad():
        ref = gemma3.model.get_image_features(torch.from_numpy(pixels)).pooler_output.numpy()
    got, tokens = ort_embedded_greedy(package, PROMPT, {"image_features": features}, 4, max_length=len(PROMPT) + 8)
    types = torch.from_numpy((np.asarray(PROMPT) == IMAGE).astype(np.int64)[None])
    want = hf_prompt_then_steps(gemma3, PROMPT, tokens, pixel_values=torch.from_numpy(pixels), token_type_ids=types)
    return float(np.abs(features - ref).max()), float(np.abs(got - want).max())


def test_grid_the_pooling_does_not_divide_matches_hf(tmp_path):
    """image_size 66 / patch 2: a 33 x 33 grid, which HF pools 2 x 2 to 16 x 16 (its last row and
    column dropped). Refused before as 'does not pool'; now features and logits are HF's."""
    checkpoint = save_multimodal(tmp_path / "ckpt", "gemma3_full", vision={"image_size": 66, "num_hidden_layers": 1})
    build(BuildOptions(str(checkpoint), tmp_path / "pkg", smoke=False))
    vision, logits = _errors(tmp_path / "pkg", hf_model(checkpoint), 66)
    print(f"33 x 33 grid: features {vision:.3g}, logits {logits:.3g}")
    assert vision < 1e-4 and logits < 1e-4


# the 4.x release's names for the tensors transformers 5.x saves (its Gemma3ForConditionalGeneration under model.)
RELEASE_NAMES = (
    ("model.model.language_model.model.", "model.language_model.model."),
    ("model.model.vision_tower.", "model.vision_tower.vision_model."),
    ("model.model.multi_modal_projector.", "model.multi_modal_projector."),
)


def _as_release(checkpoint: Path) -> Path:
    from safetensors.numpy import load_file, save_file

    tensors = load_file(str(checkpoint / "model.safetensors"))
    renamed = {}
    for name, tensor in tensors.items():
        for old, new in RELEASE_NAMES:
            name = name.replace(old, new)
        renamed[name] = tensor
    save_file(renamed, str(checkpoint / "model.safetensors"), metadata={"format": "pt"})
    return checkpoint


@pytest.mark.parametrize("layout", ["saved", "in_memory", "release"])
def test_shieldgemma2_builds_the_gemma3_package(tmp_path, layout):
    """ShieldGemma2ForImageClassification (model_type shieldgemma2, its Gemma-3 under `model.`):
    refused before as an unsupported architecture; now the gemma3 package of its inner
    Gemma3ForConditionalGeneration, exact against it, from the names transformers 5.x saves, holds,
    and the 4.x release's (the reference loads the saved names)."""
    import json

    from transformers import ShieldGemma2ForImageClassification

    checkpoint = save_multimodal(tmp_path / "ckpt", "gemma3_full", hub_layout=layout != "in_memory", shield=True,
                                 vision={"num_hidden_layers": 1})  # fmt: skip
    shield = ShieldGemma2ForImageClassification.from_pretrained(checkpoint).eval()
    if layout == "release":
        _as_release(checkpoint)
    build(BuildOptions(str(checkpoint), tmp_path / "pkg", smoke=False))
    assert json.loads((tmp_path / "pkg" / "genai_config.json").read_text())["model"]["type"] == "gemma3"
    vision, logits = _errors(tmp_path / "pkg", shield.model, 64)
    print(f"shieldgemma2 ({layout} names): features {vision:.3g}, logits {logits:.3g}")
    assert vision < 1e-4 and logits < 1e-4


@pytest.mark.parametrize("case", ["absent", "other_id"])
def test_tokenizer_without_the_config_placeholder_is_refused(tmp_path, case):
    """genai's gemma3 processor writes '<image_soft_token>' by its text: a tokenizer without it (genai then writes
    the text's pieces, 4132 ids and no placeholder, probed) or giving it another id than the config's
    image_token_index would drop every image silently; the build refuses in one line, before writing."""
    import json

    from tiny_models import save_tokenizer

    from gqa_export.errors import InputError

    checkpoint = save_multimodal(tmp_path / "ckpt", "gemma3_full", vision={"num_hidden_layers": 1})
    if case == "absent":
        save_tokenizer(checkpoint, vocab_size=384)  # no image tokens
    else:
        config = json.loads((checkpoint / "config.json").read_text())
        config["image_token_index"] = 9
        (checkpoint / "config.json").write_text(json.dumps(config))
    with pytest.raises(InputError, match="has no such token" if case == "absent" else "gives it id 6") as refused:
        build(BuildOptions(str(checkpoint), tmp_path / "pkg", smoke=False))
    assert "<image_soft_token>" in str(refused.value) and not (tmp_path / "pkg").exists()
