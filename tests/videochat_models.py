"""A tiny VideoChat-Flash checkpoint in its release's layout (model_type videochat_flash_qwen,
VideoChatFlashQwenForCausalLM, remote code transformers does not have) and its twin, the same decoder saved as
Qwen2ForCausalLM; and the image side as the remote code computes it, written here in torch from reading it (not
copied): UMT-L's or InternVideo2-1B's blocks on one-frame images, ToMe down to 64 tokens, the MLP projector
(docs/coverage.md §36).

The tiny towers keep what the remote code fixes (16 heads; UMT: 16-pixel patches, 224-pixel frames for `umt-large`;
InternVideo2: 14-pixel patches, 224-pixel frames, an MLP of int(width · 48/11)) at widths 128 (UMT) and 96
(InternVideo2, heads of 6) with 2 blocks: the remote code builds 24 (UMT) or 40 (InternVideo2) +
`mm_vision_select_layer` + 1 blocks, the release stores those and all of them run."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np

IMAGE_PAD, VISION_START, VISION_END = 384, 385, 386  # past the 384 BPE ids of the tiny tokenizer
TOWER = "model.vision_tower.vision_tower.encoder."
IV2_TOWER = "model.vision_tower.vision_tower."  # InternVideo2: the remote code's ViT sits right under the wrapper
PROJECTOR = "model.mm_projector."
WIDTH, BLOCKS, PATCH, HEADS = 128, 2, 16, 16
IV2_WIDTH, IV2_PATCH = 96, 14
MARKER = "<|vision_start|><|image_pad|><|vision_end|>"
# the release's own keys beside Qwen2's (OpenGVLab/VideoChat-Flash-Qwen2-7B_res224's spellings; the tiny tower's
# mm_hidden_size)
RELEASE_KEYS = {
    "model_type": "videochat_flash_qwen",
    "architectures": ["VideoChatFlashQwenForCausalLM"],
    "auto_map": {"AutoConfig": "modeling_videochat_flash.VideoChatFlashQwenConfig",
                 "AutoModel": "modeling_videochat_flash.VideoChatFlashQwenForCausalLM"},
    "mm_vision_tower": "umt-large", "mm_projector_type": "tome16_mlp_hd64", "mm_hidden_size": WIDTH,
    "mm_vision_select_layer": -2, "mm_newline_position": "nothing", "mm_patch_merge_type": "spatial_nopad",
    "image_aspect_ratio": "anyres_nopad", "vision_encode_type": "video_image", "mm_local_num_frames": 4,
    "mm_llm_compress": False, "use_sliding_window": False,
}  # fmt: skip
# the Qwen2_5-7B_InternVideo2-1B release's tower (its training scripts' spelling) at the tiny width
IV2_KEYS = {"mm_vision_tower": "internvideo2", "mm_hidden_size": IV2_WIDTH}


def save_videochat_twins(root: Path, seed: int = 1, tower: str = "umt") -> tuple[Path, Path]:
    """(twin, release): a random Qwen2ForCausalLM whose tokenizer has the vision tokens at 384-386, and the same
    weights in the release's layout with a tiny `tower` ("umt" / "internvideo2") and projector beside them."""
    import torch
    from safetensors.torch import load_file, save_file
    from tiny_models import save_model, save_tokenizer

    twin = save_model(root / "twin", "qwen2", vocab_size=392, tokenizer=False)
    tokenizer = save_tokenizer(twin, vocab_size=384)
    specials = ["<|image_pad|>", "<|vision_start|>", "<|vision_end|>"]
    tokenizer.add_special_tokens({"additional_special_tokens": specials})
    tokenizer.save_pretrained(twin)
    assert tokenizer.convert_tokens_to_ids(specials) == [IMAGE_PAD, VISION_START, VISION_END]
    release = Path(shutil.copytree(twin, root / "release"))
    config = json.loads((twin / "config.json").read_text())
    d, hidden = WIDTH if tower == "umt" else IV2_WIDTH, config["hidden_size"]
    keys = RELEASE_KEYS if tower == "umt" else {**RELEASE_KEYS, **IV2_KEYS}
    (release / "config.json").write_text(json.dumps({**config, **keys}, indent=2))
    torch.manual_seed(seed)
    t = _umt_tensors(d) if tower == "umt" else _internvideo2_tensors(d)
    for index, (fan_in, fan_out) in ((0, (d, hidden)), (2, (hidden, hidden))):
        t[f"{PROJECTOR}mlp.{index}.weight"] = torch.randn(fan_out, fan_in) * 0.15
        t[f"{PROJECTOR}mlp.{index}.bias"] = torch.randn(fan_out) * 0.1
    shard = release / "model.safetensors"
    save_file({**load_file(shard), **t}, shard, metadata={"format": "pt"})
    return twin, release


