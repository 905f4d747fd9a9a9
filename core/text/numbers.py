"""Numbers and dates: one grammar for everything that asks what a number is.

The LLM guard (`fidelity`: "does the reply state a number its input lacks?") and loss validation
(`terms.signals`, `validate.loss`: "which of the input's numbers did the output keep?") read numbers
and dates here, so they agree: "61,000" is 61000, "3.50" is 3.5, "45%" is 45 and 0.45, "1.2 million"
and "120万" are 1200000, "三百" is 300, "百分之五十" is 50 and 0.5; "2024-05-01", "May 1, 2024",
"1 May 2024", "05/01/2024" and "2024年5月1日" are one date. List markers ("1.", "(2)") are not numbers,
nor are the digits of "v4", "x86" or a date.

    >>> [m.value for m in number_mentions("Revenue rose 12% to $4.1 million on 2024-05-01.")]
    ['12', '4100000']
    >>> [m.key for m in date_mentions("on 2024-05-01 and May 1, 2024")]
    [(2024, 5, 1), (2024, 5, 1)]
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

import regex

__all__ = [
    "DATE",
    "LIST_MARKER",
    "NUMBER",
    "YEAR",
    "ZH_NUMERAL",
    "DateKey",
    "DateMention",
    "NumberMention",
    "date_key",
    "date_label",
    "date_matches_of",
    "date_mentions",
    "decimal_key",
    "mask",
    "match_values",
    "number_mentions",
    "number_values",
    "value_set",
    "without_dates",
    "zh_numeral",
    "zh_numeral_checked",
]

DateKey = tuple[int | None, int | None, int | None]

# Numbers not glued to Latin letters/digits: "61,000", "3.5", "45%", "14th"; not the "4" of "v4" or "x86".
NUMBER = regex.compile(
    r"(?<![A-Za-z0-9_.,])(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?"
    # "10k", "2.5M", "$1.5B", "3bn" (case-sensitive: "5m" is metres, "5MB" is no number here)
    r"(?:(?P<suffix>(?-i:k|K|M|B|bn))(?![A-Za-z0-9_])"
    r"|(?:st|nd|rd|th)?(?![A-Za-z0-9_]|\.\d|,\d{3})"
    r"(?:\s*(?P<scale>thousand|million|billion|trillion|[万亿千])(?![A-Za-z])"
    # the rest of a mixed Chinese amount: "3万5千" is 35000, "1亿2000万" 120000000
    r"(?P<more>(?<=万)\d{1,4}[千百十](?!\d)|(?<=亿)\d{1,4}(?:\.\d+)?(?:千万|百万|[千百十万])(?!\d))?)?)"
    r"(?P<pct>\s*(?:%|％|percent\b|per\s+cent\b))?",
    regex.IGNORECASE,
)
LIST_MARKER = regex.compile(r"(?m)^[ \t]*(?:[-*•+][ \t]+)?\(?\d{1,2}[.)、][ \t]+")
ZH_DIGITS = "零〇一二两三四五六七八九"
ZH_NUMERAL = regex.compile(rf"(?:百分之)?[{ZH_DIGITS}十百千万亿]+")
MONTHS = {
    "jan": 1, "feb": 2, "mar": 3, "apr": 4, "may": 5, "jun": 6, "jul": 7, "aug": 8, "sep": 9,
    "oct": 10, "nov": 11, "dec": 12,
}
_MONTH = (r"(?P<{g}>Jan(?:uary)?|Feb(?:ruary)?|Mar(?:ch)?|Apr(?:il)?|May|June?|July?|Aug(?:ust)?"
          r"|Sep(?:t(?:ember)?)?|Oct(?:ober)?|Nov(?:ember)?|Dec(?:ember)?)\.?")
_ORD = r"(?:st|nd|rd|th)?"
_ZH_MONTH = "十[一二]?|[一二三四五六七八九]"
_ZH_DAY = "[二三]?十[一二三四五六七八九]?|三十|[一二三四五六七八九]"
DATE = regex.compile(
    "|".join([
        r"(?<!\d)(?P<iy>\d{4})[-/.](?P<im>\d{1,2})[-/.](?P<id>\d{1,2})(?!\d)",
        r"(?<![\d/])(?P<sa>\d{1,2})/(?P<sb>\d{1,2})/(?P<sy>\d{4})(?!\d)",  # 05/01/2024 (US unless > 12)
        _MONTH.format(g="m1") + rf"\s+(?P<d1>\d{{1,2}}){_ORD},?\s+(?P<y1>\d{{4}})(?!\d)",
        rf"(?P<d2>\d{{1,2}}){_ORD}\s+(?:of\s+)?" + _MONTH.format(g="m2") + r",?\s+(?P<y2>\d{4})(?!\d)",
        _MONTH.format(g="m3") + r",?\s+(?P<y3>\d{4})(?!\d)",
        _MONTH.format(g="m4") + rf"\s+(?P<d4>\d{{1,2}}){_ORD}(?![\d:])",
        rf"(?P<d5>\d{{1,2}}){_ORD}\s+(?:of\s+)?" + _MONTH.format(g="m5") + r"\b",
        r"(?P<zy>\d{4})\s*年\s*(?P<zm>\d{1,2})\s*月(?:\s*(?P<zd>\d{1,2})\s*[日号])?",
        r"(?<!\d)(?P<zm2>\d{1,2})\s*月\s*(?P<zd2>\d{1,2})\s*[日号]",
        # in Chinese numerals: "二〇二四年五月一日", "十二月三十一日"
        rf"(?P<hy>[〇零一二三四五六七八九]{{4}})\s*年\s*(?P<hm>{_ZH_MONTH})\s*月(?:\s*(?P<hd>{_ZH_DAY})\s*[日号])?",
        rf"(?<![〇零一二三四五六七八九十])(?P<hm2>{_ZH_MONTH})\s*月\s*(?P<hd2>{_ZH_DAY})\s*[日号]",
    ]),
)
#: A bare year ("in 2023", "2023年"): a number to the grammar above, but a time reference to
#: whoever asks (no word boundary between a digit and a Han character, hence the second form).
YEAR = regex.compile(r"\b(?:1[5-9]|20)\d{2}\b|(?<!\d)\d{2,4}\s*年")
_SUFFIXES = {"k": "thousand", "K": "thousand", "M": "million", "B": "billion", "bn": "billion"}
SCALES = {"thousand": 3, "million": 6, "billion": 9, "trillion": 12, "千": 3, "万": 4, "亿": 8}
_ZH_VALUE = {"零": 0, "〇": 0, "一": 1, "二": 2, "两": 2, "三": 3, "四": 4, "五": 5, "六": 6, "七": 7,
             "八": 8, "九": 9}
_ZH_UNIT = {"十": 10, "百": 100, "千": 1000}
_DIGITS = regex.compile(r"\d+(?:\.\d+)?")
_MORE_UNITS = {"十": 1, "百": 2, "千": 3, "万": 4}
_LEADING_DIGITS = regex.compile(r"[\d,]+(?:\.\d+)?")
#: What every date holds: a month name, 年 or 月, or digits joined by - / . (a cheap test before DATE).
_DATE_HINT = regex.compile(r"Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec|年|月|\d{4}[-/.]\d|\d/\d")
_HAN_NUMERAL_CHAR = regex.compile(rf"[{ZH_DIGITS}十百千万亿]")


@dataclass(frozen=True, slots=True)
class NumberMention:
    """A number as written, where, its main value ("1.2 million" is 1200000, "45%" is 45) and every
    value it stands for (also 1.2; also 0.45)."""

    text: str
    start: int
    value: str
    values: frozenset[str]


@dataclass(frozen=True, slots=True)
class DateMention:
    """A date as written, where, and its (year, month, day), None for the parts it does not state."""

    text: str
    start: int
    key: DateKey

    @property
    def label(self) -> str:
        return date_label(self.key)


def number_mentions(text: str, *, dates: bool = False,
                    date_matches: Sequence[regex.Match[str]] | None = None) -> list[NumberMention]:
    """The numbers of `text`, Arabic ones first (with scale words and percent signs), then the
    Chinese numerals that are clearly numbers ("三十五", "百分之五十"; not "一些" or "万一"), each in
    text order. List markers and the digits of dates are not numbers here; with `dates=True` a
    date's digits are (what a reply must keep of "2024-05-01" includes 2024). `date_matches`: the
    text's `date_matches`, when the caller has them already."""
    masked = _without_list_markers(text)
    if not dates:
        masked = without_dates(masked, date_matches if date_matches is not None else date_matches_of(text))
    mentions = [NumberMention(m.group().strip(), m.start(), *_main_and_values(m))
                for m in NUMBER.finditer(masked)]
    if not masked.isascii() and _HAN_NUMERAL_CHAR.search(masked):
        for match in ZH_NUMERAL.finditer(masked):
            value = zh_numeral_checked(match.group())
            if value is None:
                continue
            values = {decimal_key(value)}
            if match.group().startswith("百分之"):
                values.add(decimal_key(value / 100))
            mentions.append(NumberMention(match.group(), match.start(), decimal_key(value),
                                          frozenset(values)))
    return mentions


