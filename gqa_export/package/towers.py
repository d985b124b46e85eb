"""The vision (and audio) towers a full multimodal package can hold: one `VisionTower` row per
onnxruntime-genai model type (docs/multimodal.md §1): how the tower's dims are read and what is
refused, its graph builder, its processor_config.json writer, the genai_config keys it needs, and
the audio encoder it carries where the checkpoint has one. Each model type's record in
package/multimodal_types.py names its row; adding a model type is a row here plus that record.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import onnx_ir as ir

from gqa_export.errors import InputError
from gqa_export.graph.encoders.axial_vit import AxialVitDims, axial_vit_dims, build_axial_vit
from gqa_export.graph.encoders.clip_hd import ClipHdDims, build_clip_hd, clip_hd_dims
from gqa_export.graph.encoders.conformer import ConformerDims, build_conformer, conformer_dims
from gqa_export.graph.encoders.hd_crops import HdCropDims, build_hd_crops, hd_crop_dims
from gqa_export.graph.encoders.naflex_vit import NaflexDims, build_naflex_vit, naflex_vit_dims
from gqa_export.graph.encoders.pixtral import PixtralDims, build_pixtral, pixtral_dims
from gqa_export.graph.encoders.qwen_vision import build_qwen_tower, qwen_tower
from gqa_export.graph.encoders.siglip import PooledVitDims, build_pooled_vit, pooled_vit_dims
from gqa_export.graph.encoders.tubelet_vit import VideoTowerDims
from gqa_export.graph.encoders.video_tome import build_video_tome, videochat_vision_dims
from gqa_export.graph.params import Params
from gqa_export.model.dims import ModelDims
from gqa_export.package.audio_processor_config import log_mel_config, mel_bins
from gqa_export.package.phi4mm_speech import SPEECH_INPUTS, build_nemo_conformer, phi4_audio_config, phi4mm_speech_dims
from gqa_export.package.processor_config import (
    naflex_processor_config,
    patch_sequence_processor_config,
    phi3_image_processor_config,
    phi4_vision_processor_config,
    pixtral_processor_config,
    qwen_tower_processor_config,
    square_image_processor_config,
)
from gqa_export.source.weights import WeightStore

# genai's gemma3 processor expands each <start_of_image> into this many placeholders, whatever the
# checkpoint says (docs/multimodal.md §1)
GEMMA3_RUNTIME_IMAGE_TOKENS = 256
# genai's gemma4 processor trims the padded patches to soft tokens x 3 x 3, whatever the checkpoint
# says (docs/multimodal.md §13)
GEMMA4_RUNTIME_POOLING = 3
# genai's phi4mm processor (onnxruntime-extensions' Phi4VisionProcessor) counts 256 + 16 global
# tokens, 16 x 16 pooled features per 448-pixel crop of 14-pixel patches, whatever the checkpoint
# says; and its prompt code writes image placeholders as id 200010 (docs/multimodal.md §15)
PHI4MM_RUNTIME_POOLED, PHI4MM_RUNTIME_PATCH, PHI4MM_IMAGE_TOKEN_ID = 16, 14, 200010
# genai's phi3v processor (onnxruntime-extensions' Phi3ImageTransform) cuts up to 16 crops, whatever the checkpoint says
PHI3V_RUNTIME_CROPS = 16


@dataclass(frozen=True)
class AudioTower:
    """An audio encoder genai runs as its speech model (docs/multimodal.md §16): read from the
    checkpoint's audio_config and feature extractor settings."""

    # (hf_config, decoder dims, weights, feature extractor settings) -> the encoder's dims, or InputError
    read_dims: Callable[[Any, ModelDims, WeightStore, dict[str, Any]], Any]
    build: Callable[[Any, Params], ir.Model]  # (encoder dims, params) -> the speech graph
    processor: Callable[[dict[str, Any]], dict[str, Any]]  # feature extractor settings -> its genai config
    # genai's model.speech.inputs: key -> graph input name (audio_sizes is read by genai, not the graph)
    inputs: tuple[tuple[str, str], ...] = ()
    token_keys: tuple[str, ...] = ()  # config token ids written to model.<key> next to audio_token_id
    # hf_config -> the audio placeholder id (Phi-4-multimodal keeps it in audio_config)
    audio_token_id: Callable[[Any], Any] = lambda config: getattr(config, "audio_token_id", None)


