"""An expert tensor whose stored shape is not the one the config implies is refused in one line
naming the tensor (graph/experts.check_expert_shapes), for the gated layouts (MoE/QMoE) and the
ungated plain-op ones (Nemotron-H), before anything is written."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from gqa_export.errors import InputError
from gqa_export.pipeline import BuildOptions, build


def _truncate_one(source: Path, folder: Path, marker: str) -> str:
    """A copy of `source` whose first tensor named like `marker` loses its last row."""
    shutil.copytree(source, folder)
    for shard in sorted(folder.glob("*.safetensors")):
        tensors = load_file(str(shard))
        name = next((n for n in sorted(tensors) if marker in n), None)
        if name is not None:
            tensors[name] = np.ascontiguousarray(tensors[name][..., :-1, :])
            save_file(tensors, str(shard), metadata={"format": "pt"})
            return name
    raise AssertionError(f"no tensor named like {marker}")


@pytest.mark.parametrize("family", ["qwen3_moe", "nemotron_h_moe"])
def test_wrong_expert_shape_is_refused(builds, tmp_path, family):
    name = _truncate_one(builds.checkpoint(family), tmp_path / "ckpt", "experts.0.up_proj")
    with pytest.raises(InputError, match=rf"expert tensor '{re.escape(name)}' has shape .* from the config"):
        build(BuildOptions(str(tmp_path / "ckpt"), tmp_path / "pkg", smoke=False))
    assert not (tmp_path / "pkg").exists()
