"""`compact_messages`: an agent's history, compacted to a budget and ready to send back.

    >>> short = compactor.compact_messages(history, budget=8000, keep_last=4)
    >>> client.chat.completions.create(model=..., messages=short, tools=[compactor.EXPAND_TOOL, ...])
    >>> compactor.expand(["<id>"], session=short)           # the originals of what was summarised

The result is a list of plain message dicts (a `CompactedMessages`, which is a `list`): the system
message(s) and the first request unchanged, one summary message with the 8 sections, and the last
turns unchanged. Every message of the history is written to the chunk store (memory by default, a
SQLite file with `store=`), so the ids the summary cites can be expanded back, by the agent too:
offer `EXPAND_TOOL` and answer its calls with `handle_expand_call`.
"""

from __future__ import annotations

import inspect
import json
import warnings
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from compactor.apps.common import (
    PipelineArg,
    check_overrides,
    in_worker,
    llm_mapping,
    pipeline_for,
    refuse_unknown,
)
from compactor.apps.pins import read_pins, with_pins
from compactor.apps.tools import EXPAND_TOOL_NAME
from compactor.document import Budget, Chunk, Context, Message, Source
from compactor.errors import BudgetError, ConfigError, InputError, Problem
from compactor.formats.clearing import clear_outputs, is_tiered, reduce_outputs, request_indices, stub_ref
from compactor.formats.compaction import MIN_SUMMARY_TOKENS, assemble
from compactor.formats.messages import (
    TOKENS_PER_REPLY,
    answers,
    as_mapping,
    conversation_source,
    message_chunks,
    message_costs,
    message_tokens,
    messages_tokens,
    parse_message,
    read_messages,
    to_dict,
)
from compactor.formats.providers import Wire, check_wire, to_chat, wire_of
from compactor.formats.system_prompt import system_records
from compactor.state import CompactionPlan, ConversationOptions, State
from compactor.store import Batch, ChunkStore, open_store
from compactor.text.tokens import TokenCounter, get_counter

DEFAULT_SESSION = "conversation"
SUMMARY_ROLES = ("user", "system", "assistant")


class CompactedMessages(list[dict[str, Any]]):
    """The compacted message list (a plain `list` of dicts, JSON-ready) with what it came from:
    `store` and `session` for `expand`, `report` (tokens, plan, quality), `summary` text."""

    store: ChunkStore
    session: str
    report: dict[str, Any]

    def __init__(self, messages: Iterable[dict[str, Any]], *, store: ChunkStore, session: str,
                 report: dict[str, Any]) -> None:
        super().__init__(messages)
        self.store = store
        self.session = session
        self.report = report

    @property
    def summary(self) -> str | None:
        """The summary message's text (None when the history already fitted)."""
        return self.report.get("summary")

    @property
    def dropped_ids(self) -> list[str]:
        """Chunk ids of the messages that were summarised rather than kept."""
        return list(self.report.get("dropped_ids", []))


#: The tiers of a compaction, cheapest first (`tiers=`): clear old tool outputs into stubs, reduce
#: structured outputs by their structure, summarise into the 8 sections.
TIERS: tuple[str, ...] = ("clear", "reduce", "summary")


