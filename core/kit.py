"""The kit: what several built-in components share, public for third-party plugins.

A plugin module imports the framework (`compactor.components`, `compactor.document`, `compactor.run`,
`compactor.hookspecs`, ...) and this kit, never another component's module: what two components need
alike lives here, with one definition, so a fix reaches every component that uses it.

Gap mark
    `GAP_MARK`, `GAP_TOKENS`: the text put where content was dropped between two kept stretches of a
    source, and its tokens.
Quarantine (text `classify.injection` flagged)
    `usable(context, run)`: the chunks a compressor may use, flagged ones replaced by their clean parts
    (`clean_parts`), and the context to go on with; `usable_chunks`, `is_quarantined`,
    `split_quarantined` and `quarantine_report` (what a step report lists).
Kept spans
    `Kept` (a kept span of a chunk) and `segments_for(context, kept)`: one segment per source, spans in
    order, overlaps merged, gaps marked, flagged sentences cut out; `stripped` trims a span;
    `source_heading` is the heading `render.markdown` gives a source (to budget for it).
Facts (verbatim sentences with their chunk ids)
    `rule_facts` (the best distinct facts of a batch), `candidates` and `scored_sentences` (sentences
    scored for a query), `keep_facts`, `merge_facts`, `same_fact`, `fact_id`, `parse_llm_facts` (facts
    from a model's JSON reply), `with_input_spans` (spans into the caller's input), `fit_facts`
    (a checklist within a budget), `page_title`, `Candidate`.
Loss
    `loss_report(context)`: what the kept text holds of the input's query terms, keywords, technical
    terms, numbers and dates, names and structure, weighted by chunk value, with a level (`LEVELS`).
Footnotes
    `render_footnotes` (facts as footnoted Markdown sections and one references list), `reference_of`,
    `source_titles`, `REFERENCES` (the list's heading per language).
BM25 (the one engine, `compactor.text.relevance`)
    `Bm25` (Okapi BM25 over an inverted index), `bm25_scores` (scores and idf of term lists),
    `index_terms` (stemmed English words, Chinese bigrams), `query_weights`.
Prompt filling (`compactor.llm.templates`)
    `template_for(prompt, name, lang)` (a user's prompt file or the shipped one), `fill(template, ...)`
    (the `{query}`, `{budget}`, `{content}` placeholders in one pass), `shipped_prompt`.
"""

from __future__ import annotations

import heapq
import json
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, replace
from itertools import chain, count
from operator import attrgetter
from typing import Any

import regex

from compactor.components import score_key, score_value
from compactor.document import Chunk, Context, Fact, Segment, Source, content_hash, frozen_mapping
from compactor.formats.search_context import fact_line
from compactor.llm.templates import fill, shipped_prompt, template_for
from compactor.provenance import source_map
from compactor.run import Run
from compactor.text import terms as ts
from compactor.text.extracts import information, query_idf, relevance
from compactor.text.relevance import Bm25, bm25_scores, index_terms, query_weights
from compactor.text.sentences import split_sentences
from compactor.text.spans import GAP_MARK, GAP_TOKENS
from compactor.text.tokens import TokenCounter

# -- quarantine -----------------------------------------------------------------------------------------


def is_quarantined(chunk: Chunk) -> bool:
    """True when `classify.injection` flagged the chunk."""
    return bool(chunk.labels.get("injection"))


def split_quarantined(chunks: Iterable[Chunk]) -> tuple[list[Chunk], list[Chunk]]:
    """(clean chunks, flagged chunks), both in their original order."""
    clean: list[Chunk] = []
    flagged: list[Chunk] = []
    for chunk in chunks:
        (flagged if is_quarantined(chunk) else clean).append(chunk)
    return clean, flagged


