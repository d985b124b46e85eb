"""A tiny Qwen2.5-VL checkpoint whose tokenizer has the vision tokens, and a hand-assembled
onnxruntime-genai `qwen2_5_vl` package from it: vision.onnx (graph/encoders/qwen_vision.py), the
decoder with inputs_embeds and 3-D position_ids (IoOptions.mrope_positions),
processor_config.json (package/processor_config.py), and a test-only embedding model (table rows,
the k-th image placeholder row replaced by feature row k where there is one). The package wiring
itself (embedding model, genai_config sections) is the build's job; this only lets the tests drive
genai's own processor and generator over the pieces (docs/multimodal.md §11)."""

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
            pad_token_id=5, tie_word_embeddings=False,
            rope_parameters={"rope_type": "default", "rope_theta": 1e4, "mrope_section": [2, 3, 3]})  # fmt: skip
# Qwen2.5-VL's published preprocessor_config.json values
PREPROCESSOR = {
    "min_pixels": 3136, "max_pixels": 12845056, "patch_size": 14, "temporal_patch_size": 2, "merge_size": 2,
    "image_mean": [0.48145466, 0.4578275, 0.40821073], "image_std": [0.26862954, 0.26130258, 0.27577711],
    "image_processor_type": "Qwen2VLImageProcessor",
}  # fmt: skip
MARKER = "<|vision_start|><|image_pad|><|vision_end|>"


def save_qwen_vl(out: Path) -> Path:
    import torch
    import transformers as tf

    config = tf.Qwen2_5_VLConfig(text_config=TEXT, vision_config=VISION, image_token_id=IMAGE, video_token_id=VIDEO,
                                 vision_start_token_id=VISION_START, vision_end_token_id=VISION_END,
                                 tie_word_embeddings=False)  # fmt: skip
    for key in ("bos_token_id", "eos_token_id", "pad_token_id"):
        setattr(config, key, TEXT[key])
    torch.manual_seed(0)
    model = tf.Qwen2_5_VLForConditionalGeneration(config).eval()
    randomize_norms(model, biases=True)
    generation = model.generation_config
    generation.bos_token_id, generation.eos_token_id, generation.pad_token_id = 0, 1, 5
    model.save_pretrained(out)
    tokenizer = save_tokenizer(out, vocab_size=384)
    specials = ["<|image_pad|>", "<|video_pad|>", "<|vision_start|>", "<|vision_end|>"]
    tokenizer.add_special_tokens({"additional_special_tokens": specials})
    tokenizer.save_pretrained(out)
    assert tokenizer.convert_tokens_to_ids(specials) == [IMAGE, VIDEO, VISION_START, VISION_END]
    (out / "preprocessor_config.json").write_text(json.dumps(PREPROCESSOR))
    return out


def assemble(checkpoint: Path, out: Path, attention: str = "gqa", **vision_changes: Any) -> Path:
    """The package; `vision_changes` replace QwenVisionDims fields (mutants)."""
    import dataclasses

    from gqa_export.graph.encoders.qwen_vision import QwenVisionDims, build_qwen_vision, vision_prefix
    from gqa_export.graph.io_options import IoOptions
    from gqa_export.graph.params import Params
    from gqa_export.package.processor_config import qwen_processor_config
    from gqa_export.pipeline import BuildOptions, build
    from gqa_export.source.weights import WeightStore

    shutil.rmtree(out, ignore_errors=True)
    io = IoOptions(inputs_embeds=True, mrope_positions=True)
    build(BuildOptions(str(checkpoint), out, smoke=False, attention=attention, io=io))
    config = json.loads((checkpoint / "config.json").read_text())
    store = WeightStore.open(checkpoint)
    dims = dataclasses.replace(QwenVisionDims.from_config(config["vision_config"]), **vision_changes)
    vision = build_qwen_vision(dims, Params(store, ir.DataType.FLOAT), vision_prefix(store.names()))
    ir.save(vision, out / "vision.onnx", external_data="vision.onnx.data")
    embed = next(n for n in store.names() if n.endswith("embed_tokens.weight"))
    ir.save(_embedding(store.read(embed).astype(np.float32)), out / "embedding.onnx")
    pre = json.loads((checkpoint / "preprocessor_config.json").read_text())
    (out / "processor_config.json").write_text(json.dumps(qwen_processor_config(pre), indent=2))
    genai = json.loads((out / "genai_config.json").read_text())
    model = genai["model"]
    model.update(type="qwen2_5_vl", image_token_id=IMAGE, video_token_id=VIDEO, vision_start_token_id=VISION_START)
    model["vision"] = {
        "filename": "vision.onnx", "config_filename": "processor_config.json",
        "spatial_merge_size": dims.spatial_merge_size, "patch_size": dims.patch_size,
        "inputs": {"pixel_values": "pixel_values", "image_grid_thw": "image_grid_thw"},
        "outputs": {"image_features": "image_features"},
    }  # fmt: skip
    model["embedding"] = {
        "filename": "embedding.onnx",
        "inputs": {"input_ids": "input_ids", "image_features": "image_features"},
        "outputs": {"inputs_embeds": "inputs_embeds"},
    }
    (out / "genai_config.json").write_text(json.dumps(genai, indent=2))
    return out


def _embedding(table: np.ndarray) -> ir.Model:
    from gqa_export.graph.builder import GraphBuilder

    b = GraphBuilder("embedding", {"": 21})
    hidden = table.shape[1]
    ids = b.input("input_ids", ir.DataType.INT64, ["batch_size", "sequence_length"])
    features = b.input("image_features", ir.DataType.FLOAT, ["num_image_tokens", hidden])
    rows = b.op("Gather", b.initializer("embed_tokens.weight", ir.Tensor(table)), ids)
    image = b.op("Equal", ids, b.const(IMAGE, "image", "int64"))
    k = b.op("CumSum", b.op("Cast", image, to=ir.DataType.INT64), b.const(1, "axis", "int64"))
    k = b.op("Sub", k, b.const(1, "one", "int64"))
    count = b.op("Gather", b.op("Shape", features), b.const(0, "rows", "int64"))
    replaced = b.op("And", image, b.op("Less", k, count))
    index = b.op("Where", replaced, k, b.const(0, "zero", "int64"))
    padded = b.op("Concat", features, b.const(np.zeros((1, hidden), np.float32), "zero_row"), axis=0)  # 0-row safe
    picked = b.op("Gather", padded, index)
    out = b.op("Where", b.op("Unsqueeze", replaced, b.const([-1], "last", "int64")), picked, rows)
    b.output(out, "inputs_embeds", ir.DataType.FLOAT, ["batch_size", "sequence_length", hidden])
    return ir.Model(b.graph, ir_version=10)


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


def hf_greedy(model: Any, ids: np.ndarray, images: list[str], new: int) -> tuple[np.ndarray, list[int]]:
    """HF's prompt logits [S, V] (forward with the images) and greedy new tokens (generate)."""
    import torch

    kwargs: dict[str, Any] = {}
    if images:
        pixels = hf_pixels(images)
        kwargs = {k: torch.from_numpy(v) for k, v in pixels.items()}
        kwargs["mm_token_type_ids"] = torch.from_numpy((ids == IMAGE).astype(np.int64))
    tokens = torch.from_numpy(ids)
    with torch.no_grad():
        logits = model(input_ids=tokens, **kwargs).logits[0].numpy()
        out = model.generate(input_ids=tokens, attention_mask=torch.ones_like(tokens), max_new_tokens=new,
                             min_new_tokens=new, do_sample=False, **kwargs)  # fmt: skip
    return logits, out[0, ids.shape[1] :].tolist()
