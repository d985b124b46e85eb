"""gpt-oss GGUF files written the way llama.cpp's converter writes them (its GptOssModel).

    write_gpt_oss_gguf(checkpoint, out_file, experts="MXFP4") -> out_file

The converter splits gpt-oss's fused experts: `experts.gate_up_proj` [E, H, 2I] (gate and up
columns interleaved: gate_j, up_j) becomes `blk.{i}.ffn_gate_exps` (the even columns) and
`ffn_up_exps` (the odd ones), each transposed to the file's [E, I, H]; `down_proj` [E, I, H] is
transposed to [E, H, I]; the interleaved `gate_up_proj_bias` [E, 2I] is split the same way into
`ffn_gate_exps.bias` / `ffn_up_exps.bias`; `self_attn.sinks` is renamed `blk.{i}.attn_sinks.weight`.
An MXFP4 checkpoint's experts are not dequantized: their `_blocks` / `_scales` are split by rows
(even rows gate, odd rows up) and repacked into GGML MXFP4 blocks ([e8m0 scale][16 bytes], value j
in the low nibble of byte j and value j + 16 in its high nibble, where the checkpoint holds values
2j / 2j + 1 in byte j) by the converter's own nibble transform, copied below. Metadata: the keys
every decoder gets (tests/gguf_models.py), yarn's keys, the expert count, used count and width, the
sliding window. `experts` picks the expert weights' GGML type: MXFP4 (from an MXFP4 checkpoint's
blocks), or F32 / F16 / Q8_0 from a float checkpoint (the converter's non-MXFP4 branch); `others`
the other 2-D weights' (llama-quantize's MXFP4_MOE: Q8_0, the router ffn_gate_inp kept F32).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
from gguf_models import _add, _text_keys, _tokenizer


def transform_nibble_layout(tensor):  # llama.cpp conversion/gpt_oss.py GptOssModel.transform_nibble_layout
    import torch

    assert tensor.dtype == torch.uint8
    assert tensor.shape[-1] == 16
    t_lo = tensor & 0x0F
    t_hi = tensor & 0xF0
    tensor = (t_lo << 4) | (t_hi >> 4)
    blk_a, blk_b = tensor.chunk(2, dim=-1)
    blk_a0 = (blk_a & 0xF0).view(-1, 1)
    blk_a1 = (blk_a << 4).view(-1, 1)
    blk_a = torch.stack((blk_a0, blk_a1), dim=2).view(tensor.shape)
    blk_b0 = (blk_b >> 4).view(-1, 1)
    blk_b1 = (blk_b & 0x0F).view(-1, 1)
    blk_b = torch.stack((blk_b0, blk_b1), dim=2).view(tensor.shape)
    out = blk_a | blk_b
    out_h = out & 0xF0
    out_l = out & 0x0F
    return (out_h >> 4) | (out_l << 4)


def repack_mxfp4(blocks, scales) -> np.ndarray:
    """GptOssModel.repack_mxfp4: HF blocks [E, N, K/32, 16], scales [E, N, K/32] -> MXFP4 bytes [E, N, K/32*17]."""
    import torch

    data = torch.concat((scales.unsqueeze(-1), transform_nibble_layout(blocks.contiguous())), dim=-1)
    return data.reshape(data.shape[0], data.shape[1], -1).numpy()


def _keys(writer: Any, config: dict[str, Any]) -> None:
    """TextModel.set_gguf_parameters plus GptOssModel's sliding window and expert width."""
    import gguf

    _text_keys(writer, config)
    rope = config.get("rope_parameters") or {}
    if rope.get("rope_type") == "yarn":
        writer.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        writer.add_rope_scaling_factor(rope["factor"])
        writer.add_rope_scaling_orig_ctx_len(rope["original_max_position_embeddings"])
        for key, add in (("beta_fast", writer.add_rope_scaling_yarn_beta_fast),
                         ("beta_slow", writer.add_rope_scaling_yarn_beta_slow)):  # fmt: skip
            if rope.get(key) is not None:
                add(rope[key])
    writer.add_expert_count(config["num_local_experts"])
    writer.add_expert_used_count(config["num_experts_per_tok"])
    writer.add_sliding_window(config["sliding_window"])
    writer.add_expert_feed_forward_length(config["intermediate_size"])


def _load(checkpoint: Path) -> dict[str, Any]:
    from safetensors.torch import load_file

    return load_file(str(checkpoint / "model.safetensors"))


def _split_experts(name: str, value, experts: str) -> list[tuple[str, np.ndarray, str]]:
    """The converter's modify_tensors for one float expert tensor (HF name, torch tensor)."""
    v = value.float()
    if name.endswith("gate_up_proj_bias"):
        base = name.removesuffix("gate_up_proj_bias")
        return [
            (f"{base}gate_proj.bias", v[..., ::2].numpy(), "F32"),
            (f"{base}up_proj.bias", v[..., 1::2].numpy(), "F32"),
        ]
    if name.endswith("down_proj_bias"):
        return [(name.replace("down_proj_bias", "down_proj.bias"), v.numpy(), "F32")]
    if name.endswith("gate_up_proj"):
        t = v.transpose(-1, -2)
        base = name.removesuffix("gate_up_proj")
        return [(f"{base}gate_proj.weight", t[:, ::2, :].contiguous().numpy(), experts),
                (f"{base}up_proj.weight", t[:, 1::2, :].contiguous().numpy(), experts)]  # fmt: skip
    assert name.endswith("down_proj"), name
    return [(f"{name}.weight", v.transpose(-1, -2).contiguous().numpy(), experts)]