def clean_parts(chunk: Chunk, run: Run) -> list[Chunk]:
    """The parts of a flagged chunk outside its injected spans, as chunks of their own (id
    `<chunk id>.<n>`, text `source.text[start:end]`, the chunk's scores, labelled `part_of`). No
    parts for a chunk flagged without spans: it is quarantined whole."""
    finding = chunk.labels.get("injection")
    spans = finding.get("spans") if finding is not None and hasattr(finding, "get") else None
    if not spans:
        return []
    pieces: list[tuple[int, int]] = []
    at = chunk.start
    for a, b in sorted((int(a), int(b)) for a, b in spans):
        if a > at:
            pieces.append((at, min(a, chunk.end)))
        at = max(at, b)
    if at < chunk.end:
        pieces.append((at, chunk.end))
    kept = []
    for a, b in pieces:
        text = chunk.text[a - chunk.start:b - chunk.start]
        lead, trail = len(text) - len(text.lstrip()), len(text) - len(text.rstrip())
        if regex.search(r"\w", text):
            kept.append((a + lead, b - trail))
    texts = [chunk.text[a - chunk.start:b - chunk.start] for a, b in kept]
    labels = frozen_mapping({**{k: v for k, v in chunk.labels.items() if k != "injection"},
                             "part_of": chunk.id})
    return [Chunk(id=f"{chunk.id}.{n}", source_id=chunk.source_id, index=chunk.index, start=a, end=b,
                  text=text, tokens=tokens, lang=chunk.lang, labels=labels, scores=chunk.scores,
                  features=chunk.features)
            for n, ((a, b), text, tokens) in enumerate(
                zip(kept, texts, run.counter.count_many(texts), strict=True), start=1)]


def quarantine_report(flagged: Sequence[Chunk], context: Context,
                      parts: dict[str, list[str]] | None = None) -> list[dict[str, Any]]:
    """What was kept out, for step reports: chunk id, source URL, the matched text, the removed
    `spans`, and the ids of the clean `parts` that stand in for the chunk."""
    urls = {s.id: s.uri for s in context.sources}
    return [{"chunk_id": c.id, "url": urls.get(c.source_id), **dict(c.labels["injection"]),
             "parts": list((parts or {}).get(c.id, ()))} for c in flagged]


def usable(context: Context, run: Run, quarantine: bool = True) -> tuple[Context, list[Chunk]]:
    """The chunks a compressor may use, and the context to go on with.

    With `quarantine`, each flagged chunk is replaced by its clean parts (`clean_parts`), which the
    returned context also holds, right after the flagged chunk, so facts and kept ids that cite them
    resolve (and are stored) like any chunk; the flagged chunks are listed in the step report.
    Calling it again on its own result gives the same chunks."""
    if not quarantine:
        return context, list(context.chunks)
    have = {c.id for c in context.chunks}
    chunks: list[Chunk] = []
    every: list[Chunk] = []
    flagged: list[Chunk] = []
    parts_of: dict[str, list[str]] = {}
    for chunk in context.chunks:
        if "part_of" in chunk.labels and chunk.labels["part_of"] in have:
            continue  # made by an earlier call: made again below, from the flagged chunk
        every.append(chunk)
        if not is_quarantined(chunk):
            chunks.append(chunk)
            continue
        flagged.append(chunk)
        parts = clean_parts(chunk, run)
        parts_of[chunk.id] = [p.id for p in parts]
        chunks.extend(parts)
        every.extend(parts)
    run.note("quarantined", quarantine_report(flagged, context, parts_of))
    if flagged:
        context = context.evolve(chunks=tuple(every))
    return context, chunks


def usable_chunks(context: Context, run: Run, quarantine: bool = True) -> list[Chunk]:
    """The chunks `usable` gives (flagged ones replaced by their clean parts). A caller that keeps
    ids of these chunks must go on with `usable`'s context, which holds the parts."""
    return usable(context, run, quarantine)[1]


# -- kept spans -----------------------------------------------------------------------------------------


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


