"""Llama-shaped families and their mixtures of experts (issue #24), kept apart from families.py so
neither module grows past a screenful. Only what differs from the Llama defaults is written down;
the registry (arch/__init__.py) reads `CLASSIC` beside `families.ALL`."""

from __future__ import annotations

from gqa_export.arch.spec import ArchSpec

# Seed-OSS: Llama with a head_dim decoupled from hidden / heads and q/k/v biases without an o_proj
# bias (attention_out_bias); both are read from the config and the checkpoint, so nothing to declare
SEED_OSS = ArchSpec(name="seed_oss")
# Arcee (AFM): Llama with a non-gated squared-ReLU MLP (up -> relu^2 -> down)
ARCEE = ArchSpec(name="arcee", mlp="plain", activations=("relu2",))

CLASSIC = (SEED_OSS, ARCEE)
