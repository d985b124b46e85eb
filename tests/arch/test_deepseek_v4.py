"""Mutants of DeepSeek-V4's mechanisms (gqa_export/arch/shared_kv_families.DEEPSEEK_V4, docs/coverage.md section
"deepseek_v4"): each planted into the spec, the config reader or the graph builder the registry's package is built
from (tests/families.py row `deepseek_v4`: a sliding, a CSA and an HCA layer), or into a copy of that package, must
move the logits far past the registry's bound (1e-4; the package: ~4e-6); and the refusals in one line (exit 2):
--inputs-embeds (the hash layers read the ids), the standard-Attention modes (the sinks), a --max-length past the
CSA indexer's cap.

Sinkhorn hyper-connections (graph/hyper_connections.py): comb dropped (the copies unmixed), comb read untransposed,
the Sinkhorn iterations cut to the first column normalization. Attention (graph/shared_kv_attention.py): the
output's rotation back dropped, rotated forward instead, the per-head query norm dropped, the sinks zeroed, the
output groups' o_a blocks exchanged. Compressed keys (graph/compressed_kv.py): never visible, visible one token
early, CSA's first series dropped, their rotation dropped, the position bias zeroed. Experts: hash routing dropped
(top k instead), sqrt(softplus) scores replaced by sigmoid, the routed clip dropped, the shared expert's clip
dropped. The release's layout (root-level names, ArchSpec.stored_renames): renamed as transformers renames it, the
row's package byte for byte; the release's FP8 + FP4 weights refused in one line naming what is not read."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from families import require_registered
from mutants import build_planted, copy_package, edit_initializers, times
from reference import parity_error
from typer.testing import CliRunner

from gqa_export.arch import SPECS
from gqa_export.cli import app
from gqa_export.graph import compressed_kv, decoder, hyper_connections, shared_kv_attention
from gqa_export.graph.builder import GraphBuilder
from gqa_export.model import dims, moe
from gqa_export.pipeline import BuildOptions, build

ROW = "deepseek_v4"
BOUND = 1e-2  # every mutant must be off by more; measured in docs/coverage.md


@pytest.fixture(autouse=True)
def _registered() -> None:
    require_registered(ROW)


def _comb_dropped(monkeypatch: pytest.MonkeyPatch) -> None:
    """The copies added to post * y unmixed (HunYuan-V4's form), comb computed but unread."""
    spread = hyper_connections._spread
    monkeypatch.setattr(hyper_connections, "_spread", lambda lc, s, p, comb, y, n: spread(lc, s, p, None, y, n))


def _comb_untransposed(monkeypatch: pytest.MonkeyPatch) -> None:
    sinkhorn = hyper_connections._sinkhorn

    def transposed(b: Any, logits: Any, k: int, eps: float, iters: int) -> Any:
        return b.op("Transpose", sinkhorn(b, logits, k, eps, iters), perm=[0, 1, 3, 2])

    monkeypatch.setattr(hyper_connections, "_sinkhorn", transposed)


def _sinkhorn_cut(monkeypatch: pytest.MonkeyPatch) -> None:
    read = dims.hyper_dims
    monkeypatch.setattr(dims, "hyper_dims", lambda opt, spec: replace(read(opt, spec), sinkhorn_iters=1))


def _rotation_back_dropped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(decoder, "rotated_back", lambda lc, y, table: y)


def _rotated_forward(monkeypatch: pytest.MonkeyPatch) -> None:
    """The output's trailing channels rotated by the query's angle again instead of back."""
    rotate = shared_kv_attention.rotate_trailing

    def forward(lc: Any, x: Any, table: Any, name: str, inverse: bool = False) -> Any:
        return rotate(lc, x, table, name, inverse=False)

    monkeypatch.setattr(shared_kv_attention, "rotate_trailing", forward)


def _query_norm_dropped(monkeypatch: pytest.MonkeyPatch) -> None:
    op = GraphBuilder.op

    def skipping(self: Any, kind: str, *inputs: Any, **attrs: Any) -> Any:
        if attrs.get("name") == "q_b_norm":
            return inputs[0]
        return op(self, kind, *inputs, **attrs)

    monkeypatch.setattr(GraphBuilder, "op", skipping)


def _hash_dropped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(moe, "_hashed_layers", lambda opt, spec: ())


def _never_visible(monkeypatch: pytest.MonkeyPatch) -> None:
    def none(b: Any, positions: Any, rate: int) -> Any:
        return b.op("Mul", positions, b.const(0, "no_windows", "int64"))

    monkeypatch.setattr(compressed_kv, "complete_windows", none)


def _visible_early(monkeypatch: pytest.MonkeyPatch) -> None:
    count = compressed_kv.complete_windows

    def early(b: Any, positions: Any, rate: int) -> Any:
        return count(b, b.op("Add", positions, b.const(1, "early", "int64")), rate)

    monkeypatch.setattr(compressed_kv, "complete_windows", early)


def _first_series_dropped(monkeypatch: pytest.MonkeyPatch) -> None:
    """CSA's keys pooled from their own window's second series alone (HCA's form)."""

    def second_only(b: Any, rows: Any, gates: Any, width: int, dtype: Any) -> tuple[Any, Any]:
        halves = b.const([width, width], "halves_mutant", "int64")
        second = [b.op_multi("Split", v, halves, axis=-1, outputs=2)[1] for v in (rows, gates)]
        return second[0], second[1]

    monkeypatch.setattr(compressed_kv, "overlapped", second_only)


def _compressed_rope_dropped(monkeypatch: pytest.MonkeyPatch) -> None:
    rotate = compressed_kv.rotate_trailing

    def unrotated(lc: Any, x: Any, table: Any, name: str, inverse: bool = False) -> Any:
        return x if name == "compressed_rope" else rotate(lc, x, table, name, inverse)

    monkeypatch.setattr(compressed_kv, "rotate_trailing", unrotated)


def _moe(**changes: Any) -> dict[str, Any]:
    spec = SPECS[ROW].moe
    assert spec is not None
    return dict(moe=replace(spec, **changes))


# mutant -> a spec change (fields of ArchSpec) or a graph-builder / config-reader patch
MUTANTS: dict[str, dict[str, Any] | Callable[[pytest.MonkeyPatch], None]] = {
    "comb-dropped": _comb_dropped,
    "comb-untransposed": _comb_untransposed,
    "sinkhorn-iterations-cut": _sinkhorn_cut,
    "output-rotation-back-dropped": _rotation_back_dropped,
    "output-rotated-forward": _rotated_forward,
    "query-head-norm-dropped": _query_norm_dropped,
    "compressed-keys-never-visible": _never_visible,
    "compressed-keys-visible-early": _visible_early,
    "csa-first-series-dropped": _first_series_dropped,
    "compressed-rope-dropped": _compressed_rope_dropped,
    "hash-routing-dropped": _hash_dropped,
    "sqrtsoftplus-as-sigmoid": _moe(routing="sigmoid_biased"),
    "routed-clip-dropped": _moe(activation="swiglu"),
    "shared-clip-dropped": _moe(shared_clipped=False),
}


def test_the_correct_package_passes(builds):
    assert parity_error(builds.package(ROW), builds.checkpoint(ROW)) < 1e-4  # measured 3.9e-6


@pytest.mark.parametrize("mutant", MUTANTS)
def test_mutant_fails_hf_parity(builds, tmp_path, monkeypatch, mutant):
    checkpoint = builds.checkpoint(ROW)
    error = parity_error(build_planted(checkpoint, tmp_path / mutant, monkeypatch, MUTANTS[mutant], ROW), checkpoint)
    print(f"{mutant}: {error:.3g}")
    assert error > BOUND, (mutant, error)


def _reversed_groups(values: np.ndarray) -> np.ndarray:
    return values[::-1].copy()


@pytest.mark.parametrize(
    ("mutant", "pattern", "change"),
    [
        ("sinks-zeroed", "*.self_attn.sinks", times(0.0)),
        ("output-groups-exchanged", "*.o_a_proj.weight", _reversed_groups),
        ("position-bias-zeroed", "*.compressor.position_bias", times(0.0)),
    ],
)
def test_package_mutant_fails_hf_parity(builds, tmp_path, mutant, pattern, change):
    """Every head's sink logit at 0 instead of the stored one; o_a's per-group blocks [G, in, rank] in reverse order;
    the compressor's position bias (added to the gates of each window slot) at 0."""
    broken = copy_package(builds.package(ROW), tmp_path / "pkg")
    assert edit_initializers(broken, pattern, change)
    error = parity_error(broken, builds.checkpoint(ROW))
    print(f"{mutant}: {error:.3g}")
    assert error > BOUND, error


def _one_line_exit_2(args: list[str], needle: str) -> None:
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if needle in line]
    assert len(lines) == 1 and "Traceback" not in result.output, result.output


