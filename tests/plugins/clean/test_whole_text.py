"""clean.normalize and clean.dedupe read the whole text at once (str.find hits, byte tables, numpy);
these tests hold each shortcut to the plain per-match or per-word way it replaces."""

from __future__ import annotations

import itertools
import random
import unicodedata
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from compactor.document import Context, Source
from compactor.plugins import clean
from compactor.provenance import Edits, Rewriter, regex_edit
from compactor.run import Run, StepRecord
from compactor.text import similarity as textsim
from compactor.text.tokens import get_counter

from .test_cleaners import synthetic_paragraphs

_HOSTILE = [*"ab Z9 \t\n\n\r\x0c\x0b\x85\x00\x07\x1f\x7f\x80\x9f\u00a0\u3000\u200b\u200d\u2060\ufeff\u00ad"
                "\u0301\u0308e\u1100\u1161\u11a8가\ufb01²①\uff21\uff0c\u2026\u0dd9\u0dcf\u0958İΣσ",
            "数据", "日本語", "café", "Straße", "API接口", "\ud800", "😀", "  ", "\n\n\n", " \n"]
_TEXTS = st.lists(st.sampled_from(_HOSTILE), max_size=40).map("".join)


def _unicode_form_whole(text: str, form: str) -> tuple[str, Edits | None]:
    """clean._unicode_form as it was: the whole text checked, then every line."""
    if form == "none" or unicodedata.is_normalized(form, text):  # type: ignore[arg-type]
        return text, None
    rewriter = Rewriter(text)
    done = line_start = 0
    for line in text.split("\n"):
        line_end = line_start + len(line)
        if not unicodedata.is_normalized(form, line):  # type: ignore[arg-type]
            for match in clean._CLUSTER.finditer(text, line_start, line_end):
                new = unicodedata.normalize(form, match.group())  # type: ignore[arg-type]
                if new != match.group():
                    rewriter.keep(done, match.start())
                    rewriter.replace(match.start(), match.end(), new)
                    done = match.end()
        line_start = line_end + 1
    rewriter.keep(done, len(text))
    return rewriter.result()


def _steps_one_by_one(text: str, form: str, collapse: bool) -> tuple[str, list[Edits]]:
    """normalize_edits as it was: one regex pass of the whole text per step."""
    edits: list[Edits] = []
    for step in ("line ends", "form", "zero width", "control", "spaces", "trailing", "blank lines", "strip"):
        if step == "form":
            text, done = _unicode_form_whole(text, form)
        elif step == "strip":
            text, done = clean._stripped(text) if collapse else (text, None)
        else:
            pattern, new = {
                "line ends": (clean._LINE_ENDS, "\n"), "zero width": (clean._ZERO_WIDTH, ""),
                "control": (clean._CONTROL, ""), "spaces": (clean._SPACES, " "),
                "trailing": (clean._TRAILING, ""), "blank lines": (clean._BLANK_LINES, "\n\n")}[step]
            if not collapse and step in ("spaces", "trailing", "blank lines"):
                continue
            text, done = regex_edit(text, pattern, new)
        if done:
            edits.append(done)
    return text, edits


@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
@given(_TEXTS, st.sampled_from(["NFC", "NFKC", "none"]), st.booleans())
def test_normalize_makes_the_edits_of_one_regex_pass_per_step(text: str, form: str, collapse: bool) -> None:
    assert clean.normalize_edits(text, form, collapse) == _steps_one_by_one(text, form, collapse)  # type: ignore[arg-type]


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(_TEXTS)
def test_runs_are_the_matches_of_the_step_patterns(text: str) -> None:
    for pattern, needles, run, chars in (
            (clean._SPACES, ("  ", "\t", "\f", "\v"), clean._BLANK_RUN, clean._BLANKS),
            (clean._TRAILING, (" \n",), clean._SPACE_RUN, " "),
            (clean._BLANK_LINES, ("\n\n\n",), clean._NEWLINE_RUN, "\n"),
            (clean._LINE_ENDS, ("\r", "\x85"), clean._LINE_ENDS, ""),
            (clean._ZERO_WIDTH, tuple(clean._ZERO_WIDTH_CHARS), clean._ZERO_WIDTH, "")):
        assert clean._runs(text, needles, run, chars) == [m.span() for m in pattern.finditer(text)]


def test_control_check_is_the_control_pattern_for_every_character() -> None:
    for code in [*range(0x200), 0x2028, 0xFEFF, 0xD800, 0x1F600]:
        char = chr(code)
        assert clean._has_control(f"a{char}b") == (clean._CONTROL.search(char) is not None), hex(code)


def test_unicode_form_rewrites_only_the_lines_that_need_it() -> None:
    text = "plain line\n" * 50 + "cafe\u0301 and \u0dd9\u0dcf\n" + "another plain line\n" * 50
    done, edits = clean._unicode_form(text, "NFC")
    assert done == unicodedata.normalize("NFC", text)
    assert edits is not None and [p for p in edits.pieces if not p[4]] == [
        (553, 554, 553, 555, False), (558, 560, 559, 562, False)]  # é; a space and two vowel signs as one
    assert (done, edits) == _unicode_form_whole(text, "NFC")


