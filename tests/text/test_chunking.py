"""Chunk invariants, checked as properties on English, Chinese, mixed text and emoji."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import compactor.text.spans as spans_mod
from compactor import Pipeline, get_counter
from compactor.plugins.chunk import (
    _CJK_BOUNDS,
    _PARAGRAPH_BREAK,
    joined_headings,
    paragraph_spans,
    span_langs,
)
from compactor.text.language import ANY_CJK_RANGES, detect_lang
from compactor.text.sentences import split_sentences
from compactor.text.spans import SpanCounter, is_safe_cut, pack_units, token_windows, unit_chunks

COUNTER = get_counter("cl100k_base")
WORDS = ["the", "model", "Dr.", "e.g.", "3.14", "failed", "error:", "数据", "模型", "失败了。",
         "你好！", "😀", "🚀🚀", "naïve", "\n", "\n\n", "  ", "Okay.", "—", "https://x.org/a?b=1",
         "東京", "∑", "\t", "ÅÄÖ", "。", "“引号”", "x" * 30]
texts = st.lists(st.sampled_from(WORDS), min_size=0, max_size=200).map(" ".join) | st.text(
    alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=600)
SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def assert_cover(text: str, spans: list[tuple[int, int, int]], size: int, overlap: int) -> None:
    if not text:
        assert spans == []
        return
    assert spans[0][0] == 0
    assert spans[-1][1] == len(text)
    for start, end, tokens in spans:
        assert 0 <= start < end <= len(text)
        piece = text[start:end]
        assert tokens == COUNTER.count(piece), (piece, tokens)
        assert tokens <= size
    for (s1, e1, _), (s2, e2, _) in itertools.pairwise(spans):
        assert s1 < s2 and e1 < e2  # in order, always progressing
        assert s2 <= e1  # no gap
        if overlap == 0:
            assert s2 == e1
        else:
            assert COUNTER.count(text[s2:e1]) <= overlap + 2


@SETTINGS
@given(text=texts, size=st.integers(8, 64), overlap_share=st.sampled_from([0, 0.1, 0.4]))
def test_token_windows_cover_the_text_within_size(text: str, size: int, overlap_share: float) -> None:
    overlap = int(size * overlap_share)
    assert_cover(text, token_windows(text, COUNTER, size, overlap), size, overlap)


@SETTINGS
@given(text=texts, size=st.integers(8, 64))
def test_sentence_packing_covers_the_text_within_size(text: str, size: int) -> None:
    packed = pack_units(text, split_sentences(text), COUNTER, size)
    assert_cover(text, [(s, e, t) for s, e, t, _, _ in packed], size, 0)


@SETTINGS
@given(text=texts, size=st.integers(8, 64))
def test_paragraph_packing_covers_the_text_within_size(text: str, size: int) -> None:
    packed = pack_units(text, paragraph_spans(text) if text else [], COUNTER, size)
    assert_cover(text, [(s, e, t) for s, e, t, _, _ in packed], size, 0)


def test_safe_cuts_keep_counts_additive() -> None:
    text = "The build failed.\nRetry with --verbose and check the log. 构建失败了。"
    cuts = [i for i in range(1, len(text)) if is_safe_cut(text, i)]
    assert cuts
    for cut in cuts:
        assert COUNTER.count(text[:cut]) + COUNTER.count(text[cut:]) == COUNTER.count(text)


def test_windows_prefer_sentence_ends() -> None:
    text = " ".join(f"Sentence number {i} is here." for i in range(200))
    spans = token_windows(text, COUNTER, 50, 0)
    assert len(spans) > 10
    assert all(text[s:e].rstrip().endswith(".") for s, e, _ in spans)


def test_chinese_windows_never_split_a_character() -> None:
    text = "这是一个很长的中文句子，用来测试分块是否会切断汉字。" * 40 + "😀" * 50
    spans = token_windows(text, COUNTER, 16, 4)
    rebuilt = "".join(text[s:e] for s, e, _ in spans)
    assert "\ufffd" not in rebuilt
    assert all(t <= 16 and t == COUNTER.count(text[s:e]) for s, e, t in spans)


def test_chunk_ids_are_stable_and_units_recorded() -> None:
    pipeline = Pipeline.from_string("version: 1\nsteps:\n  - use: chunk.sentences\n"
                                    "    with: {size: 12, overlap: 4}\n")
    text = "Dr. Smith came home. He was tired, e.g. from work. 他回家了。然后睡觉了！" * 3
    first = pipeline.run(text)
    second = pipeline.run(text)
    assert [c.id for c in first.chunks] == [c.id for c in second.chunks]
    assert all(c.units is not None and c.units[0] < c.units[1] for c in first.chunks)
    assert {c.lang for c in first.chunks} & {"zh", "mixed"}
    assert not any(c.text.startswith("Smith") for c in first.chunks)  # "Dr." did not split


def test_sentence_overlap_repeats_trailing_sentences() -> None:
    text = " ".join(f"Fact {i} is true." for i in range(30))
    packed = pack_units(text, split_sentences(text), COUNTER, 20, overlap=6)
    assert any(b[3] < a[4] for a, b in itertools.pairwise(packed))
    assert all(t <= 20 for _, _, t, _, _ in packed)


def test_paragraph_chunker_keeps_paragraphs_whole() -> None:
    pipeline = Pipeline.from_string("version: 1\nsteps:\n  - use: chunk.paragraphs\n"
                                    "    with: {size: 40}\n")
    paragraphs = [f"Paragraph {i} talks about topic {i} in a few words." for i in range(12)]
    context = pipeline.run("\n\n".join(paragraphs))
    assert len(context.chunks) >= 3
    for chunk in context.chunks:
        assert chunk.tokens <= 40
        assert chunk.text.strip().startswith("Paragraph") and chunk.text.strip().endswith(".")


def headings_one_by_one(text: str, spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The heading rule applied to every sentence in turn: what `joined_headings` must equal."""
    out: list[tuple[int, int]] = []
    i = 0
    while i < len(spans):
        start, end = spans[i]
        if i + 1 < len(spans):
            line = text[start:end]
            body = line.strip()
            before = text[:start].rstrip(" \t")
            if (body and len(body) <= 40 and line.rstrip(" \t").endswith("\n") and line.count("\n") == 1
                    and (not before.strip() or _PARAGRAPH_BREAK.search(before[-8:]) is not None)
                    and not regex_heading_end(body)):
                out.append((start, spans[i + 1][1]))
                i += 2
                continue
        out.append((start, end))
        i += 1
    return out


