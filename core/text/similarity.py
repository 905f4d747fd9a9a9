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

`clean.dedupe` reads a whole text's words at once: `word_values` gives each word a 64-bit value
from the text's bytes or code points (numpy, no string per word), `fingerprints` groups paragraphs
with the same words, and `ShingleTable` counts every bigram's paragraphs with a few sorts and
gives `JaccardIndex` the prefixes it would compute, so only the paragraphs that have a prefix
(most have none: their rarest shingles are their own) build a set.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import math
import re
import struct
import unicodedata
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

import regex

if TYPE_CHECKING:
    import numpy as np

WORDS = regex.compile(r"[\p{Han}\p{Hiragana}\p{Katakana}\p{Hangul}]|[\p{L}\p{N}]+")
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
    U+03A3 (final sigma, by context), so the words are the same as lower-casing each word.
    Where every letter and digit is ASCII (English with curly quotes and dashes), the words are
    its `[a-z0-9]+` runs, split in C (`bytes.translate`) instead of by a regex."""
    if text.isascii():
        return _ascii_words(text)
    text = _nfkc(text)  # full-width and ASCII copies are the same words
    if _only_ascii_letters(text):
        return _ascii_words(text)
    if "\u0130" in text or "\u03a3" in text:
        return [w.lower() for w in WORDS.findall(text)]
    return WORDS.findall(text.lower())


# ASCII letters and digits as themselves (capitals lower-cased), every other byte a space
_WORD_BYTES = bytes(c + 32 if 65 <= c <= 90 else c if 48 <= c <= 57 or 97 <= c <= 122 else 32
                    for c in range(256))
_NON_ASCII = re.compile(r"[^\x00-\x7f]")
_WORDISH: dict[str, bool] = {}  # non-ASCII characters seen: whether one can be, or lower-case into, a word


def _ascii_words(text: str) -> list[str]:
    """The words of a text whose non-ASCII characters are all separators (`_folded`)."""
    return _folded(text).decode("ascii").split()


def _only_ascii_letters(text: str) -> bool:
    """Whether no non-ASCII character of `text` is, or lower-cases into, a `WORDS` character: then
    `WORDS.findall(text.lower())` is the `[a-z0-9]+` runs with every non-ASCII character a break."""
    for match in _NON_ASCII.finditer(text):
        char = match.group()
        wordish = _WORDISH.get(char)
        if wordish is None:
            wordish = _WORDISH[char] = WORDS.search(char + char.lower()) is not None
        if wordish:
            return False
    return True


# Blocks where most of what NFKC changes in real text lives: Latin-1 (no-break space, superscripts),
# general punctuation (ellipsis), letterlike and number forms, enclosed numbers, CJK punctuation and
# compatibility squares, full-width and half-width forms
_FOLD_BLOCKS = ((0xA0, 0x100), (0x2000, 0x2070), (0x2100, 0x2190), (0x2460, 0x2500), (0x3000, 0x3040),
                (0x3200, 0x3400), (0xFF00, 0xFFF0))


@functools.cache
def _fold_table() -> tuple[re.Pattern[str], dict[str, str]]:
    """A class of the characters of `_FOLD_BLOCKS` that NFKC changes, and their NFKC forms."""
    table = {c: n for c in (chr(i) for a, b in _FOLD_BLOCKS for i in range(a, b))
             if (n := unicodedata.normalize("NFKC", c)) != c}
    return re.compile("[" + "".join(map(re.escape, table)) + "]"), table


def _nfkc(text: str) -> str:
    """`unicodedata.normalize("NFKC", text)`, by replacing the common characters NFKC changes one by
    one when that is enough. Replacing a character by its NFKC form keeps the text's NFKC form (the
    two are compatibility equivalent), so a result that is already NFKC is the text's NFKC form;
    otherwise it is normalised as a whole (a combining mark, a character outside the blocks)."""
    if unicodedata.is_normalized("NFKC", text):
        return text
    pattern, table = _fold_table()
    folded = pattern.sub(lambda m: table[m.group()], text)
    if unicodedata.is_normalized("NFKC", folded):
        return folded
    return unicodedata.normalize("NFKC", folded)


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


# Word values for `ShingleTable`, one 64-bit integer per word, equal for equal words: an ASCII word
# of up to 8 letters is its bytes read as a little-endian integer; of 9-16, the first 8 so read xor
# the rest mixed with a salt; a non-ASCII word of up to 3 characters, its code points (21 bits each)
# under the top bit; any other word, the `hash` of its bytes (ASCII) or of itself. So only the
# rare long words cost a Python call. `word_values` then scrambles every value with a salt, so
# bigram values built from them collide as rarely as `hash` values do. The salts come from `hash`:
# they change with the process like `hash`, and stay put under a fixed PYTHONHASHSEED.
_FITS = 8
_TAG = 1 << 63
_CODE_BITS = 21
_SALT = hash("compactor.text.similarity.word_values") & _MASK
_SALT_HIGH = hash("compactor.text.similarity.word_values.high") & _MASK
_PAIR = 0x9E3779B97F4A7C15  # odd multipliers: a bigram from its two words, a one-word list apart
_ONE = 0xC2B2AE3D27D4EB4F
_SPACE = 32
_CJK = regex.compile(r"[\p{Han}\p{Hiragana}\p{Katakana}\p{Hangul}]")  # WORDS' two kinds of character
_LETTER = regex.compile(r"[\p{L}\p{N}]")
_KNOWN, _IS_CJK, _IS_LETTER = 1, 2, 4


def _mixed(x: int) -> int:
    """splitmix64's finaliser: a bijection of 64-bit integers that spreads every bit."""
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK
    return x ^ (x >> 31)