def _reference_words(text: str) -> list[str]:
    """`textsim.words` as it was: NFKC, then the `WORDS` regex."""
    text = unicodedata.normalize("NFKC", text)
    if "\u0130" in text or "\u03a3" in text:
        return [w.lower() for w in textsim.WORDS.findall(text)]
    return textsim.WORDS.findall(text.lower())


@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
@given(_TEXTS)
def test_words_fast_paths_are_the_regex(text: str) -> None:
    assert textsim.words(text) == _reference_words(text)


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(_TEXTS, st.lists(st.integers(0, 200), max_size=6))
def test_word_values_are_each_words_value(text: str, cuts: list[int]) -> None:
    bounds = sorted({min(c, len(text)) for c in cuts} | {0, len(text)})
    spans = list(itertools.pairwise(bounds))
    values, counts = textsim.word_values(text, spans)
    found = [textsim.words(text[a:b]) for a, b in spans]
    assert counts.tolist() == [len(w) for w in found]
    expected = np.array([textsim.word_value(w) for words in found for w in words], np.uint64)
    assert values.tolist() == textsim._scrambled(expected).tolist()


def test_word_values_tell_long_and_short_words_apart() -> None:
    words = ["a", "ab", "abcdefgh", "abcdefghi", "abcdefghijklmnop", "abcdefghijklmnopq", "数", "ä", "äb",
             "äbc", "café", "straßenbahnhaltestellen", "api数据", "x数据库表"]
    values = [textsim.word_value(w) for w in words]
    assert len(set(values)) == len(words)
    text = " ".join(words)
    assert textsim.words(text) == words
    got, counts = textsim.word_values(text, [(0, len(text))])
    assert counts.tolist() == [len(words)]
    assert got.tolist() == textsim._scrambled(np.array(values, np.uint64)).tolist()


def test_shingle_table_gives_the_index_its_own_prefixes() -> None:
    """Sizes, own shingles and prefixes from the table, against the counter-built `JaccardIndex`."""
    paragraphs = synthetic_paragraphs(400, seed=9, near_share=0.4)
    text = "\n\n".join(paragraphs)
    spans = clean.paragraph_spans(text)
    lists = [textsim.words(text[a:b]) for a, b in spans]
    values, counts = textsim.word_values(text, spans)
    table = textsim.ShingleTable(values, counts)
    orders = [textsim.shingle_order(words) for words in lists]
    index = textsim.JaccardIndex(0.75, textsim.shingle_counts(orders))
    # the bigram behind each shingle, in both spellings
    by_hash = {hash(pair): pair for words in lists for pair in itertools.pairwise(words)}
    by_value: dict[int, tuple[str, ...]] = {}
    at = 0
    for words, n in zip(lists, counts.tolist(), strict=True):
        v = values[at:at + n].tolist()
        for k in range(n - 1):
            by_value[(v[k] * textsim._PAIR + v[k + 1]) % (1 << 64)] = (words[k], words[k + 1])
        at += n
    asking, lengths = [], []
    for i, order in enumerate(orders):
        shingles = set(order)
        assert {by_value[v] for v in table.shingles(i)} == {by_hash[h] for h in shingles}
        own = sum(1 for s in shingles if index.frequency[s] == 1)  # type: ignore[index]
        assert (table.sizes[i], table.own[i]) == (len(shingles), own)
        length = index.prefix_length(len(shingles), own)
        if length > 0:
            asking.append(i)
            lengths.append(length)
    assert len(asking) > 50
    for i, prefix in zip(asking, table.prefixes(asking, lengths), strict=True):
        assert [by_value[v] for v in prefix] == [by_hash[h] for h in index._prefix(set(orders[i]))]


def _dedupe(texts: list[str], **params: Any) -> tuple[list[str], dict[str, Any]]:
    run = Run(get_counter("cl100k_base"))
    run.step = StepRecord(0, "clean.dedupe", "clean")
    result = clean.DedupeCleaner(**params).compactor_clean(
        Context(sources=tuple(Source.from_text(t) for t in texts)), run)
    return [s.text for s in result.sources], dict(run.step.details)


def test_paragraphs_whose_fingerprints_agree_are_compared_word_by_word(
        monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(4)
    paragraphs = synthetic_paragraphs(300, seed=4, near_share=0.3)
    paragraphs += [rng.choice(paragraphs).upper() for _ in range(40)]  # exact repeats: the same words
    texts = ["\n\n".join(paragraphs[:200]), "\n\n".join(paragraphs[200:])]
    expected = _dedupe(texts)
    assert expected[1]["dropped_exact"] >= 40
    monkeypatch.setattr(textsim, "fingerprints", lambda values, counts: [7] * len(counts))
    assert _dedupe(texts) == expected


def test_dedupe_of_sources_without_long_paragraphs() -> None:
    assert _dedupe(["short", "", "yes\n\nno"]) == (["short", "", "yes\n\nno"],
                                                  {"dropped_exact": 0, "dropped_near": 0, "comparisons": 0})
    assert _dedupe([]) == ([], {"dropped_exact": 0, "dropped_near": 0, "comparisons": 0})
