"""The shared document model every stage reads and returns.

Frozen, slotted dataclasses: a stage never mutates what it was given, it returns a new object (use
`dataclasses.replace` or the `evolve` helpers). Offsets always count characters, never bytes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal

from compactor.state import RunInputs, State, StateItem

if TYPE_CHECKING:
    from compactor.provenance import Edits, OffsetMap

SourceKind = Literal["web_page", "text", "conversation", "transcript"]
#: The parts of a context a component names in `requires`/`provides` (beside typed state): the
#: chunks, their scores and labels, the facts, the output segments.
ContextPart = Literal["chunks", "scores", "segments", "facts", "labels"]
CONTEXT_PARTS: tuple[ContextPart, ...] = ("chunks", "scores", "segments", "facts", "labels")

_EMPTY: Mapping[str, Any] = MappingProxyType({})


def content_hash(text: str, length: int = 16) -> str:
    """Stable id for a text: the same bytes give the same id in every run and process."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:length]


def chunk_id(source_id: str, index: int) -> str:
    """Chunk ids are the source hash plus the chunk's position: stable across runs."""
    return f"{source_id}-{index:04d}"


def _empty() -> Mapping[str, Any]:
    return _EMPTY


def frozen_mapping(values: Mapping[str, Any] | None) -> Mapping[str, Any]:
    """Read-only copy of a mapping, so frozen objects stay frozen all the way down."""
    if not values:
        return _EMPTY
    return MappingProxyType(dict(values))


@dataclass(frozen=True, slots=True)
class Message:
    """One conversation message; a tool call and its results stay in their messages."""

    role: str
    content: str
    name: str | None = None
    tool_calls: tuple[Mapping[str, Any], ...] = ()
    tool_call_id: str | None = None
    raw: Mapping[str, Any] = field(default_factory=_empty)


@dataclass(frozen=True, slots=True)
class TranscriptSegment:
    """One timed sentence of a transcript."""

    index: int
    start: float
    end: float
    text: str
    speaker: str | None = None


@dataclass(frozen=True, slots=True)
class Source:
    """One input document.

    `original` is what was received (HTML, a message list rendered as text, ...) and never changes.
    `text` is the working text that chunk offsets point into: clean stages replace it, chunkers cut
    it. For plain text without cleaning the two are equal. `offsets` maps the working text back to
    the input (or to the text extracted from a page); see `compactor.provenance`.
    """

    id: str
    kind: SourceKind
    original: str
    text: str
    uri: str | None = None
    title: str | None = None
    metadata: Mapping[str, Any] = field(default_factory=_empty)
    messages: tuple[Message, ...] = ()
    segments: tuple[TranscriptSegment, ...] = ()
    tokens: int | None = None
    offsets: OffsetMap | None = None
    #: The `(start, end)` in `original` of each message (a conversation) or line (a transcript), so
    #: the message chunker makes message `i` chunk `i`; empty for other sources.
    unit_spans: tuple[tuple[int, int], ...] = ()
    #: A conversation's per-message request costs, once counted (None before).
    message_tokens: tuple[int, ...] | None = None

    @classmethod
    def from_text(
        cls,
        text: str,
        *,
        kind: SourceKind = "text",
        uri: str | None = None,
        title: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        messages: Iterable[Message] = (),
        segments: Iterable[TranscriptSegment] = (),
        unit_spans: Iterable[tuple[int, int]] = (),
    ) -> Source:
        """Build a source whose id is the hash of its original content (and uri, when given)."""
        key = text if uri is None else f"{uri}\n{text}"
        return cls(
            id=content_hash(key),
            kind=kind,
            original=text,
            text=text,
            uri=uri,
            title=title,
            metadata=frozen_mapping(metadata),
            messages=tuple(messages),
            segments=tuple(segments),
            unit_spans=tuple(unit_spans),
        )

    def with_text(self, text: str, *, edits: Edits | None = None, offsets: OffsetMap | None = None,
                  **changes: Any) -> Source:
        """A copy with new working text; its token count must be taken again.

        `edits` (how `text` was made from the current text) keep provenance to the input; `offsets`
        starts a new base (clean.html: the extracted text). With neither, offsets index `text`.
        """
        if edits is not None:
            from compactor.provenance import source_map
            offsets = source_map(self).then(edits)
        return replace(self, text=text, tokens=None, offsets=offsets, **changes)

    def __repr__(self) -> str:
        preview = self.text[:40].replace("\n", " ")
        return f"Source(id={self.id!r}, kind={self.kind!r}, uri={self.uri!r}, text={preview!r}...)"


