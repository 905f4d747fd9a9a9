"""The query-aware relevance engine behind `score.relevance` (and everything that selects by it).

Why not plain BM25 over sentences: a sentence says "he" where the question names the person, the
answer of a two-hop question shares no word with the question, and a "when" question wants the
sentence with the date. So each chunk's value combines

* BM25 of the chunk (Okapi, stemmed English words without stop words; Chinese character bigrams,
  which match words without a dictionary; fragments under a few words are damped, since their
  length normalisation would otherwise put them on top). A large group of near-duplicate sentences
  (one template filled with different names, `compactor.text.templates`) counts once in a word's
  document frequency: boilerplate repeating the question's word must not make that word common;
* BM25 of its passage (a paragraph of its source, title included): a sentence inherits the evidence
  of the passage it sits in, and the first sentence of a passage (the one naming its subject) more so;
* the best of its neighbours in the passage (short adjacent context often carries the answer);
* meaning beyond shared words (`semantic`): the cosine of static word vectors distilled from a
  sentence encoder. A sentence sharing no word with the question gets a small value from it
  (`Settings.unmatched`, a fifth of the best lexical match at most): it then competes only with
  other sentences BM25 cannot tell apart and with weak lexical matches. Mixing it into every
  sentence's and passage's evidence (`Settings.semantic`) is off: it moved the ranking of sentences
  BM25 already told apart and lost on held-out questions. A Chinese question (or any, without the
  vectors) takes the same small value from co-occurrence instead (`compactor.text.cooccurrence`:
  terms that share passages with the question's terms);
* bridge hops (pseudo-relevance feedback on entities): the names in the best first-hop sentences
  that the question does not contain become a second query, together with the question terms that
  sentence did not match; a chunk that holds such a bridge name scores up to the first-hop
  sentence's value. Two expansions reach three-hop questions;
* an answer-type cue: "when / 什么时候" favours chunks holding a date, "how many / 多少" a number,
  "who / where" a name.

The index is an inverted list built once per context, so a query touches only the postings of
its own terms; building it is one pass over the chunk terms.
"""

from __future__ import annotations

import functools
import math
import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import regex

from compactor.document import Chunk, Source
from compactor.text import cooccurrence as cooc
from compactor.text import semantic as sem
from compactor.text import terms as ts
from compactor.text.language import HAN_BASIC
from compactor.text.numbers import DATE
from compactor.text.templates import TemplateGroups

if TYPE_CHECKING:
    import numpy as np

_TOKEN = regex.compile(r"(?V1)\p{Han}+|[[\p{L}\p{N}]--\p{Han}][[\p{L}\p{N}'_\-]--\p{Han}]*")
# the same tokens on ASCII text (no Han, letters and digits are [A-Za-z0-9]), with the stdlib's faster engine
_ASCII_TOKEN = re.compile(r"[A-Za-z0-9][A-Za-z0-9'_\-]*")
_SPLIT = regex.compile(r"['\-]+")
_PARAGRAPH = regex.compile(r"\n[ \t]*\n\s*")

_WHEN = regex.compile(r"^\s*(?:when|what year|in (?:what|which) year|what date|how long ago)\b"
                      r"|\bwhen\b|何时|什么时候|哪一年|哪年|几月|哪天|哪一天|多久|什么时间|何年",
                      regex.IGNORECASE)
_HOW_MANY = regex.compile(r"\bhow (?:many|much|long|old|far|big|tall|large|high|often)\b"
                          r"|\bwhat (?:percentage|number|amount|proportion)\b"
                          r"|多少|几个|几位|几种|几次|几岁|多大|多长|多高|多远|多重|百分之", regex.IGNORECASE)
_WHO = regex.compile(r"^\s*(?:who|whom|whose)\b|\bwho(?:m|se)?\b|谁|哪位|什么人|哪个人", regex.IGNORECASE)
_WHERE = regex.compile(r"^\s*where\b|\bwhere\b|哪里|哪儿|何处|什么地方|哪个(?:国家|城市|地区|省)",
                       regex.IGNORECASE)
