"""Read any ORT GenAI package (ours, the official builder's, other exporters') or a bare .onnx.

Everything comes from the files themselves: genai_config.json (raw JSON, no assumptions about who
wrote it), the ONNX graphs (loaded without their external data), and, where present, the HF
config.json / generation_config.json in the package folder or the `source` folder given. The
lints that judge the result live in `lints.py`.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import onnx
import onnx_ir as ir
from onnx import TensorProto, helper

from gqa_export.check.external_data import external_data_problems
from gqa_export.check.op_facts import ir_facts
from gqa_export.check.stages import decoder_stages, encoder_stages
from gqa_export.check.weight_census import weight_census
from gqa_export.eps import by_genai_provider
from gqa_export.errors import InputError
from gqa_export.jsonio import read_json
from gqa_export.package.graph_facts import graph_facts
from gqa_export.package.paths import check_package_path, package_config

ATTENTION_OPS = ("GroupQueryAttention", "Attention", "MultiHeadAttention", "PagedAttention", "SparseAttention")
_LAYER = re.compile(r"(?:layers?|blocks?|h)[._/](\d+)")
_GQA_BIAS_INPUT = 10  # GroupQueryAttention's optional attention_bias input
_PAST = re.compile(r"past_key_values\.(\d+)\.(key|value)$")
_PAST_STATE = re.compile(r"past\.(\d+)\.(conv|recurrent)$")
_CACHE = re.compile(r"(?:past_key_values|present)\.(\d+)\.key$")
BYTES = {
    TensorProto.FLOAT: 4,
    TensorProto.FLOAT16: 2,
    TensorProto.BFLOAT16: 2,
    TensorProto.UINT8: 1,
    TensorProto.INT8: 1,
}


@dataclass
class LayerAttention:
    graph: str
    layer: int | None
    op: str
    num_heads: int | None
    kv_heads: int | None
    head_dim: int | None
    do_rotary: bool
    local_window_size: int
    softcap: float
    packed_qkv: bool
    fused_rope: bool
    window_cache: bool = False  # GQA sliding_window_cache=1: window-sized KV buffer
    attention_bias: bool = False  # GQA with an attention_bias input: a window lives in the bias
    kv_source: int | None = None  # the layer whose KV cache this one reads (itself unless KV-shared)


@dataclass
class ExpertBlock:
    """One MoE / QMoE node: what a layer's mixture of experts runs."""

    graph: str
    layer: int | None
    op: str
    experts: int | None
    top_k: int
    precision: str  # the expert weights: float dtype, or intN block B
    activation: str
    normalize: bool
    router_weights: bool  # QMoE given explicit mixing weights
    attributes: dict[str, Any] = field(default_factory=dict)


@dataclass
class GraphInfo:
    filename: str
    role: str  # "decoder" or a pipeline stage id
    run_on_prompt: bool = True
    run_on_token_gen: bool = True
    inputs: list[dict[str, Any]] = field(default_factory=list)
    outputs: list[dict[str, Any]] = field(default_factory=list)
    ops: dict[str, int] = field(default_factory=dict)
    opsets: dict[str, int] = field(default_factory=dict)
    weights: dict[str, str] = field(default_factory=dict)  # weight kind -> precision
    parameters: int = 0
    attention: list[LayerAttention] = field(default_factory=list)
    rope_rows: int | None = None  # rows of the cos/sin caches GQA reads
    unused_inputs: list[str] = field(default_factory=list)
    kv_written_in_place: bool = False  # every past input is TensorScatter-ed into its own present
    experts: list[ExpertBlock] = field(default_factory=list)
    external_problems: list[str] = field(default_factory=list)  # missing / truncated data files
    op_facts: list[tuple[str, str, int]] = field(default_factory=list)  # (op, compute dtype, bits): op_facts.py


