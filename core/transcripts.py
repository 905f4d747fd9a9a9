"""Retrieved transcript segments for a video/meeting QA agent (seed 002), organised and compressed.

    >>> compress_single_file_results("What about AI in medicine?", {"filename": "talk.mp4",
    ...     "segments": [{"index": 0, "start": 0.0, "end": 3.5, "text": "..."}, ...]})
    >>> compress_multiple_files_results(question, [results_for_file_1, results_for_file_2])

The content is organised per file and, within a file, into blocks of consecutive segment indices,
in the seed's labelled layout (English or Chinese labels, by the transcript's language). When it
fits `max_length` (characters by default, as the seed counts; `unit="tokens"` for tokens) it is
returned as it is; otherwise the `transcripts` pipeline's `organize.hierarchical` step keeps the
segments that matter for the question, per file, each with its `[start-end]` timestamps, and an
optional LLM pass (guarded like `llm.fallback`) may rewrite that. If anything fails, the functions
return the file overview (segments per file) instead of raising.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

from compactor.conversation import llm_mapping, shipped_pipeline
from compactor.document import Context, Source, TranscriptSegment, frozen_mapping
from compactor.errors import InputError
from compactor.pipeline import Pipeline

log = logging.getLogger(__name__)
Unit = Literal["chars", "tokens"]
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
    `metadata["spans"]` holds each line's `(start, end)` so segment `i` becomes chunk `i`."""
    lines, spans, offset = [], [], 0
    for s in segments:
        who = f"{s.speaker}: " if s.speaker else ""
        line = f"[{s.start:.2f}-{s.end:.2f}] {who}" + " ".join(s.text.split())
        lines.append(line)
        spans.append((offset, offset + len(line)))
        offset += len(line) + 1
    return Source.from_text("\n".join(lines), kind="transcript", uri=name, segments=segments,
                            metadata={"spans": tuple(spans)})


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
    if items and all(isinstance(i, Mapping) and _segments_of(i) is not None for i in items):
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


def _segments_of(item: Mapping[str, Any]) -> list[Any] | None:
    for key in ("segments", "results", "sentences"):
        if isinstance(item.get(key), list):
            return item[key]
    return None


def _one_file(item: Mapping[str, Any], where: str) -> Source:
    segments = _segments_of(item)
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


def is_chinese(sources: Sequence[Source]) -> bool:
    """Whether the transcripts are mostly Chinese (Han characters against Latin letters)."""
    sample = "".join(seg.text for s in sources for seg in s.segments[:40])[:4000]
    han = sum("\u4e00" <= ch <= "\u9fff" for ch in sample)
    return han > 0 and han >= sum(ch.isascii() and ch.isalpha() for ch in sample) / 4


def compress_multiple_files_results(question: str, retrieval_results_list: Any, max_length: int = 2000, *,
                                    unit: Unit = "chars", llm: Any = None,
                                    pipeline: str | Pipeline = "transcripts") -> str:
    """The organised (and, when over `max_length`, query-compressed) content of several files."""
    try:
        sources = _merged([s for item in _as_list(retrieval_results_list) for s in read_results(item)])
    except (InputError, TypeError) as exc:
        log.warning("transcript results unreadable: %s", exc)
        return f"(unreadable retrieval results: {exc})"
    try:
        return _run(question, sources, max_length, unit, llm, pipeline)
    except Exception as exc:  # the seed's contract: never break the agent's loop
        log.warning("transcript compression failed (%s: %s); returning the file overview",
                    type(exc).__name__, exc)
        return overview(sources, is_chinese(sources))


def compress_single_file_results(question: str, retrieval_results: Any, max_length: int = 2000, *,
                                 unit: Unit = "chars", llm: Any = None,
                                 pipeline: str | Pipeline = "transcripts") -> str:
    """The organised (and, when over `max_length`, query-compressed) content of one file."""
    return compress_multiple_files_results(question, [retrieval_results], max_length, unit=unit, llm=llm,
                                           pipeline=pipeline)


def compress_retrieval_results(question: str, retrieval_results: Any, max_length: int = 2000,
                               **options: Any) -> str:
    """The seed's older name: one file's results (a dict) or several (a list)."""
    if isinstance(retrieval_results, Mapping | Source):
        return compress_single_file_results(question, retrieval_results, max_length, **options)
    return compress_multiple_files_results(question, retrieval_results, max_length, **options)


def _merged(sources: list[Source]) -> list[Source]:
    """One source per file name: results for the same file given in several dicts are merged."""
    by_name: dict[str, list[Source]] = {}
    for source in sources:
        by_name.setdefault(source.uri or source.id, []).append(source)
    return [group[0] if len(group) == 1 else transcript_source(
        [seg for s in group for seg in s.segments], name) for name, group in by_name.items()]


def _as_list(results: Any) -> list[Any]:
    if isinstance(results, Mapping | Source):
        return [results]
    items = list(results)
    if items and all(isinstance(i, Mapping) and _segments_of(i) is None for i in items):
        return [items]  # one flat list of segments
    return items


def _run(question: str, sources: list[Source], max_length: int, unit: Unit, llm: Any,
         pipeline: str | Pipeline) -> str:
    if not isinstance(max_length, int) or max_length <= 0:
        raise InputError(f"max_length must be a positive integer, not {max_length!r}")
    runner = shipped_pipeline(pipeline) if isinstance(pipeline, str) else pipeline
    settings = llm_mapping(llm)
    options = {"max_length": max_length, "unit": unit, "llm": settings is not None}
    context = Context(sources=tuple(sources), query=question,
                      meta=frozen_mapping({"transcript_options": options}))
    result = runner.run(context, output_format="text", llm=settings)
    return result.output or overview(sources, is_chinese(sources))
