"""Reading inputs into `Source`s: one record schema for the CLI, batch mode and the Python API.

A **record** is a JSON object (from Python, a mapping) holding one document. Its body is the first
of these fields that is present and not null:

    messages   a list of chat messages (OpenAI chat, legacy functions or content blocks): a conversation
    segments   a list of transcript segments `{start, end, text, index?, speaker?}` (also `start_time`,
               `end_time`, and `sentence`/`content`/`transcript` for the text): a transcript
    html       a string: a web page
    content    a string: a web page when the record has a `url` or the string looks like HTML, else text
    text       a string: plain text

Optional fields:

    id         the document's name: batch output's `id`, a conversation's or transcript's name
    url, uri   where the document came from (`Source.uri`)
    title      a string (a number is taken as its text)
    filename   a transcript's file name (before `id`)
    query      batch mode: this document's question (a string), over `--query`
    budget     batch mode: this document's token budget (a positive integer), over `--budget`
    ...        every other field (`topic`, `query` and `budget` outside batch mode, `id`) is kept in
               `Source.metadata`; the body fields and `url`/`uri`/`title` are not

Where records come from, read by the same functions everywhere:

    file.jsonl   one record per line (blank lines skipped)
    file.json    a list of records, or one record
    batch mode   `compactor-run PIPELINE corpus.jsonl --out results.jsonl`: every line is one record,
                 run on its own (`compactor.ops.batch`)
    Python       `compactor.compress(record)`, `compactor.compress([records])`,
                 `compactor.compress(Path("results.jsonl"))`; `sources_from_records`, `read_paths`

Two shapes of a whole file (or Python list) are one document, not one per record: a list of chat
messages (its first item has a `role`) is one conversation, a list of transcript segments (its first
item has `start` and `end`) one transcript. Batch mode reads each line as a document, so a line with a
`role` is refused there. Other files, by extension: `.html`/`.htm`/`.xhtml` a web page, `.srt`/`.vtt`
subtitles, anything else plain text (or Markdown); stdin's format is sniffed.

Every problem is an `InputError` that says where: `file:line` for a JSONL line, `file:line: [i]` for
item `i` of a JSON list (the line the item starts on), `records[i]` for a Python list; then the field
(`` `text` must be a string, not int ``, `` `messages`[2]: a message needs a string `role` ``).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import regex

from compactor.document import Source, SourceKind, TranscriptSegment
from compactor.errors import InputError
from compactor.formats.messages import as_mapping, conversation_source, parse_message
from compactor.formats.transcripts import segment_from, transcript_source

TEXT_SUFFIXES = {".txt", ".md", ".markdown", ".rst", ".text"}
HTML_SUFFIXES = {".html", ".htm", ".xhtml"}
KNOWN_SUFFIXES = TEXT_SUFFIXES | HTML_SUFFIXES | {".json", ".jsonl", ".srt", ".vtt"}
#: A record's body fields, in the order they are looked for.
BODY_FIELDS = ("messages", "segments", "html", "content", "text")
#: Fields that become `Source` attributes, not metadata.
_OWN_FIELDS = frozenset({*BODY_FIELDS, "url", "uri", "title"})
_HTML_SNIFF = regex.compile(r"^\s*(?:<!doctype\s+html|<html|<head|<body|<(?:div|p|article)\b)",
                            regex.IGNORECASE)
_TIMESTAMP = regex.compile(
    r"(?:(\d+):)?(\d{1,2}):(\d{2})[.,](\d{1,3})\s*-->\s*(?:(\d+):)?(\d{1,2}):(\d{2})[.,](\d{1,3})"
)
_JSON_SPACE = regex.compile(r"[ \t\n\r]*")
#: JSONL's line breaks: not str.splitlines()'s, which also splits at U+2028, U+0085, \x1c...,
#: characters a JSON string may hold unescaped (JSON.stringify and ensure_ascii=False write them).
_LINE_BREAK = regex.compile(r"\r\n|\r|\n")
_SURROGATE_ESCAPE = regex.compile(r"\\u[dD][89a-fA-F]")


@dataclass(frozen=True, slots=True)
class Item:
    """One record and where it came from: `where` opens every error about it (`file:line`,
    `file:line: [i]`, `records[i]`), `label` names a conversation or transcript without an `id`."""

    record: Any
    where: str
    label: str | None = None


# -- records ---------------------------------------------------------------------------------------


def record_source(item: Item, *, whole: bool = False) -> Source:
    """The source of one record (see the module docstring). `whole`: the record is the entire input
    (a batch line), so a blank body is an error rather than one empty source among others."""
    record, where = item.record, item.where
    if not isinstance(record, Mapping):
        raise InputError(f"{where}: expected a JSON object (a record), got {_type(record)}")
    if _is_message(record):
        raise InputError(f"{where}: a chat message, not a document record; give a conversation as "
                         "`messages` (a list of messages)")
    field = next((f for f in BODY_FIELDS if record.get(f) is not None), None)
    if field is None:
        found = ", ".join(f"`{k}`" for k in list(record)[:8]) or "none"
        raise InputError(f"{where}: a record needs `text`, `content`, `html`, `messages` or `segments` "
                         f"(fields found: {found})")
    value = record[field]
    uri = _optional_text(record, "url", where) or _optional_text(record, "uri", where)
    title = _optional_text(record, "title", where)
    name = str(record["id"]) if record.get("id") is not None else item.label
    metadata = {k: v for k, v in record.items() if k not in _OWN_FIELDS}
    if field in ("messages", "segments"):
        if not isinstance(value, list | tuple):
            raise InputError(f"{where}: `{field}` must be a list, not {_type(value)}")
        if not value:
            raise InputError(f"{where}: `{field}` is empty")
        if field == "messages":
            messages = [parse_message(as_mapping(m, f"{where}: `messages`[{i}]"), f"{where}: `messages`[{i}]")
                        for i, m in enumerate(value)]
            return conversation_source(messages, name, metadata=metadata)
        file = _optional_text(record, "filename", where) or name
        return transcript_source([_segment(s, i, f"{where}: `segments`[{i}]") for i, s in enumerate(value)],
                                 file)
    if not isinstance(value, str):
        raise InputError(f"{where}: `{field}` must be a string, not {_type(value)}")
    if whole and not value.strip():
        raise InputError(f"{where}: `{field}` is empty")
    kind: SourceKind = "text"
    if field == "html" or (field == "content" and (uri or _HTML_SNIFF.match(value[:2048]))):
        kind = "web_page"
    return Source.from_text(value, kind=kind, uri=uri, title=title, metadata=metadata)


def records_sources(items: list[Item], name: str, uri: str | None = None) -> list[Source]:
    """Sources of a whole file's (or Python list's) records: one conversation when the first is a
    chat message, one transcript when it is a segment (both named `uri`), else one per record."""
    if not items:
        raise InputError(f"{name}: the input is empty")
    first = items[0].record
    if not isinstance(first, Mapping):
        raise InputError(f"{items[0].where}: expected a JSON object (a record), got {_type(first)}")
    if _is_message(first):
        return [conversation_source([parse_message(as_mapping(i.record, i.where), i.where) for i in items],
                                    uri)]
    if _is_segment(first):
        return [transcript_source([_segment(i.record, n, i.where) for n, i in enumerate(items)], uri)]
    return [record_source(i) for i in items]


def sources_from_records(records: Mapping[str, Any] | Iterable[Any], name: str = "records") -> list[Source]:
    """Sources of Python records: one mapping, or a list of them (`records[i]` in errors), read as a
    records file is."""
    if isinstance(records, Mapping):
        return records_sources([Item(records, "record")], "record")
    return records_sources([Item(r, f"{name}[{i}]") for i, r in enumerate(records)], name)


def run_options(record: Mapping[str, Any], where: str) -> tuple[str | None, int | None]:
    """A batch record's own `query` and `budget`, checked."""
    query, budget = record.get("query"), record.get("budget")
    if query is not None and not isinstance(query, str):
        raise InputError(f"{where}: `query` must be a string, not {_type(query)}")
    if budget is not None and (not isinstance(budget, int) or isinstance(budget, bool) or budget <= 0):
        raise InputError(f"{where}: `budget` must be a positive integer, not {budget!r}")
    return query, budget


