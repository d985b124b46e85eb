"""Release pipelines: many variants of one model from one fetch (`gqa-export release`)."""

from gqa_export.release.assemble import ReleaseError, ReleaseResult, release
from gqa_export.release.spec import ReleaseSpec, Variant, folder_name, load_spec

__all__ = ["ReleaseError", "ReleaseResult", "ReleaseSpec", "Variant", "folder_name", "load_spec", "release"]
