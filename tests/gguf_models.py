"""GGUF files written from the tiny HF checkpoints, the way llama.cpp's converter lays them out.

    write_gguf(checkpoint, out_file, types="Q4_K") -> out_file

Metadata keys, tensor names (the `gguf` package's TensorNameMap, which llama.cpp's converter
uses), llama.cpp's q/k row permutation for the Llama architecture, Gemma's stored (1 + w) norms,
the byte-level BPE vocabulary as `tokenizer.ggml.*` and the chat template. `types` picks each
2-D weight's GGML type (a name, or a function of the GGUF tensor name); 1-D tensors stay F32 as
llama.cpp keeps them. The integer blocks come from tests/gguf_quants.py.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from gguf_quants import quantize

# GGUF architecture -> (writer of its metadata keys, whether q/k rows are permuted)
PERMUTED_QK = {"llama"}
NORM_PLUS_ONE = {"gemma2", "gemma3", "nemotron"}  # llama.cpp stores these norms as 1 + w
NO_LM_HEAD = {"gemma2"}  # llama.cpp's converter skips a stored lm_head (the embedding is tied)


EXPERT = re.compile(r"^(model\.layers\.\d+\.mlp\.experts)\.(\d+)\.(\w+)\.weight$")


def _hf_tensors(checkpoint: Path) -> dict[str, np.ndarray]:
    """The checkpoint's tensors in fp32, per-expert Linears stacked [E, N, K] as llama.cpp's
    converter stacks them (`...mlp.experts.gate_proj.weight`)."""
    from safetensors.numpy import load_file

    tensors: dict[str, np.ndarray] = {}
    for shard in sorted(checkpoint.glob("*.safetensors")):
        tensors.update({k: v.astype(np.float32) for k, v in load_file(shard).items()})
    experts: dict[str, dict[int, np.ndarray]] = {}
    for name in [n for n in tensors if EXPERT.match(n)]:
        prefix, e, proj = EXPERT.match(name).groups()  # type: ignore[union-attr]
        experts.setdefault(f"{prefix}.{proj}.weight", {})[int(e)] = tensors.pop(name)
    for name, by_index in experts.items():
        tensors[name] = np.stack([by_index[e] for e in sorted(by_index)])
    return tensors


def permute(w: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's LlamaModel.permute: per head, rows (pairs, half) -> (half, pairs)."""
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _tokenizer(writer: Any, checkpoint: Path, config: dict[str, Any], pre: str) -> None:
    tok = json.loads((checkpoint / "tokenizer.json").read_text())
    vocab = dict(tok["model"]["vocab"])
    special = {t["content"]: t["id"] for t in tok["added_tokens"]}
    vocab.update(special)
    size = config["vocab_size"]
    tokens = [f"[PAD{i}]" for i in range(size)]
    types = [5] * size  # UNUSED until named
    for text, index in vocab.items():
        if index < size:
            tokens[index] = text
            types[index] = (
                3 if text in special and any(t["special"] for t in tok["added_tokens"] if t["content"] == text) else 1
            )
    merges = [" ".join(m) if isinstance(m, list) else m for m in tok["model"]["merges"]]
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre(pre)
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    for key, add in (("bos_token_id", writer.add_bos_token_id), ("eos_token_id", writer.add_eos_token_id),
                     ("pad_token_id", writer.add_pad_token_id)):  # fmt: skip
        if config.get(key) is not None:
            add(int(config[key]))
    writer.add_add_bos_token(True)
    template = checkpoint / "chat_template.jinja"
    tok_config = json.loads((checkpoint / "tokenizer_config.json").read_text())
    chat = template.read_text() if template.is_file() else tok_config.get("chat_template")
    if chat:
        writer.add_chat_template(chat)


