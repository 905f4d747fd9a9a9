"""clean.normalize, clean.html and clean.dedupe."""

from __future__ import annotations

import unicodedata

from hypothesis import given, settings
from hypothesis import strategies as st

from compactor import Pipeline, Source
from compactor.plugins.clean import normalize_text

from ...helpers import REPO


def run_steps(steps: str, *sources: Source) -> list[Source]:
    pipeline = Pipeline.from_string(f"version: 1\nsteps:\n{steps}")
    return list(pipeline.run(list(sources)).sources)


def test_normalize_keeps_meaning_and_removes_controls_zero_width_and_blank_runs() -> None:
    text = "Ｆｕｌｌ\u200bwidth\u00a0text\x07 here\r\n\r\n\r\n\r\nnext\t\tline   end  \n"
    assert normalize_text(text) == "Ｆｕｌｌwidth\u00a0text here\n\nnext line end"
    assert normalize_text("数据\u200b，好") == "数据，好"  # full-width punctuation is the source's
    assert normalize_text("👩\u200d💻 می\u200cخواهم") == "👩\u200d💻 می\u200cخواهم"  # joiners stay
    meaning = "10⁶ cells, 438,491.51 km², H₂O, \ufb01ne, caf\u0065\u0301"
    assert normalize_text(meaning) == "10⁶ cells, 438,491.51 km², H₂O, \ufb01ne, café"  # NFC composes
    # compatibility folding only when a pipeline asks for it
    assert normalize_text(meaning, "NFKC") == "106 cells, 438,491.51 km2, H2O, fine, café"
    assert normalize_text(text, "NFKC").startswith("Fullwidth text here")


def test_normalize_default_keeps_superscripts_in_pipeline_output() -> None:
    import compactor

    text = "The culture reached 10⁶ cells per ml. The land area is 438,491.51 km². Water is H₂O."
    out = compactor.compress(text, budget=50)
    for kept in ("10⁶", "km²", "H₂O"):
        assert kept in out


def test_html_keeps_the_article_and_drops_chrome() -> None:
    page = (REPO / "examples" / "page.html").read_text(encoding="utf-8")
    [source] = run_steps("  - use: clean.html\n",
                         Source.from_text(page, kind="web_page", uri="https://example.org/p"))
    assert "42 production clusters" in source.text
    assert "max_sync_workers_per_subscription" in source.text
    assert "p99 query latency" in source.text  # table text kept
    for chrome in ("Accept all", "Subscribe to our newsletter", "All rights reserved",
                   "analytics.track", "Related posts", "font-family"):
        assert chrome not in source.text
    assert source.title and source.title.startswith("Rolling upgrades")
    assert source.original == page  # the fetched page stays available


def test_html_cleaner_leaves_plain_text_alone() -> None:
    text = "Plain text with a < sign and no markup."
    [source] = run_steps("  - use: clean.html\n", Source.from_text(text))
    assert source.text == text


def test_dedupe_drops_exact_and_near_duplicates_across_sources() -> None:
    para = ("The deployment failed because the database migration timed out after 300 seconds "
            "on the primary cluster in eu-west-1.")
    near = para.replace("300 seconds", "300 secs")
    zh = "部署失败了，因为数据库迁移在主集群上运行了三百秒之后超时，需要重新执行迁移脚本并检查锁。"
    a = Source.from_text(f"Intro paragraph that is unique to A and long enough.\n\n{para}\n\n{zh}")
    b = Source.from_text(f"{para}\n\n{near}\n\n{zh}\n\nClosing words that are only in B, long.")
    first, second = run_steps("  - use: clean.dedupe\n", a, b)
    assert first.text.count("timed out") == 1 and zh in first.text
    assert "timed out" not in second.text and zh not in second.text
    assert "Closing words" in second.text


def test_dedupe_keeps_short_repeated_lines() -> None:
    text = "Yes.\n\nYes.\n\nA longer paragraph that is clearly unique in this document here."
    [source] = run_steps("  - use: clean.dedupe\n", Source.from_text(text))
    assert source.text.count("Yes.") == 2


# --- clean.dedupe: recall, exactness against all pairs, and comparisons at scale ----------------

EN_PARAGRAPHS = [
    "The storage cluster lost quorum at 02:10 when two of the three etcd members were restarted by "
    "the same maintenance job, and writes stalled for eleven minutes until an operator intervened.",
    "Quarterly revenue rose eight percent on strong subscription renewals in Europe, while hardware "
    "sales in North America fell for the third quarter in a row because of supply constraints.",
    "To rotate the signing key, create the new key in the vault, publish its public half to the "
    "discovery document, wait one cache lifetime, and only then switch the issuer to the new key.",
    "The river flooded the lower town twice that spring, and the council voted to move the market "
    "square to the hill above the old mill, where it has stayed for more than two hundred years.",
]
ZH_PARAGRAPHS = [
    "存储集群在凌晨两点十分失去多数派，因为同一个维护任务重启了三个成员中的两个，写入停顿了十一分钟，直到值班工程师手动介入恢复。",
    "本季度收入增长百分之八，主要来自欧洲订阅续费的强劲表现，而北美硬件销售因为供应限制已经连续第三个季度下滑。",
    "轮换签名密钥时，先在密钥库中创建新密钥，把公钥发布到发现文档，等待一个缓存周期之后，再把签发方切换到新的密钥上。",
]


