"""The parts of a full multimodal package beside the decoder (docs/multimodal.md): which attention
mode its decoder gets, the vision and embedding graphs, their genai_config sections, and the
image processor's transform list (processor_config.json).

A recipe whose `multimodal_model_type` is set names the onnxruntime-genai model type that runs
vision + embedding + decoder (e.g. `gemma3`); `--text-only` exports the text decoder alone under
the recipe's `genai_model_type`, as before.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import onnx_ir as ir

from gqa_export.arch.spec import ArchSpec
from gqa_export.errors import InputError
from gqa_export.graph.dims import ModelDims
from gqa_export.graph.encoders.siglip import PooledVitDims, build_pooled_vit, pooled_vit_dims
from gqa_export.graph.encoders.token_embedding import build_token_embedding
from gqa_export.graph.params import Params
from gqa_export.source.weights import WeightStore

VISION, EMBEDDING, PROCESSOR = "vision.onnx", "embedding.onnx", "processor_config.json"
# genai's gemma3 processor expands each <start_of_image> into this many placeholders, whatever the
# checkpoint says (docs/multimodal.md §1)
GEMMA3_RUNTIME_IMAGE_TOKENS = 256
# PIL resample codes in HF's preprocessor_config.json -> the Resize interpolation (Gemma-3: bilinear)
RESAMPLE = {0: "NEAREST", 1: "LANCZOS", 2: "LINEAR", 3: "CUBIC"}


@dataclass(frozen=True)
class MultimodalPlan:
    model_type: str  # the genai model type of the full package
    image_token_id: int
    vision: PooledVitDims
    image_mean: tuple[float, ...]
    image_std: tuple[float, ...]
    rescale: float
    interpolation: str  # onnxruntime-extensions Resize: NEAREST | LINEAR | CUBIC | LANCZOS


def full_attention_mode(requested: str) -> str:
    """The decoder of a full package is one standard-Attention graph reading input_ids for the
    image-run mask: genai's multimodal path runs one decoder session, no pipeline (§3)."""
    if requested in ("auto", "bias"):
        return "bias"
    raise InputError(
        f"--attention {requested} cannot run a full multimodal package (one decoder graph that reads input_ids "
        "for the image-run mask): use --attention bias (or auto), or --text-only for the text decoder alone"
    )


def check_full_options(no_lm_head: bool, inputs_embeds: bool, kv_quantized: bool, report: bool) -> None:
    """Options a full package cannot have, each refused in one line: genai needs the decoder's
    logits, it always takes inputs_embeds here, and the KV-cache calibration and the accuracy
    report run the decoder from input_ids alone."""
    refused = {
        "--no-lm-head": no_lm_head,
        "--inputs-embeds (a full package's decoder takes them already)": inputs_embeds,
        "--kv-cache int8/int4": kv_quantized,
        "--report": report,
    }
    for option, given in refused.items():
        if given:
            raise InputError(f"{option} is not available for a full multimodal package: add --text-only, or drop it")


def plan_multimodal(
    model_type: str, hf_config: Any, dims: ModelDims, store: WeightStore, source: Path
) -> MultimodalPlan:
    """What the full package needs from the checkpoint, or InputError naming what it cannot run."""
    vision = pooled_vit_dims(hf_config, dims.hidden_size, store)
    if model_type == "gemma3" and vision.tokens_per_image != GEMMA3_RUNTIME_IMAGE_TOKENS:
        raise InputError(
            f"onnxruntime-genai's gemma3 processor writes {GEMMA3_RUNTIME_IMAGE_TOKENS} image tokens, this "
            f"checkpoint's mm_tokens_per_image is {vision.tokens_per_image}: export with --text-only"
        )
    image_id = getattr(hf_config, "image_token_id", None)
    if image_id is None or int(image_id) >= dims.vocab_size:  # HF embeds an out-of-vocabulary one as id 0
        raise InputError(f"image_token_id {image_id} is not a token of the vocabulary: export with --text-only")
    pre = _preprocessor(source)
    return MultimodalPlan(
        model_type,
        int(image_id),
        vision,
        tuple(float(v) for v in pre.get("image_mean", (0.5, 0.5, 0.5))),
        tuple(float(v) for v in pre.get("image_std", (0.5, 0.5, 0.5))),
        float(pre.get("rescale_factor", 1 / 255)),
        RESAMPLE.get(int(pre.get("resample", 2)), "LINEAR"),
    )


def _preprocessor(source: Path) -> dict[str, Any]:
    """The checkpoint's preprocessor_config.json, if it has one (defaults: Gemma-3's processor)."""
    path = source / "preprocessor_config.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def build_encoders(
    plan: MultimodalPlan, dims: ModelDims, spec: ArchSpec, store: WeightStore, dtype: ir.DataType
) -> list[tuple[str, ir.Model]]:
    """The vision and embedding graphs, in the decoder's activation dtype."""
    params = Params(store, dtype)
    return [
        (VISION, build_pooled_vit(plan.vision, params)),
        (EMBEDDING, build_token_embedding(dims, spec, params, plan.image_token_id)),
    ]


def add_config_sections(config: dict[str, Any], plan: MultimodalPlan) -> None:
    """model.type, image_token_id and the vision / embedding sections (§6); their sessions get the
    decoder's session options."""
    model = config["model"]
    model["type"] = plan.model_type
    model["image_token_id"] = plan.image_token_id
    session = model["decoder"]["session_options"]
    model["vision"] = {
        "filename": VISION,
        "config_filename": PROCESSOR,
        "session_options": session,
        "inputs": {"pixel_values": "pixel_values"},
        "outputs": {"image_features": "image_features"},
    }
    model["embedding"] = {
        "filename": EMBEDDING,
        "session_options": session,
        "inputs": {"input_ids": "input_ids", "image_features": "image_features"},
        "outputs": {"inputs_embeds": "inputs_embeds"},
    }


def processor_config(plan: MultimodalPlan) -> dict[str, Any]:
    """onnxruntime-extensions' transforms reproducing HF's pixel_values: no ConvertRGB (DecodeImage
    already yields RGB; ConvertRGB after it swaps the channels, §7)."""
    size = plan.vision.image_size

    def op(name: str, kind: str, **attrs: Any) -> dict[str, Any]:
        return {"operation": {"name": name, "type": kind, "attrs": attrs}}

    return {
        "processor": {
            "name": f"{plan.model_type}_image_processor",
            "transforms": [
                op("decode_image", "DecodeImage", color_space="RGB"),
                op("resize", "Resize", height=size, width=size, interpolation=plan.interpolation, keep_aspect_ratio=0),
                op("rescale", "Rescale", rescale_factor=plan.rescale),
                op("normalize", "Normalize", mean=list(plan.image_mean), std=list(plan.image_std)),
                op("to_channel_first", "Permute3D", dims=[2, 0, 1]),
            ],
        }
    }
