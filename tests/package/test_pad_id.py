"""The package's pad id (gqa_export/package/pad_id.py, docs/ortgenai.md §5.4).

onnxruntime-genai samples the first token of a prompt ending with the package's pad id from the
position before it. The checkpoints here are the shape of the real Nemotron-Mini / Minitron configs
(bos 2, eos 3, no pad_token_id): with a spare embedding row the package pads with it and every
prompt runs through the runtime's own API like HF `generate`; without one, the pad is the
tokenizer's pad token (a prompt must spell it to be affected) or, with none, eos, each said in a
note and by `inspect`, and `run`'s loop feeds a trailing pad tail apart so it stays exact.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from mutants import copy_package
from reference import assert_varied, genai_padded_batch_greedy, genai_prompt_then_greedy, hf_generate, hf_model
from tiny_models import save_model, save_tokenizer

from gqa_export.check.report import inspect_package
from gqa_export.package.pad_id import choose_pad_id
from gqa_export.pipeline import BuildOptions, build
from gqa_export.runtime.run import generate_greedy, prompt_parts

BOS, EOS, TOKEN_PAD = 2, 3, 5  # the tiny tokenizer's <|pad|> is id 5
NEW = 8
ENDINGS = {  # prompts that end with eos (one and two), bos, and one with eos inside
    "eos": [150, 77, EOS],
    "eos-eos": [150, 77, EOS, EOS],
    "bos": [150, 44, BOS],
    "eos-inside": [EOS, 150, 77],
}


def _checkpoint(folder: Path, vocab: int, pad_token: bool = True) -> Path:
    """A tiny Llama with Nemotron-Mini's ids (bos 2, eos 3, no pad_token_id), a tokenizer of 384
    ids (`vocab` > 384 leaves spare rows); `pad_token` False: its <|pad|> renamed and undeclared."""
    checkpoint = save_model(folder, vocab_size=vocab, bos_token_id=BOS, eos_token_id=EOS, pad_token_id=None,
                            tokenizer=False)  # fmt: skip
    save_tokenizer(checkpoint, vocab_size=384)
    generation = json.loads((checkpoint / "generation_config.json").read_text())
    generation.pop("pad_token_id", None)
    (checkpoint / "generation_config.json").write_text(json.dumps(generation))
    if not pad_token:
        for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
            path = checkpoint / name
            if path.is_file():
                data = json.loads(path.read_text().replace("<|pad|>", "<|reserved_5|>"))
                data.pop("pad_token", None)
                path.write_text(json.dumps(data))
    return checkpoint


def _package(tmp: Path, name: str, vocab: int, pad_token: bool = True) -> tuple[Path, Path, list[str]]:
    checkpoint = _checkpoint(tmp / f"{name}-hf", vocab, pad_token)
    result = build(BuildOptions(str(checkpoint), tmp / name, smoke=False))
    return checkpoint, result.output, result.notes


@pytest.fixture(scope="module")
def spare(tmp_path_factory):
    """vocab_size 400 over 384 tokenizer ids: the first spare row, 384, pads."""
    return _package(tmp_path_factory.mktemp("pad"), "spare", 400)


@pytest.fixture(scope="module")
def token_pad(tmp_path_factory):
    """No spare row: the tokenizer's declared pad token (5) pads."""
    return _package(tmp_path_factory.mktemp("pad"), "token", 384)


@pytest.fixture(scope="module")
def eos_pad(tmp_path_factory):
    """No spare row, no pad token anywhere: the first eos id pads (the fallback)."""
    return _package(tmp_path_factory.mktemp("pad"), "eos", 384, pad_token=False)


def _pad_of(package: Path) -> tuple[int, dict]:
    config = json.loads((package / "genai_config.json").read_text())["model"]
    return config["pad_token_id"], json.loads((package / "manifest.json").read_text())["model"]["pad"]


def _findings(package: Path) -> dict[str, str]:
    return {f["id"]: f["severity"] for f in inspect_package(package)["findings"] if f["id"].startswith(("pad", "wind"))}


