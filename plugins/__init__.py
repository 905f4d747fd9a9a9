"""compactor's built-in components, registered through the same entry point as third parties."""

from __future__ import annotations

from collections.abc import Callable

from compactor.components import Component
from compactor.hookspecs import hookimpl
from compactor.plugins.chunkers import MessageChunker, ParagraphChunker, SentenceChunker, TokenChunker
from compactor.plugins.classify import RuleClassifier
from compactor.plugins.cleaners import DedupeCleaner, HtmlCleaner, NormalizeCleaner
from compactor.plugins.eight_segment import EightSegment
from compactor.plugins.injection import InjectionClassifier
from compactor.plugins.llm_fallback import LLMFallback
from compactor.plugins.map_reduce import MapReduce
from compactor.plugins.render import JsonRenderer, MarkdownRenderer, MessagesRenderer, TextRenderer
from compactor.plugins.scorers import DensityScorer, ImportanceScorer, RecencyScorer, RelevanceScorer
from compactor.plugins.seen import SeenPages
from compactor.plugins.select import SelectCompressor
from compactor.plugins.strategies import ChunkFiltering, FactCentric, Summarization
from compactor.plugins.topics import FootnoteRenderer, TopicCompressor
from compactor.plugins.transcripts import HierarchicalOrganizer, SegmentChunker
from compactor.plugins.validate import LossValidator, RatioController

BUILTIN_COMPONENTS: tuple[type[Component], ...] = (
    NormalizeCleaner,
    HtmlCleaner,
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
