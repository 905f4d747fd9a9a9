"""Whole-text passes in `compactor.text.terms`: signals, word counts and phrase holders found for many
texts at once are what each text alone gives, whatever stands next to it; the faster forms of the
names, acronyms, identifiers and date patterns match what the plain ones match."""

from __future__ import annotations

import random

import pytest
import regex

from compactor.text import numbers as nb
from compactor.text import terms as ts

PROSE = (
    "Revenue rose 12% to $4.1 million on 2024-05-01, said Anna Maria Schmidt of the Acme Corp board in "
    "New York. The NASA-JPL team met on May 5; Dr. van Gogh arrived at 10 am.\n"
    "# Results\nSee `rotate_keys()` in src/keys/rotate.py, the getHTTPResponse() call and api.v2.client. "
    "Visit https://example.com/a?b=1 or www.example.org. Call 555-1234 by 05/01/2024 at 3.5 km/h "
    "for 20 USD.\n1. First item\n2) Second item\nTitle\n=====\n```\ncode block\n```\n"
    "会议于二〇二四年五月一日在北京召开，三百人参加，销售额为12万元，增长了百分之五十。《人民日报》报道了“重要讲话”。"
    "Kelvin \u212aing, \u0130stanbul, \u017fubscribe, 〇五年, 々, 𠀀𠀁, 😀 ok, e\u0301cole, x86 v4 1990s."
)
FRAGMENTS = [
    "May", "5", "May 5", "2024", "年", "5月", "三月", "十日", "#", "# Title", "===", "Title\n===", "`x",
    "x`", "```\ncode", "code\n```", "《书", "名》", "“引", "文”", "http://a.b/c", "www.x.com", "foo",
    " Foo", "  Foo", "Foo", ". Foo", "x. Foo Bar", "of the", "Bar", "van Gogh", "1.", "1. item", "- 2) x",
    "1,000", ",000", "5 million", "million", "3万", "5千", "1亿", "2000万", "百分之", "五十", "50%", "%",
    "percent", "per cent", "12th", "th", "v4", "$", "$5", "€ 5", "5 km", "km", "USD", "a_b", "_id", "'x",
    "--", "-a-", "x.py", "a.b.c", "f()", "()", "camelCase", "CamelCase", "a/b/c.txt", "/", "ÉCOLE",
    "〇五年", "々", "\x00", "\n", "", " ", "A\n", "\nA", "I", "AB", "A-B", "AB-12", "foo_bar.x/y.txt",
    "path/to/file.tar.gz", "obj.method()", "McDonald", "__init__.py", "x.y.z()", "1.2.3.4", "e.g. this",
    "12月31日", "2013年", "Dec.", "1st of May", "COOKIE", "Click Here",
]


def _texts(seed: int = 7) -> list[str]:
    rnd = random.Random(seed)
    texts = list(FRAGMENTS)
    for _ in range(400):
        start = rnd.randrange(len(PROSE))
        texts.append(PROSE[start:start + rnd.randrange(1, 120)])
    for _ in range(600):
        texts.append(rnd.choice(FRAGMENTS) + rnd.choice(["", " ", "\n", ". "]) + rnd.choice(FRAGMENTS))
    texts.append(PROSE)
    rnd.shuffle(texts)
    return texts


# the gate signals had before _IDENTIFIER_NEEDS (every IDENTIFIER form holds one of these)
IDENTIFIER_HINT = regex.compile(r"[a-z0-9][A-Z]|_|/|\(\)|\w\.\w+\.\w"
                                r"|\.(?:py|js|ts|go|rs|java|c|cpp|h|md|yaml|yml|json|toml|sql)\b")


def _reference_signals(text: str) -> tuple:
    """The per-text definition, with the plain patterns, for comparison."""
    digits = ts._DIGITS.search(text) is not None
    numerals = digits or (not text.isascii() and ts._ZH_NUMERAL_HINT.search(text) is not None)
    date_matches = nb.date_matches_of(text) if numerals else []
    found = nb.number_mentions(text, date_matches=date_matches) if numerals else []
    dates = nb.date_mentions(text, date_matches)
    number_hits = len(nb.number_mentions(text, dates=True)) if dates else len(found)
    years = len(nb.YEAR.findall(nb.without_dates(text, date_matches))) if digits else 0
    acronyms = frozenset(ts.ACRONYM.findall(text))
    names = {m.strip() for m in ts.NAME.findall(text) if len(m.strip()) > 2}
    quoted = set(ts.QUOTED_ZH.findall(text)) if any(q in text for q in "“「《『") else set()
    headings = {m.strip() for m in ts.HEADING.findall(text)} if ("\n" in text or "#" in text) else set()
    code = {m[:40] for m in ts.CODE.findall(text)} if "`" in text else set()
    return (
        frozenset(m.value for m in found), number_hits, frozenset(d.label for d in dates), len(dates) + years,
        len(ts.UNIT.findall(text)) if digits else 0, frozenset(names | acronyms | quoted),
        frozenset(ts.IDENTIFIER.findall(text)) if IDENTIFIER_HINT.search(text) else frozenset(),
        acronyms, len(ts.URL.findall(text)) if ("http" in text or "www." in text) else 0,
        frozenset(headings | code),
    )