def _umt_tensors(d: int) -> dict:
    import torch

    t = {f"{TOWER}patch_embed.proj.weight": torch.randn(d, 3, 1, PATCH, PATCH) * 0.05,
         f"{TOWER}patch_embed.proj.bias": torch.randn(d) * 0.1,
         f"{TOWER}vision_layernorm.weight": 1 + torch.randn(d) * 0.2,
         f"{TOWER}vision_layernorm.bias": torch.randn(d) * 0.2}  # fmt: skip
    for i in range(BLOCKS):
        p = f"{TOWER}blocks.{i}."
        for norm in ("norm1", "norm2"):
            t[f"{p}{norm}.weight"], t[f"{p}{norm}.bias"] = 1 + torch.randn(d) * 0.2, torch.randn(d) * 0.2
        t[f"{p}attn.qkv.weight"] = torch.randn(3 * d, d) * 0.15
        t[f"{p}attn.q_bias"], t[f"{p}attn.v_bias"] = torch.randn(d) * 0.2, torch.randn(d) * 0.2
        for name, shape in (("attn.proj", (d, d)), ("mlp.fc1", (4 * d, d)), ("mlp.fc2", (d, 4 * d))):
            t[f"{p}{name}.weight"], t[f"{p}{name}.bias"] = torch.randn(*shape) * 0.1, torch.randn(shape[0]) * 0.1
    return t


def _internvideo2_tensors(d: int) -> dict:
    """The tiny InternVideo2 tower: cls row, image table (and the clips' table, which images never read), RMSNorm
    blocks with qk norms and LayerScales (drawn near 0.5, not the 1e-5 they start from, so that the blocks move the
    features), no final norm."""
    import torch

    grid, mlp = 224 // IV2_PATCH, int(d * 48 / 11)
    t = {f"{IV2_TOWER}patch_embed.proj.weight": torch.randn(d, 3, 1, IV2_PATCH, IV2_PATCH) * 0.05,
         f"{IV2_TOWER}patch_embed.proj.bias": torch.randn(d) * 0.1,
         f"{IV2_TOWER}cls_token": torch.randn(1, 1, d) * 0.5,
         f"{IV2_TOWER}img_pos_embed": torch.randn(1, grid * grid + 1, d) * 0.3,
         f"{IV2_TOWER}pos_embed": torch.randn(1, 4 * grid * grid + 1, d) * 0.3}  # fmt: skip
    for i in range(BLOCKS):
        p = f"{IV2_TOWER}blocks.{i}."
        for norm in ("norm1", "norm2", "attn.q_norm", "attn.k_norm"):
            t[f"{p}{norm}.weight"] = 1 + torch.randn(d) * 0.2
        for scale in ("ls1", "ls2"):
            t[f"{p}{scale}.weight"] = 0.5 + torch.randn(d) * 0.2
        t[f"{p}attn.qkv.weight"] = torch.randn(3 * d, d) * 0.15
        for name, shape in (("attn.proj", (d, d)), ("mlp.fc1", (mlp, d)), ("mlp.fc2", (d, mlp))):
            t[f"{p}{name}.weight"], t[f"{p}{name}.bias"] = torch.randn(*shape) * 0.1, torch.randn(shape[0]) * 0.1
    return t


def release_tensors(release: Path) -> dict:
    from safetensors.torch import load_file

    tensors = load_file(release / "model.safetensors")
    return {k: v for k, v in tensors.items() if k.startswith(("model.vision", PROJECTOR))}


