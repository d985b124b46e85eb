"""`gqa-export run PKG --image FILE [--audio FILE] --prompt TEXT`: generation from a full
multimodal package through onnxruntime-genai's MultiModalProcessor (docs/multimodal.md §2, §16).

The processor expands each image (and audio) marker of the prompt into the model's block; a
prompt without a marker gets one per image (and clip) in front of it, so `--prompt "Describe it"`
works as is.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from gqa_export.errors import InputError
from gqa_export.jsonio import read_json
from gqa_export.runtime.image_tiling import tiling_note
from gqa_export.runtime.media_files import check_image, processor_failure
from gqa_export.runtime.providers import explain_load_failure
from gqa_export.runtime.run import GenerationResult, Sampling, adds_bos, load, stream
from gqa_export.runtime.standalone import check_generates

# genai model type -> the prompt marker its processor expands (docs/multimodal.md §2)
QWEN_MARKER = "<|vision_start|><|image_pad|><|vision_end|>"
QWEN_TYPES = ("qwen2_5_vl", "qwen3_vl", "qwen3_5", "qwen3_5_moe")
IMAGE_MARKERS = {
    "gemma3": "<start_of_image>",
    "gemma4": "<|image|>",
    "mistral3": "[IMG]",
    "lfm2_vl": "<image>",
    **dict.fromkeys(QWEN_TYPES, QWEN_MARKER),
}
# markers genai 0.18's processor merges when adjacent: the run takes the first image, the other
# images' blocks go after the first [INST] or in front of the prompt (docs/multimodal.md §12)
RUN_AS_ONE_IMAGE = frozenset({"[IMG]"})
# genai model type -> prompt markers of an audio tower, refused where the package has no speech
# model (docs/multimodal.md §13.5); the first is the one `run --audio` inserts (§16.4)
UNEXPORTED_MARKERS = {"gemma4": ("<|audio|>", "<|audio>")}
# genai model types whose vision step fails unless every image of a prompt resizes to the same
# patch count (gemma4 in 0.18: a buffer sized for one image's tokens, docs/multimodal.md §13)
ONE_IMAGE_SIZE = {"gemma4"}


def image_marker(package: Path) -> str:
    """The package's image marker, or InputError when it has no vision model genai can feed."""
    model = ((read_json(package / "genai_config.json") or {}).get("model")) or {}
    if "vision" not in model:
        raise InputError(f"{package} has no vision model (a text-only package): rebuild it without --text-only")
    marker = IMAGE_MARKERS.get(str(model.get("type")))
    if marker is None:
        raise InputError(f"--image is not supported for model type '{model.get('type')}' yet")
    return marker


def bos_text(package: Path) -> str | None:
    """The BOS token's text where HF's tokenizer puts it in front of plain text (run.adds_bos)."""
    if not adds_bos(package):
        return None
    token = (read_json(package / "tokenizer_config.json") or {}).get("bos_token")
    if isinstance(token, dict):  # an AddedToken written out
        token = token.get("content")
    return token if isinstance(token, str) else None


def with_markers(prompt: str, marker: str, images: int) -> str:
    """The prompt with one marker per image: as written when it has them, else prepended. Where
    genai's processor reads a run of adjacent markers as one image (RUN_AS_ONE_IMAGE), prepended
    markers are separated by a newline, and a written run of them is refused."""
    found = prompt.count(marker)
    separate = marker in RUN_AS_ONE_IMAGE
    if found == 0:
        return ("\n".join([marker] * images) + "\n" if separate and images > 1 else marker * images) + prompt
    if found != images:
        raise InputError(f"the prompt has {found} '{marker}' markers for {images} --image files: make them equal")
    if separate and marker * 2 in prompt:
        raise InputError(
            f"onnxruntime-genai reads adjacent '{marker}{marker}' markers as one image and moves the other "
            "images to the front: put text or a newline between the markers"
        )
    return prompt


