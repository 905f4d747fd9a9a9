"""A report graph that routes by token count (LangGraph).

    ResearchTeam -> TokensEvaluator --(<= 36000 tokens)--------------------------> Reporter
                                    --(>  36000 tokens)--> Summarizer ----------> Reporter
                                                           (map per 8000-token window through
                                                            the Send API, reduce, second pass)

    python examples/report_graph.py                            # built-in observations, offline
    python examples/report_graph.py notes/*.txt --topic "..."  # your observations, one per file
    python examples/report_graph.py --model openai:gpt-4o-mini # a real model (langchain-openai)

Offline, the model is an extractive stand-in: it answers each prompt with the leading sentences of
the text the prompt hands over, within the tokens the prompt asks for. Every reply still goes
through compactor's guard, as a real model's would.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Any, TypedDict

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langgraph.graph import END, START, StateGraph
from typing_extensions import NotRequired  # in typing from Python 3.11

from compactor.integrations.langgraph import (
    create_summarizer_node,
    create_tokens_evaluator_node,
    report_source,
    route_by_tokens,
)
from compactor.text.sentences import split_sentences
from compactor.text.tokens import get_counter

TOPIC = "How did handheld console prices change between 1990 and 2024?"
REPORT_PROMPT = ("Research task: '{topic}'\nWrite a report for this task from the material below, "
                 "in at most 1500 tokens.\nMaterial:\n{content}")


class ReportState(TypedDict):
    research_topic: str
    observations: list[str]
    compression_decision: NotRequired[str]
    estimated_tokens: NotRequired[int]
    decision_reason: NotRequired[str]
    summarized_observations: NotRequired[str]
    data_source_note: NotRequired[str]
    summarizer_report: NotRequired[dict[str, Any]]
    final_report: NotRequired[str]


class ExtractiveModel(BaseChatModel):
    """A stand-in chat model: the leading sentences of what the prompt hands over, within its budget."""

    @property
    def _llm_type(self) -> str:
        return "extractive-stand-in"

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                  run_manager: Any = None, **kwargs: Any) -> ChatResult:
        prompt = str(messages[-1].text)
        asked = re.search(r"at most (\d+) tokens|不超过 ?(\d+) ?个 ?token", prompt)
        budget = int(next(g for g in asked.groups() if g)) if asked else 1500
        text = re.split(r"Text: '|Extracts:\n|Material:\n|文本：'|要点：\n", prompt, maxsplit=1)[-1]
        counter, kept, used = get_counter(), [], 0
        for start, end in split_sentences(text.rstrip("'\n")):
            sentence = text[start:end].strip()
            cost = counter.count(sentence) + 1
            if not sentence or used + cost > budget:
                break
            kept.append(sentence)
            used += cost
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content=" ".join(kept)))])


def build_graph(model: BaseChatModel, *, max_tokens: int = 45000) -> Any:
    """TokensEvaluator -> (Summarizer ->) Reporter."""

    def reporter(state: ReportState) -> dict[str, Any]:
        content, note = report_source(state)
        prompt = REPORT_PROMPT.format(topic=state["research_topic"], content=content)
        report = str(model.invoke(prompt).text)
        return {"final_report": f"{report}\n\n{note}", "data_source_note": note}

    graph = StateGraph(ReportState)
    graph.add_node("tokens_evaluator", create_tokens_evaluator_node("observations", max_tokens=max_tokens))
    graph.add_node("summarizer", create_summarizer_node(
        "observations", "summarized_observations", "research_topic", model=model, max_tokens=max_tokens))
    graph.add_node("reporter", reporter)
    graph.add_edge(START, "tokens_evaluator")
    graph.add_conditional_edges("tokens_evaluator", route_by_tokens,
                                {"compress_first": "summarizer", "direct_to_reporter": "reporter"})
    graph.add_edge("summarizer", "reporter")
    graph.add_edge("reporter", END)
    return graph.compile()


def sample_observations(n: int = 700) -> list[str]:
    """Research notes on console prices, distinct and numerous enough to pass 36000 tokens."""
    makers = ["Nintendo", "Sega", "Sony", "Atari", "NEC", "Bandai"]
    return [f"Observation {i}: a {makers[i % 6]} handheld console sold for {99 + i % 151} dollars at "
            f"store {i} in {1990 + i % 35}, according to retailer report R-{i:05d}. The price of the "
            f"console included {1 + i % 3} games, and the shop noted demand rising {i % 17} percent "
            f"over the previous year." for i in range(n)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", type=Path, help="observation files (default: built-in notes)")
    parser.add_argument("--topic", default=TOPIC, help="the research task")
    parser.add_argument("--max-tokens", type=int, default=45000, help="route threshold before x 0.8")
    parser.add_argument("--model", help="provider:model for init_chat_model (default: offline stand-in)")
    args = parser.parse_args(argv)
    if args.model:
        from langchain.chat_models import init_chat_model
        model: BaseChatModel = init_chat_model(args.model, temperature=0.3, max_tokens=1500)
    else:
        model = ExtractiveModel()
    observations = [p.read_text(encoding="utf-8") for p in args.files] or sample_observations()
    state = build_graph(model, max_tokens=args.max_tokens).invoke(
        {"research_topic": args.topic, "observations": observations})
    print(f"route: {state['compression_decision']} ({state['decision_reason']})")
    if "summarizer_report" in state:
        r = state["summarizer_report"]
        print(f"summarizer: {r['map_accepted']} of {r['map_chunks']} map replies accepted, rule extracts "
              f"for windows {r['map_refused']}; reduce {r['reduce'].split(':')[0]}; "
              f"second pass {r['second_pass'].split(':')[0]}")
        print(f"summarized_observations: {r['tokens']} tokens")
    print("---")
    print(state["final_report"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
