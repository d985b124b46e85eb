"""A tiny Phi-3-vision checkpoint in its release's own layout (model_type phi3_v, Phi3VForCausalLM, remote code that
transformers does not have) and its twin: the same decoder weights saved as transformers' Phi3ForCausalLM, the
reference its text-only package is held against (tests/source/test_phi3v_release.py).

The release's config is Phi-3's keys as Phi3Config spells them (rope_scaling of type `su` on Phi-3-vision, `longrope`
on Phi-3.5-vision, with short and long factors; rope_theta at the top level) plus its image settings (`embd_layer`,
`img_processor`); its CLIP ViT tower, the separators and the 2-layer projector sit under `model.vision_embed_tokens.`
(a tiny CLIPVisionModel's `vision_model.*` here; the release hard-codes CLIP ViT-L/14-336)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

# the longrope tables of tests/variants.py's phi3_longrope (head_dim 16: 8 each), 32 original positions of 256
SHORT = [1.0, 1.1, 1.3, 1.6, 2.0, 2.5, 3.1, 3.8]
LONG = [1.0, 1.5, 2.2, 3.0, 4.1, 5.5, 7.0, 9.0]
ORIGINAL_MAX = 32
# the release's image settings (Phi-3.5-vision-instruct's config.json)
EMBD_LAYER = {"embedding_cls": "image", "hd_transform_order": "sub_glb", "projection_cls": "mlp",
              "use_hd_transform": True, "with_learnable_separator": True}  # fmt: skip
IMG_PROCESSOR = {"image_dim_out": 1024, "model_name": "openai/clip-vit-large-patch14-336",
                 "name": "clip_vision_model", "num_img_tokens": 144}  # fmt: skip
VISION = "model.vision_embed_tokens."
WIDTH = 128  # the tiny CLIP tower's width: two heads of 64
AUTO_MAP = {
    "AutoConfig": "configuration_phi3_v.Phi3VConfig",
    "AutoModelForCausalLM": "modeling_phi3_v.Phi3VForCausalLM",
}


def save_phi3v_twins(root: Path, rope_type: str = "su") -> tuple[Path, Path]:
    """(twin, release): a random Phi3ForCausalLM with longrope, and the same weights in Phi-3-vision's release
    layout with `rope_type` ("su": Phi-3-vision, "longrope": Phi-3.5-vision) and a tiny vision side beside them."""
    from tiny_models import save_model

    rope = {"rope_type": "longrope", "rope_theta": 10000.0, "short_factor": SHORT, "long_factor": LONG}
    # 8192 positions: genai's processor gives an image up to 17 crops, about 2.4k placeholders
    twin = save_model(root / "twin", "phi3", original_max_position_embeddings=ORIGINAL_MAX, rope_parameters=rope,
                      max_position_embeddings=8192)  # fmt: skip
    release = Path(shutil.copytree(twin, root / "release"))
    config = json.loads((twin / "config.json").read_text())
    params = config.pop("rope_parameters")
    config.pop("partial_rotary_factor", None)
    config.pop("dtype", None)
    release_config = {
        **config,
        "model_type": "phi3_v",
        "architectures": ["Phi3VForCausalLM"],
        "auto_map": AUTO_MAP,
        "_attn_implementation": "flash_attention_2",
        "embd_layer": EMBD_LAYER,
        "img_processor": {**IMG_PROCESSOR, "image_dim_out": WIDTH},
        "rope_scaling": {
            "long_factor": params["long_factor"],
            "short_factor": params["short_factor"],
            "type": rope_type,
        },
        "rope_theta": params["rope_theta"],
        "sliding_window": config["max_position_embeddings"],
        "torch_dtype": "float32",
        "transformers_version": "4.38.1",
    }
    (release / "config.json").write_text(json.dumps(release_config, indent=2))
    _add_vision_side(release, config["hidden_size"])
    return twin, release


def _add_vision_side(release: Path, hidden: int, width: int = 0) -> None:
    """The release's image side under model.vision_embed_tokens.: a tiny CLIP vision tower (336-pixel crops of
    14-pixel patches, as genai's processor cuts them; heads of 64), glb_GN [1, 1, 4C], sub_GN [1, 1, 1, 4C] and
    img_projection.0 / .2 (4C -> hidden -> hidden)."""
    import torch
    from safetensors.torch import load_file, save_file
    from transformers import CLIPVisionModel

    torch.manual_seed(1)
    clip = CLIPVisionModel(clip_config()).eval()
    width = WIDTH
    with torch.no_grad():  # random norms, biases and class token: the wiring shows
        for name, param in clip.named_parameters():
            if "norm" in name or name.endswith(".bias") or "class_embedding" in name:
                param.add_(torch.randn_like(param) * 0.3)
    # transformers 5 names CLIPVisionModel's modules without the `vision_model.` the release (4.38) stores
    tensors = {f"{VISION}img_processor.vision_model.{k}": v.contiguous() for k, v in clip.state_dict().items()}
    tensors[f"{VISION}glb_GN"] = torch.randn(1, 1, 4 * width)
    tensors[f"{VISION}sub_GN"] = torch.randn(1, 1, 1, 4 * width)
    for index, (fan_in, fan_out) in ((0, (4 * width, hidden)), (2, (hidden, hidden))):
        tensors[f"{VISION}img_projection.{index}.weight"] = torch.randn(fan_out, fan_in) * 0.1
        tensors[f"{VISION}img_projection.{index}.bias"] = torch.randn(fan_out) * 0.1
    shard = release / "model.safetensors"
    save_file({**load_file(shard), **tensors}, shard, metadata={"format": "pt"})


def clip_config():
    """The tiny tower's CLIPVisionConfig (the remote code's ViT-L/14-336 but 2 layers of width 128)."""
    from transformers import CLIPVisionConfig

    return CLIPVisionConfig(hidden_size=WIDTH, intermediate_size=2 * WIDTH, num_hidden_layers=3, num_attention_heads=2,
                            image_size=336, patch_size=14, hidden_act="quick_gelu")  # fmt: skip


def hd_features(clip, extra: dict, pixels, sizes, order: str = "sub_glb"):
    """The remote code's Phi3ImageEmbedding (use_hd_transform) written in torch: CLIP hidden_states[-2] without
    the class token, 2 x 2 blocks merged into channels, a sub_GN column per row of the crops' grid and of the global
    view, the blocks in `order` with glb_GN between, Linear-GELU-Linear: [tokens, hidden] for the images in turn.
    `extra`: glb_GN, sub_GN, img_projection.{0,2}.{weight,bias} (names under model.vision_embed_tokens.)."""
    import numpy as np
    import torch

    with torch.no_grad():
        n, c = pixels.shape[:2]
        states = clip(torch.from_numpy(pixels).flatten(0, 1), output_hidden_states=True).hidden_states[-2][:, 1:]
        d, b = states.shape[-1], int(states.shape[1] ** 0.5) // 2
        feats = states.reshape(n, c, b, 2, b, 2, d).permute(0, 1, 2, 4, 3, 5, 6).reshape(n, c, b, b, 4 * d)
        sub_gn, glb_gn = extra["sub_GN"].reshape(1, 4 * d), extra["glb_GN"].reshape(1, 4 * d)
        out = []
        for i, (h, w) in enumerate(np.asarray(sizes) // (2 * b * clip.config.patch_size)):
            glb = torch.cat([feats[i, 0], sub_gn.expand(b, 1, 4 * d)], dim=1).reshape(-1, 4 * d)
            crops = feats[i, 1 : 1 + h * w].reshape(h, w, b, b, 4 * d).permute(0, 2, 1, 3, 4)
            sub = torch.cat([crops.reshape(h * b, w * b, 4 * d), sub_gn.expand(h * b, 1, 4 * d)], dim=1)
            both = [sub.reshape(-1, 4 * d), glb_gn, glb]
            out.append(torch.cat(both if order == "sub_glb" else both[::-1]))
        x = torch.cat(out)
        x = torch.nn.functional.gelu(x @ extra["img_projection.0.weight"].T + extra["img_projection.0.bias"])
        return x @ extra["img_projection.2.weight"].T + extra["img_projection.2.bias"]


def release_tower(release: Path):
    """The release's CLIP tower as transformers' CLIPVisionModel and its separators and projection."""
    import torch
    from safetensors.torch import load_file
    from transformers import CLIPVisionModel

    tensors = load_file(release / "model.safetensors")
    tower = f"{VISION}img_processor.vision_model."
    clip = CLIPVisionModel(clip_config()).eval()
    clip.load_state_dict({k[len(tower) :]: v for k, v in tensors.items() if k.startswith(tower)})
    extra = {k[len(VISION) :]: v for k, v in tensors.items() if k.startswith(VISION) and not k.startswith(tower)}
    return clip, {k: v.to(torch.float32) for k, v in extra.items()}
