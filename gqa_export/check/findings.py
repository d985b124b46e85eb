"""One lint finding: a stable id, a severity and a one-line fix (shared by every lint module)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Finding:
    id: str
    severity: str  # error | warning | info
    message: str
    fix: str
