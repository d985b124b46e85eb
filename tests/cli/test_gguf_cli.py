"""The CLI on GGUF input: `build FILE.gguf`, `build FOLDER --gguf-file`, `inspect FILE.gguf`, `fetch`.

`inspect` of a GGUF names the architecture and family, counts tensors and bytes per GGML type
(Q4_K_M keeps some in Q6_K) and says what each type is exported as; `fetch` of a GGUF prints the
file; `build --json` carries the GGUF note. The CLI process keeps torch out (cli/app.hide_torch),
so the tokenizer is built from the metadata without it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from gqa_export.cli import app

runner = CliRunner()
REPO = Path(__file__).resolve().parent.parent.parent


def test_inspect_gguf_summarises_types_and_forms(ggufs):
    path = ggufs.get("llama256", "Q4_K_M")
    result = runner.invoke(app, ["inspect", str(path), "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["architecture"] == "llama" and report["family"] == "llama" and report["exportable"]
    assert set(report["types"]) == {"Q4_K", "Q6_K", "F32"}
    assert report["types"]["Q6_K"]["tensors"] == 2 * 2 + 2  # v_proj, down_proj per layer, embedding, output
    assert report["types"]["Q4_K"]["exported_as"].startswith("MatMulNBits 4-bit block 32 + block-sum min")
    assert report["types"]["Q4_K"]["bits_per_weight"] == 4.5  # 144 bytes per 256 weights
    shown = runner.invoke(app, ["inspect", str(path)], terminal_width=200)
    assert shown.exit_code == 0 and "architecture llama -> llama" in shown.output and "Q6_K" in shown.output


def test_build_a_gguf_in_a_torch_free_process_then_fetch_prints_the_file(ggufs, tmp_path):
    path = ggufs.get("llama256", "Q8_0")
    env = {"PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"}
    args = [sys.executable, "-m", "gqa_export", "build", str(path.parent), "--gguf-file", path.name,
            "-o", str(tmp_path / "pkg"), "--json", "-q"]  # fmt: skip
    done = subprocess.run(args, capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout)
    assert any("keep the file's integer blocks" in note for note in result["notes"])
    assert result["smoke"]["new_tokens"] > 0
    assert (tmp_path / "pkg" / "tokenizer.json").is_file()
    shown = runner.invoke(app, ["inspect", str(tmp_path / "pkg"), "--json"])
    assert shown.exit_code == 0, shown.output
    gguf = json.loads(shown.stdout)["summary"]["gguf"]
    assert gguf["file"] == path.name and gguf["architecture"] == "llama"
    assert gguf["types"]["Q8_0"] == {"kept": 16, "float": 0, "requantized": 0}  # 14 linears, embedding, lm_head
    assert gguf["types"]["F32"]["float"] == 5 and gguf["types"]["F32"]["kept"] == 0
    fetched = runner.invoke(app, ["fetch", str(path), "-q"])
    assert fetched.exit_code == 0 and fetched.stdout.strip() == str(path)


def test_hub_fetch_of_one_gguf_downloads_that_file_and_the_repo_config(monkeypatch, tmp_path):
    """`--gguf-file` with a Hub id: snapshot_download asked for that file (every part of a split one)
    and the repository's config / tokenizer / card files, never the other GGUFs of the repository."""
    import huggingface_hub

    from gqa_export.source import fetch

    asked: list[list[str]] = []

    def snapshot(repo_id, revision=None, allow_patterns=(), **kwargs):
        asked.append(list(allow_patterns))
        raise huggingface_hub.errors.LocalEntryNotFoundError("no network in tests")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot)
    for name in ("model.Q4_K_M.gguf", "model-Q8_0-00001-of-00003.gguf"):
        result = runner.invoke(app, ["fetch", "org/model-GGUF", "--gguf-file", name])
        # not cached and the Hub unreachable: a failed run outside the input (exit 1, README's exit codes)
        assert result.exit_code == 1 and "is not in the local Hugging Face cache" in result.output, result.output
    assert asked[0][0] == "model.Q4_K_M.gguf" and asked[1][0] == "model-Q8_0-*-of-00003.gguf"
    for patterns in asked:
        assert "config.json" in patterns and "tokenizer.json" in patterns and "*.gguf" not in patterns
        assert fetch.ALLOW_PATTERNS[2] not in patterns  # no safetensors