def test_reference_compress_ratios_give_the_same_package(builds, tmp_path):
    """The reference's per-layer compress_ratios (0 / 4 / 128), which the config class folds into layer_types, give
    the package layer_types gives."""
    checkpoint = shutil.copytree(builds.checkpoint(ROW), tmp_path / "ckpt")
    config = json.loads((checkpoint / "config.json").read_text())
    del config["layer_types"]
    config["compress_ratios"] = [0, 4, 128]
    (checkpoint / "config.json").write_text(json.dumps(config))
    build(BuildOptions(str(checkpoint), tmp_path / "pkg", smoke=False))
    assert (tmp_path / "pkg" / "model.onnx").read_bytes() == (builds.package(ROW) / "model.onnx").read_bytes()


def test_context_past_the_indexer_cap_is_refused_in_one_line(builds, tmp_path):
    """index_topk 32 x compress rate 4: the package's context is 128, a longer --max-length exits 2."""
    config = json.loads((builds.package(ROW) / "genai_config.json").read_text())
    assert config["model"]["context_length"] == 128
    args = ["build", str(builds.checkpoint(ROW)), "-o", str(tmp_path / "pkg"), "--no-smoke", "--max-length", "200"]
    _one_line_exit_2(args, "index_topk x compress_rate")


def test_inputs_embeds_and_standard_attention_are_refused_in_one_line(builds, tmp_path):
    """The hash layers read the input ids; the sinks need GroupQueryAttention's head_sink."""
    checkpoint = str(builds.checkpoint(ROW))
    _one_line_exit_2(["build", checkpoint, "-o", str(tmp_path / "e"), "--no-smoke", "--inputs-embeds"], "input ids")
    for mode in ("bias", "split"):
        args = ["build", checkpoint, "-o", str(tmp_path / mode), "--no-smoke", "--attention", mode]
        _one_line_exit_2(args, "head_sink")


