"""Text signals shared by the rule components: terms for BM25, and the regexes for the things whose
loss matters (numbers, dates, units, URLs, identifiers, names, code), in English and Chinese.

Terms: English words are lower-cased, stop words dropped and Snowball-stemmed (the Snowball
project's own `snowballstemmer`: same Porter2 algorithm as nltk's, without nltk's 1-3 s package
import); Chinese runs become character bigrams plus single characters, the standard dictionary-free
indexing for Chinese retrieval.

Many texts at once (a document's sentences): `signals.many`, `word_counts` and `phrase_holders` run
each pattern once over the texts joined (`Joined`, with a separator no pattern matches across) and
give each text what it gives alone, a few times faster than a scan and a Python call per pattern
and text.
"""

from __future__ import annotations

import functools
import importlib.resources
import threading
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

import regex
import snowballstemmer

from compactor.text import numbers as numbers_grammar

if TYPE_CHECKING:
    import numpy as np

#: One snowball stemmer per thread (see `_stemmer`).
_STEMMERS = threading.local()
_HAN_RUN = regex.compile(r"[\p{Han}]+")
_SPLIT = regex.compile(r"['\-]+")
_LATIN_WORD = regex.compile(r"[\p{L}\p{N}][\p{L}\p{N}'_\-]*")
# Han runs apart from Latin words and digits ("2013年" is "2013" and "年")
_TOKEN = regex.compile(r"(?V1)\p{Han}+|[[\p{L}\p{N}]--\p{Han}][[\p{L}\p{N}'_\-]--\p{Han}]*")

UNIT = regex.compile(
    r"\b\d+(?:\.\d+)?\s?(?:ms|s|sec|min|h|hrs?|days?|KB|MB|GB|TB|PB|kb|mb|gb|tb|Hz|kHz|MHz|GHz|"
    r"km|m|cm|mm|kg|g|mg|lb|°C|°F|px|rpm|qps|rps|ops|fps|USD|EUR|RMB|dollars|euros|percent)\b"
    r"|[$€£¥]\s?\d[\d,]*(?:\.\d+)?|\d+(?:\.\d+)?\s?(?:元|万|亿|个|次|秒|分钟|小时|天|年|月|人|%|％)"
)
URL = regex.compile(r"https?://[^\s<>\"')\]]+|www\.[^\s<>\"')\]]+")
EMAIL = regex.compile(r"\b[\w.+-]+@[\w-]+(?:\.[\w-]+)+\b")
IDENTIFIER = regex.compile(
    r"\b[a-z]+(?:[A-Z][a-z0-9]+)+\b|\b[A-Z][a-z0-9]+(?:[A-Z][a-z0-9]+)+\b"  # camelCase, CamelCase
    r"|\b[a-z][a-z0-9]*(?:_[a-z0-9]+)+\b"  # snake_case
    r"|(?:[\w.-]+/)+[\w.-]+\.\w{1,5}\b|\b\w+\.(?:py|js|ts|go|rs|java|c|cpp|h|md|yaml|yml|json|toml|sql)\b"
    r"|\b\w+(?:\.\w+){2,}\b|\b\w+\(\)"  # dotted.paths, calls()
)
ACRONYM = regex.compile(r"\b[A-Z][A-Z0-9]{1,}(?:-[A-Z0-9]+)*\b")
NAME = regex.compile(
    r"(?<![.!?。！？]\s|^)\b[A-Z][\p{Ll}]+(?:[A-Z][\p{Ll}]+)*"
    r"(?:\s+(?:of|de|van|von|la|the)?\s?[A-Z][\p{Ll}]+)*"
)
QUOTED_ZH = regex.compile(r"[“「《『]([^”」》』]{1,30})[”」》』]")
CODE = regex.compile(r"```.*?```|`[^`\n]+`", regex.DOTALL)
HEADING = regex.compile(r"(?m)^(?:#{1,6}\s+\S.*|[^\n]{1,80}\n[=-]{3,})$")
LIST_ITEM = regex.compile(r"(?m)^\s*(?:[-*+•]|\d+[.)])\s+\S")


@functools.cache
def _stopwords(lang: str) -> frozenset[str]:
    resource = importlib.resources.files("compactor.text") / "data" / f"stopwords_{lang}.txt"
    text = resource.read_text(encoding="utf-8")
    words = []
    for line in text.splitlines():
        if not line.startswith("#"):
            words.extend(line.split())
    return frozenset(words)