def parse_line(line: str | bytes, name: str, number: int) -> Any:
    """One JSONL line's value, or an InputError at `name:number[:column]`."""
    try:
        return json.loads(line)
    except json.JSONDecodeError as exc:
        raise InputError(f"{name}:{number}:{exc.colno}: invalid JSON line: {exc.msg}") from None
    except UnicodeDecodeError as exc:
        byte = exc.object[exc.start]
        raise InputError(f"{name}:{number}:{exc.start + 1}: invalid UTF-8 (byte 0x{byte:02x}); "
                         "convert the file to UTF-8") from None
    except (ValueError, RecursionError) as exc:  # an integer past Python's digit limit, deep nesting
        raise InputError(f"{name}:{number}: unreadable JSON line: {_json_limit(exc)}") from None


def _whole_characters(value: Any, raw: str | bytes, where: str) -> Any:
    """`value`, or an InputError when an escape in `raw` decoded to half a surrogate pair ("\\ud800"
    alone), which no UTF-8 output can hold (the CLI failed when it wrote the text; batch mode writes
    JSON with escapes and keeps such a record)."""
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
    if _SURROGATE_ESCAPE.search(text) is None:  # most lines, even all-escaped (ensure_ascii) ones
        return value
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as exc:
        half = exc.object[exc.start:exc.end].encode("utf-16", "surrogatepass")[2:]
        raise InputError(f"{where}: \\u{int.from_bytes(half, 'little'):04x} is half of a surrogate pair, "
                         "not a character; fix the escape or drop it") from None
    return value


