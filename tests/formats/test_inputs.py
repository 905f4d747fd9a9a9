"""Input readers: every format, clear errors for bad input, and a bound on how much is read."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from compactor import InputError
from compactor.formats.records import INPUT_LIMIT_ENV, MAX_INPUT_BYTES, parse_text, read_paths

from ..helpers import REPO, run_cli


def test_jsonl_search_results_become_web_pages(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    rows = [{"url": "https://a.org", "content": "<html><body><p>A</p></body></html>"},
            {"url": "https://b.org", "content": "plain B", "title": "B"}]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    sources = read_paths([str(path)])
    assert [(s.kind, s.uri, s.title) for s in sources] == [("web_page", "https://a.org", None),
                                                            ("web_page", "https://b.org", "B")]


def test_bad_jsonl_line_is_located(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    path.write_text('{"url": "u", "content": "x"}\n{"url": oops}\n', encoding="utf-8")
    with pytest.raises(InputError, match=r"r\.jsonl:2:"):
        read_paths([str(path)])


def test_openai_messages_keep_tool_calls_with_their_messages() -> None:
    messages = [
        {"role": "system", "content": "You are helpful."},
        {"role": "user", "content": "Run the tests"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "3 passed"},
    ]
    [source] = parse_text(json.dumps(messages), "h.json", ".json")
    assert source.kind == "conversation"
    assert [m.role for m in source.messages] == ["system", "user", "assistant", "tool"]
    assert source.messages[2].tool_calls[0]["id"] == "c1"
    assert source.messages[3].tool_call_id == "c1"
    assert "[tool_call bash]" in source.text


def test_content_blocks_are_flattened() -> None:
    messages = {"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]},
                             {"role": "assistant", "content": [
                                 {"type": "tool_use", "name": "grep", "input": {"q": "x"}}]}]}
    [source] = parse_text(json.dumps(messages), "h.json", ".json")
    assert source.messages[0].content == "hi"
    assert source.messages[1].content.startswith("[tool_use grep]")


def test_srt_and_vtt_and_json_segments() -> None:
    srt = "1\n00:00:01,500 --> 00:00:03,000\nHello there.\n\n2\n00:00:04,000 --> 00:00:05,250\n你好。\n"
    [source] = parse_text(srt, "a.srt", None)
    assert source.kind == "transcript"
    assert [(s.start, s.end, s.text) for s in source.segments] == [(1.5, 3.0, "Hello there."),
                                                                   (4.0, 5.25, "你好。")]
    vtt = "WEBVTT\n\n00:01.000 --> 00:02.000\n<v Alice>Hi <b>all</b>\n"
    [source] = parse_text(vtt, "a.vtt", None)
    assert source.segments[0].speaker == "Alice" and source.segments[0].text == "Hi all"
    segs = [{"index": 7, "start": 120.5, "end": 180.3, "text": "Budget talk", "speaker": "Bo"}]
    [source] = parse_text(json.dumps(segs), "s.json", ".json")
    assert source.text == "[120.50-180.30] Bo: Budget talk"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"\x00\x01\x02binary", "binary"),
        (b"caf\xe9 au lait", "invalid UTF-8 at byte 3"),
        (b"   \n  ", "empty"),
    ],
)
def test_bad_input_gets_a_clear_error(tmp_path: Path, data: bytes, message: str) -> None:
    path = tmp_path / "in.txt"
    path.write_bytes(data)
    with pytest.raises(InputError, match=message):
        read_paths([str(path)])


def test_directories_and_stdin(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("# A\n\nalpha", encoding="utf-8")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.txt").write_text("beta", encoding="utf-8")
    (tmp_path / "image.png").write_bytes(b"\x89PNG")
    assert [s.text for s in read_paths([str(tmp_path)])] == ["# A\n\nalpha", "beta"]
    [source] = read_paths(["-"], stdin=io.BytesIO(b"<html><body><p>x</p></body></html>"))
    assert source.kind == "web_page"
    with pytest.raises(InputError, match="no such file"):
        read_paths([str(tmp_path / "missing.txt")])


# Inputs are bounded: stdin, files and endless devices are read up to COMPACTOR_MAX_INPUT_BYTES (one
# InputError naming the input past it, exit 2).

LIMIT = {INPUT_LIMIT_ENV: "1000000"}


def test_an_endless_device_is_refused_at_the_limit() -> None:
    started = time.perf_counter()
    done = run_cli("generic", "/dev/zero", "--budget", "100", env=LIMIT)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == ("compactor-run: error: /dev/zero: the input is larger than 1,000,000 "
                                   f"bytes, the most compactor reads at once (set {INPUT_LIMIT_ENV} "
                                   "to change it)")
    assert time.perf_counter() - started < 20


def test_an_endless_stdin_pipe_is_refused_at_the_limit() -> None:
    process = subprocess.Popen([sys.executable, "-m", "compactor.ops.cli", "generic", "-", "--budget", "100"],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               env={**os.environ, **LIMIT}, cwd=REPO)
    assert process.stdin is not None and process.stderr is not None

    def feed() -> None:  # a generator that never ends: only the reader stopping ends it
        line = b"The pump failed because the valve was closed. " * 100 + b"\n"
        try:
            while True:
                process.stdin.write(line)  # type: ignore[union-attr]
        except (BrokenPipeError, ValueError, OSError):
            pass

    writer = threading.Thread(target=feed, daemon=True)
    writer.start()
    try:
        code = process.wait(timeout=60)
    finally:
        process.kill()
        writer.join(timeout=10)
        with contextlib.suppress(BrokenPipeError):
            process.stdin.close()
    stderr = process.stderr.read().decode()
    process.stderr.close()
    assert process.stdout is not None
    process.stdout.close()
    assert code == 2, stderr
    assert "<stdin>: the input is larger than 1,000,000 bytes" in stderr


def test_the_limit_counts_all_inputs_together(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first, second = tmp_path / "a.txt", tmp_path / "b.txt"
    first.write_text("First file sentence. " * 30_000, encoding="utf-8")  # 630,000 bytes
    second.write_text("Second file sentence. " * 30_000, encoding="utf-8")
    monkeypatch.setenv(INPUT_LIMIT_ENV, "1_000_000")
    assert len(read_paths([first])) == 1
    with pytest.raises(InputError, match=f"^{second}: the input is larger than 1,000,000 bytes"):
        read_paths([first, second])
    with pytest.raises(InputError, match=f"^{second}: the input is larger"):
        read_paths([tmp_path])
    monkeypatch.delenv(INPUT_LIMIT_ENV)
    assert MAX_INPUT_BYTES == 256 * 1024 * 1024
    assert len(read_paths([first, second])) == 2


@pytest.mark.parametrize("value", ["lots", "0", "-5"])
def test_a_bad_limit_is_an_input_error(tmp_path: Path, value: str) -> None:
    page = tmp_path / "p.txt"
    page.write_text("A short page of text.", encoding="utf-8")
    done = run_cli("generic", str(page), env={INPUT_LIMIT_ENV: value})
    assert done.returncode == 2
    assert f"{INPUT_LIMIT_ENV}='{value}': expected a positive whole number of bytes" in done.stderr
