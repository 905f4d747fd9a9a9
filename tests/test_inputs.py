"""Input readers: every format, and clear errors for bad input."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from compactor import InputError
from compactor.formats.records import parse_text, read_paths


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
