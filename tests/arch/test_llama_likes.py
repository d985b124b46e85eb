"""The Llama-shaped families of issue #24 and their mixtures of experts (tests/llama_like_models.py):
what the registry rows of tests/families.py do not check (their right-padded batch in every mode
is a registry check). A 1-token prompt with decode steps, and mutants of each mechanism these
families add that fail parity."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
from families import PROMPT, FamilyBuilds, require_registered
from mutants import edit_initializers
from reference import (
    hf_logits,
    hf_model,
    ort_prefill_and_decode,
    parity_error,
)

CLASSIC = ("seed_oss", "arcee", "glm4_moe", "ernie4_5_moe", "hunyuan_v1_moe")


def _registered(family: str) -> None:
    require_registered(family)


def _mutated(builds: FamilyBuilds, family: str, tmp_path: Path) -> tuple[Path, onnx.ModelProto]:
    package = Path(shutil.copytree(builds.package(family), tmp_path / "pkg"))
    return package, onnx.load(str(package / "model.onnx"), load_external_data=False)


@pytest.mark.parametrize("family", CLASSIC)
def test_one_token_prompt_then_decode_matches_hf(builds, family):
    _registered(family)
    tokens, got = ort_prefill_and_decode(builds.package(family), [0], steps=6)
    np.testing.assert_allclose(got, hf_logits(hf_model(builds.checkpoint(family)), tokens, 1), atol=1e-4)


def _bypass(node_suffix: str, source: int = 0):
    """A graph edit: the nodes named ...node_suffix left out (their consumers read their input
    `source` instead)."""

    def edit(model: onnx.ModelProto) -> int:
        nodes = [n for n in model.graph.node if n.name.endswith(node_suffix)]
        for node in nodes:
            for other in model.graph.node:
                other.input[:] = [node.input[source] if i == node.output[0] else i for i in other.input]
        return len(nodes)

    return edit


def _attention_scale(head_dim: int):
    """GroupQueryAttention's scale as if head_dim were `head_dim` (Seed-OSS: hidden / heads)."""

    def edit(model: onnx.ModelProto) -> int:
        nodes = [n for n in model.graph.node if n.op_type == "GroupQueryAttention"]
        for node in nodes:
            scale = next(a for a in node.attribute if a.name == "scale")
            scale.f = head_dim**-0.5
        return len(nodes)

    return edit


def _softmax_as_sigmoid(node_suffix: str):
    """The Softmax nodes named ...node_suffix turned into Sigmoids (per-expert scores not normalized)."""

    def edit(model: onnx.ModelProto) -> int:
        nodes = [n for n in model.graph.node if n.name.endswith(node_suffix) and n.op_type == "Softmax"]
        for node in nodes:
            node.op_type = "Sigmoid"
            del node.attribute[:]
        return len(nodes)

    return edit


def _top_k_not_renormalized(model: onnx.ModelProto) -> int:
    nodes = [n for n in model.graph.node if n.op_type == "MoE"]
    for node in nodes:
        next(a for a in node.attribute if a.name == "normalize_routing_weights").i = 0
    return len(nodes)


GRAPH_MUTANTS = {
    "seed_oss-scale_from_hidden": ("seed_oss", _attention_scale(16)),  # 64 / 4, not its head_dim 32
    "arcee-relu_not_squared": ("arcee", _bypass("mlp/relu2")),
    "glm4_moe-groups_ignored": ("glm4_moe", _bypass("grouped_router/masked", source=1)),  # top k over every expert
    "glm4_moe-shared_experts_dropped": ("glm4_moe", _bypass("mlp/add_shared_expert")),
    "ernie4_5_moe-not_renormalized": ("ernie4_5_moe", _bypass("softmax_router/renormalized")),
    "ernie4_5_moe-sigmoid_scores": ("ernie4_5_moe", _softmax_as_sigmoid("softmax_router/scores")),
    "ernie4_5_moe-shared_experts_dropped": ("ernie4_5_moe", _bypass("mlp/add_shared_expert")),
    "hunyuan_v1_moe-shared_mlp_dropped": ("hunyuan_v1_moe", _bypass("mlp/add_shared_expert")),
    "hunyuan_v1_moe-top_k_not_renormalized": ("hunyuan_v1_moe", _top_k_not_renormalized),
}


@pytest.mark.parametrize("mutant", GRAPH_MUTANTS, ids=GRAPH_MUTANTS.keys())
def test_mutant_graph_fails_parity(builds, tmp_path, mutant):
    family, edit = GRAPH_MUTANTS[mutant]
    _registered(family)
    package, model = _mutated(builds, family, tmp_path)
    assert edit(model), f"{mutant} changed nothing"
    onnx.save(model, str(package / "model.onnx"))
    assert parity_error(package, builds.checkpoint(family)) > 1e-2


INITIALIZER_MUTANTS = {
    "seed_oss-qkv_bias_dropped": ("seed_oss", "*self_attn.qkv_proj.bias", lambda b: b * 0),
    "glm4_moe-selection_bias_dropped": ("glm4_moe", "*e_score_correction_bias", lambda b: b * 0),
    "glm4_moe-selection_bias_flipped": ("glm4_moe", "*e_score_correction_bias", lambda b: -b),
    "glm4_moe-one_group_kept": ("glm4_moe", "const.groups_kept", lambda k: k - 1),
    "glm4_moe-routed_scaling_x1.5": ("glm4_moe", "const.routed_scaling", lambda f: f * 1.5),
    "ernie4_5_moe-selection_bias_dropped": ("ernie4_5_moe", "*e_score_correction_bias", lambda b: b * 0),
    "ernie4_5_moe-selection_bias_flipped": ("ernie4_5_moe", "*e_score_correction_bias", lambda b: -b),
}


