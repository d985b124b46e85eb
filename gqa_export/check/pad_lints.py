"""The pad-id lint: a genai_config `pad_token_id` that prompts can hold (docs/ortgenai.md §5.4).

onnxruntime-genai takes a prompt's trailing pad ids for padding (the first token is sampled from
an earlier position) and a windowed package's first pad id for the prompt's end. A package whose
pad id is an eos/bos id therefore generates other tokens than the model for prompts ending with
(windowed: holding) eos or bos; `inspect` warns.
"""

from __future__ import annotations

from gqa_export.check.findings import Finding
from gqa_export.check.reader import Package
from gqa_export.model.config_reads import token_ids

FIX = (
    "rebuild with gqa-export, which pads with an unused embedding row or the model's pad token where the "
    "checkpoint has one (docs/ortgenai.md §5.4); `gqa-export run` feeds a prompt's trailing pad ids apart"
)


def pad_findings(pkg: Package, _: int) -> list[Finding]:
    model = (pkg.config or {}).get("model") or {}
    pad = model.get("pad_token_id")
    if not isinstance(pad, int) or "decoder" not in model:
        return []
    bos = model.get("bos_token_id")  # a hand-edited config may hold a list or an object here
    special = {*token_ids(model.get("eos_token_id")), *([bos] if isinstance(bos, int) else [])}
    decoder = model.get("decoder") if isinstance(model.get("decoder"), dict) else {}
    window = decoder.get("sliding_window") if isinstance(decoder.get("sliding_window"), dict) else {}
    windowed = bool(window.get("slide_inputs"))
    if pad in special and windowed:
        return [
            Finding("windowed-pad-id", "warning",
                    f"pad_token_id {pad} is an eos/bos id: onnxruntime-genai's windowed inputs end a prompt at its "
                    f"first {pad} (a chat's earlier turns are lost)", FIX)
        ]  # fmt: skip
    if pad in special:
        return [
            Finding("pad-id-eos", "warning",
                    f"pad_token_id {pad} is an eos/bos id: onnxruntime-genai samples the first token of a prompt "
                    f"ending with {pad} from the position before it (a batch row's trailing {pad} is masked)", FIX)
        ]  # fmt: skip
    return []
