"""Template groups: sentences that are one template filled with different names or numbers.

Templated and syndicated text (lists of similar records, boilerplate repeated across pages, "X joined
the choir in 1998" a hundred times) gives hundreds of sentences the same relevance to a question:
ranked by value alone they fill any budget with copies of one template. Grouping them lets a
selector keep the first of a group at its value and discount the rest, so other candidates reach
the budget; and lets the relevance engine count a group once in a word's document frequency, so
the word the copies repeat keeps its weight (`compactor.text.relevance.TemplateFrequency`).

A sentence's *skeleton* is its words with the slots masked: digits (and Chinese numerals) become
``#``, capitalised Latin words that are not stop words become ``N`` (names), every Han character is
a word of its own. Two sentences belong to one group when the Jaccard similarity of their skeleton
word bigrams reaches a threshold (0.55: a short English sentence with another verb does not pass;
0.35 for a Chinese sentence, where a name and a place of two or three characters each, unmasked,
break half the bigrams of a record of a dozen characters). Candidates come
from buckets keyed by a bottom-k MinHash sketch (the few smallest shingle hashes), and each newcomer
is compared with the leaders of its buckets only, so grouping n sentences costs about n times a
constant, never n squared.
"""

from __future__ import annotations

import heapq
import itertools
import zlib
from collections.abc import Iterable, Sequence

import regex

from compactor.text.terms import stopwords

THRESHOLD = 0.55  # skeleton bigram Jaccard at or above which two sentences share a template
# the same for a Chinese sentence: every Han character is a word, so a name or place of two or three
# characters breaks three or four bigrams where an English name is masked whole; two such slots in a
# sentence of a dozen characters leave a Jaccard near 0.35
HAN_THRESHOLD = 0.35
MIN_WORDS = 5  # shorter sentences are never grouped: one slot would be a quarter of them
ANCHORS = 4  # a sentence is filed under its smallest few shingle hashes (a bottom-k MinHash sketch)
LEADERS_PER_BUCKET = 4  # leaders compared per bucket: bounds the work on text with common phrases

_WORD = regex.compile(r"(?V1)\p{Han}|[[\p{L}\p{N}]--\p{Han}]+")
_HAN = regex.compile(r"\p{Han}")
_NUMBER = regex.compile(r"\d|^[零〇一二三四五六七八九十百千万亿两]+$")


def skeleton(text: str) -> list[str]:
    """The words of a text with the slots a template varies masked: numbers as ``#``, capitalised
    non-stop words (names) as ``N``; lower case otherwise."""
    stop = stopwords("en")
    out: list[str] = []
    for word in _WORD.findall(text):
        if _NUMBER.search(word):
            out.append("#")
        elif word[0].isupper() and word.lower() not in stop:
            out.append("N")
        else:
            out.append(word.lower())
    return out


def shingle_set(text: str) -> frozenset[int]:
    """Hashes of the skeleton's word bigrams; empty for a text under `MIN_WORDS` words. CRC-32, not
    `hash`: the groups, and so what is kept, must not change with the process's hash seed."""
    return _shingles(skeleton(text))


def _shingles(words: Sequence[str]) -> frozenset[int]:
    if len(words) < MIN_WORDS:
        return frozenset()
    return frozenset(zlib.crc32(f"{a} {b}".encode()) for a, b in itertools.pairwise(words))


def _mostly_han(words: Sequence[str]) -> bool:
    """Whether most skeleton words are single Han characters (a Chinese sentence)."""
    return 2 * sum(1 for w in words if len(w) == 1 and _HAN.match(w)) > len(words)


def _anchors(shingles: frozenset[int]) -> list[int]:
    """The `ANCHORS` smallest hashes: two sets at Jaccard J share their minimum with probability J,
    and usually one of their few smallest when J is high."""
    return heapq.nsmallest(ANCHORS, shingles)


class TemplateGroups:
    """Assigns sentences, one at a time, to template groups; the first of a group leads it.

    Feed sentences best first: `add` returns how many earlier members the sentence's group has
    (0 for a leader), which is what a selector discounts by."""

    def __init__(self, threshold: float = THRESHOLD, han_threshold: float = HAN_THRESHOLD) -> None:
        self.threshold = threshold
        self.han_threshold = han_threshold
        self._buckets: dict[int, list[int]] = {}
        self._leaders: list[frozenset[int]] = []
        self._sizes: list[int] = []

    def add(self, text: str) -> int:
        """Put `text` in the group of a similar leader, or lead a new one; its rank in the group."""
        group = self.assign(text)
        return 0 if group is None else self._sizes[group] - 1

    def assign(self, text: str) -> int | None:
        """Put `text` in a group as `add` does; the group's number (None for a text too short to
        group), for callers that count groups rather than rank within them."""
        words = skeleton(text)
        mine = _shingles(words)
        if not mine:
            return None
        keys = _anchors(mine)
        group = self._match(mine, keys, self.han_threshold if _mostly_han(words) else self.threshold)
        if group is not None:
            self._sizes[group] += 1
            return group
        group = len(self._leaders)
        self._leaders.append(mine)
        self._sizes.append(1)
        for key in keys:
            leaders = self._buckets.setdefault(key, [])
            leaders.append(group)
            if len(leaders) > LEADERS_PER_BUCKET:
                del leaders[0]  # the newest leaders stay: templates cluster in the text
        return group

    def _match(self, mine: frozenset[int], keys: Sequence[int], threshold: float) -> int | None:
        """The most similar leader of the buckets `mine` falls in, if at least `threshold` similar."""
        best, best_score = None, threshold
        tried: set[int] = set()
        for key in keys:
            for group in self._buckets.get(key, ()):
                if group in tried:
                    continue
                tried.add(group)
                theirs = self._leaders[group]
                common = len(mine & theirs)
                score = common / (len(mine) + len(theirs) - common)
                if score >= best_score:
                    best, best_score = group, score
        return best


def group_ranks(texts: Iterable[str], threshold: float = THRESHOLD,
                han_threshold: float = HAN_THRESHOLD) -> list[int]:
    """For texts in order (best first), each one's rank within its template group (0: leader)."""
    groups = TemplateGroups(threshold, han_threshold)
    return [groups.add(text) for text in texts]
