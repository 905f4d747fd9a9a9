"""The same agent history written in the three formats compacts to the same content.

Real histories (tau-bench tool agents, SWE-agent and mini-swe-agent text agents) are written as
Anthropic Messages and as Responses items by the converters below, compacted with the same budget
and tiers, and compared with the chat compaction: the same outputs cleared, the same facts in the
summary, tokens within a few percent, and each result valid for its API.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Iterator
from typing import Any

import pytest

import compactor

from ..helpers import EVAL

SETS = (("agent-trajectories-tau-bench", 12), ("agent-trajectories-swe-agent", 4),
        ("agent-trajectories-mini-swe-agent-swebench", 4))
#: Identifiers, numbers and names with a digit: the facts an agent acts on next.
FACT = re.compile(r"(?<![\w#$.-])(?=[\w#$.-]*\d)[\w#$.-]{4,}")
STORE_ID = re.compile(r"[0-9a-f]{16}-\d{4}(?:\.\.\d{4})?")


def histories() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    for folder, count in SETS:
        path = EVAL / folder / "conversations.jsonl"
        if not path.exists():
            continue
        with path.open(encoding="utf-8") as lines:
            for line in itertools.islice(lines, count):
                row = json.loads(line)
                # the system prompt is outside an Anthropic list, a result there names no tool (its
                # call does) and a call's input is an object: compare the conversation itself
                yield row["id"], [_plain(m) for m in row["messages"] if m["role"] != "system"]


def _plain(message: dict[str, Any]) -> dict[str, Any]:
    """A chat message without what only the chat format says: a result's tool name, the spacing
    of a call's arguments (compact JSON, as the Anthropic input object is written back)."""
    out = {k: v for k, v in message.items() if not (k == "name" and message["role"] == "tool")}
    if message.get("tool_calls"):
        out["tool_calls"] = [{**call, "function": {**call["function"], "arguments": json.dumps(
            json.loads(call["function"]["arguments"] or "{}"), ensure_ascii=False, separators=(",", ":"))}}
            for call in message["tool_calls"]]
    return out