def segments_for(context: Context, kept: list[Kept], *, quarantine: bool = True) -> tuple[Segment, ...]:
    """One segment per source: its kept spans in order, overlapping spans merged, gaps marked.

    With `quarantine`, the sentences `classify.injection` flagged (the `spans` of a chunk's
    `injection` label) are cut out of every kept span of their source, leaving a gap mark, and a
    flagged chunk without spans is left out whole: the facts around an injection stay, it goes.
    """
    by_source: dict[str, list[Kept]] = {}
    for item in kept:
        by_source.setdefault(item.chunk.source_id, []).append(item)
    segments = []
    for source in context.sources:
        items = sorted(by_source.get(source.id, ()), key=lambda k: (k.start, k.end))
        cut: list[tuple[int, int]] = []
        if quarantine:
            items, cut = _quarantined(items)
        if not items:
            continue
        runs: list[list[int]] = []
        ids: dict[str, None] = {}
        for item in items:
            if runs and item.start <= runs[-1][1]:
                runs[-1][1] = max(runs[-1][1], item.end)
            else:
                runs.append([item.start, item.end])
            ids[item.chunk.id] = None
        if cut:
            pieces = (stripped(source.text, a, b) for s, e in runs for a, b in _without((s, e), cut))
            spans = [(a, b) for a, b in pieces if b > a]
            if not spans:
                continue
        else:
            spans = [stripped(source.text, s, e) for s, e in runs]
        text = GAP_MARK.join(source.text[s:e] for s, e in spans)
        segments.append(Segment(id=f"{source.id}-kept", text=text, chunk_ids=tuple(ids),
                                title=source.title or source.uri, source_id=source.id,
                                spans=tuple((source.id, s, e) for s, e in spans if e > s)))
    return tuple(segments)


def _quarantined(items: list[Kept]) -> tuple[list[Kept], list[tuple[int, int]]]:
    """The kept items minus chunks flagged as a whole, and the flagged spans of their source."""
    cut: list[tuple[int, int]] = []
    out = []
    for item in items:
        finding = item.chunk.labels.get("injection")
        if not finding:
            out.append(item)
            continue
        spans = finding.get("spans") if isinstance(finding, Mapping) else None
        if spans:
            cut.extend((int(a), int(b)) for a, b in spans)
            out.append(item)
    return out, sorted(cut)


def _without(span: tuple[int, int], cut: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """`span` with the (sorted) `cut` ranges taken out."""
    start, end = span
    pieces = []
    for a, b in cut:
        if b <= start or a >= end:
            continue
        if a > start:
            pieces.append((start, a))
        start = max(start, b)
    if start < end:
        pieces.append((start, end))
    return pieces


def stripped(text: str, start: int, end: int) -> tuple[int, int]:
    """`[start, end)` without the whitespace at its edges (what `text[start:end].strip()` keeps)."""
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return start, end


# -- facts ----------------------------------------------------------------------------------------------
# A fact is a sentence (or a sentence run cut to a safe size) of one chunk, so its text is a substring of
# the chunk's original text and its `chunk_ids` start with that chunk. Sentences score by the idf-weighted
# share of the query's terms they hold, by what they carry (numbers, dates, names) and by their chunk's
# score. Facts from different batches or sources that say the same thing are merged: one text, the union
# of their chunk ids. The search strategies rank sentences by `relevance` (`scored_sentences`): a value in
# [0, 1] from the query coverage, the specificity of the query terms held, the chunk's scorer score and
# bridges between pages; `keep_facts` keeps those above a threshold relative to the best and a floor, and
# `fit_facts` fits a checklist to a token budget.

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


# relevance for the search strategies

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
               floor: float, max_facts: int | None = None) -> list[Fact]:
    """Distinct facts from ranked candidates: kept while their relevance is at least `threshold` times
    the best candidate's and at least `floor`, at most `max_facts`. A candidate saying what a kept
    fact says adds its chunk id to that fact instead."""
    best = max((c.relevance for c in cands), default=0.0)
    bar = max(floor, threshold * best)
    kept: list[tuple[Candidate, Fact]] = []
    for cand in cands:
        if cand.relevance < bar:
            continue
        if _merged_into(kept, cand):
            continue
        if max_facts is not None and len(kept) >= max_facts:
            break
        kept.append((cand, Fact(id=fact_id(cand.text), text=cand.text, chunk_ids=(cand.chunk.id,),
                                source_url=urls.get(cand.chunk.source_id), score=cand.score,
                                span=cand.span)))
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


