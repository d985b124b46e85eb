"""Multimodal classes around an exported decoder (gqa_export/arch/wrapped_decoders.py): every listed
class, with a decoder of the family its default config names (and the other families users bring),
exported --text-only and held against the class itself; without --text-only, one line, exit 2.
Greedy genai tokens through three of them: the registry rows `*_text_only` (tests/families.py)."""

from __future__ import annotations

import numpy as np
import pytest
from mutants import copy_package, edit_initializers, times
from reference import hf_logits, hf_model, ort_prefill_and_decode
from typer.testing import CliRunner
from wrapped_checks import PROMPT, text_error, wrapped_checkpoint
from wrapped_models import save_wrapped

from gqa_export.arch.coverage import text_model_type
from gqa_export.arch.wrapped_decoders import WRAPPED_DECODERS
from gqa_export.cli import app
from gqa_export.pipeline import BuildOptions, build

SPARK_PROMPT = [0, 17, 45, 300, 302, 99, 200, 301, 3, 7, 302, 12]  # Muse-Spark's audio placeholder (302) too
# the decoder each class holds by default, then families its released checkpoints also use
CASES = [(t, text_model_type(t)) for t in sorted(WRAPPED_DECODERS.values())] + [
    ("llava_next", "mistral"),  # LLaVA-NeXT on Mistral-7B
    ("llava_next", "granite"),  # granite-vision-3.x: the class divides by no logits_scaling (Granite's CausalLM does)
    ("internvl", "qwen3"),  # InternVL3.5
    ("glmga", "glm4v_text"),  # a second model type of GLM-4.6V's class
]


@pytest.mark.parametrize(("model_type", "text_type"), CASES, ids=[f"{m}-{t}" for m, t in CASES])
def test_listed_class_matches_hf_on_text(tmp_path, model_type, text_type):
    """The decoder's package computes the class's own logits on a prompt holding its placeholder
    ids (prompt and 3 decode steps); measured 1.5e-7 to 4.0e-6 (docs/coverage.md §21)."""
    checkpoint = wrapped_checkpoint(tmp_path, model_type, text_type)
    build(BuildOptions(str(checkpoint), tmp_path / "pkg", smoke=False, text_only=True))
    assert text_error(tmp_path / "pkg", checkpoint) < 1e-4


def test_a_scaled_final_norm_fails_the_bound(tmp_path):
    """Mutant: the decoder's final norm x 1.5 in the package moves the logits far past the bound."""
    checkpoint = wrapped_checkpoint(tmp_path, "llava", "llama")
    build(BuildOptions(str(checkpoint), tmp_path / "pkg", smoke=False, text_only=True))
    broken = copy_package(tmp_path / "pkg", tmp_path / "broken")
    assert edit_initializers(broken, "*model.norm.weight", times(1.5))
    assert text_error(broken, checkpoint) > 1e-2


def test_cohere2_vision_logits_without_logit_scale(tmp_path, monkeypatch):
    """Mutant: Cohere2-Vision read with Cohere2's logit_scale (0.5 in the tiny config) fails the bound."""
    from mutants import build_planted

    checkpoint = wrapped_checkpoint(tmp_path, "cohere2_vision", "cohere2")
    out = build_planted(checkpoint, tmp_path / "scaled", monkeypatch, {"ignore": ()}, "cohere2_vision_text")
    assert text_error(out, checkpoint) > 1e-2


def test_hy_v4_vl_latent_norms_at_rms_norm_eps(tmp_path, monkeypatch):
    """Mutant: HY-V4-VL read with HY-V4's latent norms (eps 1e-6, not the config's 0.1) fails the bound."""
    from dataclasses import replace

    from mutants import build_planted

    from gqa_export.arch import SPECS

    checkpoint = wrapped_checkpoint(tmp_path, "hy_v4_vl", "hy_v4_vl_text")
    latent = replace(SPECS["hy_v4_vl_text"].latent_attention, config_norm_eps=False)
    out = build_planted(checkpoint, tmp_path / "eps", monkeypatch, {"latent_attention": latent}, "hy_v4_vl_text")
    assert text_error(out, checkpoint) > 1e-2


