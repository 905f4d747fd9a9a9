"""LangGraph nodes for a report graph that routes by token count and map-reduces what is too long.

    >>> from compactor.integrations.langgraph import (create_summarizer_node,
    ...     create_tokens_evaluator_node, route_by_tokens)
    >>> graph = StateGraph(State)
    >>> graph.add_node("tokens_evaluator", create_tokens_evaluator_node("observations"))
    >>> graph.add_node("summarizer", create_summarizer_node("observations", "summarized_observations",
    ...                                                     "research_topic", model=chat_model))
    >>> graph.add_conditional_edges("tokens_evaluator", route_by_tokens,
    ...                             {"compress_first": "summarizer", "direct_to_reporter": "reporter"})

The evaluator writes `compression_decision` ("direct_to_reporter" up to `max_tokens x
safety_margin`, 45000 x 0.8 = 36000 tokens by default, else "compress_first"),
`estimated_tokens`, `decision_reason` and the `data_source_note` for a report written from the full
observations. The summarizer is a compiled subgraph: it cuts the observations into 8000-token
windows (overlap 400), maps each one to the chat model through the Send API (the map prompt asks
for the facts that serve the context, the research task), merges the replies with one reduce call
and, when the merged text is still over `max_tokens // 2`, condenses it once more. Every reply
passes compactor's LLM guard (`compactor.llm.guard`): a refusal, an instruction, an invented
number or name, a reply over its allowance or one keeping too little of its input is refused; a
refused map reply is replaced by that window's rule extract (its most relevant sentences), so one
bad reply costs one window, not the run. The summarizer writes `output_key`, the
`data_source_note` for a summarized report and `summarizer_report` (what each stage used).

Needs the extra: `pip install "compactor[langchain]"` (LangGraph comes with LangChain).
"""

from __future__ import annotations

import logging
import operator
from collections.abc import Callable, Mapping, Sequence
from typing import Annotated, Any, Literal, TypeAlias, TypedDict

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage, HumanMessage
from langgraph.graph import END, START, StateGraph
from langgraph.types import Send

from compactor.formats.routing import COMPRESS, DIRECT, data_source_note
from compactor.llm import guard
from compactor.llm.templates import fill, template_for
from compactor.text.extracts import rule_extract
from compactor.text.language import is_chinese
from compactor.text.spans import token_windows
from compactor.text.tokens import TokenCounter, get_counter

log = logging.getLogger(__name__)

#: The report graph's state keys the nodes write besides the caller's own keys.
DECISION_KEYS = ("compression_decision", "estimated_tokens", "decision_reason", "data_source_note")
REPORT_KEY = "summarizer_report"
_MAPS = "compactor_map_results"
#: What the factories return: a node `StateGraph.add_node` takes (a function, or a compiled subgraph).
#: LangGraph's own node protocols bind the caller's state type, which a factory cannot know.
Node: TypeAlias = Any  # the subgraph's private channel, gathered from the Send branches


