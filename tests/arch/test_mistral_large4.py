"""Mistral-Large-4 (gqa_export/arch/latent_families.py MISTRAL_LARGE4_TEXT, docs/coverage.md "mistral_large4"): the
registry row (tests/families.py mistral_large4_text_only, the tiny config in tests/wrapped_models.py) holds the package
to HF; here each mechanism it adds to GLM-MoE-DSA's graph is planted wrong (tests/mutants.py build_planted) and must
break that parity. The tiny decoder has 4 layers: layer 2 NoPE (no_rope_layers [1, 1, 0, 1]), layer 3 reading layer
1's latent cache (kv_source_layers [0, 1, 2, 1]), LeRoPE's alpha and the per-head query scales drawn away from their
no-op inits.

- NoPE on the wrong layer: layer 1 built without RoPE (layer 2, whose widths have no rope channels, stays NoPE);
- the KV source off by one: layer 3 reads layer 0's latent cache (a rope layer of the same width) instead of layer 1's;
- LeRoPE's learned frequency scale skipped (the config's YaRN frequencies as they are);
- the per-head query scale scale_h * log(pos + 1) + bias_h skipped.

And the refusals: a KV-sharing layer in the expanded cache (attention.latent_cache=false), which holds the source
layer's expanded keys, not the latent this layer expands with its own kv_b_proj; a kv_source_layers entry other than
the producer transformers hands the layer.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from families import BY_NAME, REGISTERED
from mutants import build_planted
from reference import parity_error

from gqa_export.errors import InputError

ROW = "mistral_large4_text_only"
SPEC = "mistral_large4_text"


def _checkpoint(builds):
    if BY_NAME[ROW] not in REGISTERED:
        pytest.skip("mistral_large4 needs transformers 5.25")
    return builds.checkpoint(ROW)


def _nope_on_layer_1(monkeypatch: pytest.MonkeyPatch) -> None:
    from gqa_export.model import dims

    original = dims.read_layers

    def read_layers(*args, **kwargs):
        layers = list(original(*args, **kwargs))
        layers[1] = replace(layers[1], rope=None)
        return tuple(layers)

    monkeypatch.setattr(dims, "read_layers", read_layers)


def _source_off_by_one(monkeypatch: pytest.MonkeyPatch) -> None:
    from gqa_export.model import layer_dims

    original = layer_dims.latent_kv_sources

    def sources(opt, n):
        return [s - 1 if s != i else s for i, s in enumerate(original(opt, n))]

    monkeypatch.setattr(layer_dims, "latent_kv_sources", sources)


def _lerope_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    from gqa_export.graph import decoder

    monkeypatch.setattr(decoder, "learned_frequency_scale", lambda *a: None)


def _query_scale_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    from gqa_export.arch import SPECS

    latent = replace(SPECS[SPEC].latent_attention, query_log_scale=None)
    monkeypatch.setitem(SPECS, SPEC, replace(SPECS[SPEC], latent_attention=latent))


MUTANTS = {
    "nope-on-the-wrong-layer": _nope_on_layer_1,
    "kv-source-off-by-one": _source_off_by_one,
    "lerope-skipped": _lerope_skipped,
    "query-log-scale-skipped": _query_scale_skipped,
}


@pytest.mark.parametrize("mutant", MUTANTS)
def test_mutant_mistral_large4_fails_hf_parity(builds, tmp_path, monkeypatch, mutant):
    checkpoint = _checkpoint(builds)
    package = build_planted(checkpoint, tmp_path / "pkg", monkeypatch, MUTANTS[mutant])
    assert parity_error(package, checkpoint) > 1e-2  # measured 0.70, 1.30, 0.88, 1.06 (correct: 1.4e-6)


def test_kv_sharing_in_the_expanded_cache_is_refused(builds, tmp_path):
    from gqa_export.pipeline import BuildOptions, build

    options = BuildOptions(
        str(_checkpoint(builds)), tmp_path / "pkg", settings=("attention.latent_cache=false",), smoke=False,
        text_only=True,
    )  # fmt: skip
    with pytest.raises(InputError, match=r"layer 3 attends over layer 1's latent KV cache \(kv_source_layers\)"):
        build(options)


def test_a_kv_source_transformers_would_not_read_is_refused():
    """HF hands a sharing layer the last earlier producer of its rope kind (KVSharingDict keyed "rope" / "nope"):
    layer 3 naming layer 0 while layer 1, a later rope producer, is shared too would run on layer 1's cache."""
    from gqa_export.model.latent import latent_kv_sources

    config = {"kv_source_layers": [0, 1, 1, 0], "no_rope_layers": [1, 1, 1, 1]}
    with pytest.raises(InputError, match=r"kv_source_layers\[3\] is 0, but transformers hands layer 3 the cache of "):
        latent_kv_sources(lambda key, default=None: config.get(key, default), 4)
    assert latent_kv_sources(lambda key, default=None: {"kv_source_layers": [0, 1, 2, 1]}.get(key, default), 4)
