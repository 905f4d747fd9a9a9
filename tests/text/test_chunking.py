"""Chunk invariants, checked as properties on English, Chinese, mixed text and emoji."""

from __future__ import annotations

import itertools

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from compactor import Pipeline, get_counter
from compactor.plugins.chunk import paragraph_spans
from compactor.text.sentences import split_sentences
from compactor.text.spans import is_safe_cut, pack_units, token_windows

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
