"""Typed state shared between steps, applications and operations (what `Context.meta` used to carry).

Each kind of shared state is a small frozen dataclass, deeply frozen (lists become tuples, dicts
read-only mappings, sets frozensets), held by type in `Context.state`::

    knowledge = context.state.get(Knowledge)                # None when no step provided it
    context = context.with_state(LossReport.of("validate.loss", report))

A component declares the state it reads and writes as types (`requires = ("chunks", Knowledge)`,
`provides = (LossReport,)`); the pipeline checks at load time that every required type is provided
by an earlier step (or, for inputs an application passes in, read with `get` and a default).
Applications and operations find a step by what it provides (`CompactionPlan`, `Knowledge`,
`LossReport`), never by a component's name.

Who provides what (built-ins):
- the pipeline: `RunInputs` (input size, before the first step after cleaning) and `RenderInfo`;
- a strategy step (`compress.fact_centric`, `chunk_filtering`, `summarization`): `Knowledge`;
- a loss validator (`validate.loss`): `LossReport` (the pipeline builds it from the step's report);
- the history compressor (`compress.eight_segment`): `CompactionPlan`;
- budget-sharing compressors (`compress.select`, `compress.eight_segment`) and a validator's retry
  request (`validate.ratio`): `BudgetShare`;
- applications: `ConversationOptions`, `TranscriptOptions` (run options that override parameters).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import Any, TypeVar, overload

T = TypeVar("T", bound="StateItem")
F = TypeVar("F", bound="Frozen")
D = TypeVar("D")
_FIELDS: dict[type, tuple[str, ...]] = {}
_EMPTY: Mapping[str, Any] = MappingProxyType({})


_SCALARS = frozenset({str, int, float, bool, bytes, type(None)})


def freeze(value: Any) -> Any:
    """A deeply immutable copy of `value`: mappings become read-only mappings of frozen values,
    lists and tuples tuples, sets frozensets; frozen dataclasses and scalars stay as they are."""
    kind = type(value)
    if kind in _SCALARS:
        return value
    if kind is dict or isinstance(value, Mapping):
        return MappingProxyType({k: v if type(v) in _SCALARS else freeze(v) for k, v in value.items()})
    if kind is list or kind is tuple or isinstance(value, list | tuple):
        return tuple(v if type(v) in _SCALARS else freeze(v) for v in value)
    if isinstance(value, set | frozenset):
        return frozenset(freeze(v) for v in value)
    if isinstance(value, bytearray):
        return bytes(value)
    return value


def thaw(value: Any) -> Any:
    """The plain (JSON-ready) copy of a frozen value: mappings become dicts, tuples lists."""
    if isinstance(value, Mapping):
        return {k: thaw(v) for k, v in value.items()}
    if isinstance(value, tuple | list | frozenset | set):
        return [thaw(v) for v in value]
    return value


@dataclass(frozen=True)
class Frozen:
    """A frozen dataclass whose fields are frozen deeply (lists become tuples, dicts read-only)."""

    def __post_init__(self) -> None:
        names = _FIELDS.get(type(self))
        if names is None:
            names = _FIELDS[type(self)] = tuple(f.name for f in fields(self))
        for name in names:
            value = getattr(self, name)
            if type(value) not in _SCALARS:
                object.__setattr__(self, name, freeze(value))

    def evolve(self: F, **changes: Any) -> F:
        """A copy with some fields replaced."""
        return dataclasses.replace(self, **changes)


@dataclass(frozen=True)
class StateItem(Frozen):
    """Base of every kind of shared state: a frozen dataclass whose fields are frozen deeply, held
    by type in `State`."""


@dataclass(frozen=True)
class RunInputs(StateItem):
    """What the run started from: the input's size in tokens (after cleaning), for ratio budgets."""

    input_tokens: int = 0


@dataclass(frozen=True)
class RenderInfo(StateItem):
    """What the renderer said about its output: `budgeted` False when it may exceed the budget
    (a full transcript file), so the pipeline does not hold it to the budget."""

    budgeted: bool = True