def test_a_spare_row_pads_and_every_prompt_runs_like_hf(spare, tmp_path):
    """Through onnxruntime-genai's own API (whole prompt appended; a right-padded batch), prompts
    ending with eos/bos give HF's greedy tokens; the same package with eos as pad (the previous
    default) does not."""
    checkpoint, package, notes = spare
    assert _pad_of(package) == (384, {"pad_token_id": 384, "rule": "unused-row"})
    assert not [n for n in notes if "pad_token_id" in n] and _findings(package) == {}
    model = hf_model(checkpoint)
    want = {name: hf_generate(model, prompt, NEW) for name, prompt in ENDINGS.items()}
    got = {name: genai_prompt_then_greedy(package, prompt, NEW)[1] for name, prompt in ENDINGS.items()}
    assert got == want
    assert_varied(list(got.values()))
    batch = [ENDINGS["eos-eos"], [150, 11, 12, 13, 14, 15, EOS]]  # the short row ends with eos, then padding
    assert genai_padded_batch_greedy(package, batch, 384, NEW) == [hf_generate(model, p, NEW) for p in batch]
    mutant = copy_package(package, tmp_path / "eos-as-pad")
    config = json.loads((mutant / "genai_config.json").read_text())
    config["model"]["pad_token_id"] = EOS
    (mutant / "genai_config.json").write_text(json.dumps(config))
    assert genai_prompt_then_greedy(mutant, ENDINGS["eos"], NEW)[1] != want["eos"]
    assert _findings(mutant) == {"pad-id-eos": "warning"}


def test_without_a_spare_row_the_pad_token_pads(token_pad):
    """The tokenizer's pad token (what padding is for: no note, no finding): eos/bos endings are
    exact through the runtime's API; a prompt ending with the pad token itself is not (the runtime
    takes it for padding), and `run`'s loop, which feeds that tail one token at a time, is."""
    checkpoint, package, notes = token_pad
    assert _pad_of(package) == (TOKEN_PAD, {"pad_token_id": TOKEN_PAD, "rule": "tokenizer-pad"})
    assert not [n for n in notes if "pad_token_id" in n] and _findings(package) == {}
    model = hf_model(checkpoint)
    for prompt in (ENDINGS["eos"], ENDINGS["bos"]):
        assert genai_prompt_then_greedy(package, prompt, NEW)[1] == hf_generate(model, prompt, NEW)
    held = [150, 77, TOKEN_PAD]
    want = hf_generate(model, held, NEW)
    assert genai_prompt_then_greedy(package, held, NEW)[1] != want  # what the note warns of
    assert generate_greedy(package, held, NEW, min_new_tokens=NEW).tokens == want


def test_with_no_pad_token_eos_pads_and_run_stays_exact(eos_pad):
    """The fallback: eos pads, said in the build note and as an `inspect` warning; `run`'s loop
    gives HF's tokens for prompts ending with one or two eos."""
    checkpoint, package, notes = eos_pad
    assert _pad_of(package) == (EOS, {"pad_token_id": EOS, "rule": "eos-fallback"})
    assert [n for n in notes if "pad_token_id 3 is an eos/bos id" in n]
    assert _findings(package) == {"pad-id-eos": "warning"}
    model = hf_model(checkpoint)
    for name in ("eos", "eos-eos", "eos-inside"):
        prompt = ENDINGS[name]
        assert generate_greedy(package, prompt, NEW, min_new_tokens=NEW).tokens == hf_generate(model, prompt, NEW)


def test_prompt_parts_feed_a_pad_tail_one_token_at_a_time():
    assert prompt_parts([150, 77, 3, 3], 3) == [[150, 77], [3], [3]]
    assert prompt_parts([3, 150, 77], 3) == [[3, 150, 77]]
    assert prompt_parts([3, 3], 3) == [[3], [3]]
    assert prompt_parts([150, 3], None) == [[150, 3]]


