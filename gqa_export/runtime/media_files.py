"""`run --image` / `--audio` files checked before onnxruntime-genai reads them.

genai 0.18 decodes images through onnxruntime-extensions, which reads PNG and JPEG only: any other
file is handed to libjpeg, whose error handler ends the whole process ("Not a JPEG file: starts
with 0x23 0x20", exit 1, no exception to catch), and a JPEG cut short inside its headers does the
same ("Improper call to JPEG library"), while one cut inside its image data makes the decoder loop
forever (probed, 0.18). So an image is checked here first: a PNG's chunks must run to IEND, a
JPEG's segments must reach a scan and its end marker (EOI) must follow; anything else is named
(BMP, GIF, WebP, TIFF, ... or not an image). Audio fails inside genai with an exception
(`[AudioDecoder]: Cannot detect audio stream format`), which `processor_failure` turns into one
line naming the file.
"""

from __future__ import annotations

import struct
from pathlib import Path

from gqa_export.errors import InputError

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
JPEG_SOI = b"\xff\xd8\xff"
# leading bytes of image formats genai cannot read, to name what the file is
OTHER_IMAGES = (
    (b"BM", "a BMP image"),
    (b"GIF8", "a GIF image"),
    (b"II*\x00", "a TIFF image"),
    (b"MM\x00*", "a TIFF image"),
    (b"\x00\x00\x01\x00", "an ICO image"),
)
CONVERT = "onnxruntime-genai reads PNG and JPEG images only: convert it (e.g. to PNG)"
CUT = "a {} file cut short (no end marker): the file is damaged or incomplete"


def check_image(path: Path) -> None:
    """InputError naming the file unless it is a whole PNG or JPEG (see the module docstring)."""
    if not path.is_file():
        raise InputError(f"--image {path}: no such file")
    data = path.read_bytes()
    if data.startswith(PNG_SIGNATURE):
        problem = _png_problem(data)
    elif data.startswith(JPEG_SOI):
        problem = _jpeg_problem(data)
    else:
        problem = f"{_what(data)}; {CONVERT}"
    if problem:
        raise InputError(f"--image {path}: {problem}")


def _what(data: bytes) -> str:
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "a WebP image"
    if data[4:8] == b"ftyp":
        return "a HEIF/AVIF image"
    for magic, name in OTHER_IMAGES:
        if data.startswith(magic):
            return name
    return "not an image (empty)" if not data else "not an image"


def _png_problem(data: bytes) -> str | None:
    """The chunks, length + type + data + CRC each, must run inside the file up to IEND."""
    at = len(PNG_SIGNATURE)
    while at + 8 <= len(data):
        length, kind = struct.unpack(">I4s", data[at : at + 8])
        at += 12 + length
        if at > len(data):
            break
        if kind == b"IEND":
            return None
    return CUT.format("PNG")


def _jpeg_problem(data: bytes) -> str | None:
    """Marker segments (FF xx + a 2-byte length) up to the first scan (SOS), then an end marker
    (EOI, FF D9: inside the scan data FF is always followed by 00 or a restart marker)."""
    at = 2
    while at + 4 <= len(data):
        if data[at] != 0xFF:
            return "not a valid JPEG file (a broken marker segment)"
        marker = data[at + 1]
        if marker == 0xFF:  # fill byte
            at += 1
            continue
        length = struct.unpack(">H", data[at + 2 : at + 4])[0]
        if marker == 0xDA:  # start of scan: the image data follows
            return None if data.find(b"\xff\xd9", at + 2 + length) >= 0 else CUT.format("JPEG")
        at += 2 + length
    return CUT.format("JPEG")


def processor_failure(exc: BaseException, images: list[Path], audios: list[Path]) -> InputError:
    """genai's processor failing on the files (an audio format it cannot read, an upsampling it
    does not do): one line naming them."""
    first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    named = [f"--image {p}" for p in images] + [f"--audio {p}" for p in audios]
    which = "it" if len(named) == 1 else "one of them"
    return InputError(f"{', '.join(named)}: onnxruntime-genai cannot read {which} ({first})")
