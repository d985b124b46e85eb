"""processor_config.json for Qwen-VL packages: the onnxruntime-extensions transform list that turns
an image file into the vision model's `pixel_values [patches, C·T·p·p]` and `image_grid_thw`, as
HF's Qwen2VLImageProcessor does (docs/multimodal.md §11).

DecodeImage -> Resize (smart resize to multiples of patch·merge within [min_pixels, max_pixels])
-> Rescale -> Normalize -> PatchImage. No ConvertRGB: DecodeImage already yields RGB and
ConvertRGB after it reverses the channels (docs/multimodal.md, pitfalls).
"""

from __future__ import annotations

from typing import Any

from gqa_export.errors import InputError

# PIL resampling ids as HF's preprocessor_config.json stores them -> the Resize op's names
INTERPOLATION = {0: "NEAREST", 2: "LINEAR", 3: "CUBIC", 1: "LANCZOS"}
CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)
# Qwen2VLImageProcessor's defaults where preprocessor_config.json is silent
DEFAULT_MIN_PIXELS, DEFAULT_MAX_PIXELS = 56 * 56, 28 * 28 * 1280


def qwen_processor_config(pre: dict[str, Any]) -> dict[str, Any]:
    """The pipeline for a Qwen2VLImageProcessor-style `preprocessor_config.json` (Qwen2.5-VL:
    CLIP mean/std, patch 14; Qwen3-VL / Qwen3.5: 0.5 mean/std, patch 16: both read from `pre`)."""
    size = pre.get("size") or {}
    min_pixels = int(pre.get("min_pixels") or size.get("shortest_edge") or DEFAULT_MIN_PIXELS)
    max_pixels = int(pre.get("max_pixels") or size.get("longest_edge") or DEFAULT_MAX_PIXELS)
    patch, merge = int(pre.get("patch_size", 14)), int(pre.get("merge_size", 2))
    temporal = int(pre.get("temporal_patch_size", 2))
    if temporal != 2:
        raise InputError(f"temporal_patch_size {temporal}: genai's Qwen image processor repeats each image twice only")
    resample = pre.get("resample", 3)
    if resample not in INTERPOLATION:
        raise InputError(f"preprocessor_config resample {resample} has no onnxruntime-extensions Resize mode")
    steps: list[tuple[str, str, dict[str, Any]]] = [("decode_image", "DecodeImage", {"color_space": "RGB"})]
    if pre.get("do_resize", True):
        resize = {"smart_resize": 1, "min_pixels": min_pixels, "max_pixels": max_pixels, "patch_size": patch,
                  "merge_size": merge, "interpolation": INTERPOLATION[resample]}  # fmt: skip
        steps.append(("resize", "Resize", resize))
    if pre.get("do_rescale", True):
        steps.append(("rescale", "Rescale", {"rescale_factor": float(pre.get("rescale_factor", 1 / 255))}))
    if pre.get("do_normalize", True):
        mean = [float(v) for v in pre.get("image_mean", CLIP_MEAN)]
        std = [float(v) for v in pre.get("image_std", CLIP_STD)]
        steps.append(("normalize", "Normalize", {"mean": mean, "std": std}))
    patches = {"patch_size": patch, "temporal_patch_size": temporal, "merge_size": merge}
    steps.append(("patch_image", "PatchImage", patches))
    transforms = [{"operation": {"name": n, "type": t, "attrs": a}} for n, t, a in steps]
    return {"processor": {"name": "qwen_image_processor", "transforms": transforms}}