@pytest.fixture(scope="module")
def dims(spare):
    from transformers import AutoConfig

    from gqa_export.arch import get_spec
    from gqa_export.model.dims import read_dims

    return read_dims(AutoConfig.from_pretrained(spare[0]), get_spec("llama"), None)


def _tokenizer_folder(folder: Path, added: list[tuple[int, str]], model: dict | None = None, **config) -> Path:
    folder.mkdir()
    vocab = {f"t{i}": i for i in range(16)}
    data = {"model": {"type": "BPE", "vocab": vocab, **(model or {})},
            "added_tokens": [{"id": i, "content": c, "special": True} for i, c in added]}  # fmt: skip
    (folder / "tokenizer.json").write_text(json.dumps(data))
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    return folder


def test_the_rules_in_order(dims, tmp_path):
    """Each rule taken where the earlier ones find nothing: a non-finite spare row is passed over;
    the model's own pad only when it is no eos/bos id; a pad-named special token only when no chat
    template spells it; the unknown token only with byte fallback; else eos with a note."""
    dims = replace(dims, vocab_size=20, bos_token_id=BOS, eos_token_ids=(EOS,), pad_token_id=None)
    plain = _tokenizer_folder(tmp_path / "plain", [(2, "<s>"), (3, "</s>")])
    assert choose_pad_id(dims, plain, lambda row: True).rule == "unused-row"
    assert choose_pad_id(dims, plain, lambda row: True).id == 16
    assert choose_pad_id(dims, plain, lambda row: row != 16).rule == "eos-fallback"
    assert choose_pad_id(replace(dims, pad_token_id=9), plain, lambda row: False).id == 9
    assert choose_pad_id(replace(dims, pad_token_id=EOS), plain, lambda row: False).rule == "eos-fallback"
    named = _tokenizer_folder(tmp_path / "named", [(3, "</s>"), (7, "<|finetune_right_pad_id|>")])
    choice = choose_pad_id(dims, named, lambda row: False)
    assert (choice.id, choice.rule) == (7, "pad-token") and "a pad token (the checkpoint names no pad id)" in str(
        choice.note
    )
    spelled = _tokenizer_folder(tmp_path / "spelled", [(7, "<|pad|>")], chat_template="{{ '<|pad|>' }}")
    assert choose_pad_id(dims, spelled, lambda row: False).rule == "eos-fallback"
    declared = _tokenizer_folder(tmp_path / "declared", [(8, "<pad>")], pad_token={"content": "<pad>"})
    assert choose_pad_id(dims, declared, lambda row: False).rule == "tokenizer-pad"
    fallback = {"byte_fallback": True, "unk_token": "t1"}
    assert choose_pad_id(dims, _tokenizer_folder(tmp_path / "unk", [], fallback), lambda row: False).id == 1
    no_fallback = _tokenizer_folder(tmp_path / "unk-plain", [], {"unk_token": "t1"})
    choice = choose_pad_id(dims, no_fallback, lambda row: False)
    assert (choice.id, choice.rule) == (EOS, "eos-fallback") and "is an eos/bos id" in str(choice.note)
    windowed = choose_pad_id(dims, no_fallback, lambda row: False, windowed=True)
    assert "windowed inputs cut a prompt" in str(windowed.note)


def test_a_non_finite_spare_row_is_not_chosen(tmp_path):
    """The row check reads the checkpoint's own table: an inf in row 384 moves the pad to the
    tokenizer's pad token."""
    from safetensors.numpy import load_file, save_file

    checkpoint = _checkpoint(tmp_path / "hf", 400)
    weights = load_file(str(checkpoint / "model.safetensors"))
    table = weights["model.embed_tokens.weight"].copy()
    table[384, 3] = np.inf
    weights["model.embed_tokens.weight"] = table
    save_file(weights, str(checkpoint / "model.safetensors"), metadata={"format": "pt"})
    package = build(BuildOptions(str(checkpoint), tmp_path / "p", smoke=False)).output
    assert _pad_of(package)[1] == {"pad_token_id": TOKEN_PAD, "rule": "tokenizer-pad"}
