"""`AutoCompactor`: compaction near the window limit, for any agent loop.

    >>> auto = compactor.AutoCompactor(window=128_000, reserve=16_000)
    >>> while True:
    ...     messages = auto.maybe_compact(messages)     # unchanged until the history passes the trigger
    ...     reply = client.chat.completions.create(model=..., messages=messages,
    ...                                            tools=[compactor.EXPAND_TOOL, ...])

Claude Code compacts at the window minus a reserve for the reply; Codex at about 90% of the window.
Both are one line here: `reserve=` (tokens kept free) or `trigger=` (tokens, or a fraction of the
window). Past the trigger the history is compacted with `compact_messages` to `target` (half the
trigger by default, so the next compaction is many turns away), into one store and session: a later
compaction carries the earlier summary's lines forward, and every id any summary cited stays
expandable (`auto.expand(ids)`, or offer `EXPAND_TOOL` and answer with `auto.handle_expand_call`).
The counters (`compactions`, `tokens_saved`, `stats()`) are what a monitor shows, and each
compaction is recorded in the store as a run of `auto-compaction` (tokens before and after, seconds,
the session), so `compactor-run --stats --store PATH` lists them beside the pipelines' runs.
"""

from __future__ import annotations

import copy
import hashlib
import inspect
import json
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from compactor.apps.common import PipelineArg, check_overrides, in_worker, pipeline_for, refuse_unknown
from compactor.apps.conversation import COMPACT_OPTIONS, TIERS, CompactedMessages, compact_messages
from compactor.apps.tools import expand, handle_expand_call
from compactor.document import Message
from compactor.errors import BudgetError, InputError
from compactor.formats.clearing import request_indices
from compactor.formats.messages import (
    TOKENS_PER_REPLY,
    answers,
    as_mapping,
    message_tokens,
    messages_tokens,
    read_messages,
    to_dict,
    units,
)
from compactor.formats.providers import Wire, check_wire, to_chat, wire_of
from compactor.formats.system_prompt import leading_system
from compactor.state import CompactionPlan
from compactor.store import ChunkStore, open_store
from compactor.text.tokens import TokenCounter, get_counter

#: The trigger: compact at 80% of the window (36k of 45k).
DEFAULT_TRIGGER = 0.8
#: The name compactions are recorded under in the store's runs (`compactor.ops.monitor`).
MONITOR_NAME = "auto-compaction"
#: The keywords of `compact_messages` an `AutoCompactor` passes on (it sets the others itself).
PASSED_ON = frozenset(COMPACT_OPTIONS) - {"budget", "store", "session", "fit", "restore"}


@dataclass(frozen=True, slots=True)
class Compaction:
    """One compaction: when (the check's number), tokens before and after, and the ids it dropped."""

    check: int
    tokens_before: int
    tokens_after: int
    dropped_ids: tuple[str, ...]
    kind: str | None

    @property
    def tokens_saved(self) -> int:
        return self.tokens_before - self.tokens_after


