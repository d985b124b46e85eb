"""GGUF packages against llama.cpp itself (llama-cpp-python; skipped without its venv: tests/llama_cpp.py).

- llama.cpp's own converter writes the tiny trained Llama exactly as tests/gguf_models.write_gguf
  does (every tensor byte and every model key), and its file's package equals the checkpoint.
- llama.cpp's own quantizer (Q4_K_M, Q4_0) gives files whose package weights equal the `gguf`
  dequantizer bit for bit and whose logits equal transformers' load of the file.
- Tokenization: the package's tokenizer (built from the metadata) gives llama.cpp's ids.
- Greedy tokens on the same file: equal to llama.cpp's, or the first difference explained by
  llama.cpp's arithmetic: it quantizes the activations of quantized matmuls (q8) and keeps an f16
  KV cache, so where our two best candidates are closer than llama.cpp's logits are to ours at
  that step, llama.cpp may pick the other (benchmarks/results/gguf.md records the numbers).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from families import PROMPT
from gguf_models import write_gguf
from gguf_reference import effective_weights, hf_from_gguf, package_eos
from llama_cpp_env import convert, run
from reference import genai_prompt_then_greedy, hf_logits, hf_model, ort_prefill_and_decode

from gqa_export.pipeline import BuildOptions, build

TRAINED = Path(__file__).resolve().parents[1] / "data" / "tiny-trained"
BOUND = 1e-4
# model-defining keys compared between llama.cpp's converter and the test writer (general.* is naming)
SKIPPED_KEYS = ("general.", "GGUF.", "tokenizer.ggml.add_sep_token")


@pytest.fixture(scope="module")
def llama_files(tmp_path_factory, ggufs) -> dict[str, Path]:
    """The trained tiny Llama through llama.cpp's converter (F32) and quantizer, and the llama256
    shape (K-quants need whole 256-weight rows) through llama.cpp's Q4_K_M."""
    root = tmp_path_factory.mktemp("llama-cpp")
    files = {"trained-F32": convert(TRAINED, root / "trained-F32.gguf")}
    for ftype in ("Q8_0", "Q4_0"):
        out = root / f"trained-{ftype}.gguf"
        assert run({"job": "quantize", "model": str(files["trained-F32"]), "out": str(out), "ftype": ftype})["rc"] == 0
        files[f"trained-{ftype}"] = out
    f32 = ggufs.get("llama256", "F32")
    out = root / "llama256-Q4_K_M.gguf"
    assert run({"job": "quantize", "model": str(f32), "out": str(out), "ftype": "Q4_K_M"})["rc"] == 0
    files["llama256-Q4_K_M"] = out
    return files


def _fields(path: Path) -> dict[str, object]:
    from gguf import GGUFReader

    reader = GGUFReader(path)
    return {k: f.contents() for k, f in reader.fields.items() if not k.startswith(SKIPPED_KEYS)}


def test_converter_writes_what_the_test_writer_writes(llama_files, tmp_path):
    from gguf import GGUFReader

    ours = write_gguf(TRAINED, tmp_path / "ours.gguf", "F32")
    theirs = llama_files["trained-F32"]
    assert _fields(ours) == _fields(theirs)
    a = {t.name: t for t in GGUFReader(ours).tensors}
    b = {t.name: t for t in GGUFReader(theirs).tensors}
    assert set(a) == set(b)
    for name in a:
        assert a[name].tensor_type == b[name].tensor_type and np.array_equal(
            np.asarray(a[name].data), np.asarray(b[name].data)
        ), name
    build(BuildOptions(str(theirs), tmp_path / "pkg", precision="fp32", smoke=False))
    tokens, got = ort_prefill_and_decode(tmp_path / "pkg", list(PROMPT), steps=6)
    assert np.abs(got - hf_logits(hf_model(TRAINED), tokens, len(PROMPT))).max() < BOUND


@pytest.mark.parametrize("name", ["llama256-Q4_K_M", "trained-Q4_0"])
def test_llama_cpp_quantized_files_import_exactly(llama_files, tmp_path, name):
    path = llama_files[name]
    types = {t.tensor_type.name for t in __import__("gguf").GGUFReader(path).tensors}
    if name.endswith("Q4_K_M"):
        assert {"Q4_K", "Q6_K"} <= types, types
    for weight in ("model.layers.0.self_attn.q_proj.weight", "model.layers.1.mlp.down_proj.weight"):
        got, ref, _ = effective_weights(path, weight)
        assert np.array_equal(got, ref), weight
    build(BuildOptions(str(path), tmp_path / "pkg", precision="fp32", smoke=False))
    tokens, got = ort_prefill_and_decode(tmp_path / "pkg", list(PROMPT), steps=6)
    assert np.abs(got - hf_logits(hf_from_gguf(path), tokens, len(PROMPT))).max() < BOUND