_YEAR = regex.compile(r"\b(?:1[0-9]|20)\d{2}\b|\d{1,4}\s?年|\d{1,2}\s?月|\d{1,2}\s?日")
_DIGIT = regex.compile(r"\d|[一二三四五六七八九十百千万亿两]+[个位种次岁名人年]")
# A capitalised name not at the start of a sentence, or a run of several capitalised words.
_NAME = regex.compile(r"(?<![.!?]\s)(?<!^)\b\p{Lu}\p{Ll}+|\b\p{Lu}\p{Ll}+(?:\s+\p{Lu}\p{Ll}+)+")
# Names for bridge hops: runs of capitalised words (with of/de/van... inside), or quoted Chinese terms.
_CAPS = regex.compile(r"\b\p{Lu}[\p{L}\p{M}'’\-]*"
                      r"(?:\s+(?:of|de|da|del|van|von|der|the|and|la|le|du|di|y)?\s*\p{Lu}[\p{L}\p{M}'’\-]*)*")
_QUOTED = regex.compile(r"[《“「『]([^》”」』]{1,20})[》”」』]")

STUFFED = 0.7  # below this share of distinct terms a sentence counts as keyword-stuffed


@dataclass(frozen=True, slots=True)
class Settings:
    """The engine's knobs; `score.relevance` exposes them as YAML parameters."""

    k1: float = 1.2
    b: float = 0.75
    passage_weight: float = 0.3
    neighbor_weight: float = 0.1
    lead_weight: float = 0.1
    answer_type: float = 0.2
    hops: int = 2
    hop_seeds: int = 5
    hop_decay: float = 0.9
    bridge_terms: int = 4
    min_words: int = 5
    # weight of the static word vectors in every sentence's and passage's evidence; off by default:
    # at 0.2 it gained on the dev half it was tuned on but lost on the held-out half
    # (benchmarks/qa_split.py)
    semantic: float = 0.0
    # value of a sentence sharing no term with the question, times its closeness in meaning (0 to 1);
    # measured the same way, 0.1 to 0.3 gain on both halves and lose no cell
    unmatched: float = 0.2
    # a template group (near-duplicate sentences differing by a name or number) of at least this many
    # holders of a term counts once in the term's document frequency (0: every sentence counts)
    template_df: int = 10


# -- terms --------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=262_144)
def _word_term(token: str) -> tuple[str, ...]:
    """Index terms of one Latin token (lower-cased, stop words out, Snowball stem), cached."""
    word = ts.fold(token).lower().strip("'-_")
    if word.endswith("'s"):
        word = word[:-2]
    stop = ts.stopwords("en")
    parts = _SPLIT.split(word) if ("-" in word or "'" in word) else (word,)
    return tuple(ts.stem(p) if p.isalpha() else p for p in parts
                 if p and p not in stop and (len(p) > 1 or p.isdigit()))


@functools.lru_cache(maxsize=262_144)  # every scorer and validate.loss share these per chunk
def index_terms(text: str) -> tuple[str, ...]:
    """Terms for relevance: stemmed English content words and Chinese character bigrams (a lone
    Han character stays a unigram). Bigrams alone match Chinese words better than bigrams plus
    characters, whose common characters add noise to every sentence."""
    out: list[str] = []
    known = _WORD_TERMS
    for token in (_ASCII_TOKEN.findall(text) if text.isascii() else _TOKEN.findall(text)):
        found = known.get(token)
        if found is None:
            first = token[0]
            if ts.is_han(first):
                han = ts.fold(token)  # Kangxi radicals and compatibility ideographs match their own
                found = (han,) if len(han) == 1 else tuple(han[i:i + 2] for i in range(len(han) - 1))
            else:
                found = _word_term(token)
            if len(known) >= _WORD_TERMS_MAX:
                known.clear()
            known[token] = found
        out.extend(found)
    return tuple(out)


