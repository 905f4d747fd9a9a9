"""score.density, score.relevance, score.importance, score.recency: every score in [0, 1], with the
features that produced it (shown by `compactor-run --explain`)."""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Sequence
from datetime import datetime
from itertools import chain
from typing import Any, Literal

import regex

from compactor.components import Component, ScoreSet, param
from compactor.document import Chunk, Context
from compactor.hookspecs import hookimpl
from compactor.kit import bm25_scores as bm25_scores  # the one BM25, importable from here as before
from compactor.run import Run
from compactor.text import relevance as rel
from compactor.text import terms as ts


class _Phrases:
    """Words and phrases counted in a chunk, found whole: English ones case-insensitively (a trailing
    `*` takes any word ending), Chinese ones as written. English apart from Chinese: a
    case-insensitive alternation that also holds the Chinese words tries them at every position of
    English text, for nothing."""

    def __init__(self, english: Sequence[str], chinese: Sequence[str]) -> None:
        self.words = tuple(w.removesuffix("*") for w in english)
        assert all(len(w) >= 4 for w in self.words), "ts.phrase_holders finds four characters or more"
        self.english = regex.compile(
            r"\b(?:" + "|".join(regex.escape(w.removesuffix("*")) + (r"\w*" if w.endswith("*") else "")
                                for w in english) + r")\b", regex.IGNORECASE)
        self.chinese = regex.compile("|".join(map(regex.escape, chinese)))

    def hits(self, text: str) -> int:
        """Matches in one text."""
        found = len(self.english.findall(text))
        return found + len(self.chinese.findall(text)) if _HAN.search(text) else found

    def counts(self, joined: ts.Joined) -> list[int]:
        """`hits` of each text of `joined`: the English pattern only in the texts holding one of its
        words, the Chinese one over the texts that are not ASCII at once (no separator holds Han)."""
        texts = joined.texts
        counts = [0] * len(texts)
        for i in ts.phrase_holders(joined, self.words):
            counts[i] = len(self.english.findall(texts[i]))
        wide = [i for i, text in enumerate(texts) if not text.isascii()]
        if wide:
            holders = joined.subset(wide)
            for i in holders.owners([m.start() for m in self.chinese.finditer(holders.text)]):
                counts[wide[i]] += 1
        return counts


_BOILERPLATE = _Phrases(
    ("click here", "read more", "subscribe", "sign up", "log in", "cookie", "privacy policy", "terms of use",
     "terms of service", "all rights reserved", "share this", "share on", "follow us", "advertisement",
     "newsletter", "related posts", "related articles", "skip to main content", "skip to content"),
    ("版权所有", "点击", "订阅", "登录", "注册", "相关阅读", "分享到", "广告", "免责声明"),
)
_CRITICAL = _Phrases(
    ("critical", "fatal", "error", "exception", "failed", "failure", "must", "required", "security",
     "vulnerab*", "breaking", "deadline", "blocker", "warning", "do not", "never", "always", "important",
     "urgent", "data loss"),
    ("错误", "异常", "失败", "必须", "严重", "关键", "安全", "漏洞", "警告", "不要", "禁止", "重要", "紧急",
     "截止"),
)
_HAN = regex.compile(r"\p{Han}")


def _chunk_terms(chunks: Sequence[Chunk]) -> list[tuple[str, ...]]:
    """The chunks' terms, the relevance engine's (one tokenisation per chunk for every scorer)."""
    return [rel.index_terms(c.text) for c in chunks]


class DensityScorer(Component):
    """Information per token: numbers, dates, units, names, identifiers and content words count for;
    boilerplate (cookie banners, "read more", 版权所有) counts against."""

    name = "score.density"
    stage = "score"
    requires = ("chunks",)
    provides = ("scores",)

    @hookimpl
    def compactor_score(self, context: Context, run: Run) -> ScoreSet:
        chunks = context.chunks
        texts = [c.text for c in chunks]
        joined = ts.Joined(texts)  # each pattern runs once over all the chunks
        signals = ts.signals_of(texts)
        words = ts.word_counts(joined)
        boilerplate = _BOILERPLATE.counts(joined)
        values: dict[str, float] = {}
        features: dict[str, dict[str, Any]] = {}
        rows = zip(chunks, signals, _chunk_terms(chunks), words, boilerplate, strict=True)
        for chunk, sig, terms, n_words, boiler in rows:
            tokens = max(chunk.tokens, 1)
            entities = len(sig.entities)
            identifiers = len(sig.identifiers) + sig.url_hits
            facts = sig.number_hits + sig.date_hits + sig.unit_hits + entities + identifiers
            content_ratio = min(1.0, len(terms) / max(n_words, 1))
            facts_per_100 = 100.0 * facts / tokens
            penalty = min(0.8, 0.25 * boiler)
            score = (0.55 * min(1.0, facts_per_100 / 12.0) + 0.45 * content_ratio) * (1 - penalty)
            values[chunk.id] = round(score, 4)
            features[chunk.id] = {"numbers": sig.number_hits, "dates": sig.date_hits, "units": sig.unit_hits,
                                  "entities": entities, "identifiers": identifiers,
                                  "content_ratio": round(content_ratio, 3),
                                  "facts_per_100_tokens": round(facts_per_100, 2), "boilerplate_hits": boiler}
        return ScoreSet(self.name, values, features)


