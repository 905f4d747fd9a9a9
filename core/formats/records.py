"""Reading inputs into `Source`s: files, directories, stdin, search results, messages, transcripts.

Formats are chosen by extension, or sniffed for stdin: HTML, JSONL search results `{url, content}`,
JSON message lists (OpenAI chat format, or `{"messages": [...]}`), SRT/VTT, JSON transcript segments
`{index, start, end, text, speaker?}`, otherwise plain text or Markdown. Bad input gets an InputError
that names the file (and line), never a traceback.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

import regex

from compactor.document import Source, SourceKind, TranscriptSegment
from compactor.errors import InputError
from compactor.formats.messages import conversation_source, parse_message
from compactor.formats.transcripts import segment_from, transcript_source

TEXT_SUFFIXES = {".txt", ".md", ".markdown", ".rst", ".text"}
HTML_SUFFIXES = {".html", ".htm", ".xhtml"}
KNOWN_SUFFIXES = TEXT_SUFFIXES | HTML_SUFFIXES | {".json", ".jsonl", ".srt", ".vtt"}
_HTML_SNIFF = regex.compile(r"^\s*(?:<!doctype\s+html|<html|<head|<body|<(?:div|p|article)\b)",
                            regex.IGNORECASE)
_TIMESTAMP = regex.compile(
    r"(?:(\d+):)?(\d{1,2}):(\d{2})[.,](\d{1,3})\s*-->\s*(?:(\d+):)?(\d{1,2}):(\d{2})[.,](\d{1,3})"
)


def decode_bytes(data: bytes, name: str) -> str:
    """UTF-8 text (a BOM is dropped), or an InputError saying where it is not text."""
    if b"\x00" in data[:8192]:
        raise InputError(f"{name}: looks like a binary file (NUL bytes); expected text")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise InputError(f"{name}:{line}: invalid UTF-8 at byte {exc.start} "
                         f"(0x{data[exc.start]:02x}); convert the file to UTF-8") from None
    return text


def read_paths(paths: Iterable[str], stdin: BinaryIO | None = None) -> list[Source]:
    """Sources from files, directories (recursively, known extensions) and `-` for stdin."""
    sources: list[Source] = []
    for raw in paths:
        if raw == "-":
            stream = stdin if stdin is not None else sys.stdin.buffer
            sources.extend(parse_text(decode_bytes(stream.read(), "<stdin>"), "<stdin>", None))
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
                sources.extend(read_file(file))
        elif path.exists():
            sources.extend(read_file(path))
        else:
            raise InputError(f"{raw}: no such file or directory")
    if not sources or all(not s.text.strip() for s in sources):
        raise InputError("the input is empty: there is no text to compress")
    return sources


def read_file(path: Path) -> list[Source]:
    """Sources from one file, by its extension."""
    try:
        data = path.read_bytes()
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
        return _from_records(list(_jsonl(text, name)), name)
    if suffix == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InputError(f"{name}:{exc.lineno}:{exc.colno}: invalid JSON: {exc.msg}") from None
        if isinstance(data, dict) and isinstance(data.get("messages"), list):
            data = data["messages"]
        if isinstance(data, dict) and isinstance(data.get("segments"), list):
            data = data["segments"]
        if not isinstance(data, list):
            raise InputError(f"{name}: expected a JSON list of messages, segments or "
                             "{url, content} results")
        return _from_records([(i + 1, r) for i, r in enumerate(data)], name)
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
        except json.JSONDecodeError:
            pass
    if head.startswith("{"):
        return ".jsonl"
    if head.startswith("WEBVTT"):
        return ".vtt"
    if _TIMESTAMP.search(head) and regex.match(r"\s*\d+\s*\n", head):
        return ".srt"
    return ".txt"


def _jsonl(text: str, name: str) -> Iterator[tuple[int, Any]]:
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            yield number, json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputError(f"{name}:{number}:{exc.colno}: invalid JSON line: {exc.msg}") from None


def _from_records(records: list[tuple[int, Any]], name: str) -> list[Source]:
    """Search results, chat messages or transcript segments, decided by the first record."""
    if not records:
        raise InputError(f"{name}: the input is empty")
    first = records[0][1]
    if not isinstance(first, dict):
        raise InputError(f"{name}:{records[0][0]}: expected JSON objects, got {type(first).__name__}")
    if "role" in first:
        return [conversation_source([parse_message(r, f"{name}:{n}") for n, r in records], _uri(name))]
    if isinstance(first.get("messages"), list):
        return [_conversation_record(r, name, n) for n, r in records]
    if "start" in first and "text" in first:
        return [transcript_source([_segment(r, name, n, i) for i, (n, r) in enumerate(records)],
                                  _uri(name))]
    sources = []
    for number, record in records:
        if not isinstance(record, dict) or not isinstance(record.get("content"), str):
            raise InputError(f"{name}:{number}: a search result needs a string `content` "
                             "(and usually `url`)")
        content = record["content"]
        url = record.get("url")
        kind: SourceKind = "web_page" if url or _HTML_SNIFF.match(content[:2048]) else "text"
        sources.append(Source.from_text(content, kind=kind, uri=url, title=record.get("title"),
                                        metadata={k: v for k, v in record.items()
                                                  if k not in ("content", "url", "title")}))
    return sources


def _conversation_record(record: Any, name: str, number: int) -> Source:
    """One conversation per JSONL record `{"id"?, "messages": [...], ...}` (a batch of histories)."""
    if not isinstance(record, dict) or not isinstance(record.get("messages"), list):
        raise InputError(f"{name}:{number}: expected a record with a `messages` list")
    where = f"{name}:{number}"
    messages = [parse_message(m, f"{where}: message {i}") for i, m in enumerate(record["messages"])]
    if not messages:
        raise InputError(f"{where}: the message list is empty")
    label = str(record.get("id")) if record.get("id") is not None else f"{name}#{number}"
    return conversation_source(messages, label,
                               metadata={k: v for k, v in record.items() if k != "messages"})


def _segment(record: Any, name: str, number: int, position: int) -> TranscriptSegment:
    if not isinstance(record, dict):
        raise InputError(f"{name}:{number}: a transcript segment must be an object")
    return segment_from(record, position, f"{name}:{number}")


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