def compact_messages(messages: Iterable[Any] | str | bytes, budget: int | None = None, *, keep_last: int = 4,
                     llm: Any = None, role: str | None = None, summary_role: str = "user",
                     store: str | ChunkStore | None = None, session: str | None = None,
                     pipeline: PipelineArg = "conversation", plugins: Iterable[Any] = (),
                     kind: str | None = None, query: str | None = None, focus: str | None = None,
                     keep_files: int = 0, compress_system: bool | None = None,
                     tiers: Sequence[str] = ("summary",), keep_tool_results: int = 3,
                     exclude_tools: Iterable[str] = (), clear_at_least: int = 0,
                     expand_tool: str | None = EXPAND_TOOL_NAME, pin: Any = (),
                     target_ratio: float | None = None, target_compression_ratio: float | None = None,
                     fit: int | None = None, restore: Mapping[str, Any] | None = None,
                     format: str | None = None, **unknown: Any) -> CompactedMessages:
    """Compact a message list to at most `budget` tokens (OpenAI's per-message accounting).

    `messages`: dicts in the OpenAI chat, legacy-function or content-block format, `Message`s, SDK
    message objects, or JSON text. `keep_last`: turns kept verbatim at the end (a tool call with its
    results is one turn), fewer when they do not fit. `llm`: None for rules only; True, a settings
    mapping (`{"model": ..., "base_url": ...}`) or `LLMSettings` for a guarded rewrite of the rule
    summary. `role`: write the handoff summary of that speaker. `kind`: "coding", "tool", "chat" or
    "meeting" forces the template (default: detected; the result's `report["kind"]` says which).
    `query` (or its older name `focus`): text whose matches rise in every section ("the refund for
    order 123"). `pipeline`/`plugins`: as every face takes them. `keep_files`:
    coding agents, keep the latest view of that many files worked on last verbatim.
    `compress_system`: when the system message(s) would take more than half the budget, send an
    excerpt of them instead, chosen for the history's opening request (stable across compactions;
    the original is stored for `expand`); None takes the excerpt only when the system message(s)
    leave no room for a summary (with a warning in the report); False never does.

    `tiers` (default: the summary alone; `AutoCompactor` and the integrations use all of `TIERS`),
    cheapest first, each tried only while the history is still over `fit` (default: the budget):
    "clear" turns tool outputs older than the last `keep_tool_results` (not those of
    `exclude_tools`) into one-line stubs naming the tool, the size and the id to expand, when that
    saves at least `clear_at_least` tokens; "reduce" shortens structured outputs (JSON, CSV, tables)
    by their structure; "summary" writes the 8 sections (to `budget`). `report["tiers"]` says which
    ran and what each saved. `expand_tool`: the name of the tool the caller offers for reading
    originals back (None: the summary only lists the ids). `pin`: messages (dicts), texts or file
    paths (`pathlib.Path`, read again at every compaction) that go out verbatim after the system
    message(s), counted in the budget. `target_ratio` (or its other name `target_compression_ratio`):
    the budget as a share of the history's tokens; the output fills 90-100% of it.

    `format`: "chat" (OpenAI Chat Completions), "anthropic" (a Messages API `messages` list; the
    system prompt is outside it) or "responses" (a Responses API `input` list); None detects it
    from the items (`compactor.formats.providers.wire_of`; plain `{"role", "content": str}` lists
    are "chat"). The result is in the same format: kept items as they were, the summary a user
    turn of that format, an Anthropic list still valid (first turn user, roles alternating), a
    Responses list with its provider compaction items and unknown items where they stood.
    """
    refuse_unknown("compact_messages", unknown, COMPACT_OPTIONS)
    if not (isinstance(messages, str | bytes) and format in (None, "chat")):
        items = _json_items(messages) if isinstance(messages, str | bytes) else list(messages)
        wire = wire_of(items) if format is None else check_wire(format)
        if wire != "chat":
            given = {key: value for key, value in locals().items() if key in COMPACT_OPTIONS}
            return _in_own_format(items, wire, given)
        messages = items
    ratio = _ratio(target_ratio, target_compression_ratio)
    if budget is None and ratio is None:
        raise InputError("give a budget (tokens) or a target_ratio (a share of the history's tokens)")
    if budget is not None and (not isinstance(budget, int) or isinstance(budget, bool) or budget <= 0):
        raise InputError(f"budget must be a positive number of tokens, not {budget!r}")
    if query is not None and focus is not None and query != focus:
        raise InputError("query and focus are the same option (focus is its older name): give one")
    focus = query if query is not None else focus
    chosen = _tiers(tiers)
    if not isinstance(keep_tool_results, int) or isinstance(keep_tool_results, bool) or keep_tool_results < 0:
        raise InputError(f"keep_tool_results must be 0 or more, not {keep_tool_results!r}")
    if not isinstance(clear_at_least, int) or isinstance(clear_at_least, bool) or clear_at_least < 0:
        raise InputError(f"clear_at_least must be 0 or more tokens, not {clear_at_least!r}")
    excluded = _names("exclude_tools", exclude_tools)
    runner = pipeline_for(pipeline, plugins)
    # what the history compressor's parameters take, checked by its schema before anything runs
    options: dict[str, Any] = {"keep_last": keep_last, "role": role, "summary_role": summary_role,
                               "llm": False, "keep_files": keep_files, "expand_tool": expand_tool}
    options.update((key, value) for key, value in (("kind", kind), ("focus", focus),
                                                   ("compress_system", compress_system)) if value is not None)
    check_overrides(runner, CompactionPlan, options)
    parsed = read_messages(messages)
    counter = runner.counter
    costs = message_costs(parsed, counter)  # each message counted once: every later count reuses them
    original_tokens = TOKENS_PER_REPLY + sum(costs)
    if ratio is not None:
        wanted = max(1, int(original_tokens * ratio))
        if budget is not None and budget != wanted:
            raise InputError(f"give a budget or a target_ratio, not both ({budget} tokens is not "
                             f"{ratio} of the history's {original_tokens})")
        budget = wanted
    assert budget is not None
    pins = read_pins(pin, parsed, counter)
    pin_tokens = sum(tokens for _, tokens, _ in pins)
    room = budget - pin_tokens
    if pins and room < TOKENS_PER_REPLY + MIN_SUMMARY_TOKENS + 8:
        names = ", ".join(label for _, _, label in pins)
        raise BudgetError(f"the pins take {pin_tokens} tokens of a budget of {budget}: nothing else fits "
                          f"({names}); pin less or raise the budget")
    target = open_store(store)
    session_id = session or DEFAULT_SESSION
    bound = max(1, (budget if fit is None else fit) - pin_tokens)
    tier_report: dict[str, dict[str, Any]] = {}
    items = list(messages) if not isinstance(messages, str | bytes) else [to_dict(m) for m in parsed]
    protect = request_indices(parsed)
    current, current_parsed, current_costs = items, parsed, costs
    stored: list[tuple[Source, Chunk]] = []
    replaced: dict[int, str] = {}
    # a history already within the budget is left as it is: the cheap tiers only shrink what must shrink
    cheap = ("clear", "reduce") if original_tokens > room else ()
    for name in cheap:
        if name not in chosen:
            continue
        if name == "clear":
            tiered = clear_outputs(current, current_parsed, counter, keep=keep_tool_results,
                                   exclude_tools=excluded, clear_at_least=clear_at_least,
                                   expand_tool=expand_tool, protect=protect, costs=current_costs)
        else:
            tiered = reduce_outputs(current, current_parsed, counter, expand_tool=expand_tool,
                                    protect=protect, costs=current_costs,
                                    references=[m.content for m in current_parsed if answers(m) is None])
        tier_report[name] = {"ran": tiered is not None, "saved": tiered.saved if tiered else 0, "used": False}
        if tiered is None:
            continue
        stored.extend(tiered.stored)
        replaced.update(tiered.replaced)
        current = tiered.messages
        current_parsed, current_costs = _retiered(current, current_parsed, current_costs, tiered.replaced,
                                                  counter)
        tokens = TOKENS_PER_REPLY + sum(current_costs)
        if tokens <= bound or "summary" not in chosen:
            for used in tier_report.values():
                used["used"] = bool(used["ran"])
            target.commit_batch(session_id, Batch(sources=[s for s, _ in stored],
                                                  chunks=[c for _, c in stored],
                                                  report={"kind": "tool-outputs"}))
            out = with_pins([to_dict(m) for m in current_parsed], pins)
            report = {"unchanged": False, "tiers": tier_report, "summary": None, "dropped_ids": [],
                      "original_tokens": original_tokens, "output_tokens": tokens + pin_tokens,
                      "tokens": tokens + pin_tokens, "kind": None, "pins": [label for _, _, label in pins],
                      "pin_texts": [m.get("content") for m, _, _ in pins],
                      "replaced": {str(i): ref for i, ref in replaced.items()}}
            if tokens > bound:
                report["warnings"] = [f"over the budget after the cheap tiers ({tokens} > {bound} tokens) "
                                      "and the summary tier is off"]
            return CompactedMessages(out, store=target, session=session_id, report=report)
    if "summary" not in chosen:
        out = with_pins([to_dict(m) for m in parsed], pins)
        return CompactedMessages(out, store=target, session=session_id, report={
            "unchanged": True, "tiers": tier_report, "summary": None, "dropped_ids": [],
            "original_tokens": original_tokens, "output_tokens": original_tokens + pin_tokens,
            "tokens": original_tokens + pin_tokens, "kind": None, "pins": [label for _, _, label in pins]})
    source_items = _restored(items, parsed, restore) if restore else items
    # the history as read and counted above, unless originals came back in place of stubs
    known = (parsed, costs) if source_items is items else None
    if ratio is not None:  # a share of the history: fill it, not only stay under it
        options["fill"] = True
    result = _summarise(source_items, room, runner, target, session_id, llm, options,
                        auto_system=compress_system is None
                        and any(m.role not in ("system", "developer") for m in parsed), known=known)
    saved = max(0, original_tokens - int(result.report["output_tokens"]))
    tier_report["summary"] = {"ran": True, "saved": saved, "used": True}
    result.report["tiers"] = tier_report
    result.report["pins"] = [label for _, _, label in pins]
    result.report["pin_texts"] = [m.get("content") for m, _, _ in pins]
    if ratio is not None:
        result.report["target_tokens"] = budget
    if pins:
        result[:] = with_pins(list(result), pins)
        result.report["output_tokens"] = int(result.report["output_tokens"]) + pin_tokens
        result.report["tokens"] = result.report["output_tokens"]
    return result


