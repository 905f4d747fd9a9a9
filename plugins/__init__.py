"""compactor's built-in components, registered through the same entry point as third parties."""

from __future__ import annotations

from collections.abc import Callable

from compactor.components import Component
from compactor.hookspecs import hookimpl
from compactor.plugins.chunk import (
    MessageChunker,
    ParagraphChunker,
    SegmentChunker,
    SentenceChunker,
    TokenChunker,
)
from compactor.plugins.classify import InjectionClassifier, RuleClassifier
from compactor.plugins.clean import DedupeCleaner, HtmlCleaner, NormalizeCleaner, SeenPages
from compactor.plugins.compress.eight_segment.conversation import EightSegment
from compactor.plugins.compress.map_reduce import MapReduce
from compactor.plugins.compress.search import ChunkFiltering, FactCentric, Summarization
from compactor.plugins.compress.select import SelectCompressor
from compactor.plugins.compress.structured import StructuredReducer
from compactor.plugins.compress.topics import TopicCompressor
from compactor.plugins.llm import LLMFallback
from compactor.plugins.organize import HierarchicalOrganizer
from compactor.plugins.render import (
    FootnoteRenderer,
    JsonRenderer,
    MarkdownRenderer,
    MessagesRenderer,
    TextRenderer,
)
from compactor.plugins.score import DensityScorer, ImportanceScorer, RecencyScorer, RelevanceScorer
from compactor.plugins.validate import LossValidator, RatioController

BUILTIN_COMPONENTS: tuple[type[Component], ...] = (
    NormalizeCleaner,
    HtmlCleaner,
    StructuredReducer,
    DedupeCleaner,
    SeenPages,
    TokenChunker,
    SentenceChunker,
    ParagraphChunker,
    MessageChunker,
    SegmentChunker,
    RuleClassifier,
    InjectionClassifier,
    DensityScorer,
    RelevanceScorer,
    ImportanceScorer,
    RecencyScorer,
    SelectCompressor,
    FactCentric,
    ChunkFiltering,
    Summarization,
    MapReduce,
    TopicCompressor,
    EightSegment,
    HierarchicalOrganizer,
    LossValidator,
    RatioController,
    LLMFallback,
    TextRenderer,
    MarkdownRenderer,
    JsonRenderer,
    MessagesRenderer,
    FootnoteRenderer,
)


@hookimpl
def compactor_register_components(register: Callable[[type[Component]], None]) -> None:
    for component in BUILTIN_COMPONENTS:
        register(component)