def test_cosmos3_omni_query_and_key_norms_not_swapped(tmp_path, monkeypatch):
    """Mutant: Cosmos3-Omni's hub names read with norm_q / norm_k crossed fails the bound."""
    from mutants import build_planted

    from gqa_export.arch import SPECS

    checkpoint = wrapped_checkpoint(tmp_path, "cosmos3_omni", "qwen3_vl_text")
    swapped = tuple(
        (pattern, replacement.replace("q_norm", "@").replace("k_norm", "q_norm").replace("@", "k_norm"), t)
        for pattern, replacement, t in SPECS["cosmos3_omni_text"].stored_renames
    )
    out = build_planted(checkpoint, tmp_path / "crossed", monkeypatch, {"stored_renames": swapped}, "cosmos3_omni_text")
    assert text_error(out, checkpoint) > 1e-2


@pytest.mark.parametrize(
    ("model_type", "text_type", "spec"),
    [
        ("paddleocr_vl", "paddleocr_vl_text", "paddleocr_vl_text"),
        ("deepseek_ocr2", "deepseek_ocr2_text", "deepseek_ocr2_text"),
    ],
)
def test_rotate_half_decoders_fail_with_pairs(tmp_path, monkeypatch, model_type, text_type, spec):
    """Mutant: PaddleOCR-VL (ERNIE-4.5's layers) and DeepSeek-OCR-2 (DeepSeek-V2's experts) read with their
    base family's GPT-J pairs fail the bound: their attention rotates halves."""
    from mutants import build_planted

    checkpoint = wrapped_checkpoint(tmp_path, model_type, text_type)
    out = build_planted(checkpoint, tmp_path / "pairs", monkeypatch, {"rope_interleaved": True}, spec)
    assert text_error(out, checkpoint) > 1e-2


def test_kimi_k25_placeholders_embedded_as_id_0(tmp_path, monkeypatch):
    """Mutant: Kimi-K2.5 read with its placeholders embedded as their own rows (DeepSeek-V3's package) fails
    the bound on the prompt holding them."""
    from mutants import build_planted

    checkpoint = wrapped_checkpoint(tmp_path, "kimi_k25", "deepseek_v3")
    out = build_planted(checkpoint, tmp_path / "own", monkeypatch, {"placeholder_keys": ()}, "kimi_k25_text")
    assert text_error(out, checkpoint) > 1e-2


def test_phi4_multimodal_longrope_is_read(tmp_path, monkeypatch):
    """Mutant: Phi-4-multimodal's decoder read with its config's longrope (short factors, the attention scale of
    512 over 32 original positions) as plain RoPE over the same 12 of 16 dims fails the bound."""
    from dataclasses import replace

    from mutants import build_planted

    from gqa_export.model import layer_ropes

    read = layer_ropes.read_rope

    def plain(monkeypatch):
        monkeypatch.setattr(layer_ropes, "read_rope", lambda *a: replace(read(*a), rope_type="default", params={}))

    checkpoint = wrapped_checkpoint(tmp_path, "phi4_multimodal", "phi4_multimodal")
    assert text_error(build_planted(checkpoint, tmp_path / "plain", monkeypatch, plain), checkpoint) > 1e-2


def test_phi4_multimodal_builds_its_full_package_without_text_only():
    """Phi-4-multimodal (genai type phi4mm) is not gated by --text-only: its own recipe builds the image side
    of the full package (docs/multimodal.md §15; tested in tests/package/multimodal/test_phi4mm_package.py)."""
    from gqa_export.arch.wrapped_decoders import text_only_package, towers_refusal
    from gqa_export.recipes import builtin_recipes

    recipes = {r.name: r for r in builtin_recipes()}
    phi4mm = {"architectures": ["Phi4MultimodalForCausalLM"], "vision_config": {}, "audio_config": {"x": 1}}
    assert towers_refusal(phi4mm, recipes["phi4_multimodal"]) is None
    llava = towers_refusal({"architectures": ["LlavaForConditionalGeneration"]}, recipes["llama"])
    assert llava is not None and llava.startswith("LlavaForConditionalGeneration's vision tower and projector")
    assert text_only_package("Phi4MultimodalForCausalLM").startswith("full multimodal (phi4mm: image and speech towers")
    assert recipes["phi4_multimodal"].multimodal_model_type == "phi4mm"