def stopwords(lang: str) -> frozenset[str]:
    """The shipped stop-word list for "en" or "zh"."""
    return _stopwords(lang)


def _stemmer() -> snowballstemmer.basestemmer.BaseStemmer:
    """The calling thread's own snowball stemmer. A stemmer keeps the word it works on in its own
    fields, so threads sharing one (compress.map_reduce maps chunks in a pool) raise IndexError or
    return wrong stems; never share one across threads."""
    try:
        return _STEMMERS.english
    except AttributeError:  # this thread's first word
        _STEMMERS.english = snowballstemmer.stemmer("english")
        return _STEMMERS.english


@functools.lru_cache(maxsize=200_000)
def stem(word: str) -> str:
    """Snowball stem of a lower-case English word (cached: words repeat a lot).

    Thread-safe: lru_cache is, and it only ever stores what the calling thread's own stemmer returned.
    """
    return _stemmer().stemWord(word)


def terms(text: str) -> list[str]:
    """Index terms of a text: stemmed English content words, Chinese bigrams and characters.

    Cached per text: classify, every scorer, select and validate ask for the same chunks' terms.
    """
    return list(_terms(text))


@functools.lru_cache(maxsize=131_072)
def _terms(text: str) -> tuple[str, ...]:
    out: list[str] = []
    zh_stop = stopwords("zh")
    for token in _TOKEN.findall(text):
        if _is_han(token[0]):
            out.extend([c for c in token if c not in zh_stop])
            out.extend([token[i:i + 2] for i in range(len(token) - 1) if token[i:i + 2] not in zh_stop])
        else:
            out.extend(_word_terms(token))
    return tuple(out)


@functools.lru_cache(maxsize=200_000)
def _word_terms(token: str) -> tuple[str, ...]:
    """Terms of one Latin token: lower case, no stop words, stemmed (cached: tokens repeat).
    Compatibility forms fold for matching only (`ｆｕｌｌ` matches `full`, `km²` matches `km2`)."""
    word = fold(token).lower().strip("'-_")
    if word.endswith("'s"):
        word = word[:-2]
    en_stop = stopwords("en")
    parts = _SPLIT.split(word) if ("-" in word or "'" in word) else (word,)
    return tuple(stem(p) if p.isalpha() else p for p in parts
                 if p and p not in en_stop and (len(p) > 1 or p.isdigit()))


def fold(token: str) -> str:
    """NFKC of a non-ASCII token, for matching: the output keeps the source's own characters."""
    return token if token.isascii() else unicodedata.normalize("NFKC", token)


def is_han(char: str) -> bool:
    """Whether a character is a Han ideograph (BMP, compatibility or the supplementary planes)."""
    return "\u3400" <= char <= "\u9fff" or "\uf900" <= char <= "\ufaff" or char >= "\U00020000"


_is_han = is_han


def words(text: str) -> list[str]:
    """Plain word tokens (no stemming): Latin words and single CJK characters."""
    out: list[str] = []
    for token in _TOKEN.findall(text):
        if _is_han(token[0]):
            out.extend(token)
        else:
            out.append(token)
    return out


def word_count(text: str) -> int:
    """len(words(text)) without building the list."""
    return sum(len(t) if _is_han(t[0]) else 1 for t in _TOKEN.findall(text))


def entities(text: str) -> set[str]:
    """Names, acronyms and quoted Chinese terms: what a summary must not lose or invent."""
    return set(signals(text).entities)


def numbers(text: str) -> set[str]:
    """Every value the numbers and dates of a text stand for ("61,000" is 61000, "45%" also 0.45,
    "May 1, 2024" is 2024-05-01): what an output is searched for when an input's numbers are checked."""
    return numbers_grammar.value_set(text)


@dataclass(frozen=True, slots=True)
class Signals:
    """What density, importance and loss validation look for in one text, found once."""

    numbers: frozenset[str]  # main values ("1.2 million" is 1200000), `compactor.text.numbers`
    number_hits: int
    dates: frozenset[str]  # date labels ("2024-05-01", "2024-05", "05-01")
    date_hits: int
    unit_hits: int
    entities: frozenset[str]
    identifiers: frozenset[str]
    acronyms: frozenset[str]
    url_hits: int
    structure: frozenset[str]  # headings and code snippets (first 40 characters)


