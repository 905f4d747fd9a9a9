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
from collections.abc import Mapping
from typing import Any, Literal

from compactor.apps.common import llm_mapping, shipped_pipeline
from compactor.document import Context, Source
from compactor.errors import InputError
from compactor.formats.transcripts import is_chinese, overview, read_results, segments_of, transcript_source
from compactor.pipeline import Pipeline
from compactor.state import State, TranscriptOptions

log = logging.getLogger(__name__)
Unit = Literal["chars", "tokens"]
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
    if items and all(isinstance(i, Mapping) and segments_of(i) is None for i in items):
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
                      state=State([TranscriptOptions(options)]))
    result = runner.run(context, output_format="text", llm=settings)
    return result.output or overview(sources, is_chinese(sources))