def _in_own_format(items: list[Any], wire: Wire, options: dict[str, Any]) -> CompactedMessages:
    """`compact_messages` on a provider's history: read into chat shape, compacted, written back in
    the history's own format."""
    counter = pipeline_for(options["pipeline"], options["plugins"]).counter
    translation = to_chat(items, wire, counter)
    if not translation.messages:
        raise InputError("the history has no message to compact (only items passed through as they are)")
    extra = translation.opaque_tokens
    budget, fit = options["budget"], options["fit"]
    if extra:  # the items passed through untouched take their share of the budget
        if budget is None:
            total = messages_tokens(read_messages(translation.messages), counter) + extra
            ratio = _ratio(options["target_ratio"], options["target_compression_ratio"])
            budget = max(1, int(total * (ratio or 1.0)))
            options.update(target_ratio=None, target_compression_ratio=None)
        options["budget"] = max(1, budget - extra)
        options["fit"] = None if fit is None else max(1, fit - extra)
    result = compact_messages(translation.messages, format="chat", **options)
    report = result.report
    out = translation.back(result, summary=report.get("summary"), added=report.get("pin_texts") or ())
    report["format"] = wire
    if extra:
        report["opaque_tokens"] = extra
        for key in ("output_tokens", "tokens", "original_tokens"):
            if isinstance(report.get(key), int):
                report[key] += extra
    return CompactedMessages(out, store=result.store, session=result.session, report=report)