def _rope_params(config: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(full-attention rope parameters, sliding-attention ones) in either transformers spelling."""
    params = config.get("rope_parameters") or {}
    if "full_attention" in params:
        return params["full_attention"], params.get("sliding_attention", {})
    full = dict(params) or {"rope_theta": config.get("rope_theta", 10000.0)}
    sliding = {"rope_theta": config["rope_local_base_freq"]} if "rope_local_base_freq" in config else {}
    return full, sliding


def _text_keys(writer: Any, config: dict[str, Any]) -> None:
    """llama.cpp's TextModel.set_gguf_parameters: the keys every decoder gets."""
    heads = config["num_attention_heads"]
    writer.add_block_count(config["num_hidden_layers"])
    writer.add_context_length(config["max_position_embeddings"])
    writer.add_embedding_length(config["hidden_size"])
    writer.add_feed_forward_length(config["intermediate_size"])
    writer.add_head_count(heads)
    writer.add_head_count_kv(config.get("num_key_value_heads", heads))
    full, sliding = _rope_params(config)
    if full.get("rope_type") == "llama3":  # stored as the rope_freqs tensor instead (write_gguf)
        pass
    elif full.get("rope_type") == "linear":
        import gguf

        writer.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        writer.add_rope_scaling_factor(full["factor"])
    if full.get("rope_theta") is not None:
        writer.add_rope_freq_base(full["rope_theta"])
    if sliding.get("rope_theta") is not None:
        writer.add_rope_freq_base_swa(sliding["rope_theta"])
    for key in ("rms_norm_eps", "norm_eps"):
        if config.get(key) is not None:
            writer.add_layer_norm_rms_eps(config[key])
            break
    for key in ("layer_norm_eps", "layer_norm_epsilon", "norm_epsilon"):
        if config.get(key) is not None:
            writer.add_layer_norm_eps(config[key])
            break
    if config.get("head_dim"):
        writer.add_key_length(config["head_dim"])
        writer.add_value_length(config["head_dim"])


def _head_dim(config: dict[str, Any]) -> int:
    return config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]


def llama3_rope_factors(config: dict[str, Any]) -> np.ndarray | None:
    """llama.cpp's converter's rope_freqs for a llama3-scaled config (LlamaModel.generate_extra_tensors)."""
    import math

    params, _ = _rope_params(config)
    if params.get("rope_type") != "llama3":
        return None
    base, dim = params.get("rope_theta", 10000.0), _head_dim(config)
    freqs = 1.0 / (base ** (np.arange(0, dim, 2, dtype=np.float32) / dim))
    factor, low, high = (
        params.get("factor", 8.0),
        params.get("low_freq_factor", 1.0),
        params.get("high_freq_factor", 4.0),
    )
    old = params.get("original_max_position_embeddings", 8192)
    out = []
    for freq in freqs:
        wavelen = 2 * math.pi / freq
        if wavelen < old / high:
            out.append(1)
        elif wavelen > old / low:
            out.append(factor)
        else:
            smooth = (old / wavelen - low) / (high - low)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return np.array(out, dtype=np.float32)


def _llama_keys(writer: Any, config: dict[str, Any]) -> None:
    _text_keys(writer, config)
    writer.add_vocab_size(config["vocab_size"])
    writer.add_rope_dimension_count(_head_dim(config))


def _gemma2_keys(writer: Any, config: dict[str, Any]) -> None:
    _text_keys(writer, config)
    writer.add_attn_logit_softcapping(config["attn_logit_softcapping"])
    writer.add_final_logit_softcapping(config["final_logit_softcapping"])
    writer.add_sliding_window(config["sliding_window"])


def _gemma3_keys(writer: Any, config: dict[str, Any]) -> None:
    _text_keys(writer, config)
    if config.get("final_logit_softcapping"):
        writer.add_final_logit_softcapping(config["final_logit_softcapping"])
    writer.add_sliding_window(config["sliding_window"])


def _partial_rope_keys(writer: Any, config: dict[str, Any]) -> None:
    _text_keys(writer, config)
    full, _ = _rope_params(config)
    factor = full.get("partial_rotary_factor", config.get("partial_rotary_factor", 1.0))
    writer.add_rope_dimension_count(int(factor * _head_dim(config)))
    if config.get("use_parallel_residual") is not None:
        writer.add_parallel_residual(config["use_parallel_residual"])
    if config.get("sliding_window"):
        writer.add_sliding_window(config["sliding_window"])


def _moe_keys(writer: Any, config: dict[str, Any]) -> None:
    _text_keys(writer, config)
    writer.add_expert_count(config.get("num_local_experts", config.get("num_experts")))
    writer.add_expert_used_count(config["num_experts_per_tok"])
    writer.add_expert_feed_forward_length(config["moe_intermediate_size"])
    if config.get("shared_expert_intermediate_size"):
        writer.add_expert_shared_feed_forward_length(config["shared_expert_intermediate_size"])


METADATA: dict[str, Callable[[Any, dict[str, Any]], None]] = {
    "qwen2moe": _moe_keys,
    "qwen3moe": _moe_keys,
    "llama": _llama_keys,
    "qwen2": _text_keys,
    "qwen3": _text_keys,
    "gemma2": _gemma2_keys,
    "gemma3": _gemma3_keys,
    "phi3": _partial_rope_keys,
    "stablelm": _partial_rope_keys,
    "starcoder2": _text_keys,
}