def _fields(sig: ts.Signals) -> tuple:
    return (sig.numbers, sig.number_hits, sig.dates, sig.date_hits, sig.unit_hits, sig.entities,
            sig.identifiers, sig.acronyms, sig.url_hits, sig.structure)


@pytest.mark.parametrize("size", [1, 2, 7, 50, 10_000])
def test_signals_of_many_texts_are_each_texts_own(size: int) -> None:
    texts = _texts()
    for start in range(0, len(texts), size):
        batch = texts[start:start + size]
        ts.signals.cache_clear()
        for text, sig in zip(batch, ts.signals_of(batch), strict=True):
            assert _fields(sig) == _reference_signals(text), repr(text)


def test_the_example_text_has_every_kind_of_signal() -> None:
    sig = ts.signals(PROSE)
    assert {"12", "4100000"} <= sig.numbers and "2024-05-01" in sig.dates
    assert {"Anna Maria Schmidt", "Acme Corp", "New York", "NASA-JPL", "人民日报"} <= sig.entities
    assert {"rotate_keys", "getHTTPResponse()", "src/keys/rotate.py", "api.v2.client"} <= sig.identifiers
    assert sig.url_hits == 2 and sig.unit_hits >= 3 and "# Results" in sig.structure


def test_signals_many_fills_the_cache_that_signals_reads() -> None:
    ts.signals.cache_clear()
    texts = ["Alpha Beta met on 2024-05-01.", "Gamma Delta paid $5.", "Alpha Beta met on 2024-05-01."]
    first = ts.signals.many(texts)
    assert first[0] is first[2]
    info = ts.signals.cache_info()
    assert info[1] == 2 and info[3] == 2  # two distinct texts found, both kept
    assert ts.signals(texts[1]) is first[1]
    assert ts.signals.cache_info()[0] == info[0] + 1
    ts.signals.cache_clear()
    assert ts.signals.cache_info()[3] == 0


@pytest.mark.parametrize("size", [1, 3, 40, 10_000])
def test_word_counts_are_word_count(size: int) -> None:
    texts = [*_texts(3), "_x 'y --", "〇五年 々x", "\U00020000\U00020001 ab", "'", "-a", "a-", "x'_y"]
    for start in range(0, len(texts), size):
        batch = texts[start:start + size]
        assert ts.word_counts(ts.Joined(batch)) == [ts.word_count(t) for t in batch]


def test_phrase_holders_fold_case_as_ignorecase_does() -> None:
    pattern = regex.compile(r"\b(?:subscribe|cookie|skip to content)\b", regex.IGNORECASE)
    texts = ["SUBSCRIBE now", "\u017fubscribe", "COO\u212aIE", "\u0130", "skip to Content",
             "skip  to content", "cookies", "nothing", "", "sub", "xcookie"]
    holders = ts.phrase_holders(ts.Joined(texts), ["subscribe", "cookie", "skip to content"])
    assert holders == {0, 1, 2, 4, 6, 10}
    # the holders are a superset of the texts the pattern matches in
    assert {i for i, t in enumerate(texts) if pattern.search(t)} <= holders


def test_fast_patterns_match_as_the_plain_ones() -> None:
    for text in _texts(11):
        assert ts._NAME_AT_CAPITAL.findall(text) == ts.NAME.findall(text)
        assert ts._ACRONYM_AT_CAPITAL.findall(text) == ts.ACRONYM.findall(text)
        needs = any(p.search(text) for p in ts._IDENTIFIER_NEEDS)
        if ts.IDENTIFIER.search(text):
            assert needs and IDENTIFIER_HINT.search(text), repr(text)
        if needs:
            assert IDENTIFIER_HINT.search(text), repr(text)
        dated = any(p.search(text) for p in ts._DATE_NEEDS)
        assert dated == (nb._DATE_HINT.search(text) is not None), repr(text)


def test_date_needs_follow_the_grammars_hint() -> None:
    # _DATE_NEEDS spells out numbers._DATE_HINT one form per scan: a change there must be made here
    months = "Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec"
    assert nb._DATE_HINT.pattern == months + r"|年|月|\d{4}[-/.]\d|\d/\d"


def test_joined_texts_own_their_offsets() -> None:
    joined = ts.Joined(["ab", "", "cde"])
    assert joined.text == f"ab{ts.SEPARATOR}{ts.SEPARATOR}cde"
    assert joined.starts.tolist() == [0, 2 + len(ts.SEPARATOR), 2 + 2 * len(ts.SEPARATOR)]
    assert joined.owners([0, 1, joined.starts[2], len(joined.text) - 1]) == [0, 0, 2, 2]
    assert joined.span(2) == (int(joined.starts[2]), len(joined.text))
