"""A deep-research agent on LangChain's `create_agent` with compactor's `ResearchSession`.

The agent has four tools: `tavily_search` (Tavily when TAVILY_API_KEY is set, else BM25 over a local
corpus), `think_tool` (a recorded reflection), `change_research_topic` (archives the topic's results
and drops its intermediate messages from the agent's history) and `end_of_research`. When the agent
ends, the session fetches each topic's useful pages, compresses every topic to footnoted facts and
writes the report: summary, key findings per topic, conclusions and references.

    python examples/research_agent.py                          # built-in corpus, scripted model, offline
    python examples/research_agent.py --budget 800             # a tighter report
    python examples/research_agent.py --corpus notes/ --model openai:gpt-4o-mini "your question"

Offline, the model is a scripted researcher that thinks, searches and switches topics as a real
model would; every tool call still runs for real against the session and the corpus.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware, AgentState
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    RemoveMessage,
    ToolMessage,
    convert_to_openai_messages,
)
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import BaseTool, StructuredTool
from langgraph.graph.message import REMOVE_ALL_MESSAGES
from langgraph.runtime import Runtime
from pydantic import Field, PrivateAttr

from compactor.apps.research import CHANGE_TOPIC, ResearchSession
from compactor.apps.search_providers import OfflineSearch, SearchProvider, search_provider
from compactor.errors import InputError

SYSTEM = """You are a research agent. Work topic by topic:
- call think_tool before and after every search: what you found, what is missing, what next;
- call tavily_search with focused queries for the current topic;
- when the current topic is covered, call change_research_topic(new_topic, reason,
  search_result_of_current_topic) with a short summary of what it found;
- when every topic the question needs is covered, call end_of_research.
The report is written from your searches' pages after end_of_research."""

QUESTION = "How are electric vehicle costs and charging evolving?"
# topic -> the queries the scripted researcher sends
PLAN: list[tuple[str, list[str]]] = [
    ("EV battery prices", ["lithium-ion battery pack price per kWh 2023", "sodium-ion battery cost"]),
    ("public charging networks in Europe", ["public charging points Europe 2023"]),
    ("grid impact of EV charging", ["smart charging peak load grid"]),
]
CORPUS: list[dict[str, str]] = [
    {"url": "https://example.org/battery-survey", "title": "Battery price survey 2023",
     "content": "Lithium-ion battery pack prices fell 14% in 2023 to a record low of $139 per kWh. "
                "Cell prices fell faster than pack prices, helped by cheaper lithium.\n\n"
                "Analysts expect pack prices to fall below $100 per kWh by 2027."},
    {"url": "https://example.org/sodium-ion", "title": "Sodium-ion cells reach production",
     "content": "Sodium-ion batteries could cost 20% less than lithium iron phosphate cells once made at "
                "scale. The first sodium-ion cars went on sale in China in 2024."},
    {"url": "https://example.org/charging-europe", "title": "Charging in Europe",
     "content": "Europe had about 630,000 public charging points at the end of 2023. The Netherlands has "
                "the densest network; fast chargers make up about 15% of public points."},
    {"url": "https://example.org/motorway-chargers", "title": "Motorway fast charging",
     "content": "High-power chargers of up to 350 kW now line motorways in 24 European countries. "
                "Operators plan to double motorway charging sites by 2026."},
    {"url": "https://example.org/grid-study", "title": "Smart charging and the grid",
     "content": "Smart charging can shift up to 60% of electric vehicle charging demand to off-peak hours. "
                "Unmanaged charging raises the evening peak load of distribution grids."},
    {"url": "https://example.org/bakery", "title": "Sourdough basics",
     "content": "Feed the starter twice a day. Bake the loaf at 230 degrees for 40 minutes."},
]


def research_tools(session: ResearchSession) -> list[BaseTool]:
    """The agent's four tools, answered by `session` (errors come back as text the model reads)."""

    def tavily_search(query: str, max_results: int = 5) -> str:
        """Search the web for the current research topic; returns result snippets."""
        try:
            hits = session.search(query, max_results)
        except InputError as exc:
            return f"error: {exc}"
        return json.dumps({"query": query, "results": hits}, ensure_ascii=False)

    def think_tool(reflection: str) -> str:
        """Record a reflection: what was found, what is missing, what to do next."""
        try:
            return session.think(reflection)
        except InputError as exc:
            return f"error: {exc}"

    def change_research_topic(new_topic: str, reason: str = "",
                              search_result_of_current_topic: str = "") -> str:
        """Switch to a new research sub-topic; the current topic's results are archived and its
        intermediate messages removed from the conversation."""
        try:
            entry = session.change_topic(new_topic, reason, search_result_of_current_topic or None,
                                         prune=False)
        except InputError as exc:
            return f"error: {exc}"
        return session.state_text(entry)

    def end_of_research() -> str:
        """Stop researching: every topic has what the question needs."""
        archive = session.end_of_research()
        return json.dumps({"topics": [{"topic": e["topic"], "pages": len(e["useful_webpages"])}
                                      for e in archive]}, ensure_ascii=False)

    return [StructuredTool.from_function(f) for f in
            (tavily_search, think_tool, change_research_topic, end_of_research)]