def _json_limit(exc: Exception) -> str:
    if isinstance(exc, RecursionError):
        return "nested too deeply"
    return str(exc).split(";")[0]  # "Exceeds the limit (4300 digits) for integer string conversion..."


def jsonl_items(text: str, name: str) -> list[Item]:
    """The records of a JSONL text, each located at its line."""
    return [Item(_whole_characters(parse_line(line, name, number), line, f"{name}:{number}"),
                 f"{name}:{number}", f"{name}#{number}")
            for number, line in enumerate(_LINE_BREAK.split(text), 1) if line.strip()]


def json_items(text: str, name: str) -> list[Item]:
    """The records of a JSON text: a list's items (each at the line it starts on, with its index),
    or one object."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"{name}:{exc.lineno}:{exc.colno}: invalid JSON: {exc.msg}") from None
    except (ValueError, RecursionError) as exc:
        raise InputError(f"{name}: unreadable JSON: {_json_limit(exc)}") from None
    data = _whole_characters(data, text, name)
    if isinstance(data, dict):
        line = text.count("\n", 0, _skip_space(text, 0)) + 1
        return [Item(data, f"{name}:{line}", _uri(name))]
    if not isinstance(data, list):
        raise InputError(f"{name}: expected a JSON object (a record) or a list of records, messages or "
                         f"segments, got {_type(data)}")
    return [Item(record, f"{name}:{line}: [{i}]", f"{name}[{i}]")
            for i, (record, line) in enumerate(zip(data, _item_lines(text), strict=True))]


def _item_lines(text: str) -> Iterator[int]:
    """The line each item of a valid JSON list starts on (a second, position-keeping parse)."""
    decoder = json.JSONDecoder()
    position = _skip_space(text, 0) + 1  # past the `[`
    line, counted = 1, 0
    while True:
        position = _skip_space(text, position)
        if text[position] == "]":
            return
        line += text.count("\n", counted, position)
        counted = position
        yield line
        _, position = decoder.raw_decode(text, position)
        position = _skip_space(text, position)
        if text[position] == ",":
            position += 1


def _skip_space(text: str, position: int) -> int:
    match = _JSON_SPACE.match(text, position)
    return match.end() if match else position


def _is_message(record: Mapping[str, Any]) -> bool:
    """A chat message (`role`), not a record that names a role beside its `messages` or `segments`."""
    return isinstance(record.get("role"), str) and record.get("messages") is None \
        and record.get("segments") is None


def _is_segment(record: Mapping[str, Any]) -> bool:
    return (("start" in record or "start_time" in record) and ("end" in record or "end_time" in record)
            and not any(record.get(f) is not None for f in ("messages", "segments", "html")))


def _segment(record: Any, position: int, where: str) -> TranscriptSegment:
    if not isinstance(record, Mapping):
        raise InputError(f"{where}: a transcript segment must be an object, not {_type(record)}")
    return segment_from(record, position, where)


def _optional_text(record: Mapping[str, Any], field: str, where: str) -> str | None:
    value = record.get(field)
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    raise InputError(f"{where}: `{field}` must be a string, not {_type(value)}")


def _type(value: Any) -> str:
    return {dict: "an object", list: "a list", type(None): "null"}.get(type(value), type(value).__name__)


# -- files -----------------------------------------------------------------------------------------


def decode_bytes(data: bytes, name: str) -> str:
    """UTF-8 text (a BOM is dropped; UTF-16 and UTF-32 with a BOM are read too), or an InputError
    saying where it is not text."""
    encoding = next((e for bom, e in _BOMS if data.startswith(bom)), None)
    if encoding is not None:
        try:
            text = data.decode(encoding)
        except UnicodeDecodeError as exc:
            raise InputError(f"{name}: a {encoding.upper()} byte order mark, but not {encoding.upper()} "
                             f"text at byte {exc.start} (a binary file?); expected UTF-8 text") from None
        if "\x00" in text[:8192]:
            raise InputError(f"{name}: looks like a binary file (NUL characters after a "
                             f"{encoding.upper()} byte order mark); expected text")
        return text
    if b"\x00" in data[:8192]:
        raise InputError(f"{name}: looks like a binary file or UTF-16/32 text without a byte order "
                         "mark (NUL bytes); expected UTF-8 text")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise InputError(f"{name}:{line}: invalid UTF-8 at byte {exc.start} "
                         f"(0x{data[exc.start]:02x}); convert the file to UTF-8") from None
    return text


#: Byte order marks of the encodings read besides UTF-8 (UTF-32's first: it begins like UTF-16's).
_BOMS = ((b"\xff\xfe\x00\x00", "utf-32"), (b"\x00\x00\xfe\xff", "utf-32"), (b"\xff\xfe", "utf-16"),
         (b"\xfe\xff", "utf-16"))


#: The most bytes one read of inputs takes (all files, directories and stdin together): an endless
#: device or pipe is refused, not read until memory runs out. `COMPACTOR_MAX_INPUT_BYTES` changes it.
MAX_INPUT_BYTES = 256 * 1024 * 1024
INPUT_LIMIT_ENV = "COMPACTOR_MAX_INPUT_BYTES"
_BLOCK = 1 << 20


def max_input_bytes() -> int:
    """The input limit in bytes: `$COMPACTOR_MAX_INPUT_BYTES`, else MAX_INPUT_BYTES."""
    raw = os.environ.get(INPUT_LIMIT_ENV, "").strip()
    if not raw:
        return MAX_INPUT_BYTES
    try:
        value = int(raw.replace("_", ""))
    except ValueError:
        value = 0
    if value <= 0:
        raise InputError(f"{INPUT_LIMIT_ENV}={raw!r}: expected a positive whole number of bytes")
    return value


class _Allowance:
    """What is left of the input limit for one read of inputs."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.left = limit

    def read(self, stream: BinaryIO, name: str) -> bytes:
        """All of `stream`, or an InputError naming it as soon as the limit is passed: the stream
        is read in blocks, so an endless one stops at the limit."""
        blocks: list[bytes] = []
        while True:
            block = stream.read(min(_BLOCK, self.left + 1))
            if not block:
                return b"".join(blocks)
            self.left -= len(block)
            if self.left < 0:
                raise InputError(f"{name}: the input is larger than {self.limit:,} bytes, the most "
                                 f"compactor reads at once (set {INPUT_LIMIT_ENV} to change it)")
            blocks.append(block)


