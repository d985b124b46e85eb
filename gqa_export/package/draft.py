"""A draft model inside a target package: speculative decoding (docs/speculative.md).

onnxruntime-genai 0.18 reads a `model.draft` decoder block (its `filename` relative to the config
folder) and a top-level `speculative` block. The draft's graph is stored flat next to the target's
(`draft.onnx` + `draft.onnx.data`), so the package stays one folder level that `verify` lists.
What the runtime cannot rewind is refused here in one line (docs/speculative.md §4).
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

from gqa_export.errors import InputError
from gqa_export.jsonio import read_json
from gqa_export.request.records import SpeculativeOptions

DRAFT_GRAPH = "draft.onnx"
DRAFT_DATA = "draft.onnx.data"
# tokenizer.json parts that fix which id a text maps to (docs/speculative.md §3)
_TOKENIZER_PARTS = ("model", "added_tokens", "normalizer", "pre_tokenizer")


Tuning = tuple[int | None, int | None, bool]  # run's --draft-tokens, --min-adaptive-k, --cooldown


def ngram_options(ngram: int | None, path: Path, tuning: Tuning = (None, None, False)) -> dict[str, Any] | None:
    """`--ngram N` (+ `tuning`: --draft-tokens, --min-adaptive-k, --cooldown) as genai's run-time
    speculative options, in the ranges of a draft package's block; refused where genai refuses it."""
    draft_tokens, min_k, cooldown = tuning
    if ngram is None:
        if draft_tokens is not None or min_k is not None or cooldown:
            raise InputError(
                "--draft-tokens/--min-adaptive-k/--cooldown tune --ngram runs (a draft package's are set by "
                "build --draft): add --ngram N or drop them"
            )
        return None
    if not 2 <= ngram <= 16:
        raise InputError(f"--ngram takes a key length between 2 and 16, got {ngram}")
    if "draft" in ((read_json(path / "genai_config.json") or {}).get("model") or {}):
        raise InputError(f"{path} carries a draft model; n-gram lookup cannot be combined with it: drop --ngram")
    SpeculativeOptions(4 if draft_tokens is None else draft_tokens, min_k or 0, cooldown).check()
    given = {"max_draft_tokens": draft_tokens, "min_adaptive_k": min_k, "cooldown": cooldown or None}
    return {"ngram_size": ngram, **{k: v for k, v in given.items() if v is not None}}


def rewind_refusal(package: Path, role: str) -> str | None:
    """Why onnxruntime-genai cannot verify drafted tokens with this package (None: it can).

    Draft verification rewinds the KV cache to the last accepted token; a recurrent state, a
    window-sized (physically sliding) cache or a decoder pipeline cannot be rewound, and pruned
    logits make verification token by token (docs/speculative.md §4)."""
    config = read_json(package / "genai_config.json") or {}
    decoder = (config.get("model") or {}).get("decoder") or {}
    if "pipeline" in decoder:  # asked for, or the recipe's auto choice (bidirectional image-token runs)
        return (
            f"the {role} is a decoder pipeline (--attention split, or its recipe's auto choice), which cannot be "
            "rewound; pass --attention gqa to build --draft (target and draft both take it)"
        )
    if "vision" in (config.get("model") or {}):  # genai's multimodal path with a draft was not probed
        return f"the {role} is a full multimodal package; export it with --text-only"
    return graph_refusal(_facts(package / decoder["filename"]), role)


def graph_refusal(facts: Any, role: str) -> str | None:
    """rewind_refusal's graph part, from one graph's facts (package/graph_facts.py)."""
    if facts.conv_layers or facts.recurrent_layers:
        return f"the {role} carries recurrent/convolution state, which onnxruntime-genai cannot rewind"
    if facts.window_cache_layers:
        return (
            f"the {role} keeps window-sized (sliding) KV caches, which cannot be rewound; "
            "drop attention.sliding_window_cache"
        )
    if _pruned(facts):
        return f"the {role} has last-token logits (--prune-lm-head); build with --no-prune-lm-head"
    return None


def _pruned(facts: Any) -> bool:
    logits = facts.outputs.get("logits", ("", ()))[1]
    return len(logits) > 1 and logits[1] == 1


def _vocab(facts: Any) -> Any:
    logits = facts.outputs.get("logits", ("", ()))[1]
    return logits[-1] if logits else None


