"""Multimodal classes around an exported decoder (gqa_export/arch/wrapped_decoders.py) read in their published
config.json layouts (docs/coverage.md §21): a text_config naming few keys (class defaults), a text type its config
class renames, token ids outside the (shrunk) vocabulary, and the --text-only line for every listed class, whatever
its decoder family's recipe builds. The tiny classes are tests/wrapped_models.py's."""

from __future__ import annotations

import json

import pytest
from reference import genai_prompt_then_greedy, hf_generate, hf_model
from wrapped_checks import PROMPT, text_error, wrapped_checkpoint
from wrapped_models import save_wrapped

from gqa_export.arch.coverage import text_model_type
from gqa_export.arch.wrapped_decoders import WRAPPED_DECODERS
from gqa_export.pipeline import BuildOptions, build


def test_every_listed_class_needs_text_only_whatever_its_decoder_recipe_builds():
    """Every listed class but those with a full package of their own is refused without --text-only, also where
    its decoder family's recipe builds another class's full package (Qwen2's, Qwen2.5-VL's; Qwen3's, Qwen3-VL's;
    Qwen3.5's). Before: 12 classes (llava_onevision, internvl, got_ocr2, ovis2, video_llama_3 on Qwen2;
    lighton_ocr, llava_onevision1_5, ovis2_5, qianfan_ocr on Qwen3; minicpm_ocr, minicpmv4_6, minicpmv4_7 on
    Qwen3.5) got no refusal and failed later in a line that never says --text-only (Qwen2's: "the checkpoint has
    no visual.patch_embed.proj.weight: not a Qwen-VL vision tower")."""
    from gqa_export.arch.wrapped_decoders import _FULL_PACKAGE, class_recipe, towers_refusal
    from gqa_export.recipes import builtin_recipes

    recipes = builtin_recipes()
    for architecture, model_type in WRAPPED_DECODERS.items():
        recipe = class_recipe(text_model_type(model_type), architecture, recipes)
        said = towers_refusal({"architectures": [architecture], "vision_config": {"hidden_size": 16}}, recipe)
        assert (said is None) == (architecture in _FULL_PACKAGE), architecture


# token ids of a published config that name no token of the tiny vocabulary: no eos and pad -1 (transformers'
# "none"); Qwen2's published eos and bos ids kept with the vocabulary shrunk
OUTSIDE_IDS = {"no-eos-pad-minus-one": {"eos_token_id": None, "pad_token_id": -1},
               "eos-past-the-vocabulary": {"eos_token_id": 151645, "bos_token_id": 151643}}  # fmt: skip


@pytest.mark.parametrize("ids", OUTSIDE_IDS.values(), ids=OUTSIDE_IDS.keys())
def test_ids_outside_the_vocabulary_still_generate(tmp_path, ids):
    """GOT-OCR-2 (a Qwen2 decoder, whose config class has no default eos) with ids outside its vocabulary, at both
    levels and in generation_config.json: HF generates, so must the package (an eos id no model can emit is left
    out: generation stops where HF's does). Before: eos_token_id -1 / 151645 in genai_config.json, which
    onnxruntime-genai refuses whenever a generator is made ("eos_token_id (-1) must be in range [0, 384)")."""
    checkpoint = wrapped_checkpoint(tmp_path, "got_ocr2", "qwen2")
    config = json.loads((checkpoint / "config.json").read_text())
    generation = json.loads((checkpoint / "generation_config.json").read_text())
    for level in (config, config["text_config"], generation):
        level.update(ids)
        if level["eos_token_id"] is None:
            del level["eos_token_id"]
    (checkpoint / "config.json").write_text(json.dumps(config))
    (checkpoint / "generation_config.json").write_text(json.dumps(generation))
    build(BuildOptions(str(checkpoint), tmp_path / "pkg", smoke=False, text_only=True))
    _, tokens = genai_prompt_then_greedy(tmp_path / "pkg", PROMPT, 8)
    assert tokens == hf_generate(hf_model(checkpoint), PROMPT, 8)


# the keys llava-hf/llava-1.5-7b-hf's text_config names (vicuna-7b-v1.5): LlamaConfig's defaults give the rest
LLAVA15_TEXT_KEYS = ("_name_or_path", "architectures", "max_position_embeddings", "model_type", "rms_norm_eps",
                     "torch_dtype", "vocab_size")  # fmt: skip


def test_llava15_text_config_relies_on_llama_defaults(tmp_path):
    """llava-1.5's published text_config names no head count (nor width or layer count: 7B's are LlamaConfig's
    defaults); transformers fills LlamaConfig's, 32 heads, and so must the build. The tiny checkpoint keeps its
    width and layer count and draws 32 heads of 2 (kv heads by default too). Before: refused, "config.json has
    no 'num_attention_heads'"; after 1.1e-6 (docs/coverage.md §21)."""
    checkpoint = save_wrapped(tmp_path / "llava15", "llava", "llama", num_attention_heads=32, num_key_value_heads=32,
                              head_dim=2)  # fmt: skip
    config = json.loads((checkpoint / "config.json").read_text())
    kept = ("hidden_size", "intermediate_size", "num_hidden_layers", *LLAVA15_TEXT_KEYS)
    config["text_config"] = {k: v for k, v in config["text_config"].items() if k in kept}
    (checkpoint / "config.json").write_text(json.dumps(config))
    build(BuildOptions(str(checkpoint), tmp_path / "pkg", smoke=False, text_only=True))
    assert text_error(tmp_path / "pkg", checkpoint) < 1e-4


@pytest.mark.parametrize(
    ("model_type", "text_type", "release_type"),
    [("kimi_k25", "deepseek_v3", "kimi_k2"), ("exaone4_5", "exaone4", "exaone4_5_text")],
)
def test_text_config_of_its_release_type(tmp_path, model_type, text_type, release_type):
    """Kimi-K2.5's release names its text_config's model_type `kimi_k2` (its remote code's), EXAONE-4.5's
    `exaone4_5_text`, which their config classes read as deepseek_v3 / exaone4: the build matches the type
    transformers builds. Before: refused, "no built-in recipe matches it (model_type 'kimi_k2')"; after 9.5e-7 /
    1.1e-6 (docs/coverage.md §21)."""
    checkpoint = wrapped_checkpoint(tmp_path, model_type, text_type)
    config = json.loads((checkpoint / "config.json").read_text())
    config["text_config"]["model_type"] = release_type
    (checkpoint / "config.json").write_text(json.dumps(config))
    build(BuildOptions(str(checkpoint), tmp_path / "pkg", smoke=False, text_only=True))
    assert text_error(tmp_path / "pkg", checkpoint) < 1e-4
