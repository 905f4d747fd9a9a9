"""compactor.text.language: the one language detector, and no second one anywhere in the package."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from compactor.text import language, sentences
from compactor.text.language import CJK_RANGES, HAN_BASIC, detect_lang, has_cjk, is_chinese

from ..helpers import REPO

ROOT = REPO

ENGLISH = ("The cache hit rate rose after the third change, and the team shipped the release on Friday. "
           "Nobody expected the latency to drop by half, but the profiler showed why. ")
CHINESE = ("缓存命中率在第三次修改后明显上升，团队在周五发布了新版本。"
           "没有人想到延迟会减半，但性能分析器说明了原因。")


@pytest.mark.parametrize(("text", "lang"), [
    (ENGLISH, "en"),
    (CHINESE, "zh"),
    ("The meeting covered three topics. 会议讨论了三个主题，包括预算和招聘。 Then we left early.", "mixed"),
    ("", "en"),
    ("ひらがなとカタカナだけのぶんしょうです。", "zh"),  # kana is CJK: Chinese/Japanese sentence rules
    ('{"id": 42, "items": [1, 2, 3], "ok": true}\nfor (i = 0; i < n; i++) { x[i] = f(i); }', "en"),
    ("3.14159 2718 1,000,000 42% 2026-11-25 +86 10 1234 5678", "en"),
])
def test_detect_lang(text: str, lang: str) -> None:
    assert detect_lang(text) == lang


def test_one_chinese_name_in_long_english_text_is_english() -> None:
    text = ENGLISH * 20 + "The director 张艺谋 attended the premiere. " + ENGLISH * 20
    assert detect_lang(text) == "en"
    assert not is_chinese(text)


def test_chinese_text_with_english_terms_is_chinese() -> None:
    text = ("我们用 Python 和 PyTorch 训练模型，然后把服务部署到 Kubernetes 集群上。"
            "训练数据来自公司内部的日志系统，经过清洗、去重和标注之后，总共保留了大约三十万条样本。"
            "上线以后，平均响应时间从八百毫秒降到了两百毫秒左右。")
    assert detect_lang(text) == "zh"
    assert is_chinese(text)


def test_is_chinese_counts_han_against_latin_letters() -> None:
    assert is_chinese(CHINESE)
    assert not is_chinese(ENGLISH)
    assert not is_chinese("")
    assert not is_chinese("ひらがなとカタカナだけのぶんしょうです。")  # no Han: not Chinese
    assert not is_chinese("12345 67890 {}[]")
    assert is_chinese("修复" + "a" * 16)  # one Han per eight letters: the threshold itself
    assert not is_chinese("修复" + "a" * 17)
    # Chinese prose amid code and paths (a user asking an agent) stays Chinese
    assert is_chinese("请帮我修复 src/compactor/run.py 里的 TypeError，并在测试里加一个用例")


def test_is_chinese_over_several_texts_reads_only_the_sample() -> None:
    read: list[int] = []

    def texts() -> Iterator[str]:
        for i in range(1000):
            read.append(i)
            yield CHINESE
    assert is_chinese(texts(), sample=500)
    assert len(read) < 20
    assert not is_chinese([ENGLISH] * 50 + [CHINESE] * 50, sample=2000)  # Chinese beyond the sample
    assert is_chinese([ENGLISH[:40], CHINESE])


def test_is_chinese_any_han_mode() -> None:
    passage = "Zhang Yimou (Chinese: 张艺谋; born 14 November 1950) is a Chinese film director." * 3
    assert not is_chinese(passage)
    assert is_chinese(passage, letters_per_han=None)
    assert not is_chinese(passage, sample=20, letters_per_han=None)
    assert not is_chinese(ENGLISH, letters_per_han=None)


def test_detect_lang_sample_reads_windows_across_the_text() -> None:
    text = ENGLISH * 200 + CHINESE * 2000
    assert detect_lang(text[:20_000]) == "en"
    assert detect_lang(text, sample=2_000) == "zh"  # windows reach the Chinese tail
    with pytest.raises(ValueError, match="sample"):
        detect_lang(text, sample=0)


def test_classes() -> None:
    cjk = re.compile(f"[{CJK_RANGES}]")
    assert all(cjk.match(ch) for ch in "中あア\u1100한㐀豈\U00020000")
    assert not any(cjk.match(ch) for ch in "aZ9。，！ ")
    assert has_cjk("only a fullwidth comma，") and not has_cjk(ENGLISH)
    assert re.fullmatch(f"[{HAN_BASIC}]+", "中文") is not None


def test_sentences_reexports_the_detector() -> None:
    assert sentences.detect_lang is language.detect_lang
    assert sentences.Lang is language.Lang


_RANGE = re.compile(r'\\u4e00-\\u9fff|\u4e00-\u9fff|"\\u4e00"\s*<=|"\u4e00"\s*<=', re.IGNORECASE)


def test_no_other_module_spells_the_han_range() -> None:
    modules = sorted([*(ROOT / "core").rglob("*.py"), *(ROOT / "plugins").rglob("*.py")])
    assert ROOT / "core" / "text" / "language.py" in modules and len(modules) > 30
    offenders = [str(p.relative_to(ROOT)) for p in modules
                 if p.name != "language.py" and _RANGE.search(p.read_text(encoding="utf-8"))]
    assert offenders == []
    # the text modules that need a CJK class take it from language.py
    for name in ("plugins/clean/html.py", "core/text/relevance.py", "core/text/sentences.py"):
        assert "from compactor.text.language import" in (ROOT / name).read_text(encoding="utf-8"), name
    assert _RANGE.search((ROOT / "core" / "text" / "language.py").read_text(encoding="utf-8"))


@pytest.mark.parametrize("text", [
    "Встреча в Пекине (北京) прошла успешно, обсудили поставки на следующий год.",
    "Η συνάντηση στο Πεκίνο (北京) ήταν επιτυχής και σύντομη.",
    "Réunion à Pékin (北京) : débat très animé sur les échéances.",
])
def test_one_chinese_name_in_a_non_latin_alphabet_is_not_chinese(text: str) -> None:
    # only ASCII letters were counted against Han: Russian or Greek with one Chinese name was "zh"
    # (Chinese sentence rules) and is_chinese (headings and prompts written in Chinese)
    assert detect_lang(text) == "en" and not is_chinese(text)
    assert detect_lang("北京是中国的首都，人口两千万，与莫斯科（Москва）是友好城市。") == "zh"
    assert is_chinese("北京 Москва")
