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
AUTO_MAP = {
    "AutoConfig": "configuration_phi3_v.Phi3VConfig",
    "AutoModelForCausalLM": "modeling_phi3_v.Phi3VForCausalLM",
}


def save_phi3v_twins(root: Path, rope_type: str = "su") -> tuple[Path, Path]:
    """(twin, release): a random Phi3ForCausalLM with longrope, and the same weights in Phi-3-vision's release
    layout with `rope_type` ("su": Phi-3-vision, "longrope": Phi-3.5-vision) and a tiny vision side beside them."""
    from tiny_models import save_model

    rope = {"rope_type": "longrope", "rope_theta": 10000.0, "short_factor": SHORT, "long_factor": LONG}
    twin = save_model(root / "twin", "phi3", original_max_position_embeddings=ORIGINAL_MAX, rope_parameters=rope)
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
        "img_processor": IMG_PROCESSOR,
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


def _add_vision_side(release: Path, hidden: int, width: int = 16) -> None:
    """The release's image side under model.vision_embed_tokens.: a tiny CLIP vision tower, glb_GN [1, 1, 4C],
    sub_GN [1, 1, 1, 4C] and img_projection.0 / .2 (4C -> hidden -> hidden)."""
    import torch
    from safetensors.torch import load_file, save_file
    from transformers import CLIPVisionConfig, CLIPVisionModel

    torch.manual_seed(1)
    clip = CLIPVisionModel(CLIPVisionConfig(hidden_size=width, intermediate_size=2 * width, num_hidden_layers=2,
                                            num_attention_heads=2, image_size=56, patch_size=14,
                                            hidden_act="quick_gelu"))  # fmt: skip
    # transformers 5 names CLIPVisionModel's modules without the `vision_model.` the release (4.38) stores
    tensors = {f"{VISION}img_processor.vision_model.{k}": v.contiguous() for k, v in clip.state_dict().items()}
    tensors[f"{VISION}glb_GN"] = torch.randn(1, 1, 4 * width)
    tensors[f"{VISION}sub_GN"] = torch.randn(1, 1, 1, 4 * width)
    for index, (fan_in, fan_out) in ((0, (4 * width, hidden)), (2, (hidden, hidden))):
        tensors[f"{VISION}img_projection.{index}.weight"] = torch.randn(fan_out, fan_in) * 0.1
        tensors[f"{VISION}img_projection.{index}.bias"] = torch.randn(fan_out) * 0.1
    shard = release / "model.safetensors"
    save_file({**load_file(shard), **tensors}, shard, metadata={"format": "pt"})
