"""The pre-quantized source formats: one frozen record each, holding everything that differs per format.

Detection, refusal, import, `inspect` and docs/prequantized.md ask this table rather than testing
`quant_method == "gptq"`: how a checkpoint declares the format (config.json's `quantization_config`
by its `quant_method`, or older keys without one; a side file older quantizers write), the tensor
names that give it away when nothing declares it, which variants are refused and in what words,
the reader that shows its quantized linears as float weights (and whether MatMulNBits takes their
integers as they are), whether only `build --dequantize` reads it, and its docs section.
source/prequantized.py refuses and selects by it, source/imported.py reads by it. Adding a format
is one record here (its type: source/format_records.py) plus its reader (docs/architecture.md §3.2,
docs/prequantized.md §1).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import MappingProxyType

from gqa_export.source import bitnet, bnb, fp8, native, quark
from gqa_export.source.file_reader import FileReader
from gqa_export.source.format_records import QuantizationConfig, Reader, Refusal, SourceFormat, TensorMark
from gqa_export.source.weights import WeightStore


def _marked(ending: str) -> Callable[[WeightStore], list[str]]:
    """Modules whose codes sit beside them under their own name (`P.qweight`)."""
    return lambda base: [n.removesuffix(ending) for n in base.names() if n.endswith(ending)]


def _stored_as(dtypes: tuple[str, ...]) -> Callable[[WeightStore], list[str]]:
    """Modules whose `P.weight` holds the codes, told from float weights by its stored dtype."""
    return lambda base: [
        n.removesuffix(".weight") for n in base.names() if n.endswith(".weight") and base.info(n).dtype in dtypes
    ]


def _float_quantized(qc: QuantizationConfig) -> bool:
    """compressed-tensors whose every config group is `float-quantized` (FP8), the rest is int."""
    groups = qc.get("config_groups") or {}
    if not isinstance(groups, dict) or not groups:
        return False
    return {str((g or {}).get("format") or qc.get("format") or "") for g in groups.values()} == {"float-quantized"}


_frozen = MappingProxyType  # the example configs: read, never written
_QWEIGHT = TensorMark(".qweight", "GPTQ or AWQ (qweight / qzeros / scales tensors)")
_QZEROS = TensorMark(".qzeros", "GPTQ or AWQ (qweight / qzeros / scales tensors)")
_WEIGHT_SCALE = TensorMark(".weight_scale", "FP8, compressed-tensors or BitNet (weight_scale tensors)")
_WEIGHT_ZERO_POINT = TensorMark(".weight_zero_point", "compressed-tensors (weight_zero_point tensors)")
_INPUT_SCALE = TensorMark(".input_scale", "FP8 (input_scale tensors)")
FP8_DTYPES = ("F8_E4M3", "F8_E5M2")
_FP8_HIDDEN = (*fp8.SCALE_NAMES, *fp8.ACTIVATION_SCALES, ".weight_zero_point")  # zero points: must be 0
_CT_GROUP = "config_groups.group_0"

GPTQ = SourceFormat(
    "GPTQ",
    methods=("gptq",),
    side_files=(("quantize_config.json", "GPTQ (AutoGPTQ quantize_config.json)"),),
    tensors=(_QWEIGHT, _QZEROS, TensorMark(".g_idx", "GPTQ (g_idx tensors)")),
    why_not=native.why_not_gptq,
    reader=Reader(
        _marked(".qweight"), ".qweight", (".qweight", ".qzeros", ".scales", ".g_idx"),
        lambda store, base, prefix, qc: native.read_gptq(store, prefix, qc),
        required=(".qzeros", ".scales"), integers=True,
    ),
    read_in="source/native.py",
    example=_frozen({"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": True, "sym": True}),
    refuses=(
        Refusal({"bits": 3}, "3-bit GPTQ (2, 4 and 8 bits are imported)"),
        Refusal({"dynamic": {"-:.*lm_head": {}}}, "GPTQ with per-module `dynamic` overrides"),
        Refusal({"checkpoint_format": "marlin"}, "GPTQ checkpoint_format 'marlin'"),
    ),
    docs="docs/prequantized.md §3.1",
)  # fmt: skip
AWQ = SourceFormat(
    "AWQ",
    methods=("awq",),
    side_files=(("quant_config.json", "AWQ (quant_config.json)"),),
    tensors=(_QWEIGHT, _QZEROS),
    why_not=native.why_not_awq,
    reader=Reader(
        _marked(".qweight"), ".qweight", (".qweight", ".qzeros", ".scales"),
        lambda store, base, prefix, qc: native.awq_linear(store, prefix, qc),
        required=(".qzeros", ".scales"), integers=True,
    ),
    read_in="source/native.py",
    example=_frozen({"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True, "version": "gemm"}),
    refuses=(
        Refusal({"version": "gemv"}, "AWQ gemv 4-bit (only 4-bit GEMM is imported)"),
        Refusal({"zero_point": False}, "AWQ without zero points"),
    ),
    docs="docs/prequantized.md §3.2",
)  # fmt: skip
COMPRESSED_TENSORS_INT = SourceFormat(
    "compressed-tensors pack-quantized",
    methods=("compressed-tensors",),
    variant=lambda qc: not _float_quantized(qc),
    tensors=(
        TensorMark(".weight_packed", "compressed-tensors pack-quantized (weight_packed tensors)"),
        _WEIGHT_SCALE,
        _WEIGHT_ZERO_POINT,
    ),
    source_format="compressed-tensors",
    refused_as="compressed-tensors (llm-compressor)",
    why_not=native.why_not_pack_quantized,
    reader=Reader(
        _marked(".weight_packed"), ".weight_packed",
        (".weight_packed", ".weight_scale", ".weight_zero_point", ".weight_shape", ".weight_g_idx"),
        lambda store, base, prefix, qc: native.read_pack_quantized(store, prefix, qc),
        required=(".weight_scale", ".weight_shape"), integers=True,
    ),
    read_in="source/native.py",
    example=_frozen({"quant_method": "compressed-tensors", "format": "pack-quantized", "config_groups": {"group_0": {
        "targets": ["Linear"], "weights": {"num_bits": 4, "type": "int", "strategy": "group", "group_size": 32,
                                           "symmetric": True}}}}),
    refuses=(
        Refusal({"config_groups": {}}, "compressed-tensors without config_groups"),
        Refusal({"format": "int-quantized"},
                "compressed-tensors format 'int-quantized' (pack-quantized int4/int8 and float-quantized FP8 "
                "are imported)"),
        Refusal({f"{_CT_GROUP}.weights.num_bits": 2}, "compressed-tensors int 2-bit weights"),
        Refusal({f"{_CT_GROUP}.weights.strategy": "tensor"},
                "compressed-tensors strategy 'tensor' (group and channel are imported)"),
        Refusal({f"{_CT_GROUP}.weights.actorder": "static"}, "compressed-tensors actorder 'static'"),
        Refusal({f"{_CT_GROUP}.input_activations": {"num_bits": 8, "type": "int"}},
                "compressed-tensors with quantized activations (only weight-only W4A16/W8A16 is "
                "imported)"),
        Refusal({"config_groups.group_1": {"targets": ["re:.*down_proj"], "weights": {
            "num_bits": 8, "type": "int", "strategy": "channel"}}},
            "compressed-tensors with several weight bit widths"),
    ),
    docs="docs/prequantized.md §3.5",
)  # fmt: skip
COMPRESSED_TENSORS_FLOAT = SourceFormat(
    "compressed-tensors float-quantized",
    methods=("compressed-tensors",),
    variant=_float_quantized,
    tensors=(_WEIGHT_SCALE, _WEIGHT_ZERO_POINT, _INPUT_SCALE),
    source_format="compressed-tensors",
    refused_as="compressed-tensors (llm-compressor)",
    why_not=fp8.why_not_compressed_float,
    reader=Reader(
        _stored_as(FP8_DTYPES), ".weight", _FP8_HIDDEN,
        lambda store, base, prefix, qc: fp8.read_compressed_float(base, prefix, qc),
    ),
    read_in="source/fp8.py",
    example=_frozen({"quant_method": "compressed-tensors", "format": "float-quantized", "config_groups": {"group_0": {
        "targets": ["Linear"], "weights": {"num_bits": 8, "type": "float", "strategy": "channel", "symmetric": True},
        "input_activations": {"num_bits": 8, "type": "float", "strategy": "token", "dynamic": True}}}}),
    refuses=(
        Refusal({"config_groups.group_1": {"targets": ["re:.*down_proj"], "weights": {
            "num_bits": 8, "type": "float", "strategy": "tensor"}}},
            "compressed-tensors float-quantized with several config_groups"),
        Refusal({f"{_CT_GROUP}.weights.num_bits": 4}, "compressed-tensors float-quantized float 4-bit weights"),
        Refusal({f"{_CT_GROUP}.weights.strategy": "tensor_group"},
                "compressed-tensors float-quantized strategy 'tensor_group' "
                "(symmetric tensor/channel/group/block)"),
        Refusal({f"{_CT_GROUP}.weights.symmetric": False},
                "compressed-tensors float-quantized strategy 'channel' "
                "(symmetric tensor/channel/group/block)"),
        Refusal({f"{_CT_GROUP}.weights.strategy": "block"}, "compressed-tensors float-quantized block_structure None"),
        Refusal({f"{_CT_GROUP}.input_activations.type": "int"},
                "compressed-tensors float-quantized weights with integer or output activation "
                "quantization"),
    ),
    docs="docs/prequantized.md §3.8",
)  # fmt: skip
_QUARK_WEIGHT = "global_quant_config.weight"
QUARK = SourceFormat(
    "Quark",
    methods=("quark",),
    tensors=(_WEIGHT_SCALE, _WEIGHT_ZERO_POINT),
    why_not=quark.why_not_quark,
    reader=Reader(
        _stored_as(("I32",)), ".weight", (".weight_scale", ".weight_zero_point"),
        lambda store, base, prefix, qc: quark.quark_linear(base, prefix, qc), integers=True,
    ),
    read_in="source/quark.py",
    example=_frozen({"quant_method": "quark", "global_quant_config": {
        "weight": {"dtype": "uint4", "qscheme": "per_group", "ch_axis": 1, "group_size": 32, "is_dynamic": False},
        "input_tensors": None, "output_tensors": None, "bias": None},
        "layer_quant_config": {}, "layer_type_quant_config": {}, "kv_cache_quant_config": {},
        "export": {"kv_cache_group": [], "pack_method": "reorder", "weight_format": "real_quantized"}}),
    refuses=(
        Refusal({"export": None}, "Quark export without an `export` block (the layout of quark < 1.0)"),
        Refusal({"export.weight_format": "fake_quantized"},
                "Quark weight_format 'fake_quantized' (only real_quantized is imported)"),
        Refusal({"export.pack_method": "interleave"}, "Quark pack_method 'interleave'"),
        Refusal({"layer_type_quant_config": {"Linear": {}}}, "Quark with a layer_type_quant_config"),
        Refusal({"kv_cache_quant_config": {"*k_proj": {}}}, "Quark with a quantized KV cache"),
        Refusal({"global_quant_config.input_tensors": {"dtype": "int8"}},
                "Quark with quantized input_tensors (int8; only weight-only int4/uint4 is imported)"),
        Refusal({_QUARK_WEIGHT: None},
                "Quark global_quant_config weight None (several quantizers in sequence, or none)"),
        Refusal({f"{_QUARK_WEIGHT}.dtype": "fp8_e4m3"},
                "Quark fp8_e4m3 weights (only int4/uint4 per-group weight-only is imported)"),
        Refusal({f"{_QUARK_WEIGHT}.qscheme": "per_channel"},
                "Quark uint4 qscheme 'per_channel' (only per_group along the input is imported)"),
        Refusal({f"{_QUARK_WEIGHT}.scale_format": "e8m0"}, "Quark uint4 with dynamic or e8m0 scales"),
        Refusal({f"{_QUARK_WEIGHT}.group_size": 0}, "Quark group_size 0"),
    ),
    docs="docs/prequantized.md §3.7",
)  # fmt: skip
FP8 = SourceFormat(
    "FP8",
    methods=("fp8",),
    tensors=(TensorMark(".weight_scale_inv", "FP8 (block-quantized, weight_scale_inv tensors)"), _WEIGHT_SCALE,
             _INPUT_SCALE),
    refused_as="FP8 (block-quantized, weight_scale_inv)",
    why_not=fp8.why_not_fp8,
    reader=Reader(
        _stored_as(FP8_DTYPES), ".weight", _FP8_HIDDEN,
        lambda store, base, prefix, qc: fp8.fp8_linear(base, f"{prefix}.weight", qc.get("weight_block_size")),
    ),
    read_in="source/fp8.py",
    example=_frozen({"quant_method": "fp8", "activation_scheme": "dynamic", "weight_block_size": [128, 128]}),
    refuses=(
        Refusal({"weight_block_size": [128]}, "FP8 weight_block_size [128] (a [rows, cols] pair or none is imported)"),
        Refusal({"expert_dtype": "fp4"}, fp8.FP4_EXPERTS),
    ),
    docs="docs/prequantized.md §3.6",
)  # fmt: skip
BITSANDBYTES = SourceFormat(
    "bitsandbytes",
    methods=("bitsandbytes",),
    keys=("load_in_4bit", "load_in_8bit"),
    tensors=(
        TensorMark(".absmax", "bitsandbytes 4-bit (absmax tensors)"),
        TensorMark(".quant_map", "bitsandbytes 4-bit (quant_map tensors)"),
        TensorMark(".SCB", "bitsandbytes 8-bit (SCB tensors)"),
        TensorMark(".quant_state", "bitsandbytes 4-bit (quant_state tensors)"),
    ),
    why_not=bnb.why_not_bitsandbytes,
    # the codes keep `P.weight`; a 4-bit quant_state or LLM.int8's SCB tells the modules apart
    reader=Reader(
        lambda base: bnb.prefixes(base.names()), ".weight", bnb.HIDDEN,
        lambda store, base, prefix, qc: bnb.bnb_linear(base, prefix),
    ),
    read_in="source/bnb.py",
    dequantize=True,
    example=_frozen({"quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_quant_type": "nf4"}),
    refuses=(
        Refusal({"bnb_4bit_quant_storage": "float16"},
                "bitsandbytes 4-bit stored as float16 (uint8 storage is dequantized)"),
    ),
    docs="docs/prequantized.md §3.9",
)  # fmt: skip
BITNET = SourceFormat(
    "BitNet",
    methods=("bitnet",),
    tensors=(_WEIGHT_SCALE,),
    why_not=bitnet.why_not_bitnet,
    # the packed codes keep `P.weight` (uint8, told from float weights by its dtype), `P.weight_scale` beside
    reader=Reader(
        _stored_as(("U8",)), ".weight", (".weight_scale",),
        lambda store, base, prefix, qc: bitnet.bitnet_linear(base, prefix, qc),
        required=(".weight_scale",), integers=True,
    ),
    read_in="source/bitnet.py",
    example=_frozen({"quant_method": "bitnet", "linear_class": "bitlinear", "quantization_mode": "offline"}),
    refuses=(
        Refusal({"linear_class": "autobitlinear", "quantization_mode": "online"},
                "BitNet quantization_mode 'online' (float weights ternarized at every forward; offline is "
                "imported)"),
        Refusal({"use_rms_norm": True}, "BitNet use_rms_norm (an RMSNorm inside every quantized Linear)"),
    ),
    docs="docs/prequantized.md §3.10",
)  # fmt: skip
# gpt-oss's experts: `*_blocks` / `*_scales` read by the family's graph (graph/moe.py finds them),
# dequantized exactly while streaming; its config needs nothing else
MXFP4 = SourceFormat(
    "MXFP4", methods=("mxfp4",), why_not=lambda _qc: None, read_in="graph/experts.py", docs="docs/moe.md §5"
)  # fmt: skip


def _refused(
    name: str, *methods: str, keys: tuple[str, ...] = (), tensors: tuple[TensorMark, ...] = ()
) -> SourceFormat:
    """A format this tool does not import: refused wherever it is declared, naming it."""
    return SourceFormat(name, methods=methods, keys=keys, tensors=tensors, docs="docs/prequantized.md §1")


REFUSED = (
    *(_refused(name, method) for name, method in (("FBGEMM FP8", "fbgemm_fp8"), ("Olive", "olive"),
      ("torchao", "torchao"), ("EETQ", "eetq"), ("AQLM", "aqlm"), ("VPTQ", "vptq"), ("HIGGS", "higgs"),
      ("SpQR", "spqr"), ("FP-Quant", "fp_quant"))),
    _refused("HQQ", "hqq", tensors=(TensorMark(".W_q", "HQQ (W_q tensors)"),)),
    _refused("ModelOpt", "modelopt", keys=("quant_algo",)),
    # the Inkling releases' formats (docs/coverage.md's Inkling section): what no reader here takes
    SourceFormat(
        "NVFP4", methods=("nvfp4",), docs="docs/prequantized.md §1",
        refused_as="NVFP4 (e2m1 codes two per byte, a float8 e4m3 scale per 16 inputs and a global factor per "
        "tensor, Inkling2-Loop's experts' `_amax` / `_outer_scale_denominator`; none of them read here)",
    ),
    SourceFormat(
        "MXFP8", methods=("mxfp8",), docs="docs/prequantized.md §1",
        refused_as="MXFP8 (float8 e4m3 weights, each 32 inputs scaled by a uint8 e8m0 exponent stored as "
        "`<weight>_scale`: Inkling2's routed experts' w13_weight_scale / w2_weight_scale; FP8 scales are read as "
        "weight_scale_inv / weight_scale only)",
    ),
)  # fmt: skip
# llama.cpp's files: the file is the checkpoint (`file`), read by source/gguf/ with its integer
# blocks kept (docs/gguf.md). A config.json declaring `quant_method: gguf` (transformers' name for
# a model it loaded from such a file and saved) holds no GGUF tensors: refused like any format
# this tool does not import.
GGUF = SourceFormat(
    "GGUF", methods=("gguf",), read_in="source/gguf/", docs="docs/prequantized.md §1",
    file=FileReader((".gguf",), b"GGUF", "gqa_export.source.gguf"),
)  # fmt: skip
FORMATS: tuple[SourceFormat, ...] = (
    GPTQ, AWQ, COMPRESSED_TENSORS_INT, COMPRESSED_TENSORS_FLOAT, QUARK, FP8, BITSANDBYTES, BITNET, MXFP4, *REFUSED,
    GGUF,
)  # fmt: skip
FILE_FORMATS: tuple[SourceFormat, ...] = tuple(f for f in FORMATS if f.file is not None)


def _marks() -> tuple[TensorMark, ...]:
    """Every format's tensor marks, each ending once (formats that share one say it alike)."""
    marks: dict[str, TensorMark] = {}
    for fmt in FORMATS:
        for mark in fmt.tensors:
            assert marks.setdefault(mark.ending, mark) == mark, f"{mark.ending} is said two ways"
    return tuple(marks.values())


TENSOR_MARKS = _marks()


def declared(qc: QuantizationConfig) -> SourceFormat | None:
    """The format a quantization_config declares: by its quant_method (and variant), else by the
    keys older configs carry without one (bitsandbytes' load_in_4bit, ModelOpt's quant_algo); None
    for a method this table does not know."""
    method = qc.get("quant_method")
    if method is None:
        return next((f for f in FORMATS if any(qc.get(key) for key in f.keys)), None)
    method = str(method).lower()
    return next((f for f in FORMATS if method in f.methods and f.variant(qc)), None)


def file_format(path: Path) -> SourceFormat | None:
    """The checkpoint file format a MODEL file is (GGUF), or None."""
    return next((f for f in FILE_FORMATS if f.file is not None and f.file.matches(path)), None)


def folder_file_format(folder: Path) -> SourceFormat | None:
    """The checkpoint file format whose files a folder holds, or None."""
    return next((f for f in FILE_FORMATS if f.file is not None and f.file.in_folder(folder)), None)


def reported_as(source_format: str) -> list[SourceFormat]:
    """The formats a package's manifest may mean by its imported_quantization.source_format."""
    return [f for f in FORMATS if f.reader is not None and f.reported == source_format]
