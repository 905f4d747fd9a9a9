"""Which messages of a history stay verbatim and which are summarised: the compaction plan.

The plan keeps a prefix (the system messages and, when it is cheap, the first user request) and a
suffix (the last `keep_last` units) byte for byte, and hands everything between to a summariser with
an exact token allowance. Prefix and suffix never split a tool call from its results (`units`), so
the list that goes back to the model has no orphan call or result; and keeping the prefix unchanged
lets a provider's prompt cache survive the compaction. The plan is framework code, shared by
`compress.eight_segment` (which writes the summary) and the message renderers.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from compactor.document import Message
from compactor.errors import BudgetError
from compactor.formats.clearing import output_indices, request_indices
from compactor.formats.messages import TOKENS_PER_MESSAGE, TOKENS_PER_REPLY, Unit, answers, to_dict, units
from compactor.state import ConversationPlan

#: The kinds of history compacted differently (`compress.eight_segment`'s `kind`).
KINDS: tuple[str, ...] = ("coding", "tool", "chat", "meeting")
#: Summary marker: the first characters of every summary message compactor writes.
SUMMARY_MARK = "[compactor]"
#: The smallest summary: the short marker line with the expand ids (at most ~45 tokens).
MIN_SUMMARY_TOKENS = 48
#: The least a summary may take beside the request being worked on kept verbatim: its marker line
#: alone (the dropped range and its ids), without the metadata.
MIN_MARKER_TOKENS = 36


@dataclass(frozen=True, slots=True)
class Plan:
    """Message indices kept at the head and tail, the dropped ones, and the summary's allowance."""

    head: tuple[int, ...]
    tail: tuple[int, ...]
    dropped: tuple[int, ...]
    summary_tokens: int
    original_tokens: int
    unchanged: bool = False
    notes: tuple[str, ...] = field(default=())


