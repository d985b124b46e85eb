"""genai_config.json: only schema keys, counts from the graph, eos list, max_length default."""

from __future__ import annotations

import json

from gqa_export.package.genai_config import default_max_length

MODEL_KEYS = {"type", "context_length", "vocab_size", "eos_token_id", "pad_token_id", "bos_token_id", "decoder"}
DECODER_KEYS = {
    "session_options", "filename", "head_size", "hidden_size", "inputs", "outputs",
    "num_attention_heads", "num_hidden_layers", "num_key_value_heads",
}  # fmt: skip
SEARCH_KEYS = {
    "do_sample", "max_length", "min_length", "num_beams", "num_return_sequences",
    "past_present_share_buffer", "repetition_penalty", "temperature", "top_k", "top_p",
}  # fmt: skip


def test_only_documented_keys_and_graph_counts(exports):
    config = json.loads((exports.get("head_dim_32") / "genai_config.json").read_text())
    assert set(config) == {"model", "search"}
    assert set(config["model"]) <= MODEL_KEYS
    decoder = config["model"]["decoder"]
    assert set(decoder) == DECODER_KEYS and set(config["search"]) == SEARCH_KEYS
    assert (decoder["num_hidden_layers"], decoder["head_size"], decoder["num_key_value_heads"]) == (3, 32, 2)
    assert decoder["num_attention_heads"] == 4 and config["model"]["context_length"] == 256


def test_eos_list_merges_config_and_generation_config(checkpoints, tmp_path):
    from gqa_export.pipeline import BuildOptions, build

    folder = checkpoints.get("gqa")
    import shutil

    copy = shutil.copytree(folder, tmp_path / "ckpt")
    generation = json.loads((copy / "generation_config.json").read_text())
    generation.update(eos_token_id=[1, 4], do_sample=True, temperature=0.6, top_p=0.9)
    (copy / "generation_config.json").write_text(json.dumps(generation))
    build(BuildOptions(str(copy), tmp_path / "pkg", smoke=False, max_length=200))
    config = json.loads((tmp_path / "pkg" / "genai_config.json").read_text())
    assert config["model"]["eos_token_id"] == [1, 4]
    assert config["search"]["max_length"] == 200
    assert (config["search"]["do_sample"], config["search"]["temperature"], config["search"]["top_p"]) == (
        True,
        0.6,
        0.9,
    )


def test_default_max_length_caps_kv_buffer():
    assert default_max_length(131072) == 4096 and default_max_length(2048) == 2048
