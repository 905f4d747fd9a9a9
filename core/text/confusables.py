"""The skeleton of a text for rule matching: invisible characters out, look-alike letters folded.

Why: an instruction hidden from rules stays readable to a model. "Ig\u200bnore" (a zero-width
space inside the word), "Disregаrd" (a Cyrillic "а") and "Ｆｏｒｇｅｔ" (full-width letters) read as
"Ignore", "Disregard" and "Forget" to a model, but a rule written in ASCII sees three other words.
`skeleton` removes the characters that draw nothing (zero-width spaces and joiners, soft hyphens,
bidirectional controls, variation selectors, Unicode tag characters) and folds the letters that
look like ASCII ones (Cyrillic and Greek look-alikes, full-width and mathematical letters and
digits) to them, and maps every offset of the result back to the text, so a rule's match can be
cut from the original.

Cost: a text with none of those characters (every ASCII text, nearly all Chinese text) is returned
as it is after one `str.isascii` or one character-class search. Folding is one `str.translate`
(one character for one, offsets unchanged); only removing invisible characters builds an offset map.
"""

from __future__ import annotations

import bisect
import unicodedata
from dataclasses import dataclass

import regex

# Characters that draw nothing between letters: soft hyphen, combining grapheme joiner, Arabic
# letter mark, Hangul fillers, Khmer inherent vowels, Mongolian selectors and vowel separator,
# zero-width space/joiners and directional marks, bidirectional embeddings and isolates, word
# joiner and invisible operators, variation selectors, the BOM, Unicode tags.
_INVISIBLE_RANGES = ((0xAD, 0xAD), (0x34F, 0x34F), (0x61C, 0x61C), (0x115F, 0x1160), (0x17B4, 0x17B5),
                     (0x180B, 0x180F), (0x200B, 0x200F), (0x202A, 0x202E), (0x2060, 0x2064), (0x2066, 0x206F),
                     (0x3164, 0x3164), (0xFE00, 0xFE0F), (0xFEFF, 0xFEFF), (0xFFA0, 0xFFA0),
                     (0xE0000, 0xE007F), (0xE0100, 0xE01EF))
_INVISIBLE_CLASS = "".join(f"{chr(lo)}-{chr(hi)}" if hi > lo else chr(lo) for lo, hi in _INVISIBLE_RANGES)
_INVISIBLE = regex.compile(f"[{_INVISIBLE_CLASS}]+")

# Look-alikes of ASCII letters in the Cyrillic and Greek blocks (what a reader takes for the letter)
_LOOKALIKES = {
    "а": "a", "в": "b", "е": "e", "ё": "e", "к": "k", "м": "m", "н": "h", "о": "o", "р": "p", "с": "c",
    "т": "t", "у": "y", "х": "x", "і": "i", "ї": "i", "ј": "j", "ѕ": "s", "ԁ": "d", "ԛ": "q", "ԝ": "w",
    "һ": "h", "ӏ": "l", "ɡ": "g", "ı": "i", "ȷ": "j", "ℓ": "l",
    "А": "A", "В": "B", "Е": "E", "К": "K", "М": "M", "Н": "H", "О": "O", "Р": "P", "С": "C", "Т": "T",
    "Х": "X", "І": "I", "Ј": "J", "Ѕ": "S", "У": "Y", "Ԁ": "D", "Ԛ": "Q", "Ԝ": "W", "Ӏ": "I",
    "α": "a", "ο": "o", "ν": "v", "ι": "i", "κ": "k", "ρ": "p", "τ": "t", "υ": "u", "χ": "x", "ϲ": "c",
    "ε": "e", "ω": "w", "Α": "A", "Β": "B", "Ε": "E", "Ζ": "Z", "Η": "H", "Ι": "I", "Κ": "K", "Μ": "M",
    "Ν": "N", "Ο": "O", "Ρ": "P", "Τ": "T", "Υ": "Y", "Χ": "X", "Ϲ": "C",
}


def _fold_table() -> dict[int, str]:
    """One character for one: look-alikes, and every full-width, mathematical, circled or
    modifier letter or digit whose compatibility form is one ASCII letter or digit."""
    table = {ord(k): v for k, v in _LOOKALIKES.items()}
    ranges = ((0xFF10, 0xFF5A), (0x1D400, 0x1D7FF), (0x24B6, 0x24E9), (0x1D2C, 0x1D6A), (0x2070, 0x209C),
              (0x1F130, 0x1F189))
    for low, high in ranges:
        for code in range(low, high + 1):
            folded = unicodedata.normalize("NFKC", chr(code))
            if len(folded) == 1 and folded.isascii() and folded.isalnum():
                table[code] = folded
    return table


_FOLD = _fold_table()
# every character `skeleton` changes: a set lookup per character is the fastest test that a text
# holds none (a regex character class of 1,000 characters is 50 times slower)
_SPECIAL = frozenset(chr(c) for c in _FOLD) | frozenset(
    chr(c) for lo, hi in _INVISIBLE_RANGES for c in range(lo, hi + 1))


@dataclass(frozen=True, slots=True)
class Skeleton:
    """A text as rules should read it, and where each of its characters came from."""

    text: str
    # (skeleton offset, original offset) at the start of each kept run; empty: offsets are equal
    runs: tuple[tuple[int, int], ...] = ()

    def original(self, offset: int) -> int:
        """The offset in the original text of skeleton offset `offset` (a start or an end)."""
        if not self.runs:
            return offset
        i = bisect.bisect_right(self.runs, (offset, float("inf"))) - 1
        at, start = self.runs[max(i, 0)]
        return start + offset - at

    def span(self, start: int, end: int) -> tuple[int, int]:
        """The original offsets of skeleton span [start, end): from its first character to just
        after its last one (the invisible characters inside stay inside)."""
        if not self.runs or end <= start:
            return self.original(start), self.original(end)
        return self.original(start), self.original(end - 1) + 1


def has_special(text: str) -> bool:
    """Whether `text` holds an invisible or look-alike character (ASCII never does)."""
    return not text.isascii() and not _SPECIAL.isdisjoint(text)


def skeleton(text: str) -> Skeleton:
    """`text` with invisible characters removed and look-alike letters folded to ASCII."""
    if not has_special(text):
        return Skeleton(text)
    folded = text.translate(_FOLD)
    if _INVISIBLE.search(folded) is None:
        return Skeleton(folded)
    parts: list[str] = []
    runs: list[tuple[int, int]] = []
    at = length = 0
    for m in _INVISIBLE.finditer(folded):
        if m.start() > at:
            runs.append((length, at))
            parts.append(folded[at:m.start()])
            length += m.start() - at
        at = m.end()
    runs.append((length, at))
    parts.append(folded[at:])
    return Skeleton("".join(parts), tuple(runs))


def plain(text: str) -> str:
    """The skeleton, case-folded, one space for every run of blanks, one apostrophe: for comparing
    texts (does a reply quote its input? does a page's hidden phrase reach an output?)."""
    return " ".join(skeleton(text).text.casefold().replace("’", "'").split())