# Token -> terms, a plain dict (a lookup per token is the hot loop of indexing; an lru_cache call
# costs three times as much). Bounded by clearing; entries depend only on the token, so any thread
# may add one.
class _TokenTerms(dict[str, tuple[str, ...]]):
    def cache_clear(self) -> None:
        """Emptied like the functools caches (benchmarks start each run cold)."""
        self.clear()


_WORD_TERMS = _TokenTerms()
_WORD_TERMS_MAX = 500_000


def query_terms(query: str) -> list[str]:
    """The query's terms, in order (repeats kept: a repeated word weighs more)."""
    return list(index_terms(query))


# -- BM25 over an inverted index ------------------------------------------------------------------


class Postings(Mapping[str, Sequence[tuple[int, int]]]):
    """Term -> its (document, count) pairs, read from the index's sorted arrays on demand: a query
    touches the postings of a few terms, so lists are built only for those."""

    def __init__(self, ids: dict[str, int], starts: list[int], docs: np.ndarray, counts: np.ndarray) -> None:
        self._ids = ids
        self._starts = starts
        self._docs = docs
        self._counts = counts
        self._built: dict[str, list[tuple[int, int]]] = {}

    def __getitem__(self, term: str) -> list[tuple[int, int]]:
        found = self._built.get(term)
        if found is None:
            t = self._ids[term]  # KeyError for an unknown term, as a dict
            lo, hi = self._starts[t], self._starts[t + 1]
            found = self._built[term] = list(zip(self._docs[lo:hi].tolist(), self._counts[lo:hi].tolist(),
                                                 strict=True))
        return found

    def span(self, term: str) -> tuple[int, int] | None:
        """Where the term's postings sit in the sorted arrays (None for an unknown term)."""
        t = self._ids.get(term)
        return None if t is None else (self._starts[t], self._starts[t + 1])

    def count(self, term: str) -> int:
        """How many documents hold the term (its document frequency)."""
        t = self._ids.get(term)
        return 0 if t is None else self._starts[t + 1] - self._starts[t]

    def __contains__(self, term: object) -> bool:
        return term in self._ids

    def __iter__(self) -> Iterator[str]:
        return iter(self._ids)

    def __len__(self) -> int:
        return len(self._ids)


class Bm25:
    """Okapi BM25 over a fixed list of documents (term lists), scored through postings only.

    The index is built in one pass: each term gets an id, and the (term, document) pairs are counted
    and sorted by numpy, so a term's postings are a slice and a query's scores a few array operations.
    `df`, when set (before the first score), replaces a term's document frequency (the count of its
    postings) in the idf: `TemplateFrequency` counts a group of near-duplicates once."""

    def __init__(self, docs: Sequence[Sequence[str]], k1: float = 1.2, b: float = 0.75) -> None:
        import numpy as np

        self.n = n = len(docs)
        ids: dict[str, int] = {}
        add = ids.setdefault
        flat = [add(term, len(ids)) for doc in docs for term in doc]
        lengths = np.fromiter((len(d) for d in docs), dtype=np.int64, count=n)
        owner = np.repeat(np.arange(n, dtype=np.int64), lengths)
        pairs, counts = np.unique(np.asarray(flat, dtype=np.int64) * max(n, 1) + owner, return_counts=True)
        term_of = pairs // max(n, 1)
        starts = np.zeros(len(ids) + 1, dtype=np.int64)
        np.cumsum(np.bincount(term_of, minlength=len(ids)), out=starts[1:])
        self._docs = pairs - term_of * max(n, 1)
        self._counts = counts.astype(np.float64)
        self.postings = Postings(ids, starts.tolist(), self._docs, counts)
        avg = (float(lengths.sum()) / n) if n else 1.0
        avg = avg or 1.0
        self._norm = k1 * (1 - b + b * lengths / avg)
        self.k1 = k1
        self.df: Callable[[str], float] | None = None
        self._idf: dict[str, float] = {}  # a term's idf is asked for by every hop and the matching

    @property
    def norm(self) -> list[float]:
        """Each document's length normalisation, k1 * (1 - b + b * length / average)."""
        return self._norm.tolist()

    def idf(self, term: str) -> float:
        found = self._idf.get(term)
        if found is None:
            df = self.df(term) if self.df is not None else self.postings.count(term)
            found = self._idf[term] = math.log(1 + (self.n - df + 0.5) / (df + 0.5))
        return found

    def scores(self, query: Mapping[str, float]) -> list[float]:
        """Score of every document; `query` maps a term to its weight."""
        import numpy as np

        out = np.zeros(self.n, dtype=np.float64)
        k1 = self.k1 + 1
        for term, weight in query.items():
            span = self.postings.span(term)
            if span is None or span[0] == span[1] or weight <= 0:
                continue
            lo, hi = span
            w = weight * self.idf(term) * k1
            docs = self._docs[lo:hi]
            tf = self._counts[lo:hi]
            out[docs] += w * tf / (tf + self._norm[docs])
        return out.tolist()


