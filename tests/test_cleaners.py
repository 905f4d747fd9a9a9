"""clean.normalize, clean.html and clean.dedupe."""

from __future__ import annotations

from compactor import Pipeline, Source
from compactor.plugins.cleaners import normalize_text

from .helpers import REPO


def run_steps(steps: str, *sources: Source) -> list[Source]:
    pipeline = Pipeline.from_string(f"version: 1\nsteps:\n{steps}")
    return list(pipeline.run(list(sources)).sources)


def test_normalize_nfkc_controls_zero_width_and_whitespace() -> None:
    text = "Ｆｕｌｌ\u200bwidth\u00a0text\x07 here\r\n\r\n\r\n\r\nnext\t\tline   end  \n"
    assert normalize_text(text) == "Fullwidth text here\n\nnext line end"
    assert normalize_text("数据\u200d，好") == "数据,好"


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
