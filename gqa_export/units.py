"""Quantities as a person reads them, shared by the CLI's tables and the release's model card
(the card is written by the library, which never imports the CLI)."""

from __future__ import annotations


def size(n: float | None) -> str:
    """Bytes in binary units: "812 B", "3.4 MiB"; "?" when unknown."""
    if n is None:
        return "?"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{int(n)} B" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"
