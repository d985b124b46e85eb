"""Lints for recurrent state (hybrid decoders): what onnxruntime-genai 0.18 needs to bind it.

The runtime allocates each `past.N.conv` from the graph input's static dims (every axis but the
batch), swaps it with `present.N.conv` after each step, and takes every layer's kind from
`decoder.layer_types`: "full_attention" layers get a KV cache, the others a conv state; the list
must cover every layer, and the name templates must match the graph (docs/hybrid-state.md §1.2,
§1.3). A graph with `past.N.recurrent` inputs (gated DeltaNet, Mamba2's SSM state: §8.2) is bound
by the RecurrentState instead: it finds the layers through `past_recurrent_names` and binds a conv
and a recurrent state under each index, so every recurrent layer needs its conv state, and
`layer_types` must be absent, or the conv KV cache binds the conv states a second time (§1.1).
"""

from __future__ import annotations

import re

from gqa_export.check.findings import Finding
from gqa_export.check.reader import Package

_PAST_CONV = re.compile(r"^past\.(\d+)\.conv$")
_PAST_RECURRENT = re.compile(r"^past\.(\d+)\.recurrent$")
_PAST_KEY = re.compile(r"^past_key_values\.(\d+)\.key$")
PAST_CONV_NAMES, PRESENT_CONV_NAMES = "past.%d.conv", "present.%d.conv"
PAST_RECURRENT_NAMES, PRESENT_RECURRENT_NAMES = "past.%d.recurrent", "present.%d.recurrent"


def state_findings(pkg: Package, _: int) -> list[Finding]:
    if not pkg.graphs:
        return []
    g = pkg.graphs[0]
    conv = {int(m.group(1)): i for i in g.inputs if (m := _PAST_CONV.match(i["name"]))}
    recurrent = {int(m.group(1)): i for i in g.inputs if (m := _PAST_RECURRENT.match(i["name"]))}
    if not conv and not recurrent:
        return []
    outputs = {o["name"]: o for o in g.outputs}
    out = []
    states = [(layer, info, "conv") for layer, info in conv.items()]
    states += [(layer, info, "recurrent") for layer, info in recurrent.items()]
    for layer, info, kind in sorted(states, key=lambda s: (s[0], s[2])):
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
        present = outputs.get(f"present.{layer}.{kind}")
        if present is None or list(present["shape"])[1:] != shape[1:]:
            out.append(
                Finding(
                    "state-present",
                    "error",
                    f"{g.filename}: {info['name']} has no present.{layer}.{kind} output of the same shape",
                    f"return the new state as present.N.{kind}",
                )
            )
    if recurrent:
        return out + _recurrent_findings(pkg, set(conv), set(recurrent))
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


def _recurrent_findings(pkg: Package, conv: set[int], recurrent: set[int]) -> list[Finding]:
    """What the RecurrentState needs (docs/hybrid-state.md §1.1, §1.2): a conv state under every
    recurrent layer's index, all four name templates as the graph spells them, no layer_types."""
    out = []
    if conv != recurrent:
        out.append(
            Finding(
                "state-layers",
                "error",
                f"layers {sorted(recurrent)} have a recurrent state but layers {sorted(conv)} a conv state; "
                "the runtime binds both under each recurrent layer's index",
                "give every past.N.recurrent a past.N.conv, and no other layer a conv state",
            )
        )
    decoder = pkg.decoder
    if "layer_types" in decoder:
        out.append(
            Finding(
                "state-layer-types",
                "error",
                "decoder.layer_types is set for a graph with recurrent state: the conv KV cache would bind "
                "the conv states a second time",
                "remove decoder.layer_types; past_recurrent_names finds the layers",
            )
        )
    inputs, outputs = decoder.get("inputs") or {}, decoder.get("outputs") or {}
    names = (
        inputs.get("past_conv_names"),
        inputs.get("past_recurrent_names"),
        outputs.get("present_conv_names"),
        outputs.get("present_recurrent_names"),
    )
    want = (PAST_CONV_NAMES, PAST_RECURRENT_NAMES, PRESENT_CONV_NAMES, PRESENT_RECURRENT_NAMES)
    if names != want:
        out.append(
            Finding(
                "state-names",
                "error",
                f"decoder past_conv_names/past_recurrent_names/present_conv_names/present_recurrent_names are "
                f"{names}; the graph's states are past.N.conv/past.N.recurrent/present.N.conv/present.N.recurrent",
                "set them to " + ", ".join(want),
            )
        )
    return out