# -- loss -----------------------------------------------------------------------------------------------
# What a compression kept of its input, weighted by value: an item (a query term, a number, a name...)
# counts as much as the most valuable chunk it occurs in.

LEVELS = ("minimal", "acceptable", "moderate", "severe")
CATEGORY_WEIGHTS = {"query_terms": 0.3, "keywords": 0.2, "technical_terms": 0.15,
                    "numbers_dates": 0.15, "entities": 0.1, "structure": 0.1}


_KEYWORDS = 30  # the input's most frequent distinctive terms, checked like the query's terms

# Term or item occurrences from which they are counted in numpy (below, numpy's call overhead costs more
# than a Python loop).
_NUMPY_FROM = 3_000

# Kept characters times items from which presence is looked up in an index of the kept text rather
# than by one substring search per item (a search reads about a character per nanosecond).
_INDEX_FROM = 400_000


def loss_report(context: Context, min_retention: float = 0.5,
                important: float = 0.8) -> dict[str, Any]:
    """Retention per category, overall retention and a level: minimal, acceptable, moderate, severe.

    Each item is weighed and looked for once: the chunks' terms are counted in one pass (numpy over
    term ids), and the kept text is searched for every distinct item of every category at once."""
    chunks = list(context.chunks)
    # one entry per chunk id: a repeated id counts once, with its last chunk, at its first place
    unique = list({c.id: c for c in chunks}.values())
    texts = [c.text for c in unique]
    weights = _weights(unique)
    sigs = list(map(ts.signals, texts))
    kept_text = "\n".join(s.text for s in context.segments) if context.segments else (
        context.output or "")
    terms = _Terms(list(map(index_terms, texts)), weights)
    query = set(index_terms(context.query or ""))
    query_items = terms.items(query)
    keyword_items = terms.items(terms.keywords(len(chunks) or 1))
    kept_terms = set(index_terms(kept_text)) if query_items[0] or keyword_items[0] else set()
    signal_items = {
        "technical_terms": _items(_unions(map(_IDENTIFIERS, sigs), map(_ACRONYMS, sigs)), weights),
        "numbers_dates": _items(_unions(map(_NUMBERS, sigs), map(_DATES, sigs)), weights),
        "entities": _items(list(map(_ENTITIES, sigs)), weights),
        "structure": _items(list(map(_STRUCTURE, sigs)), weights),
    }
    found = _Found(kept_text, [order for order, _ in signal_items.values()])
    categories = {"query_terms": _category(*query_items, kept_terms),
                  "keywords": _category(*keyword_items, kept_terms)}
    for name, (order, best) in signal_items.items():
        present = found.numbers(order) if name == "numbers_dates" else found.substrings
        categories[name] = _category(order, best, present)
    used = {k: v for k, v in categories.items() if v["items"]}
    total_w = sum(CATEGORY_WEIGHTS[k] for k in used)
    retention = (sum(CATEGORY_WEIGHTS[k] * v["retention"] for k, v in used.items()) / total_w
                 if total_w else 1.0)
    important_lost = _important_lost(chunks, _kept_ids(context), important)
    shift = 0.1 if important_lost else 0.0
    if retention >= 0.75 + shift:
        level = "minimal"
    elif retention >= 0.55 + shift:
        level = "acceptable"
    elif retention >= 0.35 + shift:
        level = "moderate"
    else:
        level = "severe"
    return {"level": level, "retention": round(retention, 4), "passed": retention >= min_retention,
            "important_lost": important_lost, "categories": categories}


