"""Meaning beyond shared words from the document itself: which terms keep the question's company.

The static word vectors (`compactor.text.semantic`) cover English; no registry package offers a
Chinese or multilingual encoder to distil, so Chinese (and any text when the vectors are absent)
takes this path. It is pseudo-relevance feedback by co-occurrence: the passages that hold a
question term also hold the terms the document uses around that subject ("胡夫" beside "金字塔",
"导演" beside "电影"); a sentence elsewhere that shares none of the question's terms but several of
those is probably about the same thing.

For each question term q held by at least one and at most a fifth of the passages, each other term
u of those passages gets P(u | q) (its share of q's passages, averaged over the question's terms,
weighted by q's idf) times u's own idf, so words present everywhere are no evidence. A sentence's
closeness is the sum over its distinct terms, over the square root of their count (longer
sentences do not win by length), scaled so the closest is 1. Cost: one pass over the passages that
hold a question term; nothing when the question's terms are everywhere or nowhere.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

_COMMON = 0.2  # a question term in more than this share of passages says nothing about topic
_EXPANSION = 64  # terms kept from the feedback; the long tail is noise


def expansion(query: Mapping[str, float], passages: Sequence[Sequence[str]],
              holders: Mapping[str, Sequence[tuple[int, int]]],
              df: Callable[[str], int] | None = None) -> dict[str, float]:
    """Terms that keep the question's terms' company, with their weight (the question's own terms
    excluded). `holders` maps a term to the (passage, count) pairs holding it; `df`, when given,
    counts them without listing them (an index's own count)."""
    count = df or (lambda term: len(holders.get(term, ())))
    n = len(passages)
    if n < 2:
        return {}
    limit = max(1, int(_COMMON * n))
    weights: dict[str, float] = {}
    total = 0.0
    for term, qw in query.items():
        found = holders.get(term, ())
        if not found or len(found) > limit:
            continue
        idf = math.log(1 + (n - len(found) + 0.5) / (len(found) + 0.5))
        share = qw * idf / len(found)
        total += qw * idf
        for p, _ in found:
            for u in set(passages[p]):
                weights[u] = weights.get(u, 0.0) + share
    if total <= 0:
        return {}
    out: dict[str, float] = {}
    for u, w in weights.items():
        if u in query:
            continue
        held = count(u)
        out[u] = (w / total) * math.log(1 + (n - held + 0.5) / (held + 0.5))
    best = sorted(out.items(), key=lambda kv: (-kv[1], kv[0]))[:_EXPANSION]
    return dict(best)


def closeness(query: Mapping[str, float], docs: Sequence[Sequence[str]], passages: Sequence[Sequence[str]],
              holders: Mapping[str, Sequence[tuple[int, int]]],
              df: Callable[[str], int] | None = None) -> list[float] | None:
    """Closeness in [0, 1] of each document (a term list) to the question through the expansion
    terms, or None when the question has no usable company in these passages."""
    weights = expansion(query, passages, holders, df)
    if not weights:
        return None
    values = []
    for doc in docs:
        distinct = set(doc)
        v = sum(weights.get(t, 0.0) for t in distinct)
        values.append(v / math.sqrt(len(distinct)) if v > 0 else 0.0)
    top = max(values, default=0.0)
    if top <= 0:
        return None
    return [v / top for v in values]
