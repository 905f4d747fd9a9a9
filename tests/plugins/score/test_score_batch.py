"""score.density and score.importance work on all the chunks at once (whole-text passes): their values
and features are what the per-chunk definitions give."""

from __future__ import annotations

import math
import random
from collections import Counter

import pytest
import regex

from compactor.document import Chunk, Context
from compactor.plugins import score as sc
from compactor.run import Run
from compactor.text import relevance as rel
from compactor.text import terms as ts
from compactor.text.tokens import get_counter

SENTENCES = [
    "Please click here to subscribe to our newsletter.", "CRITICAL: the deploy failed with a fatal error.",
    "You must never log VAULT_TOKEN; data loss is always a security vulnerability.",
    "Acme Corp reported revenue of $4.1 million on 2024-05-01 in New York.",
    "The p99 latency rose from 120 ms to 480 ms in eu-west-1.", "Kestrel calls rotate_keys() hourly.",
    "Kestrel and Orion share the VAULT_TOKEN.", "Well, you know, it is kind of like that, really.",
    "版权所有，点击订阅。", "严重错误：必须禁止写入日志，否则数据丢失。",
    "2024年3月5日，延迟从120毫秒升到480毫秒。",
    "Skip to main content", "Terms of Service and Privacy Policy", "\u017fubscribe and COO\u212aIE banner",
    "See src/keys/rotate.py and api.v2.client for the Vulnerabilities.", "", "Do not", "always-on",
    "Kestrel and Orion share the VAULT_TOKEN.",  # a repeated chunk: no uniqueness
]
# the patterns as they were written before _Phrases built them from word lists
BOILERPLATE_EN = regex.compile(
    r"\b(?:click here|read more|subscribe|sign up|log in|cookie|privacy policy|terms of (?:use|service)|"
    r"all rights reserved|share (?:this|on)|follow us|advertisement|newsletter|related (?:posts|articles)|"
    r"skip to (?:main )?content)\b", regex.IGNORECASE)
CRITICAL_EN = regex.compile(
    r"\b(?:critical|fatal|error|exception|failed|failure|must|required|security|vulnerab\w*|breaking|"
    r"deadline|blocker|warning|do not|never|always|important|urgent|data loss)\b", regex.IGNORECASE)


def _context(texts: list[str]) -> Context:
    counter = get_counter("cl100k_base")
    chunks = tuple(Chunk(id=f"s-{i:04d}", source_id="s", index=i, start=0, end=len(t), text=t,
                         tokens=counter.count(t), labels={"type": "error_information"} if i == 1 else {})
                   for i, t in enumerate(texts))
    return Context(chunks=chunks)


def _texts(seed: int) -> list[str]:
    rnd = random.Random(seed)
    return [" ".join(rnd.sample(SENTENCES, rnd.randrange(1, 3))) for _ in range(60)] + SENTENCES


def _density(chunk: Chunk) -> tuple[float, dict]:
    sig = ts.signals(chunk.text)
    found = {"numbers": sig.number_hits, "dates": sig.date_hits, "units": sig.unit_hits,
             "entities": len(sig.entities), "identifiers": len(sig.identifiers) + sig.url_hits}
    content_ratio = min(1.0, len(rel.index_terms(chunk.text)) / max(ts.word_count(chunk.text), 1))
    facts_per_100 = 100.0 * sum(found.values()) / max(chunk.tokens, 1)
    boiler = sc._BOILERPLATE.hits(chunk.text)
    score = (0.55 * min(1.0, facts_per_100 / 12.0) + 0.45 * content_ratio) * (1 - min(0.8, 0.25 * boiler))
    return round(score, 4), {**found, "content_ratio": round(content_ratio, 3),
                             "facts_per_100_tokens": round(facts_per_100, 2), "boilerplate_hits": boiler}


@pytest.mark.parametrize("seed", [1, 2])
def test_density_is_the_per_chunk_definition(seed: int) -> None:
    context = _context(_texts(seed))
    ts.signals.cache_clear()
    found = sc.DensityScorer().compactor_score(context, Run(counter=get_counter("cl100k_base")))
    for chunk in context.chunks:
        value, features = _density(chunk)
        assert found.values[chunk.id] == value and found.features[chunk.id] == features, chunk.text


def test_importance_is_the_per_chunk_definition() -> None:
    context = _context(_texts(3))
    found = sc.ImportanceScorer().compactor_score(context, Run(counter=get_counter("cl100k_base")))
    chunks = context.chunks
    docs = [rel.index_terms(c.text) for c in chunks]
    df: Counter[str] = Counter()
    for doc in docs:
        df.update(set(doc))
    n = len(chunks)
    refs = [ts.signals(c.text).entities | ts.signals(c.text).identifiers for c in chunks]
    ref_df = Counter(r for refs_i in refs for r in refs_i)
    mean_idf = [sum(math.log(n / df[t]) for t in set(d)) / len(set(d)) if d else 0.0 for d in docs]
    seen: set[frozenset[str]] = set()
    for i, chunk in enumerate(chunks):
        hits = sc._CRITICAL.hits(chunk.text) + (2 if i == 1 else 0)
        parts = {"criticality": min(1.0, hits / 4),
                 "dependency": min(1.0, sum(1 for r in refs[i] if ref_df[r] > 1) / 4),
                 "uniqueness": 0.0 if frozenset(docs[i]) in seen and docs[i] else mean_idf[i] / max(mean_idf),
                 "actionability": 0.5}
        seen.add(frozenset(docs[i]))
        weights = {"criticality": 0.35, "dependency": 0.25, "uniqueness": 0.2, "actionability": 0.2}
        assert found.values[chunk.id] == round(sum(weights[k] * v for k, v in parts.items()) / 1.0, 4)
        assert found.features[chunk.id] == {k: round(v, 3) for k, v in parts.items()}
    assert found.features[chunks[-1].id]["uniqueness"] == 0.0  # the repeated chunk
    assert found.features[chunks[61].id]["criticality"] == 1.0  # critical, failed, fatal, error


def test_phrases_count_as_the_written_patterns() -> None:
    texts = _texts(4)
    joined = ts.Joined(texts)
    for phrases, english in ((sc._BOILERPLATE, BOILERPLATE_EN), (sc._CRITICAL, CRITICAL_EN)):
        counts = phrases.counts(joined)
        for text, count in zip(texts, counts, strict=True):
            assert len(phrases.english.findall(text)) == len(english.findall(text))
            assert count == phrases.hits(text), text
    assert sc._BOILERPLATE.hits("\u017fubscribe and COO\u212aIE banner") == 2
    assert sc._CRITICAL.hits("严重错误：必须禁止写入日志，否则数据丢失。") == 4