_IDENTIFIERS = attrgetter("identifiers")
_ACRONYMS = attrgetter("acronyms")
_NUMBERS = attrgetter("numbers")
_DATES = attrgetter("dates")
_ENTITIES = attrgetter("entities")
_STRUCTURE = attrgetter("structure")


def _unions(first: Iterable[frozenset[str]], second: Iterable[frozenset[str]]) -> list[frozenset[str]]:
    """`a | b` of each pair (the set itself: its order is the order items are first met in), and no
    set made for the many pairs of empty sets."""
    return [a | b if a or b else _NONE for a, b in zip(first, second, strict=True)]


_NONE: frozenset[str] = frozenset()


def _weights(chunks: Sequence[Chunk]) -> list[float]:
    """What an item of each chunk is worth: its combined score (1 without one), never below 0."""
    key = score_key("combined")
    out = []
    for chunk in chunks:
        value = chunk.scores.get(key)
        weight = 1.0 if value is None else float(value)
        out.append(weight if weight > 0.0 else 0.0)
    return out


def _important_lost(chunks: Iterable[Chunk], kept_ids: AbstractSet[str], important: float) -> bool:
    """Whether a chunk left out has an importance score of at least `important` (0 without one)."""
    key = score_key("importance")
    for chunk in chunks:
        if chunk.id not in kept_ids:
            value = chunk.scores.get(key)
            if (0.0 if value is None else float(value)) >= important:
                return True
    return False


def _category(order: list[str], best: Mapping[str, float], present: AbstractSet[str]) -> dict[str, Any]:
    """Retention of one category: `order` lists its items as first met (chunk order, then the order of
    each chunk's item set), `best` holds each item's weight, `present` the items the kept text has."""
    total = sum(map(best.__getitem__, order))
    if not order or total <= 0:
        return {"retention": 1.0, "items": 0, "kept": 0, "lost": []}
    kept = {item for item in order if item in present}
    lost = heapq.nlargest(10, [i for i in order if i not in kept], key=best.__getitem__)
    return {"retention": round(sum(map(best.__getitem__, kept)) / total, 4), "items": len(order),
            "kept": len(kept), "lost": lost}


def _items(sets: Sequence[AbstractSet[str]], weights: Sequence[float]) -> tuple[list[str], dict[str, float]]:
    """The items of per-chunk sets as first met, each with the weight of the heaviest chunk holding it."""
    lens = [len(items) for items in sets]
    total = sum(lens)
    if not total or total < _NUMPY_FROM:
        best: dict[str, float] = {}
        for items, weight in zip(sets, weights, strict=True):
            for item in items:
                if best.get(item, -1.0) < weight:  # weights are >= 0: a new item is added here
                    best[item] = weight
        return list(best), best
    import numpy as np

    ids: defaultdict[str, int] = defaultdict(count().__next__)  # an id per item, in order of first use
    at = np.fromiter(map(ids.__getitem__, chain.from_iterable(sets)), dtype=np.int64, count=total)
    most = np.zeros(len(ids))
    np.maximum.at(most, at, np.repeat(np.asarray(weights, dtype=np.float64), lens))
    order = list(ids)
    return order, dict(zip(order, most.tolist(), strict=True))


