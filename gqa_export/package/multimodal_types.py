"""The onnxruntime-genai model types a full multimodal package can be: one frozen record each.

What differs per type, read by the build and by `run --image/--audio` alike: the tower row
(package/towers.py: how the tower's dims are read, its graph builder, its processor_config.json
writer, the genai_config keys, the audio encoder it carries), the prompt marker genai's processor
expands into an image's block, whether it reads adjacent markers as one image, whether the images
of one prompt must resize alike, and the markers of an audio tower (docs/multimodal.md §1, §2).
package/multimodal.py plans a build by it, runtime/images.py prepares a prompt by it. This module
imports nothing heavy: `run` reads it without the graph builders, which `tower()` imports only
when a build asks. Adding a type is one record here plus its tower row (docs/architecture.md §3.3).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from types import MappingProxyType, ModuleType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gqa_export.package.towers import VisionTower


@dataclass(frozen=True)
class MultimodalType:
    model_type: str  # genai_config's model.type of the full package (a recipe's multimodal_model_type)
    image_marker: str  # the prompt marker genai's processor expands into an image's block (§2)
    # its row of package/towers.py, imported on first use (the graph builders come with it)
    tower: Callable[[], VisionTower]
    # genai 0.18's processor reads a run of adjacent markers as one image: `run --image` separates
    # the markers it puts in front by newlines and refuses a written run (docs/multimodal.md §12)
    adjacent_markers_merge: bool = False
    # genai's vision step fails unless every image of a prompt resizes to the same patch count
    # (gemma4 in 0.18: a buffer sized for one image's tokens, docs/multimodal.md §13)
    one_image_size: bool = False
    # the prompt markers of its audio tower (whose row has `audio`): refused where the package has
    # no speech model (§13.5); the first is the one `run --audio` puts in front (§16.4)
    audio_markers: tuple[str, ...] = ()
    # genai's processor reads the number in `<|image_N|>` (phi3v: image N, each of 1..n once): `run --image`
    # puts `<|image_1|>` .. `<|image_n|>` in front, a prompt that has such markers is left as written
    numbered_markers: bool = False
    # genai 0.18's processor pads a prompt's images into the resized size of one of them and fails when none
    # is at least as tall and as wide as every other (lfm2_vl: 24 x 40 with 40 x 24, docs/multimodal.md §14.2)
    images_fit_one: bool = False
    # the token genai's processor writes, by its text, once per image feature: the build refuses a tokenizer
    # that does not give it the config's image_token_id (None: the type writes ids itself, phi3v's -N)
    placeholder: str | None = None


def _towers() -> ModuleType:
    """package/towers.py, imported when a build plans a tower (`run` never needs it)."""
    from gqa_export.package import towers

    return towers


QWEN_MARKER = "<|vision_start|><|image_pad|><|vision_end|>"
QWEN_PAD = "<|image_pad|>"

GEMMA3 = MultimodalType("gemma3", "<start_of_image>", lambda: _towers().GEMMA3, placeholder="<image_soft_token>")
QWEN2_5_VL = MultimodalType("qwen2_5_vl", QWEN_MARKER, lambda: _towers().QWEN2_5_VL, placeholder=QWEN_PAD)
# Qwen3-VL's tower row for all three: the tower's mechanisms are read from its tensors (§11.1)
QWEN3_VL = MultimodalType("qwen3_vl", QWEN_MARKER, lambda: _towers().QWEN3_VL, placeholder=QWEN_PAD)
QWEN3_5 = MultimodalType("qwen3_5", QWEN_MARKER, lambda: _towers().QWEN3_VL, placeholder=QWEN_PAD)
QWEN3_5_MOE = MultimodalType("qwen3_5_moe", QWEN_MARKER, lambda: _towers().QWEN3_VL, placeholder=QWEN_PAD)
MISTRAL3 = MultimodalType(
    "mistral3", "[IMG]", lambda: _towers().MISTRAL3, adjacent_markers_merge=True, placeholder="[IMG]"
)
GEMMA4 = MultimodalType(
    "gemma4",
    "<|image|>",
    lambda: _towers().GEMMA4,
    one_image_size=True,
    audio_markers=("<|audio|>", "<|audio>"),
    placeholder="<|image|>",
)
LFM2_VL = MultimodalType("lfm2_vl", "<image>", lambda: _towers().LFM2_VL, images_fit_one=True, placeholder="<image>")
# genai's phi4mm processor reads every <|image_N|> as the next image's block (the number is not
# read); `run --image` writes <|image_1|> per image, `run --audio` <|audio_1|> per clip (docs/multimodal.md §20)
PHI4MM = MultimodalType(
    "phi4mm", "<|image_1|>", lambda: _towers().PHI4MM, audio_markers=("<|audio_1|>",), placeholder="<|endoftext10|>"
)
# genai's phi3v processor reads <|image_N|> as image N's block (each of a prompt's images 1..n once;
# docs/multimodal.md §21)
PHI3V = MultimodalType("phi3v", "<|image_1|>", lambda: _towers().PHI3V, numbered_markers=True)
# genai's videochat_flash_qwen processor expands each <|vision_start|>...<|vision_end|> into a fixed count of
# <|image_pad|> (docs/coverage.md §36)
VIDEOCHAT_FLASH_QWEN = MultimodalType("videochat_flash_qwen", QWEN_MARKER, lambda: _towers().VIDEOCHAT_FLASH)

MULTIMODAL_TYPES: MappingProxyType[str, MultimodalType] = MappingProxyType(
    {
        kind.model_type: kind
        for kind in (
            GEMMA3,
            QWEN2_5_VL,
            QWEN3_VL,
            QWEN3_5,
            QWEN3_5_MOE,
            MISTRAL3,
            GEMMA4,
            LFM2_VL,
            PHI4MM,
            PHI3V,
            VIDEOCHAT_FLASH_QWEN,
        )
    }
)
