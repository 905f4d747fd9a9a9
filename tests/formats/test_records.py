"""One record schema (`compactor.formats.records`): compactor-run, batch mode and the Python API read
the same records into the same sources, and every bad record is named by file, line and field."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import compactor
from compactor import InputError, Source
from compactor.apps.common import inputs_of
from compactor.formats.records import read_paths, sources_from_records
from compactor.ops.batch import run_batch
from compactor.pipeline import read_pipeline_text

from ..helpers import run_cli

GENERIC = read_pipeline_text("generic")
PAGE = ("<html><head><title>Bridge</title></head><body><article><p>The Rhine bridge opened in 1931 "
        "after four years of work.</p><p>It carries 40,000 cars a day.</p></article></body></html>")
RECORDS: list[dict[str, Any]] = [
    {"id": "t1", "text": "The ferry ran until 1931. Then the bridge took its traffic.", "query": "when?"},
    {"id": "c1", "url": "https://a.example/bridge", "title": "Bridge", "content": PAGE, "topic": "bridges"},
    {"id": "c2", "content": "Plain content without a url stays text. 北京是中国的首都。"},
    {"id": "h1", "html": PAGE, "budget": 40},
    {"id": "m1", "messages": [{"role": "user", "content": "When did the bridge open?"},
                              {"role": "assistant", "content": "In 1931, after four years of work."}]},
    {"id": "s1", "filename": "talk.mp4", "segments": [
        {"index": 0, "start": 0, "end": 2.5, "text": "Welcome to the talk.", "speaker": "Ann"},
        {"index": 1, "start": 2.5, "end": 6, "text": "The bridge opened in 1931."}]},
]


def _view(source: Source) -> tuple[Any, ...]:
    """Everything a reader decides about a source."""
    return (source.id, source.kind, source.uri, source.title, source.text, dict(source.metadata),
            tuple(m.content for m in source.messages), source.segments)


def _write(tmp_path: Path) -> tuple[Path, Path]:
    jsonl, array = tmp_path / "docs.jsonl", tmp_path / "docs.json"
    jsonl.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in RECORDS), encoding="utf-8")
    array.write_text(json.dumps(RECORDS, indent=2, ensure_ascii=False), encoding="utf-8")
    return jsonl, array


def test_every_body_field_reads_the_same_from_jsonl_json_and_python(tmp_path: Path) -> None:
    jsonl, array = _write(tmp_path)
    expected = [_view(s) for s in sources_from_records(RECORDS)]
    assert [_view(s) for s in read_paths([str(jsonl)])] == expected
    assert [_view(s) for s in read_paths([str(array)])] == expected
    assert [_view(s) for s in inputs_of(jsonl)] == expected  # compactor.compress(Path(...))
    assert [_view(s) for s in inputs_of(RECORDS)] == expected  # compactor.compress([records])
    kinds = [(s.kind, s.uri, s.title) for s in sources_from_records(RECORDS)]
    assert kinds == [("text", None, None), ("web_page", "https://a.example/bridge", "Bridge"),
                     ("text", None, None), ("web_page", None, None), ("conversation", "m1", None),
                     ("transcript", "talk.mp4", None)]
    assert sources_from_records(RECORDS)[1].metadata == {"id": "c1", "topic": "bridges"}


def test_cli_batch_and_api_give_the_same_sources(tmp_path: Path) -> None:
    jsonl, array = _write(tmp_path)
    cli = run_cli("generic", str(jsonl), "--format", "json")
    assert cli.returncode == 0, cli.stderr
    by_cli = [(s["id"], s["kind"], s["uri"], s["title"]) for s in json.loads(cli.stdout)["sources"]]
    api = json.loads(compactor.compress(array, output_format="json"))
    assert [(s["id"], s["kind"], s["uri"], s["title"]) for s in api["sources"]] == by_cli
    out = tmp_path / "out.jsonl"
    stats = run_batch(*GENERIC, jsonl, out, executor="serial", output_format="json")
    assert stats.done == len(RECORDS) and stats.failed == 0, stats.errors
    results = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    by_batch = [(s["id"], s["kind"], s["uri"], s["title"])
                for r in results for s in r["output"]["sources"]]
    assert by_batch == by_cli
    # one record through the API is one batch document: the same output
    text_out = tmp_path / "text.jsonl"
    run_batch(*GENERIC, jsonl, text_out, executor="serial")
    outputs = [json.loads(line)["output"] for line in text_out.read_text(encoding="utf-8").splitlines()]
    assert outputs[3] == compactor.compress(RECORDS[3], budget=40)
    assert outputs[0] == compactor.compress(RECORDS[0], query="when?")


def test_plain_files_are_the_records_that_name_them(tmp_path: Path) -> None:
    note, page, md = tmp_path / "note.txt", tmp_path / "page.html", tmp_path / "a.md"
    note.write_text("The bridge opened in 1931.", encoding="utf-8")
    page.write_text(PAGE, encoding="utf-8")
    md.write_text("# Bridge\n\nIt carries 40,000 cars a day.", encoding="utf-8")
    records = [{"text": note.read_text(encoding="utf-8"), "url": str(note)},
               {"html": PAGE, "url": str(page)},
               {"text": md.read_text(encoding="utf-8"), "url": str(md)}]
    from_files = read_paths([str(note), str(page), str(md)])
    assert [_view(s) for s in inputs_of([note, page, md][0])] == [_view(from_files[0])]
    assert [(s.id, s.kind, s.uri, s.text) for s in from_files] == [
        (s.id, s.kind, s.uri, s.text) for s in sources_from_records(records)]


def test_a_record_is_compressed_like_its_text() -> None:
    text = "The Rhine bridge opened in 1931 after four years of work. " * 20
    assert compactor.compress({"text": text}, budget=30) == compactor.compress(text, budget=30)
    mixed = compactor.compress(["First document about ferries. " * 10, {"text": text}], budget=60)
    assert mixed == compactor.compress(["First document about ferries. " * 10, text], budget=60)


def test_message_and_segment_lists_are_one_document_everywhere_but_batch(tmp_path: Path) -> None:
    messages = RECORDS[4]["messages"]
    path = tmp_path / "history.jsonl"
    path.write_text("".join(json.dumps(m) + "\n" for m in messages), encoding="utf-8")
    [from_file] = read_paths([str(path)])
    [from_python] = sources_from_records(messages)
    assert from_file.kind == from_python.kind == "conversation"
    assert from_file.text == from_python.text and from_file.uri == str(path)
    # a record may name a role beside its messages: still one conversation per record
    agents = [{"role": "planner", **RECORDS[4]}, {"role": "coder", **RECORDS[4], "id": "m2"}]
    assert [(s.kind, s.uri) for s in sources_from_records(agents)] == [("conversation", "m1"),
                                                                       ("conversation", "m2")]
    [segments] = sources_from_records(RECORDS[5]["segments"])
    assert segments.kind == "transcript" and len(segments.segments) == 2
    out = tmp_path / "out.jsonl"
    run_batch(*GENERIC, path, out, executor="serial")
    errors = [json.loads(line)["error"] for line in out.read_text(encoding="utf-8").splitlines()]
    assert errors[0] == f"{path}:1: a chat message, not a document record; give a conversation as " \
                        "`messages` (a list of messages)"


def test_an_id_less_conversation_has_the_same_name_in_the_cli_and_in_batch(tmp_path: Path) -> None:
    path = tmp_path / "runs.jsonl"
    path.write_text(json.dumps({"messages": RECORDS[4]["messages"]}) + "\n", encoding="utf-8")
    [source] = read_paths([str(path)])
    out = tmp_path / "out.jsonl"
    run_batch(*GENERIC, path, out, executor="serial", output_format="json")
    [result] = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert result["id"] == "line-1"
    assert result["output"]["sources"][0]["uri"] == source.uri == f"{path}#1"


BAD = [
    ({"id": "no-body", "title": "only a title"},
     "a record needs `text`, `content`, `html`, `messages` or `segments` (fields found: `id`, `title`)"),
    ({"text": 42}, "`text` must be a string, not int"),
    ({"content": ["a", "b"], "url": "https://x"}, "`content` must be a string, not a list"),
    ({"text": "ok", "title": {"a": 1}}, "`title` must be a string, not an object"),
    ({"messages": [{"role": "user", "content": "hi"}, {"content": "no role"}]},
     "`messages`[1]: a message needs a string `role`"),
    ({"messages": "hello"}, "`messages` must be a list, not str"),
    ({"segments": [{"start": "soon", "end": 1, "text": "x"}]},
     "`segments`[0]: a segment needs numeric `start` and `end`, a `text` and an integer `index` "
     "(when given)"),
    ({"segments": []}, "`segments` is empty"),
]


@pytest.mark.parametrize(("record", "message"), BAD)
def test_a_bad_record_is_named_by_file_line_and_field(tmp_path: Path, record: dict[str, Any],
                                                      message: str) -> None:
    good = {"text": "A good document."}
    jsonl = tmp_path / "bad.jsonl"
    jsonl.write_text(f"{json.dumps(good)}\n\n{json.dumps(record)}\n", encoding="utf-8")
    with pytest.raises(InputError) as caught:
        read_paths([str(jsonl)])
    assert str(caught.value) == f"{jsonl}:3: {message}"
    array = tmp_path / "bad.json"
    dump = json.dumps([good, good, record], indent=2)
    array.write_text(dump, encoding="utf-8")
    line = [n for n, text in enumerate(dump.split("\n"), 1) if text == "  {"][2]  # item 2 starts here
    with pytest.raises(InputError) as caught:
        read_paths([str(array)])
    assert str(caught.value) == f"{array}:{line}: [2]: {message}"
    with pytest.raises(InputError) as caught:
        compactor.compress([good, good, record])
    assert str(caught.value) == f"records[2]: {message}"
    out = tmp_path / "out.jsonl"
    run_batch(*GENERIC, jsonl, out, executor="serial")
    [ok, bad] = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert ok["ok"] and bad == {"id": record.get("id", "line-3"), "ok": False, "seconds": bad["seconds"],
                                "error": f"{jsonl}:3: {message}"}


def test_json_items_are_located_at_the_line_they_start_on(tmp_path: Path) -> None:
    path = tmp_path / "odd.json"
    path.write_text('[ {"text": "a", "tags": [1, [2, "]"]]} ,\n\n\t{"text": "b"}\n , {"text": "c",\n'
                    '"x": "\\n"}, {"text": null}\n]', encoding="utf-8")
    with pytest.raises(InputError, match=r"^.*odd\.json:5: \[3\]: a record needs"):
        read_paths([str(path)])
    single = tmp_path / "one.json"
    single.write_text('\n\n{"text": 7}', encoding="utf-8")
    with pytest.raises(InputError, match=r"one\.json:3: `text` must be a string, not int$"):
        read_paths([str(single)])


def test_invalid_json_and_wrong_shapes_name_the_place(tmp_path: Path) -> None:
    path = tmp_path / "broken.jsonl"
    path.write_text('{"text": "one"}\n{"text": "two"}\n{"text": oops}\n', encoding="utf-8")
    with pytest.raises(InputError, match=r"broken\.jsonl:3:10: invalid JSON line: Expecting value$"):
        read_paths([str(path)])
    out = tmp_path / "out.jsonl"
    run_batch(*GENERIC, path, out, executor="serial")
    errors = [json.loads(line).get("error") for line in out.read_text(encoding="utf-8").splitlines()]
    assert errors == [None, None, f"{path}:3:10: invalid JSON line: Expecting value"]
    scalar = tmp_path / "n.json"
    scalar.write_text("42", encoding="utf-8")
    with pytest.raises(InputError, match=r"n\.json: expected a JSON object \(a record\) or a list"):
        read_paths([str(scalar)])
    with pytest.raises(InputError, match=r"^records\[1\]: expected a JSON object \(a record\), got int$"):
        sources_from_records([{"text": "x"}, 3])
    with pytest.raises(InputError, match=r"^record: `html` must be a string, not float$"):
        compactor.compress({"html": 1.5})


def test_batch_checks_a_records_query_and_budget(tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    path.write_text(json.dumps({"text": "Some text.", "query": 5}) + "\n"
                    + json.dumps({"text": "Some text.", "budget": 0}) + "\n"
                    + json.dumps({"text": "  "}) + "\n", encoding="utf-8")
    out = tmp_path / "out.jsonl"
    run_batch(*GENERIC, path, out, executor="serial")
    errors = [json.loads(line)["error"] for line in out.read_text(encoding="utf-8").splitlines()]
    assert errors == [f"{path}:1: `query` must be a string, not int",
                      f"{path}:2: `budget` must be a positive integer, not 0", f"{path}:3: `text` is empty"]


def test_the_cli_exits_2_with_the_located_message(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"url": "https://a.example", "content": "A page."}\n{"text": "B."}\n'
                    '{"url": "https://c.example", "body": "misnamed"}\n', encoding="utf-8")
    result = run_cli("generic", str(path), "--budget", "50")
    assert result.returncode == 2
    assert result.stderr == (f"compactor-run: error: {path}:3: a record needs `text`, `content`, `html`, "
                             "`messages` or `segments` (fields found: `url`, `body`)\n")
    stdin = run_cli("generic", "-", stdin=b'{"text": "fine"}\n{"text": ["not", "text"]}\n')
    assert stdin.returncode == 2
    assert "<stdin>:2: `text` must be a string, not a list" in stdin.stderr
    assert "Traceback" not in result.stderr + stdin.stderr


def test_jsonl_lines_end_at_line_breaks_only(tmp_path: Path) -> None:
    # JSON strings may hold U+2028, U+2029 and U+0085 unescaped (JSON.stringify, ensure_ascii=False
    # write them); str.splitlines() cut the line there and the record was refused as invalid JSON
    texts = ["one\u2028two", "three\u2029four", "five\u0085six", "plain"]
    path = tmp_path / "seps.jsonl"
    path.write_bytes("\r\n".join(json.dumps({"text": t}, ensure_ascii=False) for t in texts).encode())
    assert [s.text for s in read_paths([str(path)])] == texts
    out = tmp_path / "out.jsonl"
    run_batch(*GENERIC, path, out, executor="serial")
    lines = out.read_text(encoding="utf-8").split("\n")[:-1]  # the output holds U+2028 too
    assert [json.loads(line)["ok"] for line in lines] == [True] * 4
    old_mac = tmp_path / "cr.jsonl"
    old_mac.write_bytes(b'{"text": "a"}\r{"text": 7}\r')
    with pytest.raises(InputError, match=r"cr\.jsonl:2: `text` must be a string"):
        read_paths([str(old_mac)])


@pytest.mark.parametrize(("name", "data", "message"), [
    ("big.jsonl", b'{"text": "x"}\n{"text": "y", "n": ' + b"9" * 5000 + b"}\n",
     r"big\.jsonl:2: unreadable JSON line: Exceeds the limit \(4300 digits\)"),
    ("big.json", b'[{"text": "x", "n": ' + b"9" * 5000 + b"}]", r"big\.json: unreadable JSON: Exceeds"),
    ("deep.json", b"[" * 100_000 + b"]" * 100_000, r"deep\.json: unreadable JSON: nested too deeply"),
    ("deep.jsonl", b'{"text": "x"}\n' + b"[" * 100_000 + b"]" * 100_000,
     r"deep\.jsonl:2: unreadable JSON line: nested too deeply"),
    ("half.jsonl", b'{"text": "ok \\ud83d\\ude00"}\n{"text": "a \\ud800 b"}\n',
     r"half\.jsonl:2: \\ud800 is half of a surrogate pair"),
    ("half.json", b'[{"text": "a \\uDC00 b"}]', r"half\.json: \\udc00 is half of a surrogate pair"),
    ("noboom.jsonl", '{"text": "x"}\n'.encode("utf-16-le"), r"noboom\.jsonl: .*UTF-16/32 text without"),
], ids=lambda value: value if isinstance(value, str) and value.endswith(("json", "jsonl")) else "")
def test_unreadable_json_is_an_input_error_with_its_place(tmp_path: Path, name: str, data: bytes,
                                                          message: str) -> None:
    # these raised ValueError or RecursionError (an internal error in the CLI), or passed a lone
    # surrogate on to fail when the output was written
    path = tmp_path / name
    path.write_bytes(data)
    with pytest.raises(InputError, match=message):
        read_paths([str(path)])
    result = run_cli("generic", str(path))
    assert result.returncode == 2 and "internal error" not in result.stderr


def test_utf16_and_utf32_with_a_byte_order_mark_are_read(tmp_path: Path) -> None:
    for encoding in ("utf-16", "utf-32", "utf-16-be"):
        path = tmp_path / f"{encoding}.jsonl"
        body = '{"text": "Grüße aus Köln"}\n{"text": "北京"}\n'
        path.write_bytes(("\ufeff" + body if encoding.endswith("be") else body).encode(encoding))
        assert [s.text for s in read_paths([str(path)])] == ["Grüße aus Köln", "北京"]


def test_binary_data_after_a_byte_order_mark_is_still_binary(tmp_path: Path) -> None:
    for data in (b"\xff\xfe\x00\x00binary\x00", b"\xff\xfe\x00\x00\x00\x00\x01\x00PNG"):
        path = tmp_path / "blob.txt"
        path.write_bytes(data)
        with pytest.raises(InputError, match=r"blob\.txt: .*binary file"):
            read_paths([str(path)])
