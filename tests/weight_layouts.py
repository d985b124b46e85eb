"""Independent readers of a package's quantized weights, for checks a layout bug cannot pass.

`matmulnbits_weights` dequantizes every com.microsoft.MatMulNBits weight of a package with numpy,
from the op's documented semantics alone (docs/ort-ops.md §4.2: B [N, kb, bs*bits/8] uint8 packed along
K inside each block, lower K index in the lower bits; scales [N, kb]; packed zero points [N,
ceil(kb*bits/8)] with the same bit order across blocks, default 2^(bits-1); W = (q - zp) * scale).
`relative_errors` compares each with the checkpoint's own float weight (fused projections are the
concatenation of the checkpoint's q/k/v or gate/up rows; Qwen3-Next's DeltaNet projections are cut
out of its per-key-head in_proj_qkvz / in_proj_ba by reshapes, as HF does; ungated experts are
every expert's up rows stacked, or down columns side by side). A correct int4 block-32 weight is off by
about 0.1 (relative L2), int8 by about 0.005; a nibble-order, scale or zero-point bug by about 1.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

INT4_MAX_ERROR = 0.2  # relative L2 of one dequantized int4 block-32 weight (correct: ~0.08)
INT8_MAX_ERROR = 0.02  # int8 (correct: ~0.005)
FUSED = {  # a packed weight's name -> the spellings of the checkpoint weights it concatenates
    "qkv_proj": (("q_proj", "k_proj", "v_proj"), ("Wq", "Wk", "Wv")),  # CTRL's Wq / Wk / Wv
    "qk_proj": (("q_proj", "k_proj"),),  # layers whose values are their keys (Gemma-4 attention_k_eq_v)
    # LFM2, EXAONE-3, xLSTM (proj_up_gate, proj_up)
    "gate_up_proj": (("gate_proj", "up_proj"), ("w1", "w3"), ("c_fc_0", "c_fc_1"), ("proj_up_gate", "proj_up")),
}
CONV1D = ("c_attn", "c_proj", "c_fc")  # GPT-2's Conv1D modules


def _unpack(packed: np.ndarray, bits: int, count: int) -> np.ndarray:
    """uint8 [..., bytes] -> integers [..., count], lower index in the lower bits of each byte."""
    per_byte = 8 // bits
    shifts = np.arange(per_byte, dtype=np.uint8) * bits
    values = (packed[..., None] >> shifts) & ((1 << bits) - 1)
    return values.reshape(*packed.shape[:-1], -1)[..., :count].astype(np.float64)


def dequantize_matmulnbits(
    b: np.ndarray, scales: np.ndarray, zero_points: np.ndarray | None, n: int, k: int, bits: int, block: int
) -> np.ndarray:
    blocks = -(-k // block)
    q = _unpack(b.reshape(n, blocks, -1), bits, block)  # [N, kb, bs]
    if zero_points is None:
        zp = np.full((n, blocks), 2 ** (bits - 1), np.float64)
    else:
        zp = _unpack(zero_points.reshape(n, -1), bits, blocks)
    w = (q - zp[..., None]) * scales.reshape(n, blocks)[..., None].astype(np.float64)
    return w.reshape(n, blocks * block)[:, :k]


def matmulnbits_weights(package: Path, graph_file: str = "model.onnx") -> dict[str, np.ndarray]:
    """weight base name (the initializer name without `.qweight`) -> dequantized W [N, K]."""
    model = onnx.load(str(package / graph_file))  # external data loaded: small test packages
    inits = {t.name: t for t in model.graph.initializer}
    out = {}
    for node in model.graph.node:
        if node.op_type != "MatMulNBits":
            continue
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        zero_points = numpy_helper.to_array(inits[node.input[3]]) if len(node.input) > 3 and node.input[3] else None
        w = dequantize_matmulnbits(
            numpy_helper.to_array(inits[node.input[1]]),
            numpy_helper.to_array(inits[node.input[2]]),
            zero_points,
            attrs["N"],
            attrs["K"],
            attrs["bits"],
            attrs["block_size"],
        )
        out[node.input[1].removesuffix(".qweight")] = w
    return out


def checkpoint_tensors(checkpoint: Path) -> dict[str, np.ndarray]:
    """Every tensor of a safetensors checkpoint as float64 (bf16 included)."""
    from safetensors.torch import load_file

    files = sorted(checkpoint.glob("*.safetensors"))
    tensors = {}
    for file in files:
        for name, value in load_file(str(file)).items():
            tensors[name] = value.double().numpy()
    return tensors


def grouped_deltanet_weights(tensors: dict[str, np.ndarray], head: str, config: dict) -> dict[str, np.ndarray]:
    """Qwen3-Next's in_proj_qkv / _z / _b / _a as HF's fix_query_key_value_ordering derives them from
    the projections fused per key head (in_proj_qkvz, in_proj_ba under `head`), by reshapes: each key
    head's rows are q | k | v | z (dk, dk, r dv, r dv), and b | a (r, r), r = Hv / Hk."""
    qkvz, ba = tensors.get(f"{head}.in_proj_qkvz.weight"), tensors.get(f"{head}.in_proj_ba.weight")
    stacked = tensors.get(f"{head}.in_proj.weight")
    if stacked is not None:  # Lara-Mini's hub in_proj: rows q | k | v | z | b | a, as transformers' Split(dim=0)
        hk, hv = config["linear_num_key_heads"], config["linear_num_value_heads"]
        qkv = 2 * hk * config["linear_key_head_dim"] + hv * config["linear_value_head_dim"]
        parts = np.split(stacked, [qkv, qkv + hv * config["linear_value_head_dim"], stacked.shape[0] - hv])
        return dict(zip(("in_proj_qkv", "in_proj_z", "in_proj_b", "in_proj_a"), parts, strict=True))
    if qkvz is None or ba is None:
        return {}
    hk, hv = config["linear_num_key_heads"], config["linear_num_value_heads"]
    dk, dv, r = config["linear_key_head_dim"], config["linear_value_head_dim"], hv // hk
    groups = qkvz.reshape(hk, 2 * dk + 2 * r * dv, -1)
    q, k, v, z = np.split(groups, [dk, 2 * dk, 2 * dk + r * dv], axis=1)
    b, a = np.split(ba.reshape(hk, 2 * r, -1), [r], axis=1)
    flat = [x.reshape(-1, qkvz.shape[1]) for x in (q, k, v, z, b, a)]
    return {"in_proj_qkv": np.concatenate(flat[:3]), "in_proj_z": flat[3], "in_proj_b": flat[4], "in_proj_a": flat[5]}