class TemplateFrequency:
    """Document frequency with each large template group counted once.

    Templated text (a record type filled with hundreds of names, boilerplate repeated across pages)
    repeats its words in every copy, so plain document frequency makes them common and their idf
    small: a question sharing just that word with its answer is then outranked by ordinary
    sentences that match its other words. Counted once per group, the word keeps the weight of a
    word a few sentences use, and the selector's template discount keeps only the best of the group.

    Lazy: only the holders of a term asked for (the query's, the bridges') are grouped, each once,
    so the cost is linear in the postings touched. Groups smaller than `min_group` count in full:
    ordinary prose has small chance groups ("N was born in # in N"), which should not move."""

    def __init__(self, texts: Sequence[str], postings: Postings,
                 min_group: int) -> None:
        self._texts = texts
        self._postings = postings
        self._min_group = min_group
        self._groups = TemplateGroups()
        self._group_of: dict[int, int] = {}  # chunk -> group, -1 for a chunk too short to group
        self._counts: dict[str, float] = {}

    def __call__(self, term: str) -> float:
        found = self._counts.get(term)
        if found is None:
            found = self._counts[term] = float(self._count(term))
        return found

    def share(self, term: str) -> float:
        """Template document frequency over plain: 1 when no large group holds the term."""
        plain = self._postings.count(term)
        return self(term) / plain if plain else 1.0

    def scaled(self, postings: Postings) -> Callable[[str], float]:
        """Document frequency over other documents of the same chunks (passages): their plain count
        times the term's `share`, so a passage holding a template's copy counts as the copy does."""

        def df(term: str) -> float:
            plain = postings.count(term)
            return max(1.0, plain * self.share(term)) if plain else 0.0

        return df

    def _count(self, term: str) -> int:
        holders = self._postings.get(term, ())
        if len(holders) < self._min_group:
            return len(holders)  # no group can be large enough: skip the grouping
        alone = 0
        sizes: Counter[int] = Counter()
        for i, _ in holders:
            group = self._group_of.get(i)
            if group is None:
                assigned = self._groups.assign(self._texts[i])
                group = self._group_of[i] = -1 if assigned is None else assigned
            if group < 0:
                alone += 1
            else:
                sizes[group] += 1
        return alone + sum(1 if size >= self._min_group else size for size in sizes.values())


def bm25_scores(docs: Sequence[Sequence[str]], query: Sequence[str], k1: float = 1.2,
                b: float = 0.75) -> tuple[list[float], dict[str, float]]:
    """Okapi BM25 of every document (a term list) for the query terms, with `Bm25`; also returns the
    idf of the query terms. A repeated query term weighs a little more (`query_weights`)."""
    if not docs or not query:
        return [0.0] * len(docs), {}
    index = Bm25(docs, k1, b)
    counts = Counter(query)
    weights = {t: 1.0 + 0.2 * (c - 1) for t, c in counts.items()}
    return index.scores(weights), {t: index.idf(t) for t in counts}


