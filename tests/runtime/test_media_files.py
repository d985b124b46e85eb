"""`run --image` files checked before onnxruntime-genai reads them (#34 item 11;
runtime/media_files.py). genai 0.18 reads PNG and JPEG only; any other file ends the whole process
in libjpeg ("Not a JPEG file: starts with 0x23 0x20", exit 1) and a JPEG cut inside its image data
makes the decoder loop forever (probed), so every such file must be refused here, naming it.
The command-level checks (the line, the exit code, audio) are in tests/package/multimodal/test_multimodal_commands.py
and tests/package/multimodal/test_multimodal_gemma4_audio.py."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest

from gqa_export.errors import InputError
from gqa_export.runtime.media_files import check_image

PIL = pytest.importorskip("PIL.Image")


def _encoded(fmt: str, mode: str = "RGB", **options: object) -> bytes:
    rng = np.random.default_rng(0)
    image = PIL.fromarray(rng.integers(0, 256, (40, 48, 3), dtype=np.uint8)).convert(mode)
    buffer = io.BytesIO()
    image.save(buffer, format=fmt, **options)
    return buffer.getvalue()


JPEG = _encoded("JPEG", quality=90)
SCAN = JPEG.find(b"\xff\xda")
PNG = _encoded("PNG")
READABLE = {
    "png": PNG,
    "jpeg": JPEG,
    "progressive-jpeg": _encoded("JPEG", progressive=True),
    "grey-png": _encoded("PNG", "L"),
    "rgba-png": _encoded("PNG", "RGBA"),
    "png-with-trailing-bytes": PNG + b"\x00" * 7,
    "jpeg-with-trailing-bytes": JPEG + b"\x00\x00",
}
REFUSED = {
    # name -> (bytes, what the line says)
    "text": (b"# gqa-export\n\nTurn a Hugging Face causal LM", "not an image"),
    "empty": (b"", "not an image (empty)"),
    "bmp": (_encoded("BMP"), "a BMP image"),
    "gif": (_encoded("GIF"), "a GIF image"),
    "webp": (_encoded("WEBP"), "a WebP image"),
    "tiff": (_encoded("TIFF"), "a TIFF image"),
    "png-cut-short": (PNG[: len(PNG) // 2], "a PNG file cut short"),
    "png-signature-only": (PNG[:8], "a PNG file cut short"),
    "jpeg-cut-in-its-headers": (JPEG[:100], "a JPEG file cut short"),  # libjpeg: exit(1)
    "jpeg-cut-at-its-scan": (JPEG[:SCAN], "a JPEG file cut short"),
    "jpeg-cut-in-its-data": (JPEG[: SCAN + 40], "a JPEG file cut short"),  # genai: loops forever
    "jpeg-without-its-end-marker": (JPEG[:-2], "a JPEG file cut short"),  # genai: loops forever
}


@pytest.mark.parametrize("name", list(READABLE))
def test_png_and_jpeg_pass(tmp_path, name):
    path = tmp_path / f"{name}.img"
    path.write_bytes(READABLE[name])
    check_image(path)


@pytest.mark.parametrize("name", list(REFUSED))
def test_what_genai_cannot_read_is_named(tmp_path, name):
    data, says = REFUSED[name]
    path = tmp_path / f"{name}.png"
    path.write_bytes(data)
    with pytest.raises(InputError) as caught:
        check_image(path)
    assert str(caught.value).startswith(f"--image {path}: {says}"), caught.value
    if "cut short" not in says:
        assert "reads PNG and JPEG images only" in str(caught.value)


def test_a_folder_or_nothing_is_no_such_file(tmp_path):
    for path in (tmp_path, tmp_path / "missing.png"):
        with pytest.raises(InputError, match=f"--image {path}: no such file"):
            check_image(Path(path))
