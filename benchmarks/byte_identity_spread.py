"""The spread of benchmarks/byte_identity.py: its inputs (tiny checkpoints and the files commands
read) and its cases (gqa-export command sequences), one for every path a refactor could disturb.

A case is a list of gqa-export commands, each an argv with placeholders: `{out}` is the case's
output folder (one per side), `{NAME}` the path of the input NAME of `INPUTS`. Inputs are made
once, before any build, with the working tree's own test generators (tests/), so both sides read
the very same files; an input may use another (`need`), e.g. a PEFT adapter of the `llama`
checkpoint or a release spec naming it.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

PLACEHOLDER = re.compile(r"\{(\w+)\}")
OUT = "out"
# an input maker: (folder to write in, the path of another input by name) -> the path to pass
Maker = Callable[[Path, Callable[[str], Path]], Path]


@dataclass(frozen=True)
class Case:
    """One entry of the spread: gqa-export commands run in order, each a fresh subprocess."""

    name: str
    steps: tuple[tuple[str, ...], ...]

    @property
    def inputs(self) -> set[str]:
        """The inputs its placeholders name (not their own dependencies)."""
        return {m for step in self.steps for arg in step for m in PLACEHOLDER.findall(arg)} - {OUT}

    @property
    def text(self) -> str:
        """The commands as one line: `build {llama} ... ; quantize {out}/float ...`."""
        return " ; ".join(shlex.join(step) for step in self.steps)


def build(source: str, *flags: str, out: str = "{out}") -> tuple[str, ...]:
    """`gqa-export build` of the input `source`, without the smoke run (it measures, it writes nothing)."""
    return ("build", f"{{{source}}}", "-o", out, "--no-smoke", "-q", *flags)


def built(name: str, source: str, *flags: str) -> Case:
    """A case that is one build."""
    return Case(name, (build(source, *flags),))


# --------------------------------------------------------------------------------------------------
# inputs: the tests' own seeded generators, so the same bytes every time
# --------------------------------------------------------------------------------------------------


def _model(model_type: str, **overrides: object) -> Maker:
    def make(out: Path, need: Callable[[str], Path]) -> Path:
        from tiny_models import save_model

        return save_model(out, model_type, **overrides)

    return make


def _family(variant: str) -> Maker:
    def make(out: Path, need: Callable[[str], Path]) -> Path:
        from tiny_models import save_model
        from variants import FAMILY_VARIANTS

        model_type, overrides = FAMILY_VARIANTS[variant]
        return save_model(out, model_type, **overrides)

    return make


def _moe(model_type: str) -> Maker:
    def make(out: Path, need: Callable[[str], Path]) -> Path:
        from moe_models import save_moe

        return save_moe(out, model_type)

    return make


def _dense(model_type: str) -> Maker:
    def make(out: Path, need: Callable[[str], Path]) -> Path:
        from dense_models import save_dense

        return save_dense(out, model_type)

    return make


def _state_space(model_type: str) -> Maker:
    def make(out: Path, need: Callable[[str], Path]) -> Path:
        from state_space_models import save_state_space

        return save_state_space(out, model_type)

    return make


def _gemma4(form: str, **overrides: object) -> Maker:
    def make(out: Path, need: Callable[[str], Path]) -> Path:
        from gemma4_models import save_gemma4

        return save_gemma4(out, form, **overrides)

    return make


def _multimodal(arch: str) -> Maker:
    def make(out: Path, need: Callable[[str], Path]) -> Path:
        from multimodal_models import save_multimodal

        return save_multimodal(out, arch)

    return make


def _nemotron_ids(vocab: int, pad_token: bool) -> Maker:
    """The pad-id rules' checkpoints (tests/package/test_pad_id.py): Nemotron-Mini's ids (bos 2,
    eos 3, no pad_token_id) and a 384-id tokenizer; `vocab` > 384 leaves spare embedding rows (the
    first pads), else with `pad_token` False no pad token anywhere (eos pads, with a note)."""

    def make(out: Path, need: Callable[[str], Path]) -> Path:
        import json

        from tiny_models import save_model, save_tokenizer

        checkpoint = save_model(
            out, vocab_size=vocab, bos_token_id=2, eos_token_id=3, pad_token_id=None, tokenizer=False
        )
        save_tokenizer(checkpoint, vocab_size=384)
        generation = json.loads((checkpoint / "generation_config.json").read_text())
        generation.pop("pad_token_id", None)
        (checkpoint / "generation_config.json").write_text(json.dumps(generation))
        if not pad_token:
            for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
                path = checkpoint / name
                if path.is_file():
                    data = json.loads(path.read_text().replace("<|pad|>", "<|reserved_5|>"))
                    data.pop("pad_token", None)
                    path.write_text(json.dumps(data))
        return checkpoint

    return make


def _gptq(out: Path, need: Callable[[str], Path]) -> Path:
    from prequant_models import gptq_pair

    return gptq_pair(out, bits=4, group=32, act_order=True)[0]  # desc_act: the permuted import


def _fp8(out: Path, need: Callable[[str], Path]) -> Path:
    from prequant_models import fp8_pair

    return fp8_pair(out, (48, 48))[0]  # DeepSeek-style block scales, partial last blocks


def _bnb_nf4(out: Path, need: Callable[[str], Path]) -> Path:
    from bnb_models import bnb_pair

    return bnb_pair(out, "nf4", double=True, blocksize=64, dtype="bfloat16")[0]


def _peft(targets: list[str], r: int, alpha: float, seed: int, rslora: bool) -> Maker:
    def make(out: Path, need: Callable[[str], Path]) -> Path:
        from lora_models import save_adapter

        return save_adapter(out, need("llama"), targets, r, alpha, seed, use_rslora=rslora)

    return make


def _recipe(out: Path, need: Callable[[str], Path]) -> Path:
    """A recipe file whose build defaults the command line does not override (tests/graph/test_io_options.py)."""
    out.mkdir(parents=True)
    path = out / "mine.yaml"
    path.write_text(
        "name: mine\nmatch:\n  model_types: [llama]\narch: llama\n"
        "attention:\n  packed_qkv: false\n"
        "build:\n  prune_lm_head: true\n  kv_cache: int8\n  kv_scales: per-tensor\n"
    )
    return path


def _calibration(out: Path, need: Callable[[str], Path]) -> Path:
    """A KV-scale calibration text (the tests' tiny corpus)."""
    import shutil

    out.mkdir(parents=True)
    return Path(shutil.copy(Path(__file__).resolve().parent.parent / "tests" / "data" / "tiny-text" / "eval.txt", out))


def _release_spec(out: Path, need: Callable[[str], Path]) -> Path:
    """Three variants of the llama checkpoint, one a multi-LoRA base shipping an adapter; no eval
    (perplexities are measured, not exported) and no smoke run."""
    import yaml

    out.mkdir(parents=True)
    spec = {
        "source": str(need("llama")),
        "license": "apache-2.0",
        "smoke": False,
        "variants": [
            {"ep": "cpu", "precision": "int4", "kv_cache": "int8"},  # the spec's quantization defaults
            {"ep": "cuda", "precision": "fp16", "path": "cuda-fp16-pruned", "prune_lm_head": True},
            {
                "ep": "cpu",
                "precision": "fp32",
                "path": "cpu-lora",
                "lora_targets": ["q_proj", "v_proj", "o_proj"],
                "adapters": [str(need("peft_attn"))],
            },
        ],
    }
    path = out / "release.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


# input name -> maker
INPUTS: dict[str, Maker] = {
    "llama": _model("llama"),  # 2 layers, GQA (4 q heads, 2 kv heads), untied
    "llama_draft": _model("llama", seed=1, num_hidden_layers=1),  # the draft of a speculative pair
    "spare_row": _nemotron_ids(400, pad_token=True),  # pad id: the first unused embedding row
    "no_pad": _nemotron_ids(384, pad_token=False),  # pad id: eos, the fallback
    "mistral_window": _family("mistral_window"),
    "qwen3_tied": _family("qwen3_qk_norm"),  # tied embeddings, qk-norm
    "phi": _dense("phi"),
    "lfm2": _dense("lfm2"),  # hybrid: short-conv state layers + GQA layers
    "qwen3_5": _dense("qwen3_5_text"),  # hybrid: gated DeltaNet + gated GQA layers
    "qwen3_next": _dense("qwen3_next"),  # gated DeltaNet with projections fused per key head, experts
    "olmo_hybrid": _dense("olmo_hybrid"),  # gated DeltaNet with separate q/k/v and conv kernels, beta x2
    "mamba2": _state_space("mamba2"),  # Mamba2 layers only: recurrent state, no KV cache
    "mamba": _state_space("mamba"),  # Mamba (v1) layers only, tied
    "bamba": _state_space("bamba"),  # Mamba2 + GQA layers with partial RoPE
    "nemotron_h": _dense("nemotron_h"),  # one block per layer: Mamba2, NoPE GQA or a squared-ReLU MLP
    "olmo3": _dense("olmo3"),  # post-norms, full-width q/k norms, sliding layers
    "qwen3_moe": _moe("qwen3_moe"),
    "mixtral": _moe("mixtral"),
    "deepseek_v3": _moe("deepseek_v3"),  # MLA, q-LoRA, grouped sigmoid routing, shared expert
    "gemma4_causal": _gemma4("causal"),
    "gemma4_full_audio": _gemma4("full", with_audio=True),  # vision and audio towers
    "gemma3_full": _multimodal("gemma3_full"),  # a vision tower genai runs
    "qwen2_5_vl": _multimodal("qwen2_5_vl"),
    "gptq": _gptq,
    "fp8": _fp8,
    "bnb_nf4": _bnb_nf4,
    "peft_attn": _peft(["q_proj", "v_proj", "o_proj"], 4, 8.0, 1, False),
    "peft_mlp": _peft(["down_proj", "gate_proj"], 8, 16.0, 2, True),  # rsLoRA; gate of the packed gate|up
    "recipe": _recipe,
    "calibration": _calibration,
    "release_spec": _release_spec,
}

LORA = ",".join(("q_proj", "v_proj", "o_proj", "down_proj", "gate_proj"))

CASES: tuple[Case, ...] = (
    # dense: the three attention modes, weights, EPs
    built("llama-fp32-gqa", "llama", "--attention", "gqa"),
    built("mistral-window-bias", "mistral_window", "--attention", "bias", "--max-length", "128"),
    built("llama-split", "llama", "--attention", "split"),
    built("llama-bidirectional-auto", "llama", "--bidirectional-token-ids", "300,301"),
    built("llama-int8", "llama", "--precision", "int8"),
    built("llama-int4-knobs", "llama", "-p", "int4", "--block-size", "64", "--quant-method", "search",
          "--accuracy-level", "0", "--keep-float", "lm_head*", "--quant-embeddings", "--report"),
    built("qwen3-tied-int4", "qwen3_tied", "--precision", "int4"),
    built("phi-int4-kquant-mixed", "phi", "--precision", "int4", "--quant-method", "k_quant",
          "--mixed-precision", "last_matmul:int8", "--mixed-precision", "sensitive_layers:int8"),
    built("llama-kv-int8", "llama", "--attention", "gqa", "--kv-cache", "int8"),
    built("llama-kv-int4-calibrated", "llama", "--kv-cache", "int4", "--kv-scales", "per-tensor",
          "--kv-calibration", "{calibration}"),
    built("llama-cuda-fp16", "llama", "--ep", "cuda", "--precision", "fp16"),
    built("llama-cuda-bf16", "llama", "--ep", "cuda", "--precision", "bf16"),
    built("llama-cuda-int4-graph", "llama", "--ep", "cuda", "-p", "int4", "--attention", "gqa", "--cuda-graph"),
    built("llama-openvino-int4", "llama", "--ep", "openvino", "-p", "int4"),
    built("llama-qnn", "llama", "--ep", "qnn"),
    built("llama-trt-rtx-int4", "llama", "--ep", "trt-rtx", "-p", "int4"),
    built("llama-dml-fp16", "llama", "--ep", "dml", "-p", "fp16"),
    built("llama-webgpu-fp16", "llama", "--ep", "webgpu", "-p", "fp16"),
    built("llama-webgpu-int4", "llama", "--ep", "webgpu", "-p", "int4", "--symmetric"),
    # the pad id rules (model pad: every llama case above)
    built("spare-row-pad-qnn", "spare_row", "--ep", "qnn"),  # a windowed package: its runtime cuts prompts at a pad
    built("eos-fallback-pad", "no_pad"),
    # inputs and outputs, recipes
    built("llama-prune-lm-head", "llama", "--prune-lm-head"),
    built("llama-embeds-hidden", "llama", "--inputs-embeds", "--hidden-states"),
    built("llama-no-lm-head", "llama", "--no-lm-head"),
    built("llama-set-unpacked", "llama", "--set", "attention.packed_qkv=false"),
    built("llama-recipe-file", "llama", "--recipe", "{recipe}"),
    # MoE, latent attention, hybrids, Gemma-4
    built("qwen3moe-int4", "qwen3_moe", "--precision", "int4"),
    built("mixtral-cuda-int4-bf16", "mixtral", "--ep", "cuda", "--precision", "int4", "--activations", "bf16"),
    built("deepseek-v3-mla-int4", "deepseek_v3", "-p", "int4"),
    built("deepseek-v3-latent-cache", "deepseek_v3", "--set", "attention.latent_cache=true"),
    built("lfm2-int4", "lfm2", "-p", "int4"),
    built("qwen3.5-cuda-fp16", "qwen3_5", "--ep", "cuda", "-p", "fp16"),
    built("qwen3-next-int4", "qwen3_next", "-p", "int4"),
    built("olmo-hybrid-fp32", "olmo_hybrid"),
    built("mamba2-int4", "mamba2", "-p", "int4"),
    built("mamba-int4", "mamba", "-p", "int4"),
    built("bamba-fp32", "bamba"),
    built("nemotron-h-cuda-fp16", "nemotron_h", "--ep", "cuda", "-p", "fp16"),
    built("olmo3-int4", "olmo3", "-p", "int4"),
    built("gemma4-split-int4", "gemma4_causal", "--attention", "split", "--precision", "int4"),
    # multimodal: full packages (vision, embedding, decoder, processor config) and a text decoder
    built("gemma3-full", "gemma3_full"),
    built("gemma3-full-int4-encoder-int8", "gemma3_full", "-p", "int4", "--encoder-precision", "int8"),
    built("gemma4-full-audio-int4", "gemma4_full_audio", "-p", "int4"),
    built("qwen2.5vl-text-only-int4", "qwen2_5_vl", "--text-only", "-p", "int4"),
    # pre-quantized sources
    built("gptq-import", "gptq"),
    built("fp8-import-int4", "fp8", "-p", "int4"),
    built("bnb-nf4-dequantize-int4", "bnb_nf4", "--dequantize", "-p", "int4"),
    # the other commands: quantize, a draft pair, LoRA adapters, a release
    Case("quantize", (  # a float package re-quantized twice: with every default, and with knobs
        build("llama", out="{out}/float"),
        ("quantize", "{out}/float", "-o", "{out}/int4", "--no-smoke", "-q"),
        ("quantize", "{out}/float", "-o", "{out}/int8-knobs", "--no-smoke", "-q", "-p", "int8", "--block-size", "64",
         "--symmetric", "--keep-float", "lm_head*", "--quant-embeddings", "--mixed-precision", "sensitive_layers:int4"),
    )),
    built("draft-pair", "llama", "--draft", "{llama_draft}", "--draft-tokens", "3", "--min-adaptive-k", "1",
          "--cooldown"),
    Case("lora-base-adapters", (
        build("llama", "--lora-targets", LORA, out="{out}/base"),
        ("adapter", "{peft_attn}", "--base", "{out}/base", "-o", "{out}/attn.onnx_adapter"),
        ("adapter", "{peft_mlp}", "--base", "{out}/base", "-o", "{out}/mlp.onnx_adapter"),
    )),
    Case("release-three-variants", (("release", "{release_spec}", "-o", "{out}", "-q"),)),
)  # fmt: skip
