"""compress.select: keep the most valuable chunks that fit the budget, in their original order."""

from __future__ import annotations

from typing import Literal

from compactor.components import Component
from compactor.document import Chunk, Context, Segment, Source
from compactor.hookspecs import hookimpl
from compactor.run import Run

#: Tokens reserved per kept source for the renderer's separators and headings.
SOURCE_OVERHEAD = 24
SEPARATOR = 2


def merged_runs(chunks: list[Chunk]) -> list[tuple[int, int, list[Chunk]]]:
    """Contiguous or overlapping kept chunks of one source merged into runs (start, end, chunks)."""
    runs: list[tuple[int, int, list[Chunk]]] = []
    for chunk in sorted(chunks, key=lambda c: c.start):
        if runs and chunk.start <= runs[-1][1]:
            start, end, members = runs[-1]
            runs[-1] = (start, max(end, chunk.end), [*members, chunk])
        else:
            runs.append((chunk.start, chunk.end, [chunk]))
    return runs


def segments_for(context: Context, kept: list[Chunk]) -> tuple[Segment, ...]:
    """One segment per source with its kept runs, joined by a blank line and an ellipsis mark."""
    by_source: dict[str, list[Chunk]] = {}
    for chunk in kept:
        by_source.setdefault(chunk.source_id, []).append(chunk)
    segments = []
    for source in context.sources:
        chunks = by_source.get(source.id)
        if not chunks:
            continue
        runs = merged_runs(chunks)
        text = "\n\n[…]\n\n".join(source.text[s:e].strip() for s, e, _ in runs)
        ids = tuple(c.id for _, _, members in runs for c in members)
        segments.append(Segment(id=f"{source.id}-kept", text=text, chunk_ids=ids,
                                title=source.title or source.uri, source_id=source.id))
    return tuple(segments)


def source_overhead(sources: list[Source]) -> int:
    return SOURCE_OVERHEAD * len(sources)


class SelectCompressor(Component):
    """Keeps chunks by value within the budget and preserves their order.

    Value is the `combined` score when scorers ran, else position (earlier first). Overlapping
    kept chunks are merged so no text repeats.
    """

    name = "compress.select"
    stage = "compress"
    requires = ("chunks",)
    provides = ("segments",)

    def __init__(self, *, order: Literal["score", "position"] = "score",
                 max_tokens: int | None = None) -> None:
        self.order = order
        self.max_tokens = max_tokens

    @hookimpl
    def compactor_compress(self, context: Context, run: Run) -> Context:
        limit = context.resolved_budget()
        if self.max_tokens is not None:
            limit = self.max_tokens if limit is None else min(limit, self.max_tokens)
        chunks = list(context.chunks)
        if self.order == "score" and any("combined" in c.scores for c in chunks):
            ranked = sorted(chunks, key=lambda c: (-c.scores.get("combined", 0.0), c.source_id,
                                                   c.index))
        else:
            ranked = chunks
        kept: list[Chunk] = []
        used = 0
        sources_used: set[str] = set()
        for chunk in ranked:
            extra = chunk.tokens + SEPARATOR
            if chunk.source_id not in sources_used:
                extra += SOURCE_OVERHEAD
            if limit is None or used + extra <= limit:
                kept.append(chunk)
                used += extra
                sources_used.add(chunk.source_id)
        run.note("kept_chunks", len(kept))
        run.note("dropped_chunks", len(chunks) - len(kept))
        run.note("budget", limit)
        return context.evolve(segments=segments_for(context, kept))
