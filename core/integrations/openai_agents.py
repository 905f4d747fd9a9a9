"""OpenAI Agents SDK: a session that keeps every item and hands the runner a compacted history.

    >>> from agents import Agent, Runner
    >>> from compactor.integrations.openai_agents import CompactorSession
    >>> session = CompactorSession("user-42", window=128_000, reserve=16_000,
    ...                            items="agent.db", store="compactor.db")
    >>> agent = session.bind(Agent(name="support", tools=[get_order, session.expand_tool()]))
    >>> await Runner.run(agent, "Refund order #W1003", session=session)   # every request under the trigger

`CompactorSession` implements the SDK's `Session` protocol. Every item the runner adds is stored as
it came, in an SDK session (`items=`: the SDK's own `SQLiteSession` by default, a file path for
one, or any other `Session` such as a Redis or SQLAlchemy one), so `add_items`, `pop_item`,
`clear_session` and `get_items(limit)` behave exactly as the SDK documents them: a limited read
returns the latest stored items, which is what the runner's own rewind and retry checks compare.

`get_items()` (no limit, what the runner reads before each run) returns the history compacted under
the budget by an `AutoCompactor` (`window`, `reserve`/`trigger`, `target`, `tools_tokens` ...):
the Responses items become chat messages (a `function_call` with its `function_call_output`
becomes an assistant `tool_calls` message and its `tool` message), are compacted, and come back as
the original items of the kept messages (reasoning items, ids and all) plus one message item with
the summary. A call and its output are one turn, kept or summarised together, so the result never
holds an output without its call. With cheap tiers (`tiers=compactor.TIERS`), old tool outputs
cleared into stubs or reduced come back as copies of their items carrying the compacted text (the
stub names the id that reads the original back); pins (`pin=`) as message items after any system
message, once each. The compacted view is a checkpoint in the compactor store
(`store=`: a SQLite path, a `ChunkStore`, or memory), so the next compaction summarises the earlier
summary with the new items, and every id any summary cited stays expandable: `expand_tool()` is the
`expand_context` function tool for the agent, bound to that store.

`session.bind(agent)` makes a plain `Runner.run(agent, input, session=session)` hold the budget
before every model call of a run too: the agent's hooks compact the request's input in place,
counting the instructions and the tool, handoff and output schemas measured from the agent (the
session alone never sees them). `run_config=session.run_config()` does the same for an unbound agent.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, cast

try:
    from agents import (
        Agent,
        AgentHooks,
        AgentOutputSchema,
        AgentOutputSchemaBase,
        FunctionTool,
        Handoff,
        RunConfig,
        RunContextWrapper,
        Tool,
        function_tool,
        handoff,
    )
    from agents.items import ModelResponse, TResponseInputItem
    from agents.memory import Session, SessionSettings, SQLiteSession
    from agents.models.chatcmpl_converter import Converter
    from agents.run_config import CallModelData, ModelInputData
except ImportError as exc:  # the extra is optional
    raise ImportError("compactor.integrations.openai_agents needs the OpenAI Agents SDK: "
                      "pip install 'compactor[agents]'") from exc

from compactor.apps.auto import AUTO_KEYWORDS, AutoCompactor, AutoCounters
from compactor.apps.common import refuse_unknown
from compactor.apps.conversation import CompactedMessages
from compactor.apps.pins import pin_slots
from compactor.apps.tools import EXPAND_TOOL, EXPAND_TOOL_NAME, handle_expand_call
from compactor.errors import CompactorError
from compactor.formats.clearing import REDUCED_MARK, STUB_MARK
from compactor.formats.compaction import same_turn
from compactor.store import Batch, ChunkStore

#: Responses item types that call a tool, answered by an item of the paired type with the same call id.
CALL_OUTPUTS = {"function_call": "function_call_output", "custom_tool_call": "custom_tool_call_output",
                "shell_call": "shell_call_output", "apply_patch_call": "apply_patch_call_output",
                "computer_call": "computer_call_output", "local_shell_call": "local_shell_call_output",
                "tool_search_call": "tool_search_output", "program": "program_output"}
OUTPUT_TYPES = frozenset(CALL_OUTPUTS.values())
#: Output item types whose `output` is text (or text parts): a cleared or reduced output is sent as
#: the compacted text. Others (a screenshot, shell chunks, tool lists) are sent as they came.
TEXT_OUTPUTS = frozenset({"function_call_output", "custom_tool_call_output", "local_shell_call_output",
                          "apply_patch_call_output"})
#: Knowledge key of the compacted view in the compactor store.
CHECKPOINT_KEY = "openai_agents_view"
_META = ("type", "id", "status", "call_id", "name", "arguments", "provider_data")
_TIER_MARKS = (STUB_MARK, REDUCED_MARK)
_SUMMARY, _PIN = "summary", "pin"  # what a message of a compaction stands for, when not a kept message
#: The keywords a `CompactorSession` takes: its own, and an `AutoCompactor`'s (with those it
#: passes on to `compact_messages`) but the store session, which the session id names.
SESSION_KEYWORDS = (AUTO_KEYWORDS - {"session"}) | {"items", "session_settings"}


class CompactorSession(AutoCounters):
    """An Agents SDK session whose `get_items()` is the stored history compacted under a budget.

    `session_id`: the SDK's session id (also names the compactor store's session). `items`: where
    items are stored: None (an in-memory `SQLiteSession`), a path (a `SQLiteSession` file), or any
    SDK `Session`. `store`: the compactor chunk store for summarised originals and the compacted
    view (None: memory; a path: a SQLite file). `window`, `reserve`, `trigger`, `target`,
    `tools_tokens`, `keep_last` and every other keyword go to `AutoCompactor` (an unknown one is
    an `InputError` naming the closest). The agent's instructions and tool schemas are sent
    outside the session: `bind(agent)` measures them from the agent (`tools_tokens` is then a
    floor for the schemas). `tiers=compactor.TIERS` clears and reduces old tool outputs before any summary
    (the sent items carry the stubs; the stored ones stay whole); `stats()["tiers"]` says which
    tiers the last compaction used. The budget holds at the start of each run; with `bind(agent)`
    before every model call of a plain `Runner.run` too; for an unbound agent, to hold it before
    every model call of a run too (a run of many tool calls), run with
    `run_config=session.run_config()` (its `call_model_input_filter` is `input_filter`). A
    `session_settings` with a `limit` makes the runner read `get_items(limit)`, the latest stored
    items uncompacted.
    """

    def __init__(self, session_id: str, *, window: int, items: Session | str | Path | None = None,
                 store: str | ChunkStore | None = None,
                 session_settings: SessionSettings | None = None, **options: Any) -> None:
        refuse_unknown("CompactorSession", {k: v for k, v in options.items() if k not in SESSION_KEYWORDS},
                       sorted(SESSION_KEYWORDS | {"session_id"}))
        self.session_id = session_id
        self.session_settings = session_settings
        if items is None or isinstance(items, str | Path):
            items = SQLiteSession(session_id, ":memory:" if items is None else items)
        self.items: Session = items
        # the session keeps its own compacted view (and maps results back to items): no memo here
        self.auto = AutoCompactor(window, store=store, session=f"openai-agents:{session_id}",
                                  **{"remember": False, **options})
        self._lock = threading.Lock()  # one compaction at a time (runs in a worker thread)
        self._run_view: dict[str, Any] | None = None  # `input_filter`'s compaction within a run
        self._pins: list[dict[str, Any]] = []  # the pin items the latest view carries
        #: Per bound agent: what its requests spend outside the items beyond `tools_tokens`.
        self.overheads: dict[str, int] = {}

    def __repr__(self) -> str:
        return f"CompactorSession({self.session_id!r}, {self.auto!r})"

    @property
    def store(self) -> ChunkStore:
        """The compactor store holding the originals the summaries cite."""
        return self.auto.store

    def stats(self) -> dict[str, Any]:
        """The `AutoCompactor` counters, how many items the compacted view stands for, and which
        tiers the last compaction in this process used (`tiers`: "clear", "reduce", "summary"),
        since a cheap tier's compaction has no summary to show for it."""
        view = self._checkpoint()
        return {**super().stats(), "session_id": self.session_id,
                "covered_items": 0 if view is None else view["covered"]}

    # -- the Session protocol -------------------------------------------------------------------

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """With `limit`: the latest `limit` stored items, as stored (the SDK's contract, which its
        rewind checks rely on). Without: the whole history, compacted when it passes the trigger."""
        raw = await self.items.get_items(limit)
        if limit is not None:
            return raw
        items = await asyncio.to_thread(self._compacted, [_as_dict(i) for i in raw])
        return cast(list[TResponseInputItem], items)

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Store new items as they are (compaction happens when the history is read)."""
        await self.items.add_items(items)

    async def pop_item(self) -> TResponseInputItem | None:
        """Remove and return the latest stored item (None when empty). A compacted view that
        covered it is dropped at the next read, which compacts the remaining items afresh."""
        return await self.items.pop_item()

    async def clear_session(self) -> None:
        """Forget every item and the compacted view (the store keeps the originals summaries cited)."""
        await self.items.clear_session()
        await asyncio.to_thread(self._save, None)
        self._pins = []

    # -- the expand tool -------------------------------------------------------------------------

    def expand_tool(self) -> FunctionTool:
        """The `expand_context` function tool, reading originals from this session's store."""
        return expand_context_tool(self.store)

    def expand(self, ids: Sequence[str]) -> dict[str, str]:
        """The original text of ids a summary cited."""
        return self.auto.expand(ids)

    # -- compaction ------------------------------------------------------------------------------

    def _compacted(self, raw: list[dict[str, Any]]) -> list[dict[str, Any]]:
        # the agent that reads them is not known here: the largest overhead of the bound ones
        extra = max(self.overheads.values(), default=0)
        with self._lock:
            out, view = self._compact_view(raw, self._checkpoint(), extra_tokens=extra)
            if view is not None:
                self._save(view)
            return out

    def _compact_view(self, raw: list[dict[str, Any]], view: dict[str, Any] | None, *, extra_tokens: int = 0,
                      ) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
        """`raw` as sent: the items of `view` (an earlier compaction of a prefix of `raw`) plus the
        rest, compacted when past the trigger; and the new view when it compacted, else None.
        `extra_tokens`: this request's overhead beyond `tools_tokens` (`AutoCompactor.compact`'s)."""
        if view is not None and not _covers(view, raw):
            view = None  # items were popped or replaced under it: start from the items given
        covered = 0 if view is None else view["covered"]
        current = [*(view["items"] if view is not None else ()), *raw[covered:]]
        if not current:
            return [], None
        if view is not None:  # a view read back from the store: its pins are known from now on
            self._pins.extend(p for p in _pins_of(view) if p not in self._pins)
        # measured with the pins a view carries (they are sent), compacted without them: the
        # compaction puts the pins in again as they read now, and the indices of its report must be
        # those of the message list it was given (`AutoCompactor.maybe_compact` would measure
        # without the pins, and `compact` would drop them from the list itself)
        before = self.auto.tokens(to_messages(current)[0], extra_tokens=extra_tokens)
        self.auto.checks += 1
        if before <= self.auto.trigger_tokens:
            return drop_orphan_outputs(current), None
        history = _without_pins(current, self._pins)
        messages, owners = to_messages(history)
        compacted = self.auto.compact(messages, tokens_before=before, extra_tokens=extra_tokens)
        out, pins = _from_compaction(history, owners, compacted)
        self._pins = pins
        return out, {"covered": len(raw), "digest": _digest(raw), "items": out, "pins": pins}

    # -- within a run ------------------------------------------------------------------------------

    def input_filter(self, data: CallModelData[Any]) -> ModelInputData:
        """A `RunConfig.call_model_input_filter`: compacts before every model call of a run, not only
        when the run starts (a run of many tool calls grows its input past the trigger). The
        agent's instructions and tool schemas (those beyond `tools_tokens`) are counted against
        the trigger, for this call only (`extra_tokens`: runs of agents with other instructions
        may share the session's compactor meanwhile). Kept items are the run's own objects; the
        run's view is kept in this process until the next run reads the session."""
        given = data.model_data
        schemas = static_schemas(data.agent) if isinstance(data.agent, Agent) else []
        extra = self._extra(given.instructions, schemas)
        out = self._within_run([_as_dict(i) for i in given.input], extra)
        return ModelInputData(input=cast(list[TResponseInputItem], out), instructions=given.instructions)

    def _extra(self, instructions: str | None, schemas: Sequence[dict[str, Any]]) -> int:
        """What a request spends outside its items beyond `tools_tokens`: the instructions (sent
        as a system message) and the schemas' tokens past `tools_tokens`."""
        counter = self.auto.counter
        extra = counter.count(instructions) + 4 if instructions else 0
        measured = counter.count(json.dumps(list(schemas), ensure_ascii=False, default=str)) if schemas else 0
        return extra + max(0, measured - self.auto.tools_tokens)

    def _within_run(self, raw: list[dict[str, Any]], extra: int) -> list[dict[str, Any]]:
        with self._lock:
            out, view = self._compact_view(raw, self._run_view, extra_tokens=extra)
            if view is not None:
                self._run_view = view
        return out

    # -- a plain Runner.run ---------------------------------------------------------------------

    def bind(self, *agents: Agent[Any]) -> Agent[Any]:
        """Make a plain `Runner.run(agent, input, session=session)` hold the budget before every
        model call: each agent's hooks (its own kept, called after) compact the model's input in
        place, measuring the instructions and the tool, handoff and output schemas the request
        really carries; `get_items` counts the largest of the bound agents' overheads. Returns
        the first agent (bind every agent a run can hand off to)."""
        if not agents:
            raise TypeError("bind needs at least one agent")
        for agent in agents:
            if not isinstance(agent.hooks, CompactingHooks) or agent.hooks.session is not self:
                agent.hooks = CompactingHooks(self, agent.hooks)
            instructions = agent.instructions if isinstance(agent.instructions, str) else None
            self.overheads[agent.name] = self._extra(instructions, static_schemas(agent))
        return agents[0]

    async def _before_call(self, context: RunContextWrapper[Any], agent: Agent[Any],
                           system_prompt: str | None, input_items: list[TResponseInputItem]) -> None:
        """The bound agents' `on_llm_start`: the request's input compacted in place (the list the
        runner sends next), its overhead measured from the agent as this call resolves it."""
        tools = await agent.get_all_tools(context)
        schemas = request_schemas(agent, tools)
        extra = self._extra(system_prompt, schemas)
        self.overheads[agent.name] = extra
        raw = [_as_dict(i) for i in input_items]
        out = await asyncio.to_thread(self._within_run, raw, extra)
        if out != raw:
            input_items[:] = cast(list[TResponseInputItem], out)

    def run_config(self, **settings: Any) -> RunConfig:
        """A `RunConfig` with `input_filter` as its `call_model_input_filter` (and `settings`)."""
        return RunConfig(call_model_input_filter=self.input_filter, **settings)

    def _checkpoint(self) -> dict[str, Any] | None:
        view = self.store.knowledge(self.auto.session, CHECKPOINT_KEY)
        return view if isinstance(view, dict) and view.get("items") is not None else None

    def _save(self, view: dict[str, Any] | None) -> None:
        self.store.commit_batch(self.auto.session, Batch(knowledge={CHECKPOINT_KEY: view}))


