"""`gqa-export adapter`: a PEFT LoRA adapter as an `.onnx_adapter` file for a multi-LoRA base.

The base (built with `--lora-targets`) takes `<module>.lora_A.weight` [in, r] and
`<module>.lora_B.weight` [r, out] graph inputs (graph/lora.py). PEFT stores `lora_A` as [r, in] and
`lora_B` as [out, r] and computes `x @ Aᵀ @ Bᵀ * scaling`; the file holds `Aᵀ` and `Bᵀ * scaling`
(scaling = alpha / r, or alpha / √r with rsLoRA) in the base's activation dtype, named as the base's
inputs, so onnxruntime binds them by name (docs/lora.md §4). Everything the file could get wrong is
checked against the base before it is written: a module the base has no input for, shapes, DoRA,
LoRA biases, replaced modules. What `-o` may replace, and how the file is sealed and written, is
package/adapter_file.py's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from gqa_export.errors import InputError
from gqa_export.graph.lora import LORA_A, LORA_B
from gqa_export.kernels import convert
from gqa_export.package.adapter_file import check_adapter_output, write_adapter
from gqa_export.package.ownership import check_file_clear_of
from gqa_export.source.peft import lora_pairs, module_scaling, read_peft_config

ONNX_FLOAT, ONNX_FLOAT16, ONNX_BFLOAT16 = 1, 10, 16


@dataclass(frozen=True)
class BaseInput:
    """One LoRA input of the base graph: its element type and its static width (in for A, out for B)."""

    elem_type: int
    width: int


@dataclass(frozen=True)
class AdapterResult:
    output: Path
    modules: list[str]  # the base modules the adapter sets, e.g. model.layers.0.self_attn.q_proj
    ranks: dict[str, int]
    scaling: dict[str, float]
    dtype: str
    cleaned: list[str] = field(default_factory=list)  # staging files of killed runs removed beside the output


def base_lora_inputs(package: Path, named: str = "--base") -> dict[str, BaseInput]:
    """The base's LoRA inputs, read from model.onnx's graph inputs (weights not loaded). `named`:
    how the line names the base (`adapter --base`; `run` names the package itself)."""
    import onnx

    from gqa_export.package.paths import CONFIG, package_config

    who = f"{named} {package}".strip()
    if (package / CONFIG).is_file():  # a package folder: a broken genai_config.json is said as such
        package_config(package)
    path = package / "model.onnx" if package.is_dir() else package
    if not path.is_file():
        raise InputError(f"{who}: no model.onnx there; give a package built with --lora-targets")
    try:
        graph = onnx.load(str(path), load_external_data=False).graph
    except Exception as exc:  # protobuf raises DecodeError and friends
        raise InputError(f"{path} is not a readable ONNX model ({exc}); re-export the package") from None
    found = {}
    for value in graph.input:
        name = value.name
        if name.endswith((LORA_A, LORA_B)):
            dims = value.type.tensor_type.shape.dim
            width = dims[0].dim_value if name.endswith(LORA_A) else dims[1].dim_value
            found[name] = BaseInput(value.type.tensor_type.elem_type, int(width))
    if not found:
        raise InputError(f"{who} has no LoRA inputs: rebuild it with `gqa-export build --lora-targets ...`")
    return found


def convert_adapter(
    peft_dir: Path, base: Path, output: Path, overwrite: bool = False, into_base: bool = False
) -> AdapterResult:
    """Write `output` (.onnx_adapter) from the PEFT folder, checked against the base's inputs.
    `into_base`: the caller (a release) writes it inside the base and re-seals its manifest."""
    from gqa_export.source.weights import WeightStore

    if output.is_dir():
        raise InputError(f"{output} is a folder; name the adapter file to write (NAME.onnx_adapter)")
    check_file_clear_of(output, peft_dir, "PEFT adapter folder")
    if not into_base:  # a release writes inside the base and re-seals its manifest; nobody else may
        check_file_clear_of(output, base.parent if base.is_file() else base, "base package")
    check_adapter_output(output, overwrite)
    config = read_peft_config(peft_dir)
    inputs = base_lora_inputs(base)
    store = WeightStore.open(peft_dir)
    pairs = lora_pairs(store, peft_dir)  # every tensor a LoRA A/B pair's, refused in one line otherwise
    params: dict[str, np.ndarray] = {}
    ranks, scaling = {}, {}
    elem_types = {i.elem_type for i in inputs.values()}
    if len(elem_types) != 1:
        raise InputError(f"{base}: its LoRA inputs have {len(elem_types)} element types; rebuild the base")
    elem_type = elem_types.pop()
    for module, (a_tensor, b_tensor) in pairs.items():
        a_name, b_name = module + LORA_A, module + LORA_B
        if a_name not in inputs or b_name not in inputs:
            raise InputError(
                f"adapter module {module} has no LoRA input in {base}; rebuild the base with its module name in "
                "--lora-targets"
            )
        a = convert(store.read(a_tensor), np.dtype(np.float32))  # [r, in]
        b = convert(store.read(b_tensor), np.dtype(np.float32))  # [out, r]
        if a.ndim != 2 or b.ndim != 2 or a.shape[0] != b.shape[1]:
            raise InputError(f"adapter module {module}: lora_A {list(a.shape)} and lora_B {list(b.shape)} ranks differ")
        if a.shape[1] != inputs[a_name].width or b.shape[0] != inputs[b_name].width:
            raise InputError(
                f"adapter module {module}: [in, out] = [{a.shape[1]}, {b.shape[0]}], the base's is "
                f"[{inputs[a_name].width}, {inputs[b_name].width}]; the adapter was trained on another model"
            )
        rank = int(a.shape[0])
        scale = module_scaling(config, module, rank)
        ranks[module], scaling[module] = rank, scale
        params[a_name] = np.ascontiguousarray(a.T)
        params[b_name] = np.ascontiguousarray(b.T * np.float32(scale))
    values, dtype = _values(params, elem_type)
    cleaned = write_adapter(values, output, overwrite)
    return AdapterResult(output, sorted(pairs), ranks, scaling, dtype, cleaned)


def _values(params: dict[str, np.ndarray], elem_type: int) -> tuple[dict[str, Any], str]:
    """The parameters cast to the base's dtype (through float32, rounded once) as OrtValues, and the dtype's name."""
    import ml_dtypes
    import onnxruntime as ort

    values = {}
    for name, array in params.items():
        if elem_type == ONNX_FLOAT:
            values[name] = ort.OrtValue.ortvalue_from_numpy(array)
        elif elem_type == ONNX_FLOAT16:
            values[name] = ort.OrtValue.ortvalue_from_numpy(array.astype(np.float16))
        elif elem_type == ONNX_BFLOAT16:
            raw = array.astype(ml_dtypes.bfloat16).view(np.uint16)
            values[name] = ort.OrtValue.ortvalue_from_numpy_with_onnx_type(raw, ONNX_BFLOAT16)
        else:
            raise InputError(f"the base's LoRA inputs have ONNX element type {elem_type}, not a float type")
    return values, {ONNX_FLOAT: "float32", ONNX_FLOAT16: "float16", ONNX_BFLOAT16: "bfloat16"}[elem_type]


def check_adapters(files: list[Path], package: Path) -> None:
    """Adapters a run activates together: each file's parameters are inputs of the package, and no
    two files set the same one. onnxruntime takes overlapping adapters without a word and computes
    one of them, not their sum (probed, docs/lora.md §5), so overlap is refused."""
    import onnxruntime as ort

    inputs = base_lora_inputs(package, named="--adapter needs a multi-LoRA base, but")
    owner: dict[str, Path] = {}
    for file in files:
        if not file.is_file():
            raise InputError(f"--adapter {file}: no such file")
        try:
            names = list(ort.AdapterFormat.read_adapter(str(file)).get_parameters())
        except Exception as exc:  # onnxruntime raises a plain RuntimeError on a bad file
            raise InputError(f"--adapter {file}: not an .onnx_adapter file ({str(exc).splitlines()[0]})") from None
        for name in names:
            if name not in inputs:
                raise InputError(f"--adapter {file}: parameter {name} is not a LoRA input of {package}")
            if name in owner:
                raise InputError(
                    f"--adapter {file} and {owner[name]} both set {name}; adapters active together must "
                    "touch different modules (merge them into one adapter instead)"
                )
            owner[name] = file
