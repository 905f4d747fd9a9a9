"""compress.select: keep the most valuable chunks that fit the budget, in their original order."""

from __future__ import annotations

import heapq
from dataclasses import replace
from typing import Literal

import regex

from compactor.components import Component, has_score, param, score_value
from compactor.document import Chunk, Context, Segment
from compactor.hookspecs import hookimpl
from compactor.kit import GAP_MARK as GAP_MARK  # importable from here as before
from compactor.kit import GAP_TOKENS, Kept, segments_for, source_heading, stripped
from compactor.run import Run
from compactor.state import BudgetShare
from compactor.text.language import is_chinese
from compactor.text.relevance import index_terms
from compactor.text.sentences import split_sentences
from compactor.text.spans import safe_pieces
from compactor.text.templates import TemplateGroups
from compactor.text.terms import terms

#: A chunk is cut to fit only when at least this much room is left, and only this many per pass.
MIN_PARTIAL_TOKENS = 4
MAX_PARTIAL_TRIES = 3
WINDOW_LEAD = 2  # pieces kept before the first query match of a window
_PIECE_EN = regex.compile(r"\s*\S+")  # leading space: BPE merges it into the word
_PIECE_ZH = regex.compile(r"[^，,；;：:、。！？\s]+[，,；;：:、。！？]*\s*|\s+")
SECTION_JOIN = "\n\n"


def mmr_order(chunks: list[Chunk], value: dict[str, float], redundancy: float,
              enough: int | None = None) -> list[Chunk]:
    """Chunks by maximal marginal relevance: value minus `redundancy` x the strongest overlap with
    an already ranked chunk (lazy greedy over a heap, so only contenders are re-scored).

    Once the ranked chunks hold `enough` tokens the rest follow by plain value: nothing ranked
    after that point can enter the budget, and ranking all n chunks would cost O(n^2) overlaps.
    """
    by_value = sorted(chunks, key=lambda c: (-value[c.id], c.source_id, c.index))
    if redundancy <= 0:
        return by_value
    term_sets: dict[str, frozenset[str]] = {}
    heap = [(-value[c.id], c.source_id, c.index, c.id, 0, 0.0) for c in chunks]
    heapq.heapify(heap)
    by_id = {c.id: c for c in chunks}
    ranked: list[Chunk] = []
    ranked_sets: list[frozenset[str]] = []
    ranked_sizes: list[int] = []
    total = 0
    while heap and (enough is None or total < enough):
        _, sid, idx, cid, seen, overlap = heapq.heappop(heap)
        if seen < len(ranked):  # stale: re-score against what was ranked since
            mine = term_sets.get(cid)
            if mine is None:
                mine = term_sets[cid] = frozenset(terms(by_id[cid].text))
            if mine:
                shared = map(len, map(mine.intersection, ranked_sets[seen:]))
                size = len(mine)
                overlap = max(overlap, max((n / min(size, m) for n, m in
                                            zip(shared, ranked_sizes[seen:], strict=True) if n),
                                           default=0.0))
            current = value[cid] * (1 - redundancy * overlap)
            heapq.heappush(heap, (-current, sid, idx, cid, len(ranked), overlap))
            continue
        ranked.append(by_id[cid])
        ranked_sets.append(term_sets.get(cid) or frozenset(terms(by_id[cid].text)))
        ranked_sizes.append(len(ranked_sets[-1]) or 1)
        total += by_id[cid].tokens
    done = {c.id for c in ranked}
    return ranked + [c for c in by_value if c.id not in done]


def template_values(chunks: list[Chunk], value: dict[str, float], decay: float,
                    enough: int | None = None) -> dict[str, float]:
    """Values with near-duplicates discounted: the k-th further member of a template group
    (`compactor.text.templates`) keeps `decay`**k of its value, so one template filled with a
    hundred names cannot fill the budget while other candidates wait.

    Lazy, best first: a chunk is grouped only when no discounted chunk still waiting beats its
    plain value; once `enough` tokens are ranked the rest keep their plain value (none of them can
    enter the budget), so an input of thousands of sentences costs only its contenders.
    """
    if decay >= 1:
        return value
    by_value = sorted(chunks, key=lambda c: (-value[c.id], c.source_id, c.index))
    out = dict(value)
    groups = TemplateGroups()
    waiting: list[tuple[float, int, int]] = []  # (-discounted value, position, tokens)
    ranked = 0
    for position, chunk in enumerate(by_value):
        while waiting and -waiting[0][0] >= value[chunk.id]:
            ranked += heapq.heappop(waiting)[2]
        if enough is not None and ranked >= enough:
            break
        if value[chunk.id] <= 0:
            break  # nothing to discount
        out[chunk.id] = value[chunk.id] * decay ** groups.add(chunk.text)
        heapq.heappush(waiting, (-out[chunk.id], position, chunk.tokens))
    return out


