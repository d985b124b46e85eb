"""Multimodal classes that wrap an exported family's text decoder, read only with --text-only; and the one
rule (`towers_refusal`) for every checkpoint whose towers a build does not write.

Each class here runs its `language_model` (or `text_model`) unchanged on a prompt of token ids
alone: its placeholder ids are rows of the decoder's own embedding table and its mask is causal,
so the decoder's package computes the class's logits exactly (checked per class against HF,
docs/coverage.md §21 "Decoders inside multimodal classes"). Their towers
(a CLIP / SigLIP / InternViT / Idefics3 encoder and a projector) are not built, and onnxruntime-genai
0.18 runs none of these as a multimodal package (its vision types: fara, gemma3, mistral3, phi3v,
qwen2_5_vl, qwen3_vl, qwen3_5, qwen3_5_moe, videochat_flash_qwen; gemma4 and phi4mm with speech).
So `build` exports the decoder only when asked (`--text-only`), under the decoder family's own
recipe, and otherwise refuses in one line that says so: a package that silently dropped the
images a user brought the checkpoint for would be the wrong package.
The rule reaches past the list: a class a recipe of its own matches (Gemma-3n's, Llama-4's,
Gemma-4-Unified's) needs --text-only too when its config carries a vision or audio sub-config the recipe
builds no full package for (docs/coverage.md §21).

Phi-4-multimodal is the one listed class whose full package genai runs (phi4mm) and gqa-export builds
(its image side, docs/multimodal.md §15): its own recipe names the package type, so it is not
refused without --text-only (`_FULL_PACKAGE`); --text-only still exports its decoder alone.
Phi-3-vision's remote-code release (Phi3VForCausalLM) is another: its own recipe (phi3_v) builds genai's phi3v
package (docs/multimodal.md §21); so is VideoChat-Flash's (VideoChatFlashQwenForCausalLM, videochat_flash_qwen: its
image path, docs/coverage.md §36).

A class is listed only when its text-only forward was checked against the decoder's; the family
of the decoder is whatever its text_config says (Llava around a Mistral, Qwen2 or Llama decoder).
A class whose logits differ from its decoder family's has a recipe of its own that names it
(Cohere2-Vision: no logit_scale), and so does a class whose decoder is a family's under its own
text type or hub names (GLM-4V, Granite vision, the Omni thinkers; Cosmos3, HY-V4-VL, PaddleOCR-VL,
Emu3, DeepSeek-OCR-2, Chameleon and ERNIE-4.5-VL with specs of their own, arch/wrapped_families.py), so that no family
recipe's match list, which its packages' manifests record, changes; the --text-only gate holds for
them all the same.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

from gqa_export.errors import InputError
from gqa_export.recipes import Recipe, match_recipe

# class -> its model_type (the name the refusal and the coverage table use)
WRAPPED_DECODERS = MappingProxyType(
    {
        "AriaForConditionalGeneration": "aria",
        "AyaVisionForConditionalGeneration": "aya_vision",
        "ChameleonForConditionalGeneration": "chameleon",  # its own recipe: per-head q/k LayerNorms, masked logits
        "Cohere2VisionForConditionalGeneration": "cohere2_vision",  # its own recipe: no logit_scale
        "DeepseekOcr2ForConditionalGeneration": "deepseek_ocr2",  # its own recipe: V2's experts, Llama's attention
        "UnlimitedOcrForConditionalGeneration": "unlimited_ocr",  # DeepSeek-OCR-2's recipe
        "DeepseekVLForConditionalGeneration": "deepseek_vl",
        "DeepseekVLHybridForConditionalGeneration": "deepseek_vl_hybrid",
        "Dots3NoteForConditionalGeneration": "dots3_note",
        "Granite4VisionForConditionalGeneration": "granite4_vision",
        "GraniteDoclingForConditionalGeneration": "granite_docling",
        "HunYuanVLForConditionalGeneration": "hunyuan_vl",
        "PaddleOCRVLForConditionalGeneration": "paddleocr_vl",  # its own recipe: rotate-half RoPE
        "HYV4VLForConditionalGeneration": "hy_v4_vl",  # its own recipe: latent norms at rms_norm_eps
        "HyperCLOVAXVisionV2ForConditionalGeneration": "hyperclovax_vision_v2",
        "Cosmos3EdgeForConditionalGeneration": "cosmos3_edge",  # its own recipe: relu2 fc1 / fc2, hub names
        "Cosmos3OmniForConditionalGeneration": "cosmos3_omni",  # its own recipe: the hub's root-level names
        "Emu3ForConditionalGeneration": "emu3",  # its own recipe: the release's text_model.model. root
        "Ernie4_5_VLMoeForConditionalGeneration": "ernie4_5_vl_moe",  # its own recipe: the text expert set
        "Exaone4_5_ForConditionalGeneration": "exaone4_5",
        "FuyuForCausalLM": "fuyu",
        "Glm4vForConditionalGeneration": "glm4v",
        "Glm5NextForConditionalGeneration": "glm5_next",  # its own recipe: no ForCausalLM class runs its decoder
        "Glm46VForConditionalGeneration": "glm46v",
        "Glm4vMoeForConditionalGeneration": "glm4v_moe",
        "GlmOcrForConditionalGeneration": "glm_ocr",
        "GotOcr2ForConditionalGeneration": "got_ocr2",
        "Idefics2ForConditionalGeneration": "idefics2",
        "Idefics3ForConditionalGeneration": "idefics3",
        "Inkling2ForConditionalGeneration": "inkling2",  # the hub's model.llm.* read by its decoder's spec
        "Inkling2LoopForConditionalGeneration": "inkling2_loop",  # and its merged message queries
        "InklingForConditionalGeneration": "inkling_mm_model",  # the hub layout read by its decoder's spec
        "InternVLForConditionalGeneration": "internvl",
        "JanusForConditionalGeneration": "janus",
        "Kosmos2ForConditionalGeneration": "kosmos-2",  # its own recipe: XGLM's layers with two more LayerNorms
        "Kimi_K25ForConditionalGeneration": "kimi_k25",  # its own recipe: placeholders embedded as id 0
        "LightOnOcrForConditionalGeneration": "lighton_ocr",
        "LlavaForConditionalGeneration": "llava",
        "LlavaNextForConditionalGeneration": "llava_next",
        "LlavaNextVideoForConditionalGeneration": "llava_next_video",
        "LlavaOnevisionForConditionalGeneration": "llava_onevision",
        "LlavaOnevision15ForConditionalGeneration": "llava_onevision1_5",
        "MiniMaxM3SparseForConditionalGeneration": "minimax_m3_vl",
        "MistralLarge4ForConditionalGeneration": "mistral_large4",  # its own recipe: the latent cache by default
        "MuseGlimmerForConditionalGeneration": "muse_glimmer",  # its own recipe: Gemma-2 layers, gated attention
        "MuseSparkForConditionalGeneration": "muse_spark",  # its own recipe: gated residuals, pooled normed experts
        "Molmo2ForConditionalGeneration": "molmo2",  # its own recipe: q/k norms and layout by config
        "Ovis2ForConditionalGeneration": "ovis2",
        "Ovis2_5ForConditionalGeneration": "ovis2_5",
        "Phi4MultimodalForCausalLM": "phi4_multimodal",  # its own recipe: the config is the decoder's (Phi-3's)
        "CohereCompassForConditionalGeneration": "cohere_compass",
        "Apertus1p5ForConditionalGeneration": "apertus1p5",
        "Lfm3VlForConditionalGeneration": "lfm3_vl",
        "MiniCPMOcrForConditionalGeneration": "minicpm_ocr",
        "MiniCPMV4_6ForConditionalGeneration": "minicpmv4_6",
        "MiniCPMV4_7ForConditionalGeneration": "minicpmv4_7",
        "NemotronH_Omni_Reasoning_V3": "nemotron_h_omni",
        "Qwen2_5OmniThinkerForConditionalGeneration": "qwen2_5_omni_thinker",
        "Qwen3OmniMoeThinkerForConditionalGeneration": "qwen3_omni_moe_thinker",
        "QianfanOCRForConditionalGeneration": "qianfan_ocr",
        "Qwen4ExpForConditionalGeneration": "qwen4_exp",
        "SmolVLMForConditionalGeneration": "smolvlm",
        "Step3p7ForConditionalGeneration": "step3p7",  # its own recipe: Laguna's layers, Gemma norms, clipped experts
        "VideoLlama3ForConditionalGeneration": "video_llama_3",
        "VideoLlavaForConditionalGeneration": "video_llava",
        "VipLlavaForConditionalGeneration": "vipllava",
    }
)


# listed classes whose forward applies the decoder's `lm_head` alone (transformers 5.25: `logits =
# self.lm_head(hidden_states)`, nothing after it), so not its family's head-side scaling: LLaVA-NeXT around a
# Granite decoder (IBM's granite-vision-3.x releases) does not divide by Granite's logits_scaling, where
# GraniteForCausalLM does (docs/coverage.md §21). Aya-Vision, Granite-4-Vision, Granite-Docling and
# HyperCLOVAX-Vision apply their decoder's scaling themselves and are not here.
LM_HEAD_ONLY = frozenset(
    {
        "DeepseekVLForConditionalGeneration",
        "DeepseekVLHybridForConditionalGeneration",
        "Exaone4_5_ForConditionalGeneration",
        "FuyuForCausalLM",
        "GotOcr2ForConditionalGeneration",
        "Idefics2ForConditionalGeneration",
        "Idefics3ForConditionalGeneration",
        "InternVLForConditionalGeneration",
        "JanusForConditionalGeneration",
        "LightOnOcrForConditionalGeneration",
        "LlavaForConditionalGeneration",
        "LlavaNextForConditionalGeneration",
        "LlavaNextVideoForConditionalGeneration",
        "LlavaOnevisionForConditionalGeneration",
        "Ovis2ForConditionalGeneration",
        "SmolVLMForConditionalGeneration",
        "VideoLlama3ForConditionalGeneration",
        "VideoLlavaForConditionalGeneration",
        "VipLlavaForConditionalGeneration",
    }
)


def wrapped_decoder_recipe(text_model_type: str, architecture: str | None, recipes: Sequence[Recipe]) -> Recipe | None:
    """The recipe of the decoder family inside a listed multimodal class: the one that lists the
    text model_type with a `…ForCausalLM` class (Qwen2's also lists Qwen2.5-VL, whose full package
    --text-only leaves out). None: the class is not listed, or its decoder is not an exported family's."""
    if architecture not in WRAPPED_DECODERS:
        return None
    own = (
        r
        for r in recipes
        if text_model_type in r.model_types and any(a.endswith("ForCausalLM") for a in r.architectures)
    )
    return next(own, None)


