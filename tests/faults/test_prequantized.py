"""Pre-quantized checkpoints this tool does not import: refused before any work, naming the format.

Each format is declared the way its real checkpoints declare it (config.json's
`quantization_config`, inside `text_config` for multimodal ones, or an older side file), or only
shows in the tensors (codes and scales beside the weights). Exit 2, one line, nothing written.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
from common import assert_clean, assert_fails, invoke, read_safetensors, write_safetensors

SHARD = "model.safetensors"
DECLARED = {
    # name -> (quantization_config, what the message must say)
    "gptq": ({"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": True, "sym": True}, "GPTQ"),
    "gptq-v2": (
        {"quant_method": "gptq", "bits": 4, "group_size": 32, "checkpoint_format": "gptq_v2", "sym": False},
        "GPTQ",
    ),
    "awq": ({"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True, "version": "gemm"}, "AWQ"),
    "compressed-tensors": (
        {"quant_method": "compressed-tensors", "format": "pack-quantized", "config_groups": {}},
        "compressed-tensors",
    ),
    "quark": ({"quant_method": "quark", "global_quant_config": {"weight": {"dtype": "uint4"}}}, "Quark"),
    "fp8-block": (
        {"quant_method": "fp8", "activation_scheme": "dynamic", "weight_block_size": [128, 128]},
        "FP8",
    ),
    "fp8-per-tensor": ({"quant_method": "fp8", "activation_scheme": "static"}, "FP8"),
    "bitsandbytes-4bit": (
        {"quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_quant_type": "nf4"},
        "bitsandbytes",
    ),
    "bitsandbytes-legacy": ({"load_in_8bit": True}, "bitsandbytes"),
    "hqq": ({"quant_method": "hqq", "quant_config": {"nbits": 4}}, "HQQ"),
    "olive": ({"quant_method": "olive", "bits": 4, "group_size": 32}, "Olive"),
    "modelopt": ({"quant_algo": "NVFP4"}, "ModelOpt"),
    "unknown": ({"quant_method": "brand-new"}, "'brand-new'"),
}


def set_config(folder: Path, **values: object) -> None:
    config = json.loads((folder / "config.json").read_text())
    config.update(values)
    (folder / "config.json").write_text(json.dumps(config))


def add_tensor(folder: Path, name: str, dtype: str = "F32") -> None:
    """One more small tensor in the shard, as a quantized checkpoint stores beside each weight."""
    header, data = read_safetensors(folder / SHARD)
    raw = struct.pack("<f", 0.5) if dtype == "F32" else b"\x38"
    header[name] = {"dtype": dtype, "shape": [1], "data_offsets": [len(data), len(data) + len(raw)]}
    write_safetensors(folder / SHARD, header, data + raw)


@pytest.mark.parametrize("name", list(DECLARED))
def test_declared_format_is_refused(model, tmp_path, name):
    quantization, fmt = DECLARED[name]
    set_config(model, quantization_config=quantization)
    out = tmp_path / "out"
    result = invoke("build", model, "-o", out, "--no-smoke")
    line = assert_fails(result, 2, f"pre-quantized {fmt}")
    assert "float" in line  # says what to do instead
    assert_clean(tmp_path, out)


def test_declared_inside_text_config(model, tmp_path):
    config = json.loads((model / "config.json").read_text())
    config["text_config"] = {"quantization_config": {"quant_method": "awq", "bits": 4}}
    (model / "config.json").write_text(json.dumps(config))
    assert_fails(invoke("build", model, "-o", tmp_path / "out", "--no-smoke"), 2, "pre-quantized AWQ")


@pytest.mark.parametrize("where", ["storage", "text_config"])
def test_dequantize_given_says_what_it_does_not_read(model, tmp_path, where):
    """With --dequantize already given, a bitsandbytes variant it does not read is refused without
    telling the user to pass the flag they passed."""
    quantization = {"quant_method": "bitsandbytes", "load_in_4bit": True}
    if where == "storage":
        set_config(model, quantization_config={**quantization, "bnb_4bit_quant_storage": "float16"})
    else:
        set_config(model, text_config={"quantization_config": quantization})
    out = tmp_path / "out"
    line = assert_fails(
        invoke("build", model, "-o", out, "--no-smoke", "--dequantize"), 2, "pre-quantized bitsandbytes"
    )
    assert "--dequantize does not read it" in line and "pass --dequantize" not in line
    assert_clean(tmp_path, out)


def test_autogptq_side_file(model, tmp_path):
    (model / "quantize_config.json").write_text(json.dumps({"bits": 4, "group_size": 128, "desc_act": False}))
    assert_fails(invoke("build", model, "-o", tmp_path / "out", "--no-smoke"), 2, "quantize_config.json")


@pytest.mark.parametrize(
    ("tensor", "dtype", "fmt"),
    [
        ("model.layers.0.self_attn.q_proj.weight_scale_inv", "F32", "FP8"),
        ("model.layers.0.self_attn.q_proj.weight_scale", "F32", "FP8, compressed-tensors or BitNet"),
        ("model.layers.0.mlp.down_proj.qweight", "F32", "GPTQ or AWQ"),
        ("model.layers.0.mlp.down_proj.weight.absmax", "F32", "bitsandbytes 4-bit"),
        ("model.layers.0.mlp.down_proj.weight.quant_state.bitsandbytes__nf4", "U8", "bitsandbytes 4-bit"),
        ("model.layers.0.mlp.down_proj.SCB", "F32", "bitsandbytes 8-bit"),
    ],
)
def test_quantization_tensors_without_a_declaration(model, tmp_path, tensor, dtype, fmt):
    """The reported case: FP8 scales that config.json does not declare were silently ignored."""
    add_tensor(model, tensor, dtype)
    out = tmp_path / "out"
    line = assert_fails(invoke("build", model, "-o", out, "--no-smoke"), 2, f"pre-quantized {fmt}")
    assert tensor in line
    assert_clean(tmp_path, out)