def _mixed_array(x: np.ndarray) -> np.ndarray:
    import numpy as np

    x = x ^ (x >> np.uint64(30))
    x *= np.uint64(0xBF58476D1CE4E5B9)
    x ^= x >> np.uint64(27)
    x *= np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def word_value(word: str) -> int:
    """The value `word_values` gives a word, before scrambling (see above)."""
    if not word.isascii():
        if len(word) <= 3:
            return _TAG | sum(ord(c) << (_CODE_BITS * i) for i, c in enumerate(word))
        return hash(word) & _MASK
    data = word.encode("ascii")
    if len(data) <= _FITS:
        return int.from_bytes(data, "little")
    if len(data) <= 2 * _FITS:
        return int.from_bytes(data[:_FITS], "little") ^ _mixed(int.from_bytes(data[_FITS:], "little")
                                                              ^ _SALT_HIGH)
    return hash(data) & _MASK


def word_values(text: str, spans: Sequence[tuple[int, int]]) -> tuple[np.ndarray, np.ndarray]:
    """The values (uint64, scrambled) of `words(text[a:b])` for each span, spans one after the
    other, and how many words each span has: `words` in bulk, without a string per word.

    Spans whose words are the `[a-z0-9]+` runs of their folded text (ASCII, or NFKC with no letter
    beyond ASCII: most English) are read from one folded byte copy of the text; the others (CJK,
    accented letters) from the code points of their NFKC, lower-cased text, split as `WORDS` does."""
    folded: bytes | None = None
    plain: list[bytes] = []  # folded spans
    others: list[str] = []  # the NFKC, lower-cased text of the other spans
    odd: list[list[str]] = []  # words of spans whose lower case is not one character for one
    kinds: list[int] = []
    for a, b in spans:
        part = text[a:b]
        if part.isascii() or (unicodedata.is_normalized("NFKC", part) and _only_ascii_letters(part)):
            if folded is None:
                folded = _folded(text)
            plain.append(folded[a:b])
            kinds.append(0)
            continue
        part = _nfkc(part)
        if _only_ascii_letters(part):
            plain.append(_folded(part))
            kinds.append(0)
        elif "\u0130" in part or "\u03a3" in part:
            odd.append(words(part))
            kinds.append(2)
        else:
            others.append(part.lower())
            kinds.append(1)
    found = [_plain_values(plain), _other_values(others), _odd_values(odd)]
    return _in_span_order(kinds, found)


