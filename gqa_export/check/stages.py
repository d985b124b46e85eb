"""Which graphs of a package genai runs, and when, read from its genai_config.json."""

from __future__ import annotations

from typing import Any


def decoder_stages(config: dict[str, Any]) -> list[tuple[str, str, bool, bool]]:
    """(graph file, stage, run on prompt, run on token generation) of each decoder graph genai runs:
    `decoder.filename`, or each `decoder.pipeline` stage."""
    decoder = (config.get("model") or {}).get("decoder") or {}
    pipeline = decoder.get("pipeline")
    if not pipeline:
        return [(decoder.get("filename", "model.onnx"), "decoder", True, True)]
    entries = pipeline if isinstance(pipeline, list) else [pipeline]
    return [
        (
            stage.get("filename", f"{sid}.onnx"),
            sid,
            stage.get("run_on_prompt", True),
            stage.get("run_on_token_gen", True),
        )
        for entry in entries
        for sid, stage in entry.items()
    ]


def encoder_stages(config: dict[str, Any]) -> list[tuple[str, str, bool, bool]]:
    """The vision and speech graphs (run once, on the prompt) and the embedding graph (every
    step) of a multimodal package's genai_config."""
    model = config.get("model") or {}
    stages = []
    for role, on_gen in (("vision", False), ("speech", False), ("embedding", True)):
        section = model.get(role) or {}
        if section.get("filename"):
            stages.append((section["filename"], role, True, on_gen))
    return stages
