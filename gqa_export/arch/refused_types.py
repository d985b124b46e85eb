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

# the line for a multimodal class not read yet (a type transformers adds); every one read so far has its own
# line saying what its decoder or class needs (docs/coverage.md §21)
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
    "mllama": "Llama-3.2-Vision's cross-attention layers read image states no onnxruntime-genai decoder type feeds",
    "moshi": "Moshi's depth transformer over audio codebooks is not a text decoder onnxruntime-genai runs",
    "moss_transcribe_diarize": "a speech model whose decoder needs its audio encoder; not built",
    "paligemma": "PaliGemma's decoder attends bidirectionally over its prefix (the image and the prompt, "
    "use_bidirectional_attention set by its config class) and causally after it, which no onnxruntime-genai type "
    "feeds; on a text prompt alone transformers' result depends on the attention kernel (sdpa: the whole prompt "
    "bidirectional), so no causal decoder matches it",
    "blip": "BLIP's text decoder cross-attends to the image features in every layer and its forward requires "
    "pixel_values; no onnxruntime-genai decoder type feeds cross-attention states",
    "diffusion_gemma": "DiffusionGemma is a block-diffusion model (DiffusionGemmaForBlockDiffusion): it denoises "
    "blocks of masked tokens, attending both ways within a block, not a left-to-right decoder with a KV cache",
    "evolla": "Evolla's decoder layers cross-attend to its protein encoder's compressed states (the sequence "
    "aligner), which no onnxruntime-genai decoder type feeds",
    "git": "GIT's decoder is a BERT-style post-LayerNorm transformer (an embedding LayerNorm) over the image tokens, "
    "which attend to one another as a block, and the causal text after them; no exported family is it",
    "idefics": "IDEFICS' decoder interleaves gated cross-attention layers that read the perceiver's image states, "
    "which no onnxruntime-genai decoder type feeds",
    "pi0": "pi0 is a robot action policy (a flow-matching action expert beside PaliGemma's prefix), not a text "
    "decoder onnxruntime-genai runs",
    "pp_formulanet": "PP-FormulaNet's text model is an MBart decoder that cross-attends to its vision encoder: the "
    "decoder half of an encoder-decoder, which no onnxruntime-genai decoder type feeds",
    # read for the wrapped decoders (docs/coverage.md §21): why each class is not one of them
    **_each(
        "its forward requires pixel_values (the Q-Former's query tokens always precede the prompt), so the OPT "
        "decoder alone never computes its logits; the vision tower and Q-Former are not built",
        "blip-2", "instructblip", "instructblipvideo",
    ),
    **_each(
        "its text-only forward is not checked against its decoder's: the class builds a timm vision tower "
        "(TimmWrapperModel) and timm is not installed with gqa-export; the tower and projector are not built",
        "fast_vlm", "perception_lm",
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
