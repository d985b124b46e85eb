"""The lowest transformers the package accepts (pyproject: transformers>=FLOOR) runs the family
parity subset too: a virtualenv on top of this interpreter's packages gets transformers==FLOOR
(and the huggingface-hub / tokenizers it needs) from the package registry, once per cache folder,
and runs prefill/decode logits vs HF and greedy tokens through onnxruntime-genai for every Llama
variant and dense family of tests/variants.py, with checkpoints spelled the way 4.x writes them.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FLOOR = re.search(r'"transformers>=([0-9.]+)"', (ROOT / "pyproject.toml").read_text()).group(1)  # type: ignore[union-attr]
PIN = {"4.57": "4.57.6"}.get(FLOOR, FLOOR)  # the newest patch of the floor's minor
SUBSET = ["tests/graph/test_decoder.py", "tests/test_run.py"]


@pytest.mark.skipif(os.environ.get("GQA_EXPORT_FLOOR_RUN") == "1", reason="already running under the floor")
def test_family_parity_under_the_lowest_supported_transformers():
    env_dir = Path(os.environ.get("GQA_EXPORT_TEST_CACHE", Path.home() / ".cache" / "gqa-export-tests")) / (
        f"transformers-{PIN}"
    )
    python = env_dir / "bin" / "python"
    if not python.exists():
        venv.create(env_dir, system_site_packages=True, with_pip=True)
    check = subprocess.run([str(python), "-c", "import transformers; print(transformers.__version__)"],
                           capture_output=True, text=True)  # fmt: skip
    if check.stdout.strip() != PIN:
        subprocess.run(
            [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", f"transformers=={PIN}"],
            check=True,
        )
    env = {**os.environ, "GQA_EXPORT_FLOOR_RUN": "1", "PYTHONPATH": str(ROOT)}
    run = subprocess.run(
        [str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x", *SUBSET],
        cwd=ROOT, env=env, capture_output=True, text=True,
    )  # fmt: skip
    tail = "\n".join((run.stdout + run.stderr).strip().splitlines()[-25:])
    assert run.returncode == 0, f"under transformers {PIN}:\n{tail}"
    assert " passed" in tail and sys.version_info  # the subset really ran