def _facts(path: Path) -> Any:
    from gqa_export.package.graph_facts import graph_facts

    return graph_facts(_load_graph(path))


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
    t_tok, d_tok = tokenizer_parts(target), tokenizer_parts(draft)
    if t_tok != d_tok:
        part = next((p for p in _TOKENIZER_PARTS if t_tok.get(p) != d_tok.get(p)), "tokenizer files")
        return f"its tokenizer ({part}) maps text to other token ids than the target's"
    return None


def tokenizer_digest(package: Path) -> str:
    """sha256 of the id-defining tokenizer parts: the manifest keeps the draft's, so `inspect` can
    tell when the package's tokenizer is no longer the one the draft was paired with."""
    text = json.dumps(tokenizer_parts(package), sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


def tokenizer_parts(package: Path) -> dict[str, Any]:
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
        "tokenizer": tokenizer_digest(draft),
        "layers": d_decoder.get("num_hidden_layers"),
        "files": [DRAFT_GRAPH, DRAFT_DATA] if (target / DRAFT_DATA).exists() else [DRAFT_GRAPH],
        "speculative": options.as_json(),
    }


def _external_tensors(graph: Any) -> list[Any]:
    import onnx

    return [t for t in graph.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL]


def draft_problems(package: Path) -> list[str]:
    """What is wrong with a package's draft pairing, one line each (empty: none, or no draft)."""
    return [message for _, message in pairing_problems(package)]


def pairing_problems(package: Path) -> list[tuple[str, str]]:
    """(lint id, message) for each way a package's draft pairing breaks what onnxruntime-genai
    needs (docs/speculative.md §7): the speculative options, one logits vocabulary, the same
    provider entries, the tokenizer the draft was paired with, caches it can rewind and a logits
    row per token in both graphs. `inspect` reports them; `build --draft` asserts there are none."""
    config = read_json(package / "genai_config.json") or {}
    model = config.get("model") or {}
    draft = model.get("draft")
    if not isinstance(draft, dict):
        return []
    out = [("draft-options", p) for p in _option_problems(config.get("speculative"))]
    decoder = model.get("decoder") or {}
    if (draft.get("session_options") or {}).get("provider_options") != (decoder.get("session_options") or {}).get(
        "provider_options"
    ):
        out.append(("draft-ep", "model.draft's provider_options differ from model.decoder's (genai refuses the pair)"))
    if "pipeline" in draft:
        out.append(("draft-rewind", "model.draft is a decoder pipeline, which onnxruntime-genai cannot rewind"))
    recorded = ((read_json(package / "manifest.json") or {}).get("options") or {}).get("draft") or {}
    if recorded.get("tokenizer") and recorded["tokenizer"] != tokenizer_digest(package):
        out.append(("draft-tokenizer", "the package's tokenizer is not the one the draft was paired with"))
    graph = package / str(draft.get("filename"))
    if not graph.is_file():
        return [*out, ("draft-missing", f"model.draft.filename {graph.name} is missing")]
    facts = _facts(graph)
    reason = graph_refusal(facts, "draft")
    if reason:
        out.append(("draft-pruned-logits" if _pruned(facts) else "draft-rewind", reason))
    target = package / str(decoder.get("filename"))
    target_facts = _facts(target) if target.is_file() and "pipeline" not in decoder else None
    if target_facts is not None and _pruned(target_facts):
        out.append(("draft-pruned-logits", "the target has last-token logits: drafted tokens are verified one by one"))
    width = _vocab(facts) or "?"
    target_width = (_vocab(target_facts) if target_facts is not None else None) or model.get("vocab_size")
    if width != target_width or width != model.get("vocab_size"):
        out.append(
            ("draft-vocab", f"the draft's logits vocabulary {width} != the target's {target_width} "
             f"(vocab_size {model.get('vocab_size')}); genai refuses the pair")
        )  # fmt: skip
    return out


def _option_problems(spec: Any) -> list[str]:
    """The `speculative` block a draft package needs, in the ranges genai 0.18 takes (§1)."""
    if not isinstance(spec, dict) or "max_draft_tokens" not in spec:
        return ["genai_config.json has model.draft but no speculative.max_draft_tokens"]
    if "ngram_size" in spec:
        return ["speculative.ngram_size cannot be combined with model.draft"]
    try:
        SpeculativeOptions(spec["max_draft_tokens"], spec.get("min_adaptive_k", 0), spec.get("cooldown", False)).check()
    except InputError as err:
        return [f"speculative: {err}"]
    return []
