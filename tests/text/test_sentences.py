"""Tests for compactor.text.sentences: Punkt parity with nltk, Chinese rules, and exact tiling."""

from __future__ import annotations

import json
import time
from collections import defaultdict
from itertools import pairwise
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import compactor.text.sentences as sentences_mod
from compactor.text.sentences import detect_lang, split_sentences


def sents(text: str, lang: str | None = None, **kw: bool) -> list[str]:
    """Sentence strings, so expectations read naturally."""
    return [text[s:e] for s, e in split_sentences(text, lang, **kw)]  # type: ignore[arg-type]


def assert_tiles(text: str, spans: list[tuple[int, int]]) -> None:
    """The contract every caller relies on: spans cover the text exactly, in order."""
    if not text:
        assert spans == []
        return
    assert spans[0][0] == 0
    assert spans[-1][1] == len(text)
    for (_, e), (s2, _) in pairwise(spans):
        assert e == s2
    assert all(s < e for s, e in spans)


# ------------------------------------------------------------------------------------------
# English
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Dr. Smith arrived. He sat.", ["Dr. Smith arrived. ", "He sat."]),
        ("Use tools, e.g. hammers. Then stop.", ["Use tools, e.g. hammers. ", "Then stop."]),
        ("It costs $3.50 today. Yes.", ["It costs $3.50 today. ", "Yes."]),
        ("The U.S. economy grew. Prices rose.", ["The U.S. economy grew. ", "Prices rose."]),
        ('He said "stop." Then left.', ['He said "stop." ', "Then left."]),
        ("Pi is 3.14159 roughly. Fine.", ["Pi is 3.14159 roughly. ", "Fine."]),
        ("Wait... Then it happened.", ["Wait... ", "Then it happened."]),
        ("Mr. and Mrs. Jones left. They ran.", ["Mr. and Mrs. Jones left. ", "They ran."]),
        ("See Fig. 3 for details. Next.", ["See Fig. 3 for details. ", "Next."]),
        ("Really?! Yes!", ["Really?! ", "Yes!"]),
        ("(This is one.) This is two.", ["(This is one.) ", "This is two."]),
        ("J. K. Rowling wrote it. Fans cheered.", ["J. K. Rowling wrote it. ", "Fans cheered."]),
        ("It ended at 5 p.m. The rain stopped.", ["It ended at 5 p.m. ", "The rain stopped."]),
        ("Cats, dogs, etc. are pets. Yes.", ["Cats, dogs, etc. are pets. ", "Yes."]),
        ("One.  Two.\n", ["One.  ", "Two.\n"]),
    ],
)
def test_english_cases(text: str, expected: list[str]) -> None:
    assert sents(text, "en") == expected
    assert sents(text) == expected  # auto-detected as English


def test_english_blank_line_is_hard_break_single_newline_is_not() -> None:
    text = "Heading\n\nFirst para. Second sentence\ncontinues here.\n\nNext para"
    assert sents(text, "en") == [
        "Heading\n\n",
        "First para. ",
        "Second sentence\ncontinues here.\n\n",
        "Next para",
    ]


def test_whitespace_belongs_to_previous_span() -> None:
    text = "  Lead. Tail.   "
    assert sents(text, "en") == ["  Lead. ", "Tail.   "]


def test_empty_and_blank() -> None:
    assert split_sentences("") == []
    assert split_sentences("   ") == [(0, 3)]
    assert split_sentences("no punctuation at all") == [(0, 21)]


def test_offsets_are_characters_not_bytes() -> None:
    text = "Café crème. Naïve résumé. 😀 Done."
    spans = split_sentences(text, "en")
    assert [text[s:e] for s, e in spans] == ["Café crème. ", "Naïve résumé. ", "😀 Done."]


# ------------------------------------------------------------------------------------------
# Agreement with nltk's own Punkt implementation (same shipped parameters)
# ------------------------------------------------------------------------------------------

