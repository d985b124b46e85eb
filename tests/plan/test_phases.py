"""Every refusal comes before the work it would waste (gqa_export/plan/, docs/architecture.md §7).

A refusal the options alone decide is raised in phase 1, before the fetch: each kind is tried with
a source whose opening fails the test. A refusal that needs the config is raised in phase 2, before
any weight is read: each kind is tried with the weight store's reads failing the test. The same
holds for `build --draft` (both models resolved before either is exported) and for a release
(every variant resolved before the first export)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from mutants import edited_checkpoint

from gqa_export import pipeline, speculative
from gqa_export.errors import InputError
from gqa_export.pipeline import BuildOptions, build
from gqa_export.request.records import IoOptions, KvQuantOptions, QuantOptions, SpeculativeOptions
from gqa_export.source.weights import WeightStore

SOURCE = "nobody/never-fetched"  # a Hub id: opening it fails the test (phase 1 must refuse first)


def _opts(tmp: Path, **fields) -> BuildOptions:
    return replace(BuildOptions(SOURCE, tmp / "out"), **fields)


# (id, BuildOptions fields, what the one line says)
OPTION_REFUSALS = [
    ("unknown-ep", dict(ep="tpu"), "unknown --ep 'tpu'"),
    ("ep-precision-pair", dict(ep="dml", precision="fp32"), "cannot run with --ep dml"),
    ("quant-option-on-float", dict(precision="fp32", quant=QuantOptions(block_size=64)), "--block-size applies"),
    ("block-size", dict(precision="int4", quant=QuantOptions(block_size=48)), "power of two"),
    ("set-unknown-key", dict(settings=("attention.nope=1",)), "unknown recipe key"),
    ("max-length-below-2", dict(max_length=1), "--max-length must be at least 2"),
    ("no-lm-head-hidden-states", dict(io=IoOptions(no_lm_head=True, hidden_states=True)), "already outputs"),
    ("no-lm-head-prune", dict(io=IoOptions(prune_lm_head=True, no_lm_head=True)), "no lm_head to prune"),
    ("cuda-graph-on-cpu", dict(io=IoOptions(cuda_graph=True)), "--cuda-graph is a CUDA provider option"),
    ("split-prune", dict(attention="split", io=IoOptions(prune_lm_head=True)), "single-graph packages"),
    ("bias-kv-cache", dict(attention="bias", kv=KvQuantOptions("int8")), "needs GroupQueryAttention"),
    ("split-lora", dict(attention="split", lora_targets=("q_proj",)), "needs a single decoder graph"),
    ("kv-cache-dtype-on-ep", dict(ep="dml", kv=KvQuantOptions("int4")), "has no kernel with --ep dml"),
    ("qnn-report", dict(ep="qnn", report=True), "static-shape (QNN) package"),
    ("qnn-window-multiple", dict(ep="qnn", max_length=100), "multiple of the 64-token window"),
    ("qnn-attention", dict(ep="qnn", attention="split"), "--ep qnn runs --attention"),
    ("encoder-int8-text-only", dict(encoder_precision="int8", text_only=True), "--encoder-precision int8 is for"),
    ("encoder-int8-on-dml", dict(ep="dml", encoder_precision="int8"), "--encoder-precision"),
    ("bias-op-gqa-on-cuda", dict(ep="cuda", settings=("attention.bias_op=gqa",)), "bias_op gqa is for CPU"),
    ("draft-tuning-without-draft", dict(speculative=SpeculativeOptions(3)), "tune a draft model"),
    ("draft-prune", dict(draft="d", io=IoOptions(prune_lm_head=True)), "--draft needs full logits"),
    ("draft-on-qnn", dict(draft="d", ep="qnn"), "cannot pair with --ep qnn"),
    ("draft-split", dict(draft="d", attention="split"), "cannot pair with a decoder pipeline"),
    ("draft-tokens-range", dict(draft="d", speculative=SpeculativeOptions(20)), "between 1 and 16"),
    ("draft-lora", dict(draft="d", lora_targets=("q_proj",)), "--draft with --lora-targets"),
]


@pytest.fixture
def no_fetch(monkeypatch):
    def fetched(*args, **kwargs):
        raise AssertionError("the source was opened before a refusal the options alone decide")

    for module in (pipeline, speculative):
        monkeypatch.setattr(module, "open_checkpoint", fetched)


@pytest.mark.parametrize(("fields", "says"), [pytest.param(f, s, id=i) for i, f, s in OPTION_REFUSALS])
def test_option_refusals_come_before_the_fetch(no_fetch, tmp_path, fields, says):
    opts = _opts(tmp_path, **fields)
    with pytest.raises(InputError, match=says.replace("(", r"\(").replace(")", r"\)")):
        if opts.draft is not None:
            speculative.build_with_draft(opts)
        else:
            build(opts)
    assert not (tmp_path / "out").exists()


def test_an_output_in_the_way_and_a_bad_recipe_come_before_the_fetch(no_fetch, tmp_path):
    foreign = tmp_path / "out"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    with pytest.raises(InputError, match="already exists"):
        build(_opts(tmp_path))
    recipe = tmp_path / "r.yaml"
    recipe.write_text("name: x\nmatch: {model_types: [x]}\narch: no_such_arch\n")
    with pytest.raises(InputError, match="no_such_arch"):
        build(_opts(tmp_path, output=tmp_path / "other", recipe=recipe))
    assert (foreign / "notes.txt").read_text() == "mine" and not (tmp_path / "other").exists()


@pytest.fixture
def no_weight_read(monkeypatch):
    def read(*args, **kwargs):
        raise AssertionError("a weight was read before a refusal the config decides")

    monkeypatch.setattr(WeightStore, "view", read)
    monkeypatch.setattr(WeightStore, "read_slices", read)


@pytest.mark.parametrize(
    ("name", "fields", "says"),
    [
        ("gqa", dict(max_length=100000), "between 2 and the model's context length"),
        ("gqa", dict(max_length=3, kv=KvQuantOptions("int8")), "needs a max_length of 4 or more, got 3"),
        ("gqa", dict(encoder_precision="int8"), "--encoder-precision int8 is for a full multimodal package"),
        (
            "gqa",
            dict(ep="cuda", precision="fp16", settings=("attention.mode=bias",), io=IoOptions(cuda_graph=True)),
            "--cuda-graph needs the GQA graph",
        ),  # the recipe's mode, known from the config
        ("gqa", dict(settings=("attention.mode=bias",), kv=KvQuantOptions("int8")), "needs GroupQueryAttention"),
        ("gqa", dict(settings=("attention.mode=split",), io=IoOptions(prune_lm_head=True)), "single-graph"),
        ("gqa", dict(settings=("attention.latent_cache=true",)), "latent_cache is for multi-head latent attention"),
        ("gemma3_full", dict(lora_targets=("q_proj",)), "--lora-targets is for text decoders"),
        ("gemma3_vision", dict(), "processor writes 256 image tokens"),
    ],
    ids=[
        "max-length-over-context",
        "kv-cache-in-a-short-context",
        "encoder-int8-on-text",
        "cuda-graph-recipe-bias",
        "kv-cache-recipe-bias",
        "prune-recipe-split",
        "latent-cache-on-dense",
        "lora-on-multimodal",
        "multimodal-processor",
    ],
)
def test_config_refusals_come_before_any_weight_read(
    checkpoints, gemma3_full_checkpoint, no_weight_read, tmp_path, name, fields, says
):
    source = gemma3_full_checkpoint if name == "gemma3_full" else checkpoints.get(name)
    opts = replace(BuildOptions(str(source), tmp_path / "out", smoke=False), **fields)
    with pytest.raises(InputError, match=says):
        build(opts)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("changes", "says"),
    [
        (dict(model_type="no_such_family", architectures=["NoSuchForCausalLM"]), "unsupported architecture"),
        (dict(hidden_size=96), "does not belong to these weights"),
        # kv heads the weights do not have: one sentence naming the key, not onnxruntime's shape error at load
        (dict(num_key_value_heads=1), r"num_key_value_heads / head_dim gives 16 but .*k_proj.weight is \[32, 64\]"),
        (dict(quantization_config={"quant_method": "hqq", "quant_config": {"nbits": 4}}), "HQQ"),
        # --max-length 512 (below) past a dynamic-NTK context: HF rescales there, no fixed table can
        (dict(rope_parameters={"rope_type": "dynamic", "factor": 2.0, "rope_theta": 10000.0}),
         "context length 256, got 512; its dynamic NTK RoPE rescales past it"),
    ],
    ids=["unknown-architecture", "config-against-weights", "kv-heads-against-weights", "pre-quantized-format",
         "dynamic-rope-past-context"],
)  # fmt: skip
def test_checkpoint_refusals_come_before_any_weight_read(checkpoints, no_weight_read, tmp_path, changes, says):
    source = edited_checkpoint(checkpoints.get("gqa"), tmp_path / "edited", **changes)
    with pytest.raises(InputError, match=says):
        build(BuildOptions(str(source), tmp_path / "out", smoke=False, max_length=512))
    assert not (tmp_path / "out").exists()


def test_a_draft_pairing_is_refused_before_either_model_is_exported(checkpoints, no_weight_read, tmp_path):
    """A draft whose bos id differs from the target's: both resolved, refused, nothing read."""
    draft = edited_checkpoint(checkpoints.get("gqa"), tmp_path / "edited", bos_token_id=2)
    generation = draft / "generation_config.json"
    generation.write_text(json.dumps({**json.loads(generation.read_text()), "bos_token_id": 2}))
    opts = BuildOptions(str(checkpoints.get("mha")), tmp_path / "out", smoke=False, draft=str(draft))
    with pytest.raises(InputError, match="bos_token_id 2 differs from the target's 0"):
        speculative.build_with_draft(opts)
    assert not (tmp_path / "out").exists()


def test_a_release_resolves_every_variant_before_the_first_export(checkpoints, tmp_path, monkeypatch):
    """The second variant's refusal (a context it cannot have) comes before the first is exported."""
    import yaml

    from gqa_export.release import assemble
    from gqa_export.release.spec import load_spec

    monkeypatch.setattr(assemble, "export", lambda *a, **k: pytest.fail("a variant was exported first"))
    monkeypatch.setattr(assemble, "_check_lengths", lambda *a, **k: None)  # the phase itself must refuse
    variants = [{"ep": "cpu", "precision": "fp32"}, {"ep": "cpu", "precision": "int4", "set": ["attention.mode=bias"],
                                                     "kv_cache": "int8"}]  # fmt: skip
    spec = tmp_path / "release.yaml"
    spec.write_text(yaml.safe_dump({"source": str(checkpoints.get("gqa")), "license": "mit", "variants": variants}))
    with pytest.raises(InputError, match=r"variant cpu_and_mobile/cpu-int4.* needs GroupQueryAttention"):
        assemble.release(load_spec(spec), tmp_path / "out")
    assert not (tmp_path / "out").exists()
