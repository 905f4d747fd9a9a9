"""The research report: per-topic findings with `[^n]` footnotes to their pages, built by rules.

A research session ends with topics, each holding facts (verbatim sentences of its pages, ranked
by relevance to the topic). The report is Markdown with a summary, key findings per topic,
conclusions and references, within a token budget. Every topic keeps its section: the headings
come first, then the topics take turns adding their next best fact, so a budget that holds the
headings holds each topic's best fact before any topic gets its second. Footnotes number pages in
order of first citation; the references list defines exactly the footnotes the text cites.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import regex

from compactor.document import Fact
from compactor.errors import InputError
from compactor.text.language import is_chinese
from compactor.text.tokens import TokenCounter, get_counter

FOOTNOTE = regex.compile(r"\[\^([^\]\s]+)\](?!:)")
DEFINITION = regex.compile(r"(?m)^\[\^([^\]\s]+)\]:[ \t]*(\S.*)$")
# a page's facts count this much less for each fact of the page a topic already shows
_REPEAT = 0.9
# facts a topic tries, one after another, once the exact count is over the budget
_TRIES = 3

LABELS = {
    "en": {"title": "Research report", "summary": "Summary", "findings": "Key findings",
           "conclusions": "Conclusions", "references": "References", "none": "No finding was kept.",
           "scope": ("{topics} topic(s) researched; {facts} finding(s) from {pages} source(s) "
                     "are cited below."),
           "question": "Question: {query}",
           "supported": "Every topic's findings are cited from its sources.",
           "single": "Resting on a single source: topic(s) {topics}; verify before relying on them.",
           "empty": "No finding was kept for topic(s) {topics}.",
           "agent": "Topic {number} (agent's note): {note}"},
    "zh": {"title": "研究报告", "summary": "摘要", "findings": "核心发现", "conclusions": "结论",
           "references": "参考文献", "none": "未保留任何发现。",
           "scope": "共研究 {topics} 个主题；下文引用了 {pages} 个来源中的 {facts} 条发现。",
           "question": "问题：{query}",
           "supported": "每个主题的发现都注明了来源。",
           "single": "仅有单一来源的主题：{topics}，使用前请核实。",
           "empty": "未保留任何发现的主题：{topics}。",
           "agent": "主题 {number}（代理的记录）：{note}"},
}


@dataclass(frozen=True, slots=True)
class TopicFindings:
    """One research topic: its facts best first, its pages' titles by URL, the agent's own note."""

    topic: str
    facts: tuple[Fact, ...]
    titles: Mapping[str, str | None] = field(default_factory=dict)
    note: str | None = None


class ResearchReport(str):
    """The report's Markdown, with what it is made of: `footnotes` (number -> URL), and per topic
    in the order given (`topics`): its findings' Markdown (`sections`), the URLs its kept facts
    come from (`cited`) and their ids (`fact_ids`); `method` is "rules" or "llm"."""

    footnotes: dict[str, str]
    topics: list[str]
    sections: list[str]
    cited: list[list[str]]
    fact_ids: list[list[str]]
    method: str
    notes: list[str]

    def __new__(cls, text: str, **parts: Any) -> ResearchReport:
        report = super().__new__(cls, text)
        report.footnotes = dict(parts.get("footnotes", {}))
        report.topics = list(parts.get("topics", []))
        report.sections = list(parts.get("sections", []))
        report.cited = list(parts.get("cited", []))
        report.fact_ids = list(parts.get("fact_ids", []))
        report.method = str(parts.get("method", "rules"))
        report.notes = list(parts.get("notes", []))
        return report

    @property
    def text(self) -> str:
        return str(self)


def unresolved_footnotes(text: str) -> list[str]:
    """The footnote labels `text` cites (`[^n]`) without a definition line (`[^n]: ...`)."""
    defined = {m.group(1) for m in DEFINITION.finditer(text)}
    return list(dict.fromkeys(m.group(1) for m in FOOTNOTE.finditer(text) if m.group(1) not in defined))


def footnote_refs(text: str) -> list[str]:
    """The footnote labels `text` cites, in order of first citation."""
    return list(dict.fromkeys(m.group(1) for m in FOOTNOTE.finditer(text)))


class _Layout:
    """Renders a selection of facts per topic as the report."""

    def __init__(self, topics: Sequence[TopicFindings], query: str | None, title: str | None) -> None:
        self.topics = list(topics)
        self.query = query
        sample = [query or ""] + [t.topic for t in topics] + [f.text for t in topics for f in t.facts[:3]]
        self.labels = LABELS["zh" if is_chinese(sample) else "en"]
        self.title = title or self.labels["title"]

    def numbers(self, chosen: Sequence[Sequence[Fact]]) -> dict[str, int]:
        numbers: dict[str, int] = {}
        for facts in chosen:
            for fact in facts:
                numbers.setdefault(_url(fact), len(numbers) + 1)
        return numbers

    def section(self, facts: Sequence[Fact], numbers: Mapping[str, int]) -> str:
        return "\n".join(f"- {_one_line(f.text)}[^{numbers[_url(f)]}]" for f in facts)

    def render(self, chosen: Sequence[Sequence[Fact]], extras: bool) -> tuple[str, dict[str, int]]:
        """The report; `extras` adds the agent's notes to the conclusions."""
        labels = self.labels
        numbers = self.numbers(chosen)
        cited_facts = sum(len(facts) for facts in chosen)
        summary = [labels["scope"].format(topics=len(self.topics), facts=cited_facts, pages=len(numbers))]
        if self.query:
            summary.insert(0, labels["question"].format(query=_one_line(self.query)))
        parts = [f"# {_one_line(self.title)}", f"## {labels['summary']}", "\n".join(summary),
                 f"## {labels['findings']}"]
        for number, (topic, facts) in enumerate(zip(self.topics, chosen, strict=True), 1):
            parts.append(f"### {number}. {_one_line(topic.topic)}")
            parts.append(self.section(facts, numbers) if facts else labels["none"])
        parts += [f"## {labels['conclusions']}", "\n".join(self.conclusions(chosen, extras))]
        if numbers:
            titles = {u: t for topic in self.topics for u, t in topic.titles.items() if t}
            parts += [f"## {labels['references']}",
                      "\n".join(f"[^{n}]: {_reference(url, titles.get(url))}" for url, n in numbers.items())]
        return "\n\n".join(parts) + "\n", numbers

    def conclusions(self, chosen: Sequence[Sequence[Fact]], notes: bool) -> list[str]:
        """How well each topic is supported (topics by number), then the agent's notes."""
        labels = self.labels
        support = [len({_url(f) for f in facts}) for facts in chosen]
        empty = [str(k) for k, count in enumerate(support, 1) if count == 0]
        single = [str(k) for k, count in enumerate(support, 1) if count == 1]
        lines = []
        if empty:
            lines.append("- " + labels["empty"].format(topics=", ".join(empty)))
        if single:
            lines.append("- " + labels["single"].format(topics=", ".join(single)))
        if not lines:
            lines.append("- " + labels["supported"])
        if notes:
            lines += [f"- {labels['agent'].format(number=k, note=_one_line(t.note))}"
                      for k, t in enumerate(self.topics, 1) if t.note and t.note.strip()]
        return lines


