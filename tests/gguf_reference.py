"""The GGUF tests' references and session fixtures (the writer is tests/gguf_models.py).

- `effective_weights`: what a package computes for one GGUF weight, weight by weight, through
  onnxruntime on the identity, beside the `gguf` package's dequantization of the same bytes;
- `hf_from_gguf`: transformers' own load of a GGUF (the reference; its known loader gaps repaired);
- `GgufFiles`: GGUF files and their packages made once per session from tiny checkpoints;
- `package_eos` / `hf_generate_until`: HF generate holding back the ids genai holds back.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from gguf_models import write_gguf


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
    # K-quant experts need K a whole number of 256-weight blocks: hidden and expert width 256
    "qwen3_moe256": (
        "qwen3_moe",
        dict(hidden_size=256, moe_intermediate_size=256, mlp_only_layers=[], norm_topk_prob=True, num_hidden_layers=2),
    ),
    # the classic decoders and Nemotron (tests/dense_models.py shapes): Bloom (ALiBi, qkv per head),
    # Falcon-7B (multi-query) and Falcon-40B's grouped layout, GPT-2 (Conv1D), Nemotron (1 + w norms)
    "bloom": ("dense:bloom", {}),
    "falcon": ("dense:falcon", {}),
    "falcon_grouped": ("dense:falcon", dict(new_decoder_architecture=True, num_kv_heads=2, parallel_attn=True)),
    "gpt2": ("dense:gpt2", {}),
    "nemotron": ("dense:nemotron", {}),
    # Mixtral: llama.cpp writes it as `llama` with stacked experts (and runs it without a sliding window)
    "mixtral": ("mixtral", dict(sliding_window=None)),
    # Phi-3 LongRoPE (the factors as rope_factors_long / _short tensors) and StableLM's per-head q/k norms
    "phi3_longrope": (
        "phi3",
        dict(
            original_max_position_embeddings=32,
            rope_scaling={
                "type": "longrope",
                "short_factor": [1.0, 1.1, 1.3, 1.6, 2.0, 2.5, 3.1, 3.8],
                "long_factor": [1.0, 1.5, 2.2, 3.0, 4.1, 5.5, 7.0, 9.0],
            },
        ),
    ),
    "lfm2": ("dense:lfm2", {}),
    "stablelm_qk_norm": ("stablelm", dict(qk_layernorm=True, num_key_value_heads=4)),
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
            if model_type.startswith("dense:"):
                from dense_models import save_dense

                self._checkpoints[name] = save_dense(self.root / "hf" / name, model_type[6:], **overrides)
            elif model_type.endswith("_moe") or model_type == "mixtral":
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

    def twin(self, name: str, types: str, arch: str) -> Path:
        """The HF checkpoint holding the weights of `get(name, types, arch)` dequantized (gguf_models)."""
        key = (name, types, arch, "twin")
        if key not in self._files:
            folder = self.root / "twin" / f"{name}-{types}-{arch}"
            write_gguf(self.checkpoint(name), folder / "unused.gguf", types, arch, twin=folder / "hf")
            self._files[key] = folder / "hf"
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