def default_type(name: str, shape: tuple[int, ...], base: str) -> str:
    """llama.cpp's rule of thumb: 1-D tensors F32, 2-D ones the file type where K fits its blocks."""
    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

    if len(shape) < 2 or base in ("F32", "F16", "BF16") or ".ffn_gate_inp" in name:  # routers stay F32
        return "F32" if len(shape) < 2 or ".ffn_gate_inp" in name else base
    block = GGML_QUANT_SIZES[GGMLQuantizationType[base]][0]
    return base if shape[-1] % block == 0 else "Q8_0" if shape[-1] % 32 == 0 else "F16"


def write_gguf(
    checkpoint: Path,
    out: Path,
    types: str | Callable[[str, tuple[int, ...]], str] = "F32",
    arch: str = "llama",
    pre: str = "gpt-2",
    split_max_tensors: int = 0,
    drop: tuple[str, ...] = (),
    tokenizer: bool = True,
) -> Path:
    """Write `checkpoint` (a tiny HF folder) as a GGUF of architecture `arch` at `out`."""
    import gguf

    config = json.loads((checkpoint / "config.json").read_text())
    layers = config["num_hidden_layers"]
    arch_id = next(k for k, v in gguf.MODEL_ARCH_NAMES.items() if v == arch)
    names = gguf.get_tensor_name_map(arch_id, layers)
    writer = gguf.GGUFWriter(out, arch, split_max_tensors=split_max_tensors)
    writer.add_name(config.get("_name_or_path") or "tiny")
    METADATA[arch](writer, config)
    if tokenizer:
        _tokenizer(writer, checkpoint, config, pre)
    heads, kv_heads = config["num_attention_heads"], config.get("num_key_value_heads", config["num_attention_heads"])
    factors = llama3_rope_factors(config) if arch == "llama" else None
    if factors is not None:
        writer.add_tensor("rope_freqs.weight", factors)
    for hf_name, value in _hf_tensors(checkpoint).items():
        base, _, suffix = hf_name.rpartition(".")
        gguf_base = names.get_name(base)
        if gguf_base is None:
            raise KeyError(f"no GGUF name for {hf_name}")
        name = f"{gguf_base}.{suffix}"
        if any(d in name for d in drop) or (arch in NO_LM_HEAD and name == "output.weight"):
            continue
        if arch in PERMUTED_QK and suffix == "weight" and gguf_base.endswith(("attn_q", "attn_k")):
            value = permute(value, heads if gguf_base.endswith("attn_q") else kv_heads)
        if arch in NORM_PLUS_ONE and "norm" in gguf_base and suffix == "weight":
            value = value + np.float32(1.0)
        kind = types(name, value.shape) if callable(types) else default_type(name, value.shape, types)
        _add(writer, name, value, kind)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return out


def _add(writer: Any, name: str, value: np.ndarray, kind: str) -> None:
    from gguf.constants import GGMLQuantizationType

    if kind == "F32":
        writer.add_tensor(name, np.ascontiguousarray(value, np.float32))
    elif kind == "F16":
        writer.add_tensor(name, value.astype(np.float16))
    else:
        raw = quantize(value, kind)
        writer.add_tensor(name, raw, raw_shape=raw.shape, raw_dtype=GGMLQuantizationType[kind])


