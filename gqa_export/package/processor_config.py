"""processor_config.json: the onnxruntime-extensions transform list that turns an image file into
the vision model's inputs as the checkpoint's HF image processor does. Qwen-VL: `pixel_values
[patches, C·T·p·p]` and `image_grid_thw`, as Qwen2VLImageProcessor (docs/multimodal.md §11);
Gemma-3: a square resize to the tower's image size (docs/multimodal.md §7).

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


def smart_resize_mode(resample: Any) -> str:
    """The Resize interpolation of a smart-resize pipeline for HF's `resample`, or InputError: one
    onnxruntime-extensions has no mode for, or nearest (0), whose NEAREST genai 0.18's Resize accepts
    in the file and then fails on every image ("ImagingResample failed", probed: also on an image that
    needs no resize), so the build refuses it before writing a package that cannot take an image."""
    resample = int(resample)
    if resample not in INTERPOLATION:
        raise InputError(f"preprocessor_config resample {resample} has no onnxruntime-extensions Resize mode")
    if INTERPOLATION[resample] == "NEAREST":
        raise InputError(
            "preprocessor_config resample 0 (nearest): onnxruntime-genai's Resize fails on every image with it; "
            "export with --text-only"
        )
    return INTERPOLATION[resample]


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
    steps: list[tuple[str, str, dict[str, Any]]] = [("decode_image", "DecodeImage", {"color_space": "RGB"})]
    if pre.get("do_resize", True):
        mode = smart_resize_mode(pre.get("resample", 3))
        resize = {"smart_resize": 1, "min_pixels": min_pixels, "max_pixels": max_pixels, "patch_size": patch,
                  "merge_size": merge, "interpolation": mode}  # fmt: skip
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


def qwen_tower_processor_config(tower: Any, pre: dict[str, Any]) -> dict[str, Any]:
    """qwen_processor_config for a full package's Qwen tower (package/towers.py): the
    checkpoint's preprocessor_config.json is required (mean/std differ between Qwen generations)
    and must patch and merge as the tower does."""
    if not pre:
        raise InputError("the checkpoint has no preprocessor_config.json (the image mean/std): export with --text-only")
    dims = tower.dims
    sizes = {"patch_size": dims.patch_size, "merge_size": dims.spatial_merge_size,
             "temporal_patch_size": dims.temporal_patch_size}  # fmt: skip
    for key, want in sizes.items():
        if int(pre.get(key, want)) != want:
            raise InputError(f"preprocessor_config {key} {pre[key]} differs from the vision tower's {want}")
    # the tower's temporal_patch_size where the file names none: genai's processor patches two frames only,
    # so a tower of another one is refused here (qwen_processor_config), not at the vision model's first run
    return qwen_processor_config({**sizes, **pre})


def pixtral_processor_config(patch: int, merge: int, pre: dict[str, Any]) -> dict[str, Any]:
    """Mistral-3's Pixtral pipeline, channels first, then the image's size (docs/multimodal.md
    §12). genai's Resize has no longest-edge rule: its smart resize (multiples of patch·merge
    within [min_pixels, max_pixels]) stands in for HF's, with max_pixels the longest edge squared;
    the two agree where no resize is needed."""
    longest = int((pre.get("size") or {}).get("longest_edge", 1024))
    unit = patch * merge
    return _smart_resize_config("pixtral_image_processor", patch, merge, (unit * unit, longest * longest), pre,
                                (3, CLIP_MEAN, CLIP_STD))  # fmt: skip


def _op(name: str, kind: str, **attrs: Any) -> dict[str, Any]:
    return {"operation": {"name": name, "type": kind, "attrs": attrs}}


def square_image_processor_config(size: int, pre: dict[str, Any]) -> dict[str, Any]:
    """Resize to size x size, rescale, normalize, channels first (Gemma-3's processor; defaults:
    bilinear, mean/std 0.5). No ConvertRGB: DecodeImage already yields RGB (docs/multimodal.md §7)."""
    mean = [float(v) for v in pre.get("image_mean", (0.5, 0.5, 0.5))]
    std = [float(v) for v in pre.get("image_std", (0.5, 0.5, 0.5))]
    interpolation = INTERPOLATION.get(int(pre.get("resample", 2)), "LINEAR")
    return {
        "processor": {
            "name": "gemma3_image_processor",
            "transforms": [
                _op("decode_image", "DecodeImage", color_space="RGB"),
                _op("resize", "Resize", height=size, width=size, interpolation=interpolation, keep_aspect_ratio=0),
                _op("rescale", "Rescale", rescale_factor=float(pre.get("rescale_factor", 1 / 255))),
                _op("normalize", "Normalize", mean=mean, std=std),
                _op("to_channel_first", "Permute3D", dims=[2, 0, 1]),
            ],
        }
    }


def patch_sequence_processor_config(patch: int, pool: int, pre: dict[str, Any]) -> dict[str, Any]:
    """Gemma-4's pipeline: DecodeImage -> Gemma4ImageTransform (aspect-preserving bicubic resize to
    at most max_soft_tokens·pool² patches, sides multiples of patch·pool, rescale to [0, 1],
    patches and their (x, y) positions); genai trims the padding (docs/multimodal.md §13)."""
    soft = int(pre.get("max_soft_tokens") or pre.get("image_seq_length") or 280)
    transform = {"patch_size": patch, "max_soft_tokens": soft, "pooling_kernel_size": pool}
    steps = [
        _op("decode_image", "DecodeImage", color_space="RGB"),
        _op("gemma4_image", "Gemma4ImageTransform", **transform),
    ]
    return {"processor": {"name": "gemma4_image_processor", "transforms": steps}}


def naflex_processor_config(patch: int, factor: int, pre: dict[str, Any]) -> dict[str, Any]:
    """LFM2-VL's pipeline for genai's lfm2_vl processor (docs/multimodal.md §14.2): smart resize to
    multiples of patch·factor within [min_image_tokens, max_image_tokens] tokens (HF's
    Lfm2VlImageProcessor rule for an image it does not tile), rescale, normalize, channels first,
    then the image's size; genai cuts the patches and pads them to max_num_patches itself."""
    unit = (patch * factor) ** 2
    pixels = (int(pre.get("min_image_tokens", 64)) * unit, int(pre.get("max_image_tokens", 256)) * unit)
    return _smart_resize_config("lfm2_vl_image_processor", patch, factor, pixels, pre, (2, (0.5,) * 3, (0.5,) * 3))