def check_unexported_markers(package: Path, prompt: str) -> None:
    """Refuse a prompt whose marker names a tower the package lacks: its placeholders would run
    without features (genai skips audio without a speech model; HF embeds them as pad)."""
    model = ((read_json(package / "genai_config.json") or {}).get("model")) or {}
    if (model.get("speech") or {}).get("filename"):
        return
    for marker in UNEXPORTED_MARKERS.get(str(model.get("type")), ()):
        if marker in prompt:
            raise InputError(f"the prompt has {marker}, but this package exports no audio tower: remove the marker")


def audio_marker(package: Path, prompt: str, clips: int) -> str:
    """The prompt with the package's audio marker: as written when it has one, else put in
    front. genai 0.18 runs one clip per prompt (its gemma4 processor refuses more)."""
    model = ((read_json(package / "genai_config.json") or {}).get("model")) or {}
    markers = UNEXPORTED_MARKERS.get(str(model.get("type")), ())
    if not (model.get("speech") or {}).get("filename") or not markers:
        raise InputError(
            f"{package} has no speech model: --audio needs a package built from a checkpoint with an audio tower"
        )
    if clips != 1:
        raise InputError(f"onnxruntime-genai runs one audio clip per prompt, got {clips} --audio files: give one")
    found = prompt.count(markers[0])
    if found > 1:
        raise InputError(f"the prompt has {found} '{markers[0]}' markers for one --audio file: keep one")
    return prompt if found else markers[0] + prompt


def _check_image_sizes(package: Path, inputs: object, images: int) -> None:
    """Refuse, in one line, images onnxruntime-genai would fail on with a buffer-shape error."""
    model_type = ((read_json(package / "genai_config.json") or {}).get("model") or {}).get("type")
    if images < 2 or model_type not in ONE_IMAGE_SIZE:
        return
    counts = sorted({int(n) for n in inputs["num_image_tokens"].as_numpy().reshape(-1)})  # type: ignore[index]
    if len(counts) > 1:
        raise InputError(
            f"onnxruntime-genai runs several {model_type} images only when they resize alike (image tokens "
            f"{counts}): give images of one size, or one --image"
        )


def generate_with_images(
    package: Path,
    ep: str,
    prompt: str,
    images: list[Path],
    max_new_tokens: int,
    sampling: Sampling,
    on_text: Callable[[str], None] | None = None,
    audios: list[Path] | None = None,
) -> GenerationResult:
    """Process (prompt, images, audio), then generate through run.stream (the loop, timing and note
    the text prompts get), calling `on_text` with each decoded piece."""
    import onnxruntime_genai as og

    check_generates(package)
    for image in images:  # a file genai cannot decode ends the process or hangs it (media_files.py)
        check_image(image)
    for file in audios or []:
        if not file.is_file():
            raise InputError(f"--audio {file}: no such file")
    text = audio_marker(package, prompt, len(audios)) if audios else prompt  # after the image markers
    text = with_markers(text, image_marker(package), len(images)) if images else text
    bos = bos_text(package)
    if bos and not text.startswith(bos):  # HF's processor tokenizes with the BOS; genai's never adds it
        text = bos + text
    try:
        model = load(package, ep)
    except Exception as exc:  # onnxruntime-genai raises RuntimeError for everything
        raise InputError(explain_load_failure(exc, package, ep)) from None
    try:
        payload = {
            "images": og.Images.open(*map(str, images)) if images else None,
            "audios": og.Audios.open(*map(str, audios)) if audios else None,
        }
        inputs = model.create_multimodal_processor()(text, **payload)
    except Exception as exc:  # onnxruntime-genai raises RuntimeError for everything
        raise processor_failure(exc, images, audios or []) from None
    _check_image_sizes(package, inputs, len(images))
    result = stream(package, model, inputs, max_new_tokens, sampling, on_text or (lambda _: None), ep)
    tiled = tiling_note(package, images)  # lfm2_vl: images HF would tile (docs/multimodal.md §14.2)
    return replace(result, note="; ".join(n for n in (result.note, tiled) if n)) if tiled else result
