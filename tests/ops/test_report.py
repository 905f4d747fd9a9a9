"""The HTML compression report: its content, and a real headless Chromium opening it."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from compactor import Pipeline
from compactor.ops.report import PAGE, html_report

from ..helpers import EVAL, run_cli


@pytest.fixture(scope="module")
def articles() -> list[str]:
    path = EVAL / "summarization-frank-cnndm-xsum" / "summ.jsonl"
    if not path.exists():
        pytest.skip(f"evaluation data not found: {path}")
    return [json.loads(line)["document"] for line in path.read_text(encoding="utf-8").splitlines()[:4]]


def test_report_marks_kept_and_dropped_chunks_steps_loss_and_plot(articles: list[str]) -> None:
    context = Pipeline.from_yaml("qa").run(articles, query="who won?", budget=150)
    page = html_report(context)
    kept = {cid for s in context.segments for cid in s.chunk_ids}
    marked = set(re.findall(r'<mark class="kept" data-chunk="([^"]+)"', page))
    dimmed = set(re.findall(r'<span class="dropped" data-chunk="([^"]+)"', page))
    assert marked == kept and dimmed == {c.id for c in context.chunks} - kept
    assert page.count("<tr><td>") == len(context.reports)
    first = context.chunks[0]
    name, value = sorted(first.scores.items())[0]
    assert f"{name.removeprefix('score.')}={value:.3f}" in page  # scores on hover (title)
    assert 'id="loss"' in page and "Retention" in page and '<svg id="plot"' in page
    assert not re.search(r"<(script|link|img)[^>]+(src|href)=", page)  # nothing to fetch at view time


def test_large_sources_are_paginated() -> None:
    text = "\n\n".join(f"Paragraph {i} says something about item {i}." for i in range(PAGE * 2 + 10))
    context = Pipeline.from_string("version: 1\nsteps:\n  - use: chunk.paragraphs\n    with: {size: 8}\n"
                                   "  - use: compress.select\n").run(text, budget=50)
    page = html_report(context)
    pages = -(-len(context.chunks) // PAGE)
    assert pages >= 3
    assert page.count('class="text page"') == pages and page.count(" hidden>") == pages - 1
    assert f'<button data-page="2">chunks {2 * PAGE + 1}-' in page


def test_cli_writes_the_html_report(tmp_path: Path, articles: list[str]) -> None:
    doc = tmp_path / "a.txt"
    doc.write_text(articles[0], encoding="utf-8")
    report = tmp_path / "report.html"
    done = run_cli("qa", str(doc), "--query", "who?", "--budget", "100", "--report", str(report))
    assert done.returncode == 0, done.stderr
    assert report.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")


def _browser() -> tuple[str, str]:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    driver = shutil.which("chromedriver")
    if not chromium or not driver:
        pytest.skip("no headless browser here: install the Debian packages chromium and chromium-driver "
                    "(.ci/run does where it can)")
    pytest.importorskip("selenium", reason="selenium is in the test extra")
    return chromium, driver


def test_headless_chromium_shows_highlights_step_table_and_pages(tmp_path: Path, articles: list[str]) -> None:
    chromium, driver_path = _browser()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By

    context = Pipeline.from_yaml("qa").run(articles, query="who won?", budget=150)
    many = "\n\n".join(f"Item {i}." for i in range(2 * PAGE + 40))
    big = Pipeline.from_string("version: 1\nsteps:\n  - use: chunk.paragraphs\n    with: {size: 8}\n"
                               "  - use: compress.select\n").run(many, budget=40)
    assert PAGE < len(big.chunks) <= 2 * PAGE
    report, paged = tmp_path / "report.html", tmp_path / "paged.html"
    report.write_text(html_report(context), encoding="utf-8")
    paged.write_text(html_report(big), encoding="utf-8")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1280,1600"):
        options.add_argument(flag)
    browser = webdriver.Chrome(service=Service(executable_path=driver_path), options=options)
    try:
        browser.get(report.as_uri())
        kept = browser.find_elements(By.CSS_SELECTOR, "mark.kept[data-chunk]")
        assert kept and any(m.is_displayed() for m in kept)
        wanted = {cid for s in context.segments for cid in s.chunk_ids}
        assert {m.get_attribute("data-chunk") for m in kept} == wanted
        assert "kept" in (kept[0].get_attribute("title") or "")
        rows = browser.find_elements(By.CSS_SELECTOR, "table#steps tbody tr")
        assert len(rows) == len(context.reports)
        assert browser.find_element(By.ID, "plot").is_displayed()
        shot = tmp_path / "report.png"
        assert browser.save_screenshot(str(shot)) and shot.stat().st_size > 10_000
        browser.get(paged.as_uri())
        pages = browser.find_elements(By.CSS_SELECTOR, ".page")
        assert [p.is_displayed() for p in pages] == [True, False]
        browser.find_elements(By.CSS_SELECTOR, ".pager button")[1].click()
        assert [p.is_displayed() for p in pages] == [False, True]
    finally:
        browser.quit()