def date_matches_of(text: str) -> list[regex.Match[str]]:
    """`DATE` matches of `text`; the pattern runs only where a date can be (a month name, 年 or 月,
    or digits joined by - / .), as it costs its scan of every position."""
    return list(DATE.finditer(text)) if _DATE_HINT.search(text) is not None else []


def without_dates(text: str, date_matches: Sequence[regex.Match[str]]) -> str:
    """`text` with its dates blanked (same length)."""
    return _blank(text, [(m.start(), m.end()) for m in date_matches]) if date_matches else text


def _without_list_markers(text: str) -> str:
    if "\n" not in text:  # one line: a marker can only open it
        found = LIST_MARKER.match(text)
        return text if found is None else " " * found.end() + text[found.end():]
    return mask(text, LIST_MARKER)


def _blank(text: str, spans: Sequence[tuple[int, int]]) -> str:
    parts: list[str] = []
    last = 0
    for start, end in spans:
        parts.append(text[last:start])
        parts.append(" " * (end - start))
        last = end
    parts.append(text[last:])
    return "".join(parts)


def number_values(text: str) -> list[tuple[str, frozenset[str]]]:
    """Each number of `text` (dates' digits included) as written, with the values it stands for."""
    return [(m.text, m.values) for m in number_mentions(text, dates=True)]


