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
from typing import Any

from gqa_export.errors import InputError
from gqa_export.jsonio import read_json
from gqa_export.package.multimodal_types import MULTIMODAL_TYPES, MultimodalType
from gqa_export.runtime.image_tiling import tiling_note
from gqa_export.runtime.media_files import check_image, processor_failure
from gqa_export.runtime.providers import explain_load_failure
from gqa_export.runtime.run import GenerationResult, Sampling, adds_bos, load, stream
from gqa_export.runtime.standalone import check_generates

# genai model type -> the prompt markers of its audio tower (package/multimodal_types.py)
UNEXPORTED_MARKERS = {kind.model_type: kind.audio_markers for kind in MULTIMODAL_TYPES.values() if kind.audio_markers}


def _model(package: Path) -> dict[str, Any]:
    return ((read_json(package / "genai_config.json") or {}).get("model")) or {}


def image_type(package: Path) -> MultimodalType:
    """The package's multimodal type, or InputError when it has no vision model genai can feed."""
    model = _model(package)
    if "vision" not in model:
        raise InputError(f"{package} has no vision model (a text-only package): rebuild it without --text-only")
    kind = MULTIMODAL_TYPES.get(str(model.get("type")))
    if kind is None:
        raise InputError(f"--image is not supported for model type '{model.get('type')}' yet")
    return kind


def bos_text(package: Path) -> str | None:
    """The BOS token's text where HF's tokenizer puts it in front of plain text (run.adds_bos)."""
    if not adds_bos(package):
        return None
    token = (read_json(package / "tokenizer_config.json") or {}).get("bos_token")
    if isinstance(token, dict):  # an AddedToken written out
        token = token.get("content")
    return token if isinstance(token, str) else None


def with_markers(prompt: str, kind: MultimodalType, images: int) -> str:
    """The prompt with one of the type's markers per image: as written when it has them, else
    prepended. Where genai's processor reads a run of adjacent markers as one image
    (`adjacent_markers_merge`), prepended markers are separated by a newline, and a written run of
    them is refused."""
    if kind.numbered_markers:  # image N's marker names it (genai's phi3v)
        written = "<|image_" in prompt
        return prompt if written else "".join(f"<|image_{n}|>\n" for n in range(1, images + 1)) + prompt
    marker = kind.image_marker
    found = prompt.count(marker)
    separate = kind.adjacent_markers_merge
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
    model = _model(package)
    if (model.get("speech") or {}).get("filename"):
        return
    for marker in UNEXPORTED_MARKERS.get(str(model.get("type")), ()):
        if marker in prompt:
            raise InputError(f"the prompt has {marker}, but this package exports no audio tower: remove the marker")


def audio_marker(package: Path, prompt: str, clips: int) -> str:
    """The prompt with the package's audio marker: as written when it has one, else put in
    front. genai 0.18 runs one clip per prompt (its gemma4 processor refuses more)."""
    model = _model(package)
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


def _check_positions(package: Path, inputs: Any) -> None:
    """Refuse, in one line, an image genai's resize makes more patches wide or tall than the tower's
    position table holds (the manifest's model.vision_position_limit, Gemma-4): HF's lookup raises
    IndexError there and the vision model's Gather fails (docs/multimodal.md §13.4)."""
    limit = ((read_json(package / "manifest.json") or {}).get("model") or {}).get("vision_position_limit")
    if not isinstance(limit, int) or "pixel_position_ids" not in inputs:
        return
    reach = int(inputs["pixel_position_ids"].as_numpy().max()) + 1
    if reach > limit:
        raise InputError(
            f"an image is {reach} patches wide or tall after onnxruntime-genai's resize, past the {limit} patch "
            "positions of the vision tower's table (HF cannot run it either): give a less elongated image"
        )


def _check_image_sizes(package: Path, inputs: object, images: int) -> None:
    """Refuse, in one line, images onnxruntime-genai would fail on with a buffer-shape error."""
    _check_positions(package, inputs)
    model_type = _model(package).get("type")
    kind = MULTIMODAL_TYPES.get(str(model_type))
    if images < 2 or kind is None or not kind.one_image_size:
        return
    counts = sorted({int(n) for n in inputs["num_image_tokens"].as_numpy().reshape(-1)})  # type: ignore[index]
    if len(counts) > 1:
        raise InputError(
            f"onnxruntime-genai runs several {model_type} images only when they resize alike (image tokens "
            f"{counts}): give images of one size, or one --image"
        )


def _processor_failure(package: Path, exc: BaseException, images: list[Path], audios: list[Path]) -> InputError:
    """genai's processor failing: where its type cannot pad several images of other orientations into one
    batch (MultimodalType.images_fit_one), that is said in one line; else the files are named."""
    kind = MULTIMODAL_TYPES.get(str(_model(package).get("type")))
    if kind is None or not kind.images_fit_one or len(images) < 2:
        return processor_failure(exc, images, audios)
    first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    return InputError(
        f"onnxruntime-genai's {kind.model_type} processor pads a prompt's images into the size of one of them "
        f"and fails when none, resized, is at least as tall and as wide as every other ({first}): give images of "
        "one orientation, or one --image"
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
    text = with_markers(text, image_type(package), len(images)) if images else text
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
        raise _processor_failure(package, exc, images, audios or []) from None
    _check_image_sizes(package, inputs, len(images))
    result = stream(package, model, inputs, max_new_tokens, sampling, on_text or (lambda _: None), ep)
    tiled = tiling_note(package, images)  # lfm2_vl: images HF would tile (docs/multimodal.md §14.2)
    return replace(result, note="; ".join(n for n in (result.note, tiled) if n)) if tiled else result