def class_recipe(text_model_type: str, architecture: str | None, recipes: Sequence[Recipe]) -> Recipe:
    """The recipe a checkpoint of `architecture` builds with: one naming the class (Cohere2-Vision's), else
    for a listed class its decoder family's; `match_recipe`'s one line where neither matches. The build
    (source/checkpoint.match_builtin) and the coverage table (arch/coverage.py) both match through it."""
    try:
        return match_recipe(text_model_type, architecture, list(recipes))
    except InputError:
        wrapped = wrapped_decoder_recipe(text_model_type, architecture, recipes)
        if wrapped is None:
            raise
        return wrapped


# the classes whose images come as tokens of a VQ-VAE tokenizer, not a vision tower's features
_IMAGE_TOKENIZERS = frozenset({"ChameleonForConditionalGeneration", "Emu3ForConditionalGeneration"})

# a class whose tower feeds the decoder through another module than a projector: what it is
_TOWERS = MappingProxyType(
    {
        "Ernie4_5_VLMoeForConditionalGeneration": "vision tower and variable-resolution resampler are",
        "MuseSparkForConditionalGeneration": "vision tower and audio tower are",
    }
)

# a listed class whose own recipe builds the full package genai runs: its genai type (docs/multimodal.md §15)
# and what the package holds beside the decoder
_FULL_PACKAGE = MappingProxyType(
    {
        "Phi4MultimodalForCausalLM": (
            "phi4mm",
            "image and speech towers, the vision LoRA merged; docs/multimodal.md §15",
        ),
        "Phi3VForCausalLM": ("phi3v", "the HD-crop CLIP image tower; docs/multimodal.md §21"),
        "VideoChatFlashQwenForCausalLM": (
            "videochat_flash_qwen",
            "the UMT or InternVideo2 image tower and token-merging projector, images only; docs/coverage.md §36",
        ),
    }
)


