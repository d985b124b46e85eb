"""Phase 2 of resolving a build: what the checkpoint's config and tensor index decide, before any
weight is read.

The recipe (matched, or the user's), the precision plan with the recipe's default, the model's
dimensions, the pre-quantized format and its tensors, the spec bound to the tensor names, the
checks of the config against the tensor shapes (headers only), the multimodal package, the
attention plan and each graph's options, the graph I/O and the KV cache: every refusal that needs
the config is raised here (tests/plan/test_phases.py proves no weight was read by then).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from gqa_export.arch import get_spec
from gqa_export.arch.wrapped_decoders import towers_refusal
from gqa_export.check.ep_lints import check_ep_mode
from gqa_export.errors import InputError
from gqa_export.graph.attention import gqa_refusal
from gqa_export.graph.io_options import ResolvedIo, resolve_io, with_recipe_defaults
from gqa_export.graph.latent_attention import latent_cache_dims
from gqa_export.graph.lightning import decay_table_notes
from gqa_export.graph.lora import check_lora_options
from gqa_export.graph.options import GraphOptions
from gqa_export.graph.plan import AttentionPlan, bidirectional_ids, plan_attention, static_max_length, static_plan
from gqa_export.model.dims import ModelDims, read_dims
from gqa_export.model.raw_config import check_raw_config
from gqa_export.model.recurrent_loop import loop_layer_prefixes
from gqa_export.model.sparse_cap import cap_wording
from gqa_export.model.spec_choices import chosen_spec
from gqa_export.model.stream import stack_layer_prefixes
from gqa_export.package.genai_config import default_max_length
from gqa_export.package.multimodal import (
    MultimodalPlan,
    check_full_options,
    class_mrope,
    encoder_plan,
    full_attention_mode,
    plan_multimodal,
)
from gqa_export.package.staging import check_outside
from gqa_export.plan.records import BuildPlan, RequestPlan
from gqa_export.progress import Reporter
from gqa_export.quant.kv_cache import check_kv_length, check_kv_options
from gqa_export.quant.quantize import plan_precision
from gqa_export.recipes import Recipe, load_recipe
from gqa_export.source import prequantized
from gqa_export.source.aliases import aliased_views
from gqa_export.source.checkpoint import Checkpoint, match_builtin, text_config_of
from gqa_export.source.consistency import check_against_weights
from gqa_export.source.expert_views import attention_expert_views
from gqa_export.source.gguf import GgufStore
from gqa_export.source.imported import ImportedStore
from gqa_export.source.merged_adapter import choose_adapter, merged_adapter_views, stored_adapters
from gqa_export.source.release_layouts import release_views
from gqa_export.source.split_projections import split_projection_views
from gqa_export.source.stored_renames import renamed_views
from gqa_export.source.weights import WeightStore


def resolve_model(plan: RequestPlan, checkpoint: Checkpoint, reporter: Reporter) -> BuildPlan:
    """Phase 2: `plan` against the checkpoint; the reporter hears the `build` stage and the notes."""
    request, ep, note = plan.request, plan.ep, reporter.note
    source = checkpoint.source
    check_outside(request.output, source.model_dir)
    prequantized.check_config(checkpoint.raw_config, source.model_dir, request.dequantize)
    reporter.stage("build")
    recipe = _recipe(plan, checkpoint, note)
    hf_config, generation = checkpoint.configs
    text_config = text_config_of(hf_config)
    outer = hf_config if text_config is not hf_config else None
    precision = plan.precision or plan_precision(ep.name, recipe.default_precision[ep.name], request.quant)
    if source.gguf is not None and plan.precision is None:  # the file's integers at the EP's speed (docs/gguf.md §5)
        precision = replace(precision, accuracy_level=ep.accuracy_level)
    arch = chosen_spec(get_spec(recipe.arch), text_config)  # the fields its config chooses (Molmo2's q/k norms)
    dims = read_dims(text_config, arch, generation, outer)
    imported = prequantized.imported_config(checkpoint.raw_config, request.dequantize)  # docs/prequantized.md
    store = ImportedStore(checkpoint.store, imported) if imported else checkpoint.store
    store = store.for_build(request.dequantize) if isinstance(store, GgufStore) else store
    store = release_views(store, checkpoint.raw_config)  # a remote-code release's renamed modules (Phi-4-MM's)
    prequantized.check_tensors(store.names())
    store = renamed_views(store, arch)  # a stored layout read under its class's names, and the spec's row views
    spec = arch.bind(store)
    if spec.recurrent_stacks is not None and dims.recurrent_stacks is not None:  # each graph layer's stored layer
        spec = replace(spec, layer_prefixes=stack_layer_prefixes(spec.recurrent_stacks, dims.recurrent_stacks))
    if spec.recurrent_loop and dims.recurrent_loop is not None:  # Dory: each pass's layers read the stored ones
        spec = replace(spec, layer_prefixes=loop_layer_prefixes(spec.layer_prefix, dims.recurrent_loop))
    if spec.split_projections or spec.stored_qkv:  # a fused projection read as its parts (source/split_projections.py)
        store = split_projection_views(store, spec, dims)
    if spec.tensor_aliases:  # a layer's modules spelled another way (source/aliases.py)
        store = aliased_views(store, spec, dims.num_layers)
    if spec.attention_experts is not None:  # JetMoE: its expert attention as one qkv and o (source/expert_views.py)
        store = attention_expert_views(store, spec, text_config)
    # A stored lm_head is used as is, else the embedding is tied, as transformers loads it (a
    # stored lm_head that differs from the embedding is never tied, whatever the flag says).
    dims = replace(dims, tie_word_embeddings=spec.lm_head not in store)
    # the multi-token-prediction layers a checkpoint stores past the decoder's are not read
    check_against_weights(dims, spec, store, int(getattr(text_config, "num_nextn_predict_layers", 0) or 0))
    if recipe.attention.latent_cache:  # MLA's latent as one kv head (docs/latent-attention.md)
        dims = latent_cache_dims(dims)
    # said in the build output and kept in the package's notes
    notes = context_cap_notes(dims) + rope_width_notes(dims, arch.hf_rotates_full_head)
    notes += decay_table_notes(spec, store)  # MiniMax's 16-bit prompt decay tables (graph/lightning.py)
    max_length = planned_max_length(request.max_length, dims)
    # the recipe's full package is for its checkpoints with a vision tower (docs/multimodal.md §1)
    full = bool(recipe.multimodal_model_type) and getattr(hf_config, "vision_config", None) is not None
    mm = None
    if full and not request.text_only:
        dims = class_mrope(recipe.multimodal_model_type, hf_config, dims)
        mm = plan_multimodal(recipe.multimodal_model_type, hf_config, dims, store, source.model_dir)
    if recipe.merged_adapter != "none":  # a LoRA adapter the checkpoint carries (source/merged_adapter.py)
        store, merged = _merged_adapter(store, checkpoint, recipe.merged_adapter, mm is not None)
        notes += merged
    towers_left = towers_refusal(checkpoint.raw_config, recipe) is not None  # what --text-only leaves out
    notes += _no_effect(request.model, request.text_only and not (full or towers_left), request.dequantize, imported)
    for line in notes:  # said, never silently accepted
        note(line)
    vision_weights = encoder_plan(request.encoder_precision, ep.name, precision.io_dtype)
    if vision_weights is not None and not mm:
        raise InputError("--encoder-precision int8 is for a full multimodal package's vision model: drop it")
    attention, max_length = _attention(plan, recipe, hf_config, dims, mm, max_length)
    io_opts, kv = with_recipe_defaults(request.io, request.kv, recipe.build_defaults)
    check_kv_length(kv, max_length)
    io = resolve_io(io_opts, ep.name, attention.mode, len(attention.graphs))
    if mm:
        check_full_options(
            io_opts.no_lm_head, io_opts.inputs_embeds, kv.quantized, request.report and bool(precision.nbits)
        )
    check_kv_options(kv, ep.name, attention.mode, precision.io_dtype.name)
    shared = any(layer.shared_use >= 0 for layer in dims.layers)
    check_lora_options(request.lora_targets, len(attention.graphs), mm is not None, shared)
    graphs = graph_options(plan, recipe, precision, dims, attention, io, mm, max_length)
    return BuildPlan(
        request, ep, source, recipe, precision, dims, spec, store, hf_config, text_config, generation, imported,
        max_length, attention, io, kv, graphs, mm, vision_weights, tuple(notes),
    )  # fmt: skip


def _recipe(plan: RequestPlan, checkpoint: Checkpoint, note: Callable[[str], None]) -> Recipe:
    """The user's recipe (its config class where transformers does not know the model_type) or the
    built-in match, with --set and the EP's overrides applied. An unknown architecture is named
    before transformers is asked about it; a checkpoint whose towers the recipe does not build needs
    --text-only (arch/wrapped_decoders.towers_refusal)."""
    request = plan.request
    if plan.user_recipe is not None and (said := checkpoint.read_for(plan.user_recipe)) is not None:
        note(said)
    recipe = plan.user_recipe or match_builtin(checkpoint.raw_config, checkpoint.source.model_dir)
    if not request.text_only and (refused := towers_refusal(checkpoint.raw_config, recipe)) is not None:
        raise InputError(refused)
    check_raw_config(checkpoint.raw_config)
    if request.settings and plan.user_recipe is None:
        recipe = load_recipe(recipe.path, list(request.settings))
    return recipe.for_ep(request.ep)


def _no_effect(model: str, text_only: bool, dequantize: bool, imported: dict[str, Any] | None) -> list[str]:
    """Flags given that change nothing for this checkpoint, as notes."""
    bnb = prequantized.dequantized_on_request(imported)  # bitsandbytes
    return [f"--{flag} has no effect: {model} {why}" for flag, given, why in (
        ("text-only", text_only, "exports as a text package anyway"),
        ("dequantize", dequantize and not bnb, "holds no bitsandbytes weights, the only ones it reads"),
    ) if given]  # fmt: skip


def _attention(
    plan: RequestPlan, recipe: Recipe, hf_config: Any, dims: ModelDims, mm: MultimodalPlan | None, max_length: int
) -> tuple[AttentionPlan, int]:
    """The attention plan (the static graph pair on a windowed EP) and the max_length it allows."""
    request, ep = plan.request, plan.ep
    runs = get_spec(recipe.arch).bidirectional
    ids = bidirectional_ids(runs, recipe.attention.bidirectional_token_ids, hf_config, request.bidirectional_ids)
    ids_requested = request.bidirectional_ids is not None or bool(recipe.attention.bidirectional_token_ids)
    if recipe.attention.bias_op == "gqa" and not ep.gqa_attention_bias:
        raise InputError("attention.bias_op gqa is for CPU: CUDA's GroupQueryAttention runs a bias only unfused")
    if ep.static_window:  # static shapes (QNN): its own graph pair whatever the recipe's mode (docs/eps.md §7)
        attention = static_plan(ep.static_window, ids)
        max_length = static_max_length(request.max_length, max_length, ep.static_window)
    else:
        requested = request.attention or recipe.attention.mode
        attention = plan_attention(
            full_attention_mode(requested, mm.tower) if mm else requested,
            ids,
            ids_requested,
            gqa_refusal(dims),
            bias_op=recipe.attention.bias_op,
            bias_cache=recipe.attention.bias_cache,
        )
    check_ep_mode(ep.name, attention.mode)
    if recipe.attention.latent_cache and attention.mode != "gqa":
        raise InputError(
            f"attention.latent_cache runs in GroupQueryAttention only (mode gqa), not {attention.mode}; "
            "export with --attention gqa or without the latent cache"
        )
    return attention, max_length


def graph_options(
    plan: RequestPlan, recipe: Recipe, precision: Any, dims: ModelDims, attention: AttentionPlan, io: ResolvedIo,
    mm: MultimodalPlan | None, max_length: int,
) -> tuple[GraphOptions, ...]:  # fmt: skip
    """What each graph of the attention plan is built with."""
    request, ep = plan.request, plan.ep
    runs = get_spec(recipe.arch).bidirectional
    # Only a single GQA graph: a split pipeline's prefill writes every position into the shared
    # buffer, so that buffer must stay max_length long for all layers.
    window_cache = (
        recipe.attention.sliding_window_cache
        and attention.mode == "gqa"
        and len({layer.window for layer in dims.layers if layer.window > 0}) == 1
    )
    return tuple(
        GraphOptions(
            precision.io_dtype,
            precision.logits_dtype,
            rope_rows=max(max_length, dims.max_position_embeddings),
            logits=io.logits,
            inputs_embeds=io.inputs_embeds or mm is not None,
            embeds_with_ids=mm is not None and mm.tower.image_runs_bidirectional,
            hidden_states=io.hidden_states,
            mrope_positions=io.mrope_positions or (mm is not None and mm.tower.mrope_positions),
            layer_feature_slices=mm.feature_slices if mm else 0,
            lora_targets=request.lora_targets,
            packed_qkv=recipe.attention.packed_qkv and ep.packed_qkv,
            packed_gate_up=ep.packed_gate_up if recipe.mlp.packed_gate_up is None else recipe.mlp.packed_gate_up,
            mode=graph.mode,
            bidirectional_ids=attention.bidirectional_ids,
            bidirectional_layers=runs.layers if runs else "all",
            bidirectional_window_bounded=runs is not None and runs.window == "bounded",
            kv_read=_kv_read(recipe.attention.bias_kv_read, ep.standard_attention_kv_read),
            fused_rope=recipe.attention.fused_rope and ep.fused_rope,
            rope_switch="offset" if "If" in ep.missing_ops else "if",
            sliding_window_cache=window_cache,
        )
        for graph in attention.graphs
    )


def _kv_read(requested: str, ep_default: str) -> str:
    """The scatter graphs' read form: slice on CPU (its Attention computes every key it is given),
    nonpad on CUDA (flash/cuDNN need no mask; benchmarks/results/attention_modes.md)."""
    return ep_default if requested == "auto" else requested


def context_cap_notes(dims: ModelDims) -> list[str]:
    """The line saying the package's context is capped below the model's, where it is."""
    if dims.context_length == dims.max_position_embeddings:
        return []
    if dims.latent is None:  # MiniMax-M3's block-sparse indexer, Qwen4-Exp's QSA, Doge's mask (model/sparse_cap.py)
        what, why = cap_wording(dims.cap_kind)
        return [
            f"context capped at {what} {dims.context_length} (max_position_embeddings "
            f"{dims.max_position_embeddings}): {why}, so the package (plain attention, no indexer) is exact up "
            "to there (docs/moe.md, docs/coverage.md)"
        ]
    return [
        f"context capped at index_topk {dims.context_length} (max_position_embeddings "
        f"{dims.max_position_embeddings}): DeepSeek sparse attention keeps every key only within its indexer's "
        "top-k, so the package (plain MLA, no indexer) is exact up to there (docs/latent-attention.md)"
    ]


def rope_width_notes(dims: ModelDims, hf_rotates_full_head: bool) -> list[str]:
    """The line saying a rope narrower than the head is rotated as configured where the family's
    transformers class rotates every channel instead (ArchSpec.hf_rotates_full_head: MiniMax)."""
    widths = {(dims.ropes[layer.rope].rotary_dim, layer.head_dim) for layer in dims.layers if layer.rope}
    narrow = sorted((r, d) for r, d in widths if r < d)
    if not hf_rotates_full_head or not narrow:
        return []
    rotary, head_dim = narrow[0]
    return [
        f"RoPE on {rotary} of {head_dim} channels per head, as the config's rotary_dim says and the released "
        "model was trained; the installed transformers class rotates all of them, so its logits differ from the "
        "package's (docs/hybrid-state.md §8.16)"
    ]


def planned_max_length(requested: int | None, dims: ModelDims) -> int:
    """The package's max_length: `--max-length` within the context length, else the default."""
    context = dims.context_length
    if requested is None:
        return default_max_length(context)
    if requested > context and context < dims.max_position_embeddings:
        if dims.latent is None:  # MiniMax-M3's block-sparse indexer, Qwen4-Exp's QSA, Doge's dynamic mask
            what, why = cap_wording(dims.cap_kind)
            raise InputError(
                f"--max-length {requested} is past {what} {context}: {why}, and beyond it drops keys, which the "
                f"package does not compute; use --max-length {context} or less"
            )
        raise InputError(
            f"--max-length {requested} is past index_topk {context}: beyond it DeepSeek sparse attention's indexer "
            f"drops keys, which the package does not compute; use --max-length {context} or less"
        )
    if requested < 2 or requested > context:
        # HF's dynamic NTK rescales every frequency as a sequence grows past max_position_embeddings: no one table
        dynamic = any(r.rope_type == "dynamic" and not r.params.get("alpha") for r in dims.ropes.values())
        why = "; its dynamic NTK RoPE rescales past it, which one cos/sin table cannot hold" if dynamic else ""
        raise InputError(
            f"--max-length must be between 2 and the model's context length {context}, got {requested}{why}"
        )
    return requested


def _merged_adapter(
    store: WeightStore, checkpoint: Checkpoint, setting: str, full: bool
) -> tuple[WeightStore, list[str]]:
    """The decoder's weights with the chosen stored adapter merged, and what the build says of it."""
    adapter = choose_adapter(
        setting, full, lambda: stored_adapters(store, checkpoint.source.model_dir, checkpoint.raw_config)
    )
    if adapter is None:
        return store, []
    said = [f"the decoder's weights carry the checkpoint's {adapter.name} LoRA adapter, merged"]
    if full:
        said[0] += (
            ": onnxruntime-genai runs one decoder for every prompt, so prompts without an image run it too "
            "(--set merged_adapter=none or another adapter's name chooses otherwise; docs/lora.md §9)"
        )
    return merged_adapter_views(store, adapter), said
