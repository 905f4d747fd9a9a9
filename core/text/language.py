"""Which language a text is written in: the one detector every component asks, and the CJK classes.

Two questions, two functions, one module, so a threshold changes in one place:

* :func:`detect_lang` (``"en"`` | ``"zh"`` | ``"mixed"``) picks *text rules*: sentence splitting,
  ``Chunk.lang``, the ``language`` label. It counts every CJK script (Han, kana, hangul) against ASCII
  letters, because what matters there is which punctuation and word rules apply.
* :func:`is_chinese` picks the language *we write in*: section headings, markers, prompts and the
  language the LLM is asked to answer in. It counts Han characters only, against ASCII letters, and
  says yes once Chinese carries a third of the content (one Han character per eight letters), so
  Chinese prose full of code, paths and English terms stays Chinese while one Chinese name in
  English text stays English.

The character classes are strings to put inside ``[...]``: ``*_RANGES`` for stdlib ``re`` (several
times faster than ``\\p{...}`` on a plain presence scan), ``CJK_CLASS`` for the ``regex`` module.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Literal

import regex

__all__ = [
    "ANY_CJK_RANGES",
    "CJK_CLASS",
    "CJK_RANGES",
    "HAN_BASIC",
    "HAN_RANGES",
    "Lang",
    "detect_lang",
    "has_cjk",
    "is_chinese",
]

Lang = Literal["en", "zh", "mixed"]

#: CJK Unified Ideographs, the basic block: nearly every Han character of running text.
HAN_BASIC = "\u4e00-\u9fff"
#: Han ideographs: extension A, the basic block, compatibility ideographs, the supplementary planes.
HAN_RANGES = "\u3400-\u4dbf" + HAN_BASIC + "\uf900-\ufaff\U00020000-\U0003134f"
#: CJK letters (``re`` class body): Han, kana (with halfwidth katakana) and hangul (with jamo).
CJK_RANGES = ("\u1100-\u11ff\u3040-\u30ff\u31f0-\u31ff" + HAN_RANGES
              + "\ua960-\ua97f\uac00-\ud7af\uff66-\uff9f")
#: Anything CJK (``re`` class body): the letters plus CJK punctuation, radicals and fullwidth forms.
ANY_CJK_RANGES = ("\u1100-\u11ff\u2e80-\u2fdf\u3000-\u9fff\ua960-\ua97f\uac00-\ud7ff"
                  "\uf900-\ufaff\uff00-\uffef\U00020000-\U0003134f")
#: CJK letters for the ``regex`` module (Unicode script properties).
CJK_CLASS = r"\p{Han}\p{Hiragana}\p{Katakana}\p{Hangul}"

_CJK_RE = re.compile(f"[{CJK_RANGES}]")
_ANY_CJK_RE = re.compile(f"[{ANY_CJK_RANGES}]")
_HAN_RE = regex.compile(r"\p{Han}")
_NON_ASCII_LETTERS = bytes(b for b in range(128) if not chr(b).isalpha())
#: Alphabetic scripts before CJK's blocks (accented Latin, Greek, Cyrillic, Hebrew, Arabic, Indic,
#: Thai...; not hangul jamo): letters of the other side too. A range test (stdlib `re`), as it scans
#: every CJK text: marks and the odd symbol in these blocks are counted as letters, a small error.
_OTHER_LETTER = re.compile("[\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u10ff\u1200-\u1fff]")

# detect_lang: share of CJK letters among letters; below -> "en", at/above -> "zh", between -> "mixed".
_EN_MAX_SHARE = 0.1
_ZH_MIN_SHARE = 0.7
SAMPLE_CHARS = 200_000
_SAMPLE_WINDOWS = 64

# is_chinese: a Han character says about a word, four letters' worth; one per eight ASCII letters
# means Chinese is at least a third of the content.
LETTERS_PER_HAN = 8
CHINESE_SAMPLE_CHARS = 20_000


def _latin_letters(text: str) -> int:
    """Letters that are not CJK: ASCII ones (a byte-level count, about free next to a regex scan)
    and, in a text that is not all ASCII, every other non-CJK letter (Russian or Greek with one
    Chinese name in it is not Chinese)."""
    ascii_letters = len(text.encode("ascii", "ignore").translate(None, _NON_ASCII_LETTERS))
    if text.isascii():
        return ascii_letters
    return ascii_letters + len(_OTHER_LETTER.findall(text))


def _sample(text: str, size: int) -> str:
    """Evenly spaced windows, so detection on huge inputs stays O(size) yet sees the whole text."""
    if len(text) <= size:
        return text
    windows = min(_SAMPLE_WINDOWS, size)
    width = size // windows
    step = (len(text) - width) // (windows - 1) if windows > 1 else 0
    return "".join(text[i * step : i * step + width] for i in range(windows))


def has_cjk(text: str) -> bool:
    """Whether any CJK character (letter, punctuation or fullwidth form) occurs in the text."""
    return _ANY_CJK_RE.search(text) is not None


def detect_lang(text: str, *, sample: int = SAMPLE_CHARS) -> Lang:
    """Classify by the share of CJK (Han/kana/hangul) characters among letters.

    "mixed" when both scripts are substantial (10%-70% CJK), so both rule sets apply. Only ASCII
    letters count as non-CJK letters; text without letters counts as English. Texts longer than
    ``sample`` characters are read as evenly spaced windows of that many characters in all.
    """
    if sample < 1:
        raise ValueError(f"sample must be at least 1, not {sample}")
    if not has_cjk(text):
        return "en"
    part = _sample(text, sample)
    cjk = len(_CJK_RE.findall(part))
    latin = _latin_letters(part)
    if not cjk + latin:
        return "en"
    share = cjk / (cjk + latin)
    if share < _EN_MAX_SHARE:
        return "en"
    if share >= _ZH_MIN_SHARE:
        return "zh"
    return "mixed"


def _head(texts: Iterable[str], size: int) -> str:
    """The first ``size`` characters of the texts joined by newlines, reading no further."""
    parts: list[str] = []
    length = 0
    for text in texts:
        parts.append(text)
        length += len(text) + 1
        if length >= size:
            break
    return "\n".join(parts)[:size]


def is_chinese(text: str | Iterable[str], *, sample: int = CHINESE_SAMPLE_CHARS,
               letters_per_han: int | None = LETTERS_PER_HAN) -> bool:
    """Whether the text is Han-dominant: at least one Han character per eight ASCII letters.

    For choosing the language compactor writes in (headings, markers, prompts). Reads the first
    ``sample`` characters (of the texts joined by newlines, when given several; the iterable is read
    only that far). Kana and hangul do not count: Japanese with kanji passes, kana alone does not.

    ``letters_per_han=None`` asks only whether any Han character occurs. That is not a language
    choice but a cutting one: ``compress.select`` cuts a chunk at Chinese punctuation as soon as its
    first 200 characters hold a Han character (an English Wikipedia passage that gives a name in
    Chinese too), and the QA benchmark loses answers (hotpot r10 68 -> 66) with the ratio rule.
    """
    head = text[:sample] if isinstance(text, str) else _head(text, sample)
    if letters_per_han is None:
        return _HAN_RE.search(head) is not None
    han = len(_HAN_RE.findall(head))
    return han > 0 and han * letters_per_han >= _latin_letters(head)
