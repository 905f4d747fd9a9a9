"""A research session that prunes its history when the agent switches topic.

    >>> session = ResearchSession([system, instruction], store="research.sqlite")
    >>> session.add(assistant_message, tool_message)           # search results are recorded
    >>> reply = client.chat.completions.create(..., messages=session.messages, tools=session.tools())
    >>> session.handle_tool_call(call)                          # change_research_topic / end_of_research

When the agent calls `change_research_topic(new_topic, reason, search_result_of_current_topic)` the
session archives the current topic (its search results' URLs and their compressed content, by the
`deep-search` pipeline's fact-centric strategy, plus the agent's own summary), drops the topic's
intermediate messages (tool calls, tool results, assistant turns) from the history, and keeps the
original user instruction and the latest state: the call itself and one state message that lists
the archived topics. Nothing is lost: the dropped messages are written to the chunk store and the
state message cites their ids for `expand_context`. Messages people wrote after the instruction are
kept unless `keep_user_messages=False`.

With a search provider (`search=OfflineSearch(corpus)` or `TavilySearch()`) the session also answers
`tavily_search` and `think_tool` (`research_tools()` lists all five). `end_of_research` fetches each
topic's useful pages (through `fetch=`, e.g. `HttpFetcher()`; by default the search results' text
stands), and `report(budget=...)` writes the Markdown report: summary, key findings per topic with
`[^n]` footnotes to their pages, conclusions and references, by rules or (`llm=`) by a guarded model.
"""

from __future__ import annotations

import json
import uuid
import warnings
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from compactor.apps.common import llm_mapping
from compactor.apps.compacter import ContextCompacter, fact_from_dict, fact_to_dict
from compactor.apps.research_fetch import Fetcher, fetch_pages
from compactor.apps.research_report import ResearchReport, TopicFindings, build_report
from compactor.apps.research_writer import write_report
from compactor.apps.search_providers import SearchProvider
from compactor.apps.tools import (
    EXPAND_TOOL,
    EXPAND_TOOL_NAME,
    call_id_of,
    handle_expand_call,
    tool_call_parts,
)
from compactor.document import Fact
from compactor.errors import CompactorWarning, InputError
from compactor.formats.messages import as_mapping, conversation_source, message_chunks, parse_message, units
from compactor.pipeline import Pipeline
from compactor.store import Batch, ChunkStore, open_store
from compactor.text.tokens import get_counter

CHANGE_TOPIC = "change_research_topic"
END_RESEARCH = "end_of_research"
CHANGE_TOPIC_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": CHANGE_TOPIC,
        "description": ("Switch to a new research sub-topic. The current topic's search results are "
                        "archived and its intermediate messages are removed from the conversation."),
        "parameters": {
            "type": "object",
            "properties": {
                "new_topic": {"type": "string", "description": "the next sub-topic to research"},
                "reason": {"type": "string", "description": "why the switch"},
                "search_result_of_current_topic": {"type": "string",
                                                   "description": "what the current topic found"},
            },
            "required": ["new_topic"],
        },
    },
}
SEARCH = "tavily_search"
THINK = "think_tool"
SEARCH_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": SEARCH,
        "description": "Search the web for the current research topic; returns result snippets.",
        "parameters": {
            "type": "object",
            "properties": {"query": {"type": "string", "description": "the search query"},
                           "max_results": {"type": "integer", "description": "how many results (1-10)"}},
            "required": ["query"],
        },
    },
}
THINK_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": THINK,
        "description": ("Reflect before and after searching: what was found, what is missing, what to do "
                        "next. Records the reflection; returns no data."),
        "parameters": {"type": "object",
                       "properties": {"reflection": {"type": "string", "description": "your reflection"}},
                       "required": ["reflection"]},
    },
}
END_RESEARCH_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {"name": END_RESEARCH,
                 "description": "Stop researching: every topic has what the user's question needs.",
                 "parameters": {"type": "object", "properties": {}}},
}


