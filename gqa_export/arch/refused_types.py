"""Model types the installed transformers maps to a causal LM or an image-text-to-text model that
gqa-export does not export, each with the one line `build` says (exit 2, before any weight is read)
and the coverage table prints (arch/coverage.py).

REFUSED: decoders not exported (yet): what stands in the way, named by mechanism. NOT_APPLICABLE:
types whose causal-LM class is not a decoder-only LM (an encoder's LM head run with is_decoder,
the decoder half of an encoder-decoder). A type that transformers adds later and that is in
neither, nor matched by a recipe, fails tests/arch/test_coverage.py until it gets an entry.
docs/coverage.md says what the runtime would need for the mechanisms it cannot run.
"""

from __future__ import annotations

_MULTIMODAL = "its vision tower and projector are not built, and no recipe exports its decoder under this class"


# Gemma4AssistantForCausalLM (and its Gemma4Unified subclass): a drafter for HF's assisted generation
_GEMMA4_ASSISTANT = (
    "Gemma-4's assistant is a multi-token-prediction drafter, not a decoder: each step reads [the target's "
    "embedding of the token | the target's last hidden state], and every layer attends to the target's own KV "
    "cache (its last full and last sliding layer: num_kv_shared_layers is every layer); onnxruntime-genai 0.18's "
    "draft model runs on its own input_ids and KV cache, its MTP head (model.mtp) on one layer with its own cache, "
    "and neither can be fed the target's keys and values"
)


def _each(reason: str, *model_types: str) -> dict[str, str]:
    return dict.fromkeys(model_types, reason)


REFUSED: dict[str, str] = {
    # listed in issue #39 item 3, not built yet: what each needs
    "phi4_multimodal": "Phi-4-multimodal (genai's phi4mm package) needs its HD-transform image tower (448-pixel "
    "crops plus a global view joined by learned separators), its speech tower and the vision/speech LoRA adapters of "
    "its text decoder, none of which gqa-export builds",
    "mllama": "Llama-3.2-Vision's cross-attention layers read image states no onnxruntime-genai decoder type feeds",
    "moshi": "Moshi's depth transformer over audio codebooks is not a text decoder onnxruntime-genai runs",
    "moss_transcribe_diarize": "a speech model whose decoder needs its audio encoder; not built",
    "paligemma": "PaliGemma's decoder attends bidirectionally over its prefix (the image and the prompt, "
    "use_bidirectional_attention set by its config class) and causally after it, which no onnxruntime-genai type "
    "feeds; on a text prompt alone transformers' result depends on the attention kernel (sdpa: the whole prompt "
    "bidirectional), so no causal decoder matches it",
    **_each(
        _MULTIMODAL,
        "blip", "blip-2", "chameleon", "cosmos3_edge", "cosmos3_omni", "deepseek_ocr2", "diffusion_gemma", "dots3_note",
        "emu3", "ernie4_5_vl_moe", "evolla", "fast_vlm", "git", "glm46v", "glm4v", "glm4v_moe", "glm5_next", "glm_ocr",
        "glmga", "granite4_vision", "granite_docling", "hunyuan_vl", "hy_v4_vl", "hyperclovax_vision_v2", "idefics",
        "inkling2", "inkling2_loop", "inkling_mm_model", "instructblip", "instructblipvideo", "kimi_k25", "kosmos-2",
        "mistral4", "mistral_large4", "molmo2", "muse_glimmer", "muse_spark", "paddleocr_vl", "perception_lm", "pi0",
        "pp_formulanet", "qwen2_5_omni_thinker", "qwen3_omni_moe_thinker", "step3p7", "unlimited_ocr",
    ),
    # issue #39, read from its modeling code (docs/coverage.md: what the runtime would need)
    "cpmant": "CPM-Ant's forward prepends prompt_length learned prompt tokens to every sequence (its KV cache runs "
    "that many positions ahead of the tokens onnxruntime-genai counts in attention_mask), attends bidirectionally "
    "over the whole prompt, and its tokenizer cuts text with jieba before WordPiece, which onnxruntime-genai's "
    "tokenizer cannot",
    # new in transformers 5.25 (read from its modeling code)
    "kolibri1_1": "Kolibri-1.1's indexed attention layers keep, per query, a weightless indexer's top index_topk keys "
    "of a pooled candidate set plus sink and local tokens (a per-query mask GroupQueryAttention cannot take), with "
    "keys and values rounded to NVFP4 there, and layers that read another layer's keys and values; no spec",
    "llava_onevision1_5": "LLaVA-OneVision-1.5's RICE vision tower and patch-merger projector are not built, and no "
    "recipe exports its Qwen3 decoder under this class",
    "ovis2_5": "Ovis2.5's visual tokenizer (a NaViT tower whose patch probabilities weight a visual embedding table) "
    "is not built, and no recipe exports its Qwen3 decoder under this class",
    "pi05": "pi0.5 is a robot action policy (a flow-matching action expert beside PaliGemma's prefix), not a text "
    "decoder onnxruntime-genai runs",
    # read from their modeling code in transformers 5.25 (issue #39): what genai cannot be fed
    **_each(
        _GEMMA4_ASSISTANT,
        "gemma4_assistant",
        "gemma4_unified_assistant",
    ),
    "blt": "BLT's global transformer runs over byte patches whose boundaries a second model (its entropy patcher) "
    "draws from the input, recomputed every forward without a KV cache, and its byte decoder cross-attends to the "
    "patch states; onnxruntime-genai's KV cache grows one position per token, never per patch, and it feeds no "
    "cross-attention states",
    "reformer": "Reformer's LSH and chunked local attention with reversible layers has no onnxruntime op",
    "xlnet": "XLNet's two-stream relative-position permutation LM is not a left-to-right decoder with a KV cache",
}  # fmt: skip

_ENCODER = "an encoder (masked-LM family) whose causal-LM class runs its layers with is_decoder for an encoder-decoder"
_ENCODER_DECODER = "the decoder half of an encoder-decoder model: it attends to an encoder's states"
NOT_APPLICABLE: dict[str, str] = {
    **_each(
        _ENCODER,
        "bert", "big_bird", "camembert", "data2vec-text", "electra", "ernie", "megatron-bert", "rembert", "roberta",
        "roberta-prelayernorm", "roc_bert", "roformer", "xlm", "xlm-roberta", "xlm-roberta-xl", "xmod",
    ),
    **_each(
        _ENCODER_DECODER,
        "bart", "bert-generation", "bigbird_pegasus", "blenderbot", "blenderbot-small", "florence2", "kosmos-2.5",
        "marian", "mbart", "musicgen", "musicgen_melody", "mvp", "pegasus", "pix2struct", "plbart", "prophetnet",
        "t5gemma2", "trocr", "udop", "vision-encoder-decoder", "whisper",
    ),
}  # fmt: skip


def refusal_for(*model_types: str) -> str | None:
    """The one-line reason a checkpoint of one of these types (its own, its text decoder's) is not
    exported, or None: what `build` says, exit 2, before any weight is read."""
    for model_type in model_types:
        if model_type in REFUSED:
            return f"model_type '{model_type}' is not exported: {REFUSED[model_type]}"
        if model_type in NOT_APPLICABLE:
            return f"model_type '{model_type}' is not a decoder-only causal LM: {NOT_APPLICABLE[model_type]}"
    return None