@dataclass
class Package:
    path: Path
    config: dict[str, Any] | None
    graphs: list[GraphInfo]
    hf_config: dict[str, Any] | None
    generation: dict[str, Any] | None
    files: dict[str, int]
    missing_files: list[str]
    manifest: dict[str, Any] | None = None
    source_windows: list[int] | None = None  # a --source checkpoint's windows, read as build reads them
    # a multimodal package's vision / embedding graphs (docs/multimodal.md §2): listed, never linted as decoders
    encoders: list[GraphInfo] = field(default_factory=list)
    draft: GraphInfo | None = None  # a speculative-decoding draft model (model.draft, docs/speculative.md)

    @property
    def attention_windows(self) -> list[int] | None:
        """Each layer's window (-1 = full attention) as the export resolves it: a --source
        checkpoint's, else the manifest's record (`model.attention_windows`), else None. Never
        re-derived from config.json's raw keys: 4.x configs spell the layer pattern in ways only
        the export's reading (transformers' config + the family's spec) resolves."""
        if self.source_windows is not None:
            return self.source_windows
        model = (self.manifest or {}).get("model")  # a hand-edited manifest may hold anything here
        windows = model.get("attention_windows") if isinstance(model, dict) else None
        if not isinstance(windows, list) or not all(isinstance(w, int) and not isinstance(w, bool) for w in windows):
            return None
        return [int(w) for w in windows]

    @property
    def decoder(self) -> dict[str, Any]:
        return ((self.config or {}).get("model") or {}).get("decoder") or {}

    @property
    def max_length(self) -> int | None:
        if not self.config:
            return None
        search, model = self.config.get("search"), self.config.get("model")
        value = (search.get("max_length") if isinstance(search, dict) else None) or (
            model.get("context_length") if isinstance(model, dict) else None
        )
        return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None

    def kv_bytes_per_row(self) -> int | None:
        """KV cache bytes for one batch row at max_length, from the graph's past inputs."""
        if not self.graphs or not self.max_length:
            return None
        total = 0
        for info in self.graphs[0].inputs:
            if m := _PAST.match(info["name"]):
                shape = info["shape"]
                kv, dim = shape[1], shape[3]
                kv = kv if isinstance(kv, int) else self.decoder.get("num_key_value_heads")
                dim = dim if isinstance(dim, int) else self.decoder.get("head_size")
                if not kv or not dim:
                    return None
                total += kv * dim * self.window_slots(int(m.group(1))) * BYTES.get(info["elem_type"], 2)
        return total

    def state_bytes_per_row(self) -> int:
        """Recurrent-state bytes for one batch row (every conv state past.N.conv and gated-DeltaNet
        or Mamba2 state past.N.recurrent, docs/hybrid-state.md §8.2), which do not grow with the
        length: the runtime allocates them from the inputs' static dims."""
        total = 0
        for info in self.graphs[0].inputs if self.graphs else []:
            if _PAST_STATE.match(info["name"]):
                dims = info["shape"][1:]
                if all(isinstance(d, int) for d in dims):
                    size = 1
                    for d in dims:
                        size *= d
                    total += size * BYTES.get(info["elem_type"], 2)
        return total

    def window_slots(self, layer: int) -> int:
        """KV slots ORT GenAI allocates for a layer: max_length, or for a layer listed in
        decoder.sliding_window min(max_length, window + slack), slack 0 on CUDA and 16 on CPU
        unless cache_slack is set (docs/ortgenai.md §3.5)."""
        assert self.max_length
        window = self.decoder.get("sliding_window") or {}
        if not window or window.get("slide_key_value_cache", True):
            return self.max_length
        layers = window.get("layers") or None
        if layers is not None and layer not in layers:
            return self.max_length
        providers = [next(iter(p)) for p in (self.decoder.get("session_options") or {}).get("provider_options") or []]
        slack = window.get("cache_slack", by_genai_provider(providers).window_slack)
        return min(self.max_length, int(window.get("window_size", self.max_length)) + int(slack))