def _normalised(values: list[float]) -> list[float]:
    top = max(values, default=0.0)
    return [v / top for v in values] if top > 0 else [0.0] * len(values)


def query_weights(query: str) -> dict[str, float]:
    """Query terms with weights: 1 per term, a little more for repeated ones."""
    counts = Counter(query_terms(query))
    return {t: 1.0 + 0.2 * (c - 1) for t, c in counts.items()}


# -- answer types ---------------------------------------------------------------------------------


def answer_kind(query: str) -> str | None:
    """What the question asks for: a date, a number, a name or a place (None when unclear)."""
    if _WHEN.search(query):
        return "date"
    if _HOW_MANY.search(query):
        return "number"
    if _WHO.search(query):
        return "name"
    if _WHERE.search(query):
        return "place"
    return None


def holds_kind(kind: str, text: str) -> bool:
    """Whether a text holds what an answer of that kind looks like."""
    if kind == "date":
        return _YEAR.search(text) is not None or DATE.search(text) is not None
    if kind == "number":
        return _DIGIT.search(text) is not None
    return _NAME.search(text) is not None


# -- passages -------------------------------------------------------------------------------------


def _passages(source: Source, members: list[int], chunks: Sequence[Chunk]) -> list[list[int]]:
    """The source's paragraphs as chunk indices: chunks group by the paragraph they start in (a
    title line belongs to its paragraph's first sentence, so it counts with the passage)."""
    bounds = [0] + [m.end() for m in _PARAGRAPH.finditer(source.text)]
    out: list[list[int]] = []
    current = -1
    p = 0
    for i in sorted(members, key=lambda k: chunks[k].start):
        start = chunks[i].start
        while p + 1 < len(bounds) and bounds[p + 1] <= start:
            p += 1
        if p != current:
            out.append([])
            current = p
        out[-1].append(i)
    return out


def bridge_names(text: str) -> list[str]:
    """Names in a text that could link it to another passage (capitalised runs, quoted terms)."""
    return _CAPS.findall(text) + _QUOTED.findall(text)


# -- the engine -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Relevance:
    """Per-chunk relevance (in [0, 1]) with what produced it."""

    values: list[float]
    sentence: list[float]
    passage: list[float]
    hop: list[float]
    matched: list[list[str]]
    bridges: list[str]
    kind: str | None


