"""`gqa-export eval`: perplexity and next-token accuracy of a package over a text file.

The method is the Hugging Face perplexity guide's, with exact token weighting: the text is
tokenized once as HF does (transformers' tokenizer from the package's own tokenizer files, BOS
included where HF adds it); windows of `window` tokens start every `stride` tokens; each window
scores only the tokens the previous one did not (the first scores all but the first token), with
everything before them in the window as context. Every token but the first is scored exactly once,
and perplexity is exp(total NLL / scored tokens).

A package's logits come from onnxruntime-genai (`get_output("logits")` after appending a window,
the same path `run` uses; a `--prune-lm-head` package through its full-logits view,
runtime/decode.py); an HF folder's from transformers with torch in float32, where torch is
installed. Two sources are compared position by position: perplexity increase, accuracy delta and
top-1 agreement.
"""

from __future__ import annotations

import gc
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from gqa_export.errors import InputError
from gqa_export.jsonio import read_json
from gqa_export.progress import NullReporter, Reporter

DEFAULT_WINDOW = 1024


@dataclass
class Scores:
    """Per scored position: the NLL of the true next token and the top-1 prediction."""

    source: str
    kind: str  # package | hf
    ep: str
    nll: np.ndarray  # float64 [scored]
    top1: np.ndarray  # int64 [scored]
    targets: np.ndarray  # int64 [scored]

    @property
    def perplexity(self) -> float:
        return math.exp(float(self.nll.mean()))

    @property
    def accuracy(self) -> float:
        return float((self.top1 == self.targets).mean())

    def summary(self) -> dict[str, Any]:
        return {
            "path": self.source,
            "kind": self.kind,
            "ep": self.ep,
            "perplexity": self.perplexity,
            "mean_nll": float(self.nll.mean()),
            "accuracy": self.accuracy,
        }


def is_package(path: Path) -> bool:
    return (path / "genai_config.json").is_file()


