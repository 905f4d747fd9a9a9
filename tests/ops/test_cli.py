"""compactor-run end to end, in a subprocess, as a user runs it: versions, help, usage errors with
exit 2 and one clear message, inputs a pipeline cannot use, file modes, small budgets."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

import compactor
from compactor import get_counter
from compactor.pipeline import shipped_pipelines

from ..helpers import EVAL, REPO, run_cli
from ..openai_server import openai_server as openai_server

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


# Inputs a pipeline cannot use exit 2 naming the input (never exit 1, "internal error").

PROBE_TEXT = "The Orion probe reached orbit in 2031. It carried four cameras. " * 8


@pytest.mark.parametrize("body, said", [
    ("version: 1\nname: !!python/object:os.system x\nsteps:\n  - use: clean.normalize\n",
     "could not determine a constructor for the tag"),
    ("version: 1\nname: x\x00\nsteps:\n  - use: clean.normalize\n", "unacceptable character #x0000"),
])
def test_unsafe_or_unreadable_yaml_is_an_error_naming_the_file(tmp_path: Path, body: str, said: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(body)
    for extra in ((), ("--check",)):
        result = run_cli(str(path), "-", *extra, stdin=PROBE_TEXT.encode())
        assert result.returncode == 2, result.stderr
        assert "internal error" not in result.stderr
        assert str(path) in result.stderr and said in result.stderr


def test_a_conversation_pipeline_given_plain_text_names_the_input(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text(PROBE_TEXT)
    result = run_cli("conversation", str(path))
    assert result.returncode == 2 and "needs a conversation" in result.stderr
    assert str(path) in result.stderr


def test_a_batch_record_past_the_input_limit_stops_naming_the_line(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus.jsonl"
    records = [{"id": "a", "text": PROBE_TEXT}, {"id": "b", "text": "x" * 5000}]
    corpus.write_text("".join(json.dumps(r) + "\n" for r in records))
    out = tmp_path / "out.jsonl"
    result = run_cli("generic", str(corpus), "--out", str(out), env={"COMPACTOR_MAX_INPUT_BYTES": "2000"})
    assert result.returncode == 2 and f"{corpus}:2: the record is larger than 2,000 bytes" in result.stderr
    endless = run_cli("generic", "/dev/zero", "--out", str(tmp_path / "z.jsonl"),
                      env={"COMPACTOR_MAX_INPUT_BYTES": "100000"})
    assert endless.returncode == 2 and "/dev/zero:1: the record is larger" in endless.stderr


# What a user notices at the command line: versions, help, usage errors with exit 2 and one
# clear message (never `<string>:` or `internal error`), file modes, budgets too small, input a
# pipeline cannot use.

PARIS_TEXT = "Paris is the capital of France. It has many museums.\n\nThe Louvre is the largest one.\n"


def _one_clear_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    assert "<string>" not in stderr and "internal error" not in stderr and "Traceback" not in stderr
    return lines[0]


def test_version_and_help_list_the_shipped_pipelines() -> None:
    result = run_cli("--version")
    assert result.returncode == 0 and compactor.__version__ in result.stdout
    result = run_cli("--help")
    assert result.returncode == 0
    help_text = " ".join(result.stdout.split())
    for name in ("generic", "qa", "deep-search", "conversation", "transcripts", "topics"):
        assert name in help_text


@pytest.mark.parametrize(("args", "needle"), [
    (("generic", "{text}", "--budget", "0"), "--budget must be a positive"),
    (("generic", "{text}", "-o", "/nonexistent/dir/out.txt"), "does not exist"),
    (("generic", "{text}", "--report", "/nonexistent/dir/r.json"), "does not exist"),
    (("qa", "{text}", "--budget", "1"), "too small for any output"),
    (("topics", "{text}", "--budget", "5"), "too small"),
    (("transcripts", "{page}"), "needs transcript segments"),
    (("transcripts", "{text}"), "needs transcript segments"),
])
def test_usage_errors_exit_2_with_one_clear_message(tmp_path: Path, args: tuple[str, ...],
                                                      needle: str) -> None:
    text = tmp_path / "notes.txt"
    text.write_text(PARIS_TEXT, encoding="utf-8")
    result = run_cli(*(a.format(text=text, page=PAGE) for a in args))
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert needle in _one_clear_line(result.stderr)
    assert result.stdout == ""


def test_small_budgets_that_can_hold_output_still_work(tmp_path: Path) -> None:
    text = tmp_path / "notes.txt"
    text.write_text(PARIS_TEXT, encoding="utf-8")
    result = run_cli("topics", str(text), "--budget", "50")
    assert result.returncode == 0, result.stderr
    assert "[^1]" in result.stdout and ("Louvre" in result.stdout or "Paris" in result.stdout)


def test_written_files_keep_the_target_mode_or_take_the_umask(tmp_path: Path) -> None:
    text = tmp_path / "notes.txt"
    text.write_text(PARIS_TEXT, encoding="utf-8")
    out = tmp_path / "out.txt"
    result = run_cli("generic", str(text), "-o", str(out))
    assert result.returncode == 0, result.stderr
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(out.stat().st_mode) == 0o666 & ~umask
    out.chmod(0o640)
    report = tmp_path / "report.json"
    report.write_text("{}", encoding="utf-8")
    report.chmod(0o644)
    result = run_cli("generic", str(text), "-o", str(out), "--report", str(report))
    assert result.returncode == 0, result.stderr
    assert stat.S_IMODE(out.stat().st_mode) == 0o640
    assert stat.S_IMODE(report.stat().st_mode) == 0o644
    assert "Paris" in out.read_text(encoding="utf-8")



def test_cli_help_and_version_answer_without_loading_the_pipelines() -> None:
    code = ("import sys\nfrom compactor.ops.cli_parser import run\n"
            "try:\n    run(['--version'])\nexcept SystemExit:\n    pass\n"
            "print('compactor.pipeline' in sys.modules, 'compactor.apps.compacter' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip().endswith("False False"), done.stdout
    assert "compactor-run" in done.stdout


# One kind of wrong input exits 2 with a message naming it, whichever shipped pipeline reads it (an
# HTML page without main text exited 1, "the result is empty", for the text pipelines and 2 for the
# others). In-process: 8 pipelines x 10 inputs as subprocesses would take minutes.

BAD_INPUTS: dict[str, tuple[bytes | None, str]] = {  # file name -> (content; None: a folder), said
    "empty.txt": (b"", "{path}: the input is empty"),
    "invalid.json": (b'{"text": ', "{path}:1:10: invalid JSON"),
    "lines.jsonl": (b'{"text": "A good line."}\n{bad\n', "{path}:2:2: invalid JSON line"),
    "shape.json": (b'{"body": "text"}', "{path}:1: a record needs `text`"),
    "type.jsonl": (b'{"text": 5}\n', "{path}:1: `text` must be a string"),
    "blank.json": (b'{"text": ""}', "{path}: the input is empty"),
    "data.bin": (b"\x7fELF\x02\x01\x01\x00" * 40, "{path}: looks like a binary file"),
    "folder": (None, "{path}: no readable files in this directory"),
    "missing.txt": (b"", "{path}: no such file or directory"),
    "nothing.html": (b"<html><head><script>var a = 1;</script></head><body><nav>Home</nav></body></html>",
                     "{path}"),  # named: "no text to compress once cleaned", or the kind it is not
}


def _run_in_process(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    from compactor.ops.cli import main

    code = main(args)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize("pipeline", shipped_pipelines())
def test_wrong_input_exits_2_naming_it_whatever_the_pipeline(pipeline: str, tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    system_prompt = pipeline == "system-prompt"  # reads any text as is: its HTML is a prompt's text
    for name, (content, said) in BAD_INPUTS.items():
        path = tmp_path / name
        if content is None:
            (path / "sub").mkdir(parents=True, exist_ok=True)
        elif name != "missing.txt":
            path.write_bytes(content)
        if system_prompt and name == "nothing.html":
            continue
        code, out, err = _run_in_process([pipeline, str(path), "--query", "probe"], capsys)
        assert code == 2, (name, err)
        if pipeline == "transcripts" and name == "nothing.html":  # its step names the file too
            said = "{path}: organize.hierarchical needs transcript segments"
        assert said.format(path=path) in err and "internal error" not in err, (name, err)
        assert out == ""
    for name in ("data.bin", "empty.txt"):  # a batch corpus too, before any document runs
        code, out, err = _run_in_process([pipeline, str(tmp_path / name), "--out", str(tmp_path / "o.jsonl"),
                                          "--executor", "serial"], capsys)
        assert code == 2 and str(tmp_path / name) in err, (name, err)


def test_batch_options_without_out_are_refused(tmp_path: Path) -> None:
    text = tmp_path / "notes.txt"
    text.write_text(PARIS_TEXT, encoding="utf-8")
    for extra in (("--executor", "dask", "--scheduler", "tcp://127.0.0.1:9"), ("--workers", "2")):
        result = run_cli("generic", str(text), *extra)
        assert result.returncode == 2, result.stderr
        assert "give --out FILE" in _one_clear_line(result.stderr) and result.stdout == ""