def edits(text: str) -> list[str]:
    """Copies a reader would call the same paragraph: one word changed, inserted or dropped, case and
    punctuation changed, a clause appended."""
    words = text.split(" ")
    middle = len(words) // 2
    return [
        " ".join([*words[:middle], "really", *words[middle:]]),
        " ".join(words[:middle] + words[middle + 1:]),
        " ".join([*words[:middle], "banana", *words[middle + 1:]]),
        text.upper().replace(",", ";"),
        text + " See the report.",
    ]


def zh_edits(text: str) -> list[str]:
    middle = len(text) // 2
    return [text[:middle] + "很" + text[middle:], text[:middle] + text[middle + 1:],
            text[:middle] + "甲" + text[middle + 1:], text.replace("，", ","), text + "详见报告。"]


def dedupe(*texts: str, threshold: float = 0.75) -> tuple[list[str], dict[str, int]]:
    """Run clean.dedupe on one source per text; the kept texts and the step's notes."""
    from compactor.document import Context
    from compactor.plugins.clean import DedupeCleaner
    from compactor.run import Run, StepRecord
    from compactor.text.tokens import get_counter

    run = Run(get_counter("cl100k_base"))
    run.step = StepRecord(0, "clean.dedupe", "clean")
    context = Context(sources=tuple(Source.from_text(t) for t in texts))
    result = DedupeCleaner(threshold=threshold).compactor_clean(context, run)
    return [s.text for s in result.sources], run.step.details


def test_dedupe_drops_edited_copies_and_keeps_distinct_paragraphs() -> None:
    for originals, variants in ((EN_PARAGRAPHS, edits), (ZH_PARAGRAPHS, zh_edits)):
        copies = [copy for text in originals for copy in variants(text)]
        kept, notes = dedupe("\n\n".join(originals), "\n\n".join(copies))
        assert kept[0] == "\n\n".join(originals)  # distinct paragraphs all kept
        assert kept[1] == ""  # every edited copy dropped
        assert notes["dropped_exact"] == len(originals)  # case and punctuation: the same words
        assert notes["dropped_near"] == len(copies) - len(originals)
        assert 0 < notes["comparisons"] <= 2 * len(copies)


def test_dedupe_threshold_is_the_jaccard_of_word_bigrams() -> None:
    from compactor.text import similarity as textsim

    base = EN_PARAGRAPHS[0]
    words = base.split(" ")
    shingles = textsim.shingles(textsim.words(base))
    # replace more and more words: the copy goes when its bigram Jaccard reaches the threshold
    for changed in range(1, 8):
        copy = " ".join(f"zz{i}" if i % 4 == 1 and i // 4 < changed else w for i, w in enumerate(words))
        similarity = textsim.jaccard(shingles, textsim.shingles(textsim.words(copy)))
        for threshold in (0.5, 0.6, 0.75, 0.9):
            kept, _ = dedupe(base, copy, threshold=threshold)
            assert (kept[1] == "") == (similarity >= threshold), (changed, threshold, similarity)


def brute_force_dedupe(paragraphs: list[str], threshold: float) -> list[str]:
    """First one wins: a paragraph goes when its words repeat, or when its bigram Jaccard with a kept
    paragraph reaches the threshold (every pair compared); paragraphs under 40 characters stay."""
    from compactor.text import similarity as textsim

    kept, kept_sets, seen = [], [], set()
    for paragraph in paragraphs:
        words = textsim.words(paragraph)
        if len(paragraph) < 40:
            kept.append(paragraph)
            continue
        key = " ".join(words)
        if key in seen:
            continue
        seen.add(key)
        shingles = textsim.shingles(words)
        if any(textsim.jaccard(shingles, other) >= threshold for other in kept_sets):
            continue
        kept.append(paragraph)
        kept_sets.append(shingles)
    return kept


def synthetic_paragraphs(count: int, seed: int, near_share: float = 0.0) -> list[str]:
    """Short paragraphs of 8-40 words from a Zipf-like vocabulary (common words and bigrams recur in
    many of them), English or Chinese; `near_share` of them are edited copies of earlier ones, with
    0-3 words changed (some above a threshold, some below)."""
    import itertools
    import random

    rng = random.Random(seed)
    vocabulary = [f"w{i}" for i in range(6000)]
    weights = list(itertools.accumulate(1 / (i + 10) for i in range(len(vocabulary))))
    han = [chr(0x4E00 + i) for i in range(3000)]
    han_weights = list(itertools.accumulate(1 / (i + 5) for i in range(len(han))))
    out: list[str] = []
    while len(out) < count:
        if out and rng.random() < near_share:
            words = out[rng.randrange(len(out))].split(" ")
            for _ in range(rng.choice((0, 1, 1, 1, 2, 3))):
                words[rng.randrange(len(words))] = rng.choice(vocabulary)
            out.append(" ".join(words))
        elif rng.random() < 0.2:
            out.append(" ".join(rng.choices(han, cum_weights=han_weights, k=rng.randint(14, 60))))
        else:
            words = rng.choices(vocabulary, cum_weights=weights, k=rng.randint(8, 40))
            out.append(" ".join(["the", *words, "end"]))
    return out


def test_dedupe_equals_all_pairs_comparison() -> None:
    for seed, threshold in ((1, 0.75), (2, 0.6), (3, 0.9), (4, 0.7)):
        paragraphs = synthetic_paragraphs(600, seed, near_share=0.3)
        kept, notes = dedupe("\n\n".join(paragraphs), threshold=threshold)
        expected = brute_force_dedupe(paragraphs, threshold)
        assert kept[0] == "\n\n".join(expected)
        assert notes["dropped_near"] > 20  # the comparison covered real near duplicates
        assert notes["comparisons"] < len(paragraphs) * 3  # all pairs would be ~180,000


def test_dedupe_comparisons_grow_linearly() -> None:
    """Distinct short paragraphs are not compared with each other (one-permutation MinHash put them
    all in one LSH bucket: about n^2/2 comparisons); edited copies are still found at scale."""
    import random

    counts = {}
    for count in (5000, 20000):
        paragraphs = synthetic_paragraphs(count, seed=count)
        rng = random.Random(count)
        copies = 0
        for i in range(100, count, 50):  # 2% copies of an earlier paragraph with one word changed
            source = rng.randrange(i)
            text = paragraphs[source - (source >= 100 and source % 50 == 0)]  # not a copy
            words = text.split(" ")
            if len(words) >= 15 and len(text) >= 40:  # (n - 3) / (n + 1) >= 0.75: a near duplicate
                words[len(words) // 2] = f"changed{i}"
                paragraphs[i] = " ".join(words)
                copies += 1
        _, notes = dedupe("\n\n".join(paragraphs))
        counts[count] = notes["comparisons"]
        assert copies >= count // 200
        assert notes["dropped_near"] >= copies
        assert notes["comparisons"] <= 0.2 * count
    assert counts[20000] <= 6 * max(counts[5000], 50)  # linear: 4x; quadratic: 16x


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sets(st.integers(0, 30), min_size=1, max_size=12), min_size=1, max_size=40),
       st.sampled_from([0.3, 0.5, 0.6, 0.7, 0.75, 0.8, 0.9, 1.0]), st.booleans())
