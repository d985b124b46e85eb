"""The manifest's file listing trusts a hash taken while writing only for the bytes it hashed (issue #36).

package/staging.py `file_digests` reuses the sha256 a writer computed as it streamed a file (the
weights: hashing them again would read gigabytes twice), but only while the file still has the
size that was hashed; a file changed after it was written (appended to, rewritten) is hashed
again. The mutation check (benchmarks/mutation.py) dropped the size condition and no test saw it.
"""

from __future__ import annotations

import hashlib

from gqa_export.package.staging import file_digests


def test_a_known_entry_is_trusted_only_at_its_size(tmp_path):
    (tmp_path / "kept.data").write_bytes(b"abc")
    (tmp_path / "grown.data").write_bytes(b"abcdef")
    (tmp_path / "manifest.json").write_text("{}")
    known = {name: {"sha256": "hashed-while-written", "bytes": 3} for name in ("kept.data", "grown.data")}
    listed = file_digests(tmp_path, known)
    assert listed["kept.data"] == {"sha256": "hashed-while-written", "bytes": 3}  # not read again
    assert listed["grown.data"] == {"sha256": hashlib.sha256(b"abcdef").hexdigest(), "bytes": 6}
    assert "manifest.json" not in listed
