"""Rule extracts: a text's most query-relevant, informative sentences within a token allowance.

The scores are the ones the fact and map-reduce compressors rank sentences by: a BM25-style idf of
the query's terms over the sentences, the idf-weighted share of the query a sentence holds, and what
it carries (numbers, dates, names). A rule extract is what an LLM map step falls back to for a chunk
whose reply the guard refused.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable

from compactor.text import terms as ts
from compactor.text.sentences import split_sentences
from compactor.text.tokens import TokenCounter


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


def sentence_score(text: str, terms: frozenset[str], query_terms: set[str], idf: dict[str, float]) -> float:
    """Query relevance (idf-weighted share of query terms) plus information; information alone
    without a query."""
    info = information(text)
    return 0.7 * relevance(terms, idf) + 0.3 * info if query_terms else info


def rule_extract(text: str, query: str | None, limit: int, counter: TokenCounter) -> str:
    """The most query-relevant, informative sentences of `text` within `limit` tokens (at least one),
    in reading order, one per line ('' for a text without sentences)."""
    spans = [(start, end) for start, end in split_sentences(text) if text[start:end].strip()]
    if not spans:
        return ""
    sentence_terms = [frozenset(ts.terms(text[start:end])) for start, end in spans]
    query_terms = set(ts.terms(query or ""))
    idf = query_idf(sentence_terms, query_terms)
    costs = counter.count_many([text[start:end] for start, end in spans])
    scores = [sentence_score(text[start:end], terms, query_terms, idf)
              for (start, end), terms in zip(spans, sentence_terms, strict=True)]
    chosen: list[int] = []
    used = 0
    for i in sorted(range(len(spans)), key=lambda i: -scores[i]):
        if used + costs[i] <= max(1, limit) or not chosen:
            chosen.append(i)
            used += costs[i]
    return "\n".join(text[spans[i][0]:spans[i][1]].strip() for i in sorted(chosen))