@dataclass(frozen=True)
class VisionTower:
    """What differs per onnxruntime-genai multimodal model type in a build: one row per tower, named
    by the type's record (package/multimodal_types.py), read by planning, graph building and
    packaging alike (docs/multimodal.md §1)."""

    # (hf_config, decoder dims, weights) -> the tower's dims, or InputError naming what it cannot run
    read_dims: Callable[[Any, ModelDims, WeightStore], Any]
    build: Callable[[Any, Params], ir.Model]  # (tower dims, params) -> the vision graph
    # (tower dims, the checkpoint's preprocessor_config.json) -> processor_config.json
    processor: Callable[[Any, dict[str, Any]], dict[str, Any]]
    # genai's model.vision.inputs: a key (= the graph input's name), or (key, graph input name)
    vision_inputs: tuple[str | tuple[str, str], ...] = ("pixel_values",)
    # tower dims -> extra model.vision keys genai's processor reads (patch_size, spatial_merge_size)
    vision_keys: Callable[[Any], dict[str, Any]] = lambda _dims: {}
    # (tower dims, preprocessor_config.json) -> more model.vision keys (lfm2_vl: max_num_patches)
    preprocessor_keys: Callable[[Any, dict[str, Any]], dict[str, Any]] = lambda _dims, _pre: {}
    mrope_positions: bool = False  # the decoder takes genai's 3-D position_ids [3, B, S]
    # the class interleaves the M-RoPE sections whatever the config says (Qwen3-VL, Qwen3.5): the
    # config's `mrope_interleaved` must agree, since the graph follows it (graph/mrope.py)
    mrope_interleaved: bool = False
    # image runs attend bidirectionally (Gemma-3): the decoder also reads input_ids for that mask,
    # in one standard-Attention graph; else it takes inputs_embeds alone and may be GQA (§3)
    image_runs_bidirectional: bool = True
    token_keys: tuple[str, ...] = ()  # more config token ids genai's processor reads (model.<key>)
    # more model sections genai needs (gemma4: an empty speech config name, docs/multimodal.md §13)
    model_sections: tuple[tuple[str, dict[str, Any]], ...] = ()
    # (hf_config, preprocessor_config.json) -> notes for the build's summary (a tower that is not
    # exported, a processor rule genai does not follow)
    notes: Callable[[Any, dict[str, Any]], list[str]] = lambda _config, _pre: []
    # preprocessor_config.json -> the values of a rule by which HF's processor tiles large images
    # and genai's does not (lfm2_vl), for the manifest's model.hf_image_tiling: `run --image` notes
    # the images it applies to (docs/multimodal.md §14.2); None where HF does not tile
    hf_tiling: Callable[[dict[str, Any]], dict[str, Any] | None] = lambda _pre: None
    audio: AudioTower | None = None  # the checkpoint's audio_config, where it has one, is exported by this
    # tower dims -> feature sets past the main one, added after the decoder's first layers: they
    # ride in a widened image_features / inputs_embeds (Qwen3-VL's deepstack, docs/multimodal.md §11.5)
    feature_slices: Callable[[Any], int] = lambda _dims: 0
    # hf_config -> the image placeholder id (the top-level image_token_id; phi4mm: its vision_config's)
    image_token_id: Callable[[Any], Any] = lambda config: getattr(config, "image_token_id", None)
    # the placeholder genai's processor writes as text, its id read from the tokenizer where the config names none
    image_token: str | None = None
    # tower dims -> the patch positions per side its position table holds (Gemma-4), for the manifest's
    # model.vision_position_limit: `run --image` refuses an image genai's resize puts past it (HF's lookup fails)
    position_limit: Callable[[Any], int | None] = lambda _dims: None


def _gemma3_dims(hf_config: Any, dims: ModelDims, store: WeightStore) -> PooledVitDims:
    """SigLIP + pooled projector dims; genai's gemma3 processor writes 256 placeholders per image."""
    vision = pooled_vit_dims(hf_config, dims.hidden_size, store)
    if vision.tokens_per_image != GEMMA3_RUNTIME_IMAGE_TOKENS:
        raise InputError(
            f"onnxruntime-genai's gemma3 processor writes {GEMMA3_RUNTIME_IMAGE_TOKENS} image tokens, this "
            f"checkpoint's mm_tokens_per_image is {vision.tokens_per_image}: export with --text-only"
        )
    return vision


