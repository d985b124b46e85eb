"""config.json against the weights, before any graph is built.

transformers fills a key missing from config.json with its class default (a Llama without
`hidden_size` gets 4096), so neither a missing key nor a wrong value fails on reading; the export
would then build a graph the weights do not fit, and fail much later with an onnxruntime shape
error that never names the config. Here the shapes the config implies are checked against the
stored tensors, and each mismatch is one sentence naming the key (the raw keys' presence and
types are model/raw_config.py's).
"""

from __future__ import annotations

from gqa_export.arch.spec import ArchSpec
from gqa_export.errors import InputError
from gqa_export.model.dims import ModelDims
from gqa_export.model.layer_ropes import projected_head_dim
from gqa_export.source.weights import WeightStore


def check_against_weights(dims: ModelDims, spec: ArchSpec, store: WeightStore, trailing: int = 0) -> None:
    """The config's sizes against the embedding, the layer count and each layer's projections.
    `trailing`: layers a checkpoint may store after the decoder's, never read (the multi-token-prediction
    layers of DeepSeek-V3 and Ling 3, the config's num_nextn_predict_layers)."""
    embed = spec.tensor(spec.embed)
    if embed in store:
        rows, cols = store.info(embed).shape[:2]
        _same("hidden_size", dims.hidden_size, cols, embed, (rows, cols))
        _same("vocab_size", dims.vocab_size, rows, embed, (rows, cols))
    if dims.tie_word_embeddings and 0 < dims.logits_vocab < dims.vocab_size:  # its class never ties (Molmo2)
        raise InputError(
            f"the checkpoint has no {spec.lm_head} for the {dims.logits_vocab} logits, and the embedding's "
            f"{dims.vocab_size} rows are not that head; the checkpoint is incomplete"
        )
    if dims.logits_vocab and spec.lm_head in store:  # a pruned head (Apertus-1.5): output_vocab_size rows
        rows = store.info(spec.lm_head).shape[0]
        if not (spec.head_rows_dropped and rows == dims.vocab_size):  # else its first rows are read (Inkling)
            _same("output_vocab_size", dims.logits_vocab, rows, spec.lm_head, (rows,))
    stored_layers = _stored_layers(spec, store)
    # a stored layer of `sublayers` graph layers each (LongCat-Flash: two)
    stored = (max(stored_layers) + 1) * spec.sublayers if stored_layers else 0
    # a loop's graph layers run fewer stored ones (Dory: the recurrent ones once per pass)
    layers = dims.recurrent_loop.stored if dims.recurrent_loop is not None else dims.num_layers
    if stored and stored not in (layers, layers + trailing * spec.sublayers):
        raise InputError(
            f"config.json says num_hidden_layers {layers} but the checkpoint holds "
            f"{stored} layers; the config does not belong to these weights"
        )
    for i, layer in enumerate(dims.layers):
        # a graph layer's stored layer where several read one (HRM-Text's stacks: ArchSpec.layer_prefixes)
        prefix = f"{spec.prefix}{spec.layer_prefixes[i] if spec.layer_prefixes else spec.layer_prefix.format(i=i)}"
        names = spec.layer
        q = f"{prefix}{names.q}.weight"
        # a recurrent-state layer's own q_proj (Kimi's KDA under self_attn) is not attention's
        if names.qkv is None and q in store and not layer.shares_kv and layer.attends:
            shape = store.info(q).shape
            gate = 2 if spec.attention_output_gate else 1  # Qwen3.5: each head's query and output gate
            width = (
                gate * dims.of_layer(layer).num_heads * projected_head_dim(spec, layer.head_dim)
            )  # Laguna, DiffLlama, Doge
            _same("num_attention_heads / head_dim", width, shape[0], q, shape)
            _same("hidden_size", dims.hidden_size, shape[1], q, shape)
            k = f"{prefix}{names.k}.weight"
            if k in store:  # a stray num_key_value_heads the class never reads would otherwise fail in onnxruntime
                shape = store.info(k).shape
                width = layer.num_kv_heads * projected_head_dim(spec, layer.head_dim)
                _same("num_key_value_heads / head_dim", width, shape[0], k, shape)
        down = f"{prefix}{names.down}.weight"
        dense_only = spec.moe is None or (spec.moe.layer_type is not None and not layer.sparse)
        if dense_only and down in store and len(store.info(down).shape) == 2:
            shape = store.info(down).shape
            if spec.linear_layout == "in_out":  # Conv1D: stored [in, out]
                shape = shape[::-1]
            _same("intermediate_size", layer.intermediate_size, shape[1], down, shape)
            _same("hidden_size", dims.hidden_size, shape[0], down, shape)
        _check_mamba(dims, spec, store, prefix, layer.mixer)


def _check_mamba(dims: ModelDims, spec: ArchSpec, store: WeightStore, prefix: str, mixer: str) -> None:
    """A Mamba layer's inner width (intermediate_size, or expand x hidden_size) and state sizes against
    its projections: the graph splits in_proj's output by them, so a config that does not fit stopped
    only at onnxruntime's load, naming a Split node."""
    if spec.mixers is None or mixer not in ("mamba", "mamba2"):
        return
    if mixer == "mamba" and dims.mamba is not None and not spec.mixers.mamba.per_head:
        m, names = dims.mamba, spec.mixers.mamba
        expected = {
            names.in_proj: (f"Mamba inner width {m.inner}: intermediate_size, or expand x hidden_size", 2 * m.inner),
            names.x_proj: (f"time_step_rank {m.dt_rank} and state_size {m.state}", m.dt_rank + 2 * m.state),
        }
    elif mixer == "mamba2" and dims.mamba2 is not None:
        m2 = dims.mamba2
        what = f"Mamba2 sizes (heads {m2.heads} x head_dim {m2.head_dim}, n_groups {m2.groups}, state_size {m2.state})"
        expected = {
            spec.mixers.mamba2.in_proj: (what, 2 * m2.heads * m2.head_dim + 2 * m2.groups * m2.state + m2.heads)
        }
    else:
        return
    for name, (what, rows) in expected.items():
        tensor = f"{prefix}{name}.weight"
        if tensor in store and (shape := store.info(tensor).shape)[0] != rows:
            raise InputError(
                f"{tensor} is {list(shape)} where config.json implies {rows} rows ({what}); "
                "the config does not belong to these weights (fix config.json)"
            )


def _stored_layers(spec: ArchSpec, store: WeightStore) -> set[int]:
    head, _, tail = f"{spec.prefix}{spec.layer_prefix}".partition("{i}")
    found = set()
    for name in store.names():
        if name.startswith(head):
            index = name[len(head) :].split(tail, 1)[0] if tail else name[len(head) :]
            if index.isdigit():
                found.add(int(index))
    return found


def _same(key: str, expected: int, stored: int, tensor: str, shape: tuple[int, ...]) -> None:
    if expected != stored:
        raise InputError(
            f"config.json's {key} gives {expected} but {tensor} is {list(shape)}; "
            "the config does not belong to these weights (fix config.json)"
        )
