"""Facts by rules: query-relevant, information-bearing sentences, copied verbatim from their chunks.

A fact is a sentence (or a sentence run cut to a safe size) of one chunk, so its text is a substring
of the chunk's original text and its `chunk_ids` start with that chunk. Sentences score by the
idf-weighted share of the query's terms they hold, by what they carry (numbers, dates, names) and by
their chunk's score. Facts from different batches or sources that say the same thing are merged:
one text, the union of their chunk ids.

The search strategies rank sentences by `relevance` (`scored_sentences`): a value in [0, 1] from the
query coverage, the specificity of the query terms held, the chunk's scorer score and bridges
between pages; `keep_facts` keeps those above a threshold relative to the best and a floor, and
`fit_facts` fits a checklist to a token budget.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

import regex

from compactor.components import score_value
from compactor.document import Chunk, Fact, Source, content_hash
from compactor.formats.search_context import fact_line
from compactor.provenance import source_map
from compactor.text import terms as ts
from compactor.text.extracts import information, query_idf, relevance
from compactor.text.sentences import split_sentences
from compactor.text.tokens import TokenCounter

MIN_WORDS = 5
MIN_CJK = 8
MAX_FACT_TOKENS = 90
_CJK = regex.compile(r"\p{Han}")


@dataclass(frozen=True, slots=True)
class Candidate:
    """A sentence of a chunk with its score."""

    chunk: Chunk
    text: str
    score: float
    terms: frozenset[str]
    tokens: int
    relevance: float = 0.0
    start: int = -1  # offset of `text` in the source's working text (-1: unknown)

    @property
    def span(self) -> tuple[str, int, int] | None:
        """Where the fact's text is in its source's working text."""
        return None if self.start < 0 else (self.chunk.source_id, self.start, self.start + len(self.text))


def fact_id(text: str) -> str:
    """Stable id of a fact: the hash of its whitespace-normalised text."""
    return "f-" + content_hash(" ".join(text.split()), 12)


def _long_enough(text: str) -> bool:
    if len(_CJK.findall(text)) >= MIN_CJK:
        return True
    return len(text.split()) >= MIN_WORDS


def candidates(chunks: Sequence[Chunk], query: str | None, counter: TokenCounter) -> list[Candidate]:
    """Every usable sentence of the chunks, scored (best first)."""
    query_terms = set(ts.terms(query or ""))
    rows = _sentence_rows(chunks)
    if not rows:
        return []
    idf = query_idf((terms for _, _, terms, _ in rows), query_terms)
    costs = counter.count_many([text for _, text, _, _ in rows])
    out = []
    for (chunk, text, terms, at), cost in zip(rows, costs, strict=True):
        if cost > MAX_FACT_TOKENS:
            continue
        info = information(text)
        prior = score_value(chunk, "combined", score_value(chunk, "relevance", 0.5))
        if query_terms:
            share = relevance(terms, idf)
            if share <= 0:
                continue
            score = 0.6 * share + 0.2 * info + 0.2 * prior
        else:
            score = 0.5 * info + 0.5 * prior
        out.append(Candidate(chunk, text, round(score, 4), terms, cost, start=at))
    out.sort(key=lambda c: -c.score)
    return out


def _sentence_rows(chunks: Sequence[Chunk]) -> list[tuple[Chunk, str, frozenset[str], int]]:
    """Every usable sentence of the chunks: its chunk, text, terms and working-text offset. A page's
    heading line glued to its first sentence is left out of its text (the page's title is known apart,
    as the fact's source, and in a fact it only costs room) but not of its terms."""
    rows = []
    for chunk in chunks:
        for start, end in split_sentences(chunk.text):
            raw = chunk.text[start:end]
            text = whole = raw.strip()
            at = chunk.start + start + len(raw) - len(raw.lstrip())
            head, _, rest = text.partition("\n")
            if rest and page_title(None, text) == head.strip() and _long_enough(rest.strip()):
                at += len(text) - len(rest.lstrip())
                text = rest.strip()
            if text and _long_enough(text):  # scored on its words and its heading's, as read
                rows.append((chunk, text, frozenset(ts.terms(whole)), at))
    return rows


def same_fact(a: frozenset[str], b: frozenset[str], threshold: float = 0.6) -> bool:
    """Two term sets state the same thing: high Jaccard, or one almost inside the other."""
    if not a or not b:
        return False
    shared = len(a & b)
    return shared / len(a | b) >= threshold or shared / min(len(a), len(b)) >= 0.85


def _merged_into(kept: list[tuple[Candidate, Fact]], cand: Candidate) -> bool:
    """Whether a kept fact already says what `cand` says; if so it gains `cand`'s chunk id."""
    duplicate = next((i for i, (other, _) in enumerate(kept) if same_fact(cand.terms, other.terms)), None)
    if duplicate is None:
        return False
    other, fact = kept[duplicate]
    if cand.chunk.id not in fact.chunk_ids:
        kept[duplicate] = (other, replace(fact, chunk_ids=(*fact.chunk_ids, cand.chunk.id)))
    return True


def rule_facts(chunks: Sequence[Chunk], query: str | None, counter: TokenCounter,
               urls: dict[str, str | None], *, max_facts: int, min_score: float) -> list[Fact]:
    """The best `max_facts` distinct facts of a batch."""
    kept: list[tuple[Candidate, Fact]] = []
    for cand in candidates(chunks, query, counter):
        if len(kept) >= max_facts or cand.score < min_score:
            break
        if _merged_into(kept, cand):
            continue
        kept.append((cand, Fact(id=fact_id(cand.text), text=cand.text, chunk_ids=(cand.chunk.id,),
                                source_url=urls.get(cand.chunk.source_id), score=cand.score,
                                span=cand.span)))
    return [fact for _, fact in kept]


def merge_facts(existing: Iterable[Fact], new: Iterable[Fact]) -> tuple[list[Fact], int]:
    """Existing facts plus the new ones; a new fact saying what a kept one says adds its chunk ids to
    it (the better-scored text stays). Returns the facts and how many new ones were merged."""
    facts = list(existing)
    terms = [frozenset(ts.terms(f.text)) for f in facts]
    merged = 0
    for fact in new:
        mine = frozenset(ts.terms(fact.text))
        match = next((i for i, t in enumerate(terms) if same_fact(mine, t)), None)
        if match is None:
            facts.append(fact)
            terms.append(mine)
            continue
        merged += 1
        old = facts[match]
        ids = tuple(dict.fromkeys((*old.chunk_ids, *fact.chunk_ids)))
        if fact.score > old.score:
            facts[match] = replace(fact, id=old.id, chunk_ids=ids)
        else:
            facts[match] = replace(old, chunk_ids=ids)
    return facts, merged


def parse_llm_facts(reply: str, chunks: dict[str, Chunk], urls: dict[str, str | None]) -> tuple[
        list[tuple[Fact, str]], list[str]]:
    """Facts from an LLM reply (a JSON list of {"fact", "chunk_ids"}), each with the text of the chunks
    it cites (what it must be faithful to); plus the problems found."""
    text = reply.strip()
    if text.startswith("```"):
        text = text.strip("`")
        text = text[text.find("\n") + 1:] if "\n" in text else text
    start, end = text.find("["), text.rfind("]")
    try:
        items = json.loads(text[start:end + 1]) if start >= 0 and end > start else None
    except json.JSONDecodeError as exc:
        return [], [f"reply is not a JSON list: {exc.msg}"]
    if not isinstance(items, list):
        return [], ["reply is not a JSON list of facts"]
    out: list[tuple[Fact, str]] = []
    problems: list[str] = []
    for i, item in enumerate(items):
        if not isinstance(item, dict) or not isinstance(item.get("fact"), str):
            problems.append(f"item {i}: not an object with a 'fact' string")
            continue
        ids = [c for c in item.get("chunk_ids") or [] if isinstance(c, str)]
        unknown = [c for c in ids if c not in chunks]
        if not ids or unknown:
            problems.append(f"item {i}: cites no chunk of this batch ({', '.join(unknown) or 'none'})")
            continue
        statement = item["fact"].strip()
        source = "\n".join(chunks[c].text for c in ids)
        out.append((Fact(id=fact_id(statement), text=statement, chunk_ids=tuple(ids),
                         source_url=urls.get(chunks[ids[0]].source_id), score=0.5), source))
    return out, problems


# -- relevance for the search strategies ----------------------------------------------------------------

COVERAGE_WEIGHT = 0.4
SPECIFICITY_WEIGHT = 0.4
PRIOR_WEIGHT = 0.2
BRIDGE_FROM = 0.5  # sentences at least this share of the best relevance name bridge pages
BRIDGE_SHARE = 0.8  # a bridged page's sentences inherit this share of the naming sentence's relevance
_TITLE_TAIL = regex.compile(r"\s*(?:\([^()]*\)|\s[-|–—·]\s.*)$")
_HEADING_END = regex.compile(r"[.!?。！？:：;；]$")


def page_title(title: str | None, text: str) -> str:
    """A page's title: its own, else its first line when that reads as a heading (short, unpunctuated)."""
    if title and title.strip():
        return title.strip()
    first = text.lstrip().split("\n", 1)[0].strip()
    if not first or len(first) > 120 or len(first.split()) > 12 or _HEADING_END.search(first):
        return ""
    return first


def _name(title: str) -> str:
    """The name a page's title gives: without a "(disambiguation)" or " - Site name" tail."""
    name = _TITLE_TAIL.sub("", title).strip().lower()
    return name if len(name) >= 4 or _CJK.search(name) else ""


def _names(name: str, text: str) -> bool:
    """Does `text` (lower case) name `name` as words (as a substring for Chinese)?"""
    if _CJK.search(name):
        return name in text
    at = text.find(name)
    while at >= 0:
        before = text[at - 1] if at else " "
        after = text[at + len(name)] if at + len(name) < len(text) else " "
        if not (before.isalnum() or after.isalnum()):
            return True
        at = text.find(name, at + 1)
    return False


def _prior(chunks: Sequence[Chunk]) -> dict[str, float]:
    """Each chunk's scorer relevance, min-max normalised over the batch (0.5 for all when flat)."""
    raw = {c.id: float(c.scores.get("score.relevance", c.scores.get("combined", 0.0))) for c in chunks}
    low, high = min(raw.values(), default=0.0), max(raw.values(), default=0.0)
    if high - low <= 1e-9:
        return {i: 0.5 for i in raw}
    return {i: (v - low) / (high - low) for i, v in raw.items()}


def scored_sentences(chunks: Sequence[Chunk], query: str | None, counter: TokenCounter, *,
                     titles: Mapping[str, str] | None = None,
                     anchors: Sequence[tuple[str, float]] = (),
                     max_tokens: int | None = MAX_FACT_TOKENS) -> list[Candidate]:
    """Every usable sentence of the chunks with its query relevance in [0, 1], best first.

    Relevance averages three views so no single one decides: how much of the query the sentence
    covers (idf-weighted, its page title counted with it, since a sentence inherits its passage's
    subject); how specific the most specific query term it holds is (the second passage of a
    multi-hop question often matches one rare name and little else); and its chunk's scorer score
    (`score.relevance`), min-max normalised over the batch. A sentence holding no query term scores 0,
    unless its page is a bridge: a page whose title is named by a strongly relevant sentence of
    another page (or by an `anchors` text, e.g. an earlier batch's fact) inherits part of that
    sentence's relevance. `titles` maps source ids to page titles. Without a query, relevance is the
    chunk score. Ties keep page order (a bridged page's lead sentence first). Sentences over
    `max_tokens` are left out (too long for a fact).
    """
    titles = titles or {}
    query_terms = set(ts.terms(query or ""))
    rows = _sentence_rows(chunks)
    if not rows:
        return []
    prior = _prior(chunks)
    title_terms = {sid: frozenset(ts.terms(t)) for sid, t in titles.items()}
    idf = query_idf((terms | title_terms.get(chunk.source_id, frozenset()) for chunk, _, terms, _ in rows),
                    query_terms) if query_terms else {}
    total = sum(idf.values()) or 1.0
    top = max(idf.values(), default=0.0) or 1.0
    values: list[float] = []
    for chunk, _, terms, _ in rows:
        if not query_terms:
            values.append(prior[chunk.id])
            continue
        held = (terms | title_terms.get(chunk.source_id, frozenset())) & query_terms
        if not held:
            values.append(0.0)
            continue
        coverage = sum(idf[t] for t in held) / total
        specificity = max(idf[t] for t in held) / top
        values.append(COVERAGE_WEIGHT * coverage + SPECIFICITY_WEIGHT * specificity
                      + PRIOR_WEIGHT * prior[chunk.id])
    if query_terms and titles:
        values = _bridge(rows, values, titles, anchors)
    live = [(row, value) for row, value in zip(rows, values, strict=True) if value > 0]
    costs = counter.count_many([text for (_, text, _, _), _ in live])
    out = [Candidate(chunk, text, round(value, 4), terms, cost, round(value, 4), at)
           for ((chunk, text, terms, at), value), cost in zip(live, costs, strict=True)
           if max_tokens is None or cost <= max_tokens]
    out.sort(key=lambda c: -c.score)  # stable: ties keep page order, earlier sentences first
    return out


def _bridge(rows: Sequence[tuple[Chunk, str, frozenset[str], int]], values: list[float],
            titles: Mapping[str, str], anchors: Sequence[tuple[str, float]]) -> list[float]:
    """Sentences of pages named by strongly relevant text elsewhere inherit part of its relevance."""
    best = max(values, default=0.0)
    strong = [(chunk.source_id, text.lower(), value)
              for (chunk, text, _, _), value in zip(rows, values, strict=True)
              if best > 0 and value >= BRIDGE_FROM * best]
    strong += [("", text.lower(), value) for text, value in anchors if value > 0]
    inherited: dict[str, float] = {}
    for sid, title in titles.items():
        name = _name(title)
        if not name:
            continue
        for source, text, value in strong:
            if source != sid and BRIDGE_SHARE * value > inherited.get(sid, 0.0) and _names(name, text):
                inherited[sid] = BRIDGE_SHARE * value
    if not inherited:
        return values
    return [max(v, inherited.get(chunk.source_id, 0.0))
            for (chunk, _, _, _), v in zip(rows, values, strict=True)]


def keep_facts(cands: Sequence[Candidate], urls: Mapping[str, str | None], *, threshold: float,
               floor: float, max_tokens: int | None = None, max_facts: int | None = None) -> list[Fact]:
    """Distinct facts from ranked candidates: kept while their relevance is at least `threshold` times
    the best candidate's and at least `floor`, within `max_tokens` of fact text and `max_facts`. A
    candidate saying what a kept fact says adds its chunk id to that fact instead."""
    best = max((c.relevance for c in cands), default=0.0)
    bar = max(floor, threshold * best)
    kept: list[tuple[Candidate, Fact]] = []
    used = 0
    for cand in cands:
        if cand.relevance < bar:
            continue
        if _merged_into(kept, cand):
            continue
        if max_facts is not None and len(kept) >= max_facts:
            break
        if max_tokens is not None and used + cand.tokens > max_tokens:
            continue
        kept.append((cand, Fact(id=fact_id(cand.text), text=cand.text, chunk_ids=(cand.chunk.id,),
                                source_url=urls.get(cand.chunk.source_id), score=cand.score,
                                span=cand.span)))
        used += cand.tokens
    return [fact for _, fact in kept]


def with_input_spans(facts: Sequence[Fact], sources: Sequence[Source]) -> list[Fact]:
    """Facts whose `span` (working-text offsets from the rules) becomes offsets into the caller's
    input, what a session stores and shows; a fact whose source's offsets do not index the input
    (an HTML page's extracted text) keeps no span."""
    maps = {s.id: source_map(s) for s in sources}
    out = []
    for fact in facts:
        span = None
        if fact.span is not None and (offsets := maps.get(fact.span[0])) is not None:
            start, end = offsets.span(fact.span[1], fact.span[2])
            if offsets.base_kind == "input":
                span = (fact.span[0], start, end)
        out.append(replace(fact, span=span))
    return out


def fit_facts(facts: Sequence[Fact], budget: int | None, counter: TokenCounter) -> list[Fact]:
    """The best-scored facts whose lines, joined by newlines, fit `budget` tokens (best first)."""
    ranked = sorted(facts, key=lambda f: -f.score)
    if budget is None:
        return ranked
    costs = counter.count_many([fact_line(f) for f in ranked])
    shown: list[Fact] = []
    used = 0
    for fact, cost in zip(ranked, costs, strict=True):
        step = cost + (1 if shown else 0)  # + the newline that joins it
        if used + step <= budget:
            shown.append(fact)
            used += step
    while shown and counter.count("\n".join(fact_line(f) for f in shown)) > budget:
        shown.pop()
    return shown