def test_inkling2_loop_message_queries_merged_in_order(tmp_path, monkeypatch):
    """Mutant: Inkling2-Loop's serving layout read with its two message-query tensors crossed (the key and value
    queries taken as the query and MLP ones) fails the bound on the prompt (0.83; HF's decode steps, the bulk of a
    check's time for these classes, add nothing to a mutant)."""
    from dataclasses import replace

    from mutants import build_planted

    from gqa_export.arch import SPECS

    checkpoint = wrapped_checkpoint(tmp_path, "inkling2_loop", "inkling2_loop_text")
    residuals = SPECS["inkling2_loop"].block_residuals
    first, second = residuals.messages.stored_queries
    crossed = replace(residuals, messages=replace(residuals.messages, stored_queries=(second, first)))
    out = build_planted(checkpoint, tmp_path / "crossed", monkeypatch, {"block_residuals": crossed}, "inkling2_loop")
    assert text_error(out, checkpoint, steps=0) > 1e-2


def test_inkling_w13_halves_read_in_order(tmp_path, monkeypatch):
    """Mutant: Inkling's serving layout read with its dense MLPs' and shared experts' interleaved w13 rows split
    crossed (the odd rows as the gate) fails the bound on the prompt (0.091)."""
    from dataclasses import replace

    from mutants import build_planted

    from gqa_export.arch import SPECS

    checkpoint = wrapped_checkpoint(tmp_path, "inkling_mm_model", "inkling_text")
    cross = lambda rows: replace(rows, start=1 - rows.start)  # noqa: E731
    # the split views (one Rows each, the even rows the gate's) crossed, the experts' deinterleaved one kept
    views = SPECS["inkling"].row_views
    crossed = tuple(v if len(v.rows) > 1 else replace(v, rows=tuple(map(cross, v.rows))) for v in views)
    out = build_planted(checkpoint, tmp_path / "crossed", monkeypatch, {"row_views": crossed}, "inkling")
    assert text_error(out, checkpoint, steps=0) > 1e-2


@pytest.fixture(scope="module")
def ernie_vl(tmp_path_factory):
    """ERNIE-4.5-VL in the hub's layout (expert sets 32 and 16 wide, CASES' checkpoint) and in transformers 5.x's
    (both 32 wide, so that the vision set reads where the text set does: a mutant reading it is no shape error)."""
    root = tmp_path_factory.mktemp("ernie_vl")
    text = "ernie4_5_vl_moe_text"
    hub = save_wrapped(root / "hub", "ernie4_5_vl_moe", text)
    v5 = save_wrapped(root / "v5", "ernie4_5_vl_moe", text, hub_layout=False, moe_intermediate_size=[32, 32])
    return {"hub": hub, "v5": v5}


def _vision_set(spec):
    """ERNIE-4.5-VL's spec reading the vision expert set (router, bias row and experts) in place of the text set."""
    from dataclasses import replace

    names = spec.moe.names
    swap = lambda name: name.replace("text_moe.", "vision_moe.")  # noqa: E731
    names = replace(
        names,
        routers=tuple(map(swap, names.routers)),
        fused=tuple(tuple(map(swap, pair)) for pair in names.fused),
        expert_bias=swap(names.expert_bias),
    )
    return {"moe": replace(spec.moe, names=names)}


def _crossed_rows(spec):
    """The hub's row views with moe_statics' two rows crossed: the vision row biasing the text router."""
    from dataclasses import replace

    crossed = lambda rows: replace(rows, chunk=rows.chunks - 1 - rows.chunk)  # noqa: E731
    return {"row_views": tuple(replace(v, rows=tuple(map(crossed, v.rows))) for v in spec.row_views)}