def score_chunks(query: str, chunks: Sequence[Chunk], sources: Iterable[Source],
                 settings: Settings = Settings()) -> Relevance:
    """Relevance of every chunk to the query (see the module docstring)."""
    n = len(chunks)
    docs = [index_terms(c.text) for c in chunks]
    q = query_weights(query)
    qset = set(q)
    index = Bm25(docs, settings.k1, settings.b)
    repeats = None
    if settings.template_df > 0:
        repeats = index.df = TemplateFrequency([c.text for c in chunks], index.postings, settings.template_df)
    lengths = [_word_count(c.text) for c in chunks]
    damp = [min(1.0, n_words / settings.min_words) if settings.min_words else 1.0 for n_words in lengths]
    # keyword stuffing ("X beds, X staff, X tents: X has them all"): a sentence whose content words
    # repeat a lot is damped by its share of distinct terms
    for i, doc in enumerate(docs):
        if len(doc) >= 6:
            distinct = len(set(doc)) / len(doc)
            if distinct < STUFFED:
                damp[i] *= distinct / STUFFED

    by_source: dict[str, list[int]] = {}
    for i, c in enumerate(chunks):
        by_source.setdefault(c.source_id, []).append(i)
    groups: list[list[int]] = []
    # a source's own title (a web page's, a document's) counts with its first passage, twice, as a
    # title line inside the text does through the passage's first sentence
    extra: list[tuple[str, ...]] = []
    placed: set[int] = set()
    for source in sources:
        members = by_source.get(source.id)
        if members:
            for k, idx in enumerate(_passages(source, members, chunks)):
                groups.append(idx)
                placed.update(idx)
                extra.append(index_terms(source.title) * 2 if k == 0 and source.title else ())
    for i in range(n):  # chunks of a source the context does not list: a passage each
        if i not in placed:
            groups.append([i])
            extra.append(())
    group_of = [0] * n
    position = [0] * n
    for g, members in enumerate(groups):
        for pos, i in enumerate(members):
            group_of[i] = g
            position[i] = pos
    passage_docs = [[*extra[g], *(t for i in members for t in docs[i])] for g, members in enumerate(groups)]
    passage_index = Bm25(passage_docs, settings.k1, settings.b)
    if repeats is not None:
        passage_index.df = repeats.scaled(passage_index.postings)

    def run(query_w: Mapping[str, float]) -> tuple[list[float], list[float]]:
        s = index.scores(query_w)
        s = _normalised([v * d for v, d in zip(s, damp, strict=True)])
        return s, _normalised(passage_index.scores(query_w))

    sent, psg = run(q)
    meaning = None
    if n and not _mostly_han(q):
        meaning = _semantic(query, chunks, groups, max(settings.semantic, settings.unmatched))
    if meaning is not None and settings.unmatched > 0:
        sent = _fill_unmatched(sent, meaning[0], damp, settings.unmatched)
    elif n and settings.unmatched > 0:
        # Chinese, or no vectors: the company the question's terms keep in this document
        company = cooc.closeness(q, docs, passage_docs, passage_index.postings, passage_index.postings.count)
        if company is not None:
            sent = _fill_unmatched(sent, company, damp, settings.unmatched)
    if meaning is not None and settings.semantic > 0:
        # before the hops, so a sentence found by meaning can seed one; damped like its BM25
        w = settings.semantic
        sent = _normalised([(1 - w) * v + w * m * d for v, m, d in zip(sent, meaning[0], damp, strict=True)])
        psg = _normalised([(1 - w) * v + w * m for v, m in zip(psg, meaning[1], strict=True)])
    first_hop = list(sent)
    hop = [0.0] * n
    used_bridges: list[str] = []
    frontier = [(i, sent[i]) for i in sorted(range(n), key=lambda i: -sent[i])[:settings.hop_seeds]
                if sent[i] > 0]
    seen = {i for i, _ in frontier}
    for _ in range(settings.hops):
        following: list[tuple[int, float]] = []
        for i, weight in frontier:
            names = {t for name in bridge_names(chunks[i].text) for t in index_terms(name)} - qset
            if not names:
                continue
            bridge = sorted(names, key=lambda t: (-index.idf(t), t))[:settings.bridge_terms]
            bset = frozenset(bridge)
            query2 = {t: 1.0 for t in bridge}
            for t in qset:
                query2[t] = 0.2 if t in docs[i] else 0.7
            s2, p2 = run(query2)
            scale = weight * settings.hop_decay
            holders = sorted({j for t in bset for j, _ in index.postings.get(t, ())} - {i})
            best_j, best_v = -1, 0.0
            for j in holders:
                v = scale * s2[j]
                if v > sent[j]:
                    sent[j] = v
                if v > hop[j]:
                    hop[j] = v
                if s2[j] > best_v and j not in seen:
                    best_j, best_v = j, s2[j]
            for g in {group_of[j] for j in holders}:
                psg[g] = max(psg[g], scale * p2[g])
            used_bridges.extend(t for t in bridge if t not in used_bridges)
            if best_j >= 0:
                following.append((best_j, scale * best_v))
                seen.add(best_j)
        frontier = following
        if not frontier:
            break

    kind = answer_kind(query) if settings.answer_type > 0 else None
    values: list[float] = []
    passage_of: list[float] = []
    for i, chunk in enumerate(chunks):
        g = group_of[i]
        members = groups[g]
        pos = position[i]
        near = max((sent[members[j]] for j in (pos - 1, pos + 1) if 0 <= j < len(members)), default=0.0)
        pv = psg[g]
        # passage evidence lifts a sentence, and never pulls a strong one down: a fact stated
        # once in an unrelated passage keeps the weight of its own words
        value = ((1 - settings.passage_weight - settings.neighbor_weight) * sent[i]
                 + settings.passage_weight * max(pv, sent[i]) + settings.neighbor_weight * near)
        if pos == 0:
            value += settings.lead_weight * pv
        if kind and (sent[i] > 0 or pv > 0.5) and holds_kind(kind, chunk.text):
            value += settings.answer_type * (1 - value)
        values.append(value)
        passage_of.append(pv)
    top = max(values, default=0.0)
    values = [v / top for v in values] if top > 0 else values
    matched: list[list[str]] = [[] for _ in range(n)]
    for t in sorted(qset, key=lambda t: (-index.idf(t), t)):
        for j, _ in index.postings.get(t, ()):
            if len(matched[j]) < 8:
                matched[j].append(t)
    return Relevance(values, first_hop, passage_of, hop, matched, used_bridges[:12], kind)


