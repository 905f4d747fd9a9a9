"""compress.select: keep the most valuable chunks that fit the budget, in their original order."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from compactor.components import Component
from compactor.document import Chunk, Context, Segment, Source
from compactor.hookspecs import hookimpl
from compactor.plugins.chunking import safe_pieces
from compactor.run import Run
from compactor.sentences import split_sentences

GAP_MARK = "\n\n[…]\n\n"
SECTION_JOIN = "\n\n"


@dataclass(frozen=True, slots=True)
class Kept:
    """A kept span of a chunk: the whole chunk, or a leading run of its sentences."""

    chunk: Chunk
    start: int  # offsets into the source text
    end: int


def source_heading(source: Source) -> str:
    """The Markdown heading a source gets in `render.markdown` (also used to budget for it)."""
    heading = source.title or (source.uri or "").rsplit("/", 1)[-1] or source.id
    head = f"## {heading}\n"
    if source.uri and source.uri != heading:
        head += f"<{source.uri}>\n"
    return head + "\n"


def segments_for(context: Context, kept: list[Kept]) -> tuple[Segment, ...]:
    """One segment per source: its kept spans in order, overlapping spans merged, gaps marked."""
    by_source: dict[str, list[Kept]] = {}
    for item in kept:
        by_source.setdefault(item.chunk.source_id, []).append(item)
    segments = []
    for source in context.sources:
        items = sorted(by_source.get(source.id, ()), key=lambda k: (k.start, k.end))
        if not items:
            continue
        runs: list[list[int]] = []
        ids: list[str] = []
        for item in items:
            if runs and item.start <= runs[-1][1]:
                runs[-1][1] = max(runs[-1][1], item.end)
            else:
                runs.append([item.start, item.end])
            if item.chunk.id not in ids:
                ids.append(item.chunk.id)
        text = GAP_MARK.join(source.text[s:e].strip() for s, e in runs)
        segments.append(Segment(id=f"{source.id}-kept", text=text, chunk_ids=tuple(ids),
                                title=source.title or source.uri, source_id=source.id))
    return tuple(segments)


class SelectCompressor(Component):
    """Keeps chunks by value within the budget and preserves their order.

    Value is the `combined` score when scorers ran, else position (earlier first). When a chunk
    does not fit whole, its leading sentences that fit are kept, so the budget is used closely.
    Overlapping kept chunks are merged so no text repeats.
    """

    name = "compress.select"
    stage = "compress"
    requires = ("chunks",)
    provides = ("segments",)

    def __init__(self, *, order: Literal["score", "position"] = "score",
                 max_tokens: int | None = None, partial: bool = True) -> None:
        self.order = order
        self.max_tokens = max_tokens
        self.partial = partial

    @hookimpl
    def compactor_compress(self, context: Context, run: Run) -> Context:
        limit = context.resolved_budget()
        if self.max_tokens is not None:
            limit = self.max_tokens if limit is None else min(limit, self.max_tokens)
        chunks = list(context.chunks)
        if limit is None:
            return context.evolve(segments=segments_for(
                context, [Kept(c, c.start, c.end) for c in chunks]))
        if self.order == "score" and any("combined" in c.scores for c in chunks):
            ranked = sorted(chunks, key=lambda c: (-c.scores.get("combined", 0.0), c.source_id,
                                                   c.index))
        else:
            ranked = chunks
        markdown = run.settings.get("output", {}).get("format") == "markdown"
        headings = {s.id: run.counter.count(source_heading(s)) if markdown else 0
                    for s in context.sources}
        kept: list[Kept] = []
        used = 0
        for _ in range(2):  # the second pass fills what the estimates left over
            used = self._greedy(ranked, kept, used, limit, headings, run)
            segments = segments_for(context, kept)
            while kept and (used := self._rendered_tokens(context, segments, run, markdown)) > limit:
                kept.pop()  # estimates were off: drop the least valuable span
                segments = segments_for(context, kept)
        run.note("kept_chunks", len({k.chunk.id for k in kept}))
        run.note("partial_chunks", sum(1 for k in kept if k.end - k.start < len(k.chunk.text)))
        run.note("dropped_chunks", len(chunks) - len({k.chunk.id for k in kept}))
        run.note("budget", limit)
        return context.evolve(segments=segments)

    def _greedy(self, ranked: list[Chunk], kept: list[Kept], used: int, limit: int,
                headings: dict[str, int], run: Run) -> int:
        """Add chunks (or their leading sentences) in rank order while the estimate fits."""
        taken = {(k.chunk.source_id, k.chunk.index) for k in kept}
        seen_sources = {k.chunk.source_id for k in kept}
        for chunk in ranked:
            if (chunk.source_id, chunk.index) in taken:
                continue
            adjacent = {(chunk.source_id, chunk.index - 1), (chunk.source_id, chunk.index + 1)}
            overhead = 0 if not kept or adjacent & taken else 4
            if chunk.source_id not in seen_sources:
                overhead += headings[chunk.source_id]
            room = limit - used - overhead
            if room <= 0:
                continue
            item: Kept | None = None
            cost = chunk.tokens
            if chunk.tokens <= room:
                item = Kept(chunk, chunk.start, chunk.end)
            elif self.partial:
                item, cost = self._leading_sentences(chunk, room, run)
            if item is not None:
                kept.append(item)
                taken.add((chunk.source_id, chunk.index))
                used += cost + overhead
                seen_sources.add(chunk.source_id)
        return used

    @staticmethod
    def _leading_sentences(chunk: Chunk, room: int, run: Run) -> tuple[Kept | None, int]:
        spans = safe_pieces(chunk.text, split_sentences(chunk.text))
        counts = run.counter.count_many([chunk.text[s:e] for s, e in spans])
        total, end = 0, 0
        for (_, stop), count in zip(spans, counts, strict=True):
            if total + count > room:
                break
            total, end = total + count, stop
        if end == 0:
            return None, 0
        return Kept(chunk, chunk.start, chunk.start + end), total

    @staticmethod
    def _rendered_tokens(context: Context, segments: tuple[Segment, ...], run: Run,
                         markdown: bool) -> int:
        parts = []
        for segment in segments:
            head = source_heading(context.source(segment.source_id)) if (
                markdown and segment.source_id) else ""
            parts.append(head + segment.text)
        return run.counter.count(SECTION_JOIN.join(parts))