# remote-code releases describe their towers by keys of their own, not a vision sub-config: Phi-3-vision's and
# Phi-4-multimodal's `embd_layer`, VideoChat-Flash's (LLaVA-style) `mm_vision_tower`
_RELEASE_TOWER_KEYS = ("embd_layer", "mm_vision_tower")


def text_only_package(architecture: str) -> str:
    """What the coverage table says a listed class exports."""
    if architecture in _FULL_PACKAGE:  # its image side (docs/multimodal.md §15, §21)
        genai_type, holds = _FULL_PACKAGE[architecture]
        return f"full multimodal ({genai_type}: {holds})"
    return "text decoder with --text-only (its towers are not built; genai runs no package for them)"


def towers_refusal(raw_config: Mapping[str, Any], recipe: Recipe) -> str | None:
    """What `build` says, without --text-only, of a checkpoint whose towers `recipe` does not build (exit 2),
    else None. One policy for every multimodal checkpoint (docs/coverage.md §21): a listed class, or any
    config carrying a vision or audio sub-config (Gemma-3n's, Llama-4's, Gemma-4-Unified's classes, whose own
    recipes match them) unless the recipe builds the full package genai runs for it. A package that silently
    dropped the images a user brought the checkpoint for would be the wrong package."""
    architecture = _first_architecture(raw_config) or str(raw_config.get("model_type", "?"))
    towers = config_towers(raw_config)
    if architecture in _FULL_PACKAGE:
        return None  # the full package (docs/multimodal.md §15, §21)
    if architecture in WRAPPED_DECODERS:  # even where its decoder family's recipe builds another class's full
        # package (Qwen2's builds Qwen2.5-VL's: LLaVA-OneVision's and InternVL's towers are not that one)
        what = "VQ-VAE image tokenizer is" if architecture in _IMAGE_TOKENIZERS else "vision tower and projector are"
        what, genai_type = _TOWERS.get(architecture, what), WRAPPED_DECODERS[architecture]
    elif recipe.multimodal_model_type and "vision" in towers:
        return None  # the full package (docs/multimodal.md §1)
    elif towers:
        what, genai_type = f"{' and '.join(towers)} tower{'s are' if len(towers) > 1 else ' is'}", "such"
        genai_type = str(raw_config.get("model_type") or genai_type)
    else:
        return None
    return (
        f"{architecture}'s {what} not built and onnxruntime-genai 0.18 runs no {genai_type} package; pass "
        f"--text-only to export its {recipe.arch} text decoder alone (it computes the class's logits on text prompts)"
    )


def carries_towers(raw_config: Mapping[str, Any]) -> bool:
    """Whether a checkpoint holds towers besides its decoder: a listed class, or a vision / audio sub-config
    (what --text-only acts on; a speculative draft, always a text decoder, gets the flag where this holds)."""
    return (
        _first_architecture(raw_config) in WRAPPED_DECODERS
        or bool(config_towers(raw_config))
        or any(raw_config.get(key) for key in _RELEASE_TOWER_KEYS)
    )


def _first_architecture(raw_config: Mapping[str, Any]) -> str | None:
    """config.json's first class name; None where `architectures` is missing or malformed (match_builtin refuses
    a malformed one in its own line)."""
    architectures = raw_config.get("architectures")
    first = architectures[0] if isinstance(architectures, list) and architectures else None
    return first if isinstance(first, str) else None


def config_towers(config: Mapping[str, Any]) -> list[str]:
    """The towers a config.json (or transformers' default config of a type) describes: "vision", "audio"."""
    return [name for name in ("vision", "audio") if config.get(f"{name}_config")]