def date_mentions(text: str, date_matches: Sequence[regex.Match[str]] | None = None) -> list[DateMention]:
    """The dates of `text`, in order, with their (year, month, day)."""
    found = date_matches if date_matches is not None else date_matches_of(text)
    return [DateMention(m.group().strip(), m.start(), date_key(m)) for m in found]


def value_set(text: str, *, lenient: bool = False) -> set[str]:
    """Every value the numbers and dates of `text` stand for (numbers as canonical text, dates as
    `date_label`s): what an output is searched for. `lenient` adds every digit run and every Chinese
    numeral, as the side a claim is checked against should (the 4 of "v4", the 一 of "一个")."""
    values = {v for m in number_mentions(text, dates=True) for v in m.values}
    values.update(m.label for m in date_mentions(text))
    if lenient:
        values.update(decimal_key(Decimal(m.group())) for m in _DIGITS.finditer(text))
        for match in ZH_NUMERAL.finditer(text):
            value = zh_numeral(match.group().removeprefix("百分之"))
            if value is not None:
                values.add(decimal_key(value))
                if match.group().startswith("百分之"):
                    values.add(decimal_key(value / 100))
    return values


def match_values(match: regex.Match[str]) -> set[str]:
    """The values a `NUMBER` match stands for: as written, scaled ("1.2 million"), and as a fraction
    for percentages ("45%" also matches "0.45")."""
    return set(_main_and_values(match)[1])


def _main_and_values(match: regex.Match[str]) -> tuple[str, frozenset[str]]:
    scale = match.group("scale") or _SUFFIXES.get(match.group("suffix") or "")
    return _values_of(match.group(), scale, bool(match.group("pct")), match.group("more"))


@functools.lru_cache(maxsize=65_536)
def _values_of(written: str, scale: str | None, percent: bool,
               more: str | None = None) -> tuple[str, frozenset[str]]:
    """(main value, every value) of a number as written (cached: numbers repeat, Decimal is slow).
    `more`: what follows the scale of a mixed Chinese amount ("5千" of "3万5千"), added to it."""
    raw = _LEADING_DIGITS.match(written).group().replace(",", "")  # type: ignore[union-attr]
    try:
        value = Decimal(raw)
    except InvalidOperation:  # pragma: no cover - the pattern only matches digits
        return raw, frozenset()
    main = value
    values = {value}
    if scale:
        main = value.scaleb(SCALES[scale.lower()])
        values.add(main)
    if scale and more:
        digits = _LEADING_DIGITS.match(more).group()  # type: ignore[union-attr]
        unit = sum(_MORE_UNITS[c] for c in more[len(digits):])
        main += Decimal(digits).scaleb(unit)
        values = {main}  # "3万5千" is neither 3 nor 30000
    if percent:
        values.add(value / 100)  # "45%" is also "0.45", in either text
    return decimal_key(main), frozenset(decimal_key(v) for v in values)


