"""The `gqa-export` command line: parse arguments, call the library, print. Nothing else.

Each module registers its commands on the one Typer `app`; nothing under gqa_export imports this.
"""

from gqa_export.cli import export, package, release  # noqa: F401  (registers the commands)
from gqa_export.cli.app import app, hide_torch, main

__all__ = ["app", "hide_torch", "main"]