_DIGITS = regex.compile(r"\d+")
_ZH_NUMERAL_HINT = regex.compile(r"[十百千万亿两一二三四五六七八九]")
# NAME and ACRONYM written to start at a capital, which `regex` skips to quickly (the originals test
# their look-behind at every position first): the same matches, a few times faster.
_NAME_AT_CAPITAL = regex.compile(
    r"[A-Z](?<![.!?。！？]\s[A-Z]|\w[A-Z]|^[A-Z])[\p{Ll}]+(?:[A-Z][\p{Ll}]+)*"
    r"(?:\s+(?:of|de|van|von|la|the)?\s?[A-Z][\p{Ll}]+)*"
)
_ACRONYM_AT_CAPITAL = regex.compile(r"[A-Z](?<!\w[A-Z])[A-Z0-9]{1,}(?:-[A-Z0-9]+)*\b")
# What every IDENTIFIER match holds, one scan per form, each led by a literal or a narrow class (so
# cheap to run over everything; IDENTIFIER itself backtracks from every word): an inner capital, an
# inner underscore, a path's last part, a dotted name, a file extension, a call.
_IDENTIFIER_NEEDS = tuple(regex.compile(p) for p in (
    r"(?<=[a-z0-9])[A-Z](?=[a-z0-9])", r"(?<=[a-z0-9])_(?=[a-z0-9])", r"/[\w.-]+\.\w", r"(?<=\w)\.\w+\.\w",
    r"(?<=\w)\.(?:py|js|ts|go|rs|java|c|cpp|h|md|yaml|yml|json|toml|sql)\b", r"(?<=\w)\(\)",
))
# An IDENTIFIER match is made of these characters and begins with one, and its matches in a text are
# those in each run of them (what lies around a run is no word character, as at a text's ends): so
# the pattern runs only over the runs holding one of _IDENTIFIER_NEEDS.
_IDENTIFIER_RUN = regex.compile(r"[\w./()\-]*")
_IDENTIFIER_RUN_BEFORE = regex.compile(r"(?r)[\w./()\-]*")
_NONE: frozenset[str] = frozenset()


# -- whole-text passes -------------------------------------------------------------------------

#: What `Joined` puts between texts. No pattern of `signals` matches across it, so a pattern run
#: over the joined texts finds in each text what it finds in that text alone: the line break ends
#: runs of non-space (URLs, paths) and of spaces and tabs and starts a line (list markers); the
#: NUL ends runs of whitespace (a unit or a scale word after a number, a name's next word); the
#: sentence end and line break before the next text make a capital there no name, as at the start
#: of a text. Headings, code spans and Chinese quotes can run past it and are found per text.
SEPARATOR = "\n\x00.\n"