def plan_compaction(messages: Sequence[Message], costs: Sequence[int], budget: int, *,
                    keep_last: int = 4, keep_first: bool = True, head_share: float | None = None,
                    tail_share: float | None = None, summary_role_tokens: int = 1) -> Plan:
    """Choose the verbatim head and tail for `budget` tokens (costs are per-message tokens).

    The tail may take `tail_share` of the room the head leaves; by default half of it, less when
    the room is small (a small room is better spent on the summary's dense lines).

    A tool call still waiting for (some of) its results at the end (`pending_call`: the loop
    compacts between the model's call and running the tools) stays verbatim, last, so the results
    appended next still answer it; `keep_last` counts the turns before it, and they take their
    share of the room it leaves. Only a call that does not fit beside the system messages and a
    minimal summary is summarised, with a note saying so.

    Raises BudgetError only when the system messages plus a minimal summary cannot fit; any history,
    however long, otherwise fits (the summariser gets whatever the verbatim parts leave).
    """
    total = TOKENS_PER_REPLY + sum(costs)
    if total <= budget:
        everything = tuple(range(len(messages)))
        return Plan(everything, (), (), 0, total, unchanged=True)
    tiles = units(messages)
    head: list[Unit] = []
    position = 0
    while position < len(tiles) and _is_system(messages, tiles[position]):
        head.append(tiles[position])
        position += 1
    system_cost = sum(_cost(costs, u) for u in head)
    summary_overhead = TOKENS_PER_MESSAGE + summary_role_tokens
    floor = TOKENS_PER_REPLY + system_cost + summary_overhead + MIN_SUMMARY_TOKENS
    if floor > budget:
        raise BudgetError(f"a budget of {budget} tokens cannot hold the system message(s) ({system_cost} "
                          f"tokens) and a minimal summary ({summary_overhead + MIN_SUMMARY_TOKENS}); "
                          f"use a budget of at least {floor}")
    notes: list[str] = []
    pending = pending_call(messages, tiles)
    pending_cost = _cost(costs, pending) if pending is not None else 0
    if pending is not None and floor + pending_cost > budget:
        # no room for it even beside a minimal summary: summarised, and the caller told why
        notes.append(f"the pending tool call (m{pending.start}, {pending_cost} tokens) summarised: it does "
                     f"not fit beside the system message(s) and a minimal summary in {budget} tokens "
                     f"(its results will answer no call); use a budget of at least {floor + pending_cost}")
        pending, pending_cost = None, 0
    if pending is not None:  # kept aside: it joins the tail whatever the room and keep_last
        tiles = tiles[:-1]
        floor += pending_cost
    agent = bool(output_indices(messages))
    if head_share is None:  # an agent's task statement may take half the room; a chat's opener less
        head_share = 0.5 if agent else 0.25
    # the request being worked on: an agent's latest person message, or a chat's when it waits for
    # its answer (the last message; an answered turn of a chat is one turn among others)
    requests = [i for i in request_indices(messages)[-1:] if agent or i == len(messages) - 1]
    if keep_first and position < len(tiles):
        first = tiles[position]
        first_cost = _cost(costs, first)
        spare = budget - floor
        # a room too small for both the opening request and the latest one goes to the latest (what is
        # being worked on); the summary quotes the opening one when it can
        latest_cost = (costs[requests[-1]] if requests and requests[-1] >= first.end else 0)
        crowded = 0 < latest_cost <= (spare + MIN_SUMMARY_TOKENS) // 2 and first_cost + latest_cost > spare
        if (first.complete and messages[first.start].role == "user" and answers(messages[first.start]) is None
                and first_cost <= head_share * (spare + MIN_SUMMARY_TOKENS) and not crowded
                and position + 1 < len(tiles)):
            head.append(first)
            position += 1
        else:
            notes.append("first user message summarised (too long to keep verbatim)")
    head_cost = sum(_cost(costs, u) for u in head)
    room = budget - TOKENS_PER_REPLY - head_cost - summary_overhead - pending_cost
    tail: list[Unit] = []
    tail_cost = 0
    share = max(0.25, 0.5 * min(1.0, room / 2000)) if tail_share is None else tail_share
    cap = max(0, min(int(room * share), room - MIN_SUMMARY_TOKENS))
    for unit in reversed(tiles[position:]):
        if len(tail) >= keep_last:
            break
        cost = _cost(costs, unit)
        if not unit.complete or tail_cost + cost > cap:
            if not tail:
                where = "latest turn" if pending is None else "latest turn before the pending tool call"
                notes.append(f"{where} summarised (too long to keep verbatim)")
            break
        tail.append(unit)
        tail_cost += cost
    tail.reverse()
    head_end = head[-1].end if head else 0
    tail_start = tail[0].start if tail else (pending.start if pending is not None else len(messages))
    latest = requests[-1:] if position < len(tiles) else ()
    if latest and head_end <= latest[0] < tail_start:
        # the request being worked on (the person's latest message) stays verbatim with the turns after
        # it, when they fit in the tail's share or in half the room (else the summary quotes it)
        stretch = [u for u in tiles[position:] if u.start >= latest[0] and u.start < tail_start]
        extra = sum(_cost(costs, u) for u in stretch)
        if (stretch and stretch[0].start == latest[0] and all(u.complete for u in stretch)
                and tail_cost + extra <= max(cap, room // 2)
                and room - tail_cost - extra >= MIN_MARKER_TOKENS):
            tail = [*stretch, *tail]
            tail_cost += extra
            tail_start = latest[0]
            notes[:] = [n for n in notes if "latest turn" not in n]
    if pending is not None:
        tail.append(pending)
    kept_head = tuple(i for u in head for i in range(u.start, u.end))
    kept_tail = tuple(i for u in tail for i in range(u.start, u.end))
    dropped = tuple(range(head_end, tail_start))
    return Plan(kept_head, kept_tail, dropped, room - tail_cost, total, notes=tuple(notes))


def pending_call(messages: Sequence[Message], tiles: Sequence[Unit] | None = None) -> Unit | None:
    """The tool call at the end of a history still waiting for (some of) its results, with the
    results it already has; None when the history does not end that way."""
    tiles = units(messages) if tiles is None else tiles
    if not tiles or tiles[-1].complete or answers(messages[tiles[-1].start]) is not None:
        return None
    return tiles[-1]


def _is_system(messages: Sequence[Message], unit: Unit) -> bool:
    return len(unit) == 1 and messages[unit.start].role in ("system", "developer")


def _cost(costs: Sequence[int], unit: Unit) -> int:
    return sum(costs[unit.start:unit.end])


def assemble(messages: Sequence[Message], plan: ConversationPlan, summary: str | None,
             summary_role: str = "user") -> list[dict[str, Any]]:
    """The message list to send: head verbatim, the summary message, tail verbatim. A system
    message the plan shortened (`plan.system`: index -> text) goes out with its new text."""
    replaced = plan.system

    def copy(i: int) -> dict[str, Any]:
        data = to_dict(messages[i])
        if i in replaced:
            data["content"] = replaced[i]
        return data

    if plan.unchanged or summary is None:
        return [copy(i) for i in range(len(messages))]
    out = [copy(i) for i in plan.head]
    out.append({"role": summary_role, "content": summary})
    out.extend(copy(i) for i in plan.tail)
    return out


def conversation_plan(plan: Plan, base: ConversationPlan | None = None, **changes: Any) -> ConversationPlan:
    """The state's plan of one conversation (what `compactor.state.CompactionPlan` carries) with
    `plan`'s layout (head, tail, dropped, the summary's allowance, sizes, notes): `base` (by default
    an empty one) with those and `changes` replaced."""
    return dataclasses.replace(base or ConversationPlan(), head=plan.head, tail=plan.tail,
                               dropped=plan.dropped, summary_tokens=plan.summary_tokens,
                               original_tokens=plan.original_tokens, unchanged=plan.unchanged,
                               notes=plan.notes, **changes)


def same_turn(original: Mapping[str, Any], kept: Mapping[str, Any]) -> bool:
    """Whether a message of a compaction stands for `original` (dicts in the chat format): the same
    role, the same tool calls (by id) and the same call answered. Its text may differ where a tier
    changed it; the adapters that map a compaction back to their own objects check that part."""
    def call_ids(message: Mapping[str, Any]) -> list[Any]:
        return [c.get("id") for c in message.get("tool_calls") or ()]

    return (original.get("role") == kept.get("role")
            and original.get("tool_call_id") == kept.get("tool_call_id")
            and call_ids(original) == call_ids(kept))