@dataclass(frozen=True)
class BudgetShare(StateItem):
    """The share of the budget a compressor used (a retry asks for another), and the attempts a
    ratio controller made so far (each a mapping: share, tokens, level, retention). `fill`: the
    share of the budget an under-filled output should reach on the retry (0: no request), for
    compressors that can keep more verbatim."""

    share: float = 1.0
    attempts: tuple[Mapping[str, Any], ...] = ()
    fill: float = 0.0


@dataclass(frozen=True)
class Knowledge(StateItem):
    """What a search strategy knows across batches (the facts themselves are `Context.facts`):
    the shown checklist's fact ids and the session's checklist budget (fact_centric), the kept
    chunk ids with their [score, tokens] (chunk_filtering), the rolling summary (summarization).
    `strategy` names the kind of knowledge (the short name of the strategy that wrote it)."""

    strategy: str | None = None
    checklist: tuple[str, ...] | None = None
    checklist_budget: int | None = None
    kept_chunk_ids: tuple[str, ...] = ()
    chunk_scores: Mapping[str, tuple[float, ...]] | None = None
    summary: str = ""


@dataclass(frozen=True)
class LossReport(StateItem):
    """What a loss validator measured: `level` (minimal, acceptable, moderate, severe), `retention`
    in [0, 1], `passed`, and the whole report in `values` (categories, ...)."""

    component: str = ""
    level: str | None = None
    retention: float | None = None
    passed: bool | None = None
    values: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)

    @classmethod
    def of(cls, component: str, report: Mapping[str, Any]) -> LossReport:
        """The state for a validator's report."""
        retention = report.get("retention")
        passed = report.get("passed")
        return cls(component, report.get("level"),
                   float(retention) if isinstance(retention, int | float) else None,
                   bool(passed) if passed is not None else None, report)

    def get(self, key: str, default: Any = None) -> Any:
        """A key of the report (`retention`, `level`, `categories`, ...)."""
        return self.values.get(key, default)


#: What a system message an excerpt replaced is keyed by: its index in the history.
SystemIndex = int


