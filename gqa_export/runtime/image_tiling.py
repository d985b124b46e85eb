"""The images an LFM2-VL package's runtime processor treats unlike HF's (docs/multimodal.md §14.2).

HF's Lfm2VlImageProcessor cuts an image above its size threshold into tiles plus a thumbnail;
onnxruntime-genai 0.18's lfm2_vl processor never tiles and resizes it whole, so the prompt's
tokens, and what the model generates, differ from HF's for such an image. The build records HF's
rule in the manifest (`model.hf_image_tiling`); `run --image` reads each image's size from its
PNG or JPEG header (PIL is not a runtime dependency) and says, in the run's note, which images
cross it and the square they fit in to avoid it. Other formats are not sized, so not noted.
"""

from __future__ import annotations

import math
import struct
from pathlib import Path
from typing import Any

from gqa_export.jsonio import read_json

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
# JPEG start-of-frame markers (baseline, progressive, lossless ...): C4, C8 and CC are not frames
JPEG_FRAMES = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
JPEG_BARE = frozenset({0x01, *range(0xD0, 0xDA)})  # markers without a length field (RSTn, SOI, EOI...)


def image_size(path: Path) -> tuple[int, int] | None:
    """(height, width) in pixels from a PNG or JPEG header; None for another format or a header
    that does not parse (the image is then not noted, never refused)."""
    with path.open("rb") as f:
        head = f.read(24)
        if head.startswith(PNG_SIGNATURE) and head[12:16] == b"IHDR":
            width, height = struct.unpack(">II", head[16:24])
            return height, width
        if not head.startswith(b"\xff\xd8"):
            return None
        f.seek(2)
        while True:
            byte = f.read(1)
            while byte == b"\xff":  # fill bytes before the marker code
                byte = f.read(1)
            if not byte:
                return None
            marker = byte[0]
            if marker in JPEG_BARE:
                continue
            length = f.read(2)
            if len(length) < 2:
                return None
            if marker in JPEG_FRAMES:
                frame = f.read(5)  # precision, height, width
                return (struct.unpack(">HH", frame[1:5])) if len(frame) == 5 else None
            f.seek(struct.unpack(">H", length)[0] - 2, 1)
            byte = f.read(1)
            if byte != b"\xff":
                return None


def hf_tiles(height: int, width: int, rule: dict[str, Any]) -> bool:
    """HF's `_is_image_too_large`: each side rounded (Python's half-to-even round) to a multiple of
    patch·factor, at least one patch; tiled when their product exceeds the token budget's pixels
    times the tolerance."""
    patch, factor = int(rule["encoder_patch_size"]), int(rule["downsample_factor"])
    unit = patch * factor
    rows = max(patch, round(height / unit) * unit)
    cols = max(patch, round(width / unit) * unit)
    return rows * cols > int(rule["max_image_tokens"]) * unit * unit * float(rule["max_pixels_tolerance"])


def largest_square(rule: dict[str, Any]) -> int:
    """The largest N for which an N x N image (so any image fitting in it) is not tiled."""
    unit = int(rule["encoder_patch_size"]) * int(rule["downsample_factor"])
    side = math.isqrt(int(int(rule["max_image_tokens"]) * float(rule["max_pixels_tolerance"]))) * unit + unit
    while hf_tiles(side, side, rule):
        side -= 1
    return side


def tiling_note(package: Path, images: list[Path]) -> str | None:
    """The run's note for the images HF's processor would tile, or None (no rule, none crosses it)."""
    rule = ((read_json(package / "manifest.json") or {}).get("model") or {}).get("hf_image_tiling")
    if not rule:
        return None
    tiled = []
    for image in images:
        size = image_size(image)
        if size is not None and hf_tiles(*size, rule):
            tiled.append(f"{image.name} ({size[1]} x {size[0]})")
    if not tiled:
        return None
    side = largest_square(rule)
    return (
        f"HF's processor tiles {', '.join(tiled)}; onnxruntime-genai's lfm2_vl processor resizes it whole, so "
        f"the tokens differ from HF's tiled processing: resize the image to fit within {side} x {side} to match"
    )
