"""Near-duplicate detection: word shingles, one-permutation MinHash and LSH band keys, and an
exact Jaccard index.

The chunk store (pages across batches and processes) keeps MinHash signatures and LSH band keys.
`stable=True` hashes with BLAKE2b so signatures mean the same in every process; the default uses
Python's `hash`, which is faster but salted per process.

`clean.dedupe` (paragraphs within a run) uses `JaccardIndex`, which finds every earlier set at or
above the threshold without estimating: prefix filtering, rarest shingles first (Bayardo et al.,
"Scaling up all pairs similarity search", 2007). MinHash with LSH put every short paragraph in one
bucket, because their one-permutation signatures are mostly empty bins of the same value, so the
comparisons grew with the square of the input. Prefix filtering alone is quadratic too on
templated text (every shingle common), so each lookup's work is bounded: exact on real text,
a bounded best effort on templates (see `JaccardIndex`).
"""

from __future__ import annotations

import hashlib
import itertools
import math
import re
import struct
import unicodedata
from collections import Counter
from collections.abc import Iterable, Sequence

import regex

WORDS = regex.compile(r"[\p{Han}\p{Hiragana}\p{Katakana}\p{Hangul}]|[\p{L}\p{N}]+")
_ASCII_WORDS = re.compile(r"[a-z0-9]+")  # WORDS on lower-cased ASCII text
BINS = 64
BANDS = 16
ROWS = BINS // BANDS
_MASK = (1 << 64) - 1
_MIX = 0x9E3779B97F4A7C15
_PACK = struct.Struct(f"<{BINS}Q")


def words(text: str) -> list[str]:
    """Lower-cased words; every CJK character is a word of its own.

    The text is lower-cased once, before the split: `str.lower` maps every character alone, to
    one character of the same class (letter, number, CJK, other), except U+0130 (to two) and
    U+03A3 (final sigma, by context), so the words are the same as lower-casing each word."""
    if text.isascii():
        return _ASCII_WORDS.findall(text.lower())
    if not unicodedata.is_normalized("NFKC", text):  # full-width and ASCII copies are the same words
        text = unicodedata.normalize("NFKC", text)
    if "\u0130" in text or "\u03a3" in text:
        return [w.lower() for w in WORDS.findall(text)]
    return WORDS.findall(text.lower())


def _stable_hash(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).digest(),
                          "little")


def shingles(tokens: Sequence[str], width: int = 2, *, stable: bool = False) -> set[int]:
    """Hashes of the word `width`-grams of a text (the whole text when it is shorter)."""
    if not stable:  # hashes of word tuples: the same sets, without joining strings
        if len(tokens) < width:
            return {hash(tuple(tokens))}
        return set(map(hash, zip(*(tokens[i:] for i in range(width)), strict=False)))
    if len(tokens) < width:
        return {_stable_hash(" ".join(tokens))}
    return {_stable_hash(" ".join(tokens[i:i + width])) for i in range(len(tokens) - width + 1)}


def shingle_order(tokens: Sequence[str], width: int = 2) -> list[int]:
    """The distinct shingles of `shingles` (not stable) in the order they first occur in the text:
    counted in that order (`shingle_counts`), they give `JaccardIndex` the same order of shingles
    in every process, although `hash` values differ between processes."""
    if len(tokens) < width:
        return [hash(tuple(tokens))]
    return list(dict.fromkeys(map(hash, zip(*(tokens[i:] for i in range(width)), strict=False))))


def minhash(hashes: Iterable[int]) -> tuple[int, ...]:
    """One-permutation MinHash: each mixed hash goes to one of 64 bins, a bin keeps its minimum.
    One multiplication per shingle instead of 64; empty bins stay at the maximum value."""
    mins = [_MASK] * BINS
    for h in hashes:
        v = (h * _MIX) & _MASK
        b = v >> 58
        if v < mins[b]:
            mins[b] = v
    return tuple(mins)


def signature(text: str) -> tuple[int, ...]:
    """A process-independent MinHash signature of a text (word bigrams)."""
    return minhash(shingles(words(text), stable=True))