def load_package(path: Path, source: Path | None = None) -> Package:
    path = path.expanduser()
    check_package_path(path, files=True)
    if path.suffix == ".onnx":
        folder, config, stages = path.parent, None, [(path.name, "model", True, True)]
    else:
        folder = path.parent if path.is_file() else path
        config = package_config(folder)
        stages = decoder_stages(config)
    graphs, missing = [], []
    for filename, role, on_prompt, on_gen in stages:
        file = folder / filename
        if not file.is_file():
            missing.append(filename)
            continue
        graphs.append(_graph_info(file, role, on_prompt, on_gen, config))
    encoders = []
    for filename, role, on_prompt, on_gen in encoder_stages(config or {}):
        if not (folder / filename).is_file():
            missing.append(filename)
            continue
        encoders.append(_graph_info(folder / filename, role, on_prompt, on_gen, None))
    draft = None
    section = ((config or {}).get("model") or {}).get("draft")
    # read like the decoder, with its own section (a missing draft is the `draft-missing` lint's)
    if isinstance(section, dict) and section.get("filename") and (folder / section["filename"]).is_file():
        draft = _graph_info(folder / section["filename"], "draft", True, True, {"model": {"decoder": section}})
    hf_dir = source or folder
    files = {p.name: p.stat().st_size for p in sorted(folder.iterdir()) if p.is_file()}
    return Package(
        folder,
        config,
        graphs,
        read_json(hf_dir / "config.json"),
        read_json(hf_dir / "generation_config.json"),
        files,
        missing,
        read_json(folder / "manifest.json"),
        encoders=encoders,
        draft=draft,
    )


def _value_info(v: onnx.ValueInfoProto) -> dict[str, Any]:
    t = v.type.tensor_type
    shape = [d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in t.shape.dim]
    return {
        "name": v.name,
        "dtype": TensorProto.DataType.Name(t.elem_type).lower(),
        "elem_type": t.elem_type,
        "shape": shape,
    }


def _graph_info(file: Path, role: str, on_prompt: bool, on_gen: bool, config: dict[str, Any] | None) -> GraphInfo:
    try:
        model = onnx.load(str(file), load_external_data=False)
    except Exception as exc:  # protobuf raises DecodeError and friends
        raise InputError(f"{file} is not a readable ONNX model ({exc})") from None
    g = model.graph
    info = GraphInfo(file.name, role, on_prompt, on_gen, external_problems=external_data_problems(model, file.parent))
    info.inputs = [_value_info(v) for v in g.input]
    info.outputs = [_value_info(v) for v in g.output]
    info.ops = dict(Counter(n.op_type for n in g.node).most_common())
    info.opsets = {o.domain or "ai.onnx": o.version for o in model.opset_import}
    used = {i for n in g.node for i in n.input} | {
        i for n in g.node for a in n.attribute if a.g for s in a.g.node for i in s.input
    }
    info.unused_inputs = [v.name for v in g.input if v.name not in used]
    inits = {t.name: t for t in g.initializer}
    info.weights, info.parameters = weight_census(g, inits)
    decoder = ((config or {}).get("model") or {}).get("decoder") or {}
    past_dims = {int(m.group(1)): v["shape"] for v in info.inputs if (m := _PAST.match(v["name"]))}
    producers = {out: n for n in g.node for out in n.output}
    # the facts genai_config is written from at build time, read the same way here (package/graph_facts.py)
    ir_model = ir.from_proto(model)
    info.kv_written_in_place = graph_facts(ir_model).kv_scattered
    info.op_facts = sorted(ir_facts(ir_model))
    for index, node in enumerate(n for n in g.node if n.op_type in ATTENTION_OPS):
        info.attention.append(_attention(node, index, inits, decoder, past_dims, info, producers))
    info.experts = [_experts(node, inits, info.filename) for node in g.node if node.op_type in ("MoE", "QMoE")]
    return info


