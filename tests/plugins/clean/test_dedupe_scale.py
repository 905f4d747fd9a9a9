"""clean.dedupe on templated text: every word bigram is common, so the prefix
filter meets most earlier paragraphs; the work per paragraph is bounded, so it grows linearly.
Speed itself is measured in benchmarks/dedupe.py; these tests count Jaccard comparisons."""

from __future__ import annotations

import functools
import random
from typing import Any

from compactor.document import Context, Source
from compactor.plugins.clean import DedupeCleaner
from compactor.run import Run, StepRecord
from compactor.text import similarity as textsim
from compactor.text.tokens import get_counter

NAMES = ["Alice", "Bob", "Carol", "Dave", "Erin", "Frank", "Grace", "Heidi", "Ivan", "Judy"]
CITIES = ["Paris", "Berlin", "Madrid", "Rome", "Vienna", "Prague", "Oslo", "Lisbon"]
STATES = ["open", "closed", "pending", "late", "new", "stale"]
ZH_NAMES = ["张伟", "王芳", "李娜", "刘洋", "陈静", "杨帆", "赵磊", "黄丽"]
ZH_PLACES = ["北京", "上海", "广州", "深圳", "成都", "杭州", "武汉", "西安"]
ZH_COUNTS = ["一", "两", "三", "四", "五", "六", "七", "八", "九", "十"]


def templated(count: int, seed: int) -> list[str]:
    """One short sentence template (one slot apart: Jaccard 11/15, just under 0.75) and one long
    one (one slot apart: over 0.75), English and Chinese."""
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        kind = rng.random()
        if kind < 0.6:
            out.append(f"Ticket {rng.randint(1, 20)} from {rng.choice(NAMES)} in {rng.choice(CITIES)} is "
                       f"{rng.choice(STATES)} and waits {rng.randint(1, 9)} days for review.")
        elif kind < 0.8:
            out.append(f"The weekly report for {rng.choice(CITIES)} says that {rng.choice(NAMES)} closed "
                       f"{rng.randint(1, 5)} tickets and that the queue is {rng.choice(STATES)} again "
                       f"after {rng.randint(1, 3)} days of work.")
        else:
            out.append(f"{rng.choice(ZH_NAMES)}在{rng.choice(ZH_PLACES)}的仓库清点了{rng.choice(ZH_COUNTS)}"
                       f"百箱货物，其中{rng.choice(ZH_COUNTS)}箱需要退回，由{rng.choice(ZH_NAMES)}负责复核，"
                       "结果将在下周一的例会上通报。")  # 40 characters and more: min_chars
    return out


def dedupe(sources: list[str]) -> tuple[list[str], dict[str, Any]]:
    run = Run(get_counter("cl100k_base"))
    run.step = StepRecord(0, "clean.dedupe", "clean")
    context = Context(sources=tuple(Source.from_text(t) for t in sources))
    result = DedupeCleaner().compactor_clean(context, run)
    return [s.text for s in result.sources], dict(run.step.details)


def test_templated_paragraphs_cost_a_bounded_number_of_comparisons_each(monkeypatch: Any) -> None:
    text = "\n\n".join(templated(4000, seed=4000))
    _, notes = dedupe([text])
    assert notes["capped"] > 0 and notes["comparisons"] <= 128 * 4000  # the bound per lookup
    monkeypatch.setattr(textsim, "JaccardIndex", functools.partial(
        textsim.JaccardIndex, max_postings=None, max_checks=None))  # every candidate compared
    _, exact = dedupe([text])
    assert "capped" not in exact and notes["comparisons"] < 0.8 * exact["comparisons"]
    assert notes["dropped_exact"] == exact["dropped_exact"]
    assert exact["dropped_near"] > 1000 and notes["dropped_near"] >= 0.95 * exact["dropped_near"]


def test_comparisons_grow_linearly_with_bounds_and_quadratically_without() -> None:
    def comparisons(count: int, **bounds: Any) -> int:
        orders = [textsim.shingle_order(textsim.words(p)) for p in templated(count, seed=count)]
        index = textsim.JaccardIndex(0.75, textsim.shingle_counts(orders), **bounds)
        for order in orders:
            index.add_unless_near(set(order))
        return index.comparisons

    small = {"max_postings": 64, "max_checks": 16}  # the defaults' regime, at a size a test affords
    assert comparisons(8000, **small) <= 5 * comparisons(2000, **small)  # linear: 4x
    assert comparisons(4000, max_postings=None, max_checks=None) > 3 * comparisons(2000, max_postings=None,
                                                                                     max_checks=None)


def test_many_small_sources_of_similar_boilerplate() -> None:
    rng = random.Random(7)
    files = [f"This report was exported by {rng.choice(NAMES)} on day {rng.randint(1, 28)} from the "
             f"{rng.choice(CITIES)} office. It is regenerated every night, and edits made by hand are lost "
             f"at the next run.\n\n{line}" for line in templated(3000, seed=8)]
    kept, notes = dedupe(files)
    assert len(kept) == len(files)
    assert notes["dropped_exact"] + notes["dropped_near"] > 2900  # the boilerplate goes, once kept
    assert notes["comparisons"] <= 128 * 2 * len(files)


def test_what_is_dropped_is_near_a_kept_paragraph_and_bounds_only_keep_more() -> None:
    """Bounded lookups never drop a paragraph the exact index would keep: each dropped one is at
    the threshold with a kept one; and they keep at most a few near duplicates more."""
    paragraphs = templated(1500, seed=3)
    sets = [textsim.shingles(textsim.words(p)) for p in paragraphs]
    frequency = textsim.shingle_counts(sets)
    exact = textsim.JaccardIndex(0.75, frequency, max_postings=None, max_checks=None)
    bounded = textsim.JaccardIndex(0.75, frequency, max_postings=64, max_checks=16)
    dropped = {"exact": 0, "bounded": 0}
    kept: list[set[int]] = []
    for shingles in sets:
        dropped["exact"] += exact.add_unless_near(shingles)
        if bounded.add_unless_near(shingles):
            dropped["bounded"] += 1
            assert any(textsim.jaccard(shingles, other) >= 0.75 for other in kept)
        else:
            kept.append(shingles)
    assert bounded.capped > 0 and bounded.comparisons < exact.comparisons / 2
    assert 0.8 * dropped["exact"] <= dropped["bounded"] <= dropped["exact"] + len(sets) // 20, dropped


def test_size_window_is_the_overlap_rule() -> None:
    """`_sizes` (the candidate sizes a lookup keeps) is the pairwise filter it replaced."""
    for threshold in (0.28, 0.3, 0.5, 0.56, 0.6, 0.7, 0.75, 0.8, 0.9, 0.99, 1.0):
        index = textsim.JaccardIndex(threshold)
        for size in range(1, 120):
            low, high = index._sizes(size)
            for other in range(1, 500):
                small, large = sorted((size, other))
                assert (low <= other <= high) == (small >= index._overlap(large)), (threshold, size, other)


def test_bounds_are_checked() -> None:
    import pytest

    for bad in ({"max_postings": 0}, {"max_checks": 0}):
        with pytest.raises(ValueError):
            textsim.JaccardIndex(0.75, **bad)