def test_the_indexer_keeps_every_key_within_the_cap():
    """The cap's premise, on HF itself: the same model with CSA's index_topk at 2 instead of 32 gives the same logits
    while a query has at most 2 complete windows of 4 (positions 0..10), and others past it (measured 0.66-1.47)."""
    import numpy as np
    import torch
    from moe_models import build_model

    model = build_model(ROW)
    prompt = torch.tensor([list(range(6, 30))])
    with torch.no_grad():
        full = model(prompt).logits[0].numpy()
        for layer in model.model.layers:
            indexer = getattr(layer.self_attn.compressor, "indexer", None)
            if indexer is not None:
                indexer.index_topk = 2
        capped = model(prompt).logits[0].numpy()
    error = np.abs(full - capped).max(-1)
    assert error[:11].max() < 1e-6 and error[11:].min() > 1e-2, error


def _published_name(name: str) -> str:
    """A name of save_pretrained's layout (the row's checkpoint) as deepseek-ai's release spells it: no base-model
    prefix, the embedding `embed`, the head's maps `hc_head_fn` / `_base` / `_scale`, the attention's KV norm
    `attn.kv_norm` (save_pretrained writes `attn.norm`; the mapping reads both)."""
    import re

    name = re.sub(r"^model\.", "", name)
    name = re.sub(r"^embed_tokens\.weight$", "embed.weight", name)
    name = re.sub(r"^hc_head\.hc_(fn|base|scale)$", r"hc_head_\1", name)
    return re.sub(r"\.attn\.norm\.", ".attn.kv_norm.", name)


