"""README's quantization-method table is benchmarks/quant_methods.py's, from its committed results.

Three checks: README holds exactly the table the results file renders to; two rows re-measured now
(the default, and `last_matmul:int8`, the row README once had stale) give the committed bytes and
perplexity; and the prose under the table says what the results say. A quantizer change that moves
a number fails here until `python benchmarks/quant_methods.py` is re-run and committed.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
# perplexity may differ across CPUs in the 4th decimal (MLAS picks int8 kernels by instruction set at accuracy level
# 4; issue #34 measured 1.8699 for a row that gives 1.8701 here); a stale row was off by 0.02
PERPLEXITY_TOLERANCE = 1e-3


def _benchmark() -> ModuleType:
    spec = importlib.util.spec_from_file_location("quant_methods", ROOT / "benchmarks" / "quant_methods.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


bench = _benchmark()


@pytest.fixture(scope="module")
def results() -> dict:
    return json.loads(bench.RESULTS.read_text())


def _row(results: dict, method: str) -> dict:
    return next(row for row in results["rows"] if row["method"] == method)


def test_readme_table_is_the_results_file(results):
    readme = bench.README.read_text()
    start, end = bench.readme_table(readme)
    assert readme[start:end] == bench.render(results), "README's table is stale: run benchmarks/quant_methods.py"
    assert [row["method"] for row in results["rows"]] == [method for method, _ in bench.ROWS]
    assert [row["flags"] for row in results["rows"]] == [flags for _, flags in bench.ROWS]


def test_update_readme_rewrites_only_the_table(results, tmp_path):
    """The generator replaces a stale table in place (indent kept) and nothing around it."""
    readme = bench.README.read_text()
    start, end = bench.readme_table(readme)
    stale = readme.replace(readme[start:end], readme[start:end].replace("| 1.", "| 9."))
    assert stale != readme
    copy = tmp_path / "README.md"
    copy.write_text(stale)
    bench.update_readme(results, copy)
    assert copy.read_text() == readme


@pytest.mark.parametrize(
    ("precision", "method"),
    [("fp32", None), ("int4", bench.DEFAULT), ("int4", "rtn + `last_matmul:int8`")],
    ids=["fp32", "default", "last_matmul-int8"],
)
def test_rows_are_current(results, tmp_path, precision, method):
    """Re-measured now: the data file byte for byte, the perplexity within the CPU's wobble."""
    committed = results["fp32"] if method is None else _row(results, method)
    flags = "" if method is None else committed["flags"]
    measured = bench.measure(precision, flags, tmp_path)
    assert measured["data_bytes"] == committed["data_bytes"], (measured, committed)
    assert measured["perplexity"] == pytest.approx(committed["perplexity"], abs=PERPLEXITY_TOLERANCE)


def test_prose_matches_the_results(results):
    """What README says under the table, read off the results file."""
    ppl = {row["method"]: row["perplexity"] for row in results["rows"]}
    size = {row["method"]: row["data_bytes"] for row in results["rows"]}
    symmetric, default = ppl["rtn symmetric (the old default, the builder's)"], ppl[bench.DEFAULT]
    assert default < symmetric  # zero points by default
    assert ppl["search (symmetric)"] <= symmetric  # search edges symmetric rtn ...
    assert ppl["search (symmetric)"] > default  # ... but is no reason to pick symmetric
    assert ppl["k_quant"] >= default  # k_quant does not beat asymmetric rtn
    lm_head, both = "rtn + `last_matmul:int8`", "rtn + `last_matmul:int8,sensitive_layers:int8`"
    mixed = [m for m in ppl if "int8" in m]

    def gain_per_byte(m: str) -> float:
        base = ppl["k_quant"] if m.startswith("k_quant") else default
        return (base - ppl[m]) / (size[m] - size[bench.DEFAULT])

    assert max(mixed, key=gain_per_byte) == lm_head  # last_matmul:int8 buys the most per byte
    assert size[both] > size[lm_head] and ppl[both] > ppl[lm_head]  # more bytes, scores worse
