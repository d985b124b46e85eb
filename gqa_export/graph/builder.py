"""A thin, typed helper over onnx-ir for building a graph node by node.

Nodes get hierarchical names (`/model/layers.3/attn/GroupQueryAttention`) so that later stages
(quantize's exclude patterns, inspect) can address them, and values get readable names.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np
import onnx_ir as ir

from gqa_export.graph.params import NUMPY_DTYPES

Dim = int | str


class GraphBuilder:
    def __init__(self, name: str, opsets: dict[str, int]) -> None:
        self.graph = ir.Graph([], [], nodes=[], opset_imports=opsets, name=name)
        self._scope: list[str] = ["model"]
        self._used: dict[str, int] = {}
        self._reusing = False

    # --- scopes and names --------------------------------------------------------------------
    @contextmanager
    def scope(self, name: str) -> Iterator[None]:
        self._scope.append(name)
        try:
            yield
        finally:
            self._scope.pop()

    @contextmanager
    def graph_scope(self, name: str) -> Iterator[None]:
        """Name nodes as the graph's own (`/model/<name>/...`) from inside a layer's scope: values
        built once, at their first use, and read by every layer."""
        saved = self._scope
        self._scope = ["model", name]
        try:
            yield
        finally:
            self._scope = saved

    def _unique(self, base: str) -> str:
        n = self._used.get(base, 0)
        self._used[base] = n + 1
        return base if n == 0 else f"{base}_{n}"

    # --- graph I/O and constants -------------------------------------------------------------
    def input(self, name: str, dtype: ir.DataType, shape: Sequence[Dim]) -> ir.Value:
        value = ir.Value(name=name, type=ir.TensorType(dtype), shape=ir.Shape(shape))
        self.graph.inputs.append(value)
        return value

    def output(self, value: ir.Value, name: str, dtype: ir.DataType, shape: Sequence[Dim]) -> None:
        value.name = name
        typed(value, dtype, shape)
        self.graph.outputs.append(value)

    @contextmanager
    def reusing_initializers(self) -> Iterator[None]:
        """Inside: an initializer asked for again by name is the one already registered (weights a
        family reuses in several places, Zamba2's shared blocks: written once, read by every use).
        Outside, a second registration under one name is an error, as onnx-ir makes it."""
        self._reusing = True
        try:
            yield
        finally:
            self._reusing = False

    def initializer(self, name: str, tensor: ir.TensorProtocol) -> ir.Value:
        if self._reusing and name in self.graph.initializers:
            return self.graph.initializers[name]
        tensor.name = name
        value = ir.Value(name=name, type=ir.TensorType(tensor.dtype), shape=ir.Shape(tensor.shape), const_value=tensor)
        self.graph.register_initializer(value)
        return value

    def const(self, array: Any, name: str, dtype: np.dtype | None = None) -> ir.Value:
        """A small constant initializer (kept inline in model.onnx, not in external data)."""
        arr = np.asarray(array, dtype=dtype)
        return self.initializer(self._unique(f"const.{name}"), ir.Tensor(arr))

    # --- nodes -------------------------------------------------------------------------------
    def op(
        self,
        op_type: str,
        *inputs: ir.Value | None,
        domain: str = "",
        outputs: int = 1,
        name: str | None = None,
        **attributes: Any,
    ) -> ir.Value:
        return self.op_multi(op_type, *inputs, domain=domain, outputs=outputs, name=name, **attributes)[0]

    def op_multi(
        self,
        op_type: str,
        *inputs: ir.Value | None,
        domain: str = "",
        outputs: int = 1,
        name: str | None = None,
        **attributes: Any,
    ) -> Sequence[ir.Value]:
        node_name = self._unique("/" + "/".join([*self._scope, name or op_type]))
        node = ir.Node(
            domain,
            op_type,
            list(inputs),
            attributes=ir.convenience.convert_attributes({k: v for k, v in attributes.items() if v is not None}),
            num_outputs=outputs,
            name=node_name,
        )
        for i, out in enumerate(node.outputs):
            out.name = f"{node_name}/output_{i}"
        self.graph.append(node)
        return node.outputs


def typed(value: ir.Value, dtype: ir.DataType, shape: Sequence[Dim]) -> ir.Value:
    """Annotate a value's type and shape (fusion rules match on shapes)."""
    value.type = ir.TensorType(dtype)
    value.shape = ir.Shape(shape)
    return value


def float_scalar(b: GraphBuilder, value: float, dtype: ir.DataType, name: str = "scale") -> ir.Value:
    """A float scalar constant in the graph's dtype (rounded through float32, as the weights are)."""
    return b.const(np.asarray(value, dtype=np.float32).astype(NUMPY_DTYPES[dtype]), name)
