"""The `gqa-export` command line: parse arguments, call the library, print. Nothing else.

Each module registers its commands on the one Typer `app`; nothing under gqa_export imports this.
"""

# registration order is the order `--help` lists the commands in
from gqa_export.cli import export, requantize, package, release  # noqa: F401, I001  (registers the commands)
from gqa_export.cli.app import app, hide_torch, main

__all__ = ["app", "hide_torch", "main"]
