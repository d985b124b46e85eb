"""The execution providers: one frozen record each, holding everything that differs per EP.

Every stage asks this table rather than testing `ep == "cuda"`: which precisions have kernels (and
why the others are refused), the activation dtype and MatMulNBits accuracy level a quantized build
defaults to, the provider options genai_config.json carries, how the standard-Attention graphs read
the in-place KV buffer, the slack onnxruntime-genai adds to window-sized buffers, what only this EP
supports (CUDA graphs, shared initializers, GQA with an attention bias), and the folder a release
puts its packages in. Adding an EP is one entry here plus its tests (docs/architecture.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any


@dataclass(frozen=True)
class ExecutionProvider:
    name: str  # the --ep value
    ort_provider: str  # onnxruntime's provider name
    # the name onnxruntime-genai uses in provider_options and og.Config.append_provider; None: the
    # runtime's default (CPU), which needs no entry
    genai_provider: str | None
    precisions: tuple[str, ...]  # --precision values with kernels here, the recipe default first
    refused: MappingProxyType[str, str]  # precision -> why it cannot run here
    default_precision: str
    quantized_activations: tuple[str, ...]  # int4/int8 activation dtypes, the default first
    accuracy_level: int  # MatMulNBits accuracy_level default (4: int8 compute on CPU, as the builder)
    # provider_options of the decoder session (CUDA graphs off unless --cuda-graph)
    provider_options: tuple[MappingProxyType[str, Any], ...] = ()
    cuda_graph: bool = False  # --cuda-graph: `enable_cuda_graph` can be switched on
    # standard Attention over the in-place buffer: "slice" reads the first T slots with a bias (CPU's
    # Attention computes every key it is given); "nonpad" reads the whole buffer with
    # nonpad_kv_seqlen (CUDA's flash/cuDNN paths need no mask) — docs/ort-ops.md §2.3
    standard_attention_kv_read: str = "slice"
    # slots onnxruntime-genai adds to a window-sized KV buffer (decoder.sliding_window.cache_slack
    # default) — docs/ortgenai.md §3.5
    window_slack: int = 0
    # decoder pipelines: each session would repack the fp32 MatMul weights into its own memory, so
    # prepacking is off and both sessions map the one data file
    pipeline_disables_prepacking: bool = False
    shared_initializers: bool = False  # decoder.shared_initializers (one device copy for a pipeline)
    gqa_attention_bias: bool = False  # GQA runs an attention_bias fused (attention.bias_op gqa)
    release_folder: str = ""  # the published ORT GenAI repositories' top folder for this EP
    kv_cache_dtypes: tuple[str, ...] = ("int8", "int4")  # quantized KV caches GQA offers here
    description: str = field(default="", compare=False)

    def genai_provider_options(self, cuda_graph: bool = False) -> list[dict[str, Any]]:
        """The decoder's `session_options.provider_options`, as JSON-ready lists and dicts."""
        options = [{key: dict(value) for key, value in entry.items()} for entry in self.provider_options]
        if cuda_graph and self.cuda_graph:
            for entry in options:
                for settings in entry.values():
                    settings["enable_cuda_graph"] = "1"
        return options


def _frozen(mapping: dict[str, Any]) -> MappingProxyType[str, Any]:
    return MappingProxyType(mapping)


CPU = ExecutionProvider(
    name="cpu",
    ort_provider="CPUExecutionProvider",
    genai_provider=None,
    precisions=("fp32", "fp16", "int4", "int8"),
    refused=_frozen({"bf16": "ORT's CPU GroupQueryAttention has no bf16 kernel"}),
    default_precision="fp32",
    quantized_activations=("fp32",),
    accuracy_level=4,
    standard_attention_kv_read="slice",
    window_slack=16,
    pipeline_disables_prepacking=True,
    gqa_attention_bias=True,
    release_folder="cpu_and_mobile",
    description="onnxruntime's CPU kernels",
)
CUDA = ExecutionProvider(
    name="cuda",
    ort_provider="CUDAExecutionProvider",
    genai_provider="cuda",
    precisions=("fp16", "bf16", "int4", "int8"),
    refused=_frozen({"fp32": "ORT's CUDA GroupQueryAttention has no fp32 kernel"}),
    default_precision="fp16",
    quantized_activations=("fp16", "bf16"),
    accuracy_level=0,
    # capture needs batch 1 and static decode shapes: off unless --cuda-graph (docs/ortgenai.md §1.7)
    provider_options=(_frozen({"cuda": _frozen({"enable_cuda_graph": "0"})}),),
    cuda_graph=True,
    standard_attention_kv_read="nonpad",
    window_slack=0,
    shared_initializers=True,
    release_folder="cuda",
    description="NVIDIA GPUs through onnxruntime-gpu",
)

EPS: MappingProxyType[str, ExecutionProvider] = MappingProxyType({ep.name: ep for ep in (CPU, CUDA)})


def by_genai_provider(names: list[str]) -> ExecutionProvider:
    """The EP a package was built for, from its decoder's provider_options keys (none: CPU)."""
    for ep in EPS.values():
        if ep.genai_provider is not None and ep.genai_provider in names:
            return ep
    return CPU