def _qwen_row(interleaved: bool) -> VisionTower:
    """A Qwen-VL tower (§11): packed patches + image_grid_thw in, M-RoPE positions in the decoder,
    causal image runs (no input_ids in the decoder), the ids genai's Qwen processor reads."""
    return VisionTower(
        qwen_tower,
        build_qwen_tower,
        qwen_tower_processor_config,
        vision_inputs=("pixel_values", "image_grid_thw"),  # genai's image_grid_thw name defaults to image_sizes
        vision_keys=lambda t: {"patch_size": t.dims.patch_size, "spatial_merge_size": t.dims.spatial_merge_size},
        mrope_positions=True,
        mrope_interleaved=interleaved,
        image_runs_bidirectional=False,
        token_keys=("video_token_id", "vision_start_token_id"),
        feature_slices=lambda t: t.feature_slices,
    )


def _mistral3_dims(hf_config: Any, dims: ModelDims, store: WeightStore) -> PixtralDims:
    return pixtral_dims(hf_config, dims.hidden_size, store)


def _gemma4_dims(hf_config: Any, dims: ModelDims, store: WeightStore) -> AxialVitDims:
    """Axial-rotary ViT dims; genai's gemma4 processor trims patches for 3 x 3 pooling only."""
    vision = axial_vit_dims(hf_config, dims.hidden_size, store)
    if vision.pool != GEMMA4_RUNTIME_POOLING:
        raise InputError(
            f"onnxruntime-genai's gemma4 processor pools {GEMMA4_RUNTIME_POOLING}x{GEMMA4_RUNTIME_POOLING} patches, "
            f"this checkpoint's pooling_kernel_size is {vision.pool}: export with --text-only"
        )
    return vision


def _conformer_dims(hf_config: Any, dims: ModelDims, store: WeightStore, features: dict[str, Any]) -> ConformerDims:
    return conformer_dims(hf_config, dims.hidden_size, store, mel_bins(features))


# Gemma-4's audio tower: genai feeds the log-mel frames as audio_embeds and their mask under the
# name speech.inputs.attention_mask names; it reads audio_sizes itself (docs/multimodal.md §16)
CONFORMER = AudioTower(
    _conformer_dims,
    build_conformer,
    log_mel_config,
    inputs=(
        ("audio_embeds", "audio_embeds"),
        ("attention_mask", "input_features_mask"),
        ("audio_sizes", "audio_sizes"),
    ),
    token_keys=("boa_token_id",),
)


def _lfm2_vl_dims(hf_config: Any, dims: ModelDims, store: WeightStore) -> NaflexDims:
    return naflex_vit_dims(hf_config, dims.hidden_size, store)


def _lfm2_vl_processor(vision: NaflexDims, pre: dict[str, Any]) -> dict[str, Any]:
    """processor_config.json for genai's lfm2_vl processor; the checkpoint's image processor must cut
    the tower's patches and merge its factor (HF's Lfm2VlImageProcessor defaults where it is silent)."""
    for key, want in (("encoder_patch_size", vision.patch), ("downsample_factor", vision.factor)):
        if int(pre.get(key, want)) != want:
            raise InputError(f"preprocessor_config {key} {pre[key]} differs from the model's {want}: use --text-only")
    return naflex_processor_config(vision.patch, vision.factor, pre)


def _lfm2_vl_tiling(pre: dict[str, Any]) -> dict[str, Any] | None:
    """What HF's Lfm2VlImageProcessor decides tiling by (its defaults where the checkpoint is
    silent): it tiles when splitting is on, min_tiles == max_tiles == 1 does not turn it off, and
    the image is too large (runtime/images.hf_tiles)."""
    one_tile = int(pre.get("min_tiles", 2)) == int(pre.get("max_tiles", 10)) == 1
    if not pre.get("do_image_splitting", True) or one_tile:
        return None
    return {
        "encoder_patch_size": int(pre.get("encoder_patch_size", 16)),
        "downsample_factor": int(pre.get("downsample_factor", 2)),
        "max_image_tokens": int(pre.get("max_image_tokens", 256)),
        "max_pixels_tolerance": float(pre.get("max_pixels_tolerance", 2.0)),
    }


def _lfm2_vl_tiling_note(_config: Any, pre: dict[str, Any]) -> list[str]:
    if _lfm2_vl_tiling(pre) is None:
        return []
    return [
        "images HF's processor would tile (larger than about twice max_image_tokens) are resized to one "
        "image by onnxruntime-genai's lfm2_vl processor (docs/multimodal.md §14.2)"
    ]


