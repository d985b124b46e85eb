"""One-line source mutants and the tests that must fail on each (issue #36; run by benchmarks/mutation.py).

Each mutant is a careless refactor that still builds a package: a row offset dropped, a sign
flipped, a square root missing, a guard removed. `original` is the exact text of one line of `file`
(stripped of its indentation; it must occur exactly once there, tests/mutation/test_source_mutants.py
checks), `replacement` what it becomes (the indentation is kept). `tests` are the few node ids that
claim that code, so that the whole list runs in well under an hour on 2 cores. `equivalent` is the
reason a mutant cannot change behaviour (it is then listed, not run).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Mutant:
    id: str
    area: str  # import, quant, graph, package, release, verify, guard, runtime, check
    file: str  # relative to the repository root
    original: str
    replacement: str
    tests: list[str]
    equivalent: str | None = None


def apply(mutant: Mutant, tree: Path) -> None:
    """Replace the mutant's line in the copy under `tree` (the file path is relative to the repository)."""
    path = tree / mutant.file
    lines = path.read_text().splitlines(keepends=True)
    found = [i for i, line in enumerate(lines) if line.strip() == mutant.original.strip()]
    if len(found) != 1:
        raise ValueError(f"{mutant.id}: {mutant.original!r} occurs {len(found)} times in {mutant.file}")
    line = lines[found[0]]
    indent = line[: len(line) - len(line.lstrip())]
    lines[found[0]] = indent + mutant.replacement.strip() + "\n"
    path.write_text("".join(lines))


ROWS = "tests/source/test_row_blocks.py::test_every_linear_read_in_row_blocks_equals_the_twin"
STREAMED = "tests/source/test_row_blocks.py::test_exports_streamed_in_small_row_blocks_equal_the_twin"
FAMILY = "tests/arch/test_families.py::test_logits_match_hf"
ROPE = "tests/model/test_rope.py::test_tables_match_hf_rotary_embedding"
KV = "tests/quant/test_kv_scales.py::test_scales_are_the_calibrated_range"
VERIFY = "tests/runtime/test_verify.py"
OVERWRITE = "tests/faults/test_overwrite.py"
CHECKPOINT = "tests/faults/test_checkpoint.py::test_broken_weights"