PARAGRAPH = (
    "Dr. Watson met Mr. Holmes at 221B Baker St. in London. They spoke for 2.5 hours. "
    'Holmes said, "Elementary." Watson laughed! Was it true? The U.S. ambassador, '
    "i.e. the envoy, arrived at 3 p.m. on Jan. 5. He left (quickly.) Prof. J. R. R. "
    "Tolkien wrote many books, e.g. The Hobbit. It sold 100,000 copies in 1937. "
    "Sales rose 3.4% vs. last year... Then they fell.\n\nA new paragraph starts here. "
    "Co. profits, approx. $1.2 bn., beat estimates. \"Good,\" said the C.E.O. 'Very.' End"
)


def _nltk_reference_spans(text: str) -> list[tuple[int, int]]:
    """nltk's PunktSentenceTokenizer built here from the shipped JSON, independent of the module."""
    from nltk.tokenize.punkt import PunktParameters, PunktSentenceTokenizer

    raw = json.loads(
        (Path(sentences_mod.__file__).parent / "data" / "punkt_en.json").read_text("utf-8")
    )
    params = PunktParameters()
    params.abbrev_types = set(raw["abbrev_types"])
    params.collocations = {tuple(c) for c in raw["collocations"]}
    params.sent_starters = set(raw["sent_starters"])
    params.ortho_context = defaultdict(int, raw["ortho_context"])
    return list(PunktSentenceTokenizer(params).span_tokenize(text))


def test_agrees_with_nltk_on_paragraph() -> None:
    ref_starts = [s for s, _ in _nltk_reference_spans(PARAGRAPH) if s > 0]
    blank = PARAGRAPH.index("A new paragraph")
    fast_starts = [s for s, _ in split_sentences(PARAGRAPH, "en")][1:]
    assert sorted(set(ref_starts) | {blank}) == fast_starts
    assert split_sentences(PARAGRAPH, "en", exact=True) == split_sentences(PARAGRAPH, "en")
    assert len(fast_starts) >= 10


def test_internal_fast_equals_internal_nltk() -> None:
    assert sentences_mod._punkt_starts_fast(PARAGRAPH) == sentences_mod._punkt_starts_nltk(
        PARAGRAPH
    )


def test_never_downloads(monkeypatch: pytest.MonkeyPatch) -> None:
    import nltk

    def boom(*_a: object, **_k: object) -> None:
        raise AssertionError("nltk.download must never be called")

    monkeypatch.setattr(nltk, "download", boom)
    sentences_mod._nltk_tokenizer.cache_clear()
    assert len(split_sentences("One. Two.", "en", exact=True)) == 2


def test_shipped_parameters() -> None:
    raw = json.loads(
        (Path(sentences_mod.__file__).parent / "data" / "punkt_en.json").read_text("utf-8")
    )
    abbrevs = set(raw["abbrev_types"])
    for a in ["dr", "mr", "mrs", "prof", "e.g", "i.e", "etc", "vs", "u.s", "p.m", "ph.d", "jan"]:
        assert a in abbrevs
    assert "the" in raw["sent_starters"]
    assert all(isinstance(v, int) for v in raw["ortho_context"].values())


_PIECES = [
    "Dr", "dr", "U.S", "e.g", "etc", "J", "k", "3", "3.5", "1990", "the", "The", "He", "he",
    "word", "Smith", "no", ".", ".", ".", "?", "!", "...", " ", " ", " ", "  ", "\n", "\n\n",
    "\t", '"', "'", "(", ")", "[", "]", "\u201c", "\u201d", "\u2019", ",", ";", ":", "-", "--",
    "*", "@", "$", "%", "\u00a0", "\r\n", "é",
]  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(_PIECES), max_size=30).map("".join))
def test_fast_punkt_matches_nltk_exactly(text: str) -> None:
    assert sentences_mod._punkt_starts_fast(text) == sentences_mod._punkt_starts_nltk(text)
    assert split_sentences(text, "en") == split_sentences(text, "en", exact=True)


