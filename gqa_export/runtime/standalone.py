"""Can onnxruntime-genai generate from this package on its own? One sentence when it cannot.

genai's decoder state binds the token ids to the decoder's `input_ids` input (unless an embedding
model feeds it: the multimodal packages, docs/multimodal.md §2) and reads the next token's scores
from its `logits` output (the names genai_config.json's `decoder.inputs` / `decoder.outputs` give,
default these). A `--inputs-embeds` build takes `inputs_embeds` instead and a `--no-lm-head` build
outputs `hidden_states` instead (graph/io_options.py): stages of a larger pipeline. Given to genai,
they fail only when the generator starts, with "Model input was not found: input_ids" or "Model
output was not found: logits". Every command that generates (`run`, `eval`, the smoke runs of
`build`, `quantize` and `verify --smoke`, a release's eval) asks here first: `run` and `eval`
refuse in one line, the smoke runs are skipped and say so.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from gqa_export.check.stages import decoder_stages
from gqa_export.errors import InputError
from gqa_export.jsonio import read_json

# what each pipeline form takes or gives instead, the flag that makes it, and what it is for
_INSTEAD_OF_IDS = {"inputs_embeds": ("--inputs-embeds", "a stage of a pipeline that computes the embeddings")}
_INSTEAD_OF_LOGITS = {"hidden_states": ("--no-lm-head", "a stage that gives hidden states, for embeddings")}


@dataclass(frozen=True)
class GenerationRefusal:
    """Why genai cannot generate from a package (`what`, a clause about "it"), and what would work
    instead (`fix`)."""

    what: str
    fix: str

    def sentence(self, package: Path) -> str:
        return f"{package}: {self.what}; {self.fix}"


def generation_refusal(package: Path) -> GenerationRefusal | None:
    """None when genai can generate from the package on its own, else why not. A graph that is
    missing or unreadable is left to the loader, whose own line names it."""
    import onnx

    config = read_json(package / "genai_config.json") or {}
    model = config.get("model") if isinstance(config.get("model"), dict) else {}
    decoder = model.get("decoder") if isinstance(model.get("decoder"), dict) else {}
    inputs, outputs = set(), set()
    for filename, *_ in decoder_stages(config):
        try:
            graph = onnx.load(str(package / filename), load_external_data=False).graph
        except Exception:  # missing or not ONNX: the load that follows says so in its own line
            return None
        inputs |= {v.name for v in graph.input}
        outputs |= {v.name for v in graph.output}
    ids = str((decoder.get("inputs") or {}).get("input_ids", "input_ids"))
    logits = str((decoder.get("outputs") or {}).get("logits", "logits"))
    embedded = isinstance(model.get("embedding"), dict)  # an embedding model turns the ids into embeddings
    if not embedded and ids not in inputs:
        return _refusal(f"takes no {ids} input", ids, inputs, _INSTEAD_OF_IDS, "takes")
    if logits not in outputs:
        return _refusal(f"gives no {logits} output", logits, outputs, _INSTEAD_OF_LOGITS, "gives")
    return None


def _refusal(
    lacks: str, needed: str, present: set[str], instead: dict[str, tuple[str, str]], verb: str
) -> GenerationRefusal:
    cannot = "onnxruntime-genai cannot generate from it on its own: its decoder"
    for name, (flag, role) in instead.items():
        if name in present:
            return GenerationRefusal(
                f"{cannot} {verb} {name}, not {needed} (a {flag} build, {role})",
                f"run it through onnxruntime inside that pipeline, or rebuild without {flag} to generate from it",
            )
    return GenerationRefusal(f"{cannot} {lacks}", "re-export the package with gqa-export build")


def check_generates(package: Path) -> None:
    """InputError (exit 2, one line) unless genai can generate from the package on its own."""
    refusal = generation_refusal(package)
    if refusal is not None:
        raise InputError(refusal.sentence(package))
