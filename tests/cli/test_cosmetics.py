"""What the CLI prints reads as written (#22 item 4): piped output is never wrapped or cut, values
are words (yes/no, "-", no Python reprs), a path that is no package says what it is instead, the
Hub hint names an offline variable only when it is set, and quantize --json has build's keys."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from gqa_export.cli import app

DATA = Path(__file__).resolve().parents[1] / "data"
TRAINED = DATA / "tiny-trained"
runner = CliRunner()
PIPE = {"COLUMNS": "80", "TTY_COMPATIBLE": None, "FORCE_COLOR": None}  # rich's own fallback: 80 columns


def _errors(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith("error:")]


@pytest.fixture(scope="module")
def release_root(tmp_path_factory) -> tuple[Path, str]:
    """Three variants, two of them int4 whose folder names differ only near their end; the text
    summary, as a pipe gets it."""
    folder = tmp_path_factory.mktemp("release")
    spec = {
        "source": str(TRAINED),
        "eval": {"text": str(DATA / "tiny-text" / "eval.txt"), "window": 128, "max_tokens": 600},
        "variants": [
            {"ep": "cpu", "precision": "fp32"},
            {"ep": "cpu", "precision": "int4", "block_size": 32},
            {"ep": "cpu", "precision": "int4", "block_size": 16},
        ],
    }
    (folder / "release.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    result = runner.invoke(app, ["release", str(folder / "release.yaml"), "-o", str(folder / "out")], env=PIPE)
    assert result.exit_code == 0, result.output
    return folder / "out", result.stdout


def test_piped_release_table_keeps_whole_names_and_perplexity_digits(release_root):
    root, text = release_root
    variants = json.loads((root / "release.json").read_text())["variants"]
    assert len({v["path"] for v in variants}) == 3
    rows = {v["path"]: next(line for line in text.splitlines() if v["path"] in line) for v in variants}
    for variant in variants:
        ppl = variant["eval"]["perplexity"]
        assert f"{ppl:.6g}" in rows[variant["path"]], text
        if "perplexity_increase_pct" in variant["eval"]:
            assert f"({variant['eval']['perplexity_increase_pct']:+.3f}%)" in rows[variant["path"]]
    assert "…" not in text and "\x1b" not in text


@pytest.mark.parametrize("command", ["run", "inspect"])
def test_a_release_root_is_named_with_its_variants(release_root, command):
    root, _ = release_root
    extra = ["--prompt", "Hi"] if command == "run" else []
    result = runner.invoke(app, [command, str(root), *extra])
    errors = _errors(result.output)
    assert result.exit_code == 2 and len(errors) == 1, result.output
    variants = [v["path"] for v in json.loads((root / "release.json").read_text())["variants"]]
    assert f"is a release of 3 package(s) ({', '.join(variants)})" in errors[0]
    assert f"e.g. {root / variants[0]}" in errors[0]


@pytest.mark.parametrize(
    ("command", "wanted"),
    [
        ("inspect", "a package folder, its genai_config.json or an .onnx file"),
        ("run", "a package folder or its genai_config.json"),
        ("eval", "a package folder or its genai_config.json"),
        ("quantize", "a package folder or its genai_config.json"),
    ],
)
def test_a_file_is_said_to_be_a_file(tmp_path, command, wanted, monkeypatch):
    (tmp_path / "README.md").write_text("# notes\n")
    monkeypatch.chdir(tmp_path)
    extra = {"run": ["--prompt", "Hi"], "eval": ["--text", "README.md"], "quantize": ["-o", "out"]}.get(command, [])
    result = runner.invoke(app, [command, "README.md", *extra])
    assert result.exit_code == 2, result.output
    assert _errors(result.output) == [f"error: README.md is a file, not {wanted}"]


def test_inspect_shows_words_not_reprs(exports):
    package = exports.get("gqa")
    for path in (package, package / "model.onnx"):
        result = runner.invoke(app, ["inspect", str(path)], env=PIPE)
        assert result.exit_code == 0, result.output
        for raw in ("None", "True", "False", "{'", "['", "=True", "=False"):
            assert raw not in result.stdout, (raw, result.stdout)
    text = runner.invoke(app, ["inspect", str(package)], env=PIPE).stdout
    assert "share buffer  yes" in text and "inputs_embeds no" in text
    assert "prompt yes, token generation yes; opsets ai.onnx" in text
    assert "[batch_size, sequence_length]" in text


def test_help_shows_values_people_read():
    """No Python types after options (<bool>, <list[str]>): flags show nothing, choices <a|b>,
    everything else a word."""
    commands = ["build", "fetch", "quantize", "inspect", "run", "release", "verify", "eval", "recipes"]
    texts = {}
    for command in [*[[c] for c in commands], ["recipes", "show"], []]:
        result = runner.invoke(app, [*command, "--help"], env={"COLUMNS": "250"})
        assert result.exit_code == 0, result.output
        texts[" ".join(command)] = result.stdout
    for name, text in texts.items():
        for raw in ("<bool>", "<str>", "<int>", "<float>", "<path>", "<list[", "None", "True", "False"):
            assert raw not in text, (name, raw)
    build = " ".join(texts["build"].split())
    for shown in (
        "--ep <cpu|cuda|openvino|webgpu|dml|trt-rtx|qnn>",
        "--keep-float PATTERN",
        "--set KEY=VALUE",
        "--max-length N",
        "-o DIR",
    ):
        assert shown in build, shown
    assert "--overwrite Replace" in build  # a flag: nothing between it and its help
    assert "--temperature NUMBER" in " ".join(texts["run"].split())


@pytest.mark.parametrize(
    ("env", "says", "never", "code"),
    [
        ({}, "the Hub cannot be reached", "OFFLINE", 1),  # the network: a failed run, not bad input
        ({"HF_HUB_OFFLINE": "1"}, "HF_HUB_OFFLINE is set, so the Hub is not asked (unset HF_HUB_OFFLINE", "reached", 2),
        ({"TRANSFORMERS_OFFLINE": "1"}, "TRANSFORMERS_OFFLINE is set", "HF_HUB_OFFLINE", 2),
    ],
)
def test_hub_hint_names_an_offline_variable_only_when_set(monkeypatch, env, says, never, code):
    import huggingface_hub
    from huggingface_hub import constants, errors

    def not_cached(*args, **kwargs):
        raise errors.LocalEntryNotFoundError("not in the cache")

    for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", bool(env))
    monkeypatch.setattr(huggingface_hub, "snapshot_download", not_cached)
    result = runner.invoke(app, ["fetch", "acme/tiny-llama", "-q"])
    errors_ = _errors(result.output)
    assert result.exit_code == code and len(errors_) == 1, result.output
    assert "model 'acme/tiny-llama' is not in the local Hugging Face cache" in errors_[0]
    assert says in errors_[0] and never not in errors_[0], errors_[0]


def test_quantize_json_has_builds_keys(checkpoints, tmp_path):
    built = runner.invoke(app, ["build", str(checkpoints.get("gqa")), "-o", str(tmp_path / "f"), "--json", "-q"])
    assert built.exit_code == 0, built.output
    build = json.loads(built.stdout)
    args = ["quantize", str(tmp_path / "f"), "-o", str(tmp_path / "q"), "--json", "-q", "--report"]
    quantized = runner.invoke(app, args)
    assert quantized.exit_code == 0, quantized.output
    quant = json.loads(quantized.stdout)
    assert set(build) <= set(quant) and set(quant) - set(build) == {"input"}, set(quant) ^ set(build)
    assert set(quant["smoke"]) == set(build["smoke"]) and quant["kv_cache"] == build["kv_cache"]
    for key in ("revision", "recipe", "attention", "ep", "max_length"):
        assert quant[key] == build[key], key
    assert quant["source"] == Path(build["source"]).name  # a local source as its manifest names it
    assert quant["precision"] == "int4" and quant["input"] == str(tmp_path / "f") and build["report"] is None
    logits = quant["report"]["logits_vs_float"]
    assert 0 < logits["relative_l2"] < 1 and not any("logits vs float" in n for n in quant["notes"])

    text = runner.invoke(app, ["quantize", str(tmp_path / "f"), "-o", str(tmp_path / "t"), "--report"], env=PIPE)
    assert text.exit_code == 0, text.output
    line = next(line for line in text.stdout.splitlines() if line.startswith("logits vs float"))
    assert f"relative L2 {logits['relative_l2']:.4g}" in line and "next-token agreement" in line
    assert "target" in text.stdout and "cpu int4, KV cache float" in text.stdout


def test_build_report_is_data(checkpoints, tmp_path):
    args = ["build", str(checkpoints.get("gqa")), "-o", str(tmp_path / "p"), "-p", "int4", "--report"]
    result = runner.invoke(app, [*args, "--json", "-q", "--no-smoke"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["report"] == json.loads((tmp_path / "p" / "quant_report.json").read_text())
    assert not any("logits vs float" in note for note in report["notes"])


def test_findings_print_their_brackets():
    """A finding's message quoting a shape keeps it: rich would read `[batch, seq]` as markup."""
    import io

    from rich.console import Console

    from gqa_export.cli.render import print_findings

    stream = io.StringIO()
    finding = {"id": "io-shape", "severity": "warning", "message": "input_ids is [batch, seq]", "fix": "use [a | b]"}
    print_findings(Console(file=stream, width=200), [finding])
    assert "input_ids is [batch, seq]" in stream.getvalue() and "use [a | b]" in stream.getvalue()