GEMMA3 = VisionTower(
    _gemma3_dims, build_pooled_vit, lambda vision, pre: square_image_processor_config(vision.image_size, pre)
)
QWEN2_5_VL = _qwen_row(interleaved=False)
QWEN3_VL = _qwen_row(interleaved=True)  # also Qwen3.5's (dense and MoE)
# Pixtral + Mistral-3's patch merger (§12); genai's processor reads patch_size and
# spatial_merge_size to expand [IMG] into rows of [IMG] ... [IMG_BREAK]
MISTRAL3 = VisionTower(
    _mistral3_dims,
    build_pixtral,
    lambda vision, pre: pixtral_processor_config(vision.patch, vision.merge, pre),
    vision_inputs=("pixel_values", "image_sizes"),
    vision_keys=lambda vision: {"patch_size": vision.patch, "spatial_merge_size": vision.merge},
    image_runs_bidirectional=False,
)
GEMMA4 = VisionTower(
    _gemma4_dims,
    build_axial_vit,
    lambda vision, pre: patch_sequence_processor_config(vision.patch, vision.pool, pre),
    vision_inputs=("pixel_values", "pixel_position_ids"),
    # an MMM type: without this genai looks for audio_processor_config.json and fails to load
    model_sections=(("speech", {"config_filename": ""}),),
    audio=CONFORMER,
    position_limit=lambda vision: vision.positions,
)
# SigLIP2 NaFlex + pixel-unshuffle projector (§14); genai's lfm2_vl processor pads every image's
# patches to max_num_patches and expands <image> to <|image_start|> + n <image> + <|image_end|>
LFM2_VL = VisionTower(
    _lfm2_vl_dims,
    build_naflex_vit,
    _lfm2_vl_processor,
    vision_inputs=("pixel_values", "attention_mask", "image_sizes"),
    vision_keys=lambda vision: {"patch_size": vision.patch, "spatial_merge_size": vision.factor},
    preprocessor_keys=lambda vision, pre: {
        "max_num_patches": int(pre.get("max_image_tokens", 256)) * vision.factor * vision.factor
    },
    image_runs_bidirectional=False,
    notes=_lfm2_vl_tiling_note,
    hf_tiling=_lfm2_vl_tiling,
)


def _phi4mm_dims(hf_config: Any, dims: ModelDims, store: WeightStore) -> HdCropDims:
    """Phi-4-multimodal's HD-crop tower (§15): genai's processor assumes 14-pixel patches, 16 x 16
    pooled features per crop and placeholder id 200010."""
    image_id = int(getattr(hf_config.vision_config, "image_token_id", -1))
    if image_id != PHI4MM_IMAGE_TOKEN_ID:
        raise InputError(
            f"onnxruntime-genai's phi4mm processor writes image placeholders as id {PHI4MM_IMAGE_TOKEN_ID}, this "
            f"checkpoint's vision_config.image_token_id is {image_id}: export with --text-only"
        )
    if hf_config.vision_config.patch_size != PHI4MM_RUNTIME_PATCH:
        raise InputError(
            f"onnxruntime-genai's phi4mm processor cuts {PHI4MM_RUNTIME_PATCH}-pixel patches, this checkpoint's "
            f"patch_size is {hf_config.vision_config.patch_size}: export with --text-only"
        )
    return hd_crop_dims(hf_config, dims.hidden_size, store, PHI4MM_RUNTIME_POOLED)


def _phi4mm_notes(config: Any, _pre: dict[str, Any]) -> list[str]:
    """Where genai's phi4mm processor gives other inputs than HF's processor, said in the build's notes."""
    said = [
        "onnxruntime-genai's phi4mm processor downsizes a multi-crop image's global view with antialiased bicubic "
        "(PIL), HF's without antialiasing: such images' global-view pixels differ from HF's; one-crop images "
        "are HF's (docs/multimodal.md §15.3)"
    ]
    if getattr(config, "audio_config", None) is not None:
        said.append(
            "onnxruntime-genai's Phi4AudioEmbed mel filters stop one FFT bin short of HF's (log-mel features up to "
            "~0.07 apart at 80 bins), and it zero-fills the padding frames of a prompt's shorter clips where HF's "
            "extractor does not: audio prompts are close to HF's, not equal (docs/multimodal.md §20)"
        )
    return said