def to_anthropic(chat: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Chat messages as a Messages API list: calls as tool_use blocks, each run of tool results
    as one user turn of tool_result blocks."""
    out: list[dict[str, Any]] = []
    for message in chat:
        if message["role"] == "tool":
            block = {"type": "tool_result", "tool_use_id": message["tool_call_id"],
                     "content": message["content"]}
            if out and out[-1]["role"] == "user" and out[-1]["content"][0].get("type") == "tool_result":
                out[-1]["content"].append(block)
            else:
                out.append({"role": "user", "content": [block]})
            continue
        blocks: list[dict[str, Any]] = []
        if message.get("content"):
            blocks.append({"type": "text", "text": message["content"]})
        for call in message.get("tool_calls") or ():
            blocks.append({"type": "tool_use", "id": call["id"], "name": call["function"]["name"],
                           "input": json.loads(call["function"]["arguments"] or "{}")})
        out.append({"role": message["role"], "content": blocks})
    return out


def to_responses(chat: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Chat messages as Responses input items: assistant text as an output_text message, each call
    a function_call, each result a function_call_output."""
    out: list[dict[str, Any]] = []
    for message in chat:
        role = message["role"]
        if role == "tool":
            out.append({"type": "function_call_output", "call_id": message["tool_call_id"],
                        "output": message["content"]})
        elif role == "assistant":
            if message.get("content"):
                out.append({"type": "message", "role": "assistant", "id": f"msg_{len(out)}",
                            "status": "completed",
                            "content": [{"type": "output_text", "text": message["content"],
                                         "annotations": []}]})
            out.extend({"type": "function_call", "call_id": call["id"], "name": call["function"]["name"],
                        "arguments": call["function"]["arguments"]}
                       for call in message.get("tool_calls") or ())
        else:
            out.append({"type": "message", "role": role,
                        "content": [{"type": "input_text", "text": message["content"]}]})
    return out


def anthropic_valid(messages: list[dict[str, Any]]) -> None:
    """What the Messages API accepts: user first, roles alternating, no empty content, every
    tool_result answering a tool_use of the assistant turn just before (results first in the turn),
    every tool_use but a trailing turn's answered in the next turn."""
    assert messages and messages[0]["role"] == "user"
    for before, after in itertools.pairwise(messages):
        assert before["role"] != after["role"]
    for n, message in enumerate(messages):
        assert message["role"] in ("user", "assistant") and message["content"]
        blocks = message["content"] if isinstance(message["content"], list) else []
        assert all(b.get("type") != "text" or b["text"] for b in blocks)
        results = [b["tool_use_id"] for b in blocks if b.get("type") == "tool_result"]
        if results:
            assert all(b.get("type") == "tool_result" for b in blocks[:len(results)])
            previous = messages[n - 1]["content"]
            assert set(results) <= {b["id"] for b in previous if b.get("type") == "tool_use"}
        uses = {b["id"] for b in blocks if b.get("type") == "tool_use"}
        if uses and n + 1 < len(messages):
            following = messages[n + 1]["content"]
            assert uses <= {b.get("tool_use_id") for b in following if isinstance(following, list)
                            and b.get("type") == "tool_result"}


def responses_valid(items: list[dict[str, Any]]) -> None:
    """Every function_call_output after its function_call, every call answered, reasoning before
    the item it belongs to."""
    called: set[str] = set()
    answered: set[str] = set()
    for n, item in enumerate(items):
        if item.get("type") == "function_call":
            called.add(item["call_id"])
        elif item.get("type") == "function_call_output":
            assert item["call_id"] in called
            answered.add(item["call_id"])
        elif item.get("type") == "reasoning":
            assert n + 1 < len(items) and items[n + 1].get("type") != "function_call_output"
    assert called == answered


def cleared(out: list[dict[str, Any]], wire: str) -> list[str]:
    """The call ids whose outputs became stubs."""
    found: list[str] = []
    for item in out:
        if wire == "chat" and item.get("role") == "tool" \
                and item["content"].startswith("[compactor: cleared"):
            found.append(item["tool_call_id"])
        elif wire == "responses" and item.get("type") == "function_call_output" \
                and item["output"].startswith("[compactor: cleared"):
            found.append(item["call_id"])
        elif wire == "anthropic" and isinstance(item.get("content"), list):
            found.extend(b["tool_use_id"] for b in item["content"] if b.get("type") == "tool_result"
                         and str(b["content"]).startswith("[compactor: cleared"))
    return found


def summary_text(text: str | None) -> str:
    """A summary without its store ids and its line of token counts."""
    return "\n".join(line for line in STORE_ID.sub("", text or "").splitlines() if "→" not in line)


def facts(text: str | None) -> set[str]:
    """The facts a summary holds (not the store ids, nor its own metadata line of token counts,
    which differ with what each format's messages cost)."""
    return set(FACT.findall(summary_text(text)))


CASES = list(histories())


@pytest.mark.skipif(not CASES, reason=f"no dev data at {EVAL}")
@pytest.mark.parametrize("tiers", [("clear",), ("clear", "reduce", "summary")], ids=["clear", "tiers"])
def test_three_formats_compact_to_the_same_content(tiers: tuple[str, ...]) -> None:
    assert len(CASES) >= 15
    auto = compactor.AutoCompactor(10**7)
    for name, chat in CASES:
        written = {"chat": chat, "anthropic": to_anthropic(chat), "responses": to_responses(chat)}
        sizes = {wire: auto.tokens(items, format=wire) for wire, items in written.items()}
        budget = sizes["chat"] * 3 // 10
        outs = {wire: compactor.compact_messages(items, budget, tiers=tiers, keep_tool_results=2, format=wire)
                for wire, items in written.items()}
        anthropic_valid(outs["anthropic"])
        responses_valid(outs["responses"])
        base = outs["chat"]
        for wire in ("anthropic", "responses"):
            out = outs[wire]
            assert abs(sizes[wire] - sizes["chat"]) <= 0.04 * sizes["chat"], (name, wire, sizes)
            assert abs(out.report["output_tokens"] - base.report["output_tokens"]) \
                <= max(10, 0.04 * base.report["output_tokens"]), (name, wire)
            assert cleared(out, wire) == cleared(base, "chat"), (name, wire)
            assert out.report["tiers"].keys() == base.report["tiers"].keys()
            assert {k: v["used"] for k, v in out.report["tiers"].items()} == \
                {k: v["used"] for k, v in base.report["tiers"].items()}, (name, wire)
            assert facts(out.summary) == facts(base.summary), (name, wire)
            assert summary_text(out.summary) == summary_text(base.summary), (name, wire)
            assert auto.tokens(out, format=wire) <= max(budget, sizes[wire]) * 1.04