class _Terms:
    """The chunks' terms counted in one pass: an id per distinct term (in order of first use), and per
    id the frequency, the number of chunks holding it, the first of them and the heaviest one's weight
    (in numpy over the ids from `_NUMPY_FROM` terms on)."""

    def __init__(self, terms: Sequence[Sequence[str]], weights: Sequence[float]) -> None:
        self.terms = terms
        self.ids: dict[str, int] = {}
        self.tf: list[int] = []
        self.df: list[int] = []
        self.first: list[int] = []
        self.best: list[float] = []
        total = sum(map(len, terms))
        if total and total >= _NUMPY_FROM:
            self._count_ids(weights)
        else:
            self._count(weights)
        self.names = list(self.ids)

    def _count(self, weights: Sequence[float]) -> None:
        ids, tf, df, first, best = self.ids, self.tf, self.df, self.first, self.best
        last: list[int] = []
        for doc, (doc_terms, weight) in enumerate(zip(self.terms, weights, strict=True)):
            for term in doc_terms:
                i = ids.get(term)
                if i is None:
                    i = ids[term] = len(tf)
                    tf.append(0)
                    df.append(0)
                    first.append(doc)
                    best.append(0.0)
                    last.append(-1)
                tf[i] += 1
                if last[i] != doc:
                    last[i] = doc
                    df[i] += 1
                    if weight > best[i]:
                        best[i] = weight

    def _count_ids(self, weights: Sequence[float]) -> None:
        import numpy as np

        ids: defaultdict[str, int] = defaultdict(count().__next__)
        lens = np.fromiter(map(len, self.terms), dtype=np.int64, count=len(self.terms))
        at = np.fromiter(map(ids.__getitem__, chain.from_iterable(self.terms)), dtype=np.int64,
                         count=int(lens.sum()))
        ids.default_factory = None  # a plain mapping from here on
        self.ids = ids
        size = len(ids)
        doc = np.repeat(np.arange(len(self.terms)), lens)
        best = np.zeros(size)
        np.maximum.at(best, at, np.asarray(weights, dtype=np.float64)[doc])
        pairs = np.sort(doc * size + at)  # (chunk, term), sorted: a pair's repeats are neighbours
        df = np.bincount(pairs[np.concatenate(([True], pairs[1:] != pairs[:-1]))] % size, minlength=size)
        new = np.concatenate(([True], at[1:] > np.maximum.accumulate(at)[:-1]))  # a term's first use
        self.tf = np.bincount(at, minlength=size).tolist()
        self.df = df.tolist()
        self.first = doc[np.flatnonzero(new)].tolist()
        self.best = best.tolist()

    def keywords(self, n: int) -> set[str]:
        """The 30 terms with the highest frequency times (1 + sqrt(n / chunks holding it)), ties in order
        of first use. Among many terms, numpy scores them all and only those within a margin (far above
        rounding) of the 30th best are ranked again, in Python, by the exact score."""
        tf, df = self.tf, self.df
        contenders: Iterable[int] = range(len(tf))
        if len(tf) > 4 * _KEYWORDS:
            import numpy as np

            score = np.asarray(tf, dtype=np.float64) * (1 + np.sqrt(n / np.asarray(df, dtype=np.float64)))
            bar = np.partition(score, len(score) - _KEYWORDS)[len(score) - _KEYWORDS] * (1 - 1e-9)
            contenders = np.flatnonzero(score >= bar).tolist()
        ranked = sorted(contenders, key=lambda i: -tf[i] * (1 + (n / df[i]) ** 0.5))
        return {self.names[i] for i in ranked[:_KEYWORDS]}

    def items(self, wanted: set[str]) -> tuple[list[str], dict[str, float]]:
        """The `wanted` terms some chunk holds as first met (within a chunk, in the order of
        `wanted & set(its terms)`), each with the weight of the heaviest chunk holding it."""
        held = {t: self.ids[t] for t in wanted if t in self.ids}
        order: dict[str, None] = {}
        for doc in sorted({self.first[i] for i in held.values()}):
            order.update(dict.fromkeys(wanted & set(self.terms[doc])))
        return list(order), {t: self.best[i] for t, i in held.items()}


class _Found:
    """Which items the kept text holds: `substrings` (the item occurs in it, case-insensitively),
    looked for once for every category, and `numbers(items)` (also the items among the values the
    kept text's numbers and dates stand for)."""

    def __init__(self, kept_text: str, groups: Iterable[Iterable[str]]) -> None:
        self.kept_text = kept_text
        items = list(dict.fromkeys(chain.from_iterable(groups)))
        hits = _occurs(kept_text.lower(), list(map(str.lower, items)))
        self.substrings = {item for item, hit in zip(items, hits, strict=True) if hit}

    def numbers(self, items: Iterable[str]) -> set[str]:
        missing = [item for item in items if item not in self.substrings]
        if not missing:
            return self.substrings
        values = ts.numbers(self.kept_text)
        return self.substrings | {item for item in missing if item in values}


