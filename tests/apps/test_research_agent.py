"""The research agent end to end: topics archived by ResearchSession, the footnoted report, the
search tools and providers, fetching, the LLM-written report and the LangChain agent example."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from compactor.apps.research import ResearchSession
from compactor.apps.research_fetch import HttpFetcher, error_page_reason, fetch_pages
from compactor.apps.research_report import footnote_refs, unresolved_footnotes
from compactor.apps.search_providers import (
    OfflineSearch,
    SearchProvider,
    TavilySearch,
    search_provider,
)
from compactor.errors import CompactorWarning, InputError
from compactor.text.tokens import get_counter

from ..helpers import REPO
from ..openai_server import FakeOpenAI, Reply
from ..openai_server import openai_server as openai_server
from ..web_server import LocalWeb, Page
from ..web_server import local_web as local_web

EXAMPLE = REPO / "examples" / "research_agent.py"

TOPICS: dict[str, list[tuple[str, str, str]]] = {
    "EV battery prices": [
        ("https://ex.com/bnef", "BNEF survey",
         "Lithium-ion battery pack prices fell 14% in 2023 to a record low of $139 per kWh, according to "
         "BloombergNEF. Cell prices fell faster than pack prices. Analysts expect further declines in 2024."),
        ("https://ex.com/sodium", "Sodium-ion cells",
         "Sodium-ion batteries could undercut lithium iron phosphate cells by 20% on price once produced "
         "at scale. CATL started sodium-ion production in 2023."),
        ("https://ex.com/recipes", "Pasta recipes",
         "Boil the pasta for nine minutes. Add olive oil, garlic and basil. Serve with parmesan cheese."),
    ],
    "charging networks in Europe": [
        ("https://ex.com/charging", "Charging in Europe",
         "Europe had about 630,000 public charging points at the end of 2023. The Netherlands has the "
         "densest charging network per kilometre of road."),
        ("https://ex.com/ionity", "Ionity",
         "Ionity operates high-power chargers along motorways in 24 countries. Its stations deliver up to "
         "350 kW."),
    ],
    "grid impact of electric vehicles": [
        ("https://ex.com/grid", "Grid study",
         "Smart charging can shift up to 60% of electric vehicle charging demand to off-peak hours. "
         "Unmanaged charging raises the evening peak load of distribution grids."),
    ],
}


def research(topics: dict[str, list[tuple[str, str, str]]] = TOPICS, **options: Any) -> ResearchSession:
    names = list(topics)
    session = ResearchSession([{"role": "user", "content": "Research electric vehicles."}],
                              topic=names[0], query="electric vehicle market", **options)
    for position, name in enumerate(names):
        session.record_search_results([{"url": u, "title": t, "content": c} for u, t, c in topics[name]])
        if position + 1 < len(names):
            session.change_topic(names[position + 1], "next")
    session.end_of_research()
    return session


def sections_of(report: str) -> dict[str, str]:
    """`### n. topic` -> the text under it."""
    found = re.findall(r"(?ms)^### \d+\. (.+?)\n\n(.*?)(?=^#|\Z)", report)
    return {title: body.strip() for title, body in found}


def test_the_report_has_every_part_and_every_footnote_resolves_to_a_page() -> None:
    session = research()
    report = session.report()
    for heading in ("# Research report", "## Summary", "## Key findings", "## Conclusions", "## References"):
        assert f"\n{heading}\n" in f"\n{report}"
    assert "Question: electric vehicle market" in report
    assert list(sections_of(report)) == list(TOPICS)
    assert "$139 per kWh" in sections_of(report)["EV battery prices"]
    assert "630,000" in sections_of(report)["charging networks in Europe"]
    assert unresolved_footnotes(report) == []
    assert set(footnote_refs(report)) == set(report.footnotes)
    assert set(report.footnotes.values()) <= {u for pages in TOPICS.values() for u, _, _ in pages}
    # each fact's footnote is its own page's
    for line in report.splitlines():
        if "$139 per kWh" in line:
            number = re.search(r"\[\^(\d+)\]", line).group(1)  # type: ignore[union-attr]
            assert report.footnotes[number] == "https://ex.com/bnef"
    assert report.method == "rules" and session.last_report is report


def test_useful_webpages_are_the_pages_that_gave_facts() -> None:
    session = research()
    battery = session.search_results[0]
    assert battery["useful_webpages"] == ["https://ex.com/bnef", "https://ex.com/sodium"]
    assert "https://ex.com/recipes" not in battery["useful_webpages"]
    assert [p["url"] for p in battery["pages"]] == [u for u, _, _ in TOPICS["EV battery prices"]]
    assert "pasta" not in session.report().lower()


def test_every_topic_keeps_its_section_under_any_budget_that_holds_the_headings() -> None:
    session = research()
    counter = get_counter()
    full = session.report()
    floor = None
    for budget in range(60, counter.count(full) + 40, 7):
        try:
            report = session.report(budget=budget)
        except InputError as exc:
            assert "budget" in str(exc) and floor is None
            continue
        floor = floor or budget
        assert counter.count(report) <= budget
        assert unresolved_footnotes(report) == []
        sections = sections_of(report)
        assert list(sections) == list(TOPICS)
        if budget >= floor + 120:  # room for three short facts: each topic has one
            assert all("[^" in body for body in sections.values()), (budget, report)
    assert floor is not None and floor < 150
    assert session.report(budget=counter.count(full) + 40) == full


def test_a_budget_below_the_headings_is_refused_naming_the_budget() -> None:
    session = research()
    with pytest.raises(InputError, match="budget of 20 tokens cannot hold the report's headings"):
        session.report(budget=20)


def test_topics_take_turns_so_a_rich_topic_cannot_crowd_out_the_others() -> None:
    rich = [(f"https://ex.com/r{i}", f"Battery page {i}",
             " ".join(f"Battery pack prices in market {i}-{j} fell {10 + j}% in 2023 to ${100 + j} per kWh."
                      for j in range(12))) for i in range(6)]
    topics = {"EV battery prices": rich, **{k: v for k, v in TOPICS.items() if k != "EV battery prices"}}
    session = research(topics)
    counter = get_counter()
    report = session.report(budget=400)
    assert counter.count(report) <= 400
    sections = sections_of(report)
    assert "630,000" in sections["charging networks in Europe"] or "350 kW" in sections[
        "charging networks in Europe"]
    assert "[^" in sections["grid impact of electric vehicles"]


def test_end_of_research_gives_each_topic_footnoted_compressed_content() -> None:
    session = research()
    for entry in session.search_results:
        content = entry["compressed_content"]
        assert "[^" in content and unresolved_footnotes(content) == []
        for number in footnote_refs(content):
            assert f"[^{number}]: https://ex.com/" in content


def test_agent_notes_join_the_conclusions() -> None:
    session = ResearchSession([{"role": "user", "content": "Research EV batteries."}],
                              topic="EV battery prices")
    session.record_search_results([{"url": u, "title": t, "content": c}
                                   for u, t, c in TOPICS["EV battery prices"]])
    session.end_of_research("Pack prices reached $139 per kWh in 2023.")
    report = session.report()
    conclusions = report.split("## Conclusions", 1)[1]
    assert "Topic 1 (agent's note): Pack prices reached $139 per kWh in 2023." in conclusions


def test_a_chinese_research_report_has_chinese_headings() -> None:
    topics = {"电池价格": [("https://ex.cn/a", "电池",
                           "2023年锂电池组价格下降14%，降至每千瓦时139美元。钠离子电池开始量产。")],
              "充电网络": [("https://ex.cn/b", "充电",
                           "截至2023年底，欧洲约有63万个公共充电桩。荷兰的充电网络最密集。")]}
    session = ResearchSession([{"role": "user", "content": "研究电动汽车"}], topic="电池价格")
    session.record_search_results([{"url": u, "title": t, "content": c} for u, t, c in topics["电池价格"]])
    session.change_topic("充电网络")
    session.record_search_results([{"url": u, "title": t, "content": c} for u, t, c in topics["充电网络"]])
    session.end_of_research()
    report = session.report()
    for heading in ("# 研究报告", "## 摘要", "## 核心发现", "## 结论", "## 参考文献"):
        assert heading in report
    assert "139美元" in report and "63万" in report and unresolved_footnotes(report) == []


def test_unresolved_footnotes_finds_citations_without_definitions() -> None:
    text = "A fact.[^1] Another.[^2] Third.[^x]\n\n[^1]: https://a.example\n[^x]: note"
    assert unresolved_footnotes(text) == ["2"]
    assert footnote_refs(text) == ["1", "2", "x"]


# -- search: providers and tools ---------------------------------------------------------------------

CORPUS = [
    {"url": "https://ex.com/bnef", "title": "BNEF survey", "content": TOPICS["EV battery prices"][0][2]},
    {"url": "https://ex.com/sodium", "title": "Sodium-ion cells",
     "content": TOPICS["EV battery prices"][1][2]},
    {"url": "https://ex.com/charging", "title": "Charging in Europe",
     "content": TOPICS["charging networks in Europe"][0][2]},
    {"url": "https://ex.com/grid", "title": "Grid study",
     "content": TOPICS["grid impact of electric vehicles"][0][2]},
    {"url": "https://ex.cn/charge", "title": "充电", "content": "截至2023年底，欧洲约有63万个公共充电桩。"},
]


def test_offline_search_ranks_a_jsonl_corpus_and_a_folder(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in CORPUS) + "\n\n", encoding="utf-8")
    provider = OfflineSearch(corpus)
    assert isinstance(provider, SearchProvider)
    hits = provider.search("public charging points Europe", max_results=2)
    assert hits[0]["url"] == "https://ex.com/charging" and len(hits) == 2
    assert provider.search("公共充电桩")[0]["url"] == "https://ex.cn/charge"
    assert provider.search("zzzz unrelated") == []
    folder = tmp_path / "notes"
    (folder / "sub").mkdir(parents=True)
    (folder / "grid.md").write_text("# Grid notes\n\nSmart charging shifts demand to off-peak hours.\n",
                                    encoding="utf-8")
    (folder / "sub" / "more.jsonl").write_text(json.dumps(CORPUS[0]) + "\n", encoding="utf-8")
    (folder / "image.png").write_bytes(b"\x89PNG")
    hits = OfflineSearch(folder).search("smart charging off-peak")
    assert hits[0]["title"] == "Grid notes" and hits[0]["url"].startswith("file://")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"url": "a", "content": "x"}\n{"url": "b", "content": 3}\n', encoding="utf-8")
    with pytest.raises(InputError, match=r"bad.jsonl:2: field `content`"):
        OfflineSearch(bad)
    with pytest.raises(InputError, match="no such file or folder"):
        OfflineSearch(tmp_path / "missing.jsonl")


def test_tavily_search_posts_with_the_key_in_the_header_only(local_web: LocalWeb) -> None:
    local_web.pages["/search"] = Page.json({"query": "q", "results": [
        {"url": "https://ex.com/a", "title": "A", "content": "snippet A", "raw_content": "full text A"},
        {"url": "https://ex.com/b", "title": "B", "content": "snippet B", "raw_content": None},
        {"title": "no url"}, "junk"]})
    provider = TavilySearch("tvly-SECRET-123", base_url=local_web.url)
    assert "SECRET" not in repr(provider)
    hits = provider.search("battery prices", max_results=3)
    assert [(h["url"], h["content"], h["snippet"]) for h in hits] == [
        ("https://ex.com/a", "full text A", "snippet A"), ("https://ex.com/b", "snippet B", "snippet B")]
    method, path, headers, body = local_web.requests[-1]
    assert (method, path) == ("POST", "/search") and headers["authorization"] == "Bearer tvly-SECRET-123"
    assert body == {"query": "battery prices", "max_results": 3, "search_depth": "basic",
                    "include_raw_content": True}


@pytest.mark.parametrize("page, message", [
    (Page.json({"error": "bad key tvly-SECRET-123"}, status=401), "HTTP 401"),
    (Page("<html>oops tvly-SECRET-123</html>"), "not JSON"),
    (Page.json({"answer": "no results key"}), "no `results` list"),
    (Page("{}", delay=2.0, content_type="application/json"), "timed out"),
])
def test_tavily_failures_are_search_errors_without_the_key(local_web: LocalWeb, page: Page,
                                                           message: str) -> None:
    local_web.pages["/search"] = page
    provider = TavilySearch("tvly-SECRET-123", base_url=local_web.url, timeout=0.5)
    with pytest.raises(InputError, match=message) as caught:
        provider.search("q")
    assert "SECRET" not in str(caught.value)


def test_search_provider_picks_tavily_only_with_a_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TAVILY_API_KEY", raising=False)
    assert isinstance(search_provider(CORPUS), OfflineSearch)
    with pytest.raises(InputError, match="set TAVILY_API_KEY or give an offline corpus"):
        search_provider()
    with pytest.raises(InputError, match="needs an API key"):
        TavilySearch()
    monkeypatch.setenv("TAVILY_API_KEY", "tvly-x")
    assert isinstance(search_provider(CORPUS), TavilySearch)


def _tool(call_id: str, name: str, **arguments: Any) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}


def test_the_session_answers_search_and_think_calls_and_records_the_results() -> None:
    session = ResearchSession([{"role": "user", "content": "Research EVs."}], topic="charging networks",
                              search=OfflineSearch(CORPUS))
    assert [t["function"]["name"] for t in session.research_tools()] == [
        "tavily_search", "think_tool", "change_research_topic", "end_of_research", "expand_context"]
    session.add({"role": "assistant", "content": "", "tool_calls": [_tool("s1", "tavily_search",
                                                                          query="public charging Europe")]})
    reply = session.handle_tool_call(session.messages[-1]["tool_calls"][0])
    results = json.loads(reply["content"])["results"]
    assert results[0]["url"] == "https://ex.com/charging" and "630,000" in results[0]["content"]
    assert session._pending and session._pending[0]["url"] == "https://ex.com/charging"
    thought = session.handle_tool_call(_tool("k1", "think_tool", reflection="Need grid data next."))
    assert thought["content"] == "Reflection recorded: Need grid data next."
    assert session.reflections == ["Need grid data next."]
    empty = session.handle_tool_call(_tool("k2", "think_tool", reflection=" "))
    assert empty["content"] == "error: think_tool needs a non-empty `reflection`"
    session.end_of_research()
    assert "https://ex.com/charging" in session.search_results[0]["useful_webpages"]


class _Flaky:
    name = "flaky"

    def __init__(self) -> None:
        self.calls = 0

    def search(self, query: str, max_results: int = 5) -> list[dict[str, Any]]:
        self.calls += 1
        if self.calls == 1:
            raise TimeoutError("read timed out")
        return [{"url": "https://ex.com/empty", "content": "  "}, {"content": "no url"},
                {"url": "https://ex.com/grid", "title": "Grid", "content": CORPUS[3]["content"]}]


def test_a_failing_or_junk_provider_costs_only_that_search_or_result() -> None:
    session = ResearchSession([{"role": "user", "content": "Research EVs."}], topic="grid impact",
                              search=_Flaky())
    with pytest.warns(CompactorWarning, match="'flaky' failed: TimeoutError: read timed out") as caught:
        reply = session.handle_tool_call(_tool("s1", "tavily_search", query="grid"))
    assert len(caught) == 1 and reply["content"].startswith("error: search provider 'flaky' failed")
    with pytest.warns(CompactorWarning) as caught:
        reply = session.handle_tool_call(_tool("s2", "tavily_search", query="grid", max_results="many"))
    assert [str(w.message) for w in caught] == [
        "search result https://ex.com/empty for 'grid' has no usable text; left out",
        "search result (no URL) for 'grid' has no usable text; left out"]
    assert [r["url"] for r in json.loads(reply["content"])["results"]] == ["https://ex.com/grid"]
    no_provider = ResearchSession([{"role": "user", "content": "x"}])
    assert no_provider.handle_tool_call(_tool("s", "tavily_search", query="q"))["content"].startswith(
        "error: this ResearchSession has no search provider")


# -- fetching the useful pages -----------------------------------------------------------------------


def test_end_of_research_fetches_useful_pages_in_parallel_and_a_bad_page_costs_only_itself() -> None:
    import threading
    import time

    active, peak, seen = [0], [0], []
    lock = threading.Lock()
    fuller = (TOPICS["EV battery prices"][0][2]
              + " EV battery pack prices for electric buses were $180 per kWh in 2023.")

    def fetch(url: str) -> Any:
        with lock:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
            seen.append(url)
        time.sleep(0.2)
        with lock:
            active[0] -= 1
        if url == "https://ex.com/bnef":
            return fuller
        if url == "https://ex.com/sodium":
            raise ConnectionError("reset by peer")
        if url == "https://ex.com/charging":
            return "<html><title>404 Not Found</title><body>Page not found</body></html>"
        if url == "https://ex.com/grid":
            time.sleep(2)
        return "never used"

    with pytest.warns(CompactorWarning) as caught:
        session = research(fetch=fetch, fetch_timeout=0.8)
    messages = sorted(str(w.message) for w in caught)
    assert len(messages) == 3
    assert any("https://ex.com/sodium (ConnectionError: reset by peer)" in m for m in messages)
    assert any("https://ex.com/charging (error page" in m for m in messages)
    assert any("https://ex.com/grid (no answer within 0.8 s)" in m for m in messages)
    assert "https://ex.com/recipes" not in seen  # only useful pages are fetched
    assert peak[0] >= 3
    battery, charging, _ = session.search_results
    assert battery["fetched"] == ["https://ex.com/bnef"] and "$180 per kWh" in session.report()
    assert "630,000" in session.report() and "60%" in session.report()  # search results kept
    assert charging["useful_webpages"] == ["https://ex.com/charging"] and charging["fetched"] == []
    assert unresolved_footnotes(session.report(budget=300)) == []


def test_fetch_pages_turns_every_kind_of_failure_into_one_warning_naming_the_url() -> None:
    answers: dict[str, Any] = {"https://a.example": "A long enough article about batteries and their prices.",
                               "https://b.example": b"binary", "https://c.example": None,
                               "https://d.example": "   "}
    with pytest.warns(CompactorWarning) as caught:
        got = fetch_pages([*answers, "https://a.example"], answers.__getitem__, workers=2)
    assert got == {"https://a.example": answers["https://a.example"]}
    assert sorted(str(w.message).removesuffix("; its search result is kept") for w in caught) == [
        "could not fetch https://b.example (the fetcher returned bytes, not text)",
        "could not fetch https://c.example (the fetcher returned NoneType, not text)",
        "could not fetch https://d.example (empty page)"]
    assert error_page_reason("Just a moment... Enable JavaScript and cookies to continue") is not None
    assert error_page_reason("The 404 error rate fell. " + "Servers answered normally. " * 40) is None


def test_the_http_fetcher_keeps_to_its_limits(local_web: LocalWeb) -> None:
    article = "<html><body><p>" + "Solid-state cells store more energy per kilogram. " * 30 + "</p></body>"
    local_web.pages.update({
        "/ok": Page(article),
        "/missing": Page("gone", 404, "text/plain"),
        "/hop1": Page("", 302, headers={"Location": "/hop2"}),
        "/hop2": Page("", 302, headers={"Location": "/hop3"}),
        "/hop3": Page("", 302, headers={"Location": "/ok"}),
        "/big": Page("x" * 5000, content_type="text/plain"),
        "/image": Page(b"\x89PNG....", content_type="image/png"),
        "/blocked": Page("<html><title>Access denied</title><body>Request blocked.</body></html>"),
        "/slow": Page(article, delay=2.0),
    })
    fetch = HttpFetcher(timeout=0.5, max_bytes=4000, max_redirects=2)
    assert "Solid-state cells" in fetch(f"{local_web.url}/ok")
    for path, why in [("/missing", "HTTP 404"), ("/hop1", "more than 2 redirects"),
                      ("/big", "larger than 4000 bytes"), ("/image", "not text (image/png)"),
                      ("/blocked", "error page"), ("/slow", "timed out after 0.5 s")]:
        with pytest.raises(InputError, match=re.escape(why)):
            fetch(f"{local_web.url}{path}")
    assert "Solid-state" in HttpFetcher(max_redirects=3)(f"{local_web.url}/hop1")
    with pytest.raises(InputError, match="only http"):
        fetch("file:///etc/passwd")


def test_an_http_fetched_research_run_reads_the_full_pages(local_web: LocalWeb) -> None:
    full = ("<html><head><title>Battery survey</title></head><body><article><p>Lithium-ion battery pack "
            "prices fell 14% in 2023 to $139 per kWh.</p><p>Battery pack prices for buses were $180 per kWh "
            "in 2023.</p></article></body></html>")
    local_web.pages["/bnef"] = Page(full)
    local_web.pages["/gone"] = Page("gone", 410, "text/plain")
    session = ResearchSession([{"role": "user", "content": "Research batteries."}],
                              topic="battery pack prices", fetch=HttpFetcher(timeout=2))
    session.record_search_results([
        {"url": f"{local_web.url}/bnef", "title": "BNEF", "content": "Battery pack prices fell 14% in 2023."},
        {"url": f"{local_web.url}/gone", "title": "Old",
         "content": "Battery pack prices were $1,100 per kWh in 2010."}])
    with pytest.warns(CompactorWarning, match=re.escape(f"could not fetch {local_web.url}/gone (HTTP 410)")):
        session.end_of_research()
    report = session.report()
    assert "$180 per kWh" in report and "$1,100 per kWh" in report and unresolved_footnotes(report) == []


# -- the LLM-written report --------------------------------------------------------------------------


def _llm(server: FakeOpenAI) -> dict[str, Any]:
    return {"model": "m", "base_url": server.base_url, "api_key": "sk-test", "max_retries": 0}


def _written(report: Any, footnotes: dict[str, str], extra: str = "") -> str:
    lines = ["# Research report", "", "## Summary", "",
             f"Battery packs reached $139 per kWh in 2023[^{_number(footnotes, 'bnef')}].{extra}", "",
             "## Key findings", ""]
    for topic, section in zip(report.topics, report.sections, strict=True):
        lines += [f"### {topic}", "", section, ""]
    lines += ["## Conclusions", "", "Prices fell while charging points grew to 630,000"
              f"[^{_number(footnotes, 'charging')}].", "", "## References", ""]
    lines += [f"[^{n}]: {url}" for n, url in footnotes.items()]
    return "\n".join(lines) + "\n"


def _number(footnotes: dict[str, str], name: str) -> str:
    return next(n for n, url in footnotes.items() if url.endswith(name))


def test_an_llm_report_is_used_when_every_footnote_resolves(openai_server: FakeOpenAI) -> None:
    session = research()
    rules = session.report(budget=1200)
    openai_server.queue(Reply(content=_written(rules, dict(rules.footnotes))))
    written = session.report(budget=1200, llm=_llm(openai_server))
    assert written.method == "llm" and written.notes == [] and unresolved_footnotes(written) == []
    prompt = openai_server.requests[-1].prompt
    assert "EV battery prices; charging networks in Europe; grid impact of electric vehicles" in prompt
    assert "[^1]: " in prompt and openai_server.requests[-1].json["max_tokens"] == 1200
    assert session.last_report is written


@pytest.mark.parametrize("spoil, why", [
    (lambda text, notes: text.replace(f"[^{_number(notes, 'grid')}]: https://ex.com/grid\n", ""),
     "footnote(s) without a definition"),
    (lambda text, notes: text.replace("https://ex.com/grid", "https://ex.com/tmp").replace(
        "https://ex.com/bnef", "https://ex.com/grid").replace("https://ex.com/tmp", "https://ex.com/bnef"),
     "points to 'https://ex.com/grid', not 'https://ex.com/bnef'"),
    (lambda text, notes: text.replace("## Conclusions", "A claim.[^99]\n\n## Conclusions"),
     "invented facts not in the input: 99"),
    (lambda text, notes: text.replace("## Conclusions", "Prices will fall 37% by 2031.\n\n## Conclusions"),
     "37"),
    (lambda text, notes: text.replace("### grid impact of electric vehicles", "### Other"),
     "topic(s) left out: grid impact of electric vehicles"),
])
def test_an_llm_report_with_unresolved_footnotes_or_invented_numbers_is_refused(
        openai_server: FakeOpenAI, spoil: Any, why: str) -> None:
    session = research()
    rules = session.report(budget=1200)
    openai_server.queue(Reply(content=spoil(_written(rules, dict(rules.footnotes)), dict(rules.footnotes))))
    kept = session.report(budget=1200, llm=_llm(openai_server))
    assert kept.method == "rules" and kept == rules and why in " ".join(kept.notes)
    assert unresolved_footnotes(kept) == []


def test_an_unreachable_llm_keeps_the_rule_report(openai_server: FakeOpenAI) -> None:
    session = research()
    openai_server.queue(Reply(status=500))
    kept = session.report(llm=_llm(openai_server))
    assert kept.method == "rules" and kept.notes and "[^1]" in kept
    with pytest.raises(InputError, match="llm must be"):
        session.report(llm="gpt")


def _fact_reply(request: Any) -> Reply:
    """A model that answers the battery topic with one real sentence, invents a price for the
    charging topic and fails on the grid topic."""
    chunks = dict(re.findall(r"(?m)^\[([^\]\s]+)\] (.+)$", request.prompt))
    for chunk_id, text in chunks.items():
        if "CATL" in text:
            return Reply(content=json.dumps([{"fact": "CATL started sodium-ion production in 2023.",
                                              "chunk_ids": [chunk_id]}]))
        if "Ionity" in text:
            return Reply(content=json.dumps([{"fact": "Ionity charges cost $987 per session.",
                                              "chunk_ids": [chunk_id]}]))
    return Reply(status=500)


def test_topic_compression_by_a_guarded_llm_keeps_the_rules_for_refused_topics(
        openai_server: FakeOpenAI) -> None:
    openai_server.respond = _fact_reply
    session = research(topic_llm=_llm(openai_server))
    battery, charging, grid = (e["facts"] for e in session.search_results)
    assert [f["text"] for f in battery] == ["CATL started sodium-ion production in 2023."]
    assert session.search_results[0]["useful_webpages"] == ["https://ex.com/sodium"]
    assert any("630,000" in f["text"] for f in charging)  # the invented price was refused
    assert any("60%" in f["text"] for f in grid)  # the endpoint failed: the rules stand
    report = session.report()
    assert "987" not in report and "CATL started sodium-ion production" in report
    assert unresolved_footnotes(report) == [] and len(openai_server.requests) == 3
    rules = research()
    assert [f["text"] for f in rules.search_results[1]["facts"]] == [f["text"] for f in charging]


@pytest.mark.parametrize("strategy", ["chunk_filtering", "summarization"])
def test_every_strategy_gives_each_topic_cited_findings(strategy: str) -> None:
    session = research(strategy=strategy)
    report = session.report()
    sections = sections_of(report)
    assert list(sections) == list(TOPICS) and "No finding was kept" not in report
    assert "$139 per kWh" in sections["EV battery prices"]
    assert "630,000" in sections["charging networks in Europe"]
    assert unresolved_footnotes(report) == [] and report.footnotes
    assert set(report.footnotes.values()) <= {u for pages in TOPICS.values() for u, _, _ in pages}
    assert "https://ex.com/recipes" not in session.search_results[0]["useful_webpages"]


# -- the LangChain agent example ---------------------------------------------------------------------


def _example() -> Any:
    pytest.importorskip("langchain.agents")
    import importlib.util

    spec = importlib.util.spec_from_file_location("research_agent_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # pydantic resolves the model's annotations through it
    spec.loader.exec_module(module)
    return module


def test_the_langchain_research_agent_prunes_each_finished_topic_and_reports() -> None:
    from langchain_core.messages import ToolMessage

    import compactor

    example = _example()
    report, session, result = example.run(budget=1200)
    scripted = [m for m in result["messages"] if isinstance(m, ToolMessage)]
    assert [m.name for m in scripted][-2:] == ["think_tool", "end_of_research"]
    assert [e["topic"] for e in session.search_results] == [t for t, _ in example.PLAN]
    assert all("bakery" not in u for e in session.search_results for u in e["useful_webpages"])
    assert len(session.reflections) == 7
    assert "630,000" in report and "$139 per kWh" in report and "60%" in report
    assert unresolved_footnotes(report) == [] and get_counter().count(report) <= 1200
    assert list(sections_of(report)) == [t for t, _ in example.PLAN]
    first = session.search_results[0]
    assert first["dropped_ids"]
    originals = compactor.expand(first["dropped_ids"], session=session)
    assert any("lithium-ion battery pack price" in text for text in originals.values())


def test_the_agent_history_after_a_switch_holds_only_the_request_and_the_switch() -> None:
    from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

    example = _example()
    model = example.ScriptedResearcher(plan=example.PLAN)
    report, _, result = example.run(model=model, budget=None)
    switches = [i for i, r in enumerate(model.requests)
                if isinstance(r[-1], ToolMessage) and r[-1].name == "change_research_topic"]
    assert len(switches) == 2
    for i in switches:
        after = model.requests[i]
        assert isinstance(after[0], SystemMessage) and isinstance(after[1], HumanMessage)
        assert isinstance(after[2], AIMessage) and after[2].tool_calls[0]["name"] == "change_research_topic"
        assert len(after) == 4 and "Current research topic:" in str(after[3].content)
    searches_seen = [sum(isinstance(m, ToolMessage) and m.name == "tavily_search" for m in r)
                     for r in model.requests]
    assert max(searches_seen) == 2  # never more than one topic's searches at once
    assert "Research finished" in str(result["messages"][-1].content) and report.method == "rules"


def test_the_example_runs_from_the_command_line(tmp_path: Path) -> None:
    pytest.importorskip("langchain.agents")
    import subprocess

    env = {k: v for k, v in os.environ.items() if k != "TAVILY_API_KEY"}
    done = subprocess.run([sys.executable, str(EXAMPLE), "--budget", "700"], capture_output=True, text=True,
                          env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "## Key findings" in done.stdout and unresolved_footnotes(done.stdout) == []
    assert get_counter().count(done.stdout) <= 700
    bad = subprocess.run([sys.executable, str(EXAMPLE), "--corpus", str(tmp_path / "none.jsonl")],
                         capture_output=True, text=True, env=env, timeout=120)
    assert bad.returncode == 2 and "corpus: no such file or folder" in bad.stderr