def _fill_unmatched(sent: list[float], meaning: list[float], damp: list[float], weight: float) -> list[float]:
    """Sentences without lexical evidence take `weight` times their closeness in meaning (damped
    like BM25 for fragments); the others keep theirs. BM25 gives all of them 0, so meaning only
    orders what words cannot, and stays below the sentences that match a word well."""
    return [weight * m * d if v == 0 else v for v, m, d in zip(sent, meaning, damp, strict=True)]


def _mostly_han(query: Mapping[str, float]) -> bool:
    """Whether most of the question's terms are Chinese (its meaning then comes from co-occurrence:
    the word vectors know English words only)."""
    han = sum(1 for t in query if ts.is_han(t[0]))
    return han > 0 and han >= len(query) - han


def _semantic(query: str, chunks: Sequence[Chunk], groups: list[list[int]],
              weight: float) -> tuple[list[float], list[float]] | None:
    """Semantic closeness of each chunk and each passage to the query, in [0, 1]: the cosine of
    static word-vector sums, measured from the document's median (every sentence of a text is a
    little similar to every question) and scaled so the closest is 1. None when every use of it is
    off (`weight` 0), the table is unavailable, or the query has no known words."""
    if weight <= 0:
        return None
    # the query first: a question without known words (Chinese) costs no embedding of the text
    asked = sem.sums([query])
    if asked is None or not asked[0].any():
        return None
    rows = sem.sums([c.text for c in chunks])
    if rows is None:
        return None
    import numpy as np

    qv = sem.unit(asked)[0]
    owner = np.empty(len(chunks), dtype=np.int64)
    for g, members in enumerate(groups):
        owner[members] = g
    passages = np.zeros((len(groups), rows.shape[1]), dtype=rows.dtype)
    np.add.at(passages, owner, rows)
    return _scaled(sem.unit(rows) @ qv), _scaled(sem.unit(passages) @ qv)


def _scaled(sims: object) -> list[float]:
    """Cosines to [0, 1]: from the median up to the best."""
    import numpy as np

    values = np.asarray(sims, dtype=np.float64)
    floor = float(np.median(values))
    top = float(values.max()) - floor
    if top <= 0:
        return [0.0] * len(values)
    return np.clip((values - floor) / top, 0.0, 1.0).tolist()


_HAN_CHAR = regex.compile(f"[{HAN_BASIC}]")


def _word_count(text: str) -> int:
    """Words for the fragment damping: whitespace words, and two Han characters count as one."""
    words = len(text.split())
    return words if text.isascii() else words + len(_HAN_CHAR.findall(text)) // 2
