"""Near-duplicate detection: word shingles, one-permutation MinHash and LSH band keys.

Used by `clean.dedupe` (paragraphs within a run) and by the chunk store (pages across batches and
processes). `stable=True` hashes with BLAKE2b so signatures mean the same in every process; the
default uses Python's `hash`, which is faster but salted per process.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterable, Sequence

import regex

WORDS = regex.compile(r"[\p{Han}\p{Hiragana}\p{Katakana}\p{Hangul}]|[\p{L}\p{N}]+")
BINS = 64
BANDS = 16
ROWS = BINS // BANDS
_MASK = (1 << 64) - 1
_MIX = 0x9E3779B97F4A7C15
_PACK = struct.Struct(f"<{BINS}Q")


def words(text: str) -> list[str]:
    """Lower-cased words; every CJK character is a word of its own."""
    return [w.lower() for w in WORDS.findall(text)]


def _stable_hash(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).digest(),
                          "little")


def shingles(tokens: Sequence[str], width: int = 2, *, stable: bool = False) -> set[int]:
    """Hashes of the word `width`-grams of a text (the whole text when it is shorter)."""
    hasher = _stable_hash if stable else hash
    if len(tokens) < width:
        return {hasher(" ".join(tokens))}
    return {hasher(" ".join(tokens[i:i + width])) for i in range(len(tokens) - width + 1)}


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
