"""`release SPEC --list`: the spec's variants as a CI matrix, the source's revision pinned once.

The JSON is `{"include": [{"variant", "ep", "runner", "artifact", "revision"?}, ...]}`, what GitHub
Actions' `strategy.matrix: ${{ fromJSON(...) }}` takes as is (GitLab's `parallel:matrix` and Azure's
`matrix` take the same entries): one job per variant, its runner label from its EP (`--runner
cuda=gpu-a100`; every EP without one runs on `ubuntu-latest`: exporting needs no accelerator, only
evaluating on one does), `artifact` the name its part is uploaded under. A Hub source's branch or
tag is resolved to its commit here, once, and every job is given that commit (`--revision`), so a
push to the branch while the matrix runs cannot mix weights; a local folder has no revision (each
part records its content hash instead, release/parts.py).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gqa_export import choices
from gqa_export.errors import InputError, RunError
from gqa_export.release.parts import part_name
from gqa_export.release.spec import ReleaseSpec

DEFAULT_RUNNER = "ubuntu-latest"
COMMIT = re.compile(r"[0-9a-f]{40}")


def runner_labels(given: Sequence[str]) -> dict[str, str]:
    """`--runner EP=LABEL` values as {ep: label}; an unknown EP or a malformed value is refused."""
    labels: dict[str, str] = {}
    for item in given:
        ep, _, label = item.partition("=")
        if not label.strip() or ep not in choices.EPS:
            raise InputError(
                f"--runner {item}: expected EP=LABEL with EP one of {', '.join(choices.EPS)} (e.g. cuda=gpu-a100)"
            )
        labels[ep] = label.strip()
    return labels


def matrix(spec: ReleaseSpec, runners: dict[str, str], revision: str | None = None) -> dict[str, Any]:
    commit = pin_revision(spec, revision)
    include = []
    for variant in spec.variants:
        ep = variant.options.ep
        entry = {"variant": variant.path, "ep": ep, "runner": runners.get(ep, DEFAULT_RUNNER)}
        entry["artifact"] = part_name(variant.path)
        if commit is not None:
            entry["revision"] = commit
        include.append(entry)
    return {"include": include}


def pin_revision(spec: ReleaseSpec, revision: str | None) -> str | None:
    """The commit a Hub source's revision (`revision`, else the spec's, else main) stands for; None
    for a local source."""
    if Path(spec.source).exists():
        if revision:
            raise InputError(f"--revision applies to Hub ids, but {spec.file.name}'s source is a local folder")
        return None
    wanted = revision or spec.revision or "main"
    if COMMIT.fullmatch(wanted):
        return wanted
    return _hub_commit(spec.source, wanted)


def _hub_commit(repo_id: str, revision: str) -> str:
    from huggingface_hub import HfApi
    from huggingface_hub import errors as hf_errors

    try:
        info = HfApi().model_info(repo_id, revision=revision)
    except hf_errors.RevisionNotFoundError:
        raise InputError(f"revision '{revision}' of '{repo_id}' was not found on the Hugging Face Hub") from None
    except hf_errors.RepositoryNotFoundError:
        raise InputError(
            f"model '{repo_id}' was not found on the Hugging Face Hub "
            "(check the id, or set HF_TOKEN for a private model)"
        ) from None
    except Exception as exc:  # the network or the Hub: the list job can be rerun
        raise RunError(
            f"could not resolve revision '{revision}' of '{repo_id}' on the Hugging Face Hub "
            f"({type(exc).__name__}); check the connection, or give --revision COMMIT"
        ) from None
    if not isinstance(info.sha, str) or not COMMIT.fullmatch(info.sha):
        raise RunError(f"the Hugging Face Hub gave no commit for revision '{revision}' of '{repo_id}'")
    return info.sha