class AutoCompactor:
    """Compacts a message list when it passes a trigger; keeps one store and session across
    compactions so earlier summaries and their expand ids survive the next one.

    `window`: the model's context window in tokens. `reserve`: tokens to keep free for the reply and
    tool definitions (trigger = window - reserve), or `trigger`: tokens, or a fraction of the window
    in (0, 1] (Codex: 0.9); neither gives 0.8 of the window. `target`: the budget a compaction
    compacts to, tokens or a fraction of the trigger (default 0.5). `tools_tokens`: what the request
    spends outside the messages (tool schemas), counted against the trigger. Every other keyword
    (`keep_last`, `llm`, `query`, `kind`, `keep_files`, `pipeline`, `plugins`, `summary_role`,
    `compress_system`, `tiers` (default: `TIERS`, all three, cheapest first; `("summary",)` for
    the summary alone),
    `keep_tool_results`, `exclude_tools`, `clear_at_least`, `expand_tool`, `pin`) is passed to
    `compact_messages`. The cheap tiers are accepted once the history is back under the
    trigger; a summary compacts to `target` (of the room the system message(s) leave, when they
    take much of it). `on_compact` is called with each `Compaction`, for a monitor or a log
    line; `record=False` keeps compactions out of the store's run records. `format`: the
    history's wire format for every call ("chat", "anthropic", "responses"; None detects it per
    call, see `compact_messages`); results come back in it. A keyword it does not know is refused
    here, with the closest one it does.

    One compactor may serve several loops at once (threads, tasks). Overhead that belongs to one
    request (an agent's instructions, that call's tool schemas) goes in that call's `extra_tokens=`
    (`tokens`, `should_compact`, `maybe_compact`, `compact`), added to `tools_tokens` for that
    call only: changing `tools_tokens` around a call would change it for every loop.
    """

    def __init__(self, window: int, *, reserve: int | None = None, trigger: int | float | None = None,
                 target: int | float = 0.5, tools_tokens: int = 0, keep_last: int = 4,
                 store: str | ChunkStore | None = None, session: str | None = None,
                 pipeline: PipelineArg = "conversation", plugins: Iterable[Any] = (), llm: Any = None,
                 query: str | None = None, encoding: str = "cl100k_base",
                 on_compact: Callable[[Compaction], None] | None = None, record: bool = True,
                 remember: bool = True, format: str | None = None, **options: Any) -> None:
        refuse_unknown("AutoCompactor", {k: v for k, v in options.items() if k not in PASSED_ON},
                       sorted(AUTO_KEYWORDS))
        if not _count(window) or window <= 0:
            raise InputError(f"window must be a positive number of tokens, not {window!r}")
        if reserve is not None and trigger is not None:
            raise InputError("give reserve (tokens kept free) or trigger (when to compact), not both")
        if not _count(tools_tokens) or tools_tokens < 0:
            raise InputError(f"tools_tokens must be 0 or more tokens, not {tools_tokens!r}")
        plugins = tuple(plugins)
        given = {"keep_last": keep_last, "focus": query, **options}  # `llm` here is settings, not a flag
        check_overrides(pipeline_for(pipeline, plugins), CompactionPlan,
                        {key: value for key, value in given.items() if value is not None and key != "llm"})
        self.window = window
        self.trigger_tokens = _trigger(window, reserve, trigger)
        self.target_tokens = _fraction_or_tokens("target", target, self.trigger_tokens)
        self._target_share = float(target) if isinstance(target, float) else None
        self._originals: dict[str, Any] = {}  # id -> the tool output a stub or reduction replaced
        self._pin_messages: list[dict[str, Any]] = []
        self.tools_tokens = tools_tokens
        self.format = None if format is None else check_wire(format)
        self.store = open_store(store)
        self.session = session or f"auto-{uuid.uuid4().hex[:12]}"
        self.on_compact = on_compact
        self.record = record
        self.remember = remember
        # (items covered, their digest, the result, its format)
        self._memo: tuple[int, str, list[Any], Wire] | None = None
        self._counter = get_counter(encoding)
        self._options: dict[str, Any] = {"keep_last": keep_last, "pipeline": pipeline, "tiers": TIERS,
                                         "plugins": tuple(plugins), "llm": llm, "query": query, **options}
        self.history: list[Compaction] = []
        self.checks = 0
        self.last: CompactedMessages | None = None

    def __repr__(self) -> str:
        return (f"AutoCompactor(window={self.window}, trigger={self.trigger_tokens}, "
                f"target={self.target_tokens}, compactions={self.compactions})")

    @property
    def counter(self) -> TokenCounter:
        """The tokenizer the trigger is measured with (for what a caller adds: tool schemas)."""
        return self._counter

    @property
    def compactions(self) -> int:
        """How many times the history was compacted."""
        return len(self.history)

    @property
    def tokens_saved(self) -> int:
        """Tokens the compactions removed from the requests that followed them (sum over compactions)."""
        return sum(c.tokens_saved for c in self.history)

    def tokens(self, messages: Sequence[Any], *, extra_tokens: int = 0, format: str | None = None) -> int:
        """What `messages` cost in a request, plus `tools_tokens` and this call's `extra_tokens`."""
        overhead = self._overhead(extra_tokens)
        items = list(messages)
        return self._history_tokens(items, self._wire(items, format)) + overhead

    def should_compact(self, messages: Sequence[Any], *, extra_tokens: int = 0,
                       format: str | None = None) -> bool:
        """Whether the history (with `extra_tokens` of this request's own overhead) has passed the
        trigger."""
        return self.tokens(messages, extra_tokens=extra_tokens, format=format) > self.trigger_tokens

    def maybe_compact(self, messages: Sequence[Any], *, extra_tokens: int = 0,
                      format: str | None = None) -> list[Any]:
        """`messages` as they are while under the trigger (the same objects, in a new list);
        past it, the compacted history (a `CompactedMessages`) in the same format: chat message
        dicts, an Anthropic `messages` list or a Responses `input` list (`format`: "chat",
        "anthropic", "responses"; None detects it, see `compact_messages`).
        `extra_tokens`: overhead this request adds to `tools_tokens` (as in `compact`).

        Either loop works: one that sends back what this returned plus its new turns, and one that
        keeps the full original history and passes all of it every time. For the second (with
        `remember`, the default), a history that starts with the one compacted last is read as
        that compaction's result plus the new turns, so it is not compacted again from scratch."""
        overhead = self._overhead(extra_tokens)
        self.checks += 1
        items = list(messages)
        wire = self._wire(items, format)
        memo = self._memo  # only set with `remember`
        if (memo is not None and memo[3] == wire and len(items) >= memo[0]
                and _digest(items[:memo[0]]) == memo[1]):
            current = [*copy.deepcopy(memo[2]), *items[memo[0]:]]  # the caller may edit what it gets
        else:
            current = items
        before = self._history_tokens(current, wire) + overhead
        if before <= self.trigger_tokens:
            return current
        result = self.compact(current, tokens_before=before, extra_tokens=extra_tokens, format=wire)
        if self.remember:
            self._memo = (len(items), _digest(items), copy.deepcopy(list(result)), wire)
        return result

    async def amaybe_compact(self, messages: Sequence[Any], *, extra_tokens: int = 0,
                             format: str | None = None) -> list[Any]:
        """`maybe_compact` for async code: the same arguments and result, the work in a worker
        thread (an LLM rewrite too), so the event loop keeps serving other tasks meanwhile."""
        return await in_worker(self.maybe_compact, messages, extra_tokens=extra_tokens, format=format)

    async def acompact(self, messages: Sequence[Any], *, tokens_before: int | None = None,
                       budget: int | None = None, extra_tokens: int = 0,
                       format: str | None = None, keep_last: int | None = None,
                       tiers: Sequence[str] | None = None) -> CompactedMessages:
        """`compact` for async code, in a worker thread."""
        return await in_worker(self.compact, messages, tokens_before=tokens_before, budget=budget,
                               extra_tokens=extra_tokens, format=format, keep_last=keep_last, tiers=tiers)

    def _wire(self, items: Sequence[Any], format: str | None) -> Wire:
        """The history's format: `format` checked, else the compactor's own, else detected."""
        chosen = format if format is not None else self.format
        return wire_of(items) if chosen is None else check_wire(chosen)

    def _history_tokens(self, items: list[Any], wire: Wire) -> int:
        """What a history in `wire` costs (items passed through untouched included)."""
        translation = to_chat(items, wire, self._counter)
        if not translation.messages:
            return translation.opaque_tokens
        return messages_tokens(read_messages(translation.messages), self._counter) + translation.opaque_tokens

    def compact(self, messages: Sequence[Any], *, tokens_before: int | None = None,
                budget: int | None = None, extra_tokens: int = 0,
                format: str | None = None, keep_last: int | None = None,
                tiers: Sequence[str] | None = None) -> CompactedMessages:
        """Compact now, whatever the size (a `/compact` command).

        A tool call still waiting for its results at the end (the loop compacts between the model's
        call and running the tools) stays verbatim after the summary, so the results the loop appends
        next still answer it. When the system message(s) leave no room for a summary at `target`,
        the compaction takes more of the room below the trigger rather than failing the loop.
        `budget` (tokens, `tools_tokens` and `extra_tokens` included): compact to it and no higher,
        in place of the target and the trigger, for this call only (an overflow retry); the settings
        stay as they are, so loops sharing this compactor are not affected.
        `extra_tokens`: what this request spends outside the messages beyond `tools_tokens` (an
        agent's instructions, this call's tool schemas), for this call only: it lowers the room the
        history is compacted into and is counted in the compaction's `tokens_after`, as
        `tools_tokens` is. `tokens_before`, when given, includes it. `format`: as in `maybe_compact`;
        the result is in the history's format. `keep_last` and `tiers`: this compaction's, in place
        of the settings, for this call only (a caller that keeps N messages, or wants the summary
        alone), so loops sharing this compactor are not affected.
        """
        items = list(messages)
        wire = self._wire(items, format)
        changes: dict[str, Any] = {}
        if keep_last is not None:
            check_overrides(pipeline_for(self._options["pipeline"], self._options["plugins"]), CompactionPlan,
                            {"keep_last": keep_last})
            changes["keep_last"] = keep_last
        if tiers is not None:
            changes["tiers"] = tuple(tiers)
        if wire == "chat":
            return self._compact_chat(items, tokens_before, budget, extra_tokens, changes)
        translation = to_chat(items, wire, self._counter)
        if not translation.messages:
            raise InputError("the history has no message to compact (only items passed through as they are)")
        self._overhead(extra_tokens)
        # items passed through untouched count as overhead: the messages are compacted into the rest
        result = self._compact_chat(translation.messages, tokens_before, budget,
                                    extra_tokens + translation.opaque_tokens, changes)
        report = {**result.report, "format": wire}
        if translation.opaque_tokens:
            report["opaque_tokens"] = translation.opaque_tokens
        out = CompactedMessages(translation.back(result, summary=report.get("summary"),
                                                 added=report.get("pin_texts") or ()),
                                store=result.store, session=result.session, report=report)
        self.last = out
        return out

    def _compact_chat(self, messages: list[Any], tokens_before: int | None, budget: int | None,
                      extra_tokens: int, changes: Mapping[str, Any] | None = None) -> CompactedMessages:
        """`compact` on chat-shaped messages."""
        if budget is not None and (not _count(budget) or budget <= 0):
            raise InputError(f"budget must be a positive number of tokens, not {budget!r}")
        overhead = self._overhead(extra_tokens)  # read once: another loop may set tools_tokens meanwhile
        items = list(messages)
        parsed = read_messages(items)
        before = messages_tokens(parsed, self._counter) + overhead if tokens_before is None else tokens_before
        target, trigger = (self.target_tokens, self.trigger_tokens) if budget is None else (budget, budget)
        budget = max(1, target - overhead)
        ceiling = max(budget, trigger - overhead)
        split = _pending_start(parsed)
        pending_tokens = messages_tokens(parsed[split:], self._counter) - TOKENS_PER_REPLY
        if split == len(parsed) or split < 2 or pending_tokens > budget // 2:
            split, pending_tokens = len(parsed), 0  # nothing pending, or too big to keep aside
        started = time.perf_counter()
        pinned = self._pin_messages
        if pinned:  # the pins the last compaction sent go in again as they read now, not twice
            keep = [i for i, item in enumerate(items[:split])
                    if not (isinstance(item, dict) and item in pinned)]
            if len(keep) < split:
                items = [*(items[i] for i in keep), *items[split:]]
                parsed = [*(parsed[i] for i in keep), *parsed[split:]]
                split = len(keep)
        budget = self._budget_for(parsed[:split], budget, ceiling)
        result = self._compact_within(items[:split], parsed[:split], budget - pending_tokens,
                                      ceiling - pending_tokens, changes or {})
        for index, ref in (result.report.get("replaced") or {}).items():
            original = items[int(index)]
            self._originals[ref] = copy.deepcopy(original) if isinstance(original, dict) else original
        pin_texts = self._pin_texts(result)
        self._pin_messages = [m for m in result if isinstance(m, dict) and isinstance(m.get("content"), str)
                              and m["content"] in pin_texts]
        if split < len(parsed):
            result.extend(to_dict(m) for m in parsed[split:])
            result.report["tail"] = [*result.report.get("tail", ()), *range(split, len(parsed))]
            result.report["output_tokens"] = result.report.get("output_tokens", 0) + pending_tokens
        after = result.report.get("output_tokens", before) + overhead
        event = Compaction(self.checks, before, after, tuple(result.dropped_ids), result.report.get("kind"))
        self.history.append(event)
        self.last = result
        if self.record:
            quality = result.report.get("quality")
            self.store.record_run({
                "pipeline": MONITOR_NAME, "time": time.time(), "session": self.session,
                "seconds": round(time.perf_counter() - started, 6), "success": True, "error": None,
                "tokens_in": before, "tokens_out": after,
                "ratio": round(after / before, 4) if before else None,
                "loss_level": None, "retention": quality if isinstance(quality, int | float) else None,
                "fallback": False, "compactions": self.compactions, "tokens_saved": self.tokens_saved})
        if self.on_compact is not None:
            self.on_compact(event)
        return result

    def _overhead(self, extra_tokens: int) -> int:
        """`tools_tokens` plus a call's `extra_tokens` (checked: a count of 0 or more)."""
        if not _count(extra_tokens) or extra_tokens < 0:
            raise InputError(f"extra_tokens must be 0 or more tokens, not {extra_tokens!r}")
        return self.tools_tokens + extra_tokens

    def _compact_within(self, items: list[Any], parsed: Sequence[Message], budget: int,
                        ceiling: int, changes: Mapping[str, Any]) -> CompactedMessages:
        """`compact_messages` at `budget`; if the system message(s) leave no room there, at half the
        room they leave below `ceiling`, then at `ceiling` itself."""
        system = sum(message_tokens(parsed[i], self._counter) for i in leading_system(parsed))
        budgets = sorted({max(1, budget), max(1, min(ceiling, (system + ceiling) // 2)), max(1, ceiling)})
        budgets = [b for b in budgets if b >= budget] or [max(1, budget)]
        options = {**self._options, **changes}
        chosen = options.pop("compress_system", None)
        for attempt in budgets:
            # the excerpt of the system prompt only where no room below the trigger holds it whole
            excerpt = chosen if chosen is not None or attempt == budgets[-1] else False
            try:
                return compact_messages(items, attempt, store=self.store, session=self.session,
                                        fit=max(attempt, ceiling), restore=self._originals,
                                        compress_system=excerpt, format="chat", **options)
            except BudgetError as exc:
                if attempt == budgets[-1]:
                    raise BudgetError(f"the system message(s) take {system} tokens, too many to compact "
                                      f"under the trigger ({self.trigger_tokens} tokens): raise the window "
                                      f"or trigger, or pass compress_system=True ({exc})") from exc
        raise AssertionError("unreachable")  # pragma: no cover

    def _budget_for(self, parsed: Sequence[Message], budget: int, ceiling: int) -> int:
        """The summary's budget: `target` as a share of the room the system message(s) leave (a large
        system prompt would otherwise take all of it), raised so that the request being worked on
        fits verbatim in at most half the summary's room, never past the trigger."""
        system = sum(message_tokens(parsed[i], self._counter) for i in leading_system(parsed))
        if self._target_share is not None and system > self._target_share * budget:
            budget = max(budget, system + int(self._target_share * max(0, ceiling - system)))
        requests = request_indices(parsed)
        if requests:
            wanted = system + 2 * max(message_tokens(parsed[i], self._counter) for i in requests) + 200
            budget = max(budget, wanted)
        return max(1, min(budget, ceiling))

    def _pin_texts(self, result: Sequence[Any]) -> set[str]:
        pins = result.report.get("pin_texts") if isinstance(result, CompactedMessages) else None
        return set(pins or ())

    def expand(self, ids: Iterable[str]) -> dict[str, str]:
        """The originals of ids any compaction of this session cited."""
        return expand(ids, self.store)

    def handle_expand_call(self, call: Any) -> dict[str, Any]:
        """The tool message answering a model's `expand_context` call."""
        return handle_expand_call(call, self.store)

    def stats(self) -> dict[str, Any]:
        """Counters for a monitor: checks, compactions, tokens saved, the last compaction (and the
        tiers it used, cheapest first)."""
        last = self.history[-1] if self.history else None
        tiers = (self.last.report.get("tiers") or {}) if self.last is not None else {}
        return {"window": self.window, "trigger_tokens": self.trigger_tokens,
                "target_tokens": self.target_tokens, "checks": self.checks,
                "compactions": self.compactions, "tokens_saved": self.tokens_saved,
                "last": None if last is None else {"check": last.check, "tokens_before": last.tokens_before,
                                                   "tokens_after": last.tokens_after,
                                                   "dropped": len(last.dropped_ids), "kind": last.kind},
                "tiers": [name for name, done in tiers.items()
                          if isinstance(done, dict) and done.get("used")]}


#: The keywords an `AutoCompactor` takes: its own and those it passes to `compact_messages` (for the
#: did-you-mean of an unknown one, here and in the faces built on it).
AUTO_KEYWORDS = PASSED_ON | (frozenset(inspect.signature(AutoCompactor.__init__).parameters)
                             - {"self", "options"})


def _pending_start(messages: Sequence[Message]) -> int:
    """Where a trailing tool call still waiting for (some of) its results starts; the length when
    the history does not end that way."""
    tiles = units(messages)
    if tiles and not tiles[-1].complete and answers(messages[tiles[-1].start]) is None:
        return tiles[-1].start
    return len(messages)


def _digest(items: Sequence[Any]) -> str:
    """A fingerprint of a history (its items as plain data), to know a history again."""
    data = json.dumps([dict(as_mapping(item, "item")) for item in items], sort_keys=True, default=str,
                      ensure_ascii=False)
    return hashlib.sha256(data.encode("utf-8", "surrogatepass")).hexdigest()


class AutoCounters:
    """The counters of the `AutoCompactor` an adapter owns (`self.auto`), as the adapter's own."""

    auto: AutoCompactor

    @property
    def compactions(self) -> int:
        """How many times the history was compacted."""
        return self.auto.compactions

    @property
    def tokens_saved(self) -> int:
        """Tokens the compactions removed from the requests that followed them."""
        return self.auto.tokens_saved

    def stats(self) -> dict[str, Any]:
        """The counters, for a monitor."""
        return self.auto.stats()


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _trigger(window: int, reserve: int | None, trigger: int | float | None) -> int:
    if reserve is not None:
        if not _count(reserve) or not 0 <= reserve < window:
            raise InputError(f"reserve must be a number of tokens from 0 to below the window "
                             f"({window}), not {reserve!r}")
        return window - reserve
    return _fraction_or_tokens("trigger", DEFAULT_TRIGGER if trigger is None else trigger, window)


def _fraction_or_tokens(name: str, value: Any, whole: int) -> int:
    """`value` as tokens: a float in (0, 1] is a fraction of `whole`, an int is tokens."""
    if isinstance(value, float) and 0 < value <= 1:
        return max(1, int(whole * value))
    if _count(value) and 0 < value <= whole:
        return int(value)
    raise InputError(f"{name} must be tokens (1 to {whole}) or a fraction of {whole} in (0, 1], "
                     f"not {value!r}")