@pytest.mark.parametrize("mutant", INITIALIZER_MUTANTS, ids=INITIALIZER_MUTANTS.keys())
def test_mutant_initializers_fail_parity(builds, tmp_path, mutant):
    family, pattern, change = INITIALIZER_MUTANTS[mutant]
    _registered(family)
    package, _ = _mutated(builds, family, tmp_path)
    assert edit_initializers(package, pattern, change), f"{pattern} matched nothing"
    assert parity_error(package, builds.checkpoint(family)) > 1e-2


def _moe_layers(package: Path) -> list[int]:
    graph = onnx.load(str(package / "model.onnx"), load_external_data=False).graph
    return sorted(int(n.name.split("/")[2].split(".")[1]) for n in graph.node if n.op_type == "MoE")


@pytest.mark.parametrize(
    ("family", "layers"),
    # first_k_dense_replace 1; start 1, end 2 of 4; every layer
    [("glm4_moe", [1, 2]), ("ernie4_5_moe", [1, 2]), ("hunyuan_v1_moe", [0, 1, 2])],
)
def test_experts_sit_on_the_configured_layers(builds, family, layers):
    _registered(family)
    assert _moe_layers(builds.package(family)) == layers


VARIANTS = {
    # no q/k norms, one expert group (the plain biased sigmoid top k), top k not renormalized
    "glm4_moe-plain": ("glm4_moe", dict(use_qk_norm=False, n_group=1, topk_group=1, norm_topk_prob=False)),
    # biases on every Linear (dense and shared MLPs too), experts every second layer from 0, 2 shared
    "ernie4_5_moe-biases_interval": (
        "ernie4_5_moe",
        dict(
            use_bias=True,
            moe_layer_start_index=0,
            moe_layer_end_index=-1,
            moe_layer_interval=2,
            moe_num_shared_experts=2,
        ),
    ),
}


@pytest.mark.parametrize("variant", VARIANTS, ids=VARIANTS.keys())
def test_variants_match_hf(tmp_path, variant):
    from dense_models import save_dense

    from gqa_export.pipeline import BuildOptions, build

    family, overrides = VARIANTS[variant]
    _registered(family)
    if overrides.get("use_bias") and _transformers_major() < 5:
        pytest.skip("transformers 4.x gives ERNIE-4.5-MoE's experts biases (refused, see REFUSED)")
    checkpoint = save_dense(tmp_path / "ckpt", family, **overrides)
    package = tmp_path / "pkg"
    build(BuildOptions(str(checkpoint), package, ep="cpu", precision="fp32", attention="gqa", smoke=False))
    for prompt in ([0], list(PROMPT)):
        tokens, got = ort_prefill_and_decode(package, prompt, steps=6)
        np.testing.assert_allclose(got, hf_logits(hf_model(checkpoint), tokens, len(prompt)), atol=1e-4)


def _transformers_major() -> int:
    import transformers

    return int(transformers.__version__.split(".")[0])


REFUSED = {
    "hunyuan_v1_moe-top_k_by_layer": (
        "hunyuan_v1_moe",
        dict(moe_topk=[2, 1, 2]),
        "num_experts_per_tok varies by layer",
    ),
    "glm4_moe-uneven_groups": ("glm4_moe", dict(n_group=5), "n_group 5 / topk_group 2 do not split 12 experts"),
}
if _transformers_major() < 5:  # 4.x writes ERNIE-4.5-MoE's experts with biases under use_bias
    REFUSED["ernie4_5_moe-expert_biases"] = ("ernie4_5_moe", dict(use_bias=True), "the experts carry biases")


@pytest.mark.parametrize("case", REFUSED, ids=REFUSED.keys())
def test_unsupported_configs_are_refused_in_one_line(tmp_path, case):
    """What the graph cannot compute is refused (InputError: one line, exit 2), never exported."""
    from dense_models import save_dense

    from gqa_export.errors import InputError
    from gqa_export.pipeline import BuildOptions, build

    family, overrides, message = REFUSED[case]
    _registered(family)
    checkpoint = save_dense(tmp_path / "ckpt", family, **overrides)
    with pytest.raises(InputError, match=message) as refused:
        build(BuildOptions(str(checkpoint), tmp_path / "pkg", ep="cpu", precision="fp32", smoke=False))
    assert "\n" not in str(refused.value)


def test_bidirectional_gemma_is_refused_not_exported_causal(tmp_path):
    """transformers 5.x's Gemma reads use_bidirectional_attention (is_causal False: where the class
    leaves the mask to sdpa, every prompt token sees the whole prompt). A causal package would be
    silently wrong (HF's logits move far from the causal model's), so the build refuses it in one
    line. Gemma-2 runs eager only, on the causal masks it builds: the flag changes nothing there."""
    import transformers
    from tiny_models import save_model

    from gqa_export.errors import InputError
    from gqa_export.pipeline import BuildOptions, build

    if _transformers_major() < 5:
        pytest.skip("transformers 4.x's Gemma has no use_bidirectional_attention")
    checkpoint = save_model(tmp_path / "ckpt", "gemma", use_bidirectional_attention=True)
    as_saved, causal = (
        transformers.GemmaForCausalLM.from_pretrained(checkpoint, use_bidirectional_attention=flag).eval()
        for flag in (True, False)
    )
    assert np.abs(hf_logits(as_saved, list(PROMPT)) - hf_logits(causal, list(PROMPT))).max() > 1e-2
    with pytest.raises(InputError, match="makes every layer bidirectional") as refused:
        build(BuildOptions(str(checkpoint), tmp_path / "pkg", smoke=False))
    assert "\n" not in str(refused.value) and not (tmp_path / "pkg").exists()