def _url(fact: Fact) -> str:
    if fact.source_url:
        return fact.source_url
    return f"source {fact.chunk_ids[0].rsplit('-', 1)[0]}" if fact.chunk_ids else "unknown source"


def _one_line(text: str | None) -> str:
    return " ".join((text or "").split())


def _reference(url: str, title: str | None) -> str:
    """`Title. URL`, or the URL alone when it already spells the title (as Wikipedia's do)."""
    title = _one_line(title)
    slug = regex.sub(r"[\W_]+", " ", url).lower()
    if not title or title == url or all(w in slug.split() for w in regex.findall(r"\w+", title.lower())):
        return url
    return f"{title}. {url}" if url.startswith(("http://", "https://")) else f"{title} ({url})"


def build_report(topics: Sequence[TopicFindings], budget: int | None = None, *, query: str | None = None,
                 title: str | None = None, counter: TokenCounter | None = None) -> ResearchReport:
    """The rule-built report of `topics` within `budget` tokens (None: every fact).

    Raises InputError (field `budget`) when the budget cannot hold the headings."""
    counter = counter or get_counter()
    layout = _Layout(topics, query, title)
    empty: list[list[Fact]] = [[] for _ in topics]
    if budget is not None:
        skeleton = counter.count(layout.render(empty, extras=False)[0])
        if budget < skeleton:
            raise InputError(f"budget: a budget of {budget} tokens cannot hold the report's headings "
                             f"({len(topics)} topic(s) need {skeleton} tokens)")
    chosen = _choose(layout, budget, counter)
    text, numbers = layout.render(chosen, extras=True)
    if budget is not None and counter.count(text) > budget:
        text, numbers = layout.render(chosen, extras=False)
    by_number = {str(n): url for url, n in numbers.items()}
    return ResearchReport(text, footnotes=by_number, topics=[t.topic for t in topics],
                          sections=[layout.section(facts, numbers) for facts in chosen],
                          cited=[list(dict.fromkeys(_url(f) for f in facts)) for facts in chosen],
                          fact_ids=[[f.id for f in facts] for facts in chosen], method="rules")


