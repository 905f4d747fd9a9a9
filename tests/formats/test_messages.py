"""Message costs: counted once per history, the same figures as one message at a time."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml

import compactor
from compactor.formats.clearing import clear_outputs, reduce_outputs
from compactor.formats.messages import (
    TOKENS_PER_REPLY,
    conversation_counts,
    conversation_source,
    message_costs,
    message_tokens,
    messages_tokens,
    read_messages,
    wire_text,
)
from compactor.pipeline import Pipeline
from compactor.text.tokens import TokenCounter, get_counter

from ..helpers import REPO

COUNTER = get_counter("cl100k_base")


def _history(turns: int = 12) -> list[dict[str, Any]]:
    """A tool-calling history whose tool returns the same long output more than once."""
    listing = "\n".join(f'{{"order": "W{n:05d}", "status": "delivered", "total": {n * 7}.50}}'
                        for n in range(40))
    history: list[dict[str, Any]] = [{"role": "system", "content": "You are a support agent."},
                                     {"role": "user", "content": "Where are my orders? I am mia_li_3668."}]
    for n in range(turns):
        arguments = f'{{"user_id": "mia_li_3668", "page": {n % 3}}}'
        call = {"id": f"c{n}", "type": "function",
                "function": {"name": "list_orders", "arguments": arguments}}
        history.append({"role": "assistant", "content": f"Looking up page {n % 3} of your orders.",
                        "tool_calls": [call]})
        output = listing if n % 2 else f"page {n}"
        history.append({"role": "tool", "tool_call_id": f"c{n}", "content": output})
    history.append({"role": "assistant", "content": "Every order was delivered.", "name": "agent"})
    return history


class _Spy(TokenCounter):
    """A counter that remembers which texts it encoded."""

    def __init__(self) -> None:
        super().__init__(COUNTER.encoding, COUNTER.requested, COUNTER.exact)
        self.encoded: Counter[str] = Counter()

    def _encode(self, text: str) -> list[int]:
        self.encoded[text] += 1
        return super()._encode(text)


def test_message_costs_are_each_messages_own_count() -> None:
    messages = read_messages(_history())
    costs = message_costs(messages, COUNTER)
    assert costs == [message_tokens(m, COUNTER) for m in messages]
    assert messages_tokens(messages, COUNTER) == TOKENS_PER_REPLY + sum(costs)


def test_message_costs_encode_each_distinct_text_once() -> None:
    messages = read_messages(_history())
    spy = _Spy()
    message_costs(messages, spy)
    assert max(spy.encoded.values()) == 1  # the tool's repeated output, the roles: once each
    texts = {*(wire_text(m) for m in messages), *(m.role for m in messages), "agent"}
    assert set(spy.encoded) == texts - {""}


def test_a_source_made_with_its_costs_is_counted_as_the_pipeline_would() -> None:
    messages = read_messages(_history())
    counted = conversation_source(messages, costs=message_costs(messages, COUNTER))
    again = conversation_counts(conversation_source(messages), COUNTER)
    assert (counted.tokens, counted.message_tokens) == (again.tokens, again.message_tokens)
    assert conversation_counts(counted, _Spy()) is counted  # already counted: nothing encoded again
    with pytest.raises(ValueError, match="2 message costs for"):
        conversation_source(messages, costs=[1, 2])


def test_compact_messages_encodes_each_message_once(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # the conversation pipeline without compress.structured, which measures what it reduces itself
    spec = yaml.safe_load((REPO / "pipelines" / "conversation.yaml").read_text(encoding="utf-8"))
    spec["steps"] = [s for s in spec["steps"] if s["use"] != "compress.structured"]
    (tmp_path / "history.yaml").write_text(yaml.safe_dump(spec), encoding="utf-8")
    pipeline = Pipeline.from_yaml(tmp_path / "history.yaml")
    history = _history(30)
    expected = compactor.compact_messages(history, 300, pipeline=pipeline)
    encoded: Counter[str] = Counter()
    plain = TokenCounter._encode

    def spy(self: TokenCounter, text: str) -> list[int]:
        encoded[text] += 1
        return plain(self, text)

    monkeypatch.setattr(TokenCounter, "_encode", spy)
    result = compactor.compact_messages(history, 300, pipeline=pipeline)
    assert list(result) == list(expected) and result.report["tokens"] == expected.report["tokens"]
    messages = read_messages(history)
    assert {text: encoded[text] for m in messages if (text := wire_text(m))} == {
        text: 1 for m in messages if (text := wire_text(m))}


@pytest.mark.parametrize("tier", [clear_outputs, reduce_outputs])
def test_the_cheap_tiers_take_the_callers_costs(tier: Any) -> None:
    items = _history()
    messages = read_messages(items)
    own = tier(items, messages, COUNTER, expand_tool=None)
    spy = _Spy()
    given = tier(items, messages, spy, expand_tool=None, costs=message_costs(messages, COUNTER))
    assert own is not None and given == own
    assert not {m.content for m in messages if m.role == "tool"} & set(spy.encoded)  # no output counted again


def test_tiers_then_a_summary_count_as_before() -> None:
    history = _history(30)
    result = compactor.compact_messages(history, 400, tiers=("clear", "reduce", "summary"),
                                        keep_tool_results=1)
    assert result.report["output_tokens"] == compactor.count_message_tokens(result) <= 400
    cleared = compactor.compact_messages(history, 3000, tiers=("clear",), keep_tool_results=1)
    assert cleared.report["tokens"] == compactor.count_message_tokens(cleared)