def read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(f"cannot read --text {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise InputError(f"--text {path} is not UTF-8 text") from None


def tokenize(package: Path, text: str, max_tokens: int | None = None) -> list[int]:
    """The token ids HF's tokenizer gives `text` (with its special tokens), from the package."""
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(str(package))
    except (OSError, ValueError) as exc:
        raise InputError(f"cannot load the tokenizer of {package}: {str(exc).splitlines()[0]}") from None
    ids = [int(t) for t in tokenizer(text, verbose=False)["input_ids"]]
    if max_tokens is not None:
        ids = ids[:max_tokens]
    if len(ids) < 2:
        raise InputError("the --text file holds fewer than 2 tokens; perplexity needs at least one prediction")
    return ids


def windows(count: int, window: int, stride: int) -> list[tuple[int, int, int]]:
    """(begin, end, first scored position in the window) for every window over `count` tokens."""
    out, previous_end = [], 0
    for begin in range(0, count, stride):
        end = min(begin + window, count)
        first = max(1, previous_end - begin)
        out.append((begin, end, first))
        previous_end = end
        if end == count:
            break
    return out


def check_window(package: Path, window: int | None, stride: int | None) -> tuple[int, int]:
    """The window (at most the package's max_length) and stride (default window // 2, less than
    the window so that every window's first new token has context)."""
    config = read_json(package / "genai_config.json") or {}
    if ((config.get("model") or {}).get("decoder") or {}).get("sliding_window", {}).get("slide_inputs"):
        raise InputError(f"{package} runs prompts in static windows (docs/eps.md §7): evaluate its CPU package")
    search = config.get("search") or {}
    max_length = int(search.get("max_length") or DEFAULT_WINDOW)
    window = window if window is not None else min(DEFAULT_WINDOW, max_length)
    if window < 2 or window > max_length:
        raise InputError(f"--window must be between 2 and the package's max_length {max_length}, got {window}")
    stride = stride if stride is not None else max(1, window // 2)
    # a window starting where the last one ended could not score its first token (no context)
    if stride < 1 or stride >= window:
        raise InputError(f"--stride must be between 1 and the window less one ({window - 1}), got {stride}")
    return window, stride


def score(
    source: Path,
    tokens: list[int],
    window: int,
    stride: int,
    ep: str | None = None,
    reporter: Reporter | None = None,
) -> Scores:
    """Score `tokens` with a package (onnxruntime-genai) or an HF folder (transformers + torch);
    `reporter` gets one progress task advanced per window."""
    reporter = reporter or NullReporter()
    if is_package(source):
        scores = _score_package(source, tokens, window, stride, ep, reporter)
    elif (source / "config.json").is_file():
        scores = _score_hf(source, tokens, window, stride, reporter)
    else:
        raise InputError(f"{source} is neither a package (genai_config.json) nor a Hugging Face folder (config.json)")
    gc.collect()  # the model (GBs) goes before the next one loads
    return scores


def _accumulate(
    logits_of: Any, tokens: list[int], window: int, stride: int, reporter: Reporter, label: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    ids = np.asarray(tokens, dtype=np.int64)
    nll, top1, targets = [], [], []
    spans = windows(len(ids), window, stride)
    reporter.stage(f"score {label}: {len(ids)} tokens, {len(spans)} windows of {window}")
    with reporter.task(f"scoring {label}", len(spans)) as advance:
        for begin, end, first in spans:
            nll_w, top1_w, target = _window_scores(logits_of(ids[begin:end], first), ids[begin + first : end])
            nll.append(nll_w)
            top1.append(top1_w)
            targets.append(target)
            advance(1)
    return np.concatenate(nll), np.concatenate(top1), np.concatenate(targets)


def _window_scores(predicting: np.ndarray, target: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """NLL of each target and the top-1 prediction from the logits that predict it ([T, V])."""
    predicting = predicting.astype(np.float64)
    peak = predicting.max(-1, keepdims=True)
    lse = peak[:, 0] + np.log(np.exp(predicting - peak).sum(-1))
    return lse - predicting[np.arange(len(target)), target], predicting.argmax(-1), target


def _score_package(
    package: Path, tokens: list[int], window: int, stride: int, ep: str | None, reporter: Reporter
) -> Scores:
    from gqa_export.runtime.decode import position_logits
    from gqa_export.runtime.providers import explain_load_failure, runnable_ep
    from gqa_export.runtime.standalone import check_generates

    check_generates(package)  # eval scores logits from input_ids: not a pipeline stage
    if ep is None:
        ep, why = runnable_ep(package)
        if ep is None:
            raise InputError(f"cannot evaluate {package} here: {why}")
    _check_vocabulary(tokens, _package_vocabulary(package), str(package))
    try:
        logits_of = position_logits(package, ep)
    except InputError:
        raise
    except Exception as exc:  # onnxruntime-genai raises RuntimeError for everything
        raise InputError(explain_load_failure(exc, package, ep)) from None
    nll, top1, targets = _accumulate(logits_of, tokens, window, stride, reporter, str(package))
    return Scores(str(package), "package", ep, nll, top1, targets)


def _package_vocabulary(package: Path) -> int:
    from gqa_export.package.paths import package_config

    return int(package_config(package)["model"]["vocab_size"])


def _check_vocabulary(tokens: list[int], vocabulary: int, source: str) -> None:
    if max(tokens) >= vocabulary:
        raise InputError(
            f"the package's tokenizer gives ids up to {max(tokens)} but {source} has a vocabulary of {vocabulary}:"
            " it is not the same model's"
        )


def _score_hf(folder: Path, tokens: list[int], window: int, stride: int, reporter: Reporter) -> Scores:
    try:
        import torch
        from transformers import AutoModelForCausalLM
    except ImportError:
        raise InputError(
            f"{folder} is a Hugging Face folder: scoring it needs torch (pip install torch); or pass a package"
        ) from None
    model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32).eval()
    _check_vocabulary(tokens, model.get_input_embeddings().num_embeddings, str(folder))

    def logits_of(window_ids: np.ndarray, first: int) -> np.ndarray:
        with torch.no_grad():
            return model(torch.from_numpy(window_ids)[None]).logits[0, first - 1 : -1].float().numpy()

    nll, top1, targets = _accumulate(logits_of, tokens, window, stride, reporter, str(folder))
    return Scores(str(folder), "hf", "cpu", nll, top1, targets)


def compare(scores: Scores, reference: Scores) -> dict[str, float]:
    """How `scores` differs from `reference` on the same positions."""
    increase = (scores.perplexity / reference.perplexity - 1.0) * 100.0
    return {
        "perplexity_increase_pct": increase,
        "accuracy_delta": scores.accuracy - reference.accuracy,
        "top1_agreement": float((scores.top1 == reference.top1).mean()),
    }


def evaluate(
    package: Path,
    text: str,
    reference: Path | None = None,
    window: int | None = None,
    stride: int | None = None,
    max_tokens: int | None = None,
    max_ppl_increase: float | None = None,
    ep: str | None = None,
    reporter: Reporter | None = None,
) -> dict[str, Any]:
    """`gqa-export eval` as data; `passed` is False when the gate is exceeded. `reporter` shows
    one progress task per scored source (a window per step)."""
    from gqa_export.package.paths import check_package_path

    check_package_path(package, files=False)  # a folder with a readable genai_config.json
    if max_tokens is not None and max_tokens < 2:
        raise InputError(f"--max-tokens must be 2 or more (perplexity needs one prediction), got {max_tokens}")
    if max_ppl_increase is not None and reference is None:
        raise InputError("--max-ppl-increase compares against a reference: pass --reference PACKAGE_OR_HF_FOLDER")
    window, stride = check_window(package, window, stride)
    tokens = tokenize(package, text, max_tokens)
    scores = score(package, tokens, window, stride, ep, reporter)
    report: dict[str, Any] = {
        **scores.summary(),
        "tokens": len(tokens),
        "scored": int(scores.nll.size),
        "window": window,
        "stride": stride,
    }
    passed = True
    if reference is not None:
        reference_scores = score(reference, tokens, window, stride, reporter=reporter)
        report["reference"] = reference_scores.summary()
        report["delta"] = compare(scores, reference_scores)
        if max_ppl_increase is not None:
            passed = report["delta"]["perplexity_increase_pct"] <= max_ppl_increase
            report["gate"] = {"max_ppl_increase_pct": max_ppl_increase, "passed": passed}
    report["passed"] = passed
    return report