def _sine_table(positions: int, width: int):
    import torch

    pos = torch.arange(positions, dtype=torch.float64)[:, None]
    rate = torch.pow(torch.tensor(10000.0, dtype=torch.float64), (2 * (torch.arange(width) // 2)).double() / width)
    angle = pos / rate
    return torch.where(torch.arange(width) % 2 == 0, angle.sin(), angle.cos()).float()


def frame_table(grid: int, width: int):
    """One frame's position table [grid², width]: the 14 x 14 sine table, resized bicubically when grid != 14."""
    import torch

    table = _sine_table(196, width)
    if grid == 14:
        return table
    image = table.reshape(1, 14, 14, width).permute(0, 3, 1, 2)
    image = torch.nn.functional.interpolate(image, size=(grid, grid), mode="bicubic", align_corners=False)
    return image.permute(0, 2, 3, 1).reshape(grid * grid, width)


def _tome(x, r: int, size):
    """One ToMe round on x [B, p, c]: (merged x, sizes)."""
    import torch

    b, p, c = x.shape
    metric = x.reshape(b, p, HEADS, c // HEADS).mean(2)
    metric = metric / metric.norm(dim=-1, keepdim=True)
    scores = metric[:, 0::2] @ metric[:, 1::2].transpose(1, 2)
    best, partner = scores.max(dim=-1)
    order = best.argsort(dim=-1, descending=True)
    merged, kept = order[:, :r], order[:, r:]
    into = partner.gather(1, merged)
    out = []
    for value in (x * size, size):
        a, dst = value[:, 0::2], value[:, 1::2]
        w = value.shape[-1]
        dst = dst.scatter_add(1, into[..., None].expand(b, r, w), a.gather(1, merged[..., None].expand(b, r, w)))
        out.append(torch.cat([a.gather(1, kept[..., None].expand(b, kept.shape[1], w)), dst], dim=1))
    return out[0] / out[1], out[1]


def _umt_tokens(tensors: dict, pixels: np.ndarray, layers: int):
    """UMT on one-frame clips [N, 3, S, S]: patches + the frame's sine table, blocks, vision_layernorm."""
    import torch
    import torch.nn.functional as F

    g = lambda name: tensors[TOWER + name].float()  # noqa: E731
    x = torch.from_numpy(pixels).float()[:, :, None]  # one-frame clips [N, 3, 1, S, S]
    x = F.conv3d(x, g("patch_embed.proj.weight"), g("patch_embed.proj.bias"), stride=(1, PATCH, PATCH))
    x = x.flatten(2).transpose(1, 2)
    n, p, d = x.shape
    x = x + frame_table(int(p**0.5), d)
    for i in range(layers):
        w = lambda name: g(f"blocks.{i}.{name}")  # noqa: E731, B023
        h = F.layer_norm(x, (d,), w("norm1.weight"), w("norm1.bias"), 1e-6)
        bias = torch.cat([w("attn.q_bias"), torch.zeros(d), w("attn.v_bias")])
        q, k, v = F.linear(h, w("attn.qkv.weight"), bias).reshape(n, p, 3, HEADS, -1).permute(2, 0, 3, 1, 4)
        att = ((q * (d // HEADS) ** -0.5) @ k.transpose(-2, -1)).softmax(-1)
        x = x + F.linear((att @ v).transpose(1, 2).reshape(n, p, d), w("attn.proj.weight"), w("attn.proj.bias"))
        h = F.layer_norm(x, (d,), w("norm2.weight"), w("norm2.bias"), 1e-6)
        h = F.gelu(F.linear(h, w("mlp.fc1.weight"), w("mlp.fc1.bias")))
        x = x + F.linear(h, w("mlp.fc2.weight"), w("mlp.fc2.bias"))
    return F.layer_norm(x, (d,), g("vision_layernorm.weight"), g("vision_layernorm.bias"), 1e-12)


def _rms(x, weight):
    import torch

    return weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6))


def _internvideo2_tokens(tensors: dict, pixels: np.ndarray, layers: int):
    """InternVideo2 on one-frame clips [N, 3, S, S] (`use_image`): patches, the cls row first, img_pos_embed, blocks
    (q and k RMS-normed over the whole width before the heads split, LayerScales), the cls row dropped."""
    import torch
    import torch.nn.functional as F

    g = lambda name: tensors[IV2_TOWER + name].float()  # noqa: E731
    x = torch.from_numpy(pixels).float()[:, :, None]
    x = F.conv3d(x, g("patch_embed.proj.weight"), g("patch_embed.proj.bias"), stride=(1, IV2_PATCH, IV2_PATCH))
    x = x.flatten(3).permute(0, 2, 3, 1).flatten(1, 2)  # [N, T·L, d], T = 1
    n, _, d = x.shape
    x = torch.cat([g("cls_token").expand(n, -1, -1), x], dim=1) + g("img_pos_embed")
    p = x.shape[1]
    for i in range(layers):
        w = lambda name: g(f"blocks.{i}.{name}")  # noqa: E731, B023
        q, k, v = F.linear(_rms(x, w("norm1.weight")), w("attn.qkv.weight")).reshape(n, p, 3, HEADS, -1).unbind(2)
        q = _rms(q.flatten(-2), w("attn.q_norm.weight")).view(q.shape).transpose(1, 2)
        k = _rms(k.flatten(-2), w("attn.k_norm.weight")).view(k.shape).transpose(1, 2)
        att = ((q * (d // HEADS) ** -0.5) @ k.transpose(-2, -1)).softmax(-1)
        out = (att @ v.transpose(1, 2)).transpose(1, 2).reshape(n, p, d)
        x = x + w("ls1.weight") * F.linear(out, w("attn.proj.weight"), w("attn.proj.bias"))
        h = F.gelu(F.linear(_rms(x, w("norm2.weight")), w("mlp.fc1.weight"), w("mlp.fc1.bias")))
        x = x + w("ls2.weight") * F.linear(h, w("mlp.fc2.weight"), w("mlp.fc2.bias"))
    return x[:, 1:]


def image_features(tensors: dict, pixels: np.ndarray, layers: int = BLOCKS, tokens: int = 64, tower: str = "umt"):
    """The remote code's image path on `pixels [N, 3, S, S]`: the tower's blocks, ToMe rounds to `tokens`, mlp:
    [N·tokens, hidden]."""
    import torch
    import torch.nn.functional as F

    with torch.no_grad():
        x = (_umt_tokens if tower == "umt" else _internvideo2_tokens)(tensors, pixels, layers)
        n, p, _ = x.shape
        size, left = torch.ones(n, p, 1), p
        while left != tokens:
            r = left - tokens if left - tokens <= left // 2 else left // 2
            x, size = _tome(x, r, size)
            left -= r
        m = lambda i: (tensors[f"{PROJECTOR}mlp.{i}.weight"].float(), tensors[f"{PROJECTOR}mlp.{i}.bias"].float())  # noqa: E731
        y = F.linear(F.gelu(F.linear(x, *m(0))), *m(2))
        return y.reshape(-1, y.shape[-1]).numpy()
