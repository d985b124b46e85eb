"""Every build option, declared once: its flags, release-spec key, type, default, help, closed set
of values and the commands it belongs to.

The `build` and `quantize` command lines (cli/options.py), the release spec's variant schema
(release/spec.py), the mapping of values into a `BuildOptions` record (request/values.py) and the
README's options table (a test compares them) are all derived from `OPTIONS`. Adding an option is
one entry here plus the code that uses the value (docs/architecture.md §7).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gqa_export import choices

# the commands an option belongs to: a command line, or a release spec (variant / top-level key)
BUILD, QUANTIZE, VARIANT, RELEASE, FETCH = "build", "quantize", "variant", "release", "fetch"
# `--help` panels
TARGET, ATTENTION, QUANT, PIPELINE, OUTPUT, RECIPE = (
    "Target", "Attention", "Quantization (int4/int8)", "Inputs and outputs", "Output", "Recipe"
)  # fmt: skip
# how a command-line string becomes the value (a spec gives the value itself)
COMMA_INTS, COMMA_NAMES = "comma-ints", "comma-names"


@dataclass(frozen=True)
class Option:
    """One option. `field` is where its value lands in BuildOptions ("quant.block_size"; "" for the
    command line's own switches such as --json). `kind` is the value's type as a release spec
    validates it (yaml_schema's node forms: str, int, float, bool, [str], [int], a tuple of choices)."""

    key: str
    field: str
    flags: tuple[str, ...]
    kind: Any
    default: Any
    help: str
    panel: str
    commands: frozenset[str]
    metavar: str | None = None
    choices: dict[str, str] | tuple[str, ...] | None = None  # the closed set; None: any value of `kind`
    parse: str | None = None  # COMMA_INTS | COMMA_NAMES: the command line gives one string
    repeatable: bool = False  # the command line takes the flag several times (a list)
    doc: str | None = None  # the README's wording where it says more than `help`
    required_in_spec: bool = False
    negated: bool = False  # the flag turns the value off (--no-smoke sets smoke False)
    per_command: dict[str, dict[str, Any]] | None = None  # a command's own help/choices/default

    def on(self, command: str) -> Option:
        """This option as `command` shows it (its own help, choices or default where it has them)."""
        from dataclasses import replace

        return replace(self, **(self.per_command or {}).get(command, {}))

    @property
    def flag(self) -> str:
        """The first spelling, as errors and the README name the option ("" for spec-only keys)."""
        return self.flags[0].split("/")[0] if self.flags else ""


def _opt(key: str, field: str, flags: tuple[str, ...], kind: Any, default: Any, help: str, panel: str,
         commands: tuple[str, ...], **extra: Any) -> Option:  # fmt: skip
    return Option(key, field, flags, kind, default, help, panel, frozenset(commands), **extra)


_B, _BV, _BQV, _BQ = (BUILD,), (BUILD, VARIANT), (BUILD, QUANTIZE, VARIANT), (BUILD, QUANTIZE)

# fmt: off
OPTIONS: tuple[Option, ...] = (
    # target
    _opt("ep", "ep", ("--ep",), tuple(choices.EPS), "cpu", "Execution provider to export for.", TARGET, _BV,
         choices=choices.EPS, required_in_spec=True,
         doc="execution provider (default cpu); see Execution providers"),
    _opt("precision", "precision", ("--precision", "-p"), tuple(choices.PRECISIONS), None, choices.precision_help(),
         TARGET, (*_BV, QUANTIZE), choices=choices.PRECISIONS, required_in_spec=True,
         per_command={QUANTIZE: {"help": "Target weight precision.", "choices": ("int4", "int8"), "default": "int4",
                                 "kind": ("int4", "int8")}},
         doc="weight and activation precision; default: the recipe's for the EP (fp32 on cpu and openvino, int4 "
             "on qnn, fp16 elsewhere). Valid pairs: "
             + "; ".join(f"{ep} {'/'.join(p)}" for ep, p in choices.SUPPORTED.items())
             + "; `quantize`: int4 (default) or int8"),
    _opt("revision", "revision", ("--revision",), str, None, "Hub branch, tag or commit.", TARGET,
         (BUILD, FETCH, RELEASE), metavar="REV"),
    _opt("max_length", "max_length", ("--max-length",), int, None,
         "search.max_length: KV buffer size (default min(context, 4096)).", TARGET, _BV, metavar="N",
         doc="`search.max_length`, the size of the pre-allocated KV buffer; default min(context length, 4096)"),
    _opt("dequantize", "dequantize", ("--dequantize",), bool, False,
         "Read a bitsandbytes (NF4/FP4/LLM.int8) checkpoint, or a GGUF's IQ*/TQ* tensors, by dequantizing it "
         "exactly, then follow --precision (int4/int8 re-quantize it); without it such checkpoints are refused "
         "(docs/prequantized.md, docs/gguf.md).", TARGET, _BV,
         doc="read a bitsandbytes (NF4/FP4/LLM.int8) checkpoint, or a GGUF's IQ*/TQ* tensors, by dequantizing it "
             "exactly, then follow `--precision`; without it such checkpoints are refused, see Pre-quantized "
             "checkpoints. On a checkpoint without such weights it changes nothing and says so (`note: --dequantize "
             "has no effect: ...`)"),
    _opt("gguf_file", "gguf_file", ("--gguf-file",), str, None,
         "Which GGUF file of a folder or Hub repository to read (a split one by its first part); MODEL may also be "
         "a .gguf file itself (docs/gguf.md).", TARGET, (BUILD, FETCH, RELEASE), metavar="NAME",
         doc="which GGUF of a folder or Hub repository (MODEL may also be a `.gguf` file), see GGUF files"),
    _opt("kv_cache", "kv.dtype", ("--kv-cache",), tuple(choices.KV_CACHE_DTYPES), None,
         "Quantized KV cache (GQA k_scale/v_scale, scales calibrated on a text; lossy, the drift is measured and "
         "recorded): " + choices.described(choices.KV_CACHE_DTYPES) + ". Default: the recipe's, else float.",
         TARGET, _BV, choices=choices.KV_CACHE_DTYPES),
    _opt("kv_scales", "kv.scales", ("--kv-scales",), tuple(choices.KV_SCALES), "per-channel",
         choices.described(choices.KV_SCALES) + ".", TARGET, _BV, choices=choices.KV_SCALES),
    _opt("kv_calibration", "kv.calibration", ("--kv-calibration",), "path", None,
         "Text file to calibrate KV scales on (default: a built-in text).", TARGET, _BV, metavar="FILE"),
    _opt("cuda_graph", "io.cuda_graph", ("--cuda-graph",), bool, False,
         "Turn on CUDA graph capture of decode steps (enable_cuda_graph; cuda, --attention gqa; the runtime then "
         "runs batch 1).", TARGET, _BV,
         doc='CUDA graph capture of decode steps (`enable_cuda_graph: "1"`; cuda, `--attention gqa`)'),
    # attention
    _opt("attention", "attention", ("--attention",), tuple(choices.ATTENTION_MODES), None,
         choices.described(choices.ATTENTION_MODES) + ". Default: the recipe's.", ATTENTION, _BV,
         choices=choices.ATTENTION_MODES, doc="attention mode (default: the recipe's); see Attention modes"),
    _opt("bidirectional_token_ids", "bidirectional_ids", ("--bidirectional-token-ids",), [int], None,
         "Comma-separated ids whose prompt runs attend bidirectionally.", ATTENTION, _BV, metavar="ID,ID",
         parse=COMMA_INTS),
    # recipe
    _opt("recipe", "recipe", ("--recipe",), "path", None, "Use this recipe YAML instead of the built-in match.",
         RECIPE, (BUILD, RELEASE), metavar="FILE",
         doc="use this recipe instead of the built-in match (e.g. a fine-tune with a custom `model_type`: see "
             "Recipes and architectures)"),
    _opt("set", "settings", ("--set",), [str], (), "Override one recipe key, e.g. --set attention.packed_qkv=false.",
         RECIPE, (*_BV, RELEASE), metavar="KEY=VALUE", repeatable=True,
         doc="override one recipe key (repeatable), validated like the file"),
    # quantization
    _opt("block_size", "quant.block_size", ("--block-size",), int, 32, "Quantization block size (16-256).", QUANT,
         _BQV, metavar="N"),
    _opt("asymmetric", "quant.asymmetric", ("--asymmetric/--symmetric",), bool, None,
         "Zero points per block, or none. Default: asymmetric for int4 rtn and k_quant (measured better on trained "
         "weights), symmetric for int8 rtn (as good, faster to decode) and search.", QUANT, _BQV),
    _opt("quant_method", "quant.method", ("--quant-method",), tuple(choices.QUANT_METHODS), "rtn",
         choices.described(choices.QUANT_METHODS), QUANT, _BQV, choices=choices.QUANT_METHODS),
    _opt("accuracy_level", "quant.accuracy_level", ("--accuracy-level",), int, None,
         "MatMulNBits accuracy_level 0-4 (default 4 on cpu, 0 on cuda).", QUANT, _BQV, metavar="0-4"),
    _opt("keep_float", "quant.keep_float", ("--keep-float",), [str], (),
         "Keep weights matching this pattern float (e.g. lm_head*).", QUANT, _BQV, metavar="PATTERN", repeatable=True),
    _opt("report", "report", ("--report",), bool, False, "Write quant_report.json (accuracy vs float).", QUANT,
         (*_BQ, VARIANT)),
    _opt("quant_embeddings", "quant.embeddings", ("--quant-embeddings",), bool, False,
         "Quantize an untied embedding too (tied ones always are).", QUANT, _BQV),
    _opt("activations", "quant.activations", ("--activations",), choices.ALL_ACTIVATIONS, None,
         "Activation dtype: " + "; ".join(f"{ep}: {' or '.join(d)}" for ep, d in choices.ACTIVATIONS.items())
         + " (first is the default).", QUANT, _BQV, choices=choices.ALL_ACTIVATIONS,
         per_command={QUANTIZE: {"help": "Activation dtype of the result, which must be the input package's own "
                                 "(quantize keeps its EP; the default is the EP's first: "
                                 + ", ".join(f"{ep} {' or '.join(d)}" for ep, d in choices.ACTIVATIONS.items()
                                             if len(d) > 1) + ")."}}),
    _opt("mixed_precision", "quant.mixed_precision", ("--mixed-precision",), [str], (),
         "SELECTOR:int8|int4, repeatable; selectors: " + choices.described(choices.MIXED_SELECTORS)
         + "; or a weight-name pattern (e.g. '*.down_proj.weight:int8').", QUANT, _BQV, metavar="SELECTOR:BITS",
         repeatable=True),
    # inputs and outputs
    _opt("prune_lm_head", "io.prune_lm_head", ("--prune-lm-head/--no-prune-lm-head",), bool, None,
         "Prompt logits for the last token only ([B,1,V]): the prompt pass skips the lm_head elsewhere. Default: "
         "off, every prompt position's logits (og.Engine and speculative decoding need them); prune only packages "
         "served through the Generator alone.", PIPELINE, _BV,
         doc="prompt logits for the last token only (default off: full logits serve every onnxruntime-genai API), "
             "see Inputs and outputs"),
    _opt("inputs_embeds", "io.inputs_embeds", ("--inputs-embeds",), bool, False,
         "Take `inputs_embeds` [B,S,H] instead of input_ids (no embedding in the graph), as a multimodal pipeline "
         "feeds it.", PIPELINE, _BV),
    _opt("hidden_states", "io.hidden_states", ("--hidden-states",), bool, False,
         "Also output `hidden_states` (the final norm's output).", PIPELINE, _BV),
    _opt("text_only", "text_only", ("--text-only",), bool, False,
         "For a multimodal checkpoint: the text decoder alone (default: vision and embedding models, the decoder "
         "and processor_config.json, docs/multimodal.md); required where the towers are not built (LLaVA, "
         "InternVL, Gemma-3n, Llama-4, ...: docs/coverage.md §21).", PIPELINE, _BV,
         doc="a multimodal checkpoint's text decoder alone (default: the full package with its vision/audio encoders "
             "and embedding model, docs/multimodal.md); on a checkpoint that exports as a text package anyway it "
             "changes nothing and says so (`note: --text-only has no effect: ...`); required for every multimodal "
             "checkpoint whose towers are not built (LLaVA, InternVL, Gemma-3n, Llama-4, ...: their decoder alone, "
             "docs/coverage.md §21)"),
    _opt("encoder_precision", "encoder_precision", ("--encoder-precision",), tuple(choices.ENCODER_PRECISIONS),
         "float", "A full multimodal package's vision model: float (default, exact) or int8 (8-bit MatMulNBits "
         "linears: features move by about 1 %, docs/multimodal.md §17).", PIPELINE, _BV,
         choices=choices.ENCODER_PRECISIONS),
    _opt("no_lm_head", "io.no_lm_head", ("--no-lm-head",), bool, False,
         "Output `hidden_states` instead of logits (embedding use). An untied lm_head and embedding are different "
         "weights and are never shared.", PIPELINE, _BV),
    _opt("lora_targets", "lora_targets", ("--lora-targets",), [str], (),
         "Multi-LoRA base: these modules (e.g. q_proj,v_proj,o_proj,down_proj) take lora_A/lora_B graph inputs "
         "that `gqa-export adapter` files bind to (docs/lora.md).", PIPELINE, _BV, metavar="NAME,NAME",
         parse=COMMA_NAMES, doc="multi-LoRA base: these modules take LoRA adapter inputs, see Multi-LoRA packages"),
    _opt("draft", "draft", ("--draft",), str, None,
         "A smaller model with the same tokenizer, exported into the package as draft.onnx for speculative "
         "decoding (docs/speculative.md); full logits, batch 1.", PIPELINE, _BV, metavar="DRAFT_SRC"),
    _opt("draft_tokens", "speculative.max_draft_tokens", ("--draft-tokens",), int, 4,
         "speculative.max_draft_tokens (1-16, default 4).", PIPELINE, _BV),
    _opt("min_adaptive_k", "speculative.min_adaptive_k", ("--min-adaptive-k",), int, 0,
         "speculative.min_adaptive_k (0-draft tokens).", PIPELINE, _BV),
    _opt("cooldown", "speculative.cooldown", ("--cooldown",), bool, False, "speculative.cooldown: true.", PIPELINE,
         _BV),
    # output
    _opt("overwrite", "overwrite", ("--overwrite",), bool, False,
         "Replace an existing output folder (kept intact until the new one is complete).", OUTPUT, _BQ,
         doc="replace an existing `-o` folder — only an empty folder or a package/release gqa-export wrote (its "
             "`manifest.json` / `release.json` lists every file there); anything else is refused (exit 2), and so "
             "is an `-o` that is, holds or lies inside any input (the model folder, `--draft`, `--recipe` / "
             "`--kv-calibration` files; a release's spec folder, eval text, drafts and PEFT folders). The old one is "
             "removed only once the new one is complete, through a journaled swap that a kill at any instant leaves "
             "recoverable (docs/architecture.md §6). `adapter -o FILE --overwrite` likewise replaces only an "
             "`.onnx_adapter` gqa-export wrote (see Multi-LoRA packages)"),
    _opt("smoke", "smoke", ("--no-smoke",), bool, True, "Skip the onnxruntime-genai smoke run.", OUTPUT,
         (*_BQ, RELEASE), negated=True, doc="skip the smoke run (release spec: `smoke: false`)"),
    _opt("json", "", ("--json",), bool, False, "Print one JSON object describing the result.", OUTPUT, _BQ,
         doc="print one JSON object: `output`, `source`, `revision`, `recipe`, `attention`, `ep`, `precision`, "
             "`max_length`, `files` (name → bytes), `total_bytes`, `seconds`, `smoke` (`ep`, `new_tokens`, "
             "`prefill_ms`, `tokens_per_s`, `text`, or null), `kv_cache` (`dtype`; a quantized cache adds `scales`, "
             "`calibration`, `calibration_tokens`, `headroom`, `drift`: `decode_steps`, `max_abs_logit_diff`, "
             "`mean_abs_logit_diff`, `top1_agreement`; a float cache has `drift: null`), `report` (the content of "
             "`quant_report.json` with `--report`, else null), `notes`; `quantize` adds `input`"),
    _opt("quiet", "", ("-q", "--quiet"), bool, False, "No progress output on stderr.", OUTPUT, _BQ,
         doc="no progress output. Progress goes to stderr, with `--json` too; when stderr is not a terminal it "
             "comes as plain lines (stage lines and notes, no bars or control characters). Output to a pipe is "
             "never wrapped or cut"),
)
# fmt: on

BY_KEY: dict[str, Option] = {option.key: option for option in OPTIONS}


def for_command(command: str) -> tuple[Option, ...]:
    """The options of one command, in declaration order (the order `--help` lists them)."""
    return tuple(option for option in OPTIONS if command in option.commands)
