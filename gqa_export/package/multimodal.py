"""The parts of a full multimodal package beside the decoder (docs/multimodal.md): which attention
mode its decoder gets, the vision and embedding graphs, their genai_config sections, and the
image processor's transform list (processor_config.json).

A recipe whose `multimodal_model_type` is set names the onnxruntime-genai model type that runs
vision + embedding + decoder (e.g. `gemma3`); `--text-only` exports the text decoder alone under
the recipe's `genai_model_type`, as before.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import onnx_ir as ir

from gqa_export.arch.spec import ArchSpec
from gqa_export.choices import ENCODER_PRECISIONS
from gqa_export.errors import InputError
from gqa_export.graph.encoders.token_embedding import build_token_embedding
from gqa_export.graph.params import WIDER_THAN_IO_META, Params
from gqa_export.model.dims import ModelDims
from gqa_export.package.audio_processor_config import AUDIO_PROCESSOR, feature_extractor
from gqa_export.package.multimodal_types import MULTIMODAL_TYPES, MultimodalType
from gqa_export.package.pad_id import token_id
from gqa_export.package.towers import AudioTower, VisionTower
from gqa_export.quant.quantize import PrecisionPlan, plan_precision, quantize
from gqa_export.source.weights import WeightStore

VISION, EMBEDDING, PROCESSOR = "vision.onnx", "embedding.onnx", "processor_config.json"
SPEECH = "speech.onnx"


@dataclass(frozen=True)
class MultimodalPlan:
    model_type: str  # the genai model type of the full package
    image_token_id: int
    tower: VisionTower
    vision: Any  # the tower's dims (its row's read_dims)
    preprocessor: dict[str, Any]  # the checkpoint's preprocessor_config.json ({} when absent)
    token_ids: dict[str, int] = field(default_factory=dict)  # the tower's token_keys, as the config has them
    audio: Any = None  # the audio encoder's dims (tower.audio.read_dims), None without an exported one
    audio_token_id: int | None = None
    features: dict[str, Any] = field(default_factory=dict)  # the checkpoint's feature extractor settings

    @property
    def feature_slices(self) -> int:
        return self.tower.feature_slices(self.vision)


def full_attention_mode(requested: str, tower: VisionTower) -> str:
    """The decoder of a full package is one graph: genai's multimodal path runs one decoder
    session, no pipeline (§3). With bidirectional image runs it is the standard-Attention graph
    reading input_ids for their mask; without them any one-graph mode runs (auto: gqa)."""
    if not tower.image_runs_bidirectional:
        if requested == "split":
            raise InputError(
                "--attention split cannot run a full multimodal package (genai runs one decoder graph): use "
                "--attention gqa (or auto, or bias), or --text-only for the text decoder alone"
            )
        return requested
    if requested in ("auto", "bias"):
        return "bias"
    raise InputError(
        f"--attention {requested} cannot run a full multimodal package (one decoder graph that reads input_ids "
        "for the image-run mask): use --attention bias (or auto), or --text-only for the text decoder alone"
    )


def check_full_options(no_lm_head: bool, inputs_embeds: bool, kv_quantized: bool, report: bool) -> None:
    """Options a full package cannot have, each refused in one line: genai needs the decoder's
    logits, it always takes inputs_embeds here, and the KV-cache calibration and the accuracy
    report run the decoder from input_ids alone."""
    refused = {
        "--no-lm-head": no_lm_head,
        "--inputs-embeds (a full package's decoder takes them already)": inputs_embeds,
        "--kv-cache int8/int4": kv_quantized,
        "--report": report,
    }
    for option, given in refused.items():
        if given:
            raise InputError(f"{option} is not available for a full multimodal package: add --text-only, or drop it")


# transformers' Qwen text rotaries: the M-RoPE sections each class reads where rope_parameters names
# none (`rope_parameters.get("mrope_section", ...)`, docs/multimodal.md §11.3)
CLASS_MROPE_SECTIONS = {
    "qwen2_vl": [16, 24, 24], "qwen2_5_vl": [16, 24, 24], "qwen3_vl": [24, 20, 20], "qwen3_vl_moe": [24, 20, 20],
    "qwen3_5": [11, 11, 10], "qwen3_5_moe": [11, 11, 10],
}  # fmt: skip


def class_mrope(model_type: str, hf_config: Any, dims: ModelDims) -> ModelDims:
    """dims whose ropes name the M-RoPE keys the config leaves out as the class reads them: its
    default sections, and its interleaving (the config classes' own defaults name neither, and
    HF's rotary then interleaves Qwen3-VL's / Qwen3.5's sections all the same). A key the config
    names stays as it is (a contrary mrope_interleaved is refused by plan_multimodal)."""
    kind = MULTIMODAL_TYPES.get(model_type)
    tower = kind.tower() if kind is not None else None
    if tower is None or not tower.mrope_positions:
        return dims
    sections = CLASS_MROPE_SECTIONS.get(str(getattr(hf_config, "model_type", "")))
    ropes = {}
    for key, rope in dims.ropes.items():
        params = {"mrope_interleaved": tower.mrope_interleaved, **rope.params}
        if sections is not None:
            params.setdefault("mrope_section", sections)
        ropes[key] = replace(rope, params=params)
    return replace(dims, ropes=ropes)


def plan_multimodal(
    model_type: str, hf_config: Any, dims: ModelDims, store: WeightStore, source: Path
) -> MultimodalPlan:
    """What the full package needs from the checkpoint, or InputError naming what it cannot run."""
    kind = MULTIMODAL_TYPES.get(model_type)
    if kind is None:
        raise InputError(f"no vision tower is exported for genai model type {model_type}: export with --text-only")
    tower = kind.tower()
    vision = tower.read_dims(hf_config, dims, store)
    if tower.mrope_positions:
        for rope in dims.ropes.values():
            if bool(rope.params.get("mrope_interleaved")) != tower.mrope_interleaved:
                raise InputError(
                    f"{model_type} {'interleaves' if tower.mrope_interleaved else 'does not interleave'} its M-RoPE "
                    "sections but the config's rope says otherwise (mrope_interleaved): fix config.json, or --text-only"
                )
    image_id = tower.image_token_id(hf_config)
    if image_id is None and tower.image_token:
        image_id = token_id(source, tower.image_token)
    if image_id is None or int(image_id) >= dims.vocab_size:  # HF embeds an out-of-vocabulary one as id 0
        raise InputError(f"image_token_id {image_id} is not a token of the vocabulary: export with --text-only")
    _check_placeholder(kind, source, int(image_id))
    token_ids = {}
    for key in tower.token_keys:
        value = getattr(hf_config, key, None)
        if value is None or int(value) >= dims.vocab_size:
            raise InputError(f"{key} {value} is not a token of the vocabulary: export with --text-only")
        token_ids[key] = int(value)
    plan = MultimodalPlan(model_type, int(image_id), tower, vision, _preprocessor(source), token_ids)
    if tower.audio is not None and getattr(hf_config, "audio_config", None) is not None:
        plan = _with_audio(plan, tower.audio, hf_config, dims, store, source)
    processor_files(plan)  # what the processor writers refuse, before the graphs are built
    return plan


def _check_placeholder(kind: MultimodalType, source: Path, image_id: int) -> None:
    """genai's processor writes the type's placeholder by its text, once per image feature: a tokenizer that
    does not give it the config's image_token_id leaves the embedding no placeholder to fill (probed: gemma3's
    text pieces, mistral3's -1 ids), so the images would be dropped without a word. Checked where the
    checkpoint has a tokenizer.json."""
    text = kind.placeholder
    if text is None or not (source / "tokenizer.json").is_file():
        return
    written = token_id(source, text)
    if written != image_id:
        found = "has no such token" if written is None else f"gives it id {written}"
        raise InputError(
            f"onnxruntime-genai's {kind.model_type} processor writes '{text}' for each image feature, but the "
            f"tokenizer {found} and the config's image_token_id is {image_id}: fix one of them, or --text-only"
        )


def _with_audio(
    plan: MultimodalPlan, audio: AudioTower, hf_config: Any, dims: ModelDims, store: WeightStore, source: Path
) -> MultimodalPlan:
    """The plan with the checkpoint's audio encoder, or InputError naming what it cannot run."""
    audio_id = audio.audio_token_id(hf_config)
    if audio_id is None or int(audio_id) >= dims.vocab_size:
        raise InputError(f"audio_token_id {audio_id} is not a token of the vocabulary: export with --text-only")
    token_ids = dict(plan.token_ids)
    for key in audio.token_keys:
        value = getattr(hf_config, key, None)
        if value is not None and int(value) < dims.vocab_size:
            token_ids[key] = int(value)
    features = feature_extractor(source)
    encoder = audio.read_dims(hf_config, dims, store, features)
    return replace(plan, audio=encoder, audio_token_id=int(audio_id), features=features, token_ids=token_ids)


def _preprocessor(source: Path) -> dict[str, Any]:
    """The checkpoint's preprocessor_config.json, if it has one (defaults: Gemma-3's processor);
    else the `image_processor` of the processor_config.json transformers 5.x saves ({} when none)."""
    path = source / "preprocessor_config.json"
    if path.is_file():
        return json.loads(path.read_text())
    combined = source / "processor_config.json"
    found = json.loads(combined.read_text()).get("image_processor") if combined.is_file() else None
    return found if isinstance(found, dict) else {}


def encoder_plan(precision: str, ep: str, dtype: ir.DataType) -> PrecisionPlan | None:
    """The vision graph's weight plan: None (float, the default), or 8-bit MatMulNBits linears
    (the EP's int8 block size, with zero points) with the decoder's activation dtype and accuracy level
    0, float compute: the tower runs once per image, and int8 activations (CPU's level 4) raised
    the feature error from 0.8-3.3 % to 1.1-4.0 % (docs/multimodal.md §17, probed)."""
    if precision not in ENCODER_PRECISIONS:
        raise InputError(f"unknown --encoder-precision '{precision}'; choose {' or '.join(ENCODER_PRECISIONS)}")
    if precision == "float":
        return None
    try:
        base = plan_precision(ep, "int8")
    except InputError as exc:  # the EP has no 8-bit MatMulNBits: say so for this option, not --precision
        raise InputError(
            f"--encoder-precision int8 cannot run with --ep {ep} (no 8-bit MatMulNBits there); "
            "use --encoder-precision float"
        ) from exc
    # zero points kept: the tower's feature error was measured with them (§17); the decoder's int8 default has
    # none since they cost decode speed there (quant/quantize.default_symmetric), which a once-per-image tower
    # does not pay per token
    nbits = replace(base.nbits, symmetric=False) if base.nbits is not None else None
    return replace(base, io_dtype=dtype, logits_dtype=dtype, accuracy_level=0, nbits=nbits)


def build_encoders(
    plan: MultimodalPlan,
    dims: ModelDims,
    spec: ArchSpec,
    store: WeightStore,
    dtype: ir.DataType,
    vision_weights: PrecisionPlan | None = None,
) -> list[tuple[str, ir.Model]]:
    """The vision and embedding graphs, in the decoder's activation dtype; with `vision_weights`
    the vision graph's linears quantized (the embedding's table stays float: a lookup, no compute)."""
    params = Params(store, dtype)
    vision = plan.tower.build(plan.vision, params)
    if vision_weights is not None:
        for value in vision.graph.initializers.values():  # float32 constants (angles, position grids) stay so
            tensor = value.const_value
            if tensor is not None and tensor.dtype.is_floating_point() and tensor.dtype != dtype:
                value.meta[WIDER_THAN_IO_META] = True
        quantize(vision, vision_weights)
    speech = [(SPEECH, plan.tower.audio.build(plan.audio, params))] if plan.tower.audio and plan.audio else []
    embedding = build_token_embedding(
        dims, spec, params, plan.image_token_id, plan.audio_token_id, feature_slices=plan.feature_slices
    )
    return [
        (VISION, vision),
        *speech,
        (EMBEDDING, embedding),
    ]


def add_config_sections(config: dict[str, Any], plan: MultimodalPlan) -> None:
    """model.type, image_token_id and the vision / embedding sections (§6); their sessions get the
    decoder's session options."""
    model = config["model"]
    model["type"] = plan.model_type
    model["image_token_id"] = plan.image_token_id
    model.update(plan.token_ids)
    if plan.feature_slices:  # genai sizes image_features and inputs_embeds by it (§11.5)
        model["decoder"]["hidden_size"] *= 1 + plan.feature_slices
    session = model["decoder"]["session_options"]
    model["vision"] = {
        "filename": VISION,
        "config_filename": PROCESSOR,
        "session_options": session,
        "inputs": dict(key if isinstance(key, tuple) else (key, key) for key in plan.tower.vision_inputs),
        "outputs": {"image_features": "image_features"},
        **plan.tower.vision_keys(plan.vision),
        **plan.tower.preprocessor_keys(plan.vision, plan.preprocessor),
    }
    model["embedding"] = {
        "filename": EMBEDDING,
        "session_options": session,
        "inputs": {"input_ids": "input_ids", "image_features": "image_features"},
        "outputs": {"inputs_embeds": "inputs_embeds"},
    }
    for key, section in plan.tower.model_sections:
        model[key] = dict(section)
    if plan.tower.audio and plan.audio is not None:  # the speech model and its feature extraction (§16)
        model["audio_token_id"] = plan.audio_token_id
        model["embedding"]["inputs"]["audio_features"] = "audio_features"
        model["speech"] = {
            "filename": SPEECH,
            "config_filename": AUDIO_PROCESSOR,
            "session_options": session,
            "inputs": dict(plan.tower.audio.inputs),
            "outputs": {"audio_features": "audio_features"},
        }


def processor_config(plan: MultimodalPlan) -> dict[str, Any]:
    """processor_config.json: the onnxruntime-extensions transforms reproducing HF's pixel_values."""
    return plan.tower.processor(plan.vision, plan.preprocessor)


def processor_files(plan: MultimodalPlan) -> list[tuple[str, dict[str, Any]]]:
    """The processor configs genai reads: the image one, and the audio one with a speech model."""
    files = [(PROCESSOR, processor_config(plan))]
    if plan.tower.audio and plan.audio is not None:
        files.append((AUDIO_PROCESSOR, plan.tower.audio.processor(plan.features)))
    return files