class CompactingHooks(AgentHooks[Any]):
    """Agent hooks that compact each model request's input (`CompactorSession.bind`), then call
    the agent's own hooks."""

    def __init__(self, session: CompactorSession, inner: AgentHooks[Any] | None) -> None:
        self.session = session
        self.inner = inner

    async def on_llm_start(self, context: RunContextWrapper[Any], agent: Agent[Any],
                           system_prompt: str | None, input_items: list[TResponseInputItem]) -> None:
        await self.session._before_call(context, agent, system_prompt, input_items)
        if self.inner is not None:
            await self.inner.on_llm_start(context, agent, system_prompt, input_items)

    async def on_llm_end(self, context: RunContextWrapper[Any], agent: Agent[Any],
                         response: ModelResponse) -> None:
        if self.inner is not None:
            await self.inner.on_llm_end(context, agent, response)

    async def on_start(self, context: Any, agent: Agent[Any]) -> None:
        if self.inner is not None:
            await self.inner.on_start(context, agent)

    async def on_end(self, context: Any, agent: Agent[Any], output: Any) -> None:
        if self.inner is not None:
            await self.inner.on_end(context, agent, output)

    async def on_handoff(self, context: Any, agent: Agent[Any], source: Agent[Any]) -> None:
        if self.inner is not None:
            await self.inner.on_handoff(context, agent, source)

    async def on_tool_start(self, context: Any, agent: Agent[Any], tool: Tool) -> None:
        if self.inner is not None:
            await self.inner.on_tool_start(context, agent, tool)

    async def on_tool_end(self, context: Any, agent: Agent[Any], tool: Tool, result: Any) -> None:
        if self.inner is not None:
            await self.inner.on_tool_end(context, agent, tool, result)


