"""compactor-run end to end, in a subprocess, as a user runs it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from compactor import get_counter

from .helpers import EVAL, REPO, run_cli

PAGE = REPO / "examples" / "page.html"
COUNTER = get_counter("cl100k_base")


def test_shipped_pipeline_on_a_real_page_fits_the_budget() -> None:
    result = run_cli("pipelines/generic.yaml", str(PAGE), "--budget", "150")
    assert result.returncode == 0, result.stderr
    assert 100 <= COUNTER.count(result.stdout) <= 150
    assert "42 production clusters" in result.stdout
    assert "Accept all" not in result.stdout


@pytest.mark.skipif(not (EVAL / "web-article-extraction").is_dir(), reason="no ../shared/eval")
def test_real_news_page_fits_500_tokens(tmp_path: Path) -> None:
    import gzip

    lines = (EVAL / "web-article-extraction" / "pages.jsonl").read_text(encoding="utf-8").splitlines()
    row = next(r for r in map(json.loads, lines) if len(r["gold_text"]) > 6000)
    html = gzip.decompress((EVAL / "web-article-extraction" / row["html_path"]).read_bytes())
    page = tmp_path / "page.html"
    page.write_bytes(html)
    result = run_cli("generic", str(page), "--budget", "500")
    assert result.returncode == 0, result.stderr
    assert 300 <= COUNTER.count(result.stdout) <= 500
    kept = [p for p in result.stdout.split("\n\n") if len(p) > 80]
    assert kept and all(p[:60] in row["gold_text"] for p in kept[:3])


def test_json_output_carries_provenance() -> None:
    result = run_cli("generic", str(PAGE), "--budget", "200", "--format", "json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["budget"] == 200 and data["text_tokens"] <= 200
    kept = {c["id"]: c for c in data["chunks"] if c["kept"] or c["partial"]}
    assert not any(c["kept"] and c["partial"] for c in data["chunks"])
    [segment] = data["segments"]
    assert segment["chunk_ids"] and set(segment["chunk_ids"]) <= set(kept)
    assert all(c["end"] > c["start"] and c["tokens"] > 0 for c in kept.values())
    # an HTML page: offsets index the extracted text, which the JSON carries
    [source] = data["sources"]
    assert source["offsets_into"] == "extracted_text"
    assert data["spans"] and all(source["base_text"][s["start"]:s["end"]] == s["text"]
                                 for s in data["spans"])
    assert " ".join(" ".join(s["text"].split()) for s in data["spans"]) == " ".join(
        " ".join(part.split()) for part in segment["text"].split("[…]"))
    assert [s["stage"] for s in data["steps"]][:4] == ["clean", "clean", "clean", "chunk"]


def test_stdin_to_atomic_output_file_and_report(tmp_path: Path) -> None:
    out, report = tmp_path / "out.txt", tmp_path / "report.json"
    text = "Paris is the capital of France. " * 40 + "\n\n北京是中国的首都。" * 20
    result = run_cli("generic", "-", "-b", "60", "-o", str(out), "--report", str(report),
                     stdin=text.encode())
    assert result.returncode == 0, result.stderr
    assert result.stdout == ""
    written = out.read_text(encoding="utf-8")
    assert written.endswith("\n")  # the file's line end is framing, not compressed text
    assert COUNTER.count(written[:-1]) <= 60
    steps = json.loads(report.read_text(encoding="utf-8"))["steps"]
    assert steps[-1]["stage"] == "render" and steps[-1]["tokens_out"] <= 60
    assert all(s["seconds"] >= 0 for s in steps)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


@pytest.mark.parametrize(
    ("args", "stdin", "code", "message"),
    [
        (["generic", "-"], b"", 2, "the input is empty"),
        (["generic", "-"], b"\xff\xfe\x00\x00binary\x00", 2, "binary"),
        (["generic", "-"], b"caf\xe9", 2, "invalid UTF-8"),
        (["generic", "missing.txt"], None, 2, "missing.txt: no such file"),
        (["no-such-pipeline"], None, 2, "Shipped pipelines: conversation, deep-search, generic"),
        (["generic", "-", "--budget", "0"], b"x", 2, "--budget must be a positive"),
        ([], None, 2, "a pipeline file is required"),
    ],
)
def test_user_errors_exit_with_one_clear_line(args: list[str], stdin: bytes | None, code: int,
                                               message: str) -> None:
    result = run_cli(*args, stdin=stdin)
    assert result.returncode == code
    assert message in result.stderr
    assert "Traceback" not in result.stderr


def test_debug_shows_the_traceback() -> None:
    result = run_cli("generic", "missing.txt", "--debug")
    assert result.returncode == 2
    assert "Traceback" in result.stderr


def test_huge_single_line_is_handled() -> None:
    line = ("word " * 60000).strip()
    result = run_cli("generic", "-", "--budget", "100", stdin=line.encode())
    assert result.returncode == 0, result.stderr
    assert 0 < COUNTER.count(result.stdout) <= 100


def test_print_config_and_list_plugins() -> None:
    printed = run_cli("generic", "--print-config")
    assert printed.returncode == 0 and "use: chunk.sentences" in printed.stdout
    listed = run_cli("--list-plugins")
    for name in ("clean.html", "chunk.tokens", "chunk.sentences", "render.json"):
        assert f"{name}  [" in listed.stdout