class RelevanceScorer(Component):
    """Relevance to the query from the engine in `compactor.text.relevance`: BM25 of the chunk
    and of its passage (title included), neighbours, bridge hops for multi-hop questions (names in
    the best first-hop chunks become a second query) and answer-type cues (a date for "when", a
    number for "how many", a name for "who"). English is stemmed, Chinese matched by character
    bigrams. Without a query it abstains."""

    name = "score.relevance"
    stage = "score"
    requires = ("chunks",)
    provides = ("scores",)

    k1: float = param(1.2, doc="BM25 term-frequency saturation")
    b: float = param(0.75, doc="BM25 length normalisation")
    passage_weight: float = param(0.3, ge=0, doc="weight of the passage's BM25")
    neighbor_weight: float = param(0.1, ge=0, doc="weight of the neighbours' relevance")
    lead_weight: float = param(0.1, doc="weight of a passage's lead")
    answer_type: float = param(0.2, doc="weight of answer-type cues")
    hops: int = param(2, ge=0, doc="bridge hops for multi-hop questions")
    hop_seeds: int = param(5, ge=0, doc="best first-hop chunks a hop reads names from")
    bridge_terms: int = param(4, ge=0, doc="names a hop adds to the query")
    unmatched: float = param(0.2, ge=0, le=1, doc="value of a sentence sharing no word with the question, "
                             "times its closeness in meaning (static word vectors)")

    def check(self) -> list[str]:
        if self.passage_weight + self.neighbor_weight > 1:
            return ["passage_weight and neighbor_weight must add up to at most 1"]
        return []

    def __post_init__(self) -> None:
        self.settings = rel.Settings(k1=self.k1, b=self.b, passage_weight=self.passage_weight,
                                     neighbor_weight=self.neighbor_weight, lead_weight=self.lead_weight,
                                     answer_type=self.answer_type, hops=self.hops, hop_seeds=self.hop_seeds,
                                     bridge_terms=self.bridge_terms, unmatched=self.unmatched)

    @hookimpl
    def compactor_score(self, context: Context, run: Run) -> ScoreSet | None:
        if not context.query or not context.query.strip():
            run.note("abstained", "no query")
            return None
        chunks = context.chunks
        found = rel.score_chunks(context.query, chunks, context.sources, self.settings)
        values = {c.id: round(found.values[i], 4) for i, c in enumerate(chunks)}
        features = {c.id: {"bm25": round(found.sentence[i], 3), "passage": round(found.passage[i], 3),
                           "hop": round(found.hop[i], 3), "matched": found.matched[i],
                           "answer_type": found.kind}
                    for i, c in enumerate(chunks)}
        run.note("query_terms", len(rel.query_weights(context.query)))
        if found.bridges:
            run.note("bridges", found.bridges)
        return ScoreSet(self.name, values, features)


