"""Small frozen records an `ArchSpec` holds (arch/spec.py re-exports them, where the families import them):
a config value refused with its line, spec fields a config key chooses, a learned or sinusoidal absolute
position table, and multimodal placeholder runs that attend both ways."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Refusal:
    """A config value the graph builder does not implement: refused with `message`.

    `values` lists the refused values; empty means any truthy value. A list-valued key (a
    per-layer pattern such as `layer_types`) is refused when any of its entries is."""

    config_key: str
    message: str
    values: tuple[Any, ...] = ()
    differs_from: str | None = None  # refused when the value differs from this config key's (OPT's projections)
    below: str | None = None  # refused only when the value is under this config key's (a window past the context)

    @property
    def other_key(self) -> str | None:
        """The config key `applies` compares the value with, if any."""
        return self.differs_from or self.below

    def applies(self, value: Any, other: Any = None) -> bool:
        if self.differs_from is not None:
            return value is not None and value != other
        if self.below is not None:
            return bool(value) and (other is None or value < other)
        if self.values and isinstance(value, (list, tuple)):
            return any(v in self.values for v in value)
        return value in self.values if self.values else bool(value)

    def where(self, value: Any) -> str:
        """The refused value as the message ends with it: `key=value`, or for a list the first
        refused entry and its index (a 52-layer pattern would not fit on the line)."""
        if self.values and isinstance(value, (list, tuple)):
            hits = [i for i, v in enumerate(value) if v in self.values]
            more = f" and {len(hits) - 1} more" if len(hits) > 1 else ""
            return f"{self.config_key}[{hits[0]}]={value[hits[0]]!r}{more}"
        return f"{self.config_key}={value!r}"


# a sliding_window in the config of a class that never windows its attention (another family's key, a template's
# leftover): transformers' forward attends to everything, but the cache it builds from that config keeps only the
# last sliding_window keys when decoding, so its generate is not its forward, and no one function is HF's. A window
# of max_position_embeddings or more never trims within the context (max_length cannot pass it): exported as is.
STRAY_WINDOW = Refusal(
    "sliding_window",
    "a sliding_window shorter than max_position_embeddings is not exported here: the class never windows its "
    "attention, but transformers' cache built from the config keeps only the last sliding_window keys when decoding "
    "(its generate differs from its forward); set it to null",
    below="max_position_embeddings",
)


@dataclass(frozen=True)
class ConfigChoice:
    """Spec fields a config key chooses between, for a class whose modeling code branches on it
    (Molmo2's qk_norm_type picks Qwen3's per-head or OLMo's full-width q/k norms, its norm_after the
    pre- or post-norm layer): `options` maps each value the class accepts to the ArchSpec fields it sets
    (model/spec_choices.chosen_spec); a value not listed is refused in one line naming the key."""

    config_key: str
    options: Mapping[Any, Mapping[str, Any]]


@dataclass(frozen=True)
class AbsolutePositions:
    """A learned absolute position table (GPT-2's wpe, OPT's embed_positions), relative to the
    decoder root: row `position + offset` is added to each token's embedding, the position counted
    from attention_mask as HF generate counts it (OPT's table starts `offset` 2 rows in)."""

    table: str
    offset: int = 0
    # computed at export instead of read: fairseq's sinusoids ([sin | cos] halves, the pad id's row
    # zero), as XGLM's non-persistent buffer holds them (`table` then names no checkpoint tensor)
    sinusoidal: bool = False
    # the sinusoids' frequencies (SINUSOID_RATES): "fairseq" (10000^(-i / (W/2 - 1)), the pad row zero:
    # XGLM) or "transformer" (10000^(-2i / W), no zero row: CTRL's positional_encoding)
    sinusoid_rates: str = "fairseq"
    # fairseq's make_positions: the first token's row is pad_token_id + 1 (M2M100's embedding under Kosmos-2),
    # in place of a fixed `offset`; pad_token_id 1 gives OPT's and XGLM's offset 2
    offset_after_pad: bool = False


@dataclass(frozen=True)
class BidirectionalRuns:
    """Multimodal placeholder runs (an image's tokens) that attend to each other in both directions.

    The ids are read from the top-level config under `token_id_keys` (image_token_id, ...), only
    when `condition` ("key=value" on the text config, else the top level) holds. `layers`: every
    layer or only the sliding ones get the bidirectional bias; `window`: "bounded" when the sliding
    window still bounds a run's keys on the left (Gemma-3/4 vision masks), "unbounded" when the run
    overrides it (transformers' generic block mask)."""

    token_id_keys: tuple[str, ...]
    condition: str | None = None
    layers: str = "all"
    window: str = "unbounded"