def decimal_key(value: Decimal) -> str:
    """Canonical text of a number: no separators, no trailing zeros ("3.50" -> "3.5", "03" -> "3")."""
    text = format(value.normalize(), "f")
    return text if text != "-0" else "0"


def zh_numeral(text: str) -> Decimal | None:
    """Value of a simple Chinese numeral ("三十五" 35, "两千零二十六" 2026, "三万" 30000), or None."""
    if not text:
        return None
    if all(c in _ZH_VALUE for c in text) and len(text) > 1:  # digit by digit: "二〇二六"
        return Decimal("".join(str(_ZH_VALUE[c]) for c in text))
    # 亿 scales everything before it; 万 only what follows the last 亿 ("一亿两千万" is 1.2e8)
    total, wan, section, digit = 0, 0, 0, None
    for char in text:
        if char in _ZH_VALUE:
            digit = _ZH_VALUE[char]
        elif char in _ZH_UNIT:
            section += (1 if digit is None else digit) * _ZH_UNIT[char]
            digit = None
        elif char == "万":
            wan = (wan + section + (digit or 0)) * 10_000
            section, digit = 0, None
        elif char == "亿":
            total = (total + wan + section + (digit or 0)) * 100_000_000
            wan, section, digit = 0, 0, None
        else:  # pragma: no cover - the pattern admits nothing else
            return None
    return Decimal(total + wan + section + (digit or 0))


def zh_numeral_checked(text: str) -> Decimal | None:
    """Chinese numerals that are clearly numbers ("三十五", "百分之五十"), not words that merely
    contain numeral characters ("一些" is cut off before, "万一", "千万" skipped)."""
    percent = text.startswith("百分之")
    body = text.removeprefix("百分之")
    if not body or (body[0] not in ZH_DIGITS[2:] and body[0] != "十"):
        return None
    if not percent and (len(body) < 2 or not any(c in "十百千万亿" for c in body)):
        return None
    if body[0] == "十" and len(body) < 2:
        return None
    return zh_numeral(body)


def date_key(match: regex.Match[str]) -> DateKey:
    """(year, month, day) of a `DATE` match, None for parts it does not state."""
    groups = match.groupdict()

    def num(name: str) -> int | None:
        value = groups.get(name)
        return int(value) if value else None

    def month(name: str) -> int | None:
        value = groups.get(name)
        return MONTHS[value[:3].lower()] if value else None

    if groups.get("iy"):
        return num("iy"), num("im"), num("id")
    if groups.get("sy"):
        first, second = num("sa"), num("sb")
        if first is not None and first > 12:  # 25/12/2024: day first
            return num("sy"), second, first
        return num("sy"), first, second
    for i in "12345":
        if groups.get(f"m{i}"):
            return num(f"y{i}"), month(f"m{i}"), num(f"d{i}")
    def han(name: str) -> int | None:
        value = groups.get(name)
        number = zh_numeral(value) if value else None
        return None if number is None else int(number)

    if groups.get("zy"):
        return num("zy"), num("zm"), num("zd")
    if groups.get("hy"):
        return han("hy"), han("hm"), han("hd")
    if groups.get("hm2"):
        return None, han("hm2"), han("hd2")
    return None, num("zm2"), num("zd2")


def date_label(key: DateKey) -> str:
    """One spelling per date: "2024-05-01", "2024-05", "05-01"."""
    year, month, day = key
    parts = [f"{year:04d}" if year is not None else None, f"{month:02d}" if month is not None else None,
             f"{day:02d}" if day is not None else None]
    return "-".join(p for p in parts if p is not None)


def mask(text: str, pattern: regex.Pattern[str]) -> str:
    """Blank out matches (same length, so offsets stay valid) so later patterns skip them."""
    return pattern.sub(lambda m: " " * len(m.group()), text)