def _occurs(text: str, items: Sequence[str]) -> list[bool]:
    """`[item in text for item in items]`: by substring search when that is cheap, else with one
    index of the text's 3-character pieces (`_ThreeGrams`)."""
    if len(text) * len(items) <= _INDEX_FROM or len(text) < 3:
        return [item in text for item in items]
    return _ThreeGrams(text).occur(items)


class _ThreeGrams:
    """An index of a text by its 3-character pieces (three code points packed in one integer, sorted
    with their positions). An item with a first or last piece the text lacks is absent; the others are
    looked for only where the rarer of the two occurs: the other end must match there too (numpy, all
    items at once), which settles an item of up to 6 characters, and a longer one is compared in full
    where both ends match. Exact: the pieces are the characters themselves, not hashes."""

    _PAD = 0x1FFFFF  # above every code point: pads a text so that each position starts a piece
    _SPREAD = 256  # more places than this to compare at, and one substring search is cheaper

    def __init__(self, text: str) -> None:
        import numpy as np

        self.text = text
        self.keys = self._keys(text)
        self.order = np.argsort(self.keys)
        self.sorted = self.keys[self.order]
        starts = np.flatnonzero(np.concatenate(([True], self.sorted[1:] != self.sorted[:-1])))
        self.distinct = self.sorted[starts]
        self.first = starts
        self.count = np.diff(np.append(starts, len(self.keys)))

    @classmethod
    def _keys(cls, text: str) -> Any:
        """One key per character of `text`: it and the next two (padded at the end)."""
        import numpy as np

        codes = np.frombuffer((text + "\0\0").encode("utf-32-le"), dtype=np.uint32).astype(np.uint64)
        codes[len(text):] = cls._PAD
        return (codes[:-2] << np.uint64(42)) | (codes[1:-1] << np.uint64(21)) | codes[2:]

    def _places(self, keys: Any) -> tuple[Any, Any]:
        """Where in `sorted` each of `keys` starts, and how often it occurs."""
        import numpy as np

        rank = np.argsort(keys)  # sorted needles: a faster search
        at = np.empty(len(keys), dtype=np.int64)
        at[rank] = np.searchsorted(self.distinct, keys[rank])
        at = at.clip(max=len(self.distinct) - 1)
        hit = self.distinct[at] == keys
        return self.first[at], np.where(hit, self.count[at], 0)

    def occur(self, items: Sequence[str]) -> list[bool]:
        """`[item in text for item in items]`."""
        import numpy as np

        if not all(items):  # the empty item occurs everywhere
            rest = iter(self.occur([item for item in items if item]))
            return [next(rest) if item else True for item in items]
        lens = np.fromiter(map(len, items), dtype=np.int64, count=len(items))
        offsets = np.concatenate(([0], np.cumsum(lens)[:-1]))
        keys = self._keys("".join(items))
        found = np.zeros(len(items), dtype=bool)
        short = np.flatnonzero(lens < 3)
        if len(short):  # 1 or 2 characters: a range of keys
            drop = ((3 - lens[short]) * 21).astype(np.uint64)
            low = (keys[offsets[short]] >> drop) << drop
            found[short] = (np.searchsorted(self.sorted, low + (np.uint64(1) << drop))
                            > np.searchsorted(self.sorted, low))
        long = np.flatnonzero(lens >= 3)
        head = keys[offsets[long]]
        tail = keys[offsets[long] + lens[long] - 3]
        head_at, head_n = self._places(head)
        tail_at, tail_n = self._places(tail)
        by_tail = tail_n < head_n
        spread = np.where(by_tail, tail_n, head_n)
        wide = spread > self._SPREAD
        check = (spread > 0) & ~wide
        # the candidate places of each item, where its other end piece must match too
        item = np.repeat(long[check], spread[check])
        rank = np.arange(len(item)) - np.repeat(np.cumsum(spread[check]) - spread[check], spread[check])
        anchor = np.where(by_tail, tail_at, head_at)[check]
        place = self.order[np.repeat(anchor, spread[check]) + rank]
        other = np.repeat(np.where(by_tail, head, tail)[check], spread[check])
        tail_shift = np.repeat(np.where(by_tail, lens[long] - 3, 0)[check], spread[check])
        place -= tail_shift  # where the item would start
        end = place + lens[item] - 3  # its last piece
        other_at = np.where(tail_shift > 0, place, end).clip(0, len(self.keys) - 1)
        ok = (place >= 0) & (self.keys[other_at] == other)
        # the ends cover an item of up to 6 characters; a longer one is compared in full where they match
        sure = ok & (lens[item] <= 6)
        found[item[sure]] = True
        maybe = ok & ~sure
        text = self.text
        for k, at in zip(item[maybe].tolist(), place[maybe].tolist(), strict=True):
            if not found[k] and text.startswith(items[k], at):
                found[k] = True
        for k in long[wide].tolist():
            found[k] = items[k] in text
        return found.tolist()