def similarity(a: Sequence[int], b: Sequence[int]) -> float:
    """Estimated Jaccard similarity of two signatures: the share of bins that agree (bins empty in
    both are not counted)."""
    agree = total = 0
    for x, y in zip(a, b, strict=True):
        if x == _MASK and y == _MASK:
            continue
        total += 1
        agree += x == y
    return agree / total if total else 1.0


def band_keys(sig: Sequence[int]) -> list[tuple[int, int]]:
    """(band, key) pairs for LSH: two signatures sharing any pair are candidates."""
    keys = []
    for band in range(BANDS):
        rows = sig[band * ROWS:(band + 1) * ROWS]
        digest = hashlib.blake2b(struct.pack(f"<{ROWS}Q", *rows), digest_size=8).digest()
        keys.append((band, int.from_bytes(digest, "little", signed=True)))
    return keys


def pack(sig: Sequence[int]) -> bytes:
    """A signature as 512 bytes, for storage."""
    return _PACK.pack(*sig)


def unpack(data: bytes) -> tuple[int, ...]:
    """The inverse of `pack`."""
    return _PACK.unpack(data)


def jaccard(a: set[int], b: set[int]) -> float:
    """|a & b| / |a | b| (1.0 for two empty sets)."""
    common = len(a & b)
    union = len(a) + len(b) - common
    return common / union if union else 1.0


def shingle_counts(sets: Iterable[Iterable[int]]) -> Counter[int]:
    """How many of `sets` (each without repeats) hold each shingle: the frequency `JaccardIndex`
    orders prefixes by. The counter keeps the order shingles are first met in, which breaks ties
    (`shingle_order` lists make that the same in every process; sets iterate by hash value)."""
    counts: Counter[int] = Counter()
    for shingles in sets:
        counts.update(shingles)
    return counts