def test_jaccard_index_finds_every_set_at_the_threshold(sets: list[set[int]], threshold: float,
                                                         counted: bool) -> None:
    from compactor.text import similarity as textsim

    index = textsim.JaccardIndex(threshold, textsim.shingle_counts(sets) if counted else None)
    kept: list[set[int]] = []
    for shingles in sets:
        expected = any(textsim.jaccard(shingles, other) >= threshold for other in kept)
        assert index.near(shingles) == expected
        assert index.add_unless_near(shingles) == expected
        if not expected:
            kept.append(shingles)


def test_jaccard_index_at_the_edge_of_the_prefix() -> None:
    """Pairs whose shared shingles come last in the order (largest values, or counted twice while
    the others are counted once), at and around every threshold: the prefix must reach them."""
    from compactor.text import similarity as textsim

    thresholds = (0.3, 0.5, 0.6, 0.7, 0.75, 0.8, 0.9, 1.0)
    cases = [(a, b, common, t) for a in range(1, 13) for b in range(1, 13)
             for common in range(1, min(a, b) + 1) for t in thresholds]
    # 0.56 * 25 is 14.000000000000002 in floats, and 14 / 25 >= 0.56: 14 shared must be enough
    cases += [(25, 14, 14, 0.56), (14, 25, 14, 0.56), (25, 7, 7, 0.28)]
    for a, b, common, threshold in cases:
        shared = set(range(1000, 1000 + common))
        x = set(range(a - common)) | shared
        y = set(range(100, 100 + b - common)) | shared
        expected = textsim.jaccard(x, y) >= threshold
        for frequency in (None, textsim.shingle_counts([x, y])):
            index = textsim.JaccardIndex(threshold, frequency)
            index.add(y)
            assert index.near(x) == expected, (a, b, common, threshold)


def test_words_lower_case_as_each_word_would() -> None:
    from compactor.text import similarity as textsim

    texts = ["Plain ASCII, with CAPS and 2024 numbers_and_underscores.",
             "ΟΔΟΣ ΣΟΦΟΚΛΕΟΥΣ'Α ΑΣ.ΒΣ ΣΑ", "İstanbul'da KIRMIZI ıı İİ", "Straße GROẞ ǅemal ǈ",
             "数据库API接口 日本語のテキスト 한국어 텍스트 MiXeD中文Text", "Ⅻ Ⓐ ｆｕｌｌ ＷＩＤＴＨ ᾈ", ""]
    for text in texts:  # compatibility forms fold (full-width and ASCII copies are one text)
        folded = unicodedata.normalize("NFKC", text)
        assert textsim.words(text) == [w.lower() for w in textsim.WORDS.findall(folded)], text