@dataclass(frozen=True, slots=True)
class Chunk:
    """A contiguous span `source.text[start:end]` with its token count, labels and scores."""

    id: str
    source_id: str
    index: int
    start: int
    end: int
    text: str
    tokens: int
    lang: str = "en"
    labels: Mapping[str, Any] = field(default_factory=_empty)
    scores: Mapping[str, float] = field(default_factory=_empty)
    features: Mapping[str, Mapping[str, Any]] = field(default_factory=_empty)
    units: tuple[int, int] | None = None

    def __repr__(self) -> str:
        preview = self.text[:40].replace("\n", " ")
        return f"Chunk(id={self.id!r}, {self.start}:{self.end}, tokens={self.tokens}, {preview!r}...)"


@dataclass(frozen=True, slots=True)
class Fact:
    """A statement kept by a compressor, traceable to the chunks it came from."""

    id: str
    text: str
    chunk_ids: tuple[str, ...]
    source_url: str | None = None
    score: float = 0.0
    span: tuple[str, int, int] | None = None  # (source id, start, end) of its verbatim text

    @property
    def summary(self) -> str:
        """The statement itself, under the name search agents give a fact object's text."""
        return self.text


@dataclass(frozen=True, slots=True)
class Segment:
    """One section of compressed output (a source's kept text, a topic, one of the 8 sections)."""

    id: str
    text: str
    chunk_ids: tuple[str, ...]
    title: str | None = None
    source_id: str | None = None
    tokens: int | None = None
    metadata: Mapping[str, Any] = field(default_factory=_empty)
    spans: tuple[tuple[str, int, int], ...] = ()  # verbatim (source id, start, end) in working text


@dataclass(frozen=True, slots=True)
class Budget:
    """A token budget: absolute, or a ratio of the input tokens."""

    max_tokens: int | None = None
    ratio: float | None = None

    def resolve(self, tokens_in: int) -> int | None:
        """The absolute budget for an input of `tokens_in` tokens (None means unlimited)."""
        limits = []
        if self.max_tokens is not None:
            limits.append(self.max_tokens)
        if self.ratio is not None:
            limits.append(max(1, int(tokens_in * self.ratio)))
        return min(limits) if limits else None


@dataclass(frozen=True, slots=True)
class StepReport:
    """What one step did: the bookkeeping wrapper hooks fill in, plus the component's details."""

    index: int
    step: str
    stage: str
    tokens_in: int
    tokens_out: int
    seconds: float
    skipped: bool = False
    details: Mapping[str, Any] = field(default_factory=_empty)
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Context:
    """Everything that flows through a pipeline, one immutable snapshot per step."""

    sources: tuple[Source, ...] = ()
    chunks: tuple[Chunk, ...] = ()
    facts: tuple[Fact, ...] = ()
    segments: tuple[Segment, ...] = ()
    query: str | None = None
    budget: Budget = field(default_factory=Budget)
    output: str | None = None
    output_tokens: int | None = None
    reports: tuple[StepReport, ...] = ()
    #: Typed shared state, one deeply frozen item per type (`compactor.state`): what steps provide
    #: for later steps, applications and operations (knowledge, loss report, compaction plan, ...).
    state: State = field(default_factory=State)

    def evolve(self, **changes: Any) -> Context:
        """A copy with some fields replaced (the only way stages produce their result)."""
        return replace(self, **changes)

    @property
    def tokens(self) -> int:
        """Current size: the segments if compressed, else the chunks, else the sources."""
        if self.segments:
            return sum(s.tokens or 0 for s in self.segments)
        if self.chunks:
            return sum(c.tokens for c in self.chunks)
        return sum(s.tokens or 0 for s in self.sources)

    def with_state(self, *items: StateItem) -> Context:
        """A copy with `items` added to its state (replacing items of the same types)."""
        return replace(self, state=self.state.with_(*items))

    @property
    def input_tokens(self) -> int:
        """The run's input size (after cleaning): what ratio budgets are taken of."""
        inputs = self.state.get(RunInputs)
        return self.tokens if inputs is None else inputs.input_tokens

    def source(self, source_id: str) -> Source:
        """The source with this id (KeyError if absent)."""
        for src in self.sources:
            if src.id == source_id:
                return src
        raise KeyError(source_id)

    def chunk(self, chunk_id: str) -> Chunk:
        """The chunk with this id (KeyError if absent)."""
        for chunk in self.chunks:
            if chunk.id == chunk_id:
                return chunk
        raise KeyError(chunk_id)

    def resolved_budget(self) -> int | None:
        """The absolute token budget for this context's input size."""
        return self.budget.resolve(self.input_tokens)