def effective_weights(path: Path, hf_name: str, precision: str = "fp32") -> tuple[np.ndarray, np.ndarray, list[str]]:
    """(what the package computes for `hf_name`, weight by weight, [N, K]; the `gguf` package's
    dequantization of the same tensor in HF layout; the op types of the imported layer).

    One linear layer x·Wᵀ is built over the GGUF weight, imported (quant/gguf_import.py), saved
    and run by onnxruntime on the identity: row k of the output is column k of the weight the
    nodes compute, whatever their form (MatMulNBits, min correction, concatenation)."""
    import tempfile

    import onnx_ir as ir
    import onnxruntime as ort
    from gguf.constants import GGMLQuantizationType
    from gguf.quants import dequantize

    from gqa_export.graph.params import Params
    from gqa_export.package.writer import save_models
    from gqa_export.quant.gguf_import import GgufReport, import_gguf
    from gqa_export.quant.quantize import plan_precision
    from gqa_export.source.gguf import GgufStore, open_gguf
    from gqa_export.source.gguf.config import read_config

    file = open_gguf(path)
    store = GgufStore(file, read_config(file)).for_build(False)
    from gqa_export.quant.options import QuantOptions

    # accuracy level 0: the identity input itself must not be quantized (level 4 rounds it to int8)
    plan = plan_precision("cpu", precision, None if precision.startswith("fp") else QuantOptions(accuracy_level=0))
    k = store.info(hf_name).shape[1]
    x = ir.Value(name="x", type=ir.TensorType(ir.DataType.FLOAT), shape=ir.Shape(["M", k]))
    weight = Params(store, plan.io_dtype).matmul_weight([hf_name])
    w = ir.Value(name=hf_name, type=ir.TensorType(weight.dtype), shape=ir.Shape(weight.shape), const_value=weight)
    node = ir.Node("", "MatMul", [x, w], name="linear", num_outputs=1)
    node.outputs[0].name, node.outputs[0].type = "y", ir.TensorType(ir.DataType.FLOAT)
    graph = ir.Graph([x], node.outputs, nodes=[node], initializers=[w], opset_imports={"": 21, "com.microsoft": 1})
    model = ir.Model(graph, ir_version=10)
    import_gguf(model, store, plan, GgufReport())
    ops = [n.op_type for n in model.graph]
    with tempfile.TemporaryDirectory() as tmp:
        save_models([("m.onnx", model)], Path(tmp), "m.onnx.data")
        session = ort.InferenceSession(str(Path(tmp) / "m.onnx"), providers=["CPUExecutionProvider"])
        got = session.run(None, {"x": np.eye(k, dtype=np.float32)})[0].T
    m = store.mapped()[hf_name]
    tensor = file.tensors[m.gguf]
    kind = GGMLQuantizationType[tensor.type_name]
    raw = np.asarray(tensor.data)
    ref = raw.astype(np.float32) if tensor.type_name in ("F32", "F16") else dequantize(raw, kind)
    if m.rows is not None:
        ref = ref[m.rows]
    return got, ref, ops


# the tiny checkpoints GGUF tests write files from: K-quants need rows of whole 256-weight blocks,
# and init 0.1 keeps the logits at the registry's scale (~6), where the fp32 bound 1e-4 applies
_LLAMA256 = dict(
    hidden_size=256, intermediate_size=512, num_attention_heads=4, num_key_value_heads=2, initializer_range=0.1
)
_GEMMA = dict(head_dim=16, query_pre_attn_scalar=16, sliding_window=8, tie_word_embeddings=True)
LLAMA3_ROPE = {"rope_type": "llama3", "factor": 4.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 64, "rope_theta": 10000.0}  # fmt: skip
GGUF_CHECKPOINTS: dict[str, tuple[str, dict[str, Any]]] = {
    "llama256": ("llama", _LLAMA256),
    # Llama-3's scaling, which a GGUF holds as the rope_freqs tensor (64-wide heads: a smooth region)
    "llama3_rope": ("llama", dict(_LLAMA256, rope_parameters=LLAMA3_ROPE)),
    # family checkpoints (tiny_models.BASE shape: hidden 64, K a whole number of 32-blocks)
    "qwen2": ("qwen2", {}),
    "qwen3": ("qwen3", dict(head_dim=32)),
    "mistral": ("mistral", {}),
    # llama.cpp's converter drops Gemma-2's lm_head (always tied); small weights keep the tied tiny model
    # from repeating its input token (greedy tokens of 48 steps vary)
    "gemma2": (
        "gemma2",
        dict(
            _GEMMA,
            attn_logit_softcapping=20.0,
            final_logit_softcapping=15.0,
            num_hidden_layers=3,
            initializer_range=0.05,
        ),
    ),
    "gemma3": (
        "gemma3_text",
        dict(
            _GEMMA,
            num_hidden_layers=6,
            tie_word_embeddings=False,
            rope_parameters={
                "full_attention": {"rope_type": "linear", "factor": 2.0, "rope_theta": 1e6},
                "sliding_attention": {"rope_type": "default", "rope_theta": 1e4},
            },
        ),
    ),
    "phi3": ("phi3", dict(partial_rotary_factor=0.5)),
    "stablelm": ("stablelm", {}),
    "starcoder2": ("starcoder2", {}),
    # every layer sparse (llama.cpp's qwen3moe has no dense layers) and llama.cpp's fixed top-k renormalization
    "qwen3_moe": ("qwen3_moe", dict(mlp_only_layers=[], norm_topk_prob=True)),
    "qwen2_moe": ("qwen2_moe", {}),
}


