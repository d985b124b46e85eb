"""Llama: RMSNorm, SwiGLU MLP, rotary embeddings (default / linear / llama3), GQA or MHA."""

from gqa_export.arch.spec import ArchSpec

LLAMA = ArchSpec(name="llama")
