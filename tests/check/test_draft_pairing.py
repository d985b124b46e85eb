"""`inspect` lints a draft pairing (docs/speculative.md §7): a good target + draft package has no
draft-* finding; each planted break (its genai_config, tokenizer or draft graph) is an error finding
with its own id; the draft-vocab break is one genai itself refuses."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from cli_runner import invoke

from gqa_export.package.draft import DRAFT_GRAPH, draft_problems
from gqa_export.runtime.run import generate_greedy

PROMPT = [0, 20, 31, 42, 53, 64, 75]


@pytest.fixture
def packages(draft_packages: dict[str, Path]) -> dict[str, Path]:
    return draft_packages


def _break_pairing(folder: Path, edit: str, other_vocab: Path) -> None:
    """One planted break of a good draft package (its genai_config, tokenizer or draft graph)."""
    import onnx

    config = json.loads((folder / "genai_config.json").read_text())
    model = config["model"]
    if edit == "drop_speculative":
        del config["speculative"]
    elif edit == "draft_tokens_17":
        config["speculative"]["max_draft_tokens"] = 17
    elif edit == "ngram_with_draft":
        config["speculative"]["ngram_size"] = 3
    elif edit == "other_provider":
        model["draft"]["session_options"]["provider_options"] = [{"cuda": {"enable_cuda_graph": "0"}}]
    elif edit == "draft_pipeline":
        model["draft"]["pipeline"] = [{"prefill": {"filename": DRAFT_GRAPH}}]
    elif edit == "tokenizer_ids_swapped":
        data = json.loads((folder / "tokenizer.json").read_text())
        vocab = data["model"]["vocab"]
        a, b = sorted(vocab, key=vocab.get)[100:102]
        vocab[a], vocab[b] = vocab[b], vocab[a]
        (folder / "tokenizer.json").write_text(json.dumps(data))
    elif edit == "other_vocab":
        shutil.copy(other_vocab / "model.onnx", folder / "other.onnx")
        shutil.copy(other_vocab / "model.onnx.data", folder / "model.onnx.data.other")
        _relocate(folder / "other.onnx", "model.onnx.data.other")
        model["draft"]["filename"] = "other.onnx"
    elif edit == "pruned_draft":
        graph = onnx.load(str(folder / DRAFT_GRAPH), load_external_data=False)
        logits = next(o for o in graph.graph.output if o.name == "logits")
        logits.type.tensor_type.shape.dim[1].dim_value = 1
        onnx.save(graph, str(folder / DRAFT_GRAPH))
    elif edit == "draft_missing":
        (folder / DRAFT_GRAPH).unlink()
    (folder / "genai_config.json").write_text(json.dumps(config))


PAIRING_BREAKS = {
    "drop_speculative": "draft-options",
    "draft_tokens_17": "draft-options",
    "ngram_with_draft": "draft-options",
    "other_provider": "draft-ep",
    "draft_pipeline": "draft-rewind",
    "tokenizer_ids_swapped": "draft-tokenizer",
    "other_vocab": "draft-vocab",
    "pruned_draft": "draft-pruned-logits",
    "draft_missing": "draft-missing",
}


def test_inspect_draft_pairing(packages, tmp_path):
    """`inspect` on a draft package: the good pair has no draft-* finding; each planted break
    (docs/speculative.md §7) is an error finding with its own id, and nothing else draft-*."""
    from gqa_export.check.report import inspect_package

    def draft_ids(folder: Path) -> set[str]:
        findings = inspect_package(folder)["findings"]
        return {f["id"] for f in findings if f["id"].startswith("draft-") and f["severity"] == "error"}

    assert draft_ids(packages["paired"]) == set()
    assert draft_ids(packages["plain"]) == set()
    for edit, rule in PAIRING_BREAKS.items():
        folder = tmp_path / edit
        shutil.copytree(packages["paired"], folder)
        _break_pairing(folder, edit, packages["other_vocab"])
        assert draft_ids(folder) == {rule}, edit
    assert draft_problems(tmp_path / "other_vocab") != []
    result = invoke("inspect", tmp_path / "other_provider")
    assert "draft-ep" in result.output


def test_mutant_other_vocab_draft_fails_in_genai(packages, tmp_path):
    """The draft-vocab break is one genai itself refuses at generator creation."""
    folder = tmp_path / "pkg"
    shutil.copytree(packages["paired"], folder)
    _break_pairing(folder, "other_vocab", packages["other_vocab"])
    with pytest.raises(Exception, match="vocab"):
        generate_greedy(folder, PROMPT, 8)


def _relocate(graph: Path, data: str) -> None:
    import onnx

    model = onnx.load(str(graph), load_external_data=False)
    for tensor in model.graph.initializer:
        for entry in tensor.external_data:
            if entry.key == "location":
                entry.value = data
    onnx.save(model, str(graph))
