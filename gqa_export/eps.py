"""The execution providers: one frozen record each, holding everything that differs per EP.

Every stage asks this table rather than testing `ep == "cuda"`: which precisions have kernels (and
why the others are refused), the activation dtype and MatMulNBits accuracy level a quantized build
defaults to, the provider options genai_config.json carries, how the standard-Attention graphs read
the in-place KV buffer, the slack onnxruntime-genai adds to window-sized buffers, what only this EP
supports (CUDA graphs, shared initializers, GQA with an attention bias), the graph form the EP
runs (attention modes, fused RoPE, packed QKV, Skip* fusion, int4 as MatMulNBits or QDQ), the ops
and dtypes it has kernels for (the build refuses, and `inspect` flags, anything else: docs/eps.md
§5), and the folder a release puts its packages in. Adding an EP is one entry here plus its tests
(docs/architecture.md §3.1, docs/eps.md).
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
    # --- the graph form this EP runs (docs/eps.md §2) ---
    attention_modes: tuple[str, ...] = ("gqa", "bias", "split")  # --attention modes it can run
    gqa_dtypes: tuple[str, ...] = ("float", "float16", "bfloat16")  # GroupQueryAttention's kernels
    fused_rope: bool = True  # RoPE inside GQA (do_rotary=1); False: plain ops before it
    packed_qkv: bool = True  # one QKV MatMul feeding GQA's packed query
    packed_gate_up: bool = True  # one gate|up MatMul + Split (recipe mlp.packed_gate_up), docs/eps.md §1
    skip_norm_fusion: bool = True  # Add + SimplifiedLayerNormalization -> SkipSimplifiedLayerNormalization
    nbits_bits: tuple[int, ...] = (4, 8)  # MatMulNBits bit widths with kernels
    missing_ops: frozenset[str] = frozenset()  # ops with no kernel here: a package holding one is refused
    max_tensor_bytes: int = 0  # the largest single tensor the EP can allocate (0: no limit)
    int4_format: str = "matmulnbits"  # matmulnbits | qdq (DequantizeLinear + MatMul: quant/qdq.py)
    release_prefix: str = ""  # a release variant's folder prefix (the published `directml-int4-...`); "" = name
    verified: str = "run"  # run: tokens checked on the EP itself | structural: graph checks + a CPU run
    # the only ops with kernels here (empty: no such list; `missing_ops` says what is absent): QNN's op
    # builders, TensorRT-RTX's ONNX parser importers (docs/eps.md §2.8, §7.2)
    only_ops: frozenset[str] = frozenset()
    # static shapes: prompts run in windows of this many tokens, generated tokens one at a time,
    # over a fixed max_length KV buffer (graph/static_decoder.py, docs/eps.md §7); 0: dynamic shapes
    static_window: int = 0
    # GatherBlockQuantized reads 4-bit zero points one a byte ([V, blocks, 1], the CPU/CUDA layout the
    # quantized tables use); False: its kernel takes them packed two a byte (WebGPU, docs/eps.md §2.7)
    gather_zero_points_4bit: bool = True
    description: str = field(default="", compare=False)

    def lacks(self, op: str) -> bool:
        """True when the EP has no kernel for `op`: listed missing, or outside its whole op list."""
        return op in self.missing_ops or bool(self.only_ops and op not in self.only_ops)

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
    # fp16: what `quantize` of an fp16 package keeps; MatMulNBits, GatherBlockQuantized and QMoE have
    # fp16 CPU kernels (probed: the trained tiny model's int4 perplexity 1.90046 vs 1.90044 with fp32)
    quantized_activations=("fp32", "fp16"),
    accuracy_level=4,
    # gate and up as two MatMuls: the packed MatMul's Split costs more than it saves on CPU (150M at
    # 2048 tokens: fp32 0.95-0.98x the builder packed, 1.00x unpacked; LFM2's Split -222 ms against
    # MatMulNBits +57 ms; 1B int4 the same either way: benchmarks/results/speed_vs_builder.md)
    packed_gate_up=False,
    nbits_bits=(2, 4, 8),  # 2-bit runs exactly with packed or no zero points (docs/eps.md §5, probed)
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


# The EPs below run packages built from these records only; docs/eps.md §2 says where each fact
# comes from, §4 which are run-verified. Provider-option values are JSON strings (genai reads
# strings only); capture is written off explicitly where genai would switch it on by default.
_NO_IF = frozenset({"If"})  # longrope's table switch; these EPs take If-less graphs (docs/eps.md §2.4)
OPENVINO = ExecutionProvider(
    name="openvino",
    ort_provider="OpenVINOExecutionProvider",
    genai_provider="OpenVINO",
    precisions=("fp32", "fp16", "int4"),
    refused=_frozen(
        {
            "bf16": "GroupQueryAttention falls back to ORT's CPU kernels, which have no bf16",
            "int8": "OpenVINO's 8-bit MatMulNBits gives other greedy tokens than the CPU package (probed, "
            "docs/eps.md §3); use int4",
        }
    ),
    default_precision="fp32",
    quantized_activations=("fp32",),
    accuracy_level=4,
    packed_gate_up=False,  # the CPU package's graph (docs/eps.md §3), whose gate and up are apart
    provider_options=(_frozen({"OpenVINO": _frozen({"device_type": "CPU"})}),),
    window_slack=16,
    kv_cache_dtypes=(),
    attention_modes=("gqa",),  # its ONNX frontend rejects the standard Attention op (probed)
    gqa_dtypes=("float", "float16"),
    nbits_bits=(4,),
    # GatherBlockQuantized falls to ORT's CPU EP in the OpenVINO session and the tokens come out wrong
    # (probed: docs/eps.md §2.7), so a tied table is a float Gather there
    missing_ops=frozenset({"Attention", "GatherBlockQuantized"}),
    release_folder="openvino",
    description="Intel CPUs/GPUs/NPUs through onnxruntime-openvino (run-verified on CPU)",
)
WEBGPU = ExecutionProvider(
    name="webgpu",
    ort_provider="WebGpuExecutionProvider",
    genai_provider="webgpu",
    precisions=("fp16", "fp32", "int4", "int8"),
    refused=_frozen({"bf16": "WebGPU has no bfloat16 kernels"}),
    default_precision="fp16",
    quantized_activations=("fp16", "fp32"),
    accuracy_level=4,
    provider_options=(_frozen({"webgpu": _frozen({"enableGraphCapture": "0"})}),),
    kv_cache_dtypes=(),
    attention_modes=("gqa",),
    gqa_dtypes=("float", "float16"),
    missing_ops=_NO_IF,
    max_tensor_bytes=256 << 20,
    gather_zero_points_4bit=False,
    release_folder="webgpu",
    verified="structural",
    description="browsers and native GPUs through WebGPU (Dawn)",
)
DML = ExecutionProvider(
    name="dml",
    ort_provider="DmlExecutionProvider",
    genai_provider="dml",
    precisions=("fp16", "int4"),
    refused=_frozen(
        {
            "fp32": "DirectML's GroupQueryAttention has fp16 kernels only",
            "bf16": "DirectML has no bfloat16 GroupQueryAttention",
            "int8": "DirectML's MatMulNBits is 4-bit only",
        }
    ),
    default_precision="fp16",
    quantized_activations=("fp16",),
    accuracy_level=0,
    provider_options=(_frozen({"dml": _frozen({"enable_graph_capture": "0"})}),),
    kv_cache_dtypes=(),
    attention_modes=("gqa",),
    gqa_dtypes=("float16",),
    fused_rope=False,
    packed_qkv=False,
    nbits_bits=(4,),
    # DirectML registers MatMulNBits and GroupQueryAttention but no GatherBlockQuantized (docs/eps.md §2.7)
    missing_ops=_NO_IF | {"GatherBlockQuantized"},
    release_folder="directml",
    release_prefix="directml",
    verified="structural",
    description="Windows GPUs through DirectML",
)
# TensorRT-RTX takes a node when its ONNX parser imports it (onnxruntime's NvExecutionProvider::
# GetCapability asks nvonnxparser's supportsModelV2; docs/eps.md §2.8): the importers of the parser's
# open twin, onnx-tensorrt (onnxOpImporters.cpp, TensorRT 10.1), standard ONNX ops only, plus
# GroupQueryAttention, which the official builder writes for it and onnxruntime-genai relies on
_TRT_RTX_OPS = frozenset(
    {
        "Abs", "Acos", "Acosh", "Add", "And", "ArgMax", "ArgMin", "Asin", "Asinh", "Atan", "Atanh",
        "AveragePool", "BatchNormalization", "Cast", "CastLike", "Ceil", "Celu", "Clip", "Concat", "Constant",
        "ConstantOfShape", "Conv", "ConvTranspose", "Cos", "Cosh", "CumSum", "DepthToSpace", "DequantizeLinear",
        "Div", "Dropout", "Einsum", "Elu", "Equal", "Erf", "Exp", "Expand", "EyeLike", "Flatten", "Floor", "GRU",
        "Gather", "GatherElements", "GatherND", "Gelu", "Gemm", "GlobalAveragePool", "GlobalLpPool",
        "GlobalMaxPool", "Greater", "GreaterOrEqual", "GridSample", "GroupNormalization", "GroupQueryAttention",
        "HardSigmoid", "HardSwish", "Hardmax", "Identity", "ImageScaler", "InstanceNormalization", "IsInf",
        "IsNaN", "LRN", "LSTM", "LayerNormalization", "LeakyRelu", "Less", "LessOrEqual", "Log", "LogSoftmax",
        "Loop", "LpNormalization", "LpPool", "MatMul", "Max", "MaxPool", "Mean", "MeanVarianceNormalization",
        "Min", "Mish", "Mod", "Mul", "Neg", "NonMaxSuppression", "NonZero", "Not", "OneHot", "Or", "PRelu", "Pad",
        "ParametricSoftplus", "Pow", "QuantizeLinear", "RNN", "RandomNormal", "RandomNormalLike", "RandomUniform",
        "RandomUniformLike", "Range", "Reciprocal", "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp",
        "ReduceMax", "ReduceMean", "ReduceMin", "ReduceProd", "ReduceSum", "ReduceSumSquare", "Relu", "Reshape",
        "Resize", "ReverseSequence", "RoiAlign", "Round", "ScaledTanh", "Scan", "Scatter", "ScatterElements",
        "ScatterND", "Selu", "Shape", "Shrink", "Sigmoid", "Sign", "Sin", "Sinh", "Size", "Slice", "Softmax",
        "Softplus", "Softsign", "SpaceToDepth", "Split", "Sqrt", "Squeeze", "Sub", "Sum", "Tan", "Tanh",
        "ThresholdedRelu", "Tile", "TopK", "Transpose", "Trilu", "Unsqueeze", "Upsample", "Where", "Xor",
    }
)  # fmt: skip
_TRT_RTX_MISSING = frozenset(
    {"MatMulNBits", "GatherBlockQuantized", "SimplifiedLayerNormalization", "SkipSimplifiedLayerNormalization",
     "SkipLayerNormalization"}
)  # fmt: skip
TRT_RTX = ExecutionProvider(
    name="trt-rtx",
    ort_provider="NvTensorRTRTXExecutionProvider",
    genai_provider="NvTensorRtRtx",
    precisions=("fp16", "bf16", "int4"),
    refused=_frozen(
        {
            "fp32": "TensorRT-RTX's GroupQueryAttention has fp16 and bf16 kernels only",
            "int8": "TensorRT-RTX has no MatMulNBits and takes int4 only as QDQ; use int4, fp16 or bf16",
        }
    ),
    default_precision="fp16",
    quantized_activations=("fp16",),
    accuracy_level=0,
    provider_options=(_frozen({"NvTensorRtRtx": _frozen({"enable_cuda_graph": "0"})}),),
    kv_cache_dtypes=(),
    attention_modes=("gqa",),
    gqa_dtypes=("float16", "bfloat16"),
    skip_norm_fusion=False,
    nbits_bits=(),
    int4_format="qdq",
    # named for their messages and for the graph forms they select (If: longrope's offset, docs/eps.md
    # §2.4; the norms: primitive ops, graph/primitive_norms.py); If is imported by the parser but the
    # builder never gives TensorRT-RTX one
    missing_ops=_NO_IF | _TRT_RTX_MISSING,
    only_ops=_TRT_RTX_OPS,
    release_folder="trt-rtx",
    verified="structural",
    description="NVIDIA RTX GPUs through TensorRT-RTX",
)
# QNN EP's op builders (docs/eps.md §7.2): everything else falls back to the CPU or fails to compile
_QNN_OPS = frozenset(
    {
        "Abs", "Add", "And", "ArgMax", "ArgMin", "Cast", "Ceil", "Clip", "Concat", "Cos", "CumSum",
        "DequantizeLinear", "Div", "Einsum", "Elu", "Equal", "Exp", "Expand", "Flatten", "Floor", "Gather",
        "GatherElements", "GatherND", "Gelu", "Gemm", "Greater", "GreaterOrEqual", "HardSigmoid", "HardSwish",
        "Identity", "LayerNormalization", "LeakyRelu", "Less", "LessOrEqual", "Log", "LogSoftmax", "MatMul",
        "Max", "Mean", "Min", "Mod", "Mul", "Neg", "Not", "Or", "Pad", "Pow", "PRelu", "QuantizeLinear",
        "Reciprocal", "ReduceL2", "ReduceMax", "ReduceMean", "ReduceMin", "ReduceProd", "ReduceSum", "Relu",
        "Reshape", "RMSNormalization", "Round", "ScatterElements", "ScatterND", "Sigmoid", "Sign",
        "SimplifiedLayerNormalization", "Sin", "Slice", "Softmax", "Softplus", "Split", "Sqrt", "Squeeze",
        "Sub", "Sum", "Tanh", "Tile", "TopK", "Transpose", "Unsqueeze", "Where", "Xor",
    }
)  # fmt: skip
QNN = ExecutionProvider(
    name="qnn",
    ort_provider="QNNExecutionProvider",
    genai_provider="QNN",
    precisions=("int4", "fp16", "fp32"),
    refused=_frozen(
        {
            "bf16": "QNN's HTP has no bfloat16; use fp16 or int4",
            "int8": "QNN packages take 4-bit QDQ weights only; use int4",
        }
    ),
    default_precision="int4",
    quantized_activations=("fp16",),
    accuracy_level=0,
    # HTP backend; fp32 graphs run in fp16 there (enable_htp_fp16_precision, QNN EP's default)
    provider_options=(
        _frozen(
            {
                "QNN": _frozen(
                    {
                        "backend_type": "htp",
                        "htp_performance_mode": "burst",
                        "htp_graph_finalization_optimization_mode": "3",
                        "enable_htp_fp16_precision": "1",
                    }
                )
            }
        ),
    ),
    kv_cache_dtypes=(),
    attention_modes=("static",),
    gqa_dtypes=(),
    fused_rope=False,
    packed_qkv=False,
    skip_norm_fusion=False,
    nbits_bits=(),
    int4_format="qdq",
    missing_ops=frozenset({"GroupQueryAttention", "Attention", "MatMulNBits", "GatherBlockQuantized", "If"}),
    only_ops=_QNN_OPS,
    static_window=64,
    release_folder="qnn",
    verified="structural",
    description="Qualcomm NPUs through QNN: static-shape prefill/decode graphs (docs/eps.md §7)",
)

EPS: MappingProxyType[str, ExecutionProvider] = MappingProxyType(
    {ep.name: ep for ep in (CPU, CUDA, OPENVINO, WEBGPU, DML, TRT_RTX, QNN)}
)


# the op facts' dtype of a GatherBlockQuantized that has a zero-point input (check/op_facts.py)
ZERO_POINTS = "zero_points"


def by_genai_provider(names: list[str]) -> ExecutionProvider:
    """The EP a package was built for, from its decoder's provider_options keys (none: CPU)."""
    for ep in EPS.values():
        if ep.genai_provider is not None and ep.genai_provider in names:
            return ep
    return CPU


