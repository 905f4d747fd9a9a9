"""A system prompt too large for the budget, shortened to what the conversation asks about.

`compact_messages(..., compress_system=True)` (and `--compress-system`) keep the system message(s)
first but, when they would take more than `SYSTEM_SHARE` of the budget, replace each oversized one
with an excerpt chosen by the qa engine (the `qa` pipeline's chunking and scoring, run by the
component that asks, which hands it in as `rank`) against the conversation's opening request(s).
The excerpt is whole sentences of the original, in their order, traceable by offset
(`ConversationPlan.system_spans`); a marker line cites the id of the original text (a source of its own,
whose id is its hash), which `compact_messages` and the CLI store with the summarised messages, so
`expand` gives the full text back.

Stable across repeated compactions, so a provider's prompt cache survives: the query is the
history's first user request(s), which later turns never change, and a system message already
within its share is left as it is (a compacted history compacted again keeps it byte for byte).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import regex

from compactor.document import Chunk, Context, Message, Source, chunk_id
from compactor.errors import BudgetError
from compactor.formats.compaction import SUMMARY_MARK
from compactor.formats.messages import TOKENS_PER_REPLY, answers, message_tokens
from compactor.state import ConversationPlan
from compactor.text.language import is_chinese
from compactor.text.spans import GAP_MARK, GAP_TOKENS
from compactor.text.tokens import TokenCounter

#: The part of the budget the system message(s) may take before they are shortened: the rest keeps
#: room for the summary and the latest turns.
SYSTEM_SHARE = 0.5
#: Between excerpts that are not adjacent in the original (the gap mark compress.select writes).
GAP = GAP_MARK
#: The opening requests that make the query: user messages up to the first reply, and more (up to
#: this many) while they hold fewer than MIN_QUERY_WORDS words ("Hi!" says nothing of the task).
MAX_QUERY_MESSAGES = 3
MIN_QUERY_WORDS = 8
MAX_QUERY_CHARS = 4000
#: How much a heading's match with the query lifts the sentences of its section.
SECTION_WEIGHT = 1.0
_HEADING = regex.compile(r"#{1,6}\s")
_MARK_EN = "{mark} System prompt shortened to the parts about this conversation's requests; full text: "
_MARK_ZH = "{mark} 系统提示已按本对话的请求节选；全文："
_EXPAND = "expand_context(ids=[{ids}])"
_MARKED = regex.compile(r"^" + regex.escape(SUMMARY_MARK) + r" (?:System prompt shortened|系统提示已按)"
                        + r"[^\n]*expand_context\(ids=\[([^\]]*)\]\)[^\n]*\n?")
_WORD = regex.compile(r"\p{Han}|[\p{L}\p{N}]+")

#: Ranks the sentences of a system text for a query within a token allowance: `rank(text, query,
#: allowance)` is the run's context (one source, chunks with their `combined` and `score.relevance`
#: scores), as the shipped `system-prompt` pipeline gives it.
Rank = Callable[[str, "str | None", int], Context]


def leading_system(messages: Sequence[Message]) -> list[int]:
    """Indices of the system (or developer) messages that open the history."""
    out = []
    for i, message in enumerate(messages):
        if message.role not in ("system", "developer"):
            break
        out.append(i)
    return out


def stable_query(messages: Sequence[Message]) -> str | None:
    """The history's opening request(s): the user messages before the first reply (more while they
    are short), skipping earlier summaries and tool results. Once the history holds them, appending
    turns never changes it."""
    parts: list[str] = []
    words = 0
    for message in messages:
        if message.role in ("system", "developer"):
            continue
        if message.role != "user" or answers(message) is not None:
            if parts and words >= MIN_QUERY_WORDS:
                break
            continue
        if message.content.startswith(SUMMARY_MARK) or not message.content.strip():
            continue
        parts.append(message.content.strip())
        words += len(_WORD.findall(message.content))
        if len(parts) >= MAX_QUERY_MESSAGES:
            break
    query = "\n".join(parts)[:MAX_QUERY_CHARS]
    return query or None


def shorten_system(messages: Sequence[Message], costs: Sequence[int], budget: int,
                   counter: TokenCounter, *, rank: Rank, enabled: bool = True,
                   share: float = SYSTEM_SHARE) -> tuple[list[Message], list[int], dict[str, Any]]:
    """The messages and costs with the oversized system message(s) replaced by excerpts, and the
    plan data that says so (`system`: index -> new text; `system_spans`: the kept `(start, end)`
    of each original; `system_tokens`: index -> [before, after]; `system_ids`: the chunk ids the
    markers cite). Unchanged (and no work done) when disabled, when the history fits, or when the
    system messages take at most `share` of the budget. `rank` chooses the sentences (the caller
    runs its ranking engine: formats does not run pipelines)."""
    messages, costs = list(messages), list(costs)
    system = leading_system(messages)
    total = TOKENS_PER_REPLY + sum(costs)
    allowance = int(budget * share)
    if not enabled or not system or total <= budget or sum(costs[i] for i in system) <= allowance:
        return messages, costs, {}
    summaries = [i for i in system if _is_summary(messages[i].content)]  # `summary_role="system"`
    targets = _water_fill({i: costs[i] for i in system if i not in summaries},
                          allowance - sum(costs[i] for i in summaries))
    query = stable_query(messages)
    info: dict[str, Any] = {"system": {}, "system_spans": {}, "system_tokens": {}, "system_ids": [],
                            "system_query": query}
    for i, target in targets.items():
        if costs[i] <= target:
            continue
        message = messages[i]
        original, cited = _unmarked(message.content)
        cited = cited or [chunk_id(Source.from_text(message.content).id, 0)]  # = system_record's
        ids = ", ".join(f'"{c}"' for c in cited)
        marker = (_MARK_ZH if is_chinese(original) else _MARK_EN).format(mark=SUMMARY_MARK) + _EXPAND.format(
            ids=ids)
        overhead = message_tokens(dataclasses.replace(message, content="", tool_calls=(), raw={}), counter)
        room = target - overhead - counter.count(marker + "\n")
        try:
            body, spans = excerpt(original, query, room, counter, rank) if room > 0 else ("", [])
        except BudgetError:  # not even one sentence fits: the marker alone, the original by id
            body, spans = "", []
        text = f"{marker}\n{body}" if body else marker
        raw = {**message.raw, "content": text} if message.raw else {}
        messages[i] = dataclasses.replace(message, content=text, raw=raw)
        before, costs[i] = costs[i], message_tokens(messages[i], counter)
        info["system"][i] = text
        info["system_spans"][i] = [list(s) for s in spans]
        info["system_tokens"][i] = [before, costs[i]]
        info["system_ids"].extend(cited)
    return (messages, costs, info) if info["system"] else (messages, costs, {})


def system_record(text: str, counter: TokenCounter) -> tuple[Source, Chunk]:
    """The original system text as a source of its own with one chunk, stored for `expand`: its id
    depends on that text alone, so every compaction of the history cites the same one (a marker
    that changed with the history would break the prompt cache it is there to keep)."""
    source = Source.from_text(text, title="system prompt")
    return source, Chunk(id=chunk_id(source.id, 0), source_id=source.id, index=0, start=0, end=len(text),
                         text=text, tokens=counter.count(text))


def system_records(messages: Sequence[Message], plan: ConversationPlan, counter: TokenCounter
                   ) -> list[tuple[Source, Chunk]]:
    """What to store for the system messages a plan shortened (`plan.system`): their originals
    (one already shortened by an earlier compaction cites what that one stored)."""
    out = []
    for i in sorted(plan.system):
        if i < len(messages) and _MARKED.match(messages[i].content) is None:
            out.append(system_record(messages[i].content, counter))
    return out


def excerpt(text: str, query: str | None, allowance: int, counter: TokenCounter, rank: Rank,
            ) -> tuple[str, list[tuple[int, int]]]:
    """Whole sentences of `text` ranked by `rank` (the qa engine) for `query`, in their order, within
    `allowance` tokens: the excerpt (non-adjacent runs joined by GAP) and the kept `(start, end)`.

    A sentence also counts by its section: under a heading that matches the query ("## Book
    flight" for "I want to book a flight") its rules belong to the request even when they share no
    word with it, and a kept sentence brings its heading along when that fits."""
    if allowance <= 0 or not text.strip():
        return "", []
    from compactor.provenance import source_map

    context = rank(text, query, allowance)
    source = context.sources[0]
    offsets = source_map(source)
    pieces: list[_Piece] = []
    heading: _Piece | None = None
    for chunk in sorted(context.chunks, key=lambda c: c.start):
        ranges = offsets.ranges(chunk.start, chunk.end)
        own = source.text[chunk.start:chunk.end]
        if not ranges or not own.strip():
            continue
        piece = _Piece(len(pieces), ranges[0][0], ranges[-1][1], chunk.tokens + GAP_TOKENS,
                       float(chunk.scores.get("combined", 0.0)))
        if _HEADING.match(own.lstrip()):
            piece.title, piece.relevance = True, float(chunk.scores.get("score.relevance", 0.0))
            heading = piece
        elif heading is not None:
            piece.heading = heading
            piece.value += SECTION_WEIGHT * heading.relevance
        pieces.append(piece)
    ranked = sorted((p for p in pieces if not p.title), key=lambda p: (-p.value, p.index))
    kept: set[int] = set()
    used = 0
    for piece in ranked:  # a heading comes only with a sentence of its section, when both fit
        title = piece.heading if piece.heading is not None and piece.heading.index not in kept else None
        if title is not None and used + piece.cost + title.cost <= allowance:
            kept.update((piece.index, title.index))
            used += piece.cost + title.cost
        elif used + piece.cost <= allowance:
            kept.add(piece.index)
            used += piece.cost
    place = {p.index: r for r, p in enumerate(ranked)}
    while True:  # the estimate counted each piece alone: check the joined text, drop the weakest
        spans = _merged([(pieces[j].start, pieces[j].end) for j in kept])
        body = render(text, spans)
        if not kept or counter.count(body) <= allowance:
            return body, spans
        kept.discard(max((j for j in kept if j in place), key=place.__getitem__, default=-1))
        titled = {heading.index for j in kept if (heading := pieces[j].heading) is not None}
        kept = {j for j in kept if not pieces[j].title or j in titled}


@dataclasses.dataclass(slots=True)
class _Piece:
    """A sentence of the system text: where it is in the input, its cost with a join, its value."""

    index: int
    start: int
    end: int
    cost: int
    value: float
    heading: _Piece | None = None
    title: bool = False
    relevance: float = 0.0


def render(text: str, spans: Sequence[tuple[int, int]]) -> str:
    """The kept stretches of `text`: what lies between adjacent ones (blank space) as it is, GAP
    between the others."""
    out: list[str] = []
    last: int | None = None
    for start, end in spans:
        if last is not None:
            between = text[last:start]
            out.append(between if not between.strip() else GAP)
        out.append(text[start:end])
        last = end
    return "".join(out).strip()


def _merged(rows: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for start, end in sorted(rows):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    return merged


def _water_fill(costs: dict[int, int], allowance: int) -> dict[int, int]:
    """Each message's share of `allowance`: small ones keep what they cost, the rest split the
    remainder evenly."""
    targets: dict[int, int] = {}
    left = dict(costs)
    room = allowance
    while left:
        fair = room // len(left)
        small = {i: c for i, c in left.items() if c <= fair}
        if not small:
            targets.update({i: fair for i in left})
            break
        for i, c in small.items():
            targets[i] = c
            room -= c
            del left[i]
    return targets


def _unmarked(content: str) -> tuple[str, list[str]]:
    """A system message without the marker of an earlier shortening, and the ids that marker cites
    (the full original stays the one to expand)."""
    match = _MARKED.match(content)
    if match is None:
        return content, []
    return content[match.end():], regex.findall(r'"([^"]+)"', match.group(1))


def _is_summary(content: str) -> bool:
    """A summary compactor wrote (not a shortened system prompt, which also carries the mark)."""
    return content.startswith(SUMMARY_MARK) and _MARKED.match(content) is None


__all__ = ["GAP", "SYSTEM_SHARE", "Rank", "excerpt", "leading_system", "render", "shorten_system",
           "stable_query", "system_record", "system_records"]