def _folded(text: str) -> bytes:
    """One byte per character: ASCII letters (lower-cased) and digits as themselves, the rest spaces."""
    return text.encode("ascii", "replace").translate(_WORD_BYTES)


def _in_span_order(kinds: list[int], found: list[tuple[np.ndarray, np.ndarray]],
                   ) -> tuple[np.ndarray, np.ndarray]:
    """Values and counts of spans read in groups (span i in group `kinds[i]`), back in span order
    and scrambled."""
    import numpy as np

    group = np.asarray(kinds, np.int64)
    counts = np.zeros(len(kinds), np.int64)
    first = np.zeros(len(kinds), np.int64)  # where each span's words start in `every`
    done = 0
    for kind, (values, group_counts) in enumerate(found):
        mine = group == kind
        counts[mine] = group_counts
        first[mine] = done + np.cumsum(group_counts) - group_counts
        done += len(values)
    every = np.concatenate([values for values, _ in found])
    starts = np.cumsum(counts) - counts
    index = np.arange(done) + np.repeat(first - starts, counts)
    return _scrambled(every[index]), counts


def _scrambled(values: np.ndarray) -> np.ndarray:
    import numpy as np

    return _mixed_array(values ^ np.uint64(_SALT))


def _plain_values(parts: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
    """Values and word counts of folded parts: words are the runs of bytes other than space."""
    import numpy as np

    stream = b" ".join(parts)
    units = np.frombuffer(stream + b" " * (2 * _FITS + 1), np.uint8)
    word = units[:len(stream) + 1] != _SPACE
    edges = np.flatnonzero(word[1:] != word[:-1]) + 1
    if word[0]:
        edges = np.concatenate(([0], edges))
    starts, ends = edges[0::2], edges[1::2]
    lengths = ends - starts
    # the 8 bytes from every offset as one little-endian integer, cut to the word's length
    window = np.ndarray(shape=(len(stream) + _FITS,), dtype="<u8", buffer=units, strides=(1,))
    low = np.array([(1 << (8 * n)) - 1 for n in range(_FITS + 1)], np.uint64)
    values = window[starts] & low[np.minimum(lengths, _FITS)]
    middle = np.flatnonzero((lengths > _FITS) & (lengths <= 2 * _FITS))
    if len(middle):
        high = window[starts[middle] + _FITS] & low[lengths[middle] - _FITS]
        values[middle] ^= _mixed_array(high ^ np.uint64(_SALT_HIGH))
    _fill_long(values, starts, ends, stream)
    return values, _counts_per_part(starts, [len(p) for p in parts])


def _counts_per_part(starts: np.ndarray, sizes: list[int]) -> np.ndarray:
    """How many of the words starting at `starts` fall in each part of a stream of parts of `sizes`
    joined by one separator."""
    import numpy as np

    if not sizes:
        return np.zeros(0, np.int64)
    offsets = np.cumsum([0] + [size + 1 for size in sizes[:-1]], dtype=np.int64)
    first = np.searchsorted(starts, offsets)
    return np.diff(np.append(first, len(starts)))


def _packed(units: np.ndarray, starts: np.ndarray, lengths: np.ndarray, bits: int, width: int,
            ) -> np.ndarray:
    """The first `width` units of each word, `bits` each, little end first (zero past its end)."""
    import numpy as np

    out = np.zeros(len(starts), np.uint64)
    last = len(units) - 1
    for j in range(width):
        unit = units[np.minimum(starts + j, last)].astype(np.uint64)
        unit[lengths <= j] = 0
        out |= unit << np.uint64(bits * j)
    return out


def _fill_long(values: np.ndarray, starts: np.ndarray, ends: np.ndarray, source: bytes | str) -> None:
    """The values of the words longer than 16 characters (Python's)."""
    import numpy as np

    long = np.flatnonzero(ends - starts > 2 * _FITS)
    if len(long):
        bounds = zip(starts[long].tolist(), ends[long].tolist(), strict=True)
        if isinstance(source, bytes):
            values[long] = np.fromiter((hash(source[s:e]) & _MASK for s, e in bounds), np.uint64, len(long))
        else:
            values[long] = np.fromiter((word_value(source[s:e]) for s, e in bounds), np.uint64, len(long))


def _other_values(parts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Values and word counts of NFKC, lower-cased parts, from their code points."""
    import numpy as np

    if not parts:
        return np.zeros(0, np.uint64), np.zeros(0, np.int64)
    stream = " ".join(parts)
    units = np.frombuffer((stream + " ").encode("utf-32-le", "surrogatepass"), np.uint32)
    starts, ends = _word_bounds(_class_table()[_classes_known(units)])
    lengths = ends - starts
    widest = np.maximum.reduceat(units, np.stack((starts, ends), 1).ravel())[0::2]
    ascii_word = widest < 128
    values = np.zeros(len(starts), np.uint64)
    short = ~ascii_word & (lengths <= 3)
    values[short] = _packed(units, starts[short], lengths[short], _CODE_BITS, 3) | np.uint64(_TAG)
    plain = ascii_word & (lengths <= 2 * _FITS)
    values[plain] = _packed(units, starts[plain], lengths[plain], 8, _FITS)
    middle = plain & (lengths > _FITS)
    if middle.any():
        high = _packed(units, starts[middle] + _FITS, lengths[middle] - _FITS, 8, _FITS)
        values[middle] ^= _mixed_array(high ^ np.uint64(_SALT_HIGH))
    _fill_long(values, starts, ends, stream)
    rest = np.flatnonzero(~ascii_word & (lengths > 3) & (lengths <= 2 * _FITS))
    bounds = zip(starts[rest].tolist(), ends[rest].tolist(), strict=True)
    values[rest] = np.fromiter((hash(stream[s:e]) & _MASK for s, e in bounds), np.uint64, len(rest))
    return values, _counts_per_part(starts, [len(p) for p in parts])


def _word_bounds(classes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Starts and ends of the words `WORDS.findall` finds in characters of these classes (the last
    one not a letter): it takes a CJK character alone, unless a run of letters and digits that
    began with a letter or digit that is not CJK takes it in; a run of letters and digits is one
    word from that first non-CJK one."""
    import numpy as np

    letter = (classes & _IS_LETTER) != 0
    cjk = (classes & _IS_CJK) != 0
    index = np.arange(len(classes))
    run_start = np.maximum.accumulate(np.where(letter & ~np.roll(letter, 1), index, -1))
    began = np.maximum.accumulate(np.where(letter & ~cjk, index, -1))
    in_run = letter & (began >= run_start)
    alone = cjk & ~in_run
    starts = np.flatnonzero(alone | (in_run & ~np.roll(in_run, 1)))
    ends = np.flatnonzero(alone | (in_run & ~np.roll(in_run, -1))) + 1
    return starts, ends


@functools.cache
def _class_table() -> np.ndarray:
    """`_KNOWN | _IS_CJK | _IS_LETTER` flags per code point, filled as characters are met."""
    import numpy as np

    return np.zeros(0x110000, np.uint8)


def _classes_known(units: np.ndarray) -> np.ndarray:
    """`units`, once `_class_table` knows each of them."""
    import numpy as np

    table = _class_table()
    for unit in np.unique(units[table[units] == 0]).tolist():
        char = chr(unit)
        table[unit] = (_KNOWN | (_IS_CJK if _CJK.match(char) else 0)
                       | (_IS_LETTER if _LETTER.match(char) else 0))
    return units


def _odd_values(word_lists: list[list[str]]) -> tuple[np.ndarray, np.ndarray]:
    import numpy as np

    values = np.fromiter((word_value(w) for found in word_lists for w in found), np.uint64)
    return values, np.array([len(found) for found in word_lists], np.int64)


def fingerprints(values: np.ndarray, counts: np.ndarray) -> list[int]:
    """A 64-bit fingerprint of each span's word values (`word_values`; 0 for a span without words):
    equal words give equal fingerprints, different ones almost always different ones (compare the
    words when two are equal). A polynomial in `_PAIR` modulo 2**64, shifted to each span's start."""
    import numpy as np

    counts = np.asarray(counts, np.int64)
    out = np.zeros(len(counts), np.uint64)
    spoken = np.flatnonzero(counts)
    if len(spoken):
        first = (np.cumsum(counts) - counts)[spoken]
        powers = np.cumprod(np.full(len(values), _PAIR, np.uint64))  # _PAIR ** (k + 1)
        inverses = np.cumprod(np.full(len(values), pow(_PAIR, -1, 1 << 64), np.uint64))
        summed = np.add.reduceat(values * powers, first)
        out[spoken] = summed * inverses[first] + counts[spoken].astype(np.uint64) * np.uint64(_ONE)
    return out.tolist()


def _firsts(ordered: np.ndarray) -> np.ndarray:
    """Where each run of equal entries of a sorted array starts."""
    import numpy as np

    out = np.ones(len(ordered), bool)
    np.not_equal(ordered[1:], ordered[:-1], out=out[1:])
    return out


class ShingleTable:
    """The shingles of many word lists at once (the distinct word bigrams of each, the whole list
    when it has one word, as `shingle_order`), with what `JaccardIndex` orders prefixes by: how
    many lists hold each shingle, ties in the order shingles are first met (`shingle_counts` of
    the `shingle_order` lists). A few numpy sorts of every shingle's 64-bit value replace a tuple,
    a dict, a set and a counter update per list, and a set is only built for a list that asks.
    Lists come as `word_values` (every count positive); a bigram's value mixes its two words'
    scrambled values, so two different bigrams share one as rarely as two word tuples' `hash` do.

    `sizes[i]` and `own[i]` are list i's distinct shingles and those no other list holds.
    """

    def __init__(self, values: np.ndarray, counts: np.ndarray) -> None:
        import numpy as np

        count = len(counts)
        lengths = np.asarray(counts, np.int64)
        if count and int(lengths.min()) == 0:
            raise ValueError("every word list needs a word")
        total = int(lengths.sum())
        # one shingle per word: the bigram it starts, or the word alone in a one-word list
        owner = np.repeat(np.arange(count), lengths)
        last = np.zeros(total, bool)
        last[np.cumsum(lengths) - 1] = True
        shingles = np.empty(total, np.uint64)
        shingles[:-1] = values[:-1] * np.uint64(_PAIR) + values[1:]  # wraps modulo 2**64
        alone = last & (lengths[owner] == 1)
        shingles[alone] = values[alone] * np.uint64(_ONE)
        keep = ~last | alone
        self._values, owner = shingles[keep], owner[keep]  # in text order
        self._offsets = np.concatenate(([0], np.cumsum(np.bincount(owner, minlength=count))))
        self.sizes = self.own = np.zeros(count, np.int64)
        self._group = self._holders = self._first_met = np.zeros(0, np.int64)
        if not count:
            return
        # groups of equal shingles, each with the position where it is first met
        order = np.argsort(self._values)
        by_value = self._values[order]
        new_value = _firsts(by_value)
        group = np.cumsum(new_value) - 1
        self._first_met = np.minimum.reduceat(order, np.flatnonzero(new_value))
        self._group = np.empty(len(order), np.int64)
        self._group[order] = group  # the group of each shingle in text order
        # the distinct (group, list) pairs: how many lists hold each group, and each list's groups
        shift = np.int64(count.bit_length())
        pairs = np.sort((group << shift) | owner[order])  # np.unique may hash: slower
        pairs = pairs[_firsts(pairs)]
        pair_group, pair_owner = pairs >> shift, pairs & np.int64((1 << int(shift)) - 1)
        self._holders = np.bincount(pair_group)
        self.sizes = np.bincount(pair_owner, minlength=count)
        self.own = np.bincount(pair_owner[self._holders[pair_group] == 1], minlength=count)

    def shingles(self, i: int) -> set[int]:
        """List i's distinct shingles."""
        return set(self._values[self._offsets[i]:self._offsets[i + 1]].tolist())

    def prefixes(self, lists: Sequence[int], lengths: Sequence[int]) -> list[list[int]]:
        """For each of `lists`, its first `lengths` shingles that other lists hold too, rarest first
        (ties: first met), as `JaccardIndex` indexes and looks them up. All at once: a list's
        shingles are sorted by one key, its index among `lists` then its shingle's rank."""
        import numpy as np

        chosen = np.asarray(lists, np.int64)
        starts, ends = self._offsets[chosen], self._offsets[chosen + 1]
        sizes = ends - starts
        which = np.repeat(np.arange(len(chosen)), sizes)
        at = np.arange(int(sizes.sum())) + np.repeat(starts - (np.cumsum(sizes) - sizes), sizes)
        groups = self._group[at]
        shared = self._holders[groups] > 1
        which, at, groups = which[shared], at[shared], groups[shared]
        # rank the groups met: fewest holders first, ties first met (unique per group)
        met = np.sort(groups)
        met = met[_firsts(met)]  # np.unique may hash: slower
        rank = np.zeros(len(self._holders), np.int64)  # by group
        ranked = met[np.argsort(self._holders[met] * len(self._group) + self._first_met[met])]
        rank[ranked] = np.arange(len(met))
        key = which * len(met) + rank[groups]
        order = np.argsort(key)
        key, at = key[order], at[order]
        once = _firsts(key)  # a group repeated in a list: once
        which, values = which[order][once], self._values[at[once]]
        bounds = np.searchsorted(which, np.arange(len(chosen) + 1)).tolist()
        return [values[bounds[k]:min(bounds[k] + length, bounds[k + 1])].tolist()
                for k, length in enumerate(lengths)]


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
    Without `frequency` shingles go by value. A caller that has each set's prefix in that order
    (`ShingleTable.prefixes`) passes it to `add_unless_near`, `near` and `add`, and needs no
    `frequency`. `comparisons` counts the Jaccard computations.

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

    def prefix_length(self, size: int, own: int = 0) -> int:
        """How many shingles of a set of `size` its prefix takes after its `own` ones (those no
        other set holds: they come first in the order and are skipped)."""
        return size - self._overlap(size) + 1 - own

    def _prefix(self, shingles: set[int]) -> list[int]:
        length = self.prefix_length(len(shingles))
        rank = self._rank
        if rank is None:
            return sorted(shingles)[:length]
        shared = list(rank.keys() & shingles)
        length -= len(shingles) - len(shared)  # the set's own shingles come first in the order
        if length <= 0:
            return []
        shared.sort(key=rank.__getitem__)
        return shared[:length]

    def near(self, shingles: set[int], prefix: list[int] | None = None) -> bool:
        """Whether an added set is at or above the threshold with `shingles` (`prefix`: its prefix
        when the caller has it, e.g. from a `ShingleTable`)."""
        return self._near(shingles, self._prefix(shingles) if prefix is None else prefix)

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

    def add(self, shingles: set[int], prefix: list[int] | None = None) -> None:
        """Index a set (kept by reference: do not change it afterwards)."""
        self._add(shingles, self._prefix(shingles) if prefix is None else prefix)

    def _add(self, shingles: set[int], prefix: list[int]) -> None:
        if not prefix:  # no other set can share a prefix shingle with it
            return
        index = len(self._sets)
        self._sets.append(shingles)
        self._lengths.append(len(shingles))
        for shingle in prefix:
            self._postings.setdefault(shingle, []).append(index)

    def add_unless_near(self, shingles: set[int], prefix: list[int] | None = None) -> bool:
        """True when `shingles` is near an added set; otherwise adds it and returns False."""
        if prefix is None:
            prefix = self._prefix(shingles)
        if self._near(shingles, prefix):
            return True
        self._add(shingles, prefix)
        return False