def _smart_resize_config(
    name: str, patch: int, merge: int, pixels: tuple[int, int], pre: dict[str, Any], defaults: tuple[int, Any, Any]
) -> dict[str, Any]:
    """The pipeline genai's pixtral and lfm2_vl processors share: smart resize to multiples of
    patch·merge within pixels = (min, max), rescale, normalize, channels first, the image's size.
    `defaults`: HF's resample, mean and std where the checkpoint's preprocessor is silent."""
    resize = {"smart_resize": 1, "min_pixels": pixels[0], "max_pixels": pixels[1], "patch_size": patch,
              "merge_size": merge, "interpolation": smart_resize_mode(pre.get("resample", defaults[0]))}  # fmt: skip
    mean = [float(v) for v in pre.get("image_mean", defaults[1])]
    std = [float(v) for v in pre.get("image_std", defaults[2])]
    return {
        "processor": {
            "name": name,
            "transforms": [
                _op("decode_image", "DecodeImage", color_space="RGB"),
                _op("resize", "Resize", **resize),
                _op("rescale", "Rescale", rescale_factor=float(pre.get("rescale_factor", 1 / 255))),
                _op("normalize", "Normalize", mean=mean, std=std),
                _op("to_channel_first", "Permute3D", dims=[2, 0, 1]),
                _op("image_sizes", "PixtralImageSizes"),
            ],
        }
    }


def phi4_vision_processor_config(crop: int, pre: dict[str, Any]) -> dict[str, Any]:
    """Phi-4-multimodal's pipeline for genai's phi4mm processor (docs/multimodal.md §15.2):
    Phi4VisionDynamicPreprocess (HF's crop layout: the image resized into a grid of at most
    `dynamic_hd` crops, padded white, with its patch mask) -> Rescale -> Normalize ->
    Phi4VisionProcessor (the bicubic global view, the crops, image_sizes, the masks, the token
    count); HF's Phi4MultimodalImageProcessor defaults where the checkpoint is silent."""
    size = pre.get("size") or {}
    side = int(size.get("height", crop)) if isinstance(size, dict) else int(size)
    if side != crop or (isinstance(size, dict) and int(size.get("width", crop)) != crop):
        raise InputError(f"preprocessor_config size {size} differs from the vision crop_size {crop}: use --text-only")
    if int(pre.get("patch_size", 14)) != 14:
        raise InputError(f"preprocessor_config patch_size {pre['patch_size']}: genai's phi4mm processor cuts 14 only")
    if int(pre.get("resample", 3)) != 3:
        raise InputError(f"preprocessor_config resample {pre['resample']}: genai's phi4mm global view is bicubic only")
    if not pre.get("do_rescale", True) or not pre.get("do_normalize", True):
        raise InputError("preprocessor_config without rescale / normalize: genai's phi4mm pipeline always applies them")
    mean = [float(v) for v in pre.get("image_mean", (0.5, 0.5, 0.5))]
    std = [float(v) for v in pre.get("image_std", (0.5, 0.5, 0.5))]
    crops = {"dynamic_hd": int(pre.get("dynamic_hd", 36)), "dyhd_base_resolution": crop}
    transforms = [
        _op("decode_image", "DecodeImage", color_space="RGB"),
        _op("phi4_vision_dynamic_preprocess", "Phi4VisionDynamicPreprocess", **crops),
        _op("rescale", "Rescale", rescale_factor=float(pre.get("rescale_factor", 1 / 255))),
        _op("normalize", "Normalize", mean=mean, std=std),
        _op("phi4_vision_processor", "Phi4VisionProcessor", dyhd_base_resolution=crop, interpolation="CUBIC"),
    ]
    # Rescale takes the resized image alone (output 0 of the dynamic preprocess: fed both outputs,
    # onnxruntime-extensions crashed the process, probed); the processor also takes the mask (output 1)
    transforms[2]["operation"]["inputs"] = [":0"]
    transforms[-1]["operation"]["inputs"] = [":0", "phi4_vision_dynamic_preprocess:1"]
    # the aligner pads a batch's missing crops with masks of ones, as HF does
    processor = {"name": "phi_4_vision_processor", "transforms": transforms, "output_aligner": "phi4-vision-aligner"}
    return {"processor": processor}


def phi3_image_processor_config() -> dict[str, Any]:
    """Phi-3-vision's pipeline for genai's phi3v processor (docs/multimodal.md §21): onnxruntime-extensions'
        Phi3ImageTransform fixes the crop (336), the crop count (up to 16), OpenAI-CLIP's mean / std and the token
        count itself; its attributes are what Microsoft's packages write (the kernel reads none of them). Their
    BGR-decode + ConvertRGB pair is one RGB decode here (the package lint's rule, processor-convert-rgb)."""
    transforms = [
        _op("decode_image", "DecodeImage", color_space="RGB"),
        _op("phi3_image_transform", "Phi3ImageTransform", num_crops=16, num_img_tokens=144),
    ]
    return {"processor": {"name": "image_processing", "transforms": transforms}}
