"""Generation through onnxruntime-genai: the build's smoke run and (later) `gqa-export run`.

Provider choice goes through `og.Config`: `clear_providers()` leaves CPU, `append_provider("cuda")`
adds CUDA, overriding what genai_config.json says (a CUDA package can thus be run on CPU where
its dtype has CPU kernels).
"""

from __future__ import annotations

import ctypes
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from gqa_export.errors import SmokeRunError

SMOKE_PROMPT = "Hello"
SMOKE_NEW_TOKENS = 16


@dataclass(frozen=True)
class GenerationResult:
    ep: str
    prompt_tokens: int
    tokens: list[int]
    text: str
    prefill_ms: float
    decode_tokens_per_s: float


def cuda_device_available() -> bool:
    """True when a CUDA driver with at least one device is present and the runtime has CUDA."""
    try:
        import onnxruntime_genai as og

        if not og.is_cuda_available():
            return False
    except ImportError:
        return False
    for name in ("nvcuda.dll",) if sys.platform == "win32" else ("libcuda.so.1", "libcuda.so"):
        try:
            lib = ctypes.CDLL(name)
        except OSError:
            continue
        count = ctypes.c_int(0)
        return lib.cuInit(0) == 0 and lib.cuDeviceGetCount(ctypes.byref(count)) == 0 and count.value > 0
    return False


def load(package: Path, ep: str):  # -> og.Model
    import onnxruntime_genai as og

    config = og.Config(str(package))
    config.clear_providers()
    if ep != "cpu":
        config.append_provider(ep)
    return og.Model(config)


def generate_greedy(
    package: Path, prompt_ids: list[int], max_new_tokens: int, ep: str = "cpu", min_new_tokens: int = 0, model=None
) -> GenerationResult:
    """Greedy generation from token ids, timing prefill and decode separately."""
    import onnxruntime_genai as og

    model = model or load(package, ep)
    params = og.GeneratorParams(model)
    total = len(prompt_ids) + max_new_tokens
    params.set_search_options(do_sample=False, max_length=total, min_length=len(prompt_ids) + min_new_tokens)
    generator = og.Generator(model, params)
    start = time.perf_counter()
    generator.append_tokens(prompt_ids)
    prefill = time.perf_counter() - start
    tokens: list[int] = []
    start = time.perf_counter()
    while not generator.is_done():
        generator.generate_next_token()
        tokens.append(int(generator.get_next_tokens()[0]))
    decode = time.perf_counter() - start
    tokenizer = og.Tokenizer(model)
    text = tokenizer.decode(tokens) if tokens else ""
    return GenerationResult(
        ep, len(prompt_ids), tokens, text, prefill * 1e3, len(tokens) / decode if decode > 0 else 0.0
    )


def smoke_run(package: Path, ep: str) -> GenerationResult:
    """Load the package and greedily generate a few tokens; any failure is a SmokeRunError."""
    try:
        import onnxruntime_genai as og

        model = load(package, ep)
        prompt_ids = [int(t) for t in og.Tokenizer(model).encode(SMOKE_PROMPT)]
        return generate_greedy(package, prompt_ids, SMOKE_NEW_TOKENS, ep, model=model)
    except SmokeRunError:
        raise
    except Exception as exc:  # onnxruntime-genai raises plain RuntimeError for everything
        raise SmokeRunError(f"smoke run on {ep} failed: {str(exc).strip().splitlines()[0]}") from exc