def _text(value: Any) -> str:
    """Observations as one text: a string as is, a list of strings (or messages) joined by blank lines."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, BaseMessage):
        return str(value.text)
    if isinstance(value, Sequence):
        return "\n\n".join(_text(v) for v in value if v)
    return str(value)


def _lang(text: str) -> str:
    return "zh" if is_chinese(text[:4000]) else "en"


def create_tokens_evaluator_node(
        input_key: str = "observations", *, max_tokens: int = 45000, safety_margin: float = 0.8,
        count_tokens: Callable[[str], int] | None = None) -> Node:
    """A node that counts the tokens of `state[input_key]` and decides the route: up to
    `max_tokens x safety_margin` straight to the reporter, above it through the summarizer.
    `count_tokens` defaults to compactor's offline cl100k counter; pass a chat model's
    `get_num_tokens` to count as that model does."""
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be at least 1, got {max_tokens!r}")
    if not 0 < safety_margin <= 1:
        raise ValueError(f"safety_margin must be in (0, 1], got {safety_margin!r}")
    threshold = int(max_tokens * safety_margin)
    count = count_tokens or get_counter().count

    def tokens_evaluator(state: Mapping[str, Any]) -> dict[str, Any]:
        text = _text(state.get(input_key))
        estimated = int(count(text))
        if estimated <= threshold:
            return {"compression_decision": DIRECT, "estimated_tokens": estimated,
                    "decision_reason": f"{estimated} tokens <= {threshold} ({max_tokens} x {safety_margin})",
                    "data_source_note": data_source_note(False, _lang(text))}
        return {"compression_decision": COMPRESS, "estimated_tokens": estimated,
                "decision_reason": f"{estimated} tokens > {threshold} ({max_tokens} x {safety_margin})"}

    return tokens_evaluator


def route_by_tokens(state: Mapping[str, Any]) -> Literal["compress_first", "direct_to_reporter"]:
    """The conditional edge after the evaluator: its `compression_decision`."""
    return COMPRESS if state.get("compression_decision") == COMPRESS else DIRECT


def report_source(state: Mapping[str, Any], input_key: str = "observations",
                  summary_key: str = "summarized_observations") -> tuple[str, str]:
    """What a reporter writes from, and the note it adds: the summarized observations when the
    summarizer ran, else the full observations."""
    summary = state.get(summary_key) or ""
    if summary:
        return summary, state.get("data_source_note") or data_source_note(True, _lang(summary))
    text = _text(state.get(input_key))
    return text, data_source_note(False, _lang(text))


def _reply_text(message: Any) -> str:
    return str(message.text) if isinstance(message, BaseMessage) else str(message)


class _Guarded:
    """One chat-model call whose reply is used only when the guard accepts it."""

    def __init__(self, model: BaseChatModel, counter: TokenCounter, min_coverage: float) -> None:
        self.model = model
        self.counter = counter
        self.min_coverage = min_coverage

    def __call__(self, prompt: str, source: str, allowance: int, query: str | None) -> tuple[str | None, str]:
        """(the accepted reply or None, why it was refused)."""
        try:
            reply = _reply_text(self.model.invoke([HumanMessage(content=prompt)]))
        except Exception as exc:  # any failure of the model costs this call only
            return None, f"model error: {exc}"
        verdict = guard.review(reply, source, max_tokens=allowance, counter=self.counter, query=query,
                               min_coverage=self.min_coverage)
        return (reply.strip(), "") if verdict.accepted else (None, "; ".join(verdict.problems))


def create_summarizer_node(
        input_key: str = "observations", output_key: str = "summarized_observations",
        context_key: str = "research_topic", *, model: BaseChatModel, max_tokens: int = 45000,
        safety_margin: float = 0.8, chunk_size: int = 8000, chunk_overlap: int = 400,
        second_pass: bool = True, min_coverage: float = guard.DEFAULT_MIN_COVERAGE,
        map_prompt: str | None = None, reduce_prompt: str | None = None) -> Node:
    """A LangGraph node (a compiled subgraph) that map-reduces `state[input_key]` (a text or a list
    of texts) into `state[output_key]`, guided by `state[context_key]` (the research task).

    Map: one guarded call per `chunk_size`-token window (`chunk_overlap` shared), sent in parallel
    through the Send API, each allowed an equal share of the target (at least 200 tokens); a refused
    reply is replaced by the window's rule extract. Reduce: one guarded call merges the mix within
    the routing threshold (`max_tokens x safety_margin`); refused, the mix itself stands when it fits.
    Second pass: when the reduced text is over the target (`max_tokens // 2`), one more guarded call
    condenses it to the target; refused, the reduced text stays. Prompt files (`map_prompt`,
    `reduce_prompt`) replace the shipped ones (placeholders `{query}`, `{budget}`, `{content}`)."""
    if not 0 <= min_coverage <= 1:
        raise ValueError(f"min_coverage must be in [0, 1], got {min_coverage!r}")
    if chunk_size < 8 or not 0 <= chunk_overlap < chunk_size:
        raise ValueError(f"chunk_overlap must be in [0, chunk_size) and chunk_size at least 8, "
                         f"got chunk_size={chunk_size!r}, chunk_overlap={chunk_overlap!r}")
    if max_tokens < 1 or not 0 < safety_margin <= 1:
        raise ValueError(f"max_tokens must be at least 1 and safety_margin in (0, 1], "
                         f"got {max_tokens!r}, {safety_margin!r}")
    threshold = int(max_tokens * safety_margin)
    target = min(max_tokens // 2, threshold)
    counter = get_counter()
    call = _Guarded(model, counter, min_coverage)

    # the caller names the keys, so the schemas are made here (TypedDict's functional form)
    typed_dict: Any = TypedDict
    state_schema = typed_dict("SummarizerState", {
        input_key: Any, output_key: str, context_key: Any, "data_source_note": str,
        REPORT_KEY: dict, _MAPS: Annotated[list, operator.add]})
    input_schema = typed_dict("SummarizerInput", {input_key: Any, context_key: Any})
    output_schema = typed_dict("SummarizerOutput",
                               {output_key: str, "data_source_note": str, REPORT_KEY: dict})

    def _windows(state: Mapping[str, Any]) -> list[str]:
        text = _text(state.get(input_key))
        return [text[s:e] for s, e, _ in token_windows(text, counter, chunk_size, chunk_overlap)
                if text[s:e].strip()]

    def fan_out(state: Mapping[str, Any]) -> list[Send] | str:
        windows = _windows(state)
        if not windows:
            return "reduce"
        query = _text(state.get(context_key)) or None
        lang = _lang("\n".join(windows[:3]))
        allowance = max(200, target // len(windows))
        return [Send("map_chunk", {"index": i, "text": w, "query": query, "lang": lang,
                                   "allowance": allowance}) for i, w in enumerate(windows)]

    def map_chunk(job: dict[str, Any]) -> dict[str, Any]:
        template = template_for(map_prompt, "map", job["lang"])
        prompt = fill(template, query=job["query"] or "", budget=str(job["allowance"]), content=job["text"])
        reply, why = call(prompt, job["text"], job["allowance"], job["query"])
        if reply is None:
            log.warning("compactor: map %d refused, rule extract used: %s", job["index"], why[:200])
            reply = rule_extract(job["text"], job["query"], job["allowance"], counter)
        return {_MAPS: [{"index": job["index"], "text": reply, "llm": not why, "why": why}]}

    def reduce(state: Mapping[str, Any]) -> dict[str, Any]:
        windows = _windows(state)
        source = "\n".join(windows)
        query = _text(state.get(context_key)) or None
        lang = _lang(source)
        maps = sorted(state.get(_MAPS) or [], key=lambda m: m["index"])
        refused = [m for m in maps if not m["llm"]]
        report: dict[str, Any] = {"map_chunks": len(maps), "map_accepted": len(maps) - len(refused),
                                  "map_refused": [m["index"] for m in refused],
                                  "map_refusals": [f"map {m['index']}: {m['why']}" for m in refused],
                                  "reduce": "skipped", "second_pass": "skipped", "llm_used": False}
        mix = "\n\n".join(m["text"] for m in maps if m["text"].strip())
        text = mix
        if report["map_accepted"]:
            template = template_for(reduce_prompt, "reduce", lang)
            reduced, why = call(fill(template, query=query or "", budget=str(threshold), content=mix),
                                source, threshold, query)
            report["reduce"] = "accepted" if reduced is not None else f"refused: {why}"
            text = reduced if reduced is not None else mix
            report["llm_used"] = True
            if reduced is None and counter.count(mix) > threshold:
                text = rule_extract(source, query, target, counter)
                report["llm_used"] = False
            report["tokens_after_reduce"] = counter.count(text)
            if second_pass and report["llm_used"] and report["tokens_after_reduce"] > target:
                condensed, why = call(fill(template, query=query or "", budget=str(target), content=text),
                                      source, target, query)
                report["second_pass"] = "accepted" if condensed is not None else f"refused: {why}"
                text = condensed if condensed is not None else text
        if counter.count(text) > threshold:  # rule extracts alone, too many to pass on whole
            text = rule_extract(source, query, target, counter)
        report["tokens"] = counter.count(text)
        return {output_key: text, "data_source_note": data_source_note(True, lang), REPORT_KEY: report}

    graph: Any = StateGraph(state_schema, input_schema=input_schema, output_schema=output_schema)
    graph.add_node("map_chunk", map_chunk)
    graph.add_node("reduce", reduce)
    graph.add_conditional_edges(START, fan_out, ["map_chunk", "reduce"])
    graph.add_edge("map_chunk", "reduce")
    graph.add_edge("reduce", END)
    return graph.compile(name="summarizer")
