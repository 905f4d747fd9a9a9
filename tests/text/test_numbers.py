"""One number/date grammar: the LLM guard and validate.loss agree on what a number is."""

from __future__ import annotations

import pytest

from compactor.document import Chunk, Context
from compactor.plugins.validate import loss_report
from compactor.text import numbers as nb
from compactor.text.fidelity import find_invented
from compactor.text.terms import signals

#: (source, a faithful restatement in other spellings, an unfaithful one, the number it changes)
CASES = [
    ("Prices rose 3.5% this quarter.", "Prices rose 3.5 percent this quarter.",
     "Prices rose 4.5% this quarter.", "3.5"),
    ("We shipped 1,200 units.", "We shipped 1200 units.", "We shipped 1,300 units.", "1200"),
    ("The launch was on 2024-05-01.", "The launch was on May 1, 2024.", "The launch was on 2024-06-01.",
     "2024-05-01"),
    ("Revenue reached $4.1 million.", "Revenue reached 4,100,000 dollars.", "Revenue reached $4.2 million.",
     "4100000"),
    ("会议有三百人参加。", "会议有300人参加。", "会议有四百人参加。", "300"),
    ("销售额为12万元。", "销售额为120000元。", "销售额为13万元。", "120000"),
    ("We have 10k users and a $1.5B deal.", "We have 10,000 users and a 1,500,000,000 dollar deal.",
     "We have 20k users and a $1.5B deal.", "10000"),
    ("增长了百分之五十。", "增长了50%。", "增长了百分之六十。", "50"),
    ("项目于2024年5月1日启动。", "项目于2024-05-01启动。", "项目于2024年6月1日启动。", "2024-05-01"),
    ("项目于二〇二四年五月一日启动。", "项目于2024-05-01启动。", "项目于2024年6月1日启动。", "2024-05-01"),
]


def _loss(source: str, output: str) -> dict:
    chunk = Chunk(id="s-0000", source_id="s", index=0, start=0, end=len(source), text=source, tokens=10)
    return loss_report(Context(chunks=(chunk,), output=output))["categories"]["numbers_dates"]


@pytest.mark.parametrize(("source", "faithful", "unfaithful", "item"), CASES)
def test_guard_and_loss_agree(source: str, faithful: str, unfaithful: str, item: str) -> None:
    # a restatement in other spellings: the guard finds nothing invented, the loss report nothing lost
    assert not [f for f in find_invented(faithful, source) if f.kind in ("number", "date")]
    assert _loss(source, faithful)["retention"] == 1.0
    # a changed number: the guard flags it and the loss report names the source's value as lost
    assert [f for f in find_invented(unfaithful, source) if f.kind in ("number", "date")]
    lost = _loss(source, unfaithful)
    assert lost["retention"] < 1.0 and item in lost["lost"]


@pytest.mark.parametrize(("text", "values"), [
    ("3.5%", {"3.5"}), ("1,200", {"1200"}), ("12万", {"120000"}), ("三百", {"300"}),
    ("1.2 million users", {"1200000"}), ("百分之五十", {"50"}),
])
def test_signals_read_numbers_with_the_grammar(text: str, values: set[str]) -> None:
    assert set(signals(text).numbers) == values
    assert {m.value for m in nb.number_mentions(text)} == values


def test_dates_are_one_date_in_every_spelling() -> None:
    spellings = ["2024-05-01", "May 1, 2024", "1 May 2024", "05/01/2024", "2024年5月1日", "2024/5/1"]
    assert {m.label for s in spellings for m in nb.date_mentions(s)} == {"2024-05-01"}
    assert nb.date_mentions("25/12/2024")[0].key == (2024, 12, 25)  # day first when it must be
    assert signals("due 2024-05-01").dates == frozenset({"2024-05-01"})


def test_what_is_not_a_number() -> None:
    assert nb.number_mentions("1. First item\n2. Second item") == []  # list markers
    assert nb.number_mentions("run x86 on v4") == []
    assert nb.number_mentions("一些人说万一") == []
    assert [m.value for m in nb.number_mentions("on 2024-05-01 we sold 7")] == ["7"]  # a date's digits
    assert {v for _, vs in nb.number_values("on 2024-05-01") for v in vs} >= {"2024"}  # unless asked


def test_the_guard_uses_the_grammar_module() -> None:
    import compactor.text.fidelity as fidelity

    assert fidelity._NUMBER is nb.NUMBER and fidelity._DATE is nb.DATE


@pytest.mark.parametrize(("text", "value"), [
    ("一亿两千万", "120000000"), ("五亿三千万零八", "530000008"), ("三万亿", "3000000000000"),
    ("一亿零五百万", "105000000"), ("十二万五千", "125000"),
])
def test_chinese_big_numbers_scale_each_section_once(text: str, value: str) -> None:
    # 万 after 亿 scales only what follows the 亿 (it multiplied the 亿 part too: 1.00002e12)
    assert [m.value for m in nb.number_mentions(text)] == [value]
    assert not [f for f in find_invented("预算1.2亿元。", "预算一亿两千万元。") if f.kind == "number"]
    assert _loss("预算一亿两千万元。", "预算120000000元。")["retention"] == 1.0


@pytest.mark.parametrize(("text", "value"), [
    ("3万5千", "35000"), ("1亿2000万", "120000000"), ("1亿2千万", "120000000"), ("2万3百", "20300"),
])
def test_mixed_chinese_amounts_are_one_number(text: str, value: str) -> None:
    # "3万5千" was two numbers, 30000 and 5000: "35000" was flagged and 30000 reported lost
    assert [m.value for m in nb.number_mentions(f"有{text}人")] == [value]
    source, faithful = f"有{text}人。", f"有{value}人。"
    assert not [f for f in find_invented(faithful, source) if f.kind == "number"]
    assert _loss(source, faithful)["retention"] == 1.0
    assert [f for f in find_invented("有3万6千人。", "有3万5千人。") if f.kind == "number"]
    assert _loss("有3万5千人。", "有36000人。")["lost"] == ["35000"]


def test_dates_in_chinese_numerals_are_dates() -> None:
    # "二〇二四年五月一日" was no date: its restatement "2024-05-01" was flagged as invented
    assert [m.label for m in nb.date_mentions("项目于二〇二四年五月一日启动")] == ["2024-05-01"]
    assert [m.label for m in nb.date_mentions("截止十二月三十一日")] == ["12-31"]
    assert nb.number_mentions("二零二四年十二月三十一日") == []  # a date's numerals are not numbers
    source = "项目于二〇二四年五月一日启动。"
    assert not [f for f in find_invented("项目于2024-05-01启动。", source) if f.kind in ("number", "date")]
    assert [f for f in find_invented("项目于2024-06-01启动。", source) if f.kind == "date"]
    assert _loss("项目于2024年5月1日启动。", source)["retention"] == 1.0
