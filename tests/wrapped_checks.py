"""Shared by the tests of multimodal classes around an exported decoder (tests/arch/test_wrapped_decoders.py,
tests/arch/test_wrapped_config_layouts.py): the text prompt holding the placeholder ids, the tiny checkpoint in its
releases' layout, and the package's distance from the class on it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from reference import hf_logits, hf_model, ort_prefill_and_decode
from wrapped_models import save_wrapped

PROMPT = [0, 17, 45, 300, 300, 99, 200, 301, 3, 7, 11, 12]
# transformers 5.25 writes Qianfan-OCR's "original format" with its vision rename reversed onto the
# decoder too (language_model.model.encoder.layers): the released layout is 5.x's prefix read back; its
# HY-V4-VL save puts HY-V4's hub head names under 5.x's module (hc_head.hc_pre.hc_head_fn), which the
# release (HY-V4's names, the conversion mapping says) does not
# Kimi-K2.5's save reverses its tower's `encoder.blocks` renames onto the decoder's layers (blocks.N), which the
# release (language_model.model.layers.N) does not
# LLaVA-OneVision-1.5's save reverses Qwen2-VL's rename and its model's own onto the decoder (model.model.layers); the
# release keeps Qwen2-VL's (model.layers, visual.*), the causal LM's prefix
HUB_LAYOUT_BROKEN = frozenset({"qianfan_ocr", "hy_v4_vl", "kimi_k25", "llava_onevision1_5"})


def wrapped_checkpoint(tmp_path: Path, model_type: str, text_type: str) -> Path:
    """The class's tiny checkpoint under tmp_path, in its releases' tensor names where 5.25 can write them."""
    hub = model_type not in HUB_LAYOUT_BROKEN
    return save_wrapped(tmp_path / f"{model_type}-{text_type}", model_type, text_type, hub_layout=hub)


def text_error(package: Path, checkpoint: Path, steps: int = 3) -> float:
    """max |package - class| over PROMPT's logits and `steps` greedy decode steps."""
    tokens, got = ort_prefill_and_decode(package, PROMPT, steps=steps)
    return float(np.abs(got - hf_logits(hf_model(checkpoint), tokens, len(PROMPT))).max())