#: The keywords `compact_messages` takes besides the history and the format.
COMPACT_OPTIONS: tuple[str, ...] = tuple(
    name for name in inspect.signature(compact_messages).parameters
    if name not in ("messages", "format", "unknown"))


async def acompact_messages(messages: Iterable[Any] | str | bytes, budget: int | None = None,
                            **options: Any) -> CompactedMessages:
    """`compact_messages` for async code: the same arguments and result, the work in a worker
    thread (an LLM rewrite too), so the event loop keeps serving other tasks meanwhile."""
    return await in_worker(compact_messages, messages, budget, **options)


def _json_items(text: str | bytes) -> list[Any]:
    """A JSON history as a list: a list, or the `messages` / `input` list of a request body."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise InputError(f"<messages>: invalid JSON: {exc}") from None
    if isinstance(data, Mapping):
        data = data.get("messages", data.get("input"))
    if not isinstance(data, list):
        raise InputError("<messages>: expected a JSON list of messages or a request body with one")
    return data


#: A history as `compact_messages` read it: the messages and what each costs (`message_costs`).
Known = tuple[Sequence[Message], Sequence[int]]


def _summarise(items: list[Any], budget: int, runner: Any, target: ChunkStore, session_id: str, llm: Any,
               options: dict[str, Any], *, auto_system: bool,
               known: Known | None = None) -> CompactedMessages:
    """The summary tier: the conversation pipeline at `budget`; when the system message(s) leave no
    room and `compress_system` was not decided by the caller, again with their excerpt. `known`:
    `items` already read and counted, so neither is done again."""
    try:
        return _run_summary(items, budget, runner, target, session_id, llm, options, known)
    except BudgetError as exc:
        if not auto_system:
            raise
        result = _run_summary(items, budget, runner, target, session_id, llm,
                              {**options, "compress_system": True}, known)
        note = (f"the system message(s) leave no room in {budget} tokens ({exc}); sent as an excerpt "
                "(compress_system), the original stored for expand")
        result.report.setdefault("warnings", []).append(note)
        warnings.warn(note, stacklevel=3)
        return result


def _run_summary(messages: list[Any], budget: int, runner: Any, target: ChunkStore, session_id: str,
                 llm: Any, options: dict[str, Any], known: Known | None = None) -> CompactedMessages:
    parsed, costs = known if known is not None else (read_messages(messages), None)
    source = conversation_source(parsed, costs=costs)  # counted: the pipeline does not count it again
    if not runner.spec.provides(CompactionPlan):
        raise ConfigError(Problem("compact_messages needs a pipeline with a history compressor (a step "
                                  "that provides CompactionPlan, such as compress.eight_segment)",
                                  runner.spec.file, field="steps"))
    llm_settings = llm_mapping(llm)
    options = {**options, "llm": llm_settings is not None}
    context = Context(sources=(source,), budget=Budget(max_tokens=budget),
                      state=State([ConversationOptions(options)]))
    result = runner.run(context, output_format="messages", store=target, session=session_id,
                        llm=llm_settings)
    found = result.state.get(CompactionPlan)
    plan = found.for_source(source.id) if found is not None else None
    if plan is None:
        raise InputError("the pipeline has no history compressor step (such as compress.eight_segment): "
                         "nothing compacted the history")
    summary_role = str(options["summary_role"])
    out = assemble(parsed, plan, plan.summary, summary_role)  # the input dicts, copied as they are
    counter = runner.counter
    dropped = set(plan.dropped)
    chunks = [c for c in result.chunks if c.source_id == source.id]
    if [c.units for c in chunks] != [(i, i + 1) for i in range(len(parsed))]:  # not chunk.messages' work
        chunks = message_chunks(source, counter)
    dropped_chunks = [c for c in chunks if c.index in dropped]
    originals = system_records(parsed, plan, counter)  # system messages sent as an excerpt
    if dropped_chunks or originals:  # only what left the window: each message is stored once
        target.commit_batch(session_id, Batch(
            sources=(source, *(s for s, _ in originals)),
            chunks=[*dropped_chunks, *(c for _, c in originals)],
            report={"kind": "conversation", "tokens": plan.tokens}))
    report = {**plan.to_dict(), "source_id": source.id, "dropped_ids": [c.id for c in dropped_chunks],
              "output_tokens": plan.tokens,
              "steps": [{"step": r.step, "tokens_in": r.tokens_in, "tokens_out": r.tokens_out,
                         "seconds": round(r.seconds, 6), "details": dict(r.details),
                         "warnings": list(r.warnings)} for r in result.reports]}
    return CompactedMessages(out, store=target, session=session_id, report=report)


def _ratio(target_ratio: float | None, alias: float | None) -> float | None:
    if target_ratio is not None and alias is not None and target_ratio != alias:
        raise InputError("target_ratio and target_compression_ratio are the same option: give one")
    value = target_ratio if target_ratio is not None else alias
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 1:
        raise InputError(f"target_ratio must be a share in (0, 1], not {value!r}")
    return float(value)


def _tiers(tiers: Any) -> tuple[str, ...]:
    if isinstance(tiers, str):
        tiers = [tiers]
    found = tuple(dict.fromkeys(str(t) for t in tiers))
    unknown = [t for t in found if t not in TIERS]
    if unknown or not isinstance(tiers, Iterable):
        raise InputError(f"tiers are some of {', '.join(TIERS)}, not {', '.join(unknown)}")
    return found


def _names(field: str, values: Any) -> tuple[str, ...]:
    if isinstance(values, str):
        values = [values]
    if not all(isinstance(v, str) for v in values):
        raise InputError(f"{field} must be tool names")
    return tuple(values)


def _retiered(items: Sequence[Any], parsed: Sequence[Message], costs: Sequence[int], replaced: Iterable[int],
              counter: TokenCounter) -> tuple[list[Message], list[int]]:
    """The messages and costs of a history after a cheap tier replaced the messages at `replaced`
    (`items` the new list): only those are read and counted again."""
    new_parsed, new_costs = list(parsed), list(costs)
    for i in replaced:
        where = f"<messages>: message {i}"
        new_parsed[i] = parse_message(as_mapping(items[i], where), where)
        new_costs[i] = message_tokens(new_parsed[i], counter)
    return new_parsed, new_costs


def _restored(items: list[Any], parsed: Sequence[Message], originals: Mapping[str, Any]) -> list[Any]:
    """The history with the stubs and reductions of earlier tiers back in their original form, so a
    summary reads what the tools returned."""
    out = list(items)
    for i, message in enumerate(parsed):
        if is_tiered(message):
            ref = stub_ref(message.content)
            if ref is not None and ref in originals:
                out[i] = originals[ref]
    return out


def count_message_tokens(messages: Iterable[Any], encoding: str = "cl100k_base") -> int:
    """What a message list costs in a chat request (OpenAI's per-message accounting)."""
    return messages_tokens(read_messages(list(messages)), get_counter(encoding))