class ResearchSession:
    """The topic, the archive of search results per topic, and a history pruned on topic switches."""

    def __init__(self, messages: Iterable[Any] = (), *, topic: str | None = None,
                 store: str | ChunkStore | None = None, session: str | None = None,
                 query: str | None = None, strategy: str = "fact_centric",
                 pipeline: str | Pipeline = "deep-search", plugins: Iterable[Any] = (),
                 keep_user_messages: bool = True, search: SearchProvider | None = None,
                 max_results: int = 5, fetch: Fetcher | None = None, fetch_workers: int = 8,
                 fetch_timeout: float | None = 30.0, topic_llm: Any = None) -> None:
        self.store = open_store(store)
        #: LLM settings for each topic's compression (the strategy's guarded extraction; the rule
        #: result stands for every reply the guard refuses). None: rules only.
        self.topic_llm = llm_mapping(topic_llm)
        self.fetch = fetch
        self.fetch_workers = fetch_workers
        self.fetch_timeout = fetch_timeout
        self.provider = search
        self.max_results = max_results
        #: The agent's reflections (`think_tool`), in order.
        self.reflections: list[str] = []
        self.session = session or f"research-{uuid.uuid4().hex[:12]}"
        self.topic = topic
        self.query = query
        self.strategy = strategy
        self.pipeline = pipeline
        self.plugins = tuple(plugins)
        self.keep_user_messages = keep_user_messages
        self.messages: list[dict[str, Any]] = []
        #: One entry per finished topic: topic, useful_webpages, compressed_content, agent_summary,
        #: reason, fact ids, dropped message ids (a research graph's `state.search_results`).
        self.search_results: list[dict[str, Any]] = []
        self._pending: list[dict[str, Any]] = []
        self._kept: list[int] = []
        #: The latest report (`report()`), a research graph's `state.report`.
        self.last_report: ResearchReport | None = None
        self._topic_start = 0
        self.add(*messages)
        self._topic_start = len(self.messages)

    def __repr__(self) -> str:
        return (f"ResearchSession(topic={self.topic!r}, messages={len(self.messages)}, "
                f"archived_topics={len(self.search_results)})")

    # -- growing the history ---------------------------------------------------------------------

    def add(self, *messages: Any) -> None:
        """Append messages (dicts, SDK objects); tool results that are search results are recorded
        for the current topic."""
        for position, item in enumerate(messages):
            data = dict(as_mapping(item, f"message {len(self.messages) + position}"))
            parse_message(data, f"message {len(self.messages)}")  # validates role and content
            self.messages.append(data)
            if data.get("role") in ("tool", "function"):
                self.record_search_results(_search_results(data.get("content")))

    def record_search_results(self, results: Iterable[Mapping[str, Any] | tuple[str, str]]) -> None:
        """Search results (`{url, content, title?}` or `(url, content)`) for the current topic."""
        for result in results:
            if isinstance(result, tuple):
                url, content = result
                result = {"url": url, "content": content}
            if isinstance(result.get("content"), str) and result["content"].strip():
                self._pending.append({"url": result.get("url"), "content": result["content"],
                                      "title": result.get("title"), "topic": self.topic})

    @staticmethod
    def tools() -> list[dict[str, Any]]:
        """The OpenAI tool definitions this session answers: topic switch, end, expand."""
        return [CHANGE_TOPIC_TOOL, END_RESEARCH_TOOL, EXPAND_TOOL]

    def research_tools(self) -> list[dict[str, Any]]:
        """Every tool an agent needs: search (with a provider), think, topic switch, end, expand."""
        return [*([SEARCH_TOOL] if self.provider is not None else []), THINK_TOOL, *self.tools()]

    def search(self, query: str, max_results: int | None = None) -> list[dict[str, Any]]:
        """Ask the provider, record its usable results for the current topic and return them
        (`url`, `title`, `content`: the snippet the agent reads; the whole page is recorded). A
        result without a URL or text is left out with one warning; a provider that fails (raises,
        times out, returns something else than a list) gives one warning and an InputError."""
        if self.provider is None:
            raise InputError("this ResearchSession has no search provider (pass search=...)")
        if not isinstance(query, str) or not query.strip():
            raise InputError("tavily_search needs a non-empty `query`")
        count = max_results if isinstance(max_results, int) and not isinstance(max_results, bool) else None
        count = max(1, min(count or self.max_results, 20))
        name = getattr(self.provider, "name", type(self.provider).__name__)
        try:
            found = self.provider.search(query.strip(), count)
            if not isinstance(found, list):
                raise InputError(f"returned {type(found).__name__}, not a list of results")
        except Exception as exc:  # a provider's failure costs this search, not the run
            detail = str(exc) if isinstance(exc, InputError) else f"{type(exc).__name__}: {str(exc)[:200]}"
            message = f"search provider {name!r} failed: {detail}"
            warnings.warn(message, CompactorWarning, stacklevel=2)
            raise InputError(message) from None
        usable: list[dict[str, Any]] = []
        for item in found:
            url = item.get("url") if isinstance(item, Mapping) else None
            content = item.get("content") if isinstance(item, Mapping) else None
            if not isinstance(url, str) or not isinstance(content, str) or not content.strip():
                warnings.warn(f"search result {url if isinstance(url, str) else '(no URL)'} for "
                              f"{query!r} has no usable text; left out", CompactorWarning, stacklevel=2)
                continue
            title = item.get("title")
            usable.append({"url": url, "title": title if isinstance(title, str) else None,
                           "content": content, "snippet": item.get("snippet")})
        self.record_search_results(usable)
        return [{"url": r["url"], "title": r["title"],
                 "content": r["snippet"] if isinstance(r["snippet"], str) and r["snippet"] else r["content"]}
                for r in usable]

    def think(self, reflection: str) -> str:
        """Record a reflection (it guides the agent; it adds no data)."""
        if not isinstance(reflection, str) or not reflection.strip():
            raise InputError("think_tool needs a non-empty `reflection`")
        self.reflections.append(reflection.strip())
        return f"Reflection recorded: {reflection.strip()}"

    # -- the research agent's tools --------------------------------------------------------------------------

    def change_topic(self, new_topic: str, reason: str = "",
                     search_result_of_current_topic: str | None = None, *,
                     prune: bool = True) -> dict[str, Any]:
        """Archive the current topic, drop its intermediate messages, start `new_topic`.

        Returns the archive entry of the topic that ended. When the last assistant message is the
        call that asked for the switch, it stays and `handle_tool_call` answers it with the state.
        `prune=False` leaves the history alone, for an agent framework that keeps it and calls
        `prune_history` with it afterwards.
        """
        if not isinstance(new_topic, str) or not new_topic.strip():
            raise InputError("change_research_topic needs a non-empty `new_topic`")
        entry = self._archive(reason, search_result_of_current_topic, prune=prune)
        self.topic = new_topic.strip()
        return entry

    def end_of_research(self, search_result_of_current_topic: str | None = None) -> list[dict[str, Any]]:
        """Archive the current topic (if it found anything) and return every topic's archive, each
        with its facts as footnoted Markdown (`compressed_content`, footnotes numbered over the
        whole research and defined in each topic's text)."""
        if self._pending or search_result_of_current_topic:
            self._archive("end of research", search_result_of_current_topic, prune=False)
        if self.fetch is not None:
            self._fetch_useful_pages()
        full = self.report()
        for entry, section in zip(self.search_results, full.sections, strict=True):
            cited = [n for n, url in full.footnotes.items() if f"[^{n}]" in section]
            definitions = "\n".join(f"[^{n}]: {full.footnotes[n]}" for n in cited)
            if section:
                entry["compressed_content"] = section + ("\n\n" + definitions if definitions else "")
        return list(self.search_results)

    def report(self, budget: int | None = None, llm: Any = None, *, title: str | None = None,
               context_budget: int = 6000) -> ResearchReport:
        """The Markdown report of every archived topic: summary, key findings per topic with `[^n]`
        footnotes to their pages, conclusions and references, within `budget` tokens. Every topic
        keeps its section: each gets its best finding before any gets a second.

        With `llm` (True, a settings mapping or LLMSettings) the model writes the report from the
        footnoted findings (at most `context_budget` tokens of them); the reply is used only when
        the guard accepts it (no invented number, name or URL), every footnote it cites resolves
        to the same page and every topic is there. Otherwise the rule report is returned and
        `report.notes` says why (`report.method` tells which).

        Raises InputError when `budget` cannot hold the headings."""
        topics = [self._findings(entry) for entry in self.search_results]
        report = build_report(topics, budget, query=self.query, title=title)
        settings = llm_mapping(llm)
        if settings is not None:
            context = build_report(topics, max(context_budget, budget or 0), query=self.query, title=title)
            report, refused = write_report(report, context, budget=budget, query=self.query, llm=settings)
            report.notes.extend(refused)
        self.last_report = report
        return report

    def _findings(self, entry: Mapping[str, Any]) -> TopicFindings:
        facts = tuple(fact_from_dict(f) for f in entry.get("facts", ()))
        titles = {p["url"]: p.get("title") for p in entry.get("pages", ()) if p.get("url")}
        return TopicFindings(entry["topic"], facts, titles, entry.get("agent_summary"))

    def handle_tool_call(self, call: Any) -> dict[str, Any]:
        """Answer a call to one of `research_tools()` and append the tool message to the history."""
        call_id = call_id_of(call)
        try:
            _, name, args = tool_call_parts(call)
            if name == SEARCH:
                hits = self.search(str(args.get("query") or ""), args.get("max_results"))
                content = json.dumps({"query": args.get("query"), "results": hits}, ensure_ascii=False)
            elif name == THINK:
                content = self.think(str(args.get("reflection") or ""))
            elif name == EXPAND_TOOL_NAME:
                content = handle_expand_call(call, self.store)["content"]
            elif name == CHANGE_TOPIC:
                entry = self.change_topic(str(args.get("new_topic") or ""), str(args.get("reason") or ""),
                                          args.get("search_result_of_current_topic"))
                content = self.state_text(entry)
            elif name == END_RESEARCH:
                archive = self.end_of_research(args.get("search_result_of_current_topic"))
                content = json.dumps({"topics": [{"topic": e["topic"], "pages": len(e["useful_webpages"])}
                                                 for e in archive]}, ensure_ascii=False)
            else:
                content = f"error: unknown tool {name!r}"
        except InputError as exc:
            content = f"error: {exc}"
        message = {"role": "tool", "tool_call_id": call_id, "content": content}
        self.messages.append(message)
        return message

    def state_text(self, entry: Mapping[str, Any] | None = None) -> str:
        """The latest state: the current topic, every archived topic, and how to expand what was
        dropped."""
        lines = [f"Current research topic: {self.topic}."]
        if entry is not None:
            lines.append(f"Archived topic {entry['topic']!r} ({entry['reason'] or 'no reason given'}): "
                         f"{len(entry['useful_webpages'])} page(s), {len(entry['fact_ids'])} fact(s).")
            if entry["dropped_ids"]:
                first, last = entry["dropped_ids"][0], entry["dropped_ids"][-1]
                ids = f"{first}..{last.rsplit('-', 1)[1]}" if first != last else first
                lines.append(f"Its {len(entry['dropped_ids'])} intermediate message(s) were removed; "
                             f"expand_context(ids=[\"{ids}\"]) returns them.")
        if self.search_results:
            lines.append("Archived topics: " + "; ".join(
                f"{e['topic']} ({len(e['useful_webpages'])} pages)" for e in self.search_results) + ".")
        return "\n".join(lines)

    # -- internals ---------------------------------------------------------------------------------

    def _compress(self, pages: list[dict[str, Any]], topic: str | None,
                  session: str) -> tuple[str, list[Fact], list[str]]:
        """A topic's pages compressed by the session's strategy: the checklist text, the findings
        best first (facts, kept chunks or summary sentences), and the URLs of the pages that gave
        a finding in the order given (all of them when nothing was kept)."""
        compressed, facts = "", []
        if pages:
            compacter = ContextCompacter(self.strategy, store=self.store, pipeline=self.pipeline,
                                         plugins=self.plugins, query=topic or self.query, session=session,
                                         llm=self.topic_llm)
            compacter.process_search_results(pages)
            compressed = compacter.checklist_text()
            facts = compacter.findings()
        contributing = {f.source_url for f in facts}
        urls = [p["url"] for p in pages if p.get("url") and (not facts or p["url"] in contributing)]
        return compressed, facts, urls

    def _fetch_useful_pages(self) -> None:
        """Fetch every topic's useful pages in parallel; a topic whose pages came back with other
        text than its search results is compressed again from the fetched text. A page that fails
        keeps its search result (one warning names it)."""
        todo = [(k, e) for k, e in enumerate(self.search_results) if not e.get("fetched")]
        urls = [u for _, e in todo for u in e["useful_webpages"]]
        got = fetch_pages(urls, self.fetch, workers=self.fetch_workers,
                          timeout=self.fetch_timeout) if self.fetch is not None else {}
        for k, entry in todo:
            entry["fetched"] = [u for u in entry["useful_webpages"] if u in got]
            useful = set(entry["useful_webpages"])
            old = [p for p in entry["pages"] if p.get("url") in useful]
            if not any(got.get(p["url"], p["content"]) != p["content"] for p in old):
                continue
            pages = [{**p, "content": got.get(p["url"], p["content"])} for p in old]
            _, facts, urls = self._compress(pages, entry["topic"], f"{self.session}:{k}:fetched")
            if not facts:  # the fetched text gave nothing: the search results' facts stand
                continue
            entry.update(facts=[fact_to_dict(f) for f in facts], fact_ids=[f.id for f in facts],
                         useful_webpages=urls)
            entry["pages"] = [{**p, "content": got[p["url"]]} if p.get("url") in useful and p["url"] in got
                              else p for p in entry["pages"]]

    def _archive(self, reason: str, agent_summary: str | None, prune: bool = True) -> dict[str, Any]:
        pages = list({r["url"] or f"result {i}": r for i, r in enumerate(self._pending)}.values())
        compressed, facts, urls = self._compress(pages, self.topic,
                                                 f"{self.session}:{len(self.search_results)}")
        dropped_ids = self._prune() if prune else []
        entry = {"topic": self.topic or "(no topic)", "reason": reason, "useful_webpages": urls,
                 "compressed_content": compressed, "agent_summary": agent_summary,
                 "fact_ids": [f.id for f in facts], "dropped_ids": dropped_ids,
                 "facts": [fact_to_dict(f) for f in facts],
                 "pages": [{"url": p.get("url"), "title": p.get("title"), "content": p["content"]}
                           for p in pages]}
        self.search_results.append(entry)
        self._pending = []
        return entry

    def prune_history(self, messages: Sequence[Any]) -> list[int]:
        """For a history an agent framework keeps: take `messages` (OpenAI-format, ending with the
        switch call and its result) as the history, drop the finished topic's intermediate
        messages as a switch does (into the store, cited by the latest archive entry's
        `dropped_ids`) and return the indices of `messages` that stay."""
        self.messages = [dict(as_mapping(m, f"message {i}")) for i, m in enumerate(messages)]
        ids = self._prune()
        if self.search_results and ids:
            self.search_results[-1]["dropped_ids"] = ids
        return list(self._kept)

    def _prune(self) -> list[str]:
        """Drop the current topic's intermediate messages (and earlier state messages); keep system
        messages, the original instruction, people's messages and the unit that asks for the switch."""
        parsed = [parse_message(m, f"message {i}") for i, m in enumerate(self.messages)]
        tiles = units(parsed)
        first_user = next((i for i, m in enumerate(parsed) if m.role == "user"), None)
        switch = tiles[-1] if tiles and _is_switch(parsed[tiles[-1].start]) else None
        keep: set[int] = set()
        for unit in tiles:
            message = parsed[unit.start]
            if unit is switch:
                keep.update(range(unit.start, unit.end))
            elif message.role in ("system", "developer") or unit.start == first_user:
                keep.add(unit.start)
            elif unit.start < self._topic_start and not _is_switch(message):
                keep.update(range(unit.start, unit.end))
            elif self.keep_user_messages and message.role == "user" and len(unit) == 1 and unit.complete:
                keep.add(unit.start)
        dropped = [i for i in range(len(parsed)) if i not in keep]
        ids: list[str] = []
        if dropped:
            source = conversation_source([parsed[i] for i in dropped], f"{self.session}:topic")
            chunks = message_chunks(source, get_counter())
            self.store.commit_batch(self.session, Batch(sources=(source,), chunks=chunks,
                                                        report={"kind": "topic switch"}))
            ids = [c.id for c in chunks]
        self._kept = sorted(keep)
        self.messages = [self.messages[i] for i in self._kept]
        self._topic_start = len(self.messages)
        return ids


def _is_switch(message: Any) -> bool:
    return any((c.get("function") or {}).get("name") == CHANGE_TOPIC
               for c in message.tool_calls if isinstance(c, Mapping))


def _search_results(content: Any) -> list[dict[str, Any]]:
    """Search results in a tool result: a JSON list of `{url, content}` (or `raw_content`), bare or
    under `"results"` as Tavily returns them."""
    if not isinstance(content, str) or not content.lstrip().startswith(("[", "{")):
        return []
    try:
        data = json.loads(content)
    except json.JSONDecodeError:
        return []
    if isinstance(data, dict):
        data = data.get("results")
    found = []
    for item in data if isinstance(data, list) else []:
        text = item.get("content") or item.get("raw_content") if isinstance(item, dict) else None
        if isinstance(text, str) and isinstance(item.get("url"), str):
            found.append({"url": item["url"], "content": text, "title": item.get("title")})
    return found