@dataclass(frozen=True)
class ConversationPlan(Frozen):
    """How one conversation was compacted: which messages stay verbatim (`head`, `tail`, indices
    in the history), which were `dropped`, the room the summary had (`summary_tokens`), the
    history's size before (`original_tokens`) and the messages' cost after (`tokens`), the `summary`
    (None when nothing was summarised) with its message role, and the system messages sent as an
    excerpt (`system`: index -> new text, with the kept spans, [before, after] tokens, the ids the
    markers cite and the query they were chosen for). `to_dict` is the JSON form reports carry."""

    head: tuple[int, ...] = ()
    tail: tuple[int, ...] = ()
    dropped: tuple[int, ...] = ()
    summary_tokens: int = 0
    original_tokens: int = 0
    unchanged: bool = False
    notes: tuple[str, ...] = ()
    source_id: str = ""
    summary_role: str = "user"
    #: The speaker whose handoff the summary is (the main one when no role was asked for).
    role: str | None = None
    #: How the summary was written: none, rules, llm.
    method: str = "none"
    quality: float = 1.0
    tokens: int = 0
    summary: str | None = None
    kind: str = "auto"
    system: Mapping[SystemIndex, str] = field(default_factory=lambda: MappingProxyType({}))
    system_spans: Mapping[SystemIndex, tuple[tuple[int, int], ...]] = field(
        default_factory=lambda: MappingProxyType({}))
    system_tokens: Mapping[SystemIndex, tuple[int, int]] = field(default_factory=lambda: MappingProxyType({}))
    system_ids: tuple[str, ...] = ()
    system_query: str | None = None
    #: The chunk ids of the dropped messages the summary cites (None: no summary was written).
    cited: tuple[str, ...] | None = None
    #: The share of the budget the compressor used (None: not recorded).
    budget_share: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """The plan as JSON-ready data, keys in the order reports have always shown them; the
        system fields only when a system message was shortened, `cited` only when a summary was
        written, `budget_share` only when recorded."""
        data = {f.name: thaw(getattr(self, f.name)) for f in fields(self)}
        if not self.system:
            for name in _SYSTEM_FIELDS:
                del data[name]
        for name in ("cited", "budget_share"):
            if data[name] is None:
                del data[name]
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ConversationPlan:
        """A plan from its JSON form (`to_dict`'s, system indices as strings or ints); TypeError
        naming an unknown key."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise TypeError(f"unknown conversation plan field(s): {', '.join(unknown)}")
        values = dict(data)
        for name in _SYSTEM_FIELDS[:3]:
            if name in values:
                values[name] = {int(k): v for k, v in (values[name] or {}).items()}
        return cls(**values)


_SYSTEM_FIELDS = ("system", "system_spans", "system_tokens", "system_ids", "system_query")


@dataclass(frozen=True)
class CompactionPlan(StateItem):
    """How a history compressor compacted each conversation, by source id (`ConversationPlan`).
    `compact_messages` and the message renderer assemble the output messages from it."""

    plans: Mapping[str, ConversationPlan] = field(default_factory=lambda: _EMPTY)

    def __post_init__(self) -> None:
        for source_id, plan in self.plans.items():
            if not isinstance(plan, ConversationPlan):
                raise TypeError(f"CompactionPlan.plans[{source_id!r}] is a {type(plan).__name__}, not a "
                                "ConversationPlan (ConversationPlan.from_dict reads the JSON form)")
        super().__post_init__()

    def for_source(self, source_id: str) -> ConversationPlan | None:
        """The plan of one conversation (None when that source was not compacted)."""
        return self.plans.get(source_id)


@dataclass(frozen=True)
class ConversationOptions(StateItem):
    """Run options for a history compressor (keep_last, role, summary_role, llm, kind, focus,
    keep_files, compress_system) that override its parameters for one run."""

    values: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)


@dataclass(frozen=True)
class TranscriptOptions(StateItem):
    """Run options for the transcript organizer (max_length, unit, llm) that override its
    parameters for one run."""

    values: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)


class State(Mapping[type[StateItem], StateItem]):
    """The typed, immutable state of a context: at most one item per type, looked up by type."""

    __slots__ = ("_items",)
    _items: Mapping[type[StateItem], StateItem]

    def __init__(self, items: Iterable[StateItem] = ()) -> None:
        found: dict[type[StateItem], StateItem] = {}
        for item in items:
            if not isinstance(item, StateItem):
                raise TypeError(f"state items are StateItem dataclasses, got {type(item).__name__}")
            found[type(item)] = item
        object.__setattr__(self, "_items", MappingProxyType(found))

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("State is immutable: use `with_` (or Context.with_state)")

    def __getitem__(self, kind: type[StateItem]) -> StateItem:
        return self._items[kind]

    def __iter__(self) -> Iterator[type[StateItem]]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    @overload
    def get(self, kind: type[T], default: None = None) -> T | None: ...

    @overload
    def get(self, kind: type[T], default: T) -> T: ...

    @overload
    def get(self, kind: type[T], default: D) -> T | D: ...

    def get(self, kind: type[T], default: object = None) -> object:
        """The item of type `kind` (typed as that class), or `default` when no step provided one."""
        return self._items.get(kind, default)

    def require(self, kind: type[T]) -> T:
        """The item of type `kind`; KeyError naming the type when absent."""
        item = self._items.get(kind)
        if item is None:
            raise KeyError(f"no {kind.__name__} in the context: no step provided it")
        return item  # type: ignore[return-value]

    def with_(self, *items: StateItem) -> State:
        """A new state with `items` added (replacing items of the same types)."""
        return State((*self._items.values(), *items))

    def __repr__(self) -> str:
        return f"State({', '.join(t.__name__ for t in self._items)})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, State) and dict(self._items) == dict(other._items)

    def __hash__(self) -> int:
        return hash(tuple(self._items))


def state_name(item: Any) -> str:
    """How errors name a `requires`/`provides` entry: a state type's class name, or the string."""
    return item.__name__ if isinstance(item, type) else str(item)


__all__ = ["BudgetShare", "CompactionPlan", "ConversationOptions", "ConversationPlan", "Frozen", "Knowledge",
           "LossReport", "RenderInfo", "RunInputs", "State", "StateItem", "TranscriptOptions", "freeze",
           "state_name", "thaw"]