@pytest.mark.parametrize(
    ("layout", "plant"),
    [
        ("v5", _vision_set),
        ("hub", _crossed_rows),
        ("hub", lambda spec: {"rope_interleaved": False}),  # its 3D RoPE on a text prompt read as rotate-half
    ],
    ids=["vision_expert_set", "vision_moe_statics_row", "rotate_half_rope"],
)
def test_ernie4_5_vl_mutants_fail_the_bound(tmp_path, monkeypatch, ernie_vl, layout, plant):
    """Mutants of ERNIE-4.5-VL's decoder: the vision expert set read in 5.x's layout (its router, bias and experts),
    the hub's moe_statics rows crossed (the vision row biasing the text router) and its 3D RoPE read as rotate-half
    each fail the bound on the prompt (measured 0.38, 0.30, 0.33; the logits reach 2); 5.x's layout itself is exact
    (1.2e-6)."""
    from mutants import build_planted

    from gqa_export.arch import SPECS

    checkpoint = ernie_vl[layout]
    if layout == "v5":  # the CASES row is the hub's layout; 5.x's names held against the class once
        build(BuildOptions(str(checkpoint), tmp_path / "pkg", smoke=False, text_only=True))
        assert text_error(tmp_path / "pkg", checkpoint, steps=0) < 1e-4
    spec = "ernie4_5_vl_moe_text"
    out = build_planted(checkpoint, tmp_path / "planted", monkeypatch, plant(SPECS[spec]), spec)
    assert text_error(out, checkpoint, steps=0) > 1e-2


def test_an_expert_width_per_set_is_read_only_by_a_family_that_names_its_set():
    """moe_intermediate_size as a list (ERNIE-4.5-VL's [text, vision]) is read at the spec's expert set, and refused in
    one line by a family whose spec names none (ERNIE-4.5-MoE's)."""
    from gqa_export.arch import SPECS
    from gqa_export.errors import InputError
    from gqa_export.model.moe import read_moe

    config = {"num_experts": 6, "experts_per_token": 2, "expert_intermediate_size": [32, 16], "shared_experts": 1}
    opt = lambda key, default=None: config.get(key, default)  # noqa: E731
    moe = read_moe(opt, SPECS["ernie4_5_vl_moe_text"], 96)
    assert (moe.intermediate, moe.shared_intermediate) == (32, 32)
    with pytest.raises(InputError, match=r"moe_intermediate_size \[32, 16\]: one width per expert set"):
        read_moe(opt, SPECS["ernie4_5_moe"], 96)


def test_ernie4_5_vl_without_text_only_names_its_resampler(tmp_path, ernie_vl):
    """ERNIE-4.5-VL without --text-only: one line, exit 2, naming its vision tower and resampler."""
    arch = "Ernie4_5_VLMoeForConditionalGeneration"
    result = CliRunner().invoke(app, ["build", str(ernie_vl["hub"]), "-o", str(tmp_path / "out"), "--no-smoke"])
    assert result.exit_code == 2, result.output
    said = " ".join(result.output.split())
    assert len([line for line in result.output.splitlines() if arch in line]) == 1, result.output
    assert f"{arch}'s vision tower and variable-resolution resampler are not built" in said
    assert "pass --text-only to export its ernie4_5_vl_moe_text text decoder alone" in said
    assert not (tmp_path / "out").exists()


def test_dots3_note_with_its_text_config_at_the_top_level(tmp_path):
    """dots3-note's releases store the text config's keys at the top of config.json (its config class
    builds text_config from them): the decoder is found and exported as with a nested text_config."""
    import json

    checkpoint = wrapped_checkpoint(tmp_path, "dots3_note", "dots3_note_text")
    config = json.loads((checkpoint / "config.json").read_text())
    text = config.pop("text_config")
    text.pop("model_type")
    (checkpoint / "config.json").write_text(json.dumps({**text, **config}))
    build(BuildOptions(str(checkpoint), tmp_path / "pkg", smoke=False, text_only=True))
    assert text_error(tmp_path / "pkg", checkpoint) < 1e-4


