"""The mutant table stays applicable (issue #36): a refactor that changes a mutated line must update
its mutant, or benchmarks/mutation.py would stop at it. Cheap: no test of a mutant is run here."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from source_mutants import MUTANTS, apply

ROOT = Path(__file__).resolve().parents[2]
AREAS = {"import", "quant", "graph", "package", "release", "verify", "guard", "runtime", "check"}


def test_at_least_forty_mutants_over_every_area_with_unique_ids():
    assert len(MUTANTS) >= 40
    assert len({m.id for m in MUTANTS}) == len(MUTANTS)
    assert {"import", "quant", "graph", "package", "release", "verify", "guard"} <= {m.area for m in MUTANTS} <= AREAS


@pytest.mark.parametrize("mutant", MUTANTS, ids=[m.id for m in MUTANTS])
def test_each_mutant_applies_to_one_line_and_names_existing_tests(mutant, tmp_path):
    source = ROOT / mutant.file
    text = source.read_text()
    assert sum(line.strip() == mutant.original.strip() for line in text.splitlines()) == 1
    assert mutant.replacement.strip() != mutant.original.strip()
    copy = tmp_path / mutant.file
    copy.parent.mkdir(parents=True)
    shutil.copy(source, copy)
    apply(mutant, tmp_path)
    changed = [(a, b) for a, b in zip(text.splitlines(), copy.read_text().splitlines(), strict=True) if a != b]
    assert len(changed) == 1 and changed[0][1].strip() == mutant.replacement.strip(), changed
    assert mutant.tests or mutant.equivalent
    for node in mutant.tests:
        file, _, name = node.partition("::")
        assert (ROOT / file).is_file(), node
        if name:
            function = re.sub(r"\[.*\]$", "", name)
            assert re.search(rf"^def {function}\(", (ROOT / file).read_text(), re.M), node
