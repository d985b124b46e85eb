"""Phase 1 of resolving a build: what the options alone decide, before anything is fetched.

Every refusal that needs no model is raised here (tests/plan/test_phases.py proves it with a
source that fails if opened): the EP and precision pair with the quantization options, `--set`
keys, the output folder, the user's recipe, option pairs that cannot work whatever the model
(`--no-lm-head` with `--hidden-states`, `--cuda-graph` off CUDA, an explicit attention mode the
EP or another option cannot take), the draft's options, the encoder precision. Phase 2
(plan/model_phase.py) repeats the mode-dependent checks once the recipe's mode is known.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import onnx_ir as ir

from gqa_export.arch import get_spec
from gqa_export.check.ep_lints import check_ep_mode
from gqa_export.eps import EPS
from gqa_export.errors import InputError
from gqa_export.graph.io_options import resolve_io
from gqa_export.graph.lora import check_lora_options
from gqa_export.graph.plan import static_max_length
from gqa_export.package.multimodal import encoder_plan
from gqa_export.package.ownership import local_inputs
from gqa_export.package.staging import check_output
from gqa_export.plan.records import RequestPlan
from gqa_export.quant.kv_cache import check_kv_options
from gqa_export.quant.quantize import SUPPORTED, plan_precision
from gqa_export.recipes import check_settings, load_recipe, setting_values
from gqa_export.request.records import BuildOptions

_WINDOW_CACHE = "attention.sliding_window_cache"


def _silent(_: str) -> None:
    return None


def resolve_request(request: BuildOptions, note: Callable[[str], None] = _silent, output: bool = True) -> RequestPlan:
    """Phase 1. `output`: check the -o folder too (a draft or a release variant, built inside the
    runner's own staging folder, has none of its own)."""
    if request.ep not in SUPPORTED:
        raise InputError(f"unknown --ep '{request.ep}'; choose one of {', '.join(SUPPORTED)}")
    ep = EPS[request.ep]
    precision = plan_precision(request.ep, request.precision, request.quant) if request.precision is not None else None
    check_settings(request.settings)
    if request.max_length is not None and request.max_length < 2:  # a prompt token and a new one
        raise InputError(
            f"--max-length must be at least 2 (one prompt token and one new token), got {request.max_length}"
        )
    if output:
        check_output(request.output, request.overwrite, build_inputs(request), note)
    user_recipe = load_recipe(request.recipe, list(request.settings)) if request.recipe else None
    if user_recipe is not None:
        get_spec(user_recipe.arch)  # an unknown arch is named before the config is read as one
    _check_pairs(request, precision.io_dtype if precision else None, user_recipe)
    if request.draft is not None:
        check_draft_options(request)
    elif request.speculative != type(request.speculative)():
        raise InputError(
            "--draft-tokens/--min-adaptive-k/--cooldown tune a draft model: add --draft DRAFT_SRC, or drop them"
        )
    return RequestPlan(request, ep, precision, user_recipe)


def build_inputs(request: BuildOptions) -> list[tuple[object, str]]:
    """What -o must stay clear of, where it is known before the fetch: the source, the recipe, the
    KV text, the draft folder."""
    source = "GGUF file" if Path(request.model).expanduser().is_file() else "model folder"  # -o may sit beside it
    return local_inputs(
        (request.model, source), (request.recipe, "recipe"), (request.kv.calibration, "KV text file"),
        (request.draft, "draft model folder"),
    )  # fmt: skip


def _check_pairs(request: BuildOptions, io_dtype: ir.DataType | None, user_recipe: object | None) -> None:
    """Option pairs that fail whatever the model: the recipe's mode, where it matters, is checked
    again in phase 2 with the same validators."""
    ep = EPS[request.ep]
    mode = request.attention if request.attention not in (None, "auto") else None
    if ep.static_window:
        if mode is not None:
            check_ep_mode(request.ep, mode)
        if request.report:  # its float reference is compared over whole sequences, which windows cut up
            raise InputError("--report needs every position's logits, which a static-shape (QNN) package does not give")
        if request.max_length is not None:  # whole windows (its upper bound: once the config is read)
            static_max_length(request.max_length, request.max_length, ep.static_window)
        mode = None  # the static graph pair whatever was asked
    elif mode is not None:
        check_ep_mode(request.ep, mode)
    resolve_io(request.io, request.ep, mode or "gqa", 2 if mode == "split" else 1)
    if mode is not None:
        check_kv_options(request.kv, request.ep, mode, io_dtype.name if io_dtype is not None else "")
        check_lora_options(request.lora_targets, 2 if mode == "split" else 1, False)
    else:
        check_kv_options(request.kv, request.ep, "gqa", io_dtype.name if io_dtype is not None else "")
    attention = getattr(user_recipe, "attention", None)
    bias_op = setting_values(request.settings).get("attention.bias_op", getattr(attention, "bias_op", None))
    if bias_op == "gqa" and not ep.gqa_attention_bias:
        raise InputError("attention.bias_op gqa is for CPU: CUDA's GroupQueryAttention runs a bias only unfused")
    encoder = encoder_plan(request.encoder_precision, request.ep, io_dtype or ir.DataType.FLOAT)
    if encoder is not None and request.text_only:
        raise InputError("--encoder-precision int8 is for a full multimodal package's vision model: drop it")


def check_draft_options(request: BuildOptions) -> None:
    """The option pairs `build --draft` refuses before any export (docs/speculative.md §4)."""
    request.speculative.check()
    if EPS[request.ep].static_window:  # windows run one prompt per call: no multi-token verify step
        raise InputError(f"--draft cannot pair with --ep {request.ep}: its static-shape windows cannot verify drafts")
    if request.io.prune_lm_head:
        raise InputError("--draft needs full logits to verify drafted tokens at once; drop --prune-lm-head")
    if request.attention == "split":
        raise InputError("--draft cannot pair with a decoder pipeline (--attention split); use gqa or bias")
    if setting_values(request.settings).get(_WINDOW_CACHE) is True:
        raise InputError("--draft cannot rewind window-sized KV caches; drop --set attention.sliding_window_cache=true")
    if request.lora_targets:
        raise InputError("--draft with --lora-targets is not supported (not probed with a draft); drop one")
    if request.io.no_lm_head or request.io.inputs_embeds:
        raise InputError(
            "--draft needs packages that read input_ids and give logits: drop --no-lm-head/--inputs-embeds"
        )
    if request.encoder_precision != "float":  # a target with a draft is a text package (docs/speculative.md §4)
        raise InputError("--draft pairs text packages: drop --encoder-precision")