def _experts(node: onnx.NodeProto, inits: dict[str, TensorProto], graph: str) -> ExpertBlock:
    a = {x.name: helper.get_attribute_value(x) for x in node.attribute}
    fc1 = inits.get(node.input[2]) if len(node.input) > 2 else None
    if node.op_type == "QMoE":
        precision = f"int{a.get('expert_weight_bits', 4)} (block {a.get('block_size', 'per-channel')})"
    else:
        precision = TensorProto.DataType.Name(fc1.data_type).lower() if fc1 is not None else "?"
    layer = int(m.group(1)) if (m := _LAYER.search(node.name)) else None
    activation = a.get("activation_type", "relu")
    return ExpertBlock(
        graph=graph,
        layer=layer,
        op=node.op_type,
        experts=int(fc1.dims[0]) if fc1 is not None else None,
        top_k=int(a.get("k", 1)),
        precision=precision,
        activation=activation.decode() if isinstance(activation, bytes) else str(activation),
        normalize=bool(a.get("normalize_routing_weights", 0)),
        router_weights=node.op_type == "QMoE" and len(node.input) > 14 and bool(node.input[14]),
        attributes={k: (v.decode() if isinstance(v, bytes) else v) for k, v in a.items()},
    )


def _kv_source(node: onnx.NodeProto, producers: dict[str, onnx.NodeProto]) -> int | None:
    """The cache layer an attention node reads: its past input (GQA), or the cache its key input
    comes from through TensorScatter / Slice / another layer's Attention (KV-shared layers)."""
    names = [node.input[3]] if node.op_type == "GroupQueryAttention" and len(node.input) > 3 else []
    if node.op_type == "Attention":
        names = [node.input[4]] if len(node.input) > 4 and node.input[4] else [node.input[1]]
    for name in names:
        for _ in range(6):
            if m := _CACHE.match(name):
                return int(m.group(1))
            producer = producers.get(name)
            if producer is None or not producer.input:
                break
            if producer.op_type == "Attention" and len(producer.input) > 4 and name == producer.output[1]:
                name = producer.input[4]  # a layer reading another layer's concatenated present
            else:
                name = producer.input[0]
    return None


def _attention(
    node: onnx.NodeProto,
    index: int,
    inits: dict[str, TensorProto],
    decoder: dict[str, Any],
    past: dict,
    info: GraphInfo,
    producers: dict[str, onnx.NodeProto],
) -> LayerAttention:
    a = {x.name: helper.get_attribute_value(x) for x in node.attribute}
    source = _kv_source(node, producers)
    layer = int(m.group(1)) if (m := _LAYER.search(node.name)) else source
    layer = index if layer is None else layer
    source = layer if source is None else source
    heads = a.get("num_heads") or a.get("q_num_heads") or decoder.get("num_attention_heads")
    shape = past.get(source)
    kv = a.get("kv_num_heads") or (shape[1] if shape and isinstance(shape[1], int) else None)
    kv = kv or decoder.get("num_key_value_heads")
    head_dim = shape[3] if shape and isinstance(shape[3], int) else decoder.get("head_size")
    gqa = node.op_type == "GroupQueryAttention"
    rotary = bool(a.get("do_rotary", 0))
    if gqa and rotary and len(node.input) > 7 and node.input[7] in inits:
        info.rope_rows = inits[node.input[7]].dims[0]
    return LayerAttention(
        graph=info.filename,
        layer=layer,
        op=node.op_type,
        num_heads=heads,
        kv_heads=kv,
        head_dim=head_dim,
        do_rotary=rotary,
        local_window_size=int(a.get("local_window_size", -1)),
        softcap=float(a.get("softcap", 0.0)),
        packed_qkv=gqa and (len(node.input) < 2 or node.input[1] == ""),
        fused_rope=rotary,
        window_cache=bool(a.get("sliding_window_cache", 0)),
        attention_bias=gqa and len(node.input) > _GQA_BIAS_INPUT and node.input[_GQA_BIAS_INPUT] != "",
        kv_source=source,
    )