def _kept_ids(context: Context) -> set[str]:
    return {cid for s in context.segments for cid in s.chunk_ids}


# -- footnotes ------------------------------------------------------------------------------------------

REFERENCES = {"en": "References", "zh": "参考资料"}


def source_titles(context: Context) -> dict[str, str]:
    """Each source's name for a reference: its title, else its URI, else its id."""
    return {s.id: s.title or s.uri or s.id for s in context.sources}


def reference_of(fact: Fact, titles: Mapping[str, str]) -> str:
    """What a footnote points to: the source URL, else the source's title or id."""
    if fact.source_url:
        return fact.source_url
    source_id = fact.chunk_ids[0].rsplit("-", 1)[0] if fact.chunk_ids else "unknown"
    return titles.get(source_id) or f"source {source_id}"


def render_footnotes(segments: Sequence[Segment], facts: Mapping[str, Fact], titles: Mapping[str, str],
                     heading: str = REFERENCES["en"]) -> tuple[str, dict[str, int]]:
    """Segments (their `fact_ids` metadata) as Markdown sections of footnoted facts plus one references
    list; also returns the footnote number of every reference (numbered by first appearance)."""
    numbers: dict[str, int] = {}
    parts: list[str] = []
    for segment in segments:
        lines = []
        for fid in segment.metadata.get("fact_ids", ()):
            fact = facts[fid]
            ref = reference_of(fact, titles)
            number = numbers.setdefault(ref, len(numbers) + 1)
            lines.append(f"- {fact.text}[^{number}]")
        if lines:
            parts.append(f"## {segment.title or segment.id}\n\n" + "\n".join(lines))
    if numbers:
        parts.append(f"## {heading}\n\n" + "\n".join(f"[^{n}]: {ref}" for ref, n in numbers.items()))
    return "\n\n".join(parts), numbers


__all__ = [
    "BRIDGE_FROM", "BRIDGE_SHARE", "CATEGORY_WEIGHTS", "COVERAGE_WEIGHT", "GAP_MARK", "GAP_TOKENS",
    "LEVELS", "MAX_FACT_TOKENS", "MIN_CJK", "MIN_WORDS", "PRIOR_WEIGHT", "REFERENCES", "SPECIFICITY_WEIGHT",
    "Bm25", "Candidate", "Kept", "bm25_scores", "candidates", "clean_parts", "fact_id", "fill", "fit_facts",
    "index_terms", "is_quarantined", "keep_facts", "loss_report", "merge_facts", "page_title",
    "parse_llm_facts", "quarantine_report", "query_weights", "reference_of", "render_footnotes",
    "rule_facts", "same_fact", "scored_sentences", "segments_for", "shipped_prompt", "source_heading",
    "source_titles", "split_quarantined", "stripped", "template_for", "usable", "usable_chunks",
    "with_input_spans",
]