def read_paths(paths: Iterable[str | os.PathLike[str]], stdin: BinaryIO | None = None) -> list[Source]:
    """Sources from files, directories (recursively, known extensions) and `-` for stdin, at most
    `max_input_bytes()` of them in all."""
    sources: list[Source] = []
    allowance = _Allowance(max_input_bytes())
    names = [str(p) for p in paths]
    for raw in names:
        if raw == "-":
            stream = stdin if stdin is not None else sys.stdin.buffer
            data = allowance.read(stream, "<stdin>")
            sources.extend(parse_text(decode_bytes(data, "<stdin>"), "<stdin>", None))
            continue
        path = Path(raw)
        if path.is_dir():
            files = sorted(p for p in path.rglob("*") if p.is_file()
                           and p.suffix.lower() in KNOWN_SUFFIXES
                           and not any(part.startswith(".") for part in p.relative_to(path).parts))
            if not files:
                raise InputError(f"{raw}: no readable files in this directory "
                                 f"(looked for {', '.join(sorted(KNOWN_SUFFIXES))})")
            for file in files:
                sources.extend(read_file(file, allowance))
        elif path.exists():
            sources.extend(read_file(path, allowance))
        else:
            raise InputError(f"{raw}: no such file or directory")
    if not sources or all(not s.text.strip() for s in sources):
        shown = ", ".join("<stdin>" if p == "-" else p for p in names)
        raise InputError(f"{shown}: the input is empty: there is no text to compress")
    return sources