class GgufFiles:
    """GGUF files (and their packages) made once per test session, by (checkpoint, types, arch)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._checkpoints: dict[str, Path] = {}
        self._files: dict[tuple, Path] = {}
        self._packages: dict[tuple, Path] = {}

    def checkpoint(self, name: str) -> Path:
        if name not in self._checkpoints:
            from tiny_models import save_model

            model_type, overrides = GGUF_CHECKPOINTS[name]
            if model_type.endswith("_moe"):
                from moe_models import save_moe

                self._checkpoints[name] = save_moe(self.root / "hf" / name, model_type, **overrides)
            else:
                self._checkpoints[name] = save_model(self.root / "hf" / name, model_type, **overrides)
        return self._checkpoints[name]

    def get(self, name: str, types: str = "F32", arch: str = "llama", **kwargs: Any) -> Path:
        """The GGUF of checkpoint `name` (a GGUF_CHECKPOINTS key or a folder) with 2-D weights in `types`."""
        key = (name, types, arch, tuple(sorted(kwargs.items())))
        if key not in self._files:
            source = Path(name) if "/" in name else self.checkpoint(name)
            folder = self.root / "gguf" / f"{Path(name).name}-{types}-{arch}-{len(self._files)}"
            folder.mkdir(parents=True)
            type_rule = TYPE_RULES[types] if types in TYPE_RULES else types
            self._files[key] = write_gguf(source, folder / f"model-{types}.gguf", type_rule, arch, **kwargs)
        return self._files[key]

    def package(self, name: str, types: str = "F32", precision: str | None = "fp32", **kwargs: Any) -> Path:
        """The package of `get(name, types, **kwargs)` (no smoke run)."""
        key = (name, types, precision, tuple(sorted(kwargs.items())))
        if key not in self._packages:
            from gqa_export.pipeline import BuildOptions, build

            out = self.root / "pkg" / f"{Path(name).name}-{types}-{precision}-{len(self._packages)}"
            build(BuildOptions(str(self.get(name, types, **kwargs)), out, precision=precision, smoke=False))
            self._packages[key] = out
        return self._packages[key]


def q4_k_m(name: str, shape: tuple[int, ...]) -> str:
    """llama.cpp's Q4_K_M mix in miniature: v_proj, down_proj and the output in Q6_K, the rest Q4_K."""
    if len(shape) < 2:
        return "F32"
    return (
        "Q6_K"
        if name in ("output.weight", "token_embd.weight") or ".attn_v." in name or ".ffn_down." in name
        else "Q4_K"
    )


TYPE_RULES: dict[str, Callable[[str, tuple[int, ...]], str]] = {"Q4_K_M": q4_k_m}


def hf_from_gguf(path: Path, config_dir: Path | None = None):
    """transformers' own load of a GGUF (its tensor mapping and dequantization, fp32): the
    reference. `config_dir`: the config to use instead of transformers' reading of the metadata
    (its mapping has gaps where llama.cpp's reading decides: docs/gguf.md §2)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    extra: dict[str, Any] = {"config": AutoConfig.from_pretrained(config_dir)} if config_dir is not None else {}
    if b"ffn_gate_inp_shexp" in path.read_bytes()[: 1 << 20]:  # the one mismatch _correct_loader_gaps repairs
        extra["ignore_mismatched_sizes"] = True
    model = AutoModelForCausalLM.from_pretrained(
        str(path.parent), gguf_file=path.name, dtype=torch.float32, **extra
    ).eval()
    _correct_loader_gaps(model, path)
    return model


def _correct_loader_gaps(model: Any, path: Path) -> None:
    """transformers 5.24's GGUF tensor loader reshapes Qwen2-MoE's shared-expert gate [1, H] to
    [1, 1, H] and then drops it as a size mismatch (the layer keeps a random init): put the file's
    values back, dequantized by the `gguf` package, as llama.cpp reads them."""
    import torch
    from gguf import GGUFReader
    from gguf.quants import dequantize

    for tensor in GGUFReader(path).tensors:
        if tensor.name.endswith("ffn_gate_inp_shexp.weight"):
            layer = int(tensor.name.split(".")[1])
            values = dequantize(np.asarray(tensor.data), tensor.tensor_type).reshape(1, -1)
            with torch.no_grad():
                model.model.layers[layer].mlp.shared_expert_gate.weight.copy_(torch.from_numpy(values.copy()))


def package_eos(package: Path) -> list[int]:
    """The end-of-generation ids the package stops at (genai suppresses all of them until min_length)."""
    eos = json.loads((package / "genai_config.json").read_text())["model"]["eos_token_id"]
    return eos if isinstance(eos, list) else [eos]


def hf_generate_until(model: Any, prompt: list[int], new: int, eos: list[int]) -> list[int]:
    """HF greedy generate with the same end-of-generation ids suppressed as the package's."""
    import torch

    with torch.no_grad():
        out = model.generate(
            torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long), max_new_tokens=new,
            min_new_tokens=new, do_sample=False, eos_token_id=eos, pad_token_id=eos[0],
        )  # fmt: skip
    return out[0, len(prompt) :].tolist()
