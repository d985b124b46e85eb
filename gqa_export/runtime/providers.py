"""Where a package runs: the EP it was built for, the EP this machine can run it on (CUDA only
with a usable GPU; a package for another EP on CPU where its dtypes have CPU kernels), and one
sentence for onnxruntime-genai's failure to load it. Read by the smoke run, `run`, `eval`,
`verify` and a release's evaluation."""

from __future__ import annotations

import ctypes
import re
import sys
from pathlib import Path
from typing import Any

from gqa_export.eps import CPU, EPS, by_genai_provider
from gqa_export.errors import interruption
from gqa_export.jsonio import read_json


def explain_load_failure(exc: BaseException, package: Path, ep: str) -> str:
    """One sentence for onnxruntime-genai's failure to load or run a package: what is missing and
    what to do (its own messages name a library file or an operator, not the remedy)."""
    first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    if "Failed to load library" in first or re.search(r"lib(cublas|cudart|curand|cudnn|cufft)\w*\.so", first):
        return (
            f"the CUDA provider cannot load its libraries ({first}); onnxruntime-gpu 1.31 needs CUDA 13 "
            "(libcudart.so.13, libcublas/libcublasLt.so.13, libcurand.so.10), cuDNN 9 and an NVIDIA driver on "
            "the library path: install them, or run with --ep cpu"
        )
    if "Cross-EP speculative decoding" in first:  # docs/speculative.md §4
        return (
            f"{package} carries a draft model, and onnxruntime-genai runs the draft only on the provider "
            f"in its genai_config: run it with --ep {package_ep(package)}"
        )
    if "Could not find an implementation for" in first:
        return (
            f"{package} uses an operator this machine's {ep} provider has no kernel for ({first}); bf16 packages "
            "run only on a CUDA GPU: run it with --ep cuda there, or rebuild with --precision fp16/fp32 for CPU"
        )
    return f"cannot load {package} on {ep}: {first}"


def cuda_device_available() -> bool:
    """True when a CUDA driver with at least one device is present and the runtime has CUDA."""
    try:
        import onnxruntime_genai as og

        if not og.is_cuda_available():
            return False
    except ImportError as exc:
        if interruption(exc) is not None:  # an interrupted import is no answer, and cannot be retried
            raise KeyboardInterrupt from exc
        return False
    for name in ("nvcuda.dll",) if sys.platform == "win32" else ("libcuda.so.1", "libcuda.so"):
        try:
            lib = ctypes.CDLL(name)
        except OSError:
            continue
        count = ctypes.c_int(0)
        return lib.cuInit(0) == 0 and lib.cuDeviceGetCount(ctypes.byref(count)) == 0 and count.value > 0
    return False


def package_ep(package: Path) -> str:
    """The EP a package was built for: cuda when its decoder session lists the CUDA provider."""
    config = read_json(package / "genai_config.json") or {}
    session = ((config.get("model") or {}).get("decoder") or {}).get("session_options") or {}
    providers = [next(iter(p), None) for p in session.get("provider_options") or [] if isinstance(p, dict)]
    return by_genai_provider(providers).name


def runnable_ep(package: Path) -> tuple[str | None, str | None]:
    """Where this machine can run the package: (ep, note), or (None, why not).

    A package for another EP runs there when this onnxruntime has its provider (OpenVINO's does);
    else, like a CUDA package with no GPU usable, on CPU when its dtypes have CPU kernels: fp16 does
    (ORT CPU runs fp16 graphs), bf16 activations do not, and decoder.shared_initializers is GPU
    only in onnxruntime-genai (it reads them into device memory). A package genai cannot generate
    from on any EP (a pipeline stage: runtime/standalone.py) runs nowhere."""
    from gqa_export.runtime.standalone import generation_refusal

    refusal = generation_refusal(package)
    if refusal is not None:
        return None, refusal.what
    ep = package_ep(package)
    if ep == CPU.name:
        return "cpu", None
    if ep == "cuda" and cuda_device_available():
        return "cuda", None
    if ep != "cuda" and _provider_available(EPS[ep].ort_provider):
        return ep, None
    config = read_json(package / "genai_config.json") or {}
    decoder = (config.get("model") or {}).get("decoder") or {}
    if "shared_initializers" in decoder:
        return None, "a package with decoder.shared_initializers runs only on a CUDA GPU, and none is usable here"
    if _has_bf16_io(package, decoder):
        return None, "bf16 activations have no CPU kernels and no CUDA GPU is usable here"
    if ep != "cuda":
        return "cpu", f"no {EPS[ep].ort_provider} here: running the {ep} package's graph on CPU"
    return "cpu", "no usable CUDA GPU here: running the CUDA package on CPU"


def _provider_available(provider: str) -> bool:
    """Whether the onnxruntime this process imports has the provider (e.g. onnxruntime-openvino)."""
    try:
        import onnxruntime

        return provider in onnxruntime.get_available_providers()
    except ImportError:
        return False


def _has_bf16_io(package: Path, decoder: dict[str, Any]) -> bool:
    import onnx

    files = [decoder.get("filename")] + [next(iter(s.values())).get("filename") for s in decoder.get("pipeline") or []]
    for name in filter(None, files):
        if not (package / name).is_file():
            continue
        graph = onnx.load(str(package / name), load_external_data=False).graph
        if any(v.type.tensor_type.elem_type == onnx.TensorProto.BFLOAT16 for v in [*graph.input, *graph.output]):
            return True
    return False