def regex_heading_end(body: str) -> bool:
    import regex

    return regex.search(r"[.!?;:。！？；：…]\W*$", body) is not None


HEADING_PIECES = ["\n", "\n\n", "\n \n", " ", "\t", "  ", "Title", "标题", "第一章 开始", "。", "Short.",
                  "END:", "他说：", "x", "?", "\u3000", "\r", "word", "A sentence that runs on for a while."]


@settings(max_examples=300, deadline=None)
@given(pieces=st.lists(st.sampled_from(HEADING_PIECES), max_size=25),
       cuts=st.lists(st.integers(1, 400), max_size=12), by_sentence=st.booleans())
@example(pieces=["标题", "\n", "他说：", "。"], cuts=[], by_sentence=True)  # a title opening the text
@example(pieces=["x", "\n\n", "Short.", "Title", "\n", "word"], cuts=[3, 9, 15], by_sentence=False)
def test_joined_headings_equal_the_rule_applied_sentence_by_sentence(
        pieces: list[str], cuts: list[int], by_sentence: bool) -> None:
    text = "".join(pieces)
    if by_sentence:
        spans = split_sentences(text)
    else:
        bounds = [0, *sorted({c for c in cuts if c < len(text)}), len(text)] if text else []
        spans = list(itertools.pairwise(bounds))
    assert joined_headings(text, spans) == headings_one_by_one(text, spans)