def test_fast_is_faster_than_nltk() -> None:
    text = (PARAGRAPH + "\n\n") * 300
    sentences_mod._nltk_tokenizer()  # exclude import / setup from the timing
    split_sentences(text, "en")

    def best(fn: object) -> float:
        times = []
        for _ in range(3):
            t0 = time.perf_counter()
            fn()  # type: ignore[operator]
            times.append(time.perf_counter() - t0)
        return min(times)

    fast = best(lambda: split_sentences(text, "en"))
    exact = best(lambda: split_sentences(text, "en", exact=True))
    assert fast * 2 < exact


# ------------------------------------------------------------------------------------------
# Chinese and mixed
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "他说：“你好。”然后走了。今天下雨！",
            ["他说：“你好。”", "然后走了。", "今天下雨！"],
        ),
        ("明天呢？！好吧……再见。", ["明天呢？！", "好吧……", "再见。"]),
        ("「你好。」他说。『再见！』", ["「你好。」", "他说。", "『再见！』"]),
        ("第一（注释。）第二；第三", ["第一（注释。）", "第二；", "第三"]),
        ("真的吗?是的!好;走", ["真的吗?", "是的!", "好;", "走"]),
        ("这是第一行\n这是第二行\n\n第三段。", ["这是第一行\n", "这是第二行\n\n", "第三段。"]),
        ('他说："你好。"然后走了。', ['他说："你好。"', "然后走了。"]),
        ("版本3.5发布了。很好", ["版本3.5发布了。", "很好"]),
        ("结束。 下一句。", ["结束。 ", "下一句。"]),
    ],
)
def test_chinese_cases(text: str, expected: list[str]) -> None:
    assert detect_lang(text) == "zh"
    assert sents(text) == expected


def test_chinese_terminators_apply_in_english_mode() -> None:
    assert sents("The sign said 你好。Then we left.", "en") == [
        "The sign said 你好。",
        "Then we left.",
    ]


def test_invalid_lang() -> None:
    with pytest.raises(ValueError):
        split_sentences("Hi.", "fr")  # type: ignore[arg-type]


def test_chinese_opening_ascii_quote_goes_to_next_sentence() -> None:
    assert sents('你好。"再见"他说。', "zh") == ["你好。", '"再见"他说。']


def test_cjk_blocks_hold_every_cjk_letter() -> None:
    """The sparse search for Chinese sentence ends looks for CJK letters in `_CJK_BLOCKS`."""
    import regex

    every = "".join(map(chr, range(0xD800))) + "".join(map(chr, range(0xE000, 0x110000)))
    blocks = "".join(f"\\U{lo:08x}-\\U{hi:08x}" for lo, hi in sentences_mod._CJK_BLOCKS)
    outside = regex.compile(f"(?V1)[[{sentences_mod._CJK_CLASS}]--[{blocks}]]")
    assert regex.search(f"[{sentences_mod._CJK_CLASS}]", every)
    assert outside.search(every) is None
    narrower = regex.compile(f"(?V1)[[{sentences_mod._CJK_CLASS}]--[\\u1100-\\uffef]]")
    assert narrower.search(every) is not None  # the check can find a letter outside


_ZH_PIECES = [
    "!", "?", ";", ".", "...", "…", "。", "！", "？", "；", "」", "』", "”", "’", ")", "]", "）",
    '"', "'", " ", "\n", "\u3000", "\x1c", "中", "文", "a", "bc", "Dr.", "‼", "ｱ", "가", "々",
    "\U00020000", "\u2e80", "—", "“", "㐀", "\U0001b000", "3",
]  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(_ZH_PIECES), max_size=40).map("".join))
def test_sparse_chinese_ends_match_the_full_scan(text: str) -> None:
    """Mostly English text tries the Chinese end pattern only at hints: the same ends as a scan."""
    assert sentences_mod._zh_starts(text, sparse=True) == sentences_mod._zh_starts(text)