class TopicSwitchPruning(AgentMiddleware):
    """After `change_research_topic` ran, the agent's history keeps only the request, people's
    messages and the switch (call and state); the dropped messages go to the session's store."""

    def __init__(self, session: ResearchSession) -> None:
        super().__init__()
        self.session = session
        self.pruned = 0

    def before_model(self, state: AgentState[Any], runtime: Runtime[Any]) -> dict[str, Any] | None:
        messages = list(state["messages"])
        if not messages or not isinstance(messages[-1], ToolMessage) or messages[-1].name != CHANGE_TOPIC:
            return None
        if str(messages[-1].content).startswith("error:"):
            return None
        kept = self.session.prune_history(convert_to_openai_messages(messages))
        if len(kept) == len(messages):
            return None
        self.pruned += len(messages) - len(kept)
        return {"messages": [RemoveMessage(id=REMOVE_ALL_MESSAGES), *(messages[i] for i in kept)]}


class ScriptedResearcher(BaseChatModel):
    """An offline stand-in for a chat model that works through `plan` (topic, queries): think,
    search, reflect, switch topic (with a summary of the first result it read), end, answer."""

    plan: list[tuple[str, list[str]]]
    requests: list[list[BaseMessage]] = Field(default_factory=list)
    _steps: list[AIMessage] = PrivateAttr(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "scripted-researcher"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> ScriptedResearcher:
        return self

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None,
                  **kwargs: Any) -> ChatResult:
        self.requests.append(list(messages))
        if not self._steps and len(self.requests) == 1:
            self._steps = self._script()
        step = self._steps.pop(0) if self._steps else AIMessage("Research finished.")
        if step.tool_calls and step.tool_calls[0]["name"] == CHANGE_TOPIC:
            step = self._with_summary(step, messages)
        return ChatResult(generations=[ChatGeneration(message=step)])

    def _script(self) -> list[AIMessage]:
        steps: list[AIMessage] = []

        def call(name: str, **args: Any) -> None:
            steps.append(AIMessage("", tool_calls=[{"name": name, "args": args, "id": f"call_{len(steps)}"}]))

        for k, (topic, queries) in enumerate(self.plan):
            call("think_tool", reflection=f"Topic '{topic}': I need sources on {', '.join(queries)}.")
            for query in queries:
                call("tavily_search", query=query)
                call("think_tool", reflection=f"Read the results for '{query}'; checking what is missing.")
            if k + 1 < len(self.plan):
                call(CHANGE_TOPIC, new_topic=self.plan[k + 1][0], reason=f"'{topic}' is covered")
            else:
                call("end_of_research")
        steps.append(AIMessage("Research finished; the report follows."))
        return steps

    @staticmethod
    def _with_summary(step: AIMessage, messages: list[BaseMessage]) -> AIMessage:
        """The switch call, with the first snippet the topic's searches returned as its summary."""
        snippet = ""
        for message in messages:
            if isinstance(message, ToolMessage) and message.name == "tavily_search":
                results = json.loads(str(message.content)).get("results") or [{}]
                snippet = str(results[0].get("content", ""))[:200]
                break
        call = dict(step.tool_calls[0])
        call["args"] = {**call["args"], "search_result_of_current_topic": snippet}
        return AIMessage("", tool_calls=[call])  # type: ignore[list-item]


def run(question: str = QUESTION, *, model: BaseChatModel | None = None,
        provider: SearchProvider | None = None, budget: int | None = 1500,
        plan: list[tuple[str, list[str]]] | None = None) -> tuple[str, ResearchSession, dict[str, Any]]:
    """Research `question` with the agent; returns the report, the session and the agent's result."""
    plan = plan or PLAN
    provider = provider or OfflineSearch(CORPUS)
    model = model or ScriptedResearcher(plan=plan)
    session = ResearchSession(topic=plan[0][0] if isinstance(model, ScriptedResearcher) else question,
                              query=question, search=provider)
    agent = create_agent(model, tools=research_tools(session), system_prompt=SYSTEM,
                         middleware=[TopicSwitchPruning(session)])
    result = agent.invoke({"messages": [HumanMessage(question)]}, {"recursion_limit": 100})
    if not session.search_results or session._pending:  # the model stopped without end_of_research
        session.end_of_research()
    return session.report(budget=budget), session, result


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("question", nargs="?", default=QUESTION)
    parser.add_argument("--corpus", help="a JSONL file or folder for offline search (default: built in)")
    parser.add_argument("--model", help="a chat model for init_chat_model, e.g. openai:gpt-4o-mini")
    parser.add_argument("--budget", type=int, default=1500, help="report tokens (default 1500)")
    args = parser.parse_args(argv)
    try:
        provider = search_provider(args.corpus if args.corpus else CORPUS)
        model = None
        if args.model:
            from langchain.chat_models import init_chat_model

            model = init_chat_model(args.model)
        report, session, _ = run(args.question, model=model, provider=provider, budget=args.budget)
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(report)
    print(f"<!-- {len(session.search_results)} topic(s), {len(session.reflections)} reflection(s), "
          f"{len(report.footnotes)} source(s) cited -->", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