def read_file(path: Path, allowance: _Allowance | None = None) -> list[Source]:
    """Sources from one file, by its extension; at most `max_input_bytes()` of it (or what is left
    of `allowance`)."""
    allowance = allowance or _Allowance(max_input_bytes())
    try:
        with path.open("rb") as handle:
            data = allowance.read(handle, str(path))
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc.strerror}") from None
    return parse_text(decode_bytes(data, str(path)), str(path), path.suffix.lower())


def parse_text(text: str, name: str, suffix: str | None) -> list[Source]:
    """Sources from decoded text; `suffix` None means sniff the format."""
    if suffix is None:
        suffix = _sniff(text)
    if suffix in HTML_SUFFIXES:
        return [Source.from_text(text, kind="web_page", uri=_uri(name), title=None)]
    if suffix == ".jsonl":
        return records_sources(jsonl_items(text, name), name, _uri(name))
    if suffix == ".json":
        return records_sources(json_items(text, name), name, _uri(name))
    if suffix in (".srt", ".vtt"):
        return [transcript_source(parse_subtitles(text, name), _uri(name))]
    if not text.strip():
        raise InputError(f"{name}: the input is empty")
    return [Source.from_text(text, uri=_uri(name))]


def _uri(name: str) -> str | None:
    return None if name.startswith("<") else name


def _sniff(text: str) -> str:
    head = text.lstrip()[:2048]
    if _HTML_SNIFF.match(head):
        return ".html"
    if head.startswith("[") or (head.startswith("{") and "\n{" not in text.strip()):
        try:
            json.loads(text)
            return ".json"
        except ValueError:
            pass
        except RecursionError:
            return ".json"  # read again there, and refused with its place
    if head.startswith("{"):
        return ".jsonl"
    if head.startswith("WEBVTT"):
        return ".vtt"
    if _TIMESTAMP.search(head) and regex.match(r"\s*\d+\s*\n", head):
        return ".srt"
    return ".txt"


def parse_subtitles(text: str, name: str) -> list[TranscriptSegment]:
    """Segments of an SRT or WebVTT file (cue settings and inline tags are dropped)."""
    segments: list[TranscriptSegment] = []
    blocks = regex.split(r"\n\s*\n", text.replace("\r\n", "\n").strip())
    for block in blocks:
        lines = block.split("\n")
        for i, line in enumerate(lines):
            match = _TIMESTAMP.search(line)
            if match:
                g = match.groups()
                start = _seconds(g[0], g[1], g[2], g[3])
                end = _seconds(g[4], g[5], g[6], g[7])
                body = " ".join(regex.sub(r"<[^>]+>", "", x).strip() for x in lines[i + 1:])
                speaker = None
                voice = regex.match(r"<v\s+([^>]+)>", lines[i + 1]) if i + 1 < len(lines) else None
                if voice:
                    speaker = voice.group(1).strip()
                if body.strip():
                    segments.append(TranscriptSegment(len(segments), start, end, body.strip(),
                                                      speaker))
                break
    if not segments:
        raise InputError(f"{name}: no subtitle cues found (expected SRT or WebVTT timestamps)")
    return segments


def _seconds(hours: str | None, minutes: str, seconds: str, millis: str) -> float:
    return int(hours or 0) * 3600 + int(minutes) * 60 + int(seconds) + int(millis.ljust(3, "0")) / 1000
