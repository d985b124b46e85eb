"""The lowest transformers the package accepts (pyproject: transformers>=FLOOR) runs the family
parity subset too: a virtualenv layered on top of the running interpreter's packages (a `.pth` file
naming its site-packages, so it works from inside a virtualenv too, where `system_site_packages`
would reach the base interpreter instead) gets transformers==FLOOR (and the huggingface-hub /
tokenizers it needs) from the package registry, once per cache folder and parent interpreter,
and runs the tokenizer / EOS / ragged-batch checks of tests/runtime/test_run.py, Phi-3 longrope's switch
(tests/graph/test_decoder.py), the published 4.x configs of tests/model/test_real_configs.py, and the
family registry (tests/families.py) on a representative subset of its rows, with checkpoints
spelled and initialised the way 4.x writes them.

What the floor can break is transformers-side: how 4.x spells a config (rope_scaling instead of
rope_parameters, torch_dtype, use_sliding_window, rope_local_base_freq, flat VL configs, ...) and
how its classes compute the reference. So the floor keeps at least one registry row per arch spec (every
family whose class 4.57 has: `since_major` marks the rest) and one per config spelling of a spec
(each rope type, windows, sharded bf16, the hybrids' state layers, the MoE layouts, the multimodal
classes' decoders, Falcon's three layouts); each gets every HF comparison of tests/arch/test_families.py
(prompt/decode logits, the 1-token prompt, greedy tokens against HF generate, the standard-Attention
graph's logits and tokens, the fp16 CUDA graph) in its first greedy and first standard-Attention
mode. Left to the 5.x run (every row, every mode): rows that differ from a kept row only in shapes
or in a bias / norm / window switch read from the same config keys (LEFT_TO_5X; a row added to the
registry runs under the floor unless listed there), the other attention
modes (graphs of the exporter's own, the same HF reference), and the quantized packages except
FLOOR_QUANTIZED (one row per quantization path: dense int4, fused experts in QMoE int4/int8, a
hybrid, a multimodal decoder), as quantization compares weights with the checkpoint's tensors and
calls no transformers code. conftest.py's pytest_collection_modifyitems applies the selection.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
from layered_venv import create_layered, layered_venv

ROOT = Path(__file__).resolve().parents[2]
FLOOR = re.search(r'"transformers>=([0-9.]+)"', (ROOT / "pyproject.toml").read_text()).group(1)  # type: ignore[union-attr]
PIN = {"4.57": "4.57.6"}.get(FLOOR, FLOOR)  # the newest patch of the floor's minor
SUBSET = [
    "tests/graph/test_decoder.py",
    "tests/runtime/test_run.py",
    "tests/arch/test_families.py",  # all rows but LEFT_TO_5X, in their first modes (the docstring says why)
    "tests/model/test_real_configs.py",
]
# registry rows the floor run leaves to the 5.x run: each differs from a row it keeps only in shapes or in
# a bias / norm / window switch read from the same config keys (stablelm_par_qkln: 4.57 cannot build
# it). Every other row whose class 4.57 has runs under the floor, rows added later included.
LEFT_TO_5X = (
    "mha", "mqa_tied", "head_dim_32", "phi3_rotary_24", "llama_head_dim_24", "phi_qkln", "stablelm_par_qkln",
    "cohere_qknorm", "ernie4_5_bias", "olmo_noclip",
)  # fmt: skip
# kept although they look like switches: exaone4_nosliding takes HF's RoPE-on-every-layer branch
# (sliding_window None), lfm2_bias spells its layers as full_attn_idxs with other conv keys
FLOOR_QUANTIZED = ("phi", "qwen3_moe", "lfm2", "gemma3_vision")


# what the floor venv must import: transformers at the pin, and this package's own dependencies
# (reached through the parent interpreter); a cache that fails this is rebuilt, never reused
PROBE = "import transformers, onnx_ir, onnxruntime_genai, torch; print(transformers.__version__)"


def _floor_env() -> Path:
    """The floor venv for this interpreter: its own site-packages first, then the parent's."""
    env_dir = layered_venv(f"transformers-{PIN}")
    python = env_dir / "bin" / "python"
    if _probe(python) == PIN:
        return python
    python = create_layered(env_dir)
    subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", f"transformers=={PIN}"],
        check=True,
    )
    found = _probe(python)
    assert found == PIN, f"the floor venv {env_dir} does not import transformers {PIN} and the package's dependencies"
    return python


def _probe(python: Path) -> str | None:
    if not python.exists():
        return None
    check = subprocess.run([str(python), "-c", PROBE], capture_output=True, text=True)
    return check.stdout.strip() if check.returncode == 0 else None


@pytest.mark.skipif(os.environ.get("GQA_EXPORT_FLOOR_RUN") == "1", reason="already running under the floor")
def test_family_parity_under_the_lowest_supported_transformers():
    python = _floor_env()
    env = {
        **os.environ,
        "GQA_EXPORT_FLOOR_RUN": "1",
        "GQA_EXPORT_FLOOR_LEFT_OUT": ",".join(LEFT_TO_5X),
        "GQA_EXPORT_FLOOR_QUANTIZED": ",".join(FLOOR_QUANTIZED),
        "PYTHONPATH": str(ROOT),
    }
    run = subprocess.run(
        [str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x", *SUBSET],
        cwd=ROOT, env=env, capture_output=True, text=True,
    )  # fmt: skip
    tail = "\n".join((run.stdout + run.stderr).strip().splitlines()[-25:])
    assert run.returncode == 0, f"under transformers {PIN}:\n{tail}"
    assert re.search(r"\b[1-9][0-9]* passed", tail), f"the subset ran no test:\n{tail}"