class Joined:
    """Texts joined by `SEPARATOR` for whole-text passes: a pattern runs once over `text` and each
    match goes to the text it starts in (`owners`), instead of one scan (and one Python call per
    pattern) per text."""

    def __init__(self, texts: Sequence[str]) -> None:
        self.texts = texts
        self.text = SEPARATOR.join(texts)
        self._starts: np.ndarray | None = None
        self._codes: np.ndarray | None = None

    @property
    def starts(self) -> np.ndarray:
        """Where each text begins in `text` (int64)."""
        if self._starts is None:
            import numpy as np

            starts = np.zeros(len(self.texts), dtype=np.int64)
            if len(self.texts) > 1:
                lengths = np.array(list(map(len, self.texts)), dtype=np.int64)
                np.cumsum(lengths[:-1] + len(SEPARATOR), out=starts[1:])
            self._starts = starts
        return self._starts

    def span(self, index: int) -> tuple[int, int]:
        """Where text `index` begins and ends in `text`."""
        start = int(self.starts[index])
        return start, start + len(self.texts[index])

    def owners(self, offsets: Sequence[int] | np.ndarray) -> list[int]:
        """The index of the text each offset of `text` falls in."""
        if len(self.texts) <= 1:
            return [0] * len(offsets)
        import numpy as np

        return (np.searchsorted(self.starts, offsets, side="right") - 1).tolist()

    def holding(self, pattern: regex.Pattern[str]) -> set[int]:
        """Indexes of the texts where `pattern` matches."""
        return set(self.owners([m.start() for m in pattern.finditer(self.text)]))

    def found(self, pattern: regex.Pattern[str]) -> dict[int, list[str]]:
        """The matches of `pattern` in each text that has one."""
        matches = list(pattern.finditer(self.text))
        out: dict[int, list[str]] = {}
        for owner, match in zip(self.owners([m.start() for m in matches]), matches, strict=True):
            out.setdefault(owner, []).append(match.group())
        return out

    def counts(self, offsets: Sequence[int]) -> Counter[int]:
        """How many of `offsets` fall in each text."""
        return Counter(self.owners(offsets))

    def subset(self, indexes: Sequence[int]) -> Joined:
        """The texts at `indexes` (ascending, distinct), joined."""
        if len(indexes) == len(self.texts):
            return self
        return Joined([self.texts[i] for i in indexes])

    @property
    def codes(self) -> np.ndarray:
        """The code points of `text` (uint32)."""
        if self._codes is None:
            import numpy as np

            self._codes = np.frombuffer(self.text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
        return self._codes


# Character classes of the word tokeniser (`_TOKEN`), one byte per code point: Han, a word's first
# character (a letter or digit that is not Han), a word's character (also ' _ -), and `is_han`.
# Filled one block of 256 code points at a time, when a text first holds one (a static table, like
# a compiled pattern); a block not filled yet reads _UNKNOWN.
_HAN_CLASS, _WORD_START, _WORD_CHAR, _IS_HAN, _UNKNOWN = 1, 2, 4, 8, 128
_CLASS_PATTERNS = ((_HAN_CLASS, regex.compile(r"\p{Han}")),
                   (_WORD_START, regex.compile(r"(?V1)[[\p{L}\p{N}]--\p{Han}]")),
                   (_WORD_CHAR, regex.compile(r"(?V1)[[\p{L}\p{N}'_\-]--\p{Han}]")))


class _CharClasses:
    def __init__(self) -> None:
        self._table: np.ndarray | None = None
        self._lock = threading.Lock()

    def of(self, codes: np.ndarray) -> np.ndarray:
        """The class byte of each code point."""
        import numpy as np

        if self._table is None:
            with self._lock:
                if self._table is None:
                    self._table = np.full(0x110000, _UNKNOWN, dtype=np.uint8)
        classes = np.take(self._table, codes)
        if (classes & _UNKNOWN).any():
            with self._lock:
                for block in np.unique(codes[(classes & _UNKNOWN) != 0] >> 8).tolist():
                    self._fill(block)
            classes = np.take(self._table, codes)
        return classes

    def _fill(self, block: int) -> None:
        import numpy as np

        assert self._table is not None
        first = block << 8
        chars = "".join(map(chr, range(first, first + 256)))
        row = np.zeros(256, dtype=np.uint8)
        for flag, pattern in _CLASS_PATTERNS:
            row[[m.start() for m in pattern.finditer(chars)]] |= flag
        codes = np.arange(first, first + 256)
        # is_han's ranges
        han = ((codes >= 0x3400) & (codes <= 0x9FFF)) | ((codes >= 0xF900) & (codes <= 0xFAFF))
        row[han | (codes >= 0x20000)] |= _IS_HAN
        self._table[first:first + 256] = row


_CLASSES = _CharClasses()


def word_counts(joined: Joined) -> list[int]:
    """`word_count` of each text, from one pass over their code points: a run of Han characters
    counts its characters (one, if it begins with a Han character `is_han` does not know), and a run
    of word characters holding a letter or digit counts one."""
    import numpy as np

    n = len(joined.texts)
    if not joined.text:
        return [0] * n
    classes = _CLASSES.of(joined.codes)
    starts = _latin_word_starts(classes)
    totals = np.diff(np.append(np.searchsorted(starts, joined.starts), len(starts)))
    han = np.flatnonzero(classes & _HAN_CLASS)
    if len(han):
        breaks = np.flatnonzero(np.diff(han) != 1)
        run_starts = han[np.concatenate([[0], breaks + 1])]
        run_ends = han[np.append(breaks, len(han) - 1)] + 1
        weights = np.where((classes[run_starts] & _IS_HAN) != 0, run_ends - run_starts, 1)
        # every run lies inside one text: the weights between consecutive text starts
        sums = np.concatenate([[0], np.cumsum(weights)])
        totals += np.diff(sums[np.append(np.searchsorted(run_starts, joined.starts), len(run_starts))])
    counts: list[int] = totals.tolist()
    # a Latin word whose first character is_han knows counts its characters; no such character
    # in today's Unicode, but word_count is what is meant
    for i in set(joined.owners(starts[(classes[starts] & _IS_HAN) != 0])):
        counts[i] = word_count(joined.texts[i])
    return counts


def _latin_word_starts(classes: np.ndarray) -> np.ndarray:
    """Where each Latin word (`_TOKEN`'s second form) begins, in order: at the first letter or digit
    of a run of word characters. Almost always the run's first character; a run may begin with
    ' _ or - instead, and then its first letter or digit (if any) begins the word."""
    import numpy as np

    word = (classes & _WORD_CHAR) != 0
    letter = (classes & _WORD_START) != 0
    after_word = np.zeros(len(word), dtype=bool)
    after_word[1:] = word[:-1]
    starts = np.flatnonzero(letter & ~after_word)
    joins = word & ~letter  # ' _ -
    led = np.flatnonzero(joins & ~after_word) if joins.any() else starts[:0]
    if not len(led):
        return starts
    run_ends = np.flatnonzero(word & ~np.append(word[1:], False)) + 1
    after_join = np.zeros(len(word), dtype=bool)
    after_join[1:] = joins[:-1]
    inner = np.flatnonzero(letter & after_join)  # such a run's first letter or digit is one of these
    if not len(inner):
        return starts
    first = inner[np.minimum(np.searchsorted(inner, led), len(inner) - 1)]
    first = first[(first > led) & (first < run_ends[np.searchsorted(run_ends, led)])]
    return np.sort(np.concatenate([starts, first]), kind="stable")  # two sorted runs: a merge


# Characters that match a lower-case ASCII letter under `regex.IGNORECASE` besides the letter and
# its capital: KELVIN SIGN (k), LATIN CAPITAL LETTER I WITH DOT ABOVE (i), LATIN SMALL LETTER LONG S (s).
_FOLDS = ((0x212A, ord("k")), (0x130, ord("i")), (0x17F, ord("s")))


def phrase_holders(joined: Joined, phrases: Iterable[str]) -> set[int]:
    """Indexes of the texts holding one of `phrases` (lower-case ASCII, four characters or more)
    the way a `regex.IGNORECASE` pattern sees them: the texts where a case-insensitive pattern whose
    every match holds one of the phrases may match. One pass over the text folded to ASCII bytes:
    each four bytes, as a number, against the phrases' first four (through a table of their
    hashes), then the rest of the phrase where those agree."""
    import numpy as np

    phrases = list(phrases)
    codes = joined.codes
    if len(codes) < 4 or not phrases:
        return set()
    for odd, letter in _FOLDS:
        if chr(odd) in joined.text:
            codes = np.where(codes == odd, letter, codes)
    folded = np.where(codes < 128, codes, 0).astype(np.uint8)  # no phrase holds another character
    folded += np.uint8(32) * ((folded - np.uint8(65)) < 26)  # A-Z to a-z
    fours = np.ndarray((len(folded) - 3,), dtype="<u4", buffer=folded, strides=(1,))
    hashes = _hash16(fours)
    wanted: dict[int, list[str]] = {}
    for phrase in phrases:
        wanted.setdefault(int.from_bytes(phrase[:4].encode("ascii"), "little"), []).append(phrase)
    table = np.zeros(1 << 16, dtype=bool)
    table[_hash16(np.array(list(wanted), dtype=np.uint32))] = True
    near = np.flatnonzero(table[hashes])
    holders: list[int] = []
    for four, group in wanted.items():
        at = near[fours[near] == four]
        for phrase in group:
            found = at[at + len(phrase) <= len(folded)]
            for i in range(4, len(phrase)):
                found = found[folded[found + i] == ord(phrase[i])]
            holders.extend(found.tolist())
    return set(joined.owners(holders))


def _hash16(values: np.ndarray) -> np.ndarray:
    """A 16-bit multiplicative hash of uint32 values (the arithmetic wraps)."""
    import numpy as np

    return (values * np.uint32(0x9E3779B1)) >> np.uint32(16)


class CacheInfo(NamedTuple):
    """What a cache holds and did, as functools' caches report it."""

    hits: int
    misses: int
    maxsize: int
    currsize: int


class _SignalsCache:
    """The signals of a text, cached per text (see `signals`); `many` fills the cache for a list of
    texts in whole-text passes (an lru_cache cannot be filled from a batch). Cleared whole when
    full. `cache_clear` and `cache_info` as functools' caches have them, so cache tooling finds the
    cache; set on the instance, so tooling that calls every `cache_clear` of a module's names does
    not call the class's."""

    # Sized for a million-token input cut into sentences (~35k chunks): density, importance and
    # validate.loss ask for the same chunks in turn, and a smaller cache would evict between them.
    maxsize = 131_072
    cache_clear: Callable[[], None]
    cache_info: Callable[[], CacheInfo]

    def __init__(self) -> None:
        self._values: dict[str, Signals] = {}
        self._hits = 0
        self._misses = 0
        self.cache_clear = self._clear
        self.cache_info = self._info

    def __call__(self, text: str) -> Signals:
        """The numbers, dates, units, names, identifiers and structure of a text (cached per text)."""
        found = self._values.get(text)
        if found is not None:
            self._hits += 1
            return found
        return self.many([text])[0]

    def many(self, texts: Iterable[str]) -> list[Signals]:
        """`signals` of each text; the ones not cached yet are found together (`_signals_batch`)."""
        values = self._values
        texts = list(texts)
        out = [values.get(t) for t in texts]
        missing = list(dict.fromkeys(t for t, s in zip(texts, out, strict=True) if s is None))
        self._misses += len(missing)
        self._hits += len(texts) - len(missing)
        if not missing:
            return out  # type: ignore[return-value]
        new = dict(zip(missing, _signals_batch(missing), strict=True))
        if len(values) + len(new) > self.maxsize:
            values.clear()
        values.update(new)
        return [s if s is not None else new[t] for t, s in zip(texts, out, strict=True)]

    def _clear(self) -> None:
        self._values.clear()
        self._hits = self._misses = 0

    def _info(self) -> CacheInfo:
        return CacheInfo(self._hits, self._misses, self.maxsize, len(self._values))


#: The numbers, dates, units, names, identifiers and structure of a text (cached per text):
#: `signals(text)`, or `signals.many(texts)` for many texts at once (whole-text passes).
signals = _SignalsCache()


def signals_of(texts: Iterable[str]) -> list[Signals]:
    """`signals` of each text, the ones not cached yet found together in whole-text passes."""
    return signals.many(texts)


def _signals_batch(texts: Sequence[str]) -> list[Signals]:
    """Signals of distinct texts. Each pattern runs once over the texts joined (`Joined`); the costly
    ones only over the texts holding what they need (a digit for numbers, dates and units, a
    backtick for code, a URL prefix...), as most texts hold few of these and a pattern costs its
    scan of every position."""
    joined = Joined(texts)
    digits = joined.holding(_DIGITS)
    numerals = set(digits)
    wide = [] if joined.text.isascii() else [i for i, text in enumerate(texts) if not text.isascii()]
    if wide:  # 二〇二四年五月一日 is a date with no digit
        numerals.update(wide[i] for i in joined.subset(wide).holding(_ZH_NUMERAL_HINT))
    numbered = sorted(numerals)
    numbers = _number_signals(joined.subset(numbered), numbered) if numbered else {}
    names = joined.found(_NAME_AT_CAPITAL)
    acronyms = joined.found(_ACRONYM_AT_CAPITAL)
    identifiers = _identifiers(joined)
    # the texts holding a Chinese quote, a URL's start, a heading's or code's mark (one scan each)
    quoted = _holding(joined, "“「《『") if wide else set()
    linked = _holding(joined, ("http", "www."))
    marked = _holding(joined, "#`")
    no_numbers = (_NONE, 0, _NONE, 0, 0)
    out = []
    for i, text in enumerate(texts):
        numbers_found, number_hits, dates, date_hits, unit_hits = numbers.get(i, no_numbers)
        acronym_set = frozenset(acronyms[i]) if i in acronyms else _NONE
        entities = {m for m in map(str.strip, names[i]) if len(m) > 2} if i in names else set()
        if i in quoted:
            entities.update(QUOTED_ZH.findall(text))
        out.append(Signals(
            numbers=numbers_found,
            number_hits=number_hits,
            dates=dates,
            date_hits=date_hits,
            unit_hits=unit_hits,
            entities=frozenset(entities | acronym_set) if entities else acronym_set,
            identifiers=identifiers.get(i, _NONE),
            acronyms=acronym_set,
            url_hits=len(URL.findall(text)) if i in linked else 0,
            structure=_structure(text) if i in marked or "\n" in text else _NONE,
        ))
    return out


def _holding(joined: Joined, literals: Iterable[str]) -> set[int]:
    """Indexes of the texts holding one of `literals`."""
    found: set[int] = set()
    for literal in literals:
        at, text = [], joined.text
        i = text.find(literal)
        while i >= 0:
            at.append(i)
            i = text.find(literal, i + 1)
        found.update(joined.owners(at))
    return found


def _identifiers(joined: Joined) -> dict[int, frozenset[str]]:
    """IDENTIFIER's matches in each text that has one, found in the runs that may hold one."""
    text = joined.text
    runs = set()
    for pattern in _IDENTIFIER_NEEDS:
        for match in pattern.finditer(text):
            at = match.start()
            runs.add((_IDENTIFIER_RUN_BEFORE.match(text, 0, at).start(),  # type: ignore[union-attr]
                      _IDENTIFIER_RUN.match(text, at).end()))  # type: ignore[union-attr]
    found: dict[int, set[str]] = {}
    for owner, (start, end) in zip(joined.owners([r[0] for r in runs]), runs, strict=True):
        matches = IDENTIFIER.findall(text, start, end)
        if matches:
            found.setdefault(owner, set()).update(matches)
    return {i: frozenset(values) for i, values in found.items()}


# What every date holds (numbers' _DATE_HINT: a month name, 年 or 月, digits joined by - / .), one
# scan per form led by a literal or a narrow class: cheap over everything.
_DATE_NEEDS = (
    *(regex.compile(month) for month in ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct",
                                         "Nov", "Dec", "年", "月")),
    regex.compile(r"[-/.](?<=\d{4}[-/.])(?=\d)"), regex.compile(r"/(?<=\d/)(?=\d)"),
)


