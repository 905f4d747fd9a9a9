"""Retrieved transcript segments for a video/meeting QA agent, organised and compressed.

    >>> compress_single_file_results("What about AI in medicine?", {"filename": "talk.mp4",
    ...     "segments": [{"index": 0, "start": 0.0, "end": 3.5, "text": "..."}, ...]})
    >>> compress_multiple_files_results(question, [results_for_file_1, results_for_file_2])

The content is organised per file and, within a file, into blocks of consecutive segment indices,
in a labelled layout (English or Chinese labels, by the transcript's language). When it
fits `max_length` (characters by default; `unit="tokens"` for tokens) it is
returned as it is; otherwise the `transcripts` pipeline's `organize.hierarchical` step keeps the
segments that matter for the question, per file, each with its `[start-end]` timestamps, and an
optional LLM pass (guarded like `llm.fallback`) may rewrite that. If anything fails, the functions
return the file overview (segments per file) instead of raising.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any, Literal

from compactor.apps.common import PipelineArg, check_overrides, llm_mapping, pipeline_for
from compactor.document import Context, Source
from compactor.errors import InputError
from compactor.formats.transcripts import overview as file_overview
from compactor.formats.transcripts import read_results, segments_of, spoken, transcript_source
from compactor.pipeline import Pipeline
from compactor.state import State, TranscriptOptions
from compactor.text.language import is_chinese

log = logging.getLogger(__name__)
Unit = Literal["chars", "tokens"]
OnFailure = Literal["overview", "rules"]


def compress_transcripts(results: Any, *, query: str, budget: int = 2000, unit: Unit = "chars",
                         llm: Any = None, overview: bool = False, on_llm_failure: OnFailure = "rules",
                         pipeline: PipelineArg = "transcripts", plugins: Iterable[Any] = ()) -> str:
    """The organised (and, when over `budget`, query-compressed) content of retrieved transcript
    segments: one file's results (a dict), several (a list of dicts) or a flat list of segments.

    `budget` counts characters (the default) or tokens (`unit="tokens"`). The layout has
    file markers, numbered blocks with a blank line between them); `overview=True` puts the
    file overview line (segments per file) on top. When an LLM is given and its reply fails or is
    refused, `on_llm_failure="rules"` returns the rule-selected segments and `"overview"` the file
    overview alone. Like the agent tools it stands for, it never breaks the agent's loop:
    unreadable results or a failed step give the file overview and a logged warning. The agent tools' names
    (`compress_single_file_results`, `compress_multiple_files_results`, `compress_retrieval_results`,
    with `question` and `max_length`) call this.
    """
    items = [results] if isinstance(results, Mapping | Source) else results
    try:
        sources = _merged([s for item in _as_list(items) for s in read_results(item)])
    except (InputError, TypeError) as exc:
        log.warning("transcript results unreadable: %s", exc)
        return f"(unreadable retrieval results: {exc})"
    layout = {"unit": unit, "overview": overview, "on_llm_failure": on_llm_failure}
    try:
        runner = pipeline_for(pipeline, plugins)
    except Exception as exc:  # a tool of the agent's loop must never break the agent's loop
        return _overview_after(exc, sources)
    check_overrides(runner, "segments", layout)  # a wrong option is the caller's mistake: it raises
    try:
        return _run(query, sources, budget, llm, layout, runner)
    except Exception as exc:
        return _overview_after(exc, sources)


def _overview_after(exc: Exception, sources: list[Source]) -> str:
    """The file overview in place of a failed compression, with the failure logged."""
    log.warning("transcript compression failed (%s: %s); returning the file overview",
                type(exc).__name__, exc)
    return file_overview(sources, is_chinese(spoken(sources)))


def compress_multiple_files_results(question: str, retrieval_results_list: Any, max_length: int = 2000, *,
                                    unit: Unit = "chars", llm: Any = None, overview: bool = False,
                                    on_llm_failure: OnFailure = "rules",
                                    pipeline: PipelineArg = "transcripts",
                                    plugins: Iterable[Any] = ()) -> str:
    """The agent tool's name for `compress_transcripts` over several files' results."""
    return compress_transcripts(retrieval_results_list, query=question, budget=max_length, unit=unit,
                                llm=llm, overview=overview, on_llm_failure=on_llm_failure,
                                pipeline=pipeline, plugins=plugins)


def compress_single_file_results(question: str, retrieval_results: Any, max_length: int = 2000, *,
                                 unit: Unit = "chars", llm: Any = None, overview: bool = False,
                                 on_llm_failure: OnFailure = "rules",
                                 pipeline: PipelineArg = "transcripts",
                                 plugins: Iterable[Any] = ()) -> str:
    """The agent tool's name for `compress_transcripts` over one file's results."""
    return compress_transcripts([retrieval_results], query=question, budget=max_length, unit=unit, llm=llm,
                                overview=overview, on_llm_failure=on_llm_failure, pipeline=pipeline,
                                plugins=plugins)


def compress_retrieval_results(question: str, retrieval_results: Any, max_length: int = 2000,
                               **options: Any) -> str:
    """The older tool name: one file's results (a dict) or several (a list)."""
    return compress_transcripts(retrieval_results, query=question, budget=max_length, **options)


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


def _run(question: str, sources: list[Source], max_length: int, llm: Any, layout: dict[str, Any],
         runner: Pipeline) -> str:
    if not isinstance(max_length, int) or isinstance(max_length, bool) or max_length <= 0:
        raise InputError(f"the budget (max_length) must be a positive integer, not {max_length!r}")
    settings = llm_mapping(llm)
    options = {"max_length": max_length, "llm": settings is not None, **layout}
    context = Context(sources=tuple(sources), query=question,
                      state=State([TranscriptOptions(options)]))
    result = runner.run(context, output_format="text", llm=settings)
    return result.output or file_overview(sources, is_chinese(spoken(sources)))