def test_a_heading_after_a_blank_line_in_a_long_text_joins_its_sentence() -> None:
    text = "。".join(f"第{i}句话" for i in range(300)) + "。\n\n第二章\n正文开始了。后来。\n标题二\n"
    spans = split_sentences(text)
    joined = joined_headings(text, spans)
    assert joined == headings_one_by_one(text, spans)
    assert any(text[s:e] == "第二章\n正文开始了。" for s, e in joined)
    assert len(joined) == len(spans) - 1  # the last line has no sentence under it


def test_span_langs_equal_detect_lang_of_each_span() -> None:
    text = ("The build failed. 构建失败了。" * 20 + "Only English here. " * 40 + "中文句子。" * 30)
    cuts = [*range(0, len(text), 7), len(text)]
    spans = list(itertools.pairwise(cuts))
    assert len(spans) >= 32  # the array path
    langs = span_langs(text, spans)
    assert langs == [detect_lang(text[s:e]) for s, e in spans]
    assert {"en", "zh"} <= set(langs)
    assert span_langs("Plain English. " * 40, [(0, 15), (15, 30)]) == ["en", "en"]


def test_span_langs_see_exactly_has_cjks_characters() -> None:
    import re

    import numpy as np

    every = "".join(map(chr, range(0xD800))) + "".join(map(chr, range(0xE000, 0x110000)))
    points = np.frombuffer(every.encode("utf-32-le"), dtype=np.uint32)
    held = np.flatnonzero(np.searchsorted(_CJK_BOUNDS, points, side="right") % 2 == 1)
    expected = [m.start() for m in re.finditer(f"[{ANY_CJK_RANGES}]", every)]
    assert len(expected) > 100_000
    assert held.tolist() == expected


ENGLISH = " ".join(f"Sentence {i} says naïve things about 😀 and e.g. tests." for i in range(300))
CHINESE = "".join(f"这是第{i}个句子，用来测试分块。" for i in range(300))


@pytest.mark.parametrize("text", [ENGLISH, CHINESE, ENGLISH[:3000] + CHINESE[:3000]])
@pytest.mark.parametrize("arrays", [False, True])
def test_unit_and_packed_counts_are_standalone_counts(text: str, arrays: bool,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Counts from the whole-text encode (mostly safe cuts) or from each unit encoded alone (mostly
    unsafe cuts, Chinese), with offsets from arrays or lists, are each chunk's own count."""
    if arrays:
        monkeypatch.setattr(spans_mod, "_ARRAY_MIN_TOKENS", 0)
    units = split_sentences(text)
    for size in (12, 40):
        for start, end, tokens, _, _ in unit_chunks(text, units, COUNTER, size):
            assert tokens == COUNTER.count(text[start:end]) <= size
        packed = pack_units(text, units, COUNTER, size)
        assert_cover(text, [(s, e, t) for s, e, t, _, _ in packed], size, 0)


def test_token_indices_from_arrays_equal_the_one_by_one_search(monkeypatch: pytest.MonkeyPatch) -> None:
    text = ENGLISH[:2000] + CHINESE[:500] + "😀\u00e9\U00020000 done."
    cuts = sorted({0, len(text), *range(0, len(text), 13)})
    one_by_one = SpanCounter(text, COUNTER)
    expected = [one_by_one.token_at(c) for c in cuts]
    monkeypatch.setattr(spans_mod, "_ARRAY_MIN_TOKENS", 0)
    arrays = SpanCounter(text, COUNTER)
    assert arrays.tokens_at(cuts) == expected
    assert [arrays.token_at(c) for c in cuts] == expected  # the scalar look-up on the arrays
    assert [arrays.byte_at(c) for c in cuts] == [len(text[:c].encode()) for c in cuts]