class SelectCompressor(Component):
    """Keeps chunks by value within the budget and preserves their order.

    Value is the `combined` score when scorers ran, else position (earlier first); near-repeats of
    what is already kept are penalised (MMR, `redundancy`), and each further sentence of one
    template (the same words but a name or number) keeps only a share of its value (`templates`).
    When a chunk does not fit whole, its sentences that fit are kept (the most query-relevant ones
    when there is a query, else the leading ones), so the budget is used closely. Overlapping kept
    chunks are merged so no text repeats. `share` (or a `validate.ratio` retry) uses only part of the budget.
    """

    name = "compress.select"
    stage = "compress"
    requires = ("chunks",)
    provides = ("segments", BudgetShare)
    _gap_tokens = GAP_TOKENS  # GAP_MARK between kept spans that are not adjacent

    order: Literal["score", "position"] = param("score", doc="rank by the combined score or keep order")
    max_tokens: int | None = param(None, doc="tokens at most, below the budget")
    partial: bool = param(True, doc="keep the sentences that fit of a chunk that does not")
    redundancy: float = param(0.5, ge=0, le=1, doc="how much near-repeats of kept text are penalised")
    share: float = param(1.0, gt=0, le=1, doc="the share of the budget used")
    templates: float = param(0.7, ge=0, le=1, doc="the share of its value each further sentence of one "
                             "template keeps, compounded (1: no discount)")

    @hookimpl
    def compactor_compress(self, context: Context, run: Run) -> Context:
        limit = context.resolved_budget()
        if self.max_tokens is not None:
            limit = self.max_tokens if limit is None else min(limit, self.max_tokens)
        chunks = list(context.chunks)
        if limit is None:
            return context.evolve(segments=segments_for(
                context, [Kept(c, c.start, c.end) for c in chunks]))
        given = context.state.get(BudgetShare)
        share = float(given.share if given is not None else self.share)
        limit = max(1, int(limit * share))
        if self.order == "score" and any(has_score(c, "combined") for c in chunks):
            value = {c.id: score_value(c, "combined") for c in chunks}
            value = template_values(chunks, value, self.templates, enough=2 * limit)
            ranked = mmr_order(chunks, value, self.redundancy, enough=2 * limit)
        else:
            ranked = chunks
        query_terms = frozenset(index_terms(context.query)) if context.query else frozenset()
        markdown = run.settings.get("output", {}).get("format") == "markdown"
        headings = {s.id: run.counter.count(source_heading(s)) if markdown else 0
                    for s in context.sources}
        kept: list[Kept] = []
        used = 0
        for _ in range(2):  # the second pass fills what the estimates left over
            used = self._greedy(ranked, kept, used, limit, headings, query_terms, run)
            segments = segments_for(context, kept)
            shrinks = 0
            while kept and (used := self._rendered_tokens(context, segments, run, markdown)) > limit:
                last = kept.pop()  # estimates were off (joins): cut the least valuable span, or drop it
                if self.partial and shrinks < 3:
                    shrinks += 1
                    smaller = self._shrunk(last, used - limit, query_terms, run)
                    if smaller is not None:
                        kept.append(smaller)
                segments = segments_for(context, kept)
        run.note("kept_chunks", len({k.chunk.id for k in kept}))
        run.note("partial_chunks", sum(1 for k in kept if k.end - k.start < len(k.chunk.text)))
        run.note("dropped_chunks", len(chunks) - len({k.chunk.id for k in kept}))
        run.note("budget", limit)
        run.note("share", share)
        rank = {c.id: i for i, c in enumerate(ranked)}
        kept_ids = {k.chunk.id for k in kept}
        run.note("decisions", {c.id: (f"kept (rank {rank[c.id] + 1})" if c.id in kept_ids else
                                      f"dropped (rank {rank[c.id] + 1}, no room left)")
                               for c in chunks})
        return context.evolve(segments=segments, state=context.state.with_(
            given.evolve(share=share) if given is not None else BudgetShare(share)))

    def _greedy(self, ranked: list[Chunk], kept: list[Kept], used: int, limit: int,
                headings: dict[str, int], query_terms: frozenset[str], run: Run) -> int:
        """Add chunks (or the part of one that fits) in rank order while the estimate fits.

        A chunk that does not fit whole gives its best contiguous sentences, or, for a single long
        sentence, its best window of words (clauses in Chinese): the top-ranked sentence of a
        small budget is often longer than the budget. Only the first few chunks that do not fit are
        cut, so a long ranking costs no more than the chunks that can enter.
        """
        taken = {(k.chunk.source_id, k.chunk.index) for k in kept}
        seen_sources = {k.chunk.source_id for k in kept}
        said = {_said(k.chunk.text) for k in kept}  # a sentence repeated verbatim is kept once
        cuts_left = MAX_PARTIAL_TRIES
        for chunk in ranked:
            if used >= limit:
                break
            if (chunk.source_id, chunk.index) in taken or _said(chunk.text) in said:
                continue
            adjacent = {(chunk.source_id, chunk.index - 1), (chunk.source_id, chunk.index + 1)}
            overhead = 0 if not kept or adjacent & taken else self._gap_tokens
            if chunk.source_id not in seen_sources:
                overhead += headings[chunk.source_id]
            room = limit - used - overhead
            if room <= 0:
                continue
            item: Kept | None = None
            cost = chunk.tokens
            if chunk.tokens <= room:
                item = Kept(chunk, chunk.start, chunk.end)
            elif self.partial and cuts_left > 0 and room >= MIN_PARTIAL_TOKENS:
                cuts_left -= 1
                item, cost = self._best_sentences(chunk, room, query_terms, run)
                if item is None:
                    item, cost = best_window(chunk, room, query_terms, run, characters=not kept)
                elif room - cost >= MIN_PARTIAL_TOKENS and item.end < chunk.end:
                    item, cost = self._continued(item, room - cost, cost, run)
            if item is not None:
                kept.append(item)
                said.add(_said(chunk.text))
                taken.add((chunk.source_id, chunk.index))
                used += cost + overhead
                seen_sources.add(chunk.source_id)
        return used

    @staticmethod
    def _shrunk(item: Kept, over: int, query_terms: frozenset[str], run: Run) -> Kept | None:
        """The best window of a kept span that is `over` tokens (and a join) shorter."""
        chunk = item.chunk
        span = chunk.text[item.start - chunk.start:item.end - chunk.start]
        room = run.counter.count(span) - over - 1
        if room < MIN_PARTIAL_TOKENS:
            return None
        piece = replace(chunk, start=item.start, text=span)
        smaller, _ = best_window(piece, room, query_terms, run)
        return None if smaller is None else Kept(chunk, smaller.start, smaller.end)

    @staticmethod
    def _continued(item: Kept, room: int, cost: int, run: Run) -> tuple[Kept, int]:
        """A kept run of sentences extended by the leading words of the sentence after it, so
        the room left is used (without a query this makes an exact lead-N prefix)."""
        chunk = item.chunk
        offset = item.end - chunk.start
        rest = replace(chunk, start=item.end, text=chunk.text[offset:])
        more, extra = best_window(rest, room, frozenset(), run)
        if more is None or more.start != item.end + (len(rest.text) - len(rest.text.lstrip())):
            return item, cost
        return Kept(chunk, item.start, more.end), cost + extra

    @staticmethod
    def _best_sentences(chunk: Chunk, room: int, query_terms: frozenset[str],
                        run: Run) -> tuple[Kept | None, int]:
        """The chunk's sentences that fit `room`: a contiguous run, the leading one without a query,
        else the window holding the most query terms."""
        spans = safe_pieces(chunk.text, split_sentences(chunk.text))
        if len(spans) < 2:
            return None, 0
        counts = run.counter.count_many([chunk.text[s:e] for s, e in spans])
        best: tuple[float, int, int, int] | None = None  # gain, first, last + 1, tokens
        for first in range(len(spans)):
            total, last = 0, first
            while last < len(spans) and total + counts[last] <= room:
                total += counts[last]
                last += 1
            if last == first:
                if not query_terms:
                    break  # without a query only the lead counts: its words, not a later sentence
                continue
            if not query_terms:
                best = (0.0, first, last, total)
                break
            found = frozenset(index_terms(chunk.text[spans[first][0]:spans[last - 1][1]]))
            gain = len(found & query_terms) - 0.01 * first
            if best is None or gain > best[0]:
                best = (gain, first, last, total)
        if best is None:
            return None, 0
        _, first, last, total = best
        return Kept(chunk, chunk.start + spans[first][0], chunk.start + spans[last - 1][1]), total

    @staticmethod
    def _rendered_tokens(context: Context, segments: tuple[Segment, ...], run: Run,
                         markdown: bool) -> int:
        parts = []
        for segment in segments:
            head = source_heading(context.source(segment.source_id)) if (
                markdown and segment.source_id) else ""
            parts.append(head + segment.text)
        return run.counter.count(SECTION_JOIN.join(parts))