def classic_qkv_weight(weight: np.ndarray, last: str, config: dict) -> np.ndarray | None:
    """Falcon's / Bloom's query_key_value and CodeGen's qkv_proj in q | k | v order, by the reshapes
    their HF attention does: Falcon views [kv groups, r + 2, D] (one group when multi_query, a group
    per head without it or new_decoder_architecture), Bloom [heads, 3, D], CodeGen 4 blocks of q | v | k."""
    model_type, columns = config.get("model_type"), weight.shape[-1]
    heads = config.get("num_attention_heads") or config.get("n_head")
    if last == "query_key_value" and model_type in ("falcon", "bloom"):
        kv = heads
        if model_type == "falcon" and config.get("new_decoder_architecture"):
            kv = config.get("num_kv_heads") or heads
        elif model_type == "falcon" and config.get("multi_query", True):
            kv = 1
        groups = weight.reshape(kv, heads // kv + 2, -1, columns)
        parts = (groups[:, :-2], groups[:, -2], groups[:, -1])
    elif last == "qkv_proj" and model_type == "codegen":
        blocks = weight.reshape(4, 3, -1, columns)
        parts = (blocks[:, 0], blocks[:, 2], blocks[:, 1])
    else:
        return None
    return np.concatenate([p.reshape(-1, columns) for p in parts])


def reference_weight(tensors: dict[str, np.ndarray], base: str, config: dict | None = None) -> np.ndarray | None:
    """The checkpoint's float weight for a package weight (fused ones concatenated, rows selected
    out of Qwen3-Next's per-key-head projections), or None."""
    head, _, last = base.rpartition(".")
    model_type = (config or {}).get("model_type")
    aliased = _aliased(tensors, base, model_type)
    if aliased is not None:  # the package names a tensor the checkpoint spells another way (spec tensor_aliases)
        return reference_weight(tensors, aliased, config)
    if f"{base}.weight" in tensors:
        weight = tensors[f"{base}.weight"]
        if model_type in ("gpt2", "openai-gpt") and last in CONV1D:  # stored [in, out]: HF's Conv1D computes x @ W + b
            return weight.T
        if model_type == "zamba" and last == "in_proj":  # rows x_c, z_c per channel, read as [x | z]
            return np.concatenate([weight[0::2], weight[1::2]])
        if (
            model_type in ("gpt_neox", "persimmon", "gpt_neox_japanese") and last == "query_key_value"
        ):  # rows per head [h: q k v]
            heads = config["num_attention_heads"]  # type: ignore[index]
            return weight.reshape(heads, 3, -1, weight.shape[1]).transpose(1, 0, 2, 3).reshape(weight.shape)
        classic = classic_qkv_weight(weight, last, config) if config is not None else None
        return weight if classic is None else classic
    if config is not None and last in ("in_proj_qkv", "in_proj_z", "in_proj_b", "in_proj_a"):
        grouped = grouped_deltanet_weights(tensors, head, config)
        if grouped:
            return grouped[last]
    if last in ("up_stacked", "down_side_by_side"):
        return ungated_experts_weight(tensors, head, last)
    stacked = tensors.get(base)  # Inkling's shared experts, stored [Ns, I, H] / [Ns, H, I]: one MatMul each
    if stacked is not None and stacked.ndim == 3 and last in ("gate_proj", "up_proj", "down_proj"):
        if last == "down_proj":  # every expert's columns side by side [H, Ns I]
            return stacked.transpose(1, 0, 2).reshape(stacked.shape[1], -1)
        return stacked.reshape(-1, stacked.shape[-1])  # every expert's rows stacked [Ns I, H]
    if model_type == "jetmoe" and last in ("qkv_proj", "o_proj"):
        return expert_attention_weight(tensors, head, last, config)  # type: ignore[arg-type]
    for spelling in FUSED.get(last, ()):
        parts = [tensors.get(f"{head}.{p}.weight") for p in spelling]
        if all(p is not None for p in parts):
            return np.concatenate(parts)  # type: ignore[arg-type]
    return None


def _aliased(tensors: dict[str, np.ndarray], base: str, model_type: str | None) -> str | None:
    """`base` in the checkpoint's spelling where its spec lists one and the checkpoint has no tensor
    under `base` itself (Laguna's hub files: mlp.shared_expert for the spec's mlp.shared_experts)."""
    from gqa_export import arch

    spec = arch.SPECS.get(model_type or "")
    module = base.rpartition(".")[0]  # a fused name (gate_up_proj) has no tensor of its own: its module's
    if spec is None or any(name.startswith(f"{module}.") for name in tensors):
        return None
    for canonical, alias in spec.tensor_aliases:
        if f".{canonical}" in base:
            other = base.replace(f".{canonical}", f".{alias}", 1)
            if any(name.startswith(f"{other.rpartition('.')[0]}.") for name in tensors):
                return other
    return None


def _under_spec_spellings(tensors: dict[str, np.ndarray], config: dict) -> dict[str, np.ndarray]:
    """The checkpoint's tensors, plus each stored under one of its spec's aliases (ArchSpec.tensor_aliases:
    HY-V3's hub mlp.router.gate, ...) also under the spec's spelling, which the package's weights are named by,
    each fused projection of its split_projections (HRM-Text's gqkv_proj) also as its parts, and each stored
    name its stored_renames rewrite (Ergo's serving layout, Dory's hub names) also under its class's name."""
    from gqa_export.arch import SPECS
    from gqa_export.source.stored_renames import renamed

    spec = SPECS.get(str(config.get("model_type")))
    extra: dict[str, np.ndarray] = {}
    for name, tensor in tensors.items():
        if spec is not None and (spec.stored_renames or spec.collapsed_layer_pairs):  # under its class's names
            new, transposed = renamed(spec, name)
            extra.setdefault(new, tensor.T if transposed else tensor)
        for canonical, alias in spec.tensor_aliases if spec is not None else ():
            if f".{alias}" in name:
                extra.setdefault(name.replace(f".{alias}", f".{canonical}", 1), tensor)
        for fused, parts in spec.split_projections if spec is not None else ():  # HRM-Text's gqkv_proj: its row blocks
            if f".{fused}." in name:
                for part, block in zip(parts, np.split(tensor, len(parts)), strict=True):
                    extra.setdefault(name.replace(f".{fused}.", f".{part}.", 1), block)
    return {**extra, **tensors}


def relative_errors(package: Path, checkpoint: Path, graph_file: str = "model.onnx") -> dict[str, float]:
    """Relative L2 error of every dequantized MatMulNBits weight against the checkpoint's; every
    weight must be found in the checkpoint (a check that skips weights proves less than it says)."""
    config = json.loads((checkpoint / "config.json").read_text())
    config = config.get("text_config", config)
    tensors = _under_spec_spellings(checkpoint_tensors(checkpoint), config)
    errors, unknown = {}, []
    for base, w in matmulnbits_weights(package, graph_file).items():
        ref = reference_weight(tensors, base, config)
        if ref is None:
            unknown.append(base)
            continue
        assert ref.shape == w.shape, f"{base}: package {w.shape} vs checkpoint {ref.shape}"
        errors[base] = float(np.linalg.norm(w - ref) / np.linalg.norm(ref))
    assert not unknown, f"package weights with no checkpoint counterpart: {unknown[:4]}"
    return errors


def manifest_precision(package: Path) -> str:
    return json.loads((package / "manifest.json").read_text())["options"]["precision"]


def ungated_experts_weight(tensors: dict[str, np.ndarray], head: str, last: str) -> np.ndarray | None:
    """Ungated experts under `head` (`experts.{e}.up_proj/down_proj.weight` or stacked `experts.up_proj`
    [E, I, D] / `experts.down_proj` [E, D, I]) as the package's two MatMul weights [N, K]: every
    expert's up rows stacked [E*I, D], every expert's down columns side by side [D, E*I]."""
    proj = "up_proj" if last == "up_stacked" else "down_proj"
    stacked = tensors.get(f"{head}.{proj}")
    if stacked is None:
        count = sum(1 for name in tensors if name.startswith(f"{head}.") and name.endswith(f".{proj}.weight"))
        if not count:
            return None
        stacked = np.stack([tensors[f"{head}.{e}.{proj}.weight"] for e in range(count)])
    if last == "up_stacked":
        return stacked.reshape(-1, stacked.shape[-1])
    return stacked.transpose(1, 0, 2).reshape(stacked.shape[1], -1)


def dequantized_twin(package: Path, float_package: Path, out: Path) -> set[str]:
    """`float_package` (its graph proven against HF) copied to `out` with every weight that
    `package` holds in MatMulNBits replaced by that weight dequantized: what the quantized package
    must compute if its graph wires its weights as the float graph does. A tied table shares its
    lm_head's bytes, so the embedding is replaced too. Returns the replaced weights' base names."""
    import shutil

    shutil.copytree(float_package, out)
    model = onnx.load(str(out / "model.onnx"))
    users: dict[str, set[str]] = {}
    for node in model.graph.node:
        for i, name in enumerate(node.input):
            users.setdefault(name, set()).add("MatMul.B" if node.op_type == "MatMul" and i == 1 else node.op_type)
    inits = {t.name: t for t in model.graph.initializer}
    replaced = set()
    for base, w in matmulnbits_weights(package).items():
        tensor = inits.get(f"{base}.weight")
        if tensor is None:
            continue
        kinds = users.get(tensor.name, set())
        value = w.T if kinds == {"MatMul.B"} else w if "MatMul.B" not in kinds else None  # MatMul's B is [K, N]
        if value is None or tuple(tensor.dims) != value.shape:
            continue
        dtype = onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type)
        tensor.CopyFrom(numpy_helper.from_array(np.ascontiguousarray(value).astype(dtype), tensor.name))
        replaced.add(base)
    for data in out.glob("*.onnx.data"):
        data.unlink()
    onnx.save(model, str(out / "model.onnx"), save_as_external_data=True, location="model.onnx.data")
    return replaced


def expert_attention_weight(tensors: dict[str, np.ndarray], head: str, last: str, config: dict) -> np.ndarray:
    """JetMoE's mixture of attention heads as the export computes it densely (docs/coverage.md §5):
    query head (h, e) is expert e's head h, kv-head-major, then kv_proj's [k | v]; the output
    projection's columns in the same order. Built head by head here, from HF's per-expert tensors."""
    queries = tensors[f"{head}.experts.input_linear.weight"]  # [E, kv_heads D, H]
    outputs = tensors[f"{head}.experts.output_linear.weight"]  # [E, H, kv_heads D]
    kv_heads, d = config["num_key_value_heads"], config["kv_channels"]
    order = [(h, e) for h in range(kv_heads) for e in range(queries.shape[0])]
    if last == "qkv_proj":
        rows = [queries[e, h * d : (h + 1) * d] for h, e in order]
        return np.concatenate([*rows, tensors[f"{head}.kv_proj.weight"]])
    return np.concatenate([outputs[e][:, h * d : (h + 1) * d] for h, e in order], axis=1)