def test_without_text_only_the_build_is_refused_in_one_line_before_any_weight_read(tmp_path, monkeypatch):
    from gqa_export.source.weights import WeightStore

    checkpoint = wrapped_checkpoint(tmp_path, "llava", "llama")

    def read(*args, **kwargs):
        raise AssertionError("a weight was read before the refusal")

    monkeypatch.setattr(WeightStore, "view", read)
    monkeypatch.setattr(WeightStore, "read_slices", read)
    result = CliRunner().invoke(app, ["build", str(checkpoint), "-o", str(tmp_path / "pkg"), "--no-smoke"])
    assert result.exit_code == 2, result.output
    said = " ".join(result.output.split())
    assert "LlavaForConditionalGeneration's vision tower and projector are not built" in said
    assert "pass --text-only to export its llama text decoder alone" in said
    assert not (tmp_path / "pkg").exists()


def test_chameleon_masks_the_ids_of_its_image_token_names_inside_the_vocabulary():
    """The masked ids are those of vocabulary_map's "IMGIMG" names (not <image>, not the image break); one past
    the logits is refused in one line."""
    from gqa_export.errors import InputError
    from gqa_export.model.config_reads import masked_logit_ids

    config = {"vocabulary_map": {"<image>": 3, "IMGIMGBAZ": 7, "IMGIMGAZ": 5, "<racm3:break>": 6}}
    assert masked_logit_ids(config, ("vocabulary_map", "IMGIMG"), 8) == (5, 7)
    assert masked_logit_ids({}, ("vocabulary_map", "IMGIMG"), 8) == ()
    with pytest.raises(InputError, match="outside the vocabulary of 7"):
        masked_logit_ids(config, ("vocabulary_map", "IMGIMG"), 7)


@pytest.mark.parametrize(
    ("model_type", "text_type", "towers"),
    [
        ("chameleon", "chameleon", "ChameleonForConditionalGeneration's VQ-VAE image tokenizer is"),
        # around Qwen2, whose recipe builds Qwen2.5-VL's full package (tests/arch/test_wrapped_config_layouts.py)
        ("llava_onevision", "qwen2", "LlavaOnevisionForConditionalGeneration's vision tower and projector are"),
    ],
)
def test_without_text_only_names_what_is_not_built(tmp_path, model_type, text_type, towers):
    """Without --text-only: the one line naming the towers and --text-only, exit 2, nothing written."""
    checkpoint = wrapped_checkpoint(tmp_path, model_type, text_type)
    result = CliRunner().invoke(app, ["build", str(checkpoint), "-o", str(tmp_path / "pkg"), "--no-smoke"])
    assert result.exit_code == 2, result.output
    said = " ".join(result.output.split())
    assert f"{towers} not built" in said
    assert f"pass --text-only to export its {text_type} text decoder alone" in said
    assert not (tmp_path / "pkg").exists()


def test_text_only_is_not_called_without_effect(tmp_path):
    """--text-only is what exports these: the build does not note it as a flag without effect."""
    checkpoint = wrapped_checkpoint(tmp_path, "llava", "llama")
    result = CliRunner().invoke(
        app, ["build", str(checkpoint), "-o", str(tmp_path / "pkg"), "--no-smoke", "--text-only"]
    )
    assert result.exit_code == 0, result.output
    assert "no effect" not in result.output


# Chameleon with swin_norm set (its norms after their blocks): the registry row, exact there (tests/families.py)
CHAMELEON = "chameleon_text_only"


@pytest.mark.parametrize(
    "plant",
    [
        {"config_choices": ()},  # swin_norm read as the pre-norm layer
        {"qk_norm_eps": None},  # the q/k LayerNorms at the config's rms_norm_eps (0.1), not their module's 1e-5
        {"masked_logits": None},  # the image tokens' logits left as the lm_head computes them
    ],
    ids=["pre_norm_layers", "qk_norms_at_config_eps", "image_logits_unmasked"],
)
def test_chameleon_mutants_fail_the_bound(tmp_path, monkeypatch, builds, plant):
    """Mutants of Chameleon's spec: each mechanism read another way fails the bound (measured 0.18, 0.021 and
    3.4e38 off; the tiny model's logits reach 0.5)."""
    from mutants import build_planted

    checkpoint = builds.checkpoint(CHAMELEON)
    out = build_planted(checkpoint, tmp_path / "planted", monkeypatch, plant, "chameleon")
    assert text_error(out, checkpoint) > 5e-3


