"""Multi-LoRA bases and their adapters in release specs (docs/lora.md §8): `lora_targets` and
`adapters` variant keys, adapters shipped converted beside the base in its sealed manifest, loaded
through onnxruntime-genai against HF with the adapter merged, rebuilt byte-identically."""

from __future__ import annotations

import json

import numpy as np
import pytest
import yaml
from cli_runner import invoke, runner
from lora_models import BOUND, CHECKPOINT, genai, hf_reference, save_adapter

from gqa_export.cli import app
from gqa_export.errors import InputError
from gqa_export.package.adapter_file import foreign
from gqa_export.release import load_spec


def test_release_variant_takes_lora_targets(tmp_path):
    spec = tmp_path / "release.yaml"
    spec.write_text(
        f"source: {CHECKPOINT}\nvariants:\n  - {{ep: cpu, precision: fp32, lora_targets: [q_proj, down_proj]}}\n"
    )
    assert load_spec(spec).variants[0].options.lora_targets == ("q_proj", "down_proj")


def test_release_ships_adapters_that_load_and_rebuild_identically(tmp_path):
    """A release variant's `adapters:` ship converted beside the base, listed in its sealed manifest:
    the file loads through og.Adapters and equals HF merged, verify passes (and fails on a changed
    byte), inspect names it, and a rebuild gives identical bytes."""
    peft = save_adapter(tmp_path / "peft" / "attn", CHECKPOINT, ["q_proj", "v_proj", "o_proj"], 4, 8.0, 1)
    variant = {"ep": "cpu", "precision": "fp32", "path": "cpu-lora", "lora_targets": ["q_proj", "v_proj", "o_proj"],
               "adapters": ["peft/attn"]}  # fmt: skip
    spec = tmp_path / "release.yaml"
    spec.write_text(yaml.safe_dump({"source": str(CHECKPOINT), "license": "apache-2.0", "smoke": False,
                                    "variants": [variant]}))  # fmt: skip
    env = {"SOURCE_DATE_EPOCH": "1700000000"}
    outs = [tmp_path / "out", tmp_path / "again"]
    for out in outs:
        result = runner.invoke(app, ["release", str(spec), "-o", str(out), "-q"], env=env)
        assert result.exit_code == 0, result.output
    folder = outs[0] / "cpu-lora"
    logits, tokens = genai(folder, [folder / "attn.onnx_adapter"])
    ref_logits, ref_tokens = hf_reference([peft])
    assert float(np.abs(logits - ref_logits).max()) < BOUND and tokens[0] == ref_tokens
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["adapters"]["attn.onnx_adapter"]["ranks"]["model.layers.0.self_attn.q_proj"] == 4
    assert "attn.onnx_adapter" in manifest["files"]
    assert foreign(folder / "attn.onnx_adapter") is None  # sealed: a later `adapter --overwrite` may replace it
    release = json.loads((outs[0] / "release.json").read_text())
    assert release["variants"][0]["adapters"] == ["attn.onnx_adapter"]
    assert "shipped: attn.onnx_adapter" in invoke("inspect", folder).output
    files = sorted(p.relative_to(outs[0]) for p in outs[0].rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(outs[1]) for p in outs[1].rglob("*") if p.is_file())
    for rel in files:
        assert (outs[0] / rel).read_bytes() == (outs[1] / rel).read_bytes(), f"{rel} differs"
    assert invoke("verify", outs[0]).exit_code == 0
    data = bytearray((folder / "attn.onnx_adapter").read_bytes())  # mutant: one changed byte
    data[-9] ^= 1
    (folder / "attn.onnx_adapter").write_bytes(bytes(data))
    shown = invoke("verify", outs[0])
    assert shown.exit_code == 1 and "attn.onnx_adapter: changed" in shown.output


@pytest.mark.parametrize(
    ("variant", "message"),
    [
        ({"adapters": ["peft"]}, "adapters need a multi-LoRA base"),
        ({"lora_targets": ["q_proj"], "adapters": ["nowhere"]}, "nowhere is not a PEFT adapter folder"),
    ],
)
def test_release_adapters_refused_before_anything_runs(tmp_path, variant, message):
    (tmp_path / "peft").mkdir()
    (tmp_path / "peft" / "adapter_config.json").write_text("{}")
    spec = tmp_path / "release.yaml"
    spec.write_text(
        f"source: {CHECKPOINT}\nvariants:\n  - {json_inline({'ep': 'cpu', 'precision': 'fp32', **variant})}\n"
    )
    with pytest.raises(InputError, match=message) as err:
        load_spec(spec)
    assert "\n" not in str(err.value) and "release.yaml:3: variants[0]" in str(err.value)


def json_inline(item: dict) -> str:
    return json.dumps(item)
