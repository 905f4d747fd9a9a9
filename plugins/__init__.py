"""compactor's built-in components, registered through the same entry point as third parties.

Each is declared by name, stage and import path rather than imported here: the registry imports a
component's module the first time a pipeline names it, so resolving `qa` loads the modules of its
own steps and not the conversation compactor, the map-reduce summarizer or the renderers it never
uses. `BUILTIN_COMPONENTS` (every class, for tests and documentation) imports them all on access.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from compactor.hookspecs import hookimpl
from compactor.registry import Deferred, deferred_class

if TYPE_CHECKING:
    from compactor.components import Component

_P = "compactor.plugins."
#: Every built-in component, in the order the registry lists them when names tie.
BUILTINS: tuple[Deferred, ...] = (
    Deferred("clean.normalize", "clean", _P + "clean:NormalizeCleaner"),
    Deferred("clean.html", "clean", _P + "clean:HtmlCleaner"),
    Deferred("compress.structured", "clean", _P + "compress.structured:StructuredReducer"),
    Deferred("clean.dedupe", "clean", _P + "clean:DedupeCleaner"),
    Deferred("clean.seen", "clean", _P + "clean:SeenPages"),
    Deferred("chunk.tokens", "chunk", _P + "chunk:TokenChunker"),
    Deferred("chunk.sentences", "chunk", _P + "chunk:SentenceChunker"),
    Deferred("chunk.paragraphs", "chunk", _P + "chunk:ParagraphChunker"),
    Deferred("chunk.messages", "chunk", _P + "chunk:MessageChunker"),
    Deferred("chunk.segments", "chunk", _P + "chunk:SegmentChunker"),
    Deferred("classify.rules", "classify", _P + "classify:RuleClassifier"),
    Deferred("classify.injection", "classify", _P + "classify:InjectionClassifier"),
    Deferred("score.density", "score", _P + "score:DensityScorer"),
    Deferred("score.relevance", "score", _P + "score:RelevanceScorer"),
    Deferred("score.importance", "score", _P + "score:ImportanceScorer"),
    Deferred("score.recency", "score", _P + "score:RecencyScorer"),
    Deferred("compress.select", "compress", _P + "compress.select:SelectCompressor"),
    Deferred("compress.fact_centric", "compress", _P + "compress.search:FactCentric"),
    Deferred("compress.chunk_filtering", "compress", _P + "compress.search:ChunkFiltering"),
    Deferred("compress.summarization", "compress", _P + "compress.search:Summarization"),
    Deferred("compress.map_reduce", "compress", _P + "compress.map_reduce:MapReduce"),
    Deferred("compress.topics", "compress", _P + "compress.topics:TopicCompressor"),
    Deferred("compress.eight_segment", "compress", _P + "compress.eight_segment.conversation:EightSegment"),
    Deferred("organize.hierarchical", "compress", _P + "organize:HierarchicalOrganizer"),
    Deferred("validate.loss", "validate", _P + "validate:LossValidator"),
    Deferred("validate.ratio", "validate", _P + "validate:RatioController"),
    Deferred("llm.fallback", "fallback", _P + "llm:LLMFallback"),
    Deferred("render.text", "render", _P + "render:TextRenderer"),
    Deferred("render.markdown", "render", _P + "render:MarkdownRenderer"),
    Deferred("render.json", "render", _P + "render:JsonRenderer"),
    Deferred("render.messages", "render", _P + "render:MessagesRenderer"),
    Deferred("render.footnotes", "render", _P + "render:FootnoteRenderer"),
)


@hookimpl
def compactor_register_components(register: Callable[[type[Component] | Deferred], None]) -> None:
    for component in BUILTINS:
        register(component)


def builtin_components() -> tuple[type[Component], ...]:
    """Every built-in component class (imports every built-in module)."""
    return tuple(deferred_class(declared) for declared in BUILTINS)


def __getattr__(name: str) -> Any:
    if name == "BUILTIN_COMPONENTS":
        return builtin_components()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