def graph_problems(ep: ExecutionProvider, facts: set[tuple[str, str, int]]) -> list[str]:
    """What in a graph `ep` cannot run, one line each, from its (op, compute dtype, bits) facts.

    The dtype is GroupQueryAttention's KV dtype or MatMulNBits' scales dtype, ZERO_POINTS for a
    GatherBlockQuantized with zero points ("" where not read); bits is MatMulNBits' or
    GatherBlockQuantized's width (0 otherwise). Both the build (before writing) and `inspect` ask
    this, so a package the table says cannot run is never written and is flagged when found."""
    problems = set()
    for op, dtype, bits in facts:
        if ep.lacks(op):
            problems.add(f"{op} has no {ep.name} kernel")
        elif op == "GroupQueryAttention" and dtype and dtype not in ep.gqa_dtypes:
            problems.add(
                f"GroupQueryAttention in {dtype} has no {ep.name} kernel (it takes {' or '.join(ep.gqa_dtypes)})"
            )
        elif op == "MatMulNBits" and bits and bits not in ep.nbits_bits:
            problems.add(f"{bits}-bit MatMulNBits has no {ep.name} kernel")
        elif op == "GatherBlockQuantized" and bits == 4 and dtype == ZERO_POINTS and not ep.gather_zero_points_4bit:
            problems.add(f"4-bit GatherBlockQuantized with zero points one a byte has no {ep.name} kernel")
    return sorted(problems)