def request_schemas(agent: Agent[Any], tools: Sequence[Tool]) -> list[dict[str, Any]]:
    """The schemas a request of `agent` carries, as the chat-completions converter writes them:
    its function tools, its handoffs (each a tool) and its structured output's JSON schema. A
    hosted tool is counted as its description."""
    schemas: list[dict[str, Any]] = []
    for tool in tools:
        try:
            schemas.append(cast(dict[str, Any], Converter.tool_to_openai(tool)))
        except Exception:  # a hosted tool the chat converter does not write: its fields
            schemas.append({"type": type(tool).__name__, "name": getattr(tool, "name", "")})
    for item in agent.handoffs:
        target = item if isinstance(item, Handoff) else handoff(item)
        schemas.append(cast(dict[str, Any], Converter.convert_handoff_tool(target)))
    output = agent.output_type
    if output is not None and output is not str:
        try:
            described = output if isinstance(output, AgentOutputSchemaBase) else AgentOutputSchema(output)
            schema = described.json_schema()
        except Exception:  # a type the SDK cannot describe: nothing it would send
            schema = None
        if isinstance(schema, Mapping):
            schemas.append({"type": "json_schema", "json_schema": dict(schema)})
    return schemas


def static_schemas(agent: Agent[Any]) -> list[dict[str, Any]]:
    """`request_schemas` of what an agent holds without a run (its tools list; MCP servers' tools
    and disabled tools are known at the request only)."""
    return request_schemas(agent, [t for t in agent.tools if isinstance(t, FunctionTool)])


