"""A draft model inside a target package: speculative decoding (docs/speculative.md).

onnxruntime-genai 0.18 reads a `model.draft` decoder block (its `filename` relative to the config
folder) and a top-level `speculative` block. The draft's graph is stored flat next to the target's
(`draft.onnx` + `draft.onnx.data`), so the package stays one folder level that `verify` lists.
What the runtime cannot rewind is refused here in one line (docs/speculative.md §4).
"""

from __future__ import annotations

import json
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from gqa_export.errors import InputError
from gqa_export.jsonio import read_json

DRAFT_GRAPH = "draft.onnx"
DRAFT_DATA = "draft.onnx.data"
# tokenizer.json parts that fix which id a text maps to (docs/speculative.md §3)
_TOKENIZER_PARTS = ("model", "added_tokens", "normalizer", "pre_tokenizer")


@dataclass(frozen=True)
class SpeculativeOptions:
    """The `speculative` block (docs/speculative.md §1): max_draft_tokens in 1..16 as genai 0.18 enforces
    it (probed); min_adaptive_k, the floor adaptive k may fall to, kept within it."""

    max_draft_tokens: int = 4
    min_adaptive_k: int = 0
    cooldown: bool = False

    def check(self) -> None:
        if not 1 <= self.max_draft_tokens <= 16:
            raise InputError(f"--draft-tokens must be between 1 and 16, got {self.max_draft_tokens}")
        if not 0 <= self.min_adaptive_k <= min(16, self.max_draft_tokens):
            raise InputError(
                f"--min-adaptive-k must be between 0 and --draft-tokens ({self.max_draft_tokens}), "
                f"got {self.min_adaptive_k}"
            )

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def rewind_refusal(package: Path, role: str) -> str | None:
    """Why onnxruntime-genai cannot verify drafted tokens with this package (None: it can).

    Draft verification rewinds the KV cache to the last accepted token; a recurrent state, a
    window-sized (physically sliding) cache or a decoder pipeline cannot be rewound, and pruned
    logits make verification token by token (docs/speculative.md §4)."""
    from gqa_export.check.graph_facts import graph_facts

    config = read_json(package / "genai_config.json") or {}
    decoder = (config.get("model") or {}).get("decoder") or {}
    if "pipeline" in decoder:
        return f"the {role} is a decoder pipeline (--attention split); export it with --attention gqa or bias"
    if "vision" in (config.get("model") or {}):  # genai's multimodal path with a draft was not probed
        return f"the {role} is a full multimodal package; export it with --text-only"
    facts = graph_facts(_load_graph(package / decoder["filename"]))
    if facts.conv_layers or facts.recurrent_layers:
        return f"the {role} carries recurrent/convolution state, which onnxruntime-genai cannot rewind"
    if facts.window_cache_layers:
        return (
            f"the {role} keeps window-sized (sliding) KV caches, which cannot be rewound; "
            "drop attention.sliding_window_cache"
        )
    logits = facts.outputs.get("logits", ("", ()))[1]
    if len(logits) > 1 and logits[1] == 1:
        return f"the {role} has last-token logits (--prune-lm-head); build with --no-prune-lm-head"
    return None


def _load_graph(path: Path) -> Any:
    import onnx_ir as ir

    return ir.load(str(path))


def tokenizer_mismatch(target: Path, draft: Path) -> str | None:
    """How the draft's tokenizer differs from the target's (None: same vocabulary and ids)."""
    t_model = (read_json(target / "genai_config.json") or {}).get("model") or {}
    d_model = (read_json(draft / "genai_config.json") or {}).get("model") or {}
    for key in ("vocab_size", "bos_token_id", "eos_token_id", "pad_token_id"):
        if t_model.get(key) != d_model.get(key):
            return f"{key} {d_model.get(key)} differs from the target's {t_model.get(key)}"
    t_tok, d_tok = _tokenizer(target), _tokenizer(draft)
    if t_tok != d_tok:
        part = next((p for p in _TOKENIZER_PARTS if t_tok.get(p) != d_tok.get(p)), "tokenizer files")
        return f"its tokenizer ({part}) maps text to other token ids than the target's"
    return None


def _tokenizer(package: Path) -> dict[str, Any]:
    """The id-defining parts of the package's tokenizer (tokenizer.json, else tokenizer.model's bytes)."""
    data = read_json(package / "tokenizer.json")
    if data is not None:
        return {part: data.get(part) for part in _TOKENIZER_PARTS}
    model = package / "tokenizer.model"
    return {"model": model.read_bytes().hex() if model.is_file() else None}


def attach_draft(target: Path, draft: Path, options: SpeculativeOptions) -> dict[str, Any]:
    """Move the draft package's graph into `target` as draft.onnx(+.data) and write the
    `model.draft` and `speculative` blocks; returns the manifest's `options.draft` entry."""
    import onnx

    d_config = read_json(draft / "genai_config.json") or {}
    d_decoder = dict(d_config["model"]["decoder"])
    graph = onnx.load(str(draft / d_decoder["filename"]), load_external_data=False)
    data_files = set()
    for tensor in _external_tensors(graph):
        for entry in tensor.external_data:
            if entry.key == "location":
                data_files.add(entry.value)
                entry.value = DRAFT_DATA
    if len(data_files) > 1:
        raise InputError(f"the draft package stores its weights in {len(data_files)} files; expected one")
    if data_files:
        shutil.move(str(draft / data_files.pop()), str(target / DRAFT_DATA))
    onnx.save(graph, str(target / DRAFT_GRAPH))
    d_decoder["filename"] = DRAFT_GRAPH
    config = read_json(target / "genai_config.json") or {}
    config["model"]["draft"] = d_decoder
    config["speculative"] = options.as_json()
    (target / "genai_config.json").write_text(json.dumps(config, indent=2) + "\n")
    manifest = read_json(draft / "manifest.json") or {}
    return {
        "source": (manifest.get("source") or {}).get("id"),
        # the draft's own source entry (revision / commit / digests): a rebuilt release can tell
        # whether it paired the same draft
        "source_entry": manifest.get("source"),
        "precision": (manifest.get("options") or {}).get("precision"),
        "layers": d_decoder.get("num_hidden_layers"),
        "files": [DRAFT_GRAPH, DRAFT_DATA] if (target / DRAFT_DATA).exists() else [DRAFT_GRAPH],
        "speculative": options.as_json(),
    }


def _external_tensors(graph: Any) -> list[Any]:
    import onnx

    return [t for t in graph.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL]


def draft_problems(package: Path) -> list[str]:
    """What is wrong with a package's draft pairing (empty: none, or no draft): the block, the
    speculative options and the draft graph's logits vocabulary (the runtime's own check)."""
    config = read_json(package / "genai_config.json") or {}
    model = config.get("model") or {}
    if "draft" not in model:
        return []
    problems = []
    if not isinstance(config.get("speculative"), dict) or "max_draft_tokens" not in config["speculative"]:
        problems.append("genai_config.json has model.draft but no speculative.max_draft_tokens")
    graph = package / str(model["draft"].get("filename"))
    if not graph.is_file():
        return [*problems, f"model.draft.filename {graph.name} is missing"]
    from gqa_export.check.graph_facts import graph_facts

    logits = graph_facts(_load_graph(graph)).outputs.get("logits", ("", ()))[1]
    if not logits or logits[-1] != model.get("vocab_size"):
        problems.append(f"the draft's logits vocabulary {logits[-1] if logits else '?'} != {model.get('vocab_size')}")
    return problems
