"""Transcript records: retrieved segments read into one source per file."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from compactor.document import Source, TranscriptSegment
from compactor.errors import InputError

_TEXT_KEYS = ("text", "sentence", "content", "transcript")
_FILE_KEYS = ("filename", "file", "source", "video", "path", "name")


def segment_from(record: Mapping[str, Any], position: int, where: str) -> TranscriptSegment:
    """A segment from `{index?, start, end, text, speaker?}` (also `start_time`/`end_time`, and
    `sentence`/`content` for the text)."""
    text = next((record[k] for k in _TEXT_KEYS if isinstance(record.get(k), str)), None)
    start = record.get("start", record.get("start_time"))
    end = record.get("end", record.get("end_time"))
    try:
        if text is None:
            raise TypeError
        index = int(record.get("index", position))
        speaker = str(record["speaker"]) if record.get("speaker") is not None else None
        return TranscriptSegment(index=index, start=float(start), end=float(end), text=text, speaker=speaker)
    except (TypeError, ValueError):
        raise InputError(f"{where}: a segment needs numeric `start` and `end`, a `text` and an integer "
                         "`index` (when given)") from None


def transcript_source(segments: Sequence[TranscriptSegment], name: str | None) -> Source:
    """One source per file; its text has one `[start-end] speaker: text` line per segment, and
    `unit_spans` holds each line's `(start, end)` so segment `i` becomes chunk `i`."""
    lines, spans, offset = [], [], 0
    for s in segments:
        who = f"{s.speaker}: " if s.speaker else ""
        line = f"[{s.start:.2f}-{s.end:.2f}] {who}" + " ".join(s.text.split())
        lines.append(line)
        spans.append((offset, offset + len(line)))
        offset += len(line) + 1
    return Source.from_text("\n".join(lines), kind="transcript", uri=name, segments=segments,
                            unit_spans=spans)


def read_results(results: Any, name: str | None = None) -> list[Source]:
    """Transcript sources from retrieval results: `{"filename", "segments": [...]}` (also `results`),
    a list of such dicts, a list of segment dicts that each name their file, a Source, or a list of
    Sources. Segments of one file stay in one source, in the order given."""
    if isinstance(results, Source):
        return [results]
    if isinstance(results, Mapping):
        return [_one_file(results, name or "<results>")]
    if not isinstance(results, Iterable) or isinstance(results, str | bytes):
        raise InputError(f"retrieval results must be a dict or a list, not {type(results).__name__}")
    items = list(results)
    if all(isinstance(i, Source) for i in items):
        return items
    if items and all(isinstance(i, Mapping) and segments_of(i) is not None for i in items):
        return [_one_file(item, f"{name or 'results'}[{n}]") for n, item in enumerate(items)]
    by_file: dict[str, list[TranscriptSegment]] = {}
    for position, item in enumerate(items):
        if not isinstance(item, Mapping):
            raise InputError(f"retrieval result {position}: expected a dict, not {type(item).__name__}")
        file = next((str(item[k]) for k in _FILE_KEYS if item.get(k)), name or "transcript")
        segments = by_file.setdefault(file, [])  # without an index, a segment's place in its file
        segments.append(segment_from(item, len(segments), f"retrieval result {position}"))
    if not by_file:
        raise InputError("the retrieval results are empty")
    return [transcript_source(segments, file) for file, segments in by_file.items()]


def segments_of(item: Mapping[str, Any]) -> list[Any] | None:
    for key in ("segments", "results", "sentences"):
        if isinstance(item.get(key), list):
            return item[key]
    return None


def _one_file(item: Mapping[str, Any], where: str) -> Source:
    segments = segments_of(item)
    if segments is None:
        raise InputError(f"{where}: expected a `segments` (or `results`) list")
    file = next((str(item[k]) for k in _FILE_KEYS if item.get(k)), where)
    return transcript_source([segment_from(s, n, f"{file}: segment {n}") if isinstance(s, Mapping) else
                              _bad(file, n) for n, s in enumerate(segments)], file)


def _bad(file: str, position: int) -> TranscriptSegment:
    raise InputError(f"{file}: segment {position} is not an object")


def overview(sources: Sequence[Source], zh: bool = False) -> str:
    """The file overview: how many segments each file contributed."""
    if zh:
        return "检索结果概览：" + "；".join(f"{s.uri or s.id}：{len(s.segments)} 个片段"
                                         for s in sources) + "。"
    counts = [f"{s.uri or s.id}: {len(s.segments)} segment{'s' if len(s.segments) != 1 else ''}"
              for s in sources]
    return "Retrieved segments per file: " + "; ".join(counts) + "."


def spoken(sources: Sequence[Source]) -> Iterator[str]:
    """The first 40 segment texts of each transcript, for `compactor.text.language.is_chinese`:
    every file gets a say, not only the first long one."""
    return (seg.text for s in sources for seg in s.segments[:40])
