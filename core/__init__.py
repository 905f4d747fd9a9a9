"""compactor: rule-first context compression for LLM agents, with provenance.

    >>> import compactor
    >>> text = compactor.compress(long_text, query="what failed?", budget=300)
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the names, for type checkers; at run time they load on first use
    from compactor.apps.auto import AutoCompactor
    from compactor.apps.common import acompress
    from compactor.apps.compacter import ContextCompacter
    from compactor.apps.conversation import (
        TIERS,
        CompactedMessages,
        acompact_messages,
        compact_messages,
        count_message_tokens,
    )
    from compactor.apps.overflow import is_context_overflow, with_overflow_retry
    from compactor.apps.research import ResearchSession
    from compactor.apps.research_fetch import HttpFetcher
    from compactor.apps.research_report import ResearchReport, unresolved_footnotes
    from compactor.apps.search_providers import OfflineSearch, SearchProvider, TavilySearch, search_provider
    from compactor.apps.tools import EXPAND_TOOL, expand, handle_expand_call
    from compactor.apps.transcripts import (
        compress_multiple_files_results,
        compress_retrieval_results,
        compress_single_file_results,
        compress_transcripts,
    )
    from compactor.components import Component, Param, ScoreSet
    from compactor.document import (
        Budget,
        Chunk,
        Context,
        Fact,
        Message,
        Segment,
        Source,
        StepReport,
        TranscriptSegment,
    )
    from compactor.errors import (
        BudgetError,
        CompactorError,
        CompactorWarning,
        ConditionError,
        ConfigError,
        FidelityError,
        InputError,
        LLMError,
        PluginError,
        StageError,
        StoreConflict,
        StoreError,
    )
    from compactor.hookspecs import hookimpl, hookspec
    from compactor.llm.client import LLMClient, LLMSettings
    from compactor.pipeline import Pipeline, resolved_pipeline
    from compactor.provenance import KeptSpan, OffsetMap, kept_spans
    from compactor.run import Run
    from compactor.state import (
        BudgetShare,
        CompactionPlan,
        ConversationOptions,
        Knowledge,
        LossReport,
        RenderInfo,
        RunInputs,
        State,
        StateItem,
        TranscriptOptions,
    )
    from compactor.store import ChunkStore, MemoryStore, SQLiteStore, open_store
    from compactor.text.tokens import TokenCounter, get_counter

#: Where each public name lives: `import compactor` loads none of them until one is used, so a
#: program (or `compactor-run --help`) pays only for the faces it touches.
_LAZY: dict[str, str] = {
    "State": "compactor.state",
    "StateItem": "compactor.state",
    "RunInputs": "compactor.state",
    "RenderInfo": "compactor.state",
    "BudgetShare": "compactor.state",
    "Knowledge": "compactor.state",
    "LossReport": "compactor.state",
    "CompactionPlan": "compactor.state",
    "ConversationOptions": "compactor.state",
    "TranscriptOptions": "compactor.state",
    "LLMSettings": "compactor.llm.client",
    "LLMClient": "compactor.llm.client",
    "LLMError": "compactor.errors",
    "ConditionError": "compactor.errors",
    "CompactorWarning": "compactor.errors",
    "StoreConflict": "compactor.errors",
    "compress_transcripts": "compactor.apps.transcripts",
    "AutoCompactor": "compactor.apps.auto",
    "ContextCompacter": "compactor.apps.compacter",
    "expand": "compactor.apps.tools",
    "Component": "compactor.components",
    "Param": "compactor.components",
    "param": "compactor.components",
    "DataPath": "compactor.components",
    "ScoreSet": "compactor.components",
    "EXPAND_TOOL": "compactor.apps.tools",
    "CompactedMessages": "compactor.apps.conversation",
    "compact_messages": "compactor.apps.conversation",
    "acompact_messages": "compactor.apps.conversation",
    "acompress": "compactor.apps.common",
    "TIERS": "compactor.apps.conversation",
    "count_message_tokens": "compactor.apps.conversation",
    "is_context_overflow": "compactor.apps.overflow",
    "with_overflow_retry": "compactor.apps.overflow",
    "handle_expand_call": "compactor.apps.tools",
    "Budget": "compactor.document",
    "Chunk": "compactor.document",
    "Context": "compactor.document",
    "Fact": "compactor.document",
    "Message": "compactor.document",
    "Segment": "compactor.document",
    "Source": "compactor.document",
    "StepReport": "compactor.document",
    "TranscriptSegment": "compactor.document",
    "BudgetError": "compactor.errors",
    "CompactorError": "compactor.errors",
    "ConfigError": "compactor.errors",
    "FidelityError": "compactor.errors",
    "InputError": "compactor.errors",
    "PluginError": "compactor.errors",
    "StageError": "compactor.errors",
    "StoreError": "compactor.errors",
    "hookimpl": "compactor.hookspecs",
    "hookspec": "compactor.hookspecs",
    "Pipeline": "compactor.pipeline",
    "resolved_pipeline": "compactor.pipeline",
    "KeptSpan": "compactor.provenance",
    "OffsetMap": "compactor.provenance",
    "kept_spans": "compactor.provenance",
    "ResearchSession": "compactor.apps.research",
    "HttpFetcher": "compactor.apps.research_fetch",
    "ResearchReport": "compactor.apps.research_report",
    "unresolved_footnotes": "compactor.apps.research_report",
    "OfflineSearch": "compactor.apps.search_providers",
    "SearchProvider": "compactor.apps.search_providers",
    "TavilySearch": "compactor.apps.search_providers",
    "search_provider": "compactor.apps.search_providers",
    "Run": "compactor.run",
    "ChunkStore": "compactor.store",
    "MemoryStore": "compactor.store",
    "SQLiteStore": "compactor.store",
    "open_store": "compactor.store",
    "TokenCounter": "compactor.text.tokens",
    "get_counter": "compactor.text.tokens",
    "compress_multiple_files_results": "compactor.apps.transcripts",
    "compress_retrieval_results": "compactor.apps.transcripts",
    "compress_single_file_results": "compactor.apps.transcripts",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'compactor' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__version__ = "0.1.0"


def compress(
    text: str | Source | Iterable[Source | Mapping[str, Any]] | Mapping[str, Any] | os.PathLike[str],
    *,
    query: str | None = None,
    budget: int | None = None,
    pipeline: str | os.PathLike[str] | Pipeline = "generic",
    plugins: Iterable[Any] = (),
    output_format: str | None = None,
    llm: Any = None,
) -> str:
    """Compress text to `budget` tokens with a shipped pipeline (by name), a pipeline file or a
    `Pipeline`; `plugins` add third-party components to a named pipeline, `llm` (True, a settings
    mapping or `LLMSettings`) enables the pipeline's guarded LLM steps.

    `text` may also be input records (a mapping or a list of them: `{"text" | "content" | "html" |
    "messages" | "segments", "url"?, "title"?, "id"?, ...}`) or a path to a records, text, HTML or
    subtitle file, read as `compactor-run` and batch mode read them (`compactor.formats.records`).

    A named pipeline is resolved once while its file, the plugins and the environment stay the same
    (see `compactor.pipeline.resolved_pipeline`), so a call costs the compression, not the set-up.
    """
    from compactor.apps.common import inputs_of, llm_mapping, pipeline_for

    return pipeline_for(pipeline, plugins).run(
        inputs_of(text), query=query, budget=budget, output_format=output_format, llm=llm_mapping(llm)
    ).output or ""



def warm_up(pipelines: Iterable[str | os.PathLike[str]] = ("qa", "generic"), *,
            plugins: Iterable[Any] = ()) -> None:
    """Load at start-up what the first `compress` call of a process would load on its way (the
    token encoding, each named pipeline and what its steps load on first use, the input readers),
    so a server's first request costs what every later one does. See
    `compactor.pipeline.warm_up`; later calls cost next to nothing."""
    from compactor.apps.common import inputs_of
    from compactor.pipeline import WARM_UP_TEXT
    from compactor.pipeline import warm_up as warm_pipelines

    inputs_of({"text": WARM_UP_TEXT})  # the record readers `compress` imports on its first call
    warm_pipelines(pipelines, plugins=plugins)

__all__ = [
    "EXPAND_TOOL",
    "TIERS",
    "AutoCompactor",
    "Budget",
    "BudgetError",
    "BudgetShare",
    "Chunk",
    "ChunkStore",
    "CompactedMessages",
    "CompactionPlan",
    "CompactorError",
    "CompactorWarning",
    "Component",
    "ConditionError",
    "ConfigError",
    "Context",
    "ContextCompacter",
    "ConversationOptions",
    "DataPath",
    "Fact",
    "FidelityError",
    "HttpFetcher",
    "InputError",
    "KeptSpan",
    "Knowledge",
    "LLMClient",
    "LLMError",
    "LLMSettings",
    "LossReport",
    "MemoryStore",
    "Message",
    "OfflineSearch",
    "OffsetMap",
    "Param",
    "Pipeline",
    "PluginError",
    "RenderInfo",
    "ResearchReport",
    "ResearchSession",
    "Run",
    "RunInputs",
    "SQLiteStore",
    "ScoreSet",
    "SearchProvider",
    "Segment",
    "Source",
    "StageError",
    "State",
    "StateItem",
    "StepReport",
    "StoreConflict",
    "StoreError",
    "TavilySearch",
    "TokenCounter",
    "TranscriptOptions",
    "TranscriptSegment",
    "__version__",
    "acompact_messages",
    "acompress",
    "compact_messages",
    "compress",
    "compress_multiple_files_results",
    "compress_retrieval_results",
    "compress_single_file_results",
    "compress_transcripts",
    "count_message_tokens",
    "expand",
    "get_counter",
    "handle_expand_call",
    "hookimpl",
    "hookspec",
    "is_context_overflow",
    "kept_spans",
    "open_store",
    "param",
    "resolved_pipeline",
    "search_provider",
    "unresolved_footnotes",
    "warm_up",
    "with_overflow_retry",
]
