"""Facts by rules: query-relevant, information-bearing sentences, copied verbatim from their chunks.

A fact is a sentence (or a sentence run cut to a safe size) of one chunk, so its text is a substring
of the chunk's original text and its `chunk_ids` start with that chunk. Sentences score by the
idf-weighted share of the query's terms they hold, by what they carry (numbers, dates, names) and by
their chunk's score. Facts from different batches or sources that say the same thing are merged:
one text, the union of their chunk ids.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

import regex

from compactor.components import score_value
from compactor.document import Chunk, Fact, content_hash
from compactor.plugins import textstats as ts
from compactor.sentences import split_sentences
from compactor.tokens import TokenCounter

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


def fact_id(text: str) -> str:
    """Stable id of a fact: the hash of its whitespace-normalised text."""
    return "f-" + content_hash(" ".join(text.split()), 12)


def _long_enough(text: str) -> bool:
    if len(_CJK.findall(text)) >= MIN_CJK:
        return True
    return len(text.split()) >= MIN_WORDS


def query_idf(term_sets: Iterable[frozenset[str]], query_terms: set[str]) -> dict[str, float]:
    """BM25-style idf of each query term over a set of sentences."""
    sets = list(term_sets)
    df: Counter[str] = Counter()
    for terms in sets:
        df.update(terms & query_terms)
    n = len(sets)
    return {t: math.log(1 + (n - df[t] + 0.5) / (df[t] + 0.5)) for t in query_terms}


def relevance(terms: frozenset[str], idf: dict[str, float]) -> float:
    """The idf-weighted share of the query's terms a sentence holds."""
    return sum(idf[t] for t in terms & idf.keys()) / (sum(idf.values()) or 1.0)


def information(text: str) -> float:
    """What a sentence carries: numbers, dates and names, saturating at four."""
    sig = ts.signals(text)
    return min(1.0, (sig.number_hits + sig.date_hits + len(sig.entities)) / 4)


def candidates(chunks: Sequence[Chunk], query: str | None, counter: TokenCounter) -> list[Candidate]:
    """Every usable sentence of the chunks, scored (best first)."""
    query_terms = set(ts.terms(query or ""))
    rows: list[tuple[Chunk, str, frozenset[str]]] = []
    for chunk in chunks:
        for start, end in split_sentences(chunk.text):
            text = chunk.text[start:end].strip()
            if not text or not _long_enough(text):
                continue
            rows.append((chunk, text, frozenset(ts.terms(text))))
    if not rows:
        return []
    idf = query_idf((terms for _, _, terms in rows), query_terms)
    costs = counter.count_many([text for _, text, _ in rows])
    out = []
    for (chunk, text, terms), cost in zip(rows, costs, strict=True):
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
        out.append(Candidate(chunk, text, round(score, 4), terms, cost))
    out.sort(key=lambda c: -c.score)
    return out


def same_fact(a: frozenset[str], b: frozenset[str], threshold: float = 0.6) -> bool:
    """Two term sets state the same thing: high Jaccard, or one almost inside the other."""
    if not a or not b:
        return False
    shared = len(a & b)
    return shared / len(a | b) >= threshold or shared / min(len(a), len(b)) >= 0.85


def rule_facts(chunks: Sequence[Chunk], query: str | None, counter: TokenCounter,
               urls: dict[str, str | None], *, max_facts: int, min_score: float) -> list[Fact]:
    """The best `max_facts` distinct facts of a batch."""
    kept: list[tuple[Candidate, Fact]] = []
    for cand in candidates(chunks, query, counter):
        if len(kept) >= max_facts or cand.score < min_score:
            break
        duplicate = next((i for i, (other, _) in enumerate(kept) if same_fact(cand.terms, other.terms)), None)
        if duplicate is not None:
            other, fact = kept[duplicate]
            if cand.chunk.id not in fact.chunk_ids:
                kept[duplicate] = (other, replace(fact, chunk_ids=(*fact.chunk_ids, cand.chunk.id)))
            continue
        kept.append((cand, Fact(id=fact_id(cand.text), text=cand.text, chunk_ids=(cand.chunk.id,),
                                source_url=urls.get(cand.chunk.source_id), score=cand.score)))
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
