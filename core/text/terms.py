"""Text signals shared by the rule components: terms for BM25, and the regexes for the things whose
loss matters (numbers, dates, units, URLs, identifiers, names, code), in English and Chinese.

Terms: English words are lower-cased, stop words dropped and Snowball-stemmed (the Snowball
project's own `snowballstemmer`: same Porter2 algorithm as nltk's, without nltk's 1-3 s package
import); Chinese runs become character bigrams plus single characters, the standard dictionary-free
indexing for Chinese retrieval.
"""

from __future__ import annotations

import functools
import importlib.resources
import threading
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass

import regex
import snowballstemmer

from compactor.text import numbers as numbers_grammar

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
# Every IDENTIFIER form holds one of these; most prose holds none, and IDENTIFIER backtracks from
# every word, so it only runs where the hint is found.
_IDENTIFIER_HINT = regex.compile(r"[a-z0-9][A-Z]|_|/|\(\)|\w\.\w+\.\w"
                                 r"|\.(?:py|js|ts|go|rs|java|c|cpp|h|md|yaml|yml|json|toml|sql)\b")
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


_DIGIT = regex.compile(r"\d")
_ZH_NUMERAL_HINT = regex.compile(r"[十百千万亿两一二三四五六七八九]")


# Sized for a million-token input cut into sentences (~35k chunks): density, importance and
# validate.loss ask for the same chunks in turn, and a smaller cache would evict between them.
@functools.lru_cache(maxsize=131_072)
def signals(text: str) -> Signals:
    """The numbers, dates, units, names, identifiers and structure of a text (cached per text).

    Each pattern runs only where what it needs is present (a digit for numbers, dates and units, a
    backtick for code, a URL prefix...): most sentences hold few of these, and the patterns cost
    their scan of every position."""
    digits = _DIGIT.search(text) is not None
    numerals = digits or _has_zh_numeral(text)  # 二〇二四年五月一日 is a date with no digit
    date_matches = numbers_grammar.date_matches_of(text) if numerals else []
    number_found = numbers_grammar.number_mentions(text, date_matches=date_matches) if numerals else ()
    date_found = numbers_grammar.date_mentions(text, date_matches)
    # Hits weigh information (density, importance): a date's digits and a bare year count too.
    number_hits = len(numbers_grammar.number_mentions(text, dates=True)) if date_found else len(number_found)
    year_hits = len(numbers_grammar.YEAR.findall(numbers_grammar.without_dates(text, date_matches))
                    ) if digits else 0
    acronyms = frozenset(ACRONYM.findall(text))
    names = {m.strip() for m in NAME.findall(text) if len(m.strip()) > 2}
    has_url = "http" in text or "www." in text
    return Signals(
        numbers=frozenset(m.value for m in number_found),
        number_hits=number_hits,
        dates=frozenset(d.label for d in date_found),
        date_hits=len(date_found) + year_hits,
        unit_hits=len(UNIT.findall(text)) if digits else 0,
        entities=frozenset(names | acronyms | (set(QUOTED_ZH.findall(text)) if _has_quote(text) else set())),
        identifiers=frozenset(IDENTIFIER.findall(text)) if _IDENTIFIER_HINT.search(text) else frozenset(),
        acronyms=acronyms,
        url_hits=len(URL.findall(text)) if has_url else 0,
        structure=frozenset(({m.strip() for m in HEADING.findall(text)} if ("\n" in text or "#" in text)
                             else set())
                            | ({m[:40] for m in CODE.findall(text)} if "`" in text else set())),
    )


def _has_zh_numeral(text: str) -> bool:
    """Whether a text without digits may hold a Chinese numeral (ASCII text cannot)."""
    return not text.isascii() and _ZH_NUMERAL_HINT.search(text) is not None


def _has_quote(text: str) -> bool:
    return "“" in text or "「" in text or "《" in text or "『" in text


def count_all(patterns: Iterable[regex.Pattern[str]], text: str) -> int:
    """Total matches of several patterns."""
    return sum(len(p.findall(text)) for p in patterns)