def _said(text: str) -> str:
    """What a chunk says, for spotting verbatim repeats: case and spacing aside."""
    return " ".join(text.lower().split())


def best_window(chunk: Chunk, room: int, query_terms: frozenset[str], run: Run,
                characters: bool = False) -> tuple[Kept | None, int]:
    """The run of words (clauses in Chinese) of a chunk that fits `room` tokens and holds the most
    query terms (the leading run without a query or a match). When no word or clause fits and
    `characters` is set (nothing else is kept yet), the chunk's leading characters."""
    text = chunk.text
    han = is_chinese(text, sample=200, letters_per_han=None)  # any Han: see is_chinese
    pieces = [(m.start(), m.end()) for m in (_PIECE_ZH if han else _PIECE_EN).finditer(text)]
    if not pieces:
        return None, 0
    counts = run.counter.count_many([text[a:b] for a, b in pieces])
    gains = [len(query_terms.intersection(index_terms(text[a:b]))) if query_terms else 0
             for a, b in pieces]
    best: tuple[int, int, int, int] | None = None  # gain, first, last + 1, tokens
    last, total, gain = 0, 0, 0
    for first in range(len(pieces)):
        if last < first:
            last, total, gain = first, 0, 0
        while last < len(pieces) and total + counts[last] <= room:
            total += counts[last]
            gain += gains[last]
            last += 1
        if last > first and (best is None or gain > best[0]):
            best = (gain, first, last, total)
        if last > first:
            total -= counts[first]
            gain -= gains[first]
    if best is None:  # no piece fits (a run without spaces or punctuation)
        return _leading_characters(chunk, room, run) if characters else (None, 0)
    _, first, last, total = best
    # start just before the first matching piece and spend the room after the matches: in a
    # statement the answer usually follows the words the question shares with it
    hit = next((i for i in range(first, last) if gains[i]), first)
    first = max(first, hit - WINDOW_LEAD)
    total = sum(counts[first:last])
    while last < len(pieces) and total + counts[last] <= room:
        total += counts[last]
        last += 1
    start, end = stripped(text, pieces[first][0], pieces[last - 1][1])
    exact = run.counter.count(text[start:end])  # pieces counted apart can merge differently
    while exact > room and last - 1 > first:
        last -= 1
        end = stripped(text, start, pieces[last - 1][1])[1]
        exact = run.counter.count(text[start:end])
    if exact > room:
        return None, 0
    return Kept(chunk, chunk.start + start, chunk.start + end), exact


def _leading_characters(chunk: Chunk, room: int, run: Run) -> tuple[Kept | None, int]:
    """The longest prefix of a chunk that fits `room` tokens, by bisection on its length."""
    text = chunk.text
    low, high = 0, min(len(text), room * 8)
    while low < high:
        middle = (low + high + 1) // 2
        if run.counter.count(text[:middle]) <= room:
            low = middle
        else:
            high = middle - 1
    end = low
    while end > 0 and text[end - 1].isspace():
        end -= 1
    if end <= 0 or text[:end].isspace():
        return None, 0
    return Kept(chunk, chunk.start, chunk.start + end), run.counter.count(text[:end])
