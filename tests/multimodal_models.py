"""Tiny random multimodal checkpoints (`…ForConditionalGeneration`) whose text decoder is exported.

The vision towers are as small as transformers allows; the exporter never reads them, but they are
in the checkpoint like in a real one. `save_pretrained` writes the key layout of the published hub
checkpoints by default (`language_model.model.*` for Gemma-3 / Mistral-3, flat `model.*` for
Qwen2.5-VL); `hub_layout=False` writes transformers 5.x's in-memory names
(`model.language_model.*`) instead. Image-ish ids sit at 300..303, inside the 384-token vocab; the
mistral archs' image id is the tokenizer's own [IMG] (id 6), which a full package's build checks.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from derived_moe_models import CONFIGS as DERIVED_MOE_CONFIGS
from tiny_models import BASE, randomize_norms, save_tokenizer, spelled_for_installed_transformers

IMAGE_ID = 300
SPECIAL_IDS: dict[str, dict[str, int]] = {
    "gemma3": {"image_token_index": IMAGE_ID, "boi_token_index": 301, "eoi_token_index": 302},
    # the tokenizer's own [IMG] (MISTRAL3_IMAGE_TOKENS from id 6): the full package's build checks it (ministral3,
    # mistral, mistral4)
    "mistral3": {"image_token_index": 6},
    # the tokenizer's own <image_soft_token>, <start_of_image>, <end_of_image> (GEMMA3_IMAGE_TOKENS)
    "gemma3_full": {"image_token_index": 6, "boi_token_index": 7, "eoi_token_index": 8},
    # the tokenizer's own [IMG] (MISTRAL3_IMAGE_TOKENS: [IMG], [IMG_BREAK], [IMG_END], [INST] from id 6)
    "mistral3_full": {"image_token_index": 6},
    "qwen2_5_vl": {"image_token_id": IMAGE_ID, "video_token_id": 301, "vision_start_token_id": 302},
    "qwen3_vl": {"image_token_id": IMAGE_ID, "video_token_id": 301, "vision_start_token_id": 302},
    "qwen3_vl_moe": {"image_token_id": IMAGE_ID, "video_token_id": 301, "vision_start_token_id": 302},
    "qwen2_vl": {"image_token_id": IMAGE_ID, "video_token_id": 301, "vision_start_token_id": 302},
}
_TEXT = {k: BASE[k] for k in ("vocab_size", "hidden_size", "intermediate_size", "num_attention_heads",
                              "num_key_value_heads", "max_position_embeddings", "bos_token_id", "eos_token_id",
                              "pad_token_id", "initializer_range")}  # fmt: skip
# arch -> text_config of each tiny checkpoint (features of the released models, scaled down)
GEMMA3_IMAGE_TOKENS = ("<image_soft_token>", "<start_of_image>", "<end_of_image>")
MISTRAL3_IMAGE_TOKENS = ("[IMG]", "[IMG_BREAK]", "[IMG_END]", "[INST]")  # genai's mistral3 processor looks them up
TEXT_CONFIGS: dict[str, dict[str, Any]] = {
    "gemma3": dict(
        model_type="gemma3_text",
        head_dim=32,
        num_hidden_layers=3,
        layer_types=["sliding_attention", "full_attention", "sliding_attention"],
        sliding_window=8,
        query_pre_attn_scalar=24,
        hidden_activation="gelu_pytorch_tanh",
        rope_parameters={
            "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6},
            "sliding_attention": {"rope_type": "default", "rope_theta": 1e4},
        },
        tie_word_embeddings=True,
    ),
    "ministral3": dict(
        model_type="ministral3",
        head_dim=32,
        num_hidden_layers=2,
        # original_max 16: the query scale 1 + beta*log(1 + floor(pos/16)) changes within a test prompt
        rope_parameters={
            "rope_type": "yarn",
            "rope_theta": 1e6,
            "factor": 16.0,
            "original_max_position_embeddings": 16,
            "max_position_embeddings": 256,
            "beta_fast": 32.0,
            "beta_slow": 1.0,
            "mscale": 1.0,
            "mscale_all_dim": 1.0,
            "llama_4_scaling_beta": 0.1,
        },
        tie_word_embeddings=False,
    ),
    "mistral": dict(
        model_type="mistral",
        head_dim=32,
        num_hidden_layers=2,
        sliding_window=None,
        rope_parameters={"rope_type": "default", "rope_theta": 1e9},
        tie_word_embeddings=False,
    ),
    "qwen2_5_vl": dict(
        model_type="qwen2_5_vl_text",
        num_hidden_layers=2,
        rope_parameters={"rope_type": "default", "rope_theta": 1e6, "mrope_section": [2, 3, 3]},
        tie_word_embeddings=False,
    ),
    "qwen3_vl": dict(
        model_type="qwen3_vl_text",
        head_dim=32,
        num_hidden_layers=2,
        rope_parameters={
            "rope_type": "default",
            "rope_theta": 5e6,
            "mrope_section": [6, 5, 5],
            "mrope_interleaved": True,
        },
        tie_word_embeddings=True,
    ),
}
TEXT_CONFIGS["qwen2_vl"] = {**TEXT_CONFIGS["qwen2_5_vl"], "model_type": "qwen2_vl_text"}
# Mistral-Small-4's form: Mistral3ForConditionalGeneration around a mistral4 text_config (tests/derived_moe_models.py's,
# whose query scale steps every 8 positions)
TEXT_CONFIGS["mistral4"] = {
    **DERIVED_MOE_CONFIGS["mistral4"][0],
    "model_type": "mistral4",
    "tie_word_embeddings": False,
}
# Qwen3-VL-MoE: Qwen3-VL's text config with 4 experts (top 2, always renormalized), layer 1 dense
TEXT_CONFIGS["qwen3_vl_moe"] = {**TEXT_CONFIGS["qwen3_vl"], "model_type": "qwen3_vl_moe_text", "num_experts": 4,
                                "num_experts_per_tok": 2, "moe_intermediate_size": 48,
                                "mlp_only_layers": [1]}  # fmt: skip

# Gemma-3 with a vision tower genai can run (tests/package/multimodal/test_multimodal_package.py): prompts with two
# images of 256 tokens each need more positions than the text-decoder fixtures
TEXT_CONFIGS["gemma3_full"] = {**TEXT_CONFIGS["gemma3"], "max_position_embeddings": 1024}
TEXT_CONFIGS["mistral3_full"] = {**TEXT_CONFIGS["mistral"], "max_position_embeddings": 512}


def _config(arch: str, text: dict[str, Any], vision_overrides: dict[str, Any] | None = None) -> Any:
    import transformers as tf

    tie = text["tie_word_embeddings"]
    if arch == "gemma3":
        vision = dict(model_type="siglip_vision_model", hidden_size=16, intermediate_size=32,
                      num_hidden_layers=1, num_attention_heads=2, image_size=28, patch_size=14)  # fmt: skip
        return tf.Gemma3Config(text_config=text, vision_config=vision, mm_tokens_per_image=4,
                               tie_word_embeddings=tie, **SPECIAL_IDS[arch])  # fmt: skip
    if arch == "gemma3_full":
        # genai's gemma3 processor writes 256 image tokens: 32 x 32 patches pooled 2 x 2 to 16 x 16
        vision = dict(model_type="siglip_vision_model", hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                      num_attention_heads=2, image_size=64, patch_size=2, vision_use_head=False)  # fmt: skip
        vision.update(vision_overrides or {})
        return tf.Gemma3Config(text_config=text, vision_config=vision, mm_tokens_per_image=256,
                               tie_word_embeddings=tie, **SPECIAL_IDS[arch])  # fmt: skip
    if arch == "mistral3_full":
        # Pixtral with 4-pixel patches merged 2 x 2: a 32 x 48 image is an 8 x 12 grid, 4 x 6 tokens;
        # weights 10x the default spread, so attention is sharp and patch positions matter
        vision = dict(model_type="pixtral", hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                      num_attention_heads=2, image_size=64, patch_size=4, hidden_act="silu",
                      initializer_range=0.2)  # fmt: skip
        return tf.Mistral3Config(text_config=text, vision_config=vision, spatial_merge_size=2,
                                 tie_word_embeddings=tie, **SPECIAL_IDS[arch])  # fmt: skip
    if arch in ("ministral3", "mistral", "mistral4"):
        vision = dict(model_type="pixtral", hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                      num_attention_heads=2, image_size=28, patch_size=14)  # fmt: skip
        return tf.Mistral3Config(text_config=text, vision_config=vision, spatial_merge_size=2,
                                 tie_word_embeddings=tie, **SPECIAL_IDS["mistral3"])  # fmt: skip
    vision: dict[str, Any] = dict(
        depth=1, hidden_size=16, intermediate_size=32, num_heads=2, out_hidden_size=text["hidden_size"],
        spatial_merge_size=2, temporal_patch_size=2,
    )  # fmt: skip
    if arch == "qwen2_vl":  # its tower's width is embed_dim, its merger's output hidden_size
        vision = dict(depth=1, embed_dim=16, hidden_size=text["hidden_size"], mlp_ratio=2, num_heads=2,
                      spatial_merge_size=2, temporal_patch_size=2, patch_size=14)  # fmt: skip
        return tf.Qwen2VLConfig(text_config=text, vision_config=vision, tie_word_embeddings=tie, **SPECIAL_IDS[arch])
    if arch == "qwen2_5_vl":
        vision.update(model_type="qwen2_5_vl_vision", fullatt_block_indexes=[0], patch_size=14, window_size=56)
        return tf.Qwen2_5_VLConfig(text_config=text, vision_config=vision, tie_word_embeddings=tie, **SPECIAL_IDS[arch])
    vision.update(model_type="qwen3_vl_vision", patch_size=16, num_position_embeddings=16, deepstack_visual_indexes=[0])
    if arch == "qwen3_vl_moe":
        vision["model_type"] = "qwen3_vl_moe_vision"
        return tf.Qwen3VLMoeConfig(text_config=text, vision_config=vision, tie_word_embeddings=tie, **SPECIAL_IDS[arch])
    return tf.Qwen3VLConfig(text_config=text, vision_config=vision, tie_word_embeddings=tie, **SPECIAL_IDS[arch])


_CLASSES = {
    "gemma3": "Gemma3ForConditionalGeneration",
    "gemma3_full": "Gemma3ForConditionalGeneration",
    "ministral3": "Mistral3ForConditionalGeneration",
    "mistral": "Mistral3ForConditionalGeneration",
    "mistral4": "Mistral3ForConditionalGeneration",
    "mistral3_full": "Mistral3ForConditionalGeneration",
    "qwen2_5_vl": "Qwen2_5_VLForConditionalGeneration",
    "qwen3_vl": "Qwen3VLForConditionalGeneration",
    "qwen3_vl_moe": "Qwen3VLMoeForConditionalGeneration",
    "qwen2_vl": "Qwen2VLForConditionalGeneration",
}


def save_multimodal(
    out_dir: Path,
    arch: str,
    seed: int = 0,
    hub_layout: bool = True,
    flat_config: bool = False,
    vision: dict[str, Any] | None = None,
    shield: bool = False,
    **text_overrides: Any,
) -> Path:
    """Save a tiny random `arch` multimodal checkpoint (text overrides go into text_config) plus
    the tiny tokenizer. flat_config: rewrite config.json the way the released Qwen2.5-VL configs
    are written (text fields at the top level, `rope_scaling: {type: mrope, ...}`). vision:
    gemma3_full's vision_config overrides; shield: gemma3_full wrapped as ShieldGemma2ForImageClassification
    (its Gemma3ForConditionalGeneration under `model.`)."""
    import torch
    import transformers as tf

    text = {**_TEXT, **copy.deepcopy(TEXT_CONFIGS[arch]), **text_overrides}
    text = spelled_for_installed_transformers(text, text["model_type"])
    config = _config(arch, text, vision)
    if shield:
        config = tf.ShieldGemma2Config(**{k: v for k, v in config.to_dict().items() if k != "model_type"})
    for key in ("bos_token_id", "eos_token_id", "pad_token_id"):
        setattr(config, key, text[key])
    torch.manual_seed(seed)
    wrapper = tf.ShieldGemma2ForImageClassification(config).eval() if shield else None
    model = wrapper.model if shield else getattr(tf, _CLASSES[arch])(config).eval()
    randomize_norms(model, biases=True)
    if arch.startswith("gemma3"):
        # Tied and scaled by sqrt(hidden), the full-size table dominates every (post-normed) layer
        # and the model copies its last token forever; an eighth of it lets the layers decide the
        # next token, and a final norm (1 + w) about twice as large keeps the logits above 1.
        with torch.no_grad():
            model.get_input_embeddings().weight.mul_(0.125)
            next(p for n, p in model.named_parameters() if n.endswith("language_model.norm.weight")).add_(1.0)
            if arch == "gemma3_full":  # the projection is initialised to zeros: every image would look alike
                model.model.multi_modal_projector.mm_input_projection_weight.normal_(0.0, 0.5)
    generation = model.generation_config
    generation.bos_token_id, generation.eos_token_id, generation.pad_token_id = 0, 1, 5
    (wrapper or model).save_pretrained(out_dir, save_original_format=hub_layout)
    if not hub_layout and int(tf.__version__.split(".")[0]) < 5:
        _rename_to_loaded_names(out_dir, model._checkpoint_conversion_mapping)
    if hub_layout and arch == "qwen3_vl_moe":
        transpose_experts(out_dir)
    specials = {"gemma3_full": GEMMA3_IMAGE_TOKENS, "mistral3_full": MISTRAL3_IMAGE_TOKENS}.get(arch, ())
    if arch in ("ministral3", "mistral", "mistral4"):
        specials = MISTRAL3_IMAGE_TOKENS
    save_tokenizer(out_dir, vocab_size=text["vocab_size"], extra_specials=specials)
    if arch == "mistral3_full":  # PixtralImageProcessor's keys: a 64-pixel longest edge, 4-pixel patches
        pre = {"image_processor_type": "PixtralImageProcessor", "patch_size": {"height": 4, "width": 4},
               "size": {"longest_edge": 64}, "resample": 3}  # fmt: skip
        (out_dir / "preprocessor_config.json").write_text(json.dumps(pre, indent=2))
    written = json.loads((out_dir / "config.json").read_text())
    if "architectures" not in written:  # 4.57 writes Qwen2.5-VL's under text_config only
        written["architectures"] = [_CLASSES[arch]]
        (out_dir / "config.json").write_text(json.dumps(written, indent=2))
    if flat_config:
        _flatten_config(out_dir / "config.json")
    return out_dir


def transpose_experts(out_dir: Path) -> None:
    """Qwen3-VL-MoE's fused experts as the hub stores them: gate_up_proj [E, H, 2I] and down_proj
    [E, I, H] (transformers 5.x saves [E, 2I, H] / [E, H, I], and transposes the hub's on load)."""
    from safetensors.torch import load_file, save_file

    for path in out_dir.glob("*.safetensors"):
        tensors = load_file(path)
        for name in [n for n in tensors if n.endswith(("experts.gate_up_proj", "experts.down_proj"))]:
            tensors[name] = tensors[name].transpose(1, 2).contiguous()
        save_file(tensors, path, metadata={"format": "pt"})


def _rename_to_loaded_names(out_dir: Path, conversion: dict[str, str]) -> None:
    """transformers 4.x always saves the hub layout (it reverses its load-time renaming): rename
    the saved tensors forward again, to the names the class holds in memory (5.x's layout)."""
    import re

    from safetensors.torch import load_file, save_file

    for path in out_dir.glob("*.safetensors"):
        tensors = {}
        for name, tensor in load_file(path).items():
            for pattern, replacement in conversion.items():
                name, hits = re.subn(pattern, replacement, name)
                if hits:
                    break
            tensors[name] = tensor
        save_file(tensors, path, metadata={"format": "pt"})


def _flatten_config(path: Path) -> None:
    config = json.loads(path.read_text())
    text = config.pop("text_config")
    if "rope_parameters" in text:
        rope = text.pop("rope_parameters")
    else:  # written by transformers 4.x
        rope = {**text.pop("rope_scaling"), "rope_theta": text.pop("rope_theta")}
    for key in ("model_type", "transformers_version", "architectures", "layer_types"):
        text.pop(key, None)
    config.update(text)
    config["rope_scaling"] = {"type": "mrope", "mrope_section": rope["mrope_section"]}
    config["rope_theta"] = rope["rope_theta"]
    path.write_text(json.dumps(config, indent=2))