def _published(builds, tmp_path, fp8: bool = False) -> Path:
    """The row's checkpoint under the release's names (and two mtp.* tensors past the decoder, unread); `fp8`: the
    first layer's wq_a stored as the release stores its linears, float8 e4m3 with a float8 e8m0 `.scale`."""
    import torch
    from safetensors.torch import load_file, save_file

    checkpoint = shutil.copytree(builds.checkpoint(ROW), tmp_path / "published")
    tensors = load_file(checkpoint / "model.safetensors")
    published = {_published_name(name): tensor for name, tensor in tensors.items()}
    published["mtp.0.attn.wq_a.weight"] = tensors["model.layers.1.attn.wq_a.weight"].clone()  # unread, as transformers'
    published["mtp.0.ffn_norm.weight"] = tensors["model.layers.1.ffn_norm.weight"].clone()
    seen = ("embed.weight", "head.weight", "norm.weight", "hc_head_fn", "layers.1.attn.kv_norm.weight")
    seen += ("layers.1.attn.compressor.ape", "layers.1.attn.indexer.compressor.wkv.weight", "layers.0.ffn.gate.tid2eid")
    assert {*seen, "layers.1.ffn.experts.7.w2.weight", "layers.2.hc_ffn_scale"} <= published.keys()
    assert not any(name.startswith("model.") for name in published)
    if fp8:
        published["layers.0.attn.wq_a.weight"] = published["layers.0.attn.wq_a.weight"].to(torch.float8_e4m3fn)
        published["layers.0.attn.wq_a.scale"] = torch.ones(1, 1).to(torch.float8_e8m0fnu)
    save_file(published, checkpoint / "model.safetensors", metadata={"format": "pt"})
    return checkpoint


def test_the_published_names_read_as_transformers_mapping_reads_them(builds):
    """Every name of the release's layout (the row's checkpoint renamed, plus the mapping's other spellings: the
    indexer's, save_pretrained's attn.norm) read by ArchSpec.stored_renames under the name transformers' conversion
    mapping for deepseek_v4 gives it (its renamings, then the base model's `model.`), but for head.weight (read under
    its own name) and the routed experts (its converter stacks them; here each is read as stored)."""
    from safetensors import safe_open
    from transformers.conversion_mapping import get_checkpoint_conversion_mapping
    from transformers.core_model_loading import WeightRenaming, apply_renamings

    from gqa_export.source.stored_renames import renamed

    renamings = [t for t in get_checkpoint_conversion_mapping(ROW) if isinstance(t, WeightRenaming)]
    with safe_open(builds.checkpoint(ROW) / "model.safetensors", "np") as stored:
        names = {_published_name(name) for name in stored.keys()} | {"layers.1.attn.norm.weight"}
    assert {"layers.1.attn.indexer.wq_b.weight", "layers.1.attn.indexer.weights_proj.weight"} <= names
    for name in sorted(names):
        ours, transposed = renamed(SPECS[ROW], name)
        theirs = apply_renamings(name, renamings)
        if name == "head.weight":
            assert (ours, theirs) == ("head.weight", "lm_head.weight")
        else:
            assert ours == (theirs if theirs.startswith("lm_head") else f"model.{theirs}"), name
        assert not transposed