def test_long_english_text_with_some_chinese_finds_the_same_chinese_ends() -> None:
    text = ("The report is done, and the reviewers agreed with every one of its findings. "
            "他说：“好。”Then we left! 结果呢？ Fine... Mr. Lee said so; nobody argued with him. ") * 60
    assert len(text) >= sentences_mod._SPARSE_MIN and detect_lang(text) == "en"
    spans = split_sentences(text)
    assert_tiles(text, spans)
    starts = sentences_mod._zh_starts(text)
    assert sentences_mod._zh_starts(text, sparse=True) == starts
    assert set(starts) - {len(text)} <= {s for s, _ in spans}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "我喜欢Python. It is great! 你呢?我也喜欢。",
            ["我喜欢Python. ", "It is great! ", "你呢?", "我也喜欢。"],
        ),
        (
            "We use BERT and GPT. 我们使用了 BERT 和 GPT 模型。The results are good.",
            ["We use BERT and GPT. ", "我们使用了 BERT 和 GPT 模型。", "The results are good."],
        ),
        (
            "他是Dr. Smith的朋友。Dr. Smith arrived. He sat.",
            ["他是Dr. Smith的朋友。", "Dr. Smith arrived. ", "He sat."],
        ),
        ("第一行English line\nsecond line。", ["第一行English line\n", "second line。"]),
    ],
)
def test_mixed_cases(text: str, expected: list[str]) -> None:
    assert detect_lang(text) == "mixed"
    assert sents(text) == expected


# ------------------------------------------------------------------------------------------
# Language detection
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "lang"),
    [
        ("The quick brown fox jumps over the lazy dog.", "en"),
        ("", "en"),
        ("12345 !!! ...", "en"),
        ("今天天气很好，我们去公园散步吧。", "zh"),
        ("こんにちは、世界。", "zh"),
        ("안녕하세요 세계.", "zh"),
        ("我们使用 Python 和 TensorFlow 来训练模型。", "mixed"),
        ("This English report mentions 北京 once in a long sentence about travel plans.", "en"),
        ("The meeting 会议 discussed 预算 and hiring plans.", "mixed"),
        ("Résumé naïve café déjà vu.", "en"),
    ],
)
def test_detect_lang(text: str, lang: str) -> None:
    assert detect_lang(text) == lang


def test_detect_lang_large_text_samples_whole_document() -> None:
    text = "English words only here. " * 20_000 + "中文内容在这里。" * 60_000
    assert detect_lang(text) in ("mixed", "zh")


# ------------------------------------------------------------------------------------------
# Tiling invariant
# ------------------------------------------------------------------------------------------

_ALPHABET = st.one_of(
    st.characters(codec="utf-8"),
    st.sampled_from(list("。！？；…」』”’）》“‘（《.?!;:,\"'()[] \n\t\r中文字日本語한국😀🎉👍🏽")),
)


@settings(max_examples=300, deadline=None)
@given(
    st.text(alphabet=_ALPHABET, max_size=80),
    st.sampled_from([None, "en", "zh", "mixed"]),
)
def test_spans_tile_text(text: str, lang: str | None) -> None:
    assert_tiles(text, split_sentences(text, lang))  # type: ignore[arg-type]


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.sampled_from(
            ["Dr. Smith", "He sat.", "e.g. this", "3.50", "他说：“你好。”", "然后！", "Yes?", "\n",
             "\n\n", " ", "😀", "U.S.", "……", "」", "Really!!!", '"Stop."', "(ok.)"]
        ),
        max_size=25,
    ).map("".join),
    st.sampled_from([None, "en", "zh", "mixed"]),
    st.booleans(),
)  # fmt: skip
def test_spans_tile_realistic_text(text: str, lang: str | None, exact: bool) -> None:
    spans = split_sentences(text, lang, exact=exact)  # type: ignore[arg-type]
    assert_tiles(text, spans)
    assert "".join(text[s:e] for s, e in spans) == text