# Phi-4-multimodal's speech model (docs/multimodal.md §20): the NeMo conformer and its two projectors on
# genai's Phi4AudioEmbed frames; its placeholder id in audio_config
PHI4MM_SPEECH = AudioTower(
    phi4mm_speech_dims,
    build_nemo_conformer,
    phi4_audio_config,
    inputs=SPEECH_INPUTS,
    audio_token_id=lambda config: getattr(getattr(config, "audio_config", None), "audio_token_id", None),
)

# SigLIP over HD crops + the HD transform + a 2-layer projector (§15); genai's phi4mm processor
# feeds the image_attention_mask under model.vision.inputs.attention_mask. With the checkpoint's
# audio_config the speech model comes too; without one the speech section names no config and genai
# loads the package vision-only (an MMM type, like gemma4 without audio)
PHI4MM = VisionTower(
    _phi4mm_dims,
    build_hd_crops,
    lambda vision, pre: phi4_vision_processor_config(vision.crop, pre),
    vision_inputs=("pixel_values", "image_sizes", ("attention_mask", "image_attention_mask")),
    image_runs_bidirectional=False,
    model_sections=(("speech", {"config_filename": ""}),),
    notes=_phi4mm_notes,
    image_token_id=lambda config: getattr(config.vision_config, "image_token_id", None),
    audio=PHI4MM_SPEECH,
)


def _phi3v_dims(hf_config: Any, dims: ModelDims, store: WeightStore) -> ClipHdDims:
    """Phi-3-vision's CLIP tower over HD crops (§21): its release's image settings are the converted config's
    vision_config (source/release_layouts.py)."""
    return clip_hd_dims(dict(getattr(hf_config, "vision_config", None) or {}), dims.hidden_size, store)


def _phi3v_notes(_config: Any, pre: dict[str, Any]) -> list[str]:
    crops = pre.get("num_crops")
    if crops is None or int(crops) == PHI3V_RUNTIME_CROPS:
        return []
    return [
        f"onnxruntime-genai's phi3v processor cuts up to {PHI3V_RUNTIME_CROPS} crops per image; this checkpoint's "
        f"preprocessor_config says num_crops {crops}, which the release's own processor uses (docs/multimodal.md §21)"
    ]


# CLIP over HD crops + the HD transform + a 2-layer projector (§21); genai's phi3v prompt code writes image N's
# placeholders as id -N, which the embedding model reads as "an image token" (image_token_id -1: every negative id)
PHI3V = VisionTower(
    _phi3v_dims,
    build_clip_hd,
    lambda _vision, _pre: phi3_image_processor_config(),
    vision_inputs=("pixel_values", "image_sizes"),
    image_runs_bidirectional=False,
    notes=_phi3v_notes,
    image_token_id=lambda _config: -1,
)


# VideoChat-Flash's remote code builds its UMTImageProcessor / InternVideo2ImageProcessor in code (no
# preprocessor_config.json): a bicubic resize to the tower's frame size, 1/255, ImageNet mean and std
_VIDEO_TOWER_PROCESSOR = {"resample": 3, "image_mean": (0.485, 0.456, 0.406), "image_std": (0.229, 0.224, 0.225)}


def _videochat_dims(hf_config: Any, dims: ModelDims, store: WeightStore) -> VideoTowerDims:
    return videochat_vision_dims(hf_config, dims.hidden_size, store)


# UMT or InternVideo2 on single images + ToMe to 64 tokens + a 2-layer projector (docs/coverage.md §36); genai's
# videochat_flash_qwen processor expands each <|vision_start|> into num_visual_tokens <|image_pad|> and feeds the
# prompt's images as pixel_values [1, N, 3, S, S]
VIDEOCHAT_FLASH = VisionTower(
    _videochat_dims,
    build_video_tome,
    lambda vision, _pre: square_image_processor_config(vision.image, _VIDEO_TOWER_PROCESSOR),
    vision_keys=lambda vision: {"num_visual_tokens": vision.tokens},
    image_runs_bidirectional=False,
    notes=lambda _config, _pre: [
        "onnxruntime-genai's videochat_flash_qwen processor gives every image its own marker pair and "
        "num_visual_tokens rows: the package runs VideoChat-Flash's image path (64 tokens an image); frames given "
        "as images are not its video path (4-frame clips, 16 tokens a frame at one placeholder; docs/coverage.md §36)"
    ],
    image_token_id=lambda config: getattr(config, "image_token_id", None),
    image_token="<|image_pad|>",
)