def test_chameleon_qk_norm_bias_dropped_fails_the_bound(tmp_path, monkeypatch, builds):
    """Mutant: the per-head q/k LayerNorms without their [heads, D] bias tables (Cohere's weight-only form);
    measured 0.015 off."""
    from mutants import build_planted

    from gqa_export.graph.params import Params

    checkpoint = builds.checkpoint(CHAMELEON)
    held_bias = Params.held_bias

    def no_bias(patch):  # only the q/k norms' tables go missing
        patch.setattr(Params, "held_bias", lambda self, w: None if "_norm." in w else held_bias(self, w))

    out = build_planted(checkpoint, tmp_path / "planted", monkeypatch, no_bias)
    assert text_error(out, checkpoint) > 5e-3


def test_chameleon_qk_norm_weight_shared_by_heads_fails_the_bound(tmp_path, builds):
    """Mutant: every head's q/k norm weight its first head's (one [D] weight shared by the heads, Phi-2's form);
    measured 0.040 off."""
    checkpoint = builds.checkpoint(CHAMELEON)
    broken = copy_package(builds.package(CHAMELEON), tmp_path / "broken")
    head_dim = 16
    first = lambda v: np.tile(v.reshape(-1, head_dim)[:1], (v.size // head_dim, 1)).reshape(v.shape)  # noqa: E731
    assert edit_initializers(broken, "*_norm.weight", first)
    assert text_error(broken, checkpoint) > 5e-3


@pytest.fixture(scope="module")
def muse_glimmer(builds):
    """Muse-Glimmer's registry checkpoint (tests/families.py muse_glimmer_text_only) and HF's logits on the prompt
    holding its placeholders (the mutants below run no decode step)."""
    checkpoint = builds.checkpoint("muse_glimmer_text_only")
    return checkpoint, hf_logits(hf_model(checkpoint), PROMPT)


def _muse_mutants() -> dict[str, dict]:
    from dataclasses import replace

    from gqa_export.arch import SPECS

    spec = SPECS["muse_glimmer_text"]
    return {
        "plain-layer-norms": {"norm_offset": 0.0},  # w where its layers' centered norms are 1 + w
        "centered-final-norm": {"final_norm_offset": None},  # 1 + w where its final norm is w
        "post-norms-at-rms-eps": {"post_norm_eps": None},
        "embedding-norm-skipped": {"embedding_table_norm": False},
        "gate-skipped": {"layer": replace(spec.layer, output_gate=None)},
        "qk-norms-skipped": {"qk_norm": None},
        "qk-scale-skipped": {"score_scale": None},
    }


@pytest.mark.parametrize("mutant", list(_muse_mutants()))
def test_muse_glimmer_mutants_fail_the_bound(tmp_path, monkeypatch, muse_glimmer, mutant):
    """Mutants of Muse-Glimmer's decoder (arch/wrapped_families.py), each one mechanism undone: its layers' norms
    plain w, its final norm 1 + w, the post-block norms at rms_norm_eps, no embedding norm, no output gate, no
    scaleless q/k norms, no qk_scale_factor; each fails the bound on the prompt (docs/coverage.md §21)."""
    from mutants import build_planted

    checkpoint, reference = muse_glimmer
    out = build_planted(checkpoint, tmp_path / mutant, monkeypatch, _muse_mutants()[mutant], "muse_glimmer_text")
    _, got = ort_prefill_and_decode(out, PROMPT, steps=0)
    assert float(np.abs(got - reference).max()) > 1e-2


@pytest.fixture(scope="module")
def muse_spark(builds):
    """Muse-Spark's registry checkpoint (tests/families.py muse_spark_text_only) and HF's logits on a prompt holding
    its image, audio (302) and video placeholders (the mutants below run no decode step)."""
    checkpoint = builds.checkpoint("muse_spark_text_only")
    return checkpoint, hf_logits(hf_model(checkpoint), SPARK_PROMPT)


def _spark_mutants() -> dict[str, dict]:
    from dataclasses import replace

    from gqa_export.arch import SPECS
    from gqa_export.arch.spec import config_keys

    spec = SPECS["muse_spark_text"]
    moe, names = spec.moe, spec.moe.names  # type: ignore[union-attr]
    unscaled_router = config_keys(logit_scale="output_multiplier")  # the router's logits not times the multiplier
    return {
        "head-output-norm-skipped": {"head_output_norm": False},
        "post-attention-norm-skipped": {"layer": replace(spec.layer, post_attention_norm=None)},
        "post-ff-norm-scaled-after": {"post_norm_kinds": ("rms_free", "rms")},  # rms(x) (1 + w), not rms(x (1 + w))
        "residual-gates-skipped": {"layer": replace(spec.layer, residual_gates=None)},
        "gate-temperature-ignored": {"ignore": ("residual_gate_temperature",)},  # T 1
        "gate-floor-dropped": {"residual_gate_floor": 0.0},  # the residual factor of 4 channels near 0, not sqrt(1e-3)
        "router-logits-unscaled": {"config_keys": unscaled_router},
        "selection-bias-ignored": {"moe": replace(moe, names=replace(names, expert_bias=None))},
        "pool-norm-skipped": {"moe": replace(moe, names=replace(names, latent_norm=None))},
        "expert-norm-skipped": {"moe": replace(moe, names=replace(names, expert_norm=None))},
    }


@pytest.mark.parametrize("mutant", list(_spark_mutants()))
def test_muse_spark_mutants_fail_the_bound(tmp_path, monkeypatch, muse_spark, mutant):
    """Mutants of Muse-Spark's decoder (arch/wrapped_families.py), each one of its mechanisms over Muse-Glimmer's
    undone: no head output norm, no post-attention norm, the post-feedforward norm's scale after it normalizes, no
    residual gates, their temperature 1, their residual factor unfloored, the router logits not times
    output_multiplier, no selection bias, no norm on the pooled input, none on each expert's output; each fails the
    bound on the prompt (docs/coverage.md §33).
    The chosen weights' renormalization is no mutant here: the post-feedforward RMSNorm divides out any factor the
    routing weights share (it shows only through post_norm_eps)."""
    from mutants import build_planted

    checkpoint, reference = muse_spark
    out = build_planted(checkpoint, tmp_path / mutant, monkeypatch, _spark_mutants()[mutant], "muse_spark_text")
    _, got = ort_prefill_and_decode(out, SPARK_PROMPT, steps=0)
    assert float(np.abs(got - reference).max()) > 1e-2


def test_muse_spark_placeholders_embed_as_id_0(tmp_path, builds, muse_spark):
    """Its package on the prompt holding the image, audio and video placeholders equals HF (each embedded as id 0,
    as MuseSparkModel.forward does); the registry row's prompts hold no audio one."""
    _, reference = muse_spark
    _, got = ort_prefill_and_decode(builds.package("muse_spark_text_only"), SPARK_PROMPT, steps=0)
    assert float(np.abs(got - reference).max()) < 1e-4


def test_muse_spark_residual_gate_factors_are_the_modeling_codes():
    """The residual gate's two factors (graph/learned_residual_gate.py) at temperature 0.3 and the 1e-3 floor equal
    MuseSparkResidualGate's on weights whose residual factor is floored and not; without the floor they do not."""
    import torch
    from transformers.models.muse_spark.modeling_muse_spark import MuseSparkResidualGate, MuseSparkTextConfig

    from gqa_export.graph.learned_residual_gate import gate_factors

    config = MuseSparkTextConfig(hidden_size=8, num_attention_heads=2, num_key_value_heads=1, head_dim=4)
    gate = MuseSparkResidualGate(config)  # temperature 0.3, its default
    w = np.array([-6.0, -1.0, -0.1, 0.0, 0.4, 1.5, 2.5, 4.0], np.float32)
    with torch.no_grad():
        gate.gate.copy_(torch.from_numpy(w))
        ones, zeros = torch.ones(8), torch.zeros(8)
        branch_hf, residual_hf = gate(zeros, ones).numpy(), gate(ones, zeros).numpy()
    branch, residual = gate_factors(w, 0.3, 1e-3)
    np.testing.assert_allclose(branch, branch_hf, rtol=1e-6)
    np.testing.assert_allclose(residual, residual_hf, rtol=1e-6)
    assert np.abs(gate_factors(w, 0.3)[1] - residual_hf).max() > 1e-2  # the floor holds on the last two channels


@pytest.mark.parametrize(
    ("name", "towers"),
    [("MuseGlimmer", "vision tower and projector are"), ("MuseSpark", "vision tower and audio tower are")],
)
def test_muse_without_text_only_names_its_towers(tmp_path, name, towers):
    """Muse-Glimmer and Muse-Spark without --text-only: one line, exit 2, naming their towers; a config without
    any weight file is enough to be refused."""
    import transformers as tf

    architecture = f"{name}ForConditionalGeneration"
    getattr(tf, f"{name}Config")(architectures=[architecture]).save_pretrained(tmp_path / "muse")
    result = CliRunner().invoke(app, ["build", str(tmp_path / "muse"), "-o", str(tmp_path / "out"), "--no-smoke"])
    assert result.exit_code == 2, result.output
    said = " ".join(result.output.split())
    assert f"{architecture}'s {towers} not built" in said
    assert f"pass --text-only to export its {WRAPPED_DECODERS[architecture]}_text text decoder alone" in said
    assert not (tmp_path / "out").exists()


def test_one_tower_policy_for_listed_and_unlisted_classes():
    """towers_refusal reads the config, not a list alone: an unlisted class with a vision or audio sub-config
    (Llama-4's, Gemma-3n's own recipes match them) needs --text-only as a listed one does; a recipe that builds
    the full package, or a config without towers, needs nothing."""
    from gqa_export.arch.wrapped_decoders import towers_refusal
    from gqa_export.recipes import builtin_recipes

    recipes = {r.name: r for r in builtin_recipes()}
    llama4 = {"architectures": ["Llama4ForConditionalGeneration"], "model_type": "llama4", "vision_config": {"a": 1}}
    said = towers_refusal(llama4, recipes["llama4"])
    assert said == (
        "Llama4ForConditionalGeneration's vision tower is not built and onnxruntime-genai 0.18 runs no llama4 "
        "package; pass --text-only to export its llama4 text decoder alone (it computes the class's logits on "
        "text prompts)"
    )
    assert towers_refusal({**llama4, "vision_config": None}, recipes["llama4"]) is None  # a config without towers
    gemma3 = {"architectures": ["Gemma3ForConditionalGeneration"], "vision_config": {"a": 1}}
    assert towers_refusal(gemma3, recipes["gemma3_vision"]) is None  # its full package
    assert towers_refusal({**gemma3, "audio_config": {"a": 1}, "vision_config": None}, recipes["gemma3_vision"])
    from gqa_export.arch.wrapped_decoders import carries_towers  # what a speculative draft gets --text-only for

    assert carries_towers(llama4) and carries_towers({"architectures": ["FuyuForCausalLM"]})
    assert not carries_towers({**llama4, "vision_config": None}) and not carries_towers({"architectures": None})
    # remote-code releases name their towers by keys of their own (Phi-3-vision / Phi-4-multimodal, VideoChat-Flash)
    assert carries_towers({"architectures": ["Phi3VForCausalLM"], "embd_layer": {"embedding_cls": "image"}})
    assert carries_towers({"architectures": ["Phi4MMForCausalLM"], "embd_layer": {"image_embd_layer": {}}})
    assert carries_towers({"architectures": ["VideoChatFlashQwenForCausalLM"], "mm_vision_tower": "umt-large"})
    assert not carries_towers({"architectures": ["Phi3ForCausalLM"], "embd_layer": None})
