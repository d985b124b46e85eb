"""Lints for recurrent state (hybrid decoders): what onnxruntime-genai 0.18 needs to bind it.

The runtime allocates each `past.N.conv` from the graph input's static dims (every axis but the
batch), swaps it with `present.N.conv` after each step, and takes every layer's kind from
`decoder.layer_types`: "full_attention" layers get a KV cache, the others a conv state; the list
must cover every layer, and the name templates must match the graph (docs/hybrid-state.md §1.2,
§1.3).
"""

from __future__ import annotations

import re

from gqa_export.check.findings import Finding
from gqa_export.check.reader import Package

_PAST_CONV = re.compile(r"^past\.(\d+)\.conv$")
_PAST_KEY = re.compile(r"^past_key_values\.(\d+)\.key$")
PAST_CONV_NAMES, PRESENT_CONV_NAMES = "past.%d.conv", "present.%d.conv"


def state_findings(pkg: Package, _: int) -> list[Finding]:
    if not pkg.graphs:
        return []
    g = pkg.graphs[0]
    conv = {int(m.group(1)): i for i in g.inputs if (m := _PAST_CONV.match(i["name"]))}
    if not conv:
        return []
    outputs = {o["name"]: o for o in g.outputs}
    out = []
    for layer, info in sorted(conv.items()):
        shape = list(info["shape"])
        if not all(isinstance(d, int) for d in shape[1:]):
            out.append(
                Finding(
                    "state-shape",
                    "error",
                    f"{g.filename}: {info['name']} is {shape}; the runtime allocates recurrent state from static dims",
                    "give every axis but the batch a fixed size",
                )
            )
        present = outputs.get(f"present.{layer}.conv")
        if present is None or list(present["shape"])[1:] != shape[1:]:
            out.append(
                Finding(
                    "state-present",
                    "error",
                    f"{g.filename}: {info['name']} has no present.{layer}.conv output of the same shape",
                    "return the new state as present.N.conv",
                )
            )
    kv = {int(m.group(1)) for i in g.inputs if (m := _PAST_KEY.match(i["name"]))}
    count = max(*kv, *conv) + 1
    want = ["full_attention" if i in kv else "conv" for i in range(count)]
    decoder = pkg.decoder
    if decoder.get("layer_types") != want:
        out.append(
            Finding(
                "state-layer-types",
                "error",
                f"decoder.layer_types is {decoder.get('layer_types')} but the graph's layers are {want}",
                "list every layer: full_attention for KV layers, conv for conv-state layers",
            )
        )
    inputs, outputs_config = decoder.get("inputs") or {}, decoder.get("outputs") or {}
    names = (inputs.get("past_conv_names"), outputs_config.get("present_conv_names"))
    if names != (PAST_CONV_NAMES, PRESENT_CONV_NAMES):
        out.append(
            Finding(
                "state-names",
                "error",
                f"decoder past_conv_names/present_conv_names are {names}; the graph's states are "
                "past.N.conv/present.N.conv",
                f'set "past_conv_names": "{PAST_CONV_NAMES}" and "present_conv_names": "{PRESENT_CONV_NAMES}"',
            )
        )
    return out