M = Mutant
# fmt: off
MUTANTS: list[Mutant] = [
    # --- import
    M("fp8-block-row-offset", "import", "gqa_export/source/fp8.py",
      "rows = scale[np.arange(a, b) // bn]  # [b - a, ceil(K / bk)]",
      "rows = scale[np.arange(0, b - a) // bn]  # [b - a, ceil(K / bk)]",
      [f"{ROWS}[fp8-block-48]", f"{ROWS}[ct-fp8-channel]", f"{ROWS}[moe-fp8-deepseek-block]"]),
    M("fp8-tensor-scale-ignored", "import", "gqa_export/source/fp8.py",
      "return w * scale.reshape(-1)[0]",
      "return w",
      [f"{ROWS}[fp8-tensor]", f"{ROWS}[ct-fp8-tensor]"]),
    M("bnb-int8-row-offset", "import", "gqa_export/source/bnb.py",
      "return (q * scb[a:b, None]) * INT8_STEP",
      "return (q * scb[: b - a, None]) * INT8_STEP",
      [f"{ROWS}[bnb-int8]"]),
    M("bnb-4bit-block-offset", "import", "gqa_export/source/bnb.py",
      "w = levels[codes] * absmax[np.arange(e0, e1) // bs - first]",
      "w = levels[codes] * absmax[np.arange(0, e1 - e0) // bs]",
      [f"{ROWS}[bnb-fp4]", f"{ROWS}[bnb-nf4-double]"]),
    M("bnb-nested-offset", "import", "gqa_export/source/bnb.py",
      "scaled = table[stored.astype(np.int64)] * outer[np.arange(first, last) // nbs]",
      "scaled = table[stored.astype(np.int64)] * outer[np.arange(0, last - first) // nbs]",
      [f"{ROWS}[bnb-nf4-nested-8]"]),
    M("native-zero-point-row-offset", "import", "gqa_export/source/native.py",
      "z = zp[a:b].astype(np.float32)[:, group_of]",
      "z = zp[: b - a].astype(np.float32)[:, group_of]",
      [f"{ROWS}[gptq-v1-4bit-act-order]", f"{ROWS}[awq-gemm]", f"{ROWS}[moe-gptq-qwen3-act-order]"]),
    M("native-scale-row-offset", "import", "gqa_export/source/native.py",
      "return (q - z) * scales[a:b][:, group_of]",
      "return (q - z) * scales[: b - a][:, group_of]",
      [f"{ROWS}[gptq-v1-4bit-act-order]", f"{ROWS}[ct-8bit-channel-sym]"]),
    M("gptq-codes-row-offset", "import", "gqa_export/source/native.py",
      'words = self.store.read(f"{self.prefix}.qweight", cols=(a, b))  # [K*b/32, b - a]',
      'words = self.store.read(f"{self.prefix}.qweight", cols=(0, b - a))  # [K*b/32, b - a]',
      [f"{ROWS}[gptq-v2-4bit-g16]"]),
    M("awq-codes-column-offset", "import", "gqa_export/source/native.py",
      "return np.ascontiguousarray(q[:, a - 8 * c0 : b - 8 * c0].T)",
      "return np.ascontiguousarray(q[:, : b - a].T)",
      [f"{ROWS}[awq-gemm]", f"{ROWS}[moe-awq-mixtral]"]),
    M("ct-packed-codes-row-offset", "import", "gqa_export/source/native.py",
      'words = self.store.read(f"{self.prefix}.weight_packed", rows=(a, b))',
      'words = self.store.read(f"{self.prefix}.weight_packed", rows=(0, b - a))',
      [f"{ROWS}[ct-4bit-act-order]", f"{ROWS}[moe-ct-8bit-mixtral]"]),
    M("quark-codes-column-offset", "import", "gqa_export/source/quark.py",
      "return np.ascontiguousarray(q[:, a - 8 * c0 : b - 8 * c0].T)",
      "return np.ascontiguousarray(q[:, : b - a].T)",
      [f"{ROWS}[quark-uint4]", f"{ROWS}[moe-quark-qwen3]"]),
    M("gguf-permuted-rows-offset", "import", "gqa_export/source/gguf/store.py",
      "return np.asarray(self.data[a:b] if self.rows is None else self.data[self.rows[a:b]])",
      "return np.asarray(self.data[a:b] if self.rows is None else self.data[self.rows[: b - a]])",
      ["tests/source/test_row_blocks.py::test_gguf_matrices_read_in_row_blocks_equal_the_whole_decode"]),
    M("safetensors-end-past-file", "import", "gqa_export/source/weights.py",
      "if data_start + end > size:",
      "if data_start + end > size + 1 << 40:",
      [f"{CHECKPOINT}[offsets-past-end]", f"{CHECKPOINT}[last-byte-missing]"]),
    M("index-shard-name-any-path", "import", "gqa_export/source/weights.py",
      'if Path(name).name != name or name in ("", ".", ".."):',
      'if name in ("", ".", ".."):',
      [f"{CHECKPOINT}[index-dotdot]", f"{CHECKPOINT}[index-subfolder]"]),
    M("config-vocab-unchecked", "import", "gqa_export/source/consistency.py",
      '_same("vocab_size", dims.vocab_size, rows, embed, (rows, cols))',
      "pass",
      ["tests/faults/test_checkpoint.py::test_broken_config"]),
    # --- quant
    M("kv-scale-x2", "quant", "gqa_export/quant/kv_cache.py",
      "scale = np.maximum(values * HEADROOM, 1e-6) / _QMAX[bits]",
      "scale = np.maximum(values * HEADROOM, 1e-6) / _QMAX[bits] * 2",
      [f"{KV}[int8-per-channel]", f"{KV}[int4-per-tensor]"]),
    M("kv-per-tensor-mean", "quant", "gqa_export/quant/kv_cache.py",
      'values = amax.reshape(-1) if kv.scales == "per-channel" else np.array([amax.max()])',
      'values = amax.reshape(-1) if kv.scales == "per-channel" else np.array([amax.mean()])',
      [f"{KV}[int8-per-tensor]"]),
    M("search-keeps-worst", "quant", "gqa_export/quant/nbits.py",
      "best_err = np.full((n, blocks), np.inf, dtype=np.float32)",
      "best_err = np.full((n, blocks), 0.0, dtype=np.float32)",
      ["tests/quant/test_quantize.py::test_searches_beat_round_to_nearest_of_their_own_kind"]),
    M("search-floor-not-round", "quant", "gqa_export/quant/nbits.py",
      "q = (np.clip(np.round(x / safe), -mid, qmax) + mid).astype(np.uint8)",
      "q = (np.clip(np.floor(x / safe), -mid, qmax) + mid).astype(np.uint8)",
      ["tests/quant/test_quantize.py::test_layout_matches_float_reference",
       "tests/quant/test_quantize.py::test_search_never_worse_than_rtn"]),
    M("k-quant-zero-point-unclipped", "quant", "gqa_export/quant/nbits.py",
      "q = np.clip(np.round(x / best_grid[..., None]) + best_zp[..., None], 0, qmax).astype(np.uint8)",
      "q = np.clip(np.round(x / best_grid[..., None]) + best_zp[..., None] + 1, 0, qmax).astype(np.uint8)",
      ["tests/quant/test_quantize.py::test_searches_beat_round_to_nearest_of_their_own_kind"]),
    M("gather-table-block-size", "quant", "gqa_export/quant/quantize.py",
      '{"gather_axis": 0, "quantize_axis": 2, "block_size": cfg.block_size, "bits": cfg.bits}',
      '{"gather_axis": 0, "quantize_axis": 2, "block_size": cfg.block_size // 2, "bits": cfg.bits}',
      ["tests/quant/test_quantize.py::test_quant_embeddings_flag_for_untied"]),
    M("gather-table-block-size-x2", "quant", "gqa_export/quant/quantize.py",
      '{"gather_axis": 0, "quantize_axis": 2, "block_size": cfg.block_size, "bits": cfg.bits}',
      '{"gather_axis": 0, "quantize_axis": 2, "block_size": cfg.block_size * 2, "bits": cfg.bits}',
      [], equivalent="the table is [V, k_blocks, blob] with one scale per (row, block): axis 2 holds one "
      "block, so any block_size of at least its element count reads the same scale (ran: survived)"),
    M("gather-zero-points-nibbles", "quant", "gqa_export/quant/quantize.py",
      "z = np.stack([z & 0x0F, z >> 4], axis=-1).reshape(n, -1)",
      "z = np.stack([z >> 4, z & 0x0F], axis=-1).reshape(n, -1)",
      ["tests/quant/test_layouts.py::test_a_tied_tables_zero_points_are_its_lm_heads"]),
    # --- graph
    M("rope-theta", "graph", "gqa_export/model/rope.py",
      "return (1.0 / (np.float32(rope.theta) ** exponent)).astype(np.float32)",
      "return (1.0 / (np.float32(rope.theta * 2) ** exponent)).astype(np.float32)",
      [f"{ROPE}[default]"]),
    M("rope-llama3-factor", "graph", "gqa_export/model/rope.py",
      "scaled = np.where(wavelen > low_wavelen, inv_freq / np.float32(factor), inv_freq).astype(np.float32)",
      "scaled = np.where(wavelen > low_wavelen, inv_freq * np.float32(factor), inv_freq).astype(np.float32)",
      [f"{ROPE}[llama3]"]),
    M("rope-yarn-mscale", "graph", "gqa_export/model/rope.py",
      "return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0",
      "return 1.0 if scale <= 1 else 0.2 * m * math.log(scale) + 1.0",
      [f"{ROPE}[yarn]", f"{ROPE}[yarn_mscale]"]),
    M("alibi-slope-base", "graph", "gqa_export/model/alibi.py",
      "base = np.float32(2 ** (-(2 ** -(math.log2(closest) - 3))))",
      "base = np.float32(2 ** (-(2 ** -(math.log2(closest) - 2))))",
      ["tests/arch/test_classics_alibi_fused_qkv.py::test_alibi_slopes_are_hf_own"]),
    M("sliding-window-off-by-one", "graph", "gqa_export/graph/masks.py",
      'allowed = b.op("And", allowed, b.op("Less", distance, window))',
      'allowed = b.op("And", allowed, b.op("LessOrEqual", distance, window))',
      ["tests/arch/test_families.py::test_standard_attention_matches_hf"]),
    M("norm-without-sqrt", "graph", "gqa_export/graph/primitive_norms.py",
      'inverse = add("Div", constants["one"], add("Sqrt", add("Add", mean, constants["eps"])))',
      'inverse = add("Div", constants["one"], add("Add", mean, constants["eps"]))',
      ["tests/graph/test_primitive_norms.py::test_primitive_norm_computes_the_contrib_op"]),
    M("moe-renormalize-flipped", "graph", "gqa_export/graph/moe.py",
      "normalize_routing_weights=int(moe.normalize and post_scale is None),",
      "normalize_routing_weights=int(not moe.normalize and post_scale is None),",
      [f"{FAMILY}[mixtral]", f"{FAMILY}[qwen3_moe_norm_v5]"]),
    M("attention-softcap-dropped", "graph", "gqa_export/graph/attention.py",
      "softcap=dims.attn_softcap,",
      "softcap=0.0,",
      [f"{FAMILY}[gemma2_softcap_window]"]),
    # --- package
    M("genai-eos-first-only", "package", "gqa_export/package/genai_config.py",
      '"eos_token_id": eos if len(eos) != 1 else eos[0],',
      '"eos_token_id": eos[0],',
      ["tests/package/test_genai_config.py::test_eos_list_merges_config_and_generation_config"]),
    M("manifest-digest-trusts-size", "package", "gqa_export/package/staging.py",
      'if path.name in known and known[path.name]["bytes"] == path.stat().st_size:',
      "if path.name in known:",
      ["tests/package/test_file_digests.py"]),
    # --- guard
    M("staging-kept-on-failure", "guard", "gqa_export/package/staging.py",
      "shutil.rmtree(self.path, ignore_errors=True)",
      "pass",
      ["tests/package/test_package.py::test_staging_is_removed_on_failure_and_renamed_on_commit"]),
    # --- verify
    M("verify-ignores-sha256", "verify", "gqa_export/runtime/verify.py",
      'elif not isinstance(entry, dict) or hashes.of(file) != entry.get("sha256"):',
      "elif not isinstance(entry, dict):",
      [f"{VERIFY}::test_one_changed_byte_fails_naming_the_file"]),
    M("verify-ignores-extra-files", "verify", "gqa_export/runtime/verify.py",
      "for name in sorted(present - set(expected) - allowed):",
      "for name in sorted(set(expected) - present):",
      [f"{VERIFY}::test_missing_and_extra_files_are_named"]),
    M("seal-digest-unchecked", "verify", "gqa_export/package/manifest.py",
      "if data[DIGEST_KEY] != canonical_digest(data):",
      "if False:",
      [f"{VERIFY}::test_one_changed_byte_in_the_manifest_fails"]),
    # --- release
    M("release-path-dotdot", "release", "gqa_export/release/spec.py",
      'if PurePosixPath(path).is_absolute() or ".." in PurePosixPath(path).parts or "\\\\" in path or not path.strip("/"):',  # noqa: E501
      'if PurePosixPath(path).is_absolute() or "\\\\" in path or not path.strip("/"):',
      ["tests/release/test_release.py::test_spec_errors_name_file_line_and_key"]),
    M("release-nested-variants", "release", "gqa_export/release/spec.py",
      'if same or variant.path.startswith(other.path + "/") or other.path.startswith(variant.path + "/"):',
      "if same:",
      ["tests/release/test_release.py::test_spec_errors_name_file_line_and_key"]),
    M("release-gate-inverted", "release", "gqa_export/release/evaluation.py",
      "if increase > variant.gate.max_ppl_increase:",
      "if increase < variant.gate.max_ppl_increase:",
      ["tests/release/test_release.py::test_a_tripped_gate_publishes_nothing_and_every_failing_gate_is_named"]),
    # --- guard
    M("guard-output-contains-input", "guard", "gqa_export/package/ownership.py",
      "if out in other.parents:",
      "if False:",
      [f"{OVERWRITE}::test_build_into_a_folder_that_holds_the_model",
       f"{OVERWRITE}::test_build_into_a_parent_of_the_current_directory"]),
    M("guard-unlisted-files", "guard", "gqa_export/package/ownership.py",
      "if unknown:",
      "if False:",
      [f"{OVERWRITE}::test_build_over_its_own_package_with_a_user_file_added"]),
    M("guard-foreign-folder", "guard", "gqa_export/package/ownership.py",
      'return f"is not empty and holds no {MANIFEST} or {RELEASE} of gqa-export ({_names(entries)})"',
      "return None",
      [f"{OVERWRITE}::test_build_over_a_documents_folder"]),
    M("guard-manifest-of-another-tool", "guard", "gqa_export/package/ownership.py",
      'if data is None or not isinstance(data.get("tool"), dict) or data["tool"].get("name") != TOOL:',
      'if data is None or not isinstance(data.get("tool"), dict):',
      [f"{OVERWRITE}::test_build_over_an_unrelated_manifest"]),
    M("guard-file-without-overwrite", "guard", "gqa_export/package/ownership.py",
      "if not overwrite:",
      "if False:",
      ["tests/faults/test_adapter_outputs.py::test_replaces_its_own_adapter_only_with_overwrite"]),
    # --- check
    M("draft-lint-skips-target", "check", "gqa_export/package/draft.py",
      "if target_facts is not None and _pruned(target_facts):",
      "if False:",
      ["tests/check/test_draft_target_lint.py::test_a_target_with_pruned_logits_is_a_draft_pairing_error"]),
    # --- runtime
    M("report-l2-without-root", "runtime", "gqa_export/runtime/logit_error.py",
      '"relative_l2": float(np.sqrt(diff / norm)),',
      '"relative_l2": float(diff / norm),',
      ["tests/runtime/test_logit_error.py::test_known_answer"]),
    M("eval-accuracy-delta-sign", "runtime", "gqa_export/runtime/evaluate.py",
      '"accuracy_delta": scores.accuracy - reference.accuracy,',
      '"accuracy_delta": reference.accuracy - scores.accuracy,',
      ["tests/runtime/test_eval_delta.py::test_known_answer"]),
    M("ngram-size-dropped", "runtime", "gqa_export/package/draft.py",
      'return {"ngram_size": ngram, **{k: v for k, v in given.items() if v is not None}}',
      'return {"ngram_size": ngram + 1, **{k: v for k, v in given.items() if v is not None}}',
      ["tests/runtime/test_speculative.py::test_ngram_tokens_equal_plain"]),
    # --- graph: the latent-attention families of issue #39 item 3 (MiniCPM3, GLM-4-MoE-Lite)
    M("minicpm3-residual-depth-scale-dropped", "graph", "gqa_export/model/multipliers.py",
      "return 1.0 if depth is None else float(depth) / math.sqrt(num_layers)",
      "return 1.0",
      [f"{FAMILY}[minicpm3]"]),
    M("minicpm3-inputs-embeds-scaled-twice", "graph", "gqa_export/model/dims.py",
      'embedding_scaled_in_table=spec.embedding_scale in ("sqrt_hidden", "config_in_table"),',
      'embedding_scaled_in_table=spec.embedding_scale == "sqrt_hidden",',
      ["tests/arch/test_latent_families.py::test_minicpm3_inputs_embeds_come_scaled"]),
    M("latent-rope-pairs-by-default", "graph", "gqa_export/model/latent.py",
      'interleaved=bool(opt("rope_interleave", spec.rope_interleaved)),',
      'interleaved=bool(opt("rope_interleave", True)),',
      [f"{FAMILY}[minicpm3]"]),
    M("mlp-layer-types-ignored", "graph", "gqa_export/model/layer_kinds.py",
      "if kinds is not None:",
      "if False:",
      [f"{FAMILY}[glm4_moe_lite]"]),
    # --- graph: LongCat-Flash's sublayers, shortcut MoE, zero experts and MLA lora scales
    M("zero-experts-term-dropped", "graph", "gqa_export/graph/moe.py",
      'return out if identity is None else b.op("Add", out, identity, name="add_zero_experts")',
      "return out",
      [f"{FAMILY}[longcat_flash]"]),
    M("shortcut-moe-added-a-sublayer-early", "graph", "gqa_export/graph/shortcut_moe.py",
      "lc.shortcut[lc.i + lc.spec.sublayers - 1] = sparse_mlp(lc, x)",
      "lc.shortcut[lc.i] = sparse_mlp(lc, x)",
      [f"{FAMILY}[longcat_flash]"]),
    M("longcat-lora-scales-dropped", "graph", "gqa_export/model/latent.py",
      "lat = replace(lat, q_scale=(hidden / lat.q_lora_rank) ** 0.5, kv_scale=(hidden / lat.kv_lora_rank) ** 0.5)",
      "lat = replace(lat, q_scale=1.0, kv_scale=1.0)",
      [f"{FAMILY}[longcat_flash]"]),
    M("sublayers-read-the-first-sublayer", "graph", "gqa_export/arch/spec.py",
      'i, module = i // self.sublayers, module.replace("{s}", str(i % self.sublayers))',
      'i, module = i // self.sublayers, module.replace("{s}", "0")',
      [f"{FAMILY}[longcat_flash]"]),
    # --- graph: MiniMax's lightning attention and scaled normed residual
    M("lightning-pad-decays-the-state", "graph", "gqa_export/graph/lightning.py",
      'decay = b.op("Mul", lc.padding.keep, rates, name="decay")',
      'decay = b.op("Mul", b.op("Exp", b.op("Sub", lc.padding.keep, lc.padding.keep)), rates, name="decay")',
      ["tests/arch/test_families.py::test_ragged_batch_through_ort_equals_hf_row_by_row[minimax-gqa]"]),
    M("lightning-layer-factor-dropped", "graph", "gqa_export/graph/lightning.py",
      "factor = np.float32(1 - layer / (layers - 1 + 1e-5) + 1e-5)",
      "factor = np.float32(1.0)",
      ["tests/arch/test_hybrid_minimax.py::test_computed_slopes_equal_the_buffers_hf_saves"]),
    M("normed-residual-from-the-stream", "graph", "gqa_export/graph/decoder.py",
      'return normed_residual_layer(lc, x, y, "attention" if state is None else "state", _norm, _mlp), kv',
      'return normed_residual_layer(lc, h, y, "attention" if state is None else "state", _norm, _mlp), kv',
      [f"{FAMILY}[minimax]"]),
    # --- graph: Kimi-Linear's KDA (graph/kda_gates.py) and its checkpoint layouts (source/aliases.py)
    M("kda-decay-scale-tiled", "graph", "gqa_export/graph/kda_gates.py",
      "return np.repeat(sign * np.exp(v.reshape(-1)), d.key_dim).astype(np.float32)",
      "return np.tile(sign * np.exp(v.reshape(-1)), d.key_dim).astype(np.float32)",
      [f"{FAMILY}[kimi_linear]"]),
    M("kda-gate-silu", "graph", "gqa_export/graph/gated_deltanet.py",
      'if names.gate == "sigmoid":  # Kimi\'s KDA',
      "if False:",
      [f"{FAMILY}[kimi_linear]"]),
    M("conv-parts-over-the-whole-kernel", "graph", "gqa_export/graph/recurrent_state.py",
      "stacked = bool(parts) and weight_name not in lc.params.store  # else the whole kernel (5.x)",
      "stacked = bool(parts)",
      ["tests/arch/test_hybrid_kimi_linear.py::test_the_v5_layout_matches_hf"]),
    M("tensor-aliases-ignored", "import", "gqa_export/plan/model_phase.py",
      "if spec.tensor_aliases:  # a layer's modules spelled another way (source/aliases.py)",
      "if False:",
      ["tests/arch/test_hybrid_kimi_linear.py::test_the_saved_layout_exports_the_hub_layouts_package"]),
    # --- graph: Ling 3's bounded KDA gate, gate per head, limited SwiGLU (docs/hybrid-state.md §8.20)
    M("kda-bounded-gate-ignored", "graph", "gqa_export/model/layer_kinds.py",
      'bound = float(opt("linear_decay_bound", -5.0)) if bounded else None',
      "bound = None",
      [f"{FAMILY}[bailing_hybrid]"]),
    M("head-gate-skipped", "graph", "gqa_export/graph/output_gate.py",
      "own = gate is None and module is not None and lc.has(module)",
      "own = False",
      [f"{FAMILY}[bailing_hybrid]"]),
    # --- graph: A.X-K2's value gate and gated norms (docs/coverage.md)
    M("latent-value-gate-skipped", "graph", "gqa_export/graph/latent_attention.py",
      'gate = lc.output_gate.get("value_gate")',
      "gate = None",
      [f"{FAMILY}[axk2]"]),
    M("gated-norm-gate-skipped", "graph", "gqa_export/graph/gated_norm.py",
      'return b.op("Mul", y, gate, name=f"{name}_gated")',
      "return y",
      [f"{FAMILY}[axk2]"]),
    M("swiglu-limit-not-moved", "graph", "gqa_export/graph/limited_swiglu.py",
      "moved = float(np.float32(inverse_silu(limit)))",
      "moved = float(limit)",
      [f"{FAMILY}[bailing_hybrid]"]),
    M("shared-swiglu-limit-dropped", "graph", "gqa_export/graph/limited_swiglu.py",
      "if not limit:",
      "if True:",
      [f"{FAMILY}[bailing_hybrid]"]),
    M("mtp-layers-counted", "import", "gqa_export/source/consistency.py",
      "if stored and stored not in (dims.num_layers, dims.num_layers + trailing * spec.sublayers):",
      "if stored and stored != dims.num_layers:",
      ["tests/arch/test_hybrid_bailing.py::test_a_stored_mtp_layer_is_not_read"]),
]
# fmt: on