class ImportanceScorer(Component):
    """How much the rest depends on a chunk: criticality (errors, musts, warnings), dependency
    (names and identifiers other chunks refer to), uniqueness (rare terms; near-duplicates score 0)
    and actionability (from classify.rules when it ran)."""

    name = "score.importance"
    stage = "score"
    requires = ("chunks",)
    provides = ("scores",)

    criticality: float = param(0.35, doc="weight of errors, musts and warnings")
    dependency: float = param(0.25, doc="weight of names other chunks refer to")
    uniqueness: float = param(0.2, doc="weight of rare terms")
    actionability: float = param(0.2, doc="weight of classify.rules' actionability")

    @property
    def weights(self) -> dict[str, float]:
        """The four weights by feature name (their sum normalises the score)."""
        return {"criticality": self.criticality, "dependency": self.dependency,
                "uniqueness": self.uniqueness, "actionability": self.actionability}

    @hookimpl
    def compactor_score(self, context: Context, run: Run) -> ScoreSet:
        chunks = context.chunks
        texts = [c.text for c in chunks]
        docs = _chunk_terms(chunks)
        n = len(chunks) or 1
        # a chunk's distinct terms, built once (their order is the order the idf sum takes)
        term_sets = [set(doc) for doc in docs]
        df = Counter(chain.from_iterable(term_sets))
        idf_of = {count: math.log(n / count) for count in set(df.values())}  # a term's idf is its df's
        mean_idf = [sum(map(idf_of.__getitem__, map(df.__getitem__, s))) / len(s) if s else 0.0
                    for s in term_sets]
        top_idf = max(mean_idf, default=0.0) or 1.0
        refs = [s.entities | s.identifiers for s in ts.signals_of(texts)]
        ref_df = Counter(chain.from_iterable(refs))
        shared_refs = {r for r, count in ref_df.items() if count > 1}
        critical = _CRITICAL.counts(ts.Joined(texts))
        seen: set[frozenset[str]] = set()
        action_value = {"actionable": 1.0, "informational": 0.5, "historical": 0.2}
        w_critical, w_dependency, w_unique, w_action = self.weights.values()
        total_w = sum(self.weights.values()) or 1.0
        # criticality and dependency are min(1, hits / 4): five values, rounded once
        quarters = [min(1.0, hits / 4) for hits in range(5)]
        rounded = {v: round(v, 3) for v in (*quarters, *action_value.values(), 0.5)}
        values: dict[str, float] = {}
        features: dict[str, dict[str, Any]] = {}
        for i, chunk in enumerate(chunks):
            labels = chunk.labels
            critical_hits = critical[i] + 2 if labels.get("type") == "error_information" else critical[i]
            criticality = quarters[critical_hits] if critical_hits < 4 else 1.0
            shared = len(refs[i] & shared_refs)
            dependency = quarters[shared] if shared < 4 else 1.0
            key = frozenset(term_sets[i])
            uniqueness = 0.0 if key and key in seen else mean_idf[i] / top_idf
            seen.add(key)
            actionability = action_value.get(str(labels.get("actionability")), 0.5)
            # summed in the order of `weights`, from 0 as sum() does
            total = 0 + w_critical * criticality + w_dependency * dependency + w_unique * uniqueness
            values[chunk.id] = round((total + w_action * actionability) / total_w, 4)
            features[chunk.id] = {"criticality": rounded[criticality], "dependency": rounded[dependency],
                                  "uniqueness": round(uniqueness, 3), "actionability": rounded[actionability]}
        return ScoreSet(self.name, values, features)


def _timestamp(value: Any) -> float | None:
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
        except ValueError:
            return None
    return None


class RecencyScorer(Component):
    """Newer is worth more: exponential decay with a half-life, by position in the source (`position`,
    half-life as a share of the source) or by the source's `timestamp` metadata (`timestamp`,
    half-life in seconds; sources without a timestamp fall back to position)."""

    name = "score.recency"
    stage = "score"
    requires = ("chunks",)
    provides = ("scores",)

    mode: Literal["position", "timestamp"] = param("position", doc="age by position or by timestamp")
    half_life: float = param(0.5, gt=0, doc="a share of the source (position) or seconds (timestamp)")

    @hookimpl
    def compactor_score(self, context: Context, run: Run) -> ScoreSet:
        counts = Counter(c.source_id for c in context.chunks)
        stamps = {s.id: _timestamp(s.metadata.get("timestamp")) for s in context.sources}
        newest = max((t for t in stamps.values() if t is not None), default=time.time())
        values: dict[str, float] = {}
        features: dict[str, dict[str, Any]] = {}
        for chunk in context.chunks:
            stamp = stamps.get(chunk.source_id)
            if self.mode == "timestamp" and stamp is not None:
                age = (newest - stamp) / self.half_life
                basis = "timestamp"
            else:
                total = counts[chunk.source_id]
                age = ((total - 1 - chunk.index) / max(total - 1, 1)) / self.half_life
                basis = "position"
            values[chunk.id] = round(0.5 ** max(age, 0.0), 4)
            features[chunk.id] = {"basis": basis, "half_lives": round(age, 3)}
        return ScoreSet(self.name, values, features)
