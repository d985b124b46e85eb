"""The records a pre-quantized source format is described by (source/formats.py holds the table).

A format is data: how it is declared and detected, what is refused in which words, and the reader that
shows its quantized linears as float weights (docs/architecture.md §3.2, docs/prequantized.md §1).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Protocol

import numpy as np

from gqa_export.source.file_reader import FileReader
from gqa_export.source.weights import WeightStore

QuantizationConfig = dict[str, Any]


class Linear(Protocol):
    """One quantized linear as a reader returns it: a float W [n, k] read by rows, dequantized."""

    name: str  # the float weight it stands for, `P.weight`
    n: int
    k: int
    fmt: str  # how the manifest names its layout ("gptq v1", "fp8", ...)

    def dequantized_rows(self, a: int, b: int) -> np.ndarray: ...


@dataclass(frozen=True)
class TensorMark:
    """A tensor name ending that gives a format away, also found inside a name
    (`P.weight.quant_state.bitsandbytes__nf4`): a checkpoint that stores one and is not imported is
    refused, whatever config.json says."""

    ending: str
    says: str  # the refusal's FORMAT for it: "GPTQ or AWQ (qweight / qzeros / scales tensors)"

    def found_in(self, name: str) -> bool:
        return name.endswith(self.ending) or f"{self.ending}." in name


@dataclass(frozen=True)
class Refusal:
    """A variant of an imported format that is refused, and the build's words for it: the `why` in
    "this is a pre-quantized FORMAT checkpoint (why), which gqa-export does not import yet"."""

    changes: Mapping[str, Any]  # dotted keys of the format's `example` config -> the variant's values
    why: str

    def config(self, example: Mapping[str, Any]) -> QuantizationConfig:
        """The variant: `example` with `changes` set (a dotted key reaches into nested dicts)."""
        config = json.loads(json.dumps(dict(example)))
        for dotted, value in self.changes.items():
            *path, last = dotted.split(".")
            node = config
            for key in path:
                node = node.setdefault(key, {})
            node[last] = value
        return config


@dataclass(frozen=True)
class Reader:
    """How source/imported.ImportedStore finds a format's quantized linears P and reads them."""

    find: Callable[[WeightStore], list[str]]  # the checkpoint's store -> the prefixes P it quantized
    codes: str  # the ending of P's tensor holding its codes (".weight": kept under the float name)
    hidden: tuple[str, ...]  # P's tensors the store hides; a float `P.weight` is shown instead
    # (the importing store, the checkpoint's own store, P, quantization_config) -> the linear
    read: Callable[[WeightStore, WeightStore, str, QuantizationConfig], Linear]
    required: tuple[str, ...] = ()  # P's tensors besides the codes that must be stored
    integers: bool = False  # MatMulNBits takes its integers as they are (quant/imported.py), else dequantized


@dataclass(frozen=True)
class SourceFormat:
    name: str  # as the docs and the format's users say it (unique)
    methods: tuple[str, ...] = ()  # quantization_config `quant_method` values (compared in lower case)
    keys: tuple[str, ...] = ()  # quantization_config keys that declare it without a quant_method
    # among the formats of one quant_method: whether a config is this one's (compressed-tensors int/float)
    variant: Callable[[QuantizationConfig], bool] = lambda _qc: True
    side_files: tuple[tuple[str, str], ...] = ()  # (file beside config.json, the refusal's FORMAT for it)
    tensors: tuple[TensorMark, ...] = ()
    source_format: str = ""  # the manifest's imported_quantization.source_format and build notes ("": name)
    refused_as: str = ""  # the refusal's FORMAT for a declared config ("": source_format, else name)
    # None: never imported; else the config -> None when imported, or why this variant is not
    why_not: Callable[[QuantizationConfig], str | None] | None = None
    reader: Reader | None = None  # None for an imported format: the family's graph reads it (MXFP4)
    read_in: str = ""  # the module that reads its tensors
    dequantize: bool = False  # read only with `build --dequantize` (else refused naming the flag)
    example: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))  # a config it reads
    refuses: tuple[Refusal, ...] = ()
    docs: str = ""
    file: FileReader | None = None  # a checkpoint file format: how a MODEL path is recognized and read

    @property
    def reported(self) -> str:
        return self.source_format or self.name

    @property
    def refusal_name(self) -> str:
        return self.refused_as or self.reported

    @property
    def imported(self) -> bool:
        return self.why_not is not None

    @property
    def declaration(self) -> QuantizationConfig:
        """A quantization_config that declares it: the example, else its first quant_method or key."""
        if self.example:
            return json.loads(json.dumps(dict(self.example)))
        return {"quant_method": self.methods[0]} if self.methods else {self.keys[0]: True}