def test_the_published_layout_gives_the_same_package(builds, tmp_path):
    """The released checkpoints' names (root-level embed / head / norm / hc_head_fn, layers.{i}.attn.wq_a, .ffn.*,
    .hc_attn_fn, .attn_sink, .attn.compressor.ape, ..., and mtp.* layers past the decoder), read through
    ArchSpec.stored_renames: transformers loads the folder to the row's logits (so the names are the release's as its
    conversion mapping reads them), and the package is the row's byte for byte."""
    import torch
    from reference import hf_model

    checkpoint = _published(builds, tmp_path)

    prompt = torch.tensor([list(range(6, 30))])
    with torch.no_grad():
        expected = hf_model(builds.checkpoint(ROW))(prompt).logits
        loaded = hf_model(checkpoint)(prompt).logits
    assert torch.equal(expected, loaded)

    build(BuildOptions(str(checkpoint), tmp_path / "pkg", smoke=False, text_only=True))
    for name in ("model.onnx", "model.onnx.data"):
        assert (tmp_path / "pkg" / name).read_bytes() == (builds.package(ROW) / name).read_bytes(), name


@pytest.mark.parametrize("expert_dtype", ["fp4", None])
def test_the_release_fp8_layout_is_refused_in_one_line_naming_what_is_missing(builds, tmp_path, expert_dtype):
    """The release's config (quant_method fp8 with ue8m0 block scales, expert_dtype fp4 beside it, as transformers'
    config class folds it in) and, without expert_dtype, its linears' `.scale` tensors: each refused in one line
    (exit 2) that names what no reader takes."""
    checkpoint = _published(builds, tmp_path, fp8=True)
    config = json.loads((checkpoint / "config.json").read_text())
    qc = {"quant_method": "fp8", "fmt": "e4m3", "scale_fmt": "ue8m0", "activation_scheme": "dynamic"}
    config["quantization_config"] = {**qc, "weight_block_size": [128, 128]}
    if expert_dtype is not None:
        config["expert_dtype"] = expert_dtype
    (checkpoint / "config.json").write_text(json.dumps(config))
    args = ["build", str(checkpoint), "-o", str(tmp_path / "pkg"), "--no-smoke"]
    _one_line_exit_2(args, "expert_dtype 'fp4'" if expert_dtype else "layers.0.attn.wq_a.scale (DeepSeek-V4's")


def test_the_release_config_spellings_give_the_same_package(builds, tmp_path):
    """The release's config.json keys (as transformers' config class folds them): per-layer `compress_ratios`
    (0 / 4 / 128, one more for the MTP layer), `num_hash_layers`, `qk_rope_head_dim` and a flat YaRN `rope_scaling`
    with `rope_theta` / `compress_rope_theta` instead of layer_types, mlp_layer_types, partial_rotary_factor and the
    main / compress rope_parameters: with the release's tensor names, the row's package byte for byte."""
    checkpoint = _published(builds, tmp_path)
    config = json.loads((checkpoint / "config.json").read_text())
    for key in ("layer_types", "mlp_layer_types", "partial_rotary_factor", "rope_parameters"):
        del config[key]
    yarn = {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64, "beta_fast": 32, "beta_slow": 1}
    config.update(compress_ratios=[0, 4, 128, 0], num_hash_layers=1, qk_rope_head_dim=8, rope_scaling=yarn)
    assert config["num_nextn_predict_layers"] == 1 and config["compress_rope_theta"] == 160000.0
    (checkpoint / "config.json").write_text(json.dumps(config))
    build(BuildOptions(str(checkpoint), tmp_path / "pkg", smoke=False, text_only=True))
    for name in ("model.onnx", "model.onnx.data"):
        assert (tmp_path / "pkg" / name).read_bytes() == (builds.package(ROW) / name).read_bytes(), name