def expand_context_tool(store: str | ChunkStore) -> FunctionTool:
    """An Agents SDK function tool named `expand_context` that returns the originals of the ids a
    compactor summary cited (or an error the model can read), from `store`."""

    def expand_context(ids: list[str]) -> str:
        call = {"id": "expand", "type": "function",
                "function": {"name": EXPAND_TOOL_NAME, "arguments": {"ids": ids}}}
        return str(handle_expand_call(call, store)["content"])

    return function_tool(expand_context, name_override=EXPAND_TOOL_NAME,
                         description_override=EXPAND_TOOL["function"]["description"])


# -- Responses items <-> chat messages -----------------------------------------------------------


def to_messages(items: Sequence[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[list[int]]]:
    """Chat messages for Responses input items, and for each message the indexes of the items it
    stands for. Consecutive calls join the assistant message before them (as the SDK's chat
    converter sends them); a reasoning item goes with the message that follows it."""
    messages: list[dict[str, Any]] = []
    owners: list[list[int]] = []
    pending: list[int] = []
    open_calls: set[str] = set()
    for index, item in enumerate(items):
        kind = _kind(item)
        if kind == "reasoning":
            pending.append(index)
            continue
        if kind in CALL_OUTPUTS:
            call_id = str(item.get("call_id") or item.get("id") or f"call-{index}")
            call = {"id": call_id, "type": "function",
                    "function": {"name": str(item.get("name") or kind), "arguments": _arguments(item)}}
            open_calls.add(call_id)
            if messages and messages[-1]["role"] == "assistant" and _joinable(items, owners[-1]):
                messages[-1].setdefault("tool_calls", []).append(call)
                owners[-1].extend([*pending, index])
                pending = []
                continue
            message: dict[str, Any] = {"role": "assistant", "content": None, "tool_calls": [call]}
        elif kind in OUTPUT_TYPES and str(item.get("call_id") or item.get("id")) in open_calls:
            message = {"role": "tool", "tool_call_id": str(item.get("call_id") or item.get("id")),
                       "content": _text(item.get("output"))}
        elif kind == "message":
            role = str(item.get("role") or "user")
            message = {"role": "system" if role == "developer" else role,
                       "content": _text(item.get("content"))}
        else:  # hosted tool calls, MCP items, an output whose call is gone: readable text
            body = {k: v for k, v in item.items() if k not in ("id", "status", "provider_data")}
            message = {"role": "assistant", "content": f"[{kind}] {json.dumps(body, ensure_ascii=False)}"}
        messages.append(message)
        owners.append([*pending, index])
        pending = []
    if pending:  # trailing reasoning: keep it with the last message
        if owners:
            owners[-1].extend(pending)
        else:
            messages.append({"role": "assistant", "content": "[reasoning]"})
            owners.append(pending)
    return messages, owners


def from_compaction(items: Sequence[dict[str, Any]], owners: Sequence[Sequence[int]],
                    compacted: CompactedMessages) -> list[dict[str, Any]]:
    """Responses items for a compaction of `to_messages(items)`: the items of the kept messages,
    the summary message between them as a message item, a system message the compaction shortened
    and each pin it put in as new message items. A tool output a cheap tier cleared or reduced (or
    a summary brought back from its stub) is a copy of its item with the compacted text; every
    other kept item is the caller's own object. Raises `CompactorError` when the compaction's
    messages do not line up with the items (a compaction of another list)."""
    return _from_compaction(items, owners, compacted)[0]


def _from_compaction(items: Sequence[dict[str, Any]], owners: Sequence[Sequence[int]],
                     compacted: CompactedMessages) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """`from_compaction`, and the pin items it put in (the next compaction leaves them out)."""
    report = compacted.report
    messages = to_messages(items)[0]
    if len(messages) != len(owners):
        raise CompactorError(f"owners has {len(owners)} entries for {len(messages)} messages: "
                             "give the owners to_messages returned for these items")
    # what each message of `compacted` stands for: a message index, the summary or a pin
    slots: list[int | str]
    if report.get("summary") is None:  # cheap tiers only (or nothing): every message, in order
        slots = list(range(len(messages)))
    else:
        slots = [*(int(i) for i in report["head"]), _SUMMARY, *(int(i) for i in report["tail"])]
    slots = pin_slots(slots, compacted, list(report.get("pin_texts") or ()), _PIN)
    replaced = {int(i) for i in (report.get("system") or {})}
    out: list[dict[str, Any]] = []
    pins: list[dict[str, Any]] = []
    for slot, message in zip(slots, compacted, strict=True):
        if isinstance(slot, str) or slot in replaced:
            item = {"role": message["role"], "content": _text(message.get("content"))}
            out.append(item)
            if slot == _PIN:
                pins.append(item)
            continue
        if not _same_message(messages[slot], message):
            raise CompactorError(f"the compaction does not line up with the session's items: its message "
                                 f"{message.get('role')!r} stands for message {slot}, a "
                                 f"{messages[slot].get('role')!r} one (was it given another list?)")
        out.extend(_kept_items(items, owners[slot], messages[slot], message))
    return drop_orphan_outputs(out), pins


def _same_message(original: dict[str, Any], kept: dict[str, Any]) -> bool:
    """Whether a kept message of a compaction is `original` (its role, its calls and the output it
    answers; its text too, unless a cheap tier changed it or a summary restored it)."""
    if not same_turn(original, kept):
        return False
    same_text = (original.get("content") or "") == (kept.get("content") or "")
    return same_text or _tier_change(original, kept) is not None


def _tier_change(original: dict[str, Any], kept: dict[str, Any]) -> str | None:
    """The new text of a message a cheap tier cleared or reduced (or a summary restored from its stub)."""
    old, new = original.get("content"), kept.get("content")
    if not isinstance(new, str) or new == old or original.get("role") not in ("tool", "user"):
        return None
    return new if any(isinstance(t, str) and t.startswith(_TIER_MARKS) for t in (old, new)) else None


def _kept_items(items: Sequence[dict[str, Any]], owner: Sequence[int], original: dict[str, Any],
                kept: dict[str, Any]) -> list[dict[str, Any]]:
    """The items of a kept message: the caller's own, or a copy of the output (or user message)
    whose text a cheap tier changed, carrying the new text."""
    text = _tier_change(original, kept)
    out = []
    for i in owner:
        item = items[i]
        kind = _kind(item)
        if text is not None and original["role"] == "tool" and kind in TEXT_OUTPUTS:
            item = {**item, "output": text}
        elif text is not None and original["role"] == "user" and kind == "message":
            item = {**item, "content": text}
        out.append(item)
    return out


def _without_pins(items: Sequence[dict[str, Any]], pins: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """`items` without the message items that read as one of `pins` (as `AutoCompactor.compact`
    drops the pins it sent before, so they are not summarised or sent twice)."""
    if not pins:
        return list(items)
    pinned = to_messages(pins)[0]
    return [item for item in items
            if _kind(item) != "message" or to_messages([item])[0][0] not in pinned]


def _pins_of(view: dict[str, Any] | None) -> list[dict[str, Any]]:
    pins = view.get("pins") if view is not None else None
    return [p for p in pins if isinstance(p, dict)] if isinstance(pins, list) else []


def drop_orphan_outputs(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`items` without tool outputs whose call is not before them (the API rejects those)."""
    calls: set[str] = set()
    out = []
    for item in items:
        kind = _kind(item)
        if kind in CALL_OUTPUTS:
            calls.add(str(item.get("call_id") or item.get("id")))
        elif kind in OUTPUT_TYPES and str(item.get("call_id") or item.get("id")) not in calls:
            continue
        out.append(item)
    return out


def _kind(item: dict[str, Any]) -> str:
    kind = item.get("type")
    if kind is None and "role" in item:
        return "message"
    return str(kind)


def _joinable(items: Sequence[dict[str, Any]], owner: Sequence[int]) -> bool:
    """Whether a call may join this assistant message: it came from the model's output (a
    message or calls), not a summary or a hosted-tool item rendered as text."""
    return all(_kind(items[i]) in ("message", "reasoning", *CALL_OUTPUTS) for i in owner)


def _arguments(item: dict[str, Any]) -> str:
    if isinstance(item.get("arguments"), str):
        return str(item["arguments"])
    if isinstance(item.get("input"), str):  # custom tool calls carry free text
        return str(item["input"])
    return json.dumps({k: v for k, v in item.items() if k not in _META}, ensure_ascii=False)


def _text(content: Any) -> str:
    """Readable text of a message's content or a tool's output (text parts joined, others named)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, dict):
                text = part.get("text") or part.get("refusal")
                label = " ".join(str(v) for v in (part.get("type", "part"), part.get("filename")) if v)
                parts.append(str(text) if text is not None else f"[{label}]")
            else:
                parts.append(str(part))
        return "\n".join(parts)
    return json.dumps(content, ensure_ascii=False, default=str)


def _as_dict(item: Any) -> dict[str, Any]:
    if isinstance(item, dict):
        return item
    if hasattr(item, "model_dump"):
        return cast(dict[str, Any], item.model_dump(exclude_unset=True))
    return dict(item)


def _digest(items: Sequence[dict[str, Any]]) -> str:
    """A fingerprint of every item (not the last one only: items popped and replaced by others
    that end the same way would pass for the ones a view summarised)."""
    digest = hashlib.sha256()
    for item in items:
        digest.update(json.dumps(item, sort_keys=True, default=str).encode())
        digest.update(b"\n")
    return "items:" + digest.hexdigest()


def _covers(view: dict[str, Any], raw: Sequence[dict[str, Any]]) -> bool:
    """Whether the stored items still begin with the ones the view was computed from."""
    covered = view.get("covered")
    return (isinstance(covered, int) and 0 < covered <= len(raw)
            and view.get("digest") == _digest(raw[:covered]))