def _number_signals(joined: Joined, indexes: Sequence[int]
                    ) -> dict[int, tuple[frozenset[str], int, frozenset[str], int, int]]:
    """numbers, number hits, dates, date hits and unit hits of the texts of `joined` (the texts at
    `indexes` of the caller's), by the caller's index. Hits weigh information (density,
    importance): a date's digits and a bare year count too."""
    text = joined.text
    if len(joined.texts) == 1:
        date_matches = numbers_grammar.date_matches_of(text)
    else:  # the date pattern only over the texts that may hold a date
        date_matches = [match for i in sorted(set().union(*(joined.holding(p) for p in _DATE_NEEDS)))
                        for match in numbers_grammar.DATE.finditer(text, *joined.span(i))]
    found = numbers_grammar.number_mentions(text, date_matches=date_matches)
    dates = numbers_grammar.date_mentions(text, date_matches)
    numbers: dict[int, list[str]] = {}
    for owner, mention in zip(joined.owners([m.start for m in found]), found, strict=True):
        numbers.setdefault(owner, []).append(mention.value)
    labels: dict[int, list[str]] = {}
    for owner, date in zip(joined.owners([d.start for d in dates]), dates, strict=True):
        labels.setdefault(owner, []).append(date.label)
    dated = sorted(labels)
    with_dates = joined.subset(dated)
    date_digits = with_dates.counts([m.start for m in numbers_grammar.number_mentions(with_dates.text,
                                                                                      dates=True)])
    dated_at = {i: k for k, i in enumerate(dated)}
    undated = numbers_grammar.without_dates(text, date_matches)
    years = joined.counts([m.start() for m in numbers_grammar.YEAR.finditer(undated)])
    units = joined.counts([m.start() for m in UNIT.finditer(text)])
    out = {}
    for i, index in enumerate(indexes):
        mine = labels.get(i, ())
        number_hits = date_digits[dated_at[i]] if mine else len(numbers.get(i, ()))
        out[index] = (frozenset(numbers.get(i, ())), number_hits, frozenset(mine), len(mine) + years[i],
                      units[i])
    return out


def _structure(text: str) -> frozenset[str]:
    """Headings and code snippets (first 40 characters); found per text, as both can run past the
    end of one."""
    headings = {m.strip() for m in HEADING.findall(text)} if ("\n" in text or "#" in text) else None
    code = {m[:40] for m in CODE.findall(text)} if "`" in text else None
    if headings is None and code is None:
        return _NONE
    return frozenset((headings or set()) | (code or set()))


def count_all(patterns: Iterable[regex.Pattern[str]], text: str) -> int:
    """Total matches of several patterns."""
    return sum(len(p.findall(text)) for p in patterns)
