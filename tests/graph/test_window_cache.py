"""Window-sized KV buffers (GQA sliding_window_cache + decoder.sliding_window), verified through
onnxruntime-genai: the runtime really allocates window + slack slots, and tokens stay exact."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from reference import hf_generate, hf_model
from typer.testing import CliRunner

from gqa_export.cli import app
from gqa_export.runtime.run import generate_greedy, load


def _present_slots(package, layer: int) -> int:
    import onnxruntime_genai as og

    model = load(package, "cpu")
    params = og.GeneratorParams(model)
    params.set_search_options(max_length=200)
    generator = og.Generator(model, params)
    generator.append_tokens([0, 17, 45, 99])
    return int(np.asarray(generator.get_output(f"present.{layer}.key")).shape[2])


WINDOW_CACHE = ("attention.sliding_window_cache=true",)


@pytest.mark.parametrize(
    ("variant", "windowed", "full"), [("mistral_window", [0, 1], []), ("gemma2_softcap_window", [0, 2], [1])]
)
def test_windowed_layers_get_window_sized_buffers(exports, checkpoints, variant, windowed, full):
    package = exports.get(variant, settings=WINDOW_CACHE)
    config = json.loads((package / "genai_config.json").read_text())["model"]["decoder"]
    assert config["sliding_window"] == {
        "window_size": 8, "slide_key_value_cache": False, "slide_inputs": False, "layers": windowed,
    }  # fmt: skip
    for layer in windowed:
        assert _present_slots(package, layer) == 8 + 16  # window + CPU slack
    for layer in full:
        assert _present_slots(package, layer) == 200  # max_length
    hf = hf_model(checkpoints.get(variant))
    prompt = [(11 * i + 5) % 380 for i in range(30)]  # longer than window + slack
    assert generate_greedy(package, prompt, 40, min_new_tokens=40).tokens == hf_generate(hf, prompt, 40)


def test_split_and_bias_keep_full_buffers(checkpoints, tmp_path):
    from gqa_export.pipeline import BuildOptions, build

    for mode in ("split", "bias"):
        out = tmp_path / mode
        build(
            BuildOptions(
                str(checkpoints.get("mistral_window")), out, smoke=False, attention=mode, settings=WINDOW_CACHE
            )
        )
        assert "sliding_window" not in json.loads((out / "genai_config.json").read_text())["model"]["decoder"]


def test_window_buffers_are_opt_in(exports):
    """Off by default: onnxruntime's windowed GQA refuses right-padded batch prompts."""
    config = json.loads((exports.get("mistral_window") / "genai_config.json").read_text())["model"]["decoder"]
    assert "sliding_window" not in config


def test_lint_catches_window_buffers_without_window_kernel(exports, tmp_path):
    import shutil

    folder = shutil.copytree(exports.get("mistral_window", settings=WINDOW_CACHE), tmp_path / "pkg")
    model = onnx.load(str(folder / "model.onnx"), load_external_data=False)
    for node in model.graph.node:
        if node.op_type == "GroupQueryAttention":
            kept = [a for a in node.attribute if a.name != "sliding_window_cache"]
            del node.attribute[:]
            node.attribute.extend(kept)
    onnx.save(model, str(folder / "model.onnx"))
    result = CliRunner().invoke(app, ["inspect", str(folder), "--json"])
    assert result.exit_code == 1
    assert "sliding-window-cache-mismatch" in {f["id"] for f in json.loads(result.stdout)["findings"]}