class JaccardIndex:
    """Non-empty sets added one by one; `near` tells whether an added set has Jaccard similarity >=
    threshold with a given one. Exact while a lookup's candidates fit its bounds (see below).

    Each set is indexed under its prefix: its rarest shingles (by `frequency`, ties in the order
    `frequency` met them first), as many as a set at the threshold can miss, plus one. Two sets at
    or above the threshold share a shingle in their prefixes, so only sets met in the posting lists
    of the query's prefix are compared, and only when their sizes allow the threshold. `frequency`
    (`shingle_counts` of every set that will be added or looked up) puts rare shingles first, so
    posting lists stay short, and tells which shingles only one set holds: those are skipped, so a
    distinct paragraph, whose prefix is all its own shingles, is neither looked up nor indexed.
    Without `frequency` shingles go by value. `comparisons` counts the Jaccard computations.

    Bounds: on templated text (one sentence with names and numbers varied) every shingle is
    common, so the posting lists grow with the input and each lookup would meet, and compare,
    most earlier sets: quadratic. So a lookup reads at most `max_postings` entries of each posting
    list (the newest), and when it meets more than `max_checks` entries it compares only
    `max_checks` candidates: those sharing the most prefix shingles with the query (a near
    duplicate shares most of them). Fewer are compared as met, as without bounds. Real text stays
    inside both bounds (a million tokens of the benchmark corpus: at most 95 entries and 10
    candidates per lookup at threshold 0.75, under 128 candidates at 0.5), so it is deduplicated
    exactly; `capped` counts the lookups that hit a bound and found nothing: there a near
    duplicate may be missed (kept), never a distinct set dropped. `None` lifts a bound.
    """

    def __init__(self, threshold: float, frequency: Counter[int] | None = None, *,
                 max_postings: int | None = 256, max_checks: int | None = 128) -> None:
        if not 0 < threshold <= 1:
            raise ValueError("threshold must be in (0, 1]")
        if (max_postings is not None and max_postings < 1) or (max_checks is not None and max_checks < 1):
            raise ValueError("max_postings and max_checks must be positive (or None)")
        self.threshold = threshold
        self.frequency = frequency
        self.max_postings = max_postings
        self.max_checks = max_checks
        # the shingles more than one set holds, by rank in the order: rarest first, ties first met
        self._rank: dict[int, int] | None = None if frequency is None else {
            s: i for i, s in enumerate(sorted((s for s, n in frequency.items() if n > 1),
                                              key=frequency.__getitem__))}
        self.comparisons = 0
        self.capped = 0
        self._sets: list[set[int]] = []
        self._lengths: list[int] = []
        self._postings: dict[int, list[int]] = {}

    def _overlap(self, size: int) -> int:
        """The fewest shared shingles a set of `size` needs with a set at the threshold (the
        epsilon keeps float rounding of threshold * size from asking for one too many)."""
        return max(1, math.ceil(self.threshold * size - 1e-9))

    def _prefix(self, shingles: set[int]) -> list[int]:
        length = len(shingles) - self._overlap(len(shingles)) + 1
        rank = self._rank
        if rank is None:
            return sorted(shingles)[:length]
        shared = list(rank.keys() & shingles)
        length -= len(shingles) - len(shared)  # the set's own shingles come first in the order
        if length <= 0:
            return []
        shared.sort(key=rank.__getitem__)
        return shared[:length]

    def near(self, shingles: set[int]) -> bool:
        """Whether an added set is at or above the threshold with `shingles`."""
        return self._near(shingles, self._prefix(shingles))

    def _sizes(self, size: int) -> tuple[int, int]:
        """The sizes a set may have to reach the threshold with a set of `size`: the same rule as
        `_overlap` (the smaller set must hold the larger one's overlap), solved for the other size."""
        low = self._overlap(size)
        high = int(size / self.threshold) + 1
        while high > size and self._overlap(high) > size:
            high -= 1
        return low, high

    def _near(self, shingles: set[int], prefix: list[int]) -> bool:
        postings, limit = self._postings, self.max_postings
        lists = [postings[s] for s in prefix if s in postings]
        if not lists:
            return False
        capped = False
        if limit is not None and any(len(posting) > limit for posting in lists):
            lists = [posting[-limit:] for posting in lists]  # the newest entries
            capped = True
        size = len(shingles)
        low, high = self._sizes(size)
        sets, lengths, threshold, checks = self._sets, self._lengths, self.threshold, self.max_checks
        budget = None
        if checks is None or sum(map(len, lists)) <= checks:  # few candidates: in the order met
            candidates: Iterable[int] = dict.fromkeys(itertools.chain.from_iterable(lists))
        else:  # the ones sharing the most prefix shingles with the query first, up to the bound
            shared: Counter[int] = Counter()
            for posting in lists:
                shared.update(posting)
            candidates = sorted(shared, key=shared.__getitem__, reverse=True)  # ties: in the order met
            budget = checks
        for index in candidates:
            if not low <= lengths[index] <= high:  # |a & b| <= min size, and needs >= t * max size
                continue
            if budget is not None:
                if budget == 0:
                    capped = True
                    break
                budget -= 1
            other = sets[index]
            self.comparisons += 1
            common = len(shingles & other)
            if common / (size + len(other) - common) >= threshold:
                return True
        self.capped += capped
        return False

    def add(self, shingles: set[int]) -> None:
        """Index a set (kept by reference: do not change it afterwards)."""
        self._add(shingles, self._prefix(shingles))

    def _add(self, shingles: set[int], prefix: list[int]) -> None:
        if not prefix:  # no other set can share a prefix shingle with it
            return
        index = len(self._sets)
        self._sets.append(shingles)
        self._lengths.append(len(shingles))
        for shingle in prefix:
            self._postings.setdefault(shingle, []).append(index)

    def add_unless_near(self, shingles: set[int]) -> bool:
        """True when `shingles` is near an added set; otherwise adds it and returns False."""
        prefix = self._prefix(shingles)
        if self._near(shingles, prefix):
            return True
        self._add(shingles, prefix)
        return False
