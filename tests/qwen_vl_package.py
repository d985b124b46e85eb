"""A tiny Qwen2.5-VL checkpoint whose tokenizer has the vision tokens, its full onnxruntime-genai
`qwen2_5_vl` package (`gqa-export build`: vision.onnx, embedding.onnx, the decoder with
inputs_embeds and 3-D position_ids, processor_config.json), and the helpers that drive genai's own
processor and generator and HF's class on the same prompt and images (docs/multimodal.md §11)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import onnx_ir as ir
from tiny_models import randomize_norms, save_tokenizer

IMAGE, VIDEO, VISION_START, VISION_END = 384, 385, 386, 387  # past the 384 BPE ids of the tiny tokenizer
VISION = dict(depth=3, hidden_size=32, intermediate_size=48, num_heads=2, out_hidden_size=64, spatial_merge_size=2,
              temporal_patch_size=2, patch_size=14, window_size=84, fullatt_block_indexes=[1],
              initializer_range=0.1)  # fmt: skip
TEXT = dict(vocab_size=392, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=256, rms_norm_eps=1e-5, bos_token_id=0, eos_token_id=1,
            pad_token_id=5, tie_word_embeddings=False, initializer_range=0.2,
            rope_parameters={"rope_type": "default", "rope_theta": 1e4, "mrope_section": [2, 3, 3]})  # fmt: skip
# Qwen2.5-VL's published preprocessor_config.json values
PREPROCESSOR = {
    "min_pixels": 3136, "max_pixels": 12845056, "patch_size": 14, "temporal_patch_size": 2, "merge_size": 2,
    "image_mean": [0.48145466, 0.4578275, 0.40821073], "image_std": [0.26862954, 0.26130258, 0.27577711],
    "image_processor_type": "Qwen2VLImageProcessor",
}  # fmt: skip
MARKER = "<|vision_start|><|image_pad|><|vision_end|>"


# Qwen2-VL's tower: Qwen2.5-VL's patch 14 without windows, LayerNorms and a QuickGELU fc1/fc2 MLP;
# its width is `embed_dim`, its merger's output `hidden_size`
VISION2 = dict(depth=2, embed_dim=32, hidden_size=64, mlp_ratio=2, num_heads=2, spatial_merge_size=2,
               temporal_patch_size=2, patch_size=14, initializer_range=0.1)  # fmt: skip
# Qwen3-VL / Qwen3.5 towers: patch 16, a 4 x 4 learned position table, LayerNorms, gelu-tanh MLP
VISION3 = dict(depth=2, hidden_size=32, intermediate_size=48, num_heads=2, out_hidden_size=64, patch_size=16,
               spatial_merge_size=2, temporal_patch_size=2, num_position_embeddings=16,
               hidden_act="gelu_pytorch_tanh", initializer_range=0.1)  # fmt: skip
# Qwen3-VL / Qwen3.5's published values (mean/std 0.5), shortest_edge lowered so that the small
# test images are not all upscaled
PREPROCESSOR3 = {"size": {"shortest_edge": 1024, "longest_edge": 16777216}, "patch_size": 16, "temporal_patch_size": 2,
                 "merge_size": 2, "image_mean": [0.5] * 3, "image_std": [0.5] * 3,
                 "image_processor_type": "Qwen2VLImageProcessor"}  # fmt: skip
INTERLEAVED = {"rope_type": "default", "rope_theta": 5e6, "mrope_section": [6, 5, 5], "mrope_interleaved": True}
TEXT3 = {**TEXT, "head_dim": 32, "rope_parameters": INTERLEAVED}
# Qwen3-VL-MoE: 4 experts, top 2 (always renormalized), layer 1 dense (mlp_only_layers)
TEXT3_MOE = {**TEXT3, "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 48,
             "mlp_only_layers": [1]}  # fmt: skip


def _qwen3_5_text(moe: bool) -> dict[str, Any]:
    from dense_models import family_config

    text = family_config("qwen3_5_moe_text" if moe else "qwen3_5_text")
    keep = ("vocab_size", "max_position_embeddings", "bos_token_id", "eos_token_id", "pad_token_id")
    return {**text, **{k: TEXT[k] for k in keep}}


# kind -> (config class, model class, text_config, vision_config, preprocessor_config.json)
KINDS: dict[str, tuple[str, str, Any, dict[str, Any], dict[str, Any]]] = {
    "qwen2_5_vl": ("Qwen2_5_VLConfig", "Qwen2_5_VLForConditionalGeneration", lambda: TEXT, VISION, PREPROCESSOR),
    "qwen2_vl": ("Qwen2VLConfig", "Qwen2VLForConditionalGeneration", lambda: TEXT, VISION2, PREPROCESSOR),
    # deepstack-free: no deepstack mergers
    "qwen3_vl": ("Qwen3VLConfig", "Qwen3VLForConditionalGeneration", lambda: TEXT3,
                 {**VISION3, "deepstack_visual_indexes": []}, PREPROCESSOR3),
    # as published: deepstack mergers after both tower blocks, added after both decoder layers (§11.5)
    "qwen3_vl_deepstack": ("Qwen3VLConfig", "Qwen3VLForConditionalGeneration", lambda: TEXT3,
                           {**VISION3, "deepstack_visual_indexes": [0, 1]}, PREPROCESSOR3),
    # the MoE decoder under a deepstack tower, as published
    "qwen3_vl_moe": ("Qwen3VLMoeConfig", "Qwen3VLMoeForConditionalGeneration", lambda: TEXT3_MOE,
                     {**VISION3, "deepstack_visual_indexes": [0, 1]}, PREPROCESSOR3),
    "qwen3_5": ("Qwen3_5Config", "Qwen3_5ForConditionalGeneration", lambda: _qwen3_5_text(False), VISION3,
                PREPROCESSOR3),
    "qwen3_5_moe": ("Qwen3_5MoeConfig", "Qwen3_5MoeForConditionalGeneration", lambda: _qwen3_5_text(True), VISION3,
                    PREPROCESSOR3),
}  # fmt: skip


def save_qwen_vl(out: Path, kind: str = "qwen2_5_vl", **vision_changes: Any) -> Path:
    """A tiny `kind` checkpoint (a KINDS row) whose tokenizer holds the vision tokens at 384-387."""
    import torch
    import transformers as tf

    config_class, model_class, text, vision, pre = KINDS[kind]
    text = text()
    config = getattr(tf, config_class)(text_config=text, vision_config={**vision, **vision_changes},
                                       image_token_id=IMAGE, video_token_id=VIDEO, vision_start_token_id=VISION_START,
                                       vision_end_token_id=VISION_END, tie_word_embeddings=False)  # fmt: skip
    for key in ("bos_token_id", "eos_token_id", "pad_token_id"):
        setattr(config, key, TEXT[key])
    torch.manual_seed(0)
    model = getattr(tf, model_class)(config).eval()
    randomize_norms(model, biases=True)
    generation = model.generation_config
    generation.bos_token_id, generation.eos_token_id, generation.pad_token_id = 0, 1, 5
    model.save_pretrained(out)
    tokenizer = save_tokenizer(out, vocab_size=384)
    specials = ["<|image_pad|>", "<|video_pad|>", "<|vision_start|>", "<|vision_end|>"]
    tokenizer.add_special_tokens({"additional_special_tokens": specials})
    tokenizer.save_pretrained(out)
    assert tokenizer.convert_tokens_to_ids(specials) == [IMAGE, VIDEO, VISION_START, VISION_END]
    (out / "preprocessor_config.json").write_text(json.dumps(pre))
    return out


def assemble(checkpoint: Path, out: Path, attention: str = "auto", **vision_changes: Any) -> Path:
    """`gqa-export build` of the checkpoint (the full package); `vision_changes` replace
    QwenVisionDims fields of vision.onnx afterwards (mutants)."""
    import dataclasses

    from gqa_export.graph.encoders.qwen_vision import QwenVisionDims, build_qwen_vision, vision_prefix
    from gqa_export.graph.params import Params
    from gqa_export.pipeline import BuildOptions, build
    from gqa_export.source.weights import WeightStore

    shutil.rmtree(out, ignore_errors=True)
    build(BuildOptions(str(checkpoint), out, smoke=False, attention=attention))
    if vision_changes:
        config = json.loads((checkpoint / "config.json").read_text())
        store = WeightStore.open(checkpoint)
        dims = dataclasses.replace(QwenVisionDims.from_config(config["vision_config"]), **vision_changes)
        vision = build_qwen_vision(dims, Params(store, ir.DataType.FLOAT), vision_prefix(store.names()))
        (out / "vision.onnx.data").unlink()
        ir.save(vision, out / "vision.onnx", external_data="vision.onnx.data")
    return out


def png(path: Path, width: int, height: int, seed: int) -> str:
    from PIL import Image

    pixels = np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(path)
    return str(path)


def genai_inputs(package: Path, prompt: str, images: list[str]) -> tuple[Any, Any]:
    import onnxruntime_genai as og

    model = og.Model(str(package))
    processor = model.create_multimodal_processor()
    inputs = processor(prompt, images=og.Images.open(*images)) if images else processor(prompt)
    return model, inputs


def genai_greedy(package: Path, prompt: str, images: list[str], new: int) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """(prompt ids [1, S] after the processor's expansion, prompt logits [S, V], greedy new tokens)."""
    import onnxruntime_genai as og

    model, inputs = genai_inputs(package, prompt, images)
    ids = np.asarray(inputs["input_ids"].as_numpy()).astype(np.int64).reshape(1, -1)
    params = og.GeneratorParams(model)
    params.set_search_options(do_sample=False, max_length=ids.shape[1] + new, min_length=ids.shape[1] + new)
    generator = og.Generator(model, params)
    generator.set_inputs(inputs)
    tokens, logits = [], None
    while not generator.is_done():
        generator.generate_next_token()
        if logits is None:
            logits = np.asarray(generator.get_output("logits"))[0]
        tokens.append(int(generator.get_next_tokens()[0]))
    assert logits is not None
    return ids, logits, tokens


def hf_pixels(images: list[str], pre: dict[str, Any] | None = None) -> dict[str, np.ndarray]:
    """HF's PIL-backend Qwen2VLImageProcessor (torchvision is not installed here)."""
    from PIL import Image
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    kwargs = {k: v for k, v in (pre or PREPROCESSOR).items() if k != "image_processor_type"}
    out = Qwen2VLImageProcessorPil(**kwargs)(images=[Image.open(p) for p in images], return_tensors="np")
    return {"pixel_values": out["pixel_values"], "image_grid_thw": out["image_grid_thw"]}


def hf_greedy(
    model: Any, ids: np.ndarray, images: list[str], new: int, pre: dict[str, Any] | None = None
) -> tuple[np.ndarray, list[int]]:
    """HF's prompt logits [S, V] (forward with the images) and greedy new tokens (generate)."""
    import torch

    kwargs: dict[str, Any] = {}
    if images:
        pixels = hf_pixels(images, pre)
        kwargs = {k: torch.from_numpy(v) for k, v in pixels.items()}
        kwargs["mm_token_type_ids"] = torch.from_numpy((ids == IMAGE).astype(np.int64))
    tokens = torch.from_numpy(ids)
    with torch.no_grad():
        logits = model(input_ids=tokens, **kwargs).logits[0].numpy()
        out = model.generate(input_ids=tokens, attention_mask=torch.ones_like(tokens), max_new_tokens=new,
                             min_new_tokens=new, do_sample=False, **kwargs)  # fmt: skip
    return logits, out[0, ids.shape[1] :].tolist()