def _diversified(facts: Sequence[Fact], repeat: float = _REPEAT) -> list[Fact]:
    """Facts best first, a page's score shrinking by `repeat` for each fact already taken from it,
    so a topic's second finding comes from another page unless its own page is much better."""
    left = list(facts)
    taken: dict[str, int] = {}
    ordered: list[Fact] = []
    while left:
        best = max(left, key=lambda f: f.score * repeat ** taken.get(_url(f), 0))
        left.remove(best)
        ordered.append(best)
        taken[_url(best)] = taken.get(_url(best), 0) + 1
    return ordered


def _choose(layout: _Layout, budget: int | None, counter: TokenCounter) -> list[list[Fact]]:
    """Facts per topic: every topic's best fact first, then the next fact of the topic with the
    fewest tokens so far, while the estimate fits (so topics share the room evenly and a topic with
    little to say leaves its share to the others); the exact count then removes the last additions
    or tops up with more while it fits."""
    topics = layout.topics
    ranked = [_diversified(t.facts) for t in topics]
    chosen: list[list[Fact]] = [[] for _ in topics]
    if budget is None:
        return ranked
    room = budget - counter.count(layout.render(chosen, extras=False)[0])
    cited: set[str] = set()
    next_at = [0] * len(topics)
    spent = [0] * len(topics)
    added: list[int] = []
    used = 0

    def cost_of(k: int, fact: Fact) -> int:
        url = _url(fact)
        cost = counter.count(f"- {_one_line(fact.text)}[^00]") + 1
        if url not in cited:
            cost += counter.count(f"[^00]: {_reference(url, topics[k].titles.get(url))}") + 1
        return cost

    def take(k: int, limit: int) -> bool:
        """Add topic k's next fact that fits within `limit` (skipping ones too long)."""
        nonlocal used
        while next_at[k] < len(ranked[k]):
            fact = ranked[k][next_at[k]]
            next_at[k] += 1
            cost = cost_of(k, fact)
            if used + cost <= limit:
                chosen[k].append(fact)
                cited.add(_url(fact))
                added.append(k)
                used += cost
                spent[k] += cost
                return True
        return False

    for k in range(len(topics)):  # the floor: each topic's best fact that fits
        take(k, room)
    reserve = counter.count(layout.render(chosen, extras=True)[0]) - counter.count(
        layout.render(chosen, extras=False)[0])  # the agent's notes, when the rest leaves room
    open_topics = set(range(len(topics)))
    while open_topics:
        k = min(open_topics, key=lambda i: (spent[i], i))
        if not take(k, room - reserve):
            open_topics.discard(k)
    while added and counter.count(layout.render(chosen, extras=False)[0]) > budget - reserve:
        chosen[added.pop()].pop()
    _top_up(layout, chosen, ranked, budget - reserve, counter)
    return chosen


def _top_up(layout: _Layout, chosen: list[list[Fact]], ranked: list[list[Fact]], budget: int,
            counter: TokenCounter) -> None:
    """Add the facts the estimate left out while the exact count fits: the topic with the fewest
    facts first, each topic trying its next few facts."""
    tries = [0] * len(chosen)
    while True:
        open_topics = [k for k in range(len(chosen)) if tries[k] < _TRIES]
        if not open_topics:
            return
        k = min(open_topics, key=lambda i: (len(chosen[i]), i))
        have = {f.id for f in chosen[k]}
        left = [f for f in ranked[k] if f.id not in have]
        if tries[k] >= len(left):
            tries[k] = _TRIES
            continue
        chosen[k].append(left[tries[k]])
        if counter.count(layout.render(chosen, extras=False)[0]) <= budget:
            chosen[k].sort(key=ranked[k].index)
            tries[k] = 0
        else:
            chosen[k].pop()
            tries[k] += 1
