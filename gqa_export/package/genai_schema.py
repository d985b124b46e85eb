"""The keys ORT GenAI's strict genai_config parser accepts (docs/ortgenai.md §1.1), for the lints.

Unknown keys under these objects make the runtime throw `Unknown value "<key>"` at load, except
inside `session_options` (passed to ORT as config entries) and provider option values.
"""

from __future__ import annotations

from typing import Any

_DECODER_IO_INPUTS = {
    "input_ids", "inputs_embeds", "attention_mask", "position_ids", "past_key_names", "past_value_names", "past_names",
    "cross_past_key_names", "cross_past_value_names", "past_key_values_length", "past_sequence_length",
    "current_sequence_length", "total_sequence_length", "cache_indirection", "encoder_hidden_states",
    "encoder_attention_mask", "rnn_states_prev", "cumulative_sequence_lengths", "past_sequence_lengths", "block_table",
    "block_table_windowed", "attention_metadata", "past_conv_names", "past_recurrent_names", "hidden_states",
    "targets", "lstm_hidden_state", "lstm_cell_state", "targets_length", "per_layer_inputs",
}  # fmt: skip
_DECODER_IO_OUTPUTS = {
    "logits", "present_key_names", "present_value_names", "present_names", "output_cross_qk_names", "rnn_states",
    "present_conv_names", "present_recurrent_names", "hidden_states", "outputs", "lstm_hidden_state",
    "lstm_cell_state", "outputs_length",
}  # fmt: skip
_STAGE = {
    "filename", "session_options", "inherit_session_options", "run_options", "inputs", "outputs",
    "output_names_forwarder", "run_on_prompt", "run_on_token_gen", "is_lm_head", "reset_session_idx",
}  # fmt: skip
_DECODER = {
    "filename", "hidden_size", "num_attention_heads", "num_key_value_heads", "head_size", "num_hidden_layers",
    "conv_cache_size", "session_options", "run_options", "shared_initializers", "inputs", "outputs", "sliding_window",
    "pipeline", "layer_types",
}  # fmt: skip
_MODEL = {
    "type", "bos_token_id", "pad_token_id", "sep_token_id", "decoder_start_token_id", "eos_token_id", "context_length",
    "vocab_size", "tokenizer_dir", "image_token_id", "audio_token_id", "boa_token_id", "video_token_id",
    "vision_start_token_id", "bot_token_id", "eot_token_id", "bor_token_id", "eor_token_id", "encoder", "decoder",
    "draft", "vision", "embedding", "speech", "joiner", "vad", "mtp",
}  # fmt: skip
_SEARCH = {
    "max_length", "min_length", "batch_size", "num_beams", "num_return_sequences", "do_sample", "top_k", "top_p",
    "temperature", "repetition_penalty", "no_repeat_ngram_size", "length_penalty", "diversity_penalty",
    "early_stopping", "past_present_share_buffer", "random_seed", "chunk_size", "blank_penalty",
}  # fmt: skip
_SLIDING = {"window_size", "pad_value", "alignment", "slide_key_value_cache", "slide_inputs", "layers", "cache_slack"}
_ROOT = {"model", "search", "speculative", "engine"}


def unknown_keys(config: dict[str, Any]) -> list[str]:
    """Dotted paths of keys the runtime's parser would reject."""
    bad: list[str] = []

    def check(obj: Any, allowed: set[str], path: str) -> None:
        if not isinstance(obj, dict):
            return
        bad.extend(f"{path}.{k}" if path else k for k in obj if k not in allowed)

    check({k: v for k, v in config.items() if isinstance(v, dict)}, _ROOT, "")
    model = config.get("model", {})
    check(model, _MODEL, "model")
    check(config.get("search", {}), _SEARCH, "search")
    decoder = model.get("decoder", {}) if isinstance(model, dict) else {}
    check(decoder, _DECODER, "model.decoder")
    check(decoder.get("inputs", {}), _DECODER_IO_INPUTS, "model.decoder.inputs")
    check(decoder.get("outputs", {}), _DECODER_IO_OUTPUTS, "model.decoder.outputs")
    check(decoder.get("sliding_window", {}), _SLIDING, "model.decoder.sliding_window")
    pipeline = decoder.get("pipeline", [])
    entries = pipeline if isinstance(pipeline, list) else [pipeline]
    for entry in entries:
        for stage_id, stage in (entry or {}).items():
            check(stage, _STAGE, f"model.decoder.pipeline.{stage_id}")
    return bad
