"""What one build is asked for: the option records the command line, release specs and the library
fill in (`request/table.py` declares each option once and says where it lands here).

These are plain frozen records with no validation beyond what a record can say about itself: the
checks that need the EP table, the recipe or the model live in `plan/` (resolve), which turns a
request into a `BuildPlan` before anything is fetched or read.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from gqa_export.errors import InputError


@dataclass(frozen=True)
class QuantOptions:
    """The int4/int8 options of a build or `quantize`, as the command line gives them."""

    block_size: int = 32
    # None: the method's default (quant/quantize.default_symmetric) -- zero points for int4 rtn and k_quant
    # (measured on a trained checkpoint: int4 rtn block 32 +2.3% perplexity asymmetric vs +3.8% symmetric, for
    # 0.7% more bytes; CHANGELOG/#15), none for int8 rtn (equal quality, faster CPU decode) and search
    asymmetric: bool | None = None
    method: str = "rtn"  # rtn (onnxruntime's block quantizer) | search (per-block scale search) | k_quant
    accuracy_level: int | None = None  # None: the EP's (4 on CPU, 0 on CUDA)
    keep_float: tuple[str, ...] = ()  # fnmatch patterns on weight or node names
    embeddings: bool = False  # int4/int8 embedding table even when untied (tied ones always share)
    activations: str | None = None  # None: the EP's first (eps.quantized_activations)
    mixed_precision: tuple[str, ...] = ()  # SELECTOR:int8|int4 (choices.MIXED_SELECTORS or a name pattern)


@dataclass(frozen=True)
class IoOptions:
    """Graph inputs and outputs beyond the plain decoder's (graph/io_options.py resolves them)."""

    prune_lm_head: bool | None = None  # None: the recipe's build default, else full logits
    inputs_embeds: bool = False
    hidden_states: bool = False
    no_lm_head: bool = False
    cuda_graph: bool = False
    mrope_positions: bool = False  # multimodal decoders: position_ids [3, B, S] (graph/mrope.py)


@dataclass(frozen=True)
class KvQuantOptions:
    """A quantized KV cache (quant/kv_cache.py)."""

    dtype: str | None = None  # None: unset (the recipe's, else float); float | int8 | int4
    scales: str = "per-channel"
    calibration: Path | None = None  # text file; None: the built-in calibration text

    @property
    def quantized(self) -> bool:
        return self.dtype not in (None, "float")


@dataclass(frozen=True)
class SpeculativeOptions:
    """The `speculative` block (docs/speculative.md §1), in the ranges genai 0.18 enforces (probed):
    max_draft_tokens 1..16; min_adaptive_k, the floor adaptive k may fall to, 0..16, and kept
    within max_draft_tokens here (genai takes a larger one and then drafts more than
    max_draft_tokens, probed); cooldown a boolean (genai refuses a number)."""

    max_draft_tokens: int = 4
    min_adaptive_k: int = 0
    cooldown: bool = False

    def check(self) -> None:
        if not isinstance(self.max_draft_tokens, int) or not 1 <= self.max_draft_tokens <= 16:
            raise InputError(f"--draft-tokens (max_draft_tokens) must be between 1 and 16, got {self.max_draft_tokens}")
        if not isinstance(self.min_adaptive_k, int) or not 0 <= self.min_adaptive_k <= self.max_draft_tokens:
            raise InputError(
                f"--min-adaptive-k (min_adaptive_k) must be between 0 and --draft-tokens ({self.max_draft_tokens}), "
                f"got {self.min_adaptive_k}"
            )
        if not isinstance(self.cooldown, bool):
            raise InputError(f"cooldown must be true or false, got {self.cooldown!r}")

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class BuildOptions:
    """One build request: every option of `build` (and of a release variant), as values."""

    model: str
    output: Path
    ep: str = "cpu"
    precision: str | None = None  # None: the recipe's default for the EP
    revision: str | None = None
    max_length: int | None = None
    overwrite: bool = False
    smoke: bool = True
    recipe: Path | None = None
    settings: tuple[str, ...] = ()  # --set key=value recipe overrides
    attention: str | None = None  # gqa | bias | split | auto; None: the recipe's
    bidirectional_ids: tuple[int, ...] | None = None  # None: the recipe's
    quant: QuantOptions = field(default_factory=QuantOptions)  # int4/int8 only
    report: bool = False  # write quant_report.json (int4/int8)
    io: IoOptions = field(default_factory=IoOptions)  # last-token logits, pipeline I/O, CUDA graph
    kv: KvQuantOptions = field(default_factory=KvQuantOptions)  # int8/int4 KV cache
    text_only: bool = False  # a multimodal checkpoint's text decoder alone (docs/multimodal.md §1)
    lora_targets: tuple[str, ...] = ()  # modules that get LoRA graph inputs (docs/lora.md)
    encoder_precision: str = "float"  # float | int8: a full package's vision linears (docs/multimodal.md §17)
    dequantize: bool = False  # a bitsandbytes checkpoint dequantized exactly, then --precision (docs/prequantized.md)
    gguf_file: str | None = None  # which GGUF of a folder or Hub repository (docs/gguf.md)
    draft: str | None = None  # a draft model exported into the package (docs/speculative.md)
    speculative: SpeculativeOptions = field(default_factory=SpeculativeOptions)  # the draft's tuning


BuildRequest = BuildOptions  # the name the plan phase and the docs use