def test_tokenizer_gives_llama_cpp_ids(llama_files, tmp_path):
    from transformers import AutoTokenizer

    from gqa_export.source.gguf import materialize

    texts = ["Once upon a time", " there lived a small red fox.", "Hello, world!\n\nThe end", "<|eot_id|>x  y"]
    path = llama_files["trained-Q8_0"]
    folder, _ = materialize(path)
    ours = [AutoTokenizer.from_pretrained(folder)(t)["input_ids"] for t in texts]
    assert ours == run({"job": "tokenize", "model": str(path), "texts": texts})["ids"]


def first_difference_explained(
    ours: list[int], theirs: list[int], our_logits: np.ndarray, their_logits: np.ndarray
) -> str:
    """'' when the token lists are equal; else why they part, or an assertion error when nothing explains it."""
    if ours == theirs:
        return ""
    step = next(i for i, (a, b) in enumerate(zip(ours, theirs, strict=True)) if a != b)
    row = len(PROMPT) - 1 + step  # the logits that chose token `step`
    mine, other = our_logits[row], their_logits[row]
    gap = float(mine[ours[step]] - mine[theirs[step]])
    drift = float(np.abs(mine - other).max())
    assert 0 <= gap <= 2 * drift, (
        f"step {step}: our margin {gap:.4g} for {ours[step]} over {theirs[step]} "
        f"exceeds 2x llama.cpp's logit drift {drift:.4g}"
    )
    return f"step {step}: margin {gap:.4g} < llama.cpp drift {drift:.4g}"


@pytest.mark.parametrize("name", ["trained-F32", "trained-Q8_0", "trained-Q4_0", "llama256-Q4_K_M"])
def test_greedy_tokens_equal_llama_cpp_or_the_first_difference_is_explained(llama_files, tmp_path, name):
    path = llama_files[name]
    build(BuildOptions(str(path), tmp_path / "pkg", precision="fp32", smoke=False))
    steps = 24
    _, ours = genai_prompt_then_greedy(tmp_path / "pkg", list(PROMPT), steps)
    theirs = run({"job": "greedy", "model": str(path), "prompt": list(PROMPT), "new": steps,
                  "suppress": package_eos(tmp_path / "pkg")})  # fmt: skip
    tokens = list(PROMPT) + ours
    _, our_logits = ort_prefill_and_decode(tmp_path / "pkg", list(PROMPT), steps=0)
    full = np.concatenate([our_logits, _decode_logits(tmp_path / "pkg", tokens, len(PROMPT))])
    why = first_difference_explained(ours, theirs["tokens"], full, np.asarray(theirs["logits"], np.float32))
    if name == "trained-F32":  # no activation quantization: only the f16 KV cache differs
        assert why == "", why
    print(json.dumps({"file": name, "equal": why == "", "why": why}))


def _decode_logits(package: Path, tokens: list[int], prompt: int) -> np.ndarray:
    from reference import OrtStepper

    stepper = OrtStepper(package)
    stepper.step(tokens[:prompt])
    return np.concatenate([stepper.step([t]) for t in tokens[prompt:-1]])


FAMILIES = {"qwen2": "qwen2", "qwen3": "qwen3", "mistral": "llama", "gemma2": "gemma2", "gemma3": "gemma3",
            "phi3": "phi3", "stablelm": "stablelm", "starcoder2": "starcoder2", "qwen3_moe": "qwen3moe",
            "qwen2_moe": "qwen2moe", "llama3_rope": "llama"}  # fmt: skip


@pytest.mark.parametrize("family", list(FAMILIES))
def test_each_family_reads_as_llama_cpp_reads_it(ggufs, family):
    """The config gqa-export reads from the metadata is llama.cpp's: on each family's F32 file (no
    activation quantization), greedy tokens equal llama.cpp's, or part only where llama.cpp's f16
    KV cache moves its logits more than our two best candidates are apart."""
    path = ggufs.get(family, "F32", arch=FAMILIES[family])
    package = ggufs.package(family, "F32", arch=FAMILIES[family])
    steps = 16
    _, ours = genai_prompt_then_greedy(package, list(PROMPT), steps)
    theirs = run({"job": "greedy", "model": str(path), "prompt": list(PROMPT), "new": steps,
                  "suppress": package_eos(package)})  # fmt: skip
    _, prompt_logits = ort_prefill_and_decode(package, list(PROMPT), steps=0)
    full = np.concatenate([prompt_logits, _decode_logits(package, list(PROMPT) + ours, len(PROMPT))])
    why = first_difference_explained(ours, theirs["tokens"], full, np.asarray(theirs["logits"], np.float32))
    drift = float(np.abs(full[: len(PROMPT)] - np.asarray(theirs["logits"], np.float32)[: len(PROMPT)]).max())
    assert drift < 5e-2, f"prompt logits differ from llama.cpp's by {drift}: not the same model"
    print(json.dumps({"family": family, "equal": why == "", "why": why, "prompt_logit_drift": drift}))