def write_gpt_oss_gguf(
    checkpoint: Path, out: Path, experts: str = "MXFP4", twin: Path | None = None, others: str = "F32"
) -> Path:
    """Write the gpt-oss checkpoint `checkpoint` as llama.cpp's converter does (module doc). `twin`:
    also save there the float checkpoint holding the file's expert weights as the `gguf` package
    dequantizes them (the reference for Q8_0 / F16 experts)."""
    import gguf

    config = json.loads((checkpoint / "config.json").read_text())
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.GPT_OSS, config["num_hidden_layers"])
    writer = gguf.GGUFWriter(out, "gpt-oss")
    writer.add_name("tiny-gpt-oss")
    _keys(writer, config)
    _tokenizer(writer, checkpoint, config, "gpt-2")
    tensors = _load(checkpoint)
    pending: dict[str, Any] = {}
    written: list[tuple[str, np.ndarray, str]] = []  # (HF-style name the converter maps, value, type)
    for name, value in tensors.items():
        if name.endswith(("_blocks", "_scales")):  # generate_extra_tensors: repacked, not dequantized
            base = name.rsplit("_", 1)[0]
            pending.setdefault(base, {})[name.rsplit("_", 1)[1]] = value
            continue
        if ".experts." in name:
            written += _split_experts(name, value, experts)
            continue
        hf = f"{name}.weight" if name.endswith(".sinks") else name  # filter_tensors: sinks get a .weight
        written.append((hf, value.float().numpy(), others if requantized(hf, value.dim()) else "F32"))
    for base, parts in pending.items():
        blocks, scales = parts["blocks"], parts["scales"]
        if base.endswith("gate_up_proj"):
            stem = base.removesuffix("gate_up_proj")
            raw = [(f"{stem}gate_proj.weight", repack_mxfp4(blocks[:, ::2], scales[:, ::2])),
                   (f"{stem}up_proj.weight", repack_mxfp4(blocks[:, 1::2], scales[:, 1::2]))]  # fmt: skip
        else:
            raw = [(f"{base}.weight", repack_mxfp4(blocks, scales))]
        for hf, data in raw:
            gname = names.get_name(hf.removesuffix(".weight")) + ".weight"
            writer.add_tensor(gname, data, raw_shape=data.shape, raw_dtype=gguf.GGMLQuantizationType.MXFP4)
    twin_tensors: dict[str, np.ndarray] = {}
    for hf, value, kind in written:
        base, _, suffix = hf.rpartition(".")
        gname = f"{names.get_name(base)}.{suffix}"
        _add(writer, gname, value, kind)
        twin_tensors[gname] = value if kind == "F32" else _round_trip(value, kind)
    if twin is not None:
        _save_twin(checkpoint, twin, tensors, twin_tensors)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return out


def requantized(name: str, dims: int) -> bool:
    """The tensors llama-quantize's MXFP4_MOE writes as Q8_0: 2-D weights but norms and the router."""
    return dims == 2 and name.endswith(".weight") and "norm" not in name and ".mlp.router." not in name


def _round_trip(value: np.ndarray, kind: str) -> np.ndarray:
    from gguf.constants import GGMLQuantizationType
    from gguf.quants import dequantize
    from gguf_quants import quantize

    if kind == "F16":
        return value.astype(np.float16).astype(np.float32)
    return dequantize(quantize(value, kind), GGMLQuantizationType[kind]).reshape(value.shape)


def _save_twin(checkpoint: Path, out: Path, tensors: dict[str, Any], file: dict[str, np.ndarray]) -> None:
    """The float checkpoint again with each expert weight as the file holds it (gate/up re-interleaved)."""
    import shutil

    from safetensors.numpy import save_file

    out.mkdir(parents=True, exist_ok=True)
    flat = {k: v.float().numpy() for k, v in tensors.items()}
    for name in list(flat):
        if name.endswith("experts.gate_up_proj"):
            i = name.split(".")[2]
            gate, up = file[f"blk.{i}.ffn_gate_exps.weight"], file[f"blk.{i}.ffn_up_exps.weight"]
            both = np.stack([gate, up], axis=2).reshape(gate.shape[0], -1, gate.shape[2])  # [E, 2I, H] interleaved
            flat[name] = np.ascontiguousarray(both.transpose(0, 2, 1))
        elif name.endswith("experts.down_proj"):
            i = name.split(".")[2]
            flat[name] = np.ascontiguousarray(file[f"blk.{i}.ffn_down_exps.weight"].transpose(0, 2, 1))
    save_file(flat, str(out / "model.safetensors"))
    for item in checkpoint.iterdir():
        if item.is_file() and not item.name.endswith(".safetensors"):
            shutil.copy(item, out / item.name)
