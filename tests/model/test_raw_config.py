"""config.json's size keys in every spelling transformers' config classes accept
(gqa_export/model/raw_config.py), for every built-in recipe's model types: each spelling the check
takes is one the class really reads, each one the class reads is taken, and a BLOOM config that
spells its width `n_embed` (bigscience/bloom, bloomz-*) exports the same package as `hidden_size`."""

from __future__ import annotations

import json
import shutil

import pytest

from gqa_export.errors import InputError
from gqa_export.model import raw_config
from gqa_export.model.raw_config import (
    KEY_ALIASES,
    POSITIVE_INT_KEYS,
    REQUIRED_KEYS,
    check_raw_config,
    spellings,
    without_attention,
)
from gqa_export.recipes import builtin_recipes

# the common aliases, and the hub spellings a known class maps onto a size key through attribute_map (EXAONE-3.x's
# num_layers -> num_hidden_layers: the check read only the other direction and refused its config.json)
CANDIDATES = sorted({alias for aliases in KEY_ALIASES.values() for alias in aliases} | {"num_layers"})
MINIMAL = {"hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 2, "vocab_size": 384}


def _model_types() -> list[str]:
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    types = {t for recipe in builtin_recipes() for t in recipe.model_types}
    return sorted(t for t in types if t in CONFIG_MAPPING)


def _reads(model_type: str, spelling: str, key: str) -> bool:
    """Whether the config class takes `spelling` for `key`: a value set under it (one no class has as
    a default) comes back as the key."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    mapped = CONFIG_MAPPING[model_type].attribute_map
    if mapped.get(key) == spelling or mapped.get(spelling) == key:  # read through its attribute_map (GPT-Neo's
        return True  # num_layers: its class cannot be built from that key alone, its attention_types must match)
    try:
        return getattr(CONFIG_MAPPING[model_type](**{spelling: 7919}), key, None) == 7919
    except Exception:  # a class that cannot build from this one key, or a per-layer key: not this size
        return False


@pytest.mark.parametrize("model_type", _model_types())
def test_each_spelling_is_one_the_config_class_reads(model_type):
    """Sound and complete over the known aliases: what the check takes for a key, the class reads
    as that key; what the class reads as that key (of the aliases any family uses), the check takes."""
    found = spellings(model_type)
    for key in POSITIVE_INT_KEYS:
        for spelling in found[key][1:]:
            assert _reads(model_type, spelling, key), (model_type, key, spelling)
        for spelling in CANDIDATES:
            if spelling not in found[key] and _reads(model_type, spelling, key):
                pytest.fail(f"{model_type} reads {spelling} as {key}, which the raw-config check does not take")


@pytest.mark.parametrize("model_type", _model_types())
def test_a_required_key_in_any_spelling_passes_and_missing_fails(model_type):
    for key in REQUIRED_KEYS:
        for spelling in spellings(model_type)[key]:
            raw = {"model_type": model_type, **{k: v for k, v in MINIMAL.items() if k != key}, spelling: 64}
            check_raw_config(raw)
        missing = {"model_type": model_type, **{k: v for k, v in MINIMAL.items() if k != key}}
        if key == "num_attention_heads" and without_attention(model_type):  # Mamba2: no attention keys
            check_raw_config(missing)
            continue
        with pytest.raises(InputError, match=f"no '{key}'"):
            check_raw_config(missing)


def test_bloom_n_embed_exports_the_package_hidden_size_does(checkpoints, tmp_path, monkeypatch):
    """The real BLOOM spelling: the same graph and weights byte for byte; without `n_embed` among
    Bloom's spellings (the mutant) the config is refused for lacking hidden_size."""
    from families import BY_NAME

    from gqa_export.pipeline import BuildOptions, build

    source = BY_NAME["bloom"].make(tmp_path / "bloom")
    spelled = shutil.copytree(source, tmp_path / "bloom-n_embed")
    config = json.loads((spelled / "config.json").read_text())
    config["n_embed"] = config.pop("hidden_size")
    (spelled / "config.json").write_text(json.dumps(config))
    packages = [
        build(BuildOptions(str(s), tmp_path / f"p{i}", smoke=False)).output for i, s in enumerate((source, spelled))
    ]
    for name in ("model.onnx", "model.onnx.data", "genai_config.json"):
        assert (packages[0] / name).read_bytes() == (packages[1] / name).read_bytes(), name
    monkeypatch.setattr(raw_config, "INIT_ALIASES", {})
    with pytest.raises(InputError, match="no 'hidden_size'"):
        build(BuildOptions(str(spelled), tmp_path / "mutant", smoke=False))


def test_a_multimodal_text_config_takes_its_class_defaults():
    """llava-hf/llava-1.5-7b-hf's config.json: its text_config names no width, head or layer count (LlamaConfig's
    7B defaults, which transformers fills): passes; the same text keys flat, or a plain Llama without them, are
    still refused; a key given in the text_config is still type-checked."""
    text = {"architectures": ["LlamaForCausalLM"], "max_position_embeddings": 4096, "model_type": "llama",
            "rms_norm_eps": 1e-05, "torch_dtype": "float16", "vocab_size": 32064}  # fmt: skip
    check_raw_config({"model_type": "llava", "image_token_index": 32000, "text_config": text, "vocab_size": 32064})
    with pytest.raises(InputError, match="no 'hidden_size'"):
        check_raw_config(text)
    with pytest.raises(InputError, match="must be a positive integer"):
        check_raw_config({"model_type": "llava", "text_config": {**text, "hidden_size": "4096"}})
