"""Compaction tiers (clear old tool outputs, reduce structured ones, summarise), pins and target ratios."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import compactor
from compactor import AutoCompactor, BudgetError, InputError
from compactor.formats.clearing import STUB_MARK, output_indices, request_indices, stub_ref
from compactor.formats.messages import read_messages


def _turn(i: int, rows: int = 12) -> list[dict[str, Any]]:
    call = {"id": f"c{i}", "type": "function",
            "function": {"name": "get_order", "arguments": json.dumps({"order_id": f"#W{1000 + i}"})}}
    result = {"order_id": f"#W{1000 + i}", "payment": f"gift_card_{7000 + i}",
              "items": [{"sku": f"SKU-{i}-{k}", "price": 10 + k} for k in range(rows)]}
    return [{"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"c{i}", "content": json.dumps(result)},
            {"role": "assistant", "content": f"Order #W{1000 + i} has {rows} items."}]


def _history(turns: int) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are a support agent."},
                                      {"role": "user", "content": "Check my orders and refund #W1003."}]
    for i in range(turns):
        messages += _turn(i)
    return messages


def test_clear_tier_stubs_old_outputs_with_ids_that_expand() -> None:
    history = _history(10)
    budget = compactor.count_message_tokens(history) * 3 // 4
    out = compactor.compact_messages(history, budget, tiers=("clear",), keep_tool_results=3)
    stubs = [m for m in out if str(m.get("content")).startswith(STUB_MARK)]
    assert len(stubs) == 7  # every output but the last three
    assert compactor.count_message_tokens(out) <= budget
    assert out.report["tiers"]["clear"]["ran"] and out.report["tiers"]["clear"]["saved"] > 0
    first = stubs[0]["content"]
    assert "get_order output" in first and "tokens" in first and "gift_card_7000" in first
    ref = stub_ref(first)
    assert ref is not None and f'expand_context(ids=["{ref}"])' in first
    assert '"payment": "gift_card_7000"' in compactor.expand([ref], session=out)[ref]
    # the messages around the stubs are the originals, in order, pairs intact
    assert [m.get("tool_call_id") for m in out] == [m.get("tool_call_id") for m in history]
    assert out[-3:] == history[-3:] and out[:2] == history[:2]


def test_excluded_tools_and_clear_at_least() -> None:
    history = _history(6)
    budget = compactor.count_message_tokens(history) // 2
    out = compactor.compact_messages(history, budget, tiers=("clear",), exclude_tools=["get_order"])
    assert not any(str(m.get("content")).startswith(STUB_MARK) for m in out)
    assert out.report["tiers"]["clear"]["ran"] is False
    worth = compactor.compact_messages(history, budget, tiers=("clear", "summary"), clear_at_least=100_000)
    assert worth.report["tiers"]["clear"]["ran"] is False and worth.summary is not None


def test_a_stub_never_changes_once_written_and_the_prefix_stays() -> None:
    auto = AutoCompactor(window=4_000, reserve=1_500, record=False, tiers=compactor.TIERS)
    messages = _history(0)
    sent: list[list[dict[str, Any]]] = []
    for i in range(40):
        messages = auto.maybe_compact([*messages, *_turn(i)])
        sent.append(list(messages))
        assert auto.tokens(messages) <= auto.trigger_tokens
    stubs: dict[str, str] = {}
    for request in sent:
        for m in request:
            text = str(m.get("content"))
            if text.startswith(STUB_MARK):
                key = str(m.get("tool_call_id"))
                assert stubs.setdefault(key, text) == text  # the same stub whenever it is sent
    assert stubs, "the clear tier never ran"
    assert auto.last is not None and "tiers" in auto.last.report


def test_tiers_can_be_turned_off() -> None:
    history = _history(10)
    budget = compactor.count_message_tokens(history) // 2
    out = compactor.compact_messages(history, budget, tiers=("summary",))
    assert not any(str(m.get("content")).startswith(STUB_MARK) for m in out)
    assert out.summary is not None and set(out.report["tiers"]) == {"summary"}
    with pytest.raises(InputError, match="tiers"):
        compactor.compact_messages(history, budget, tiers=("clear", "compress"))


def test_text_agent_observations_are_outputs_and_the_task_is_never_cleared() -> None:
    task = "Fix the failing date parser in src/dates.py; keep the public API."
    history: list[dict[str, Any]] = [{"role": "system", "content": "You run shell commands."},
                                      {"role": "user", "content": task}]
    for i in range(8):
        body = "x = 1\n" * 80
        command = f"THOUGHT: look at file {i}.\n\n```bash\ncat src/m{i}.py\n```"
        history += [{"role": "assistant", "content": command},
                    {"role": "user", "content": f"<returncode>0</returncode>\n<output>\n{body}</output>"}]
    parsed = read_messages(history)
    assert output_indices(parsed) == list(range(3, len(history), 2))
    assert request_indices(parsed) == (1,)
    out = compactor.compact_messages(history, compactor.count_message_tokens(history) // 2, tiers=("clear",))
    assert out[1]["content"] == task
    assert sum(str(m["content"]).startswith(STUB_MARK) for m in out) == 5


def test_pins_survive_every_compaction_and_files_are_read_again(tmp_path: Path) -> None:
    plan = tmp_path / "PLAN.md"
    plan.write_text("1. refund #W1003\n2. confirm by email\n", encoding="utf-8")
    rule = "Never refund without the customer's confirmation."
    auto = AutoCompactor(window=3_000, reserve=1_000, record=False, pin=[rule, plan])
    messages = _history(0)
    seen_versions = set()
    for i in range(40):
        if i == 20:
            plan.write_text("1. refund #W1003 (done)\n2. confirm by email\n3. close the ticket\n",
                            encoding="utf-8")
        messages = auto.maybe_compact([*messages, *_turn(i)])
        if auto.compactions:
            texts = [str(m.get("content")) for m in messages]
            assert texts.count(rule) == 1  # once, however many compactions
            pinned = [t for t in texts if t.startswith(f"[pinned file {plan}]")]
            assert len(pinned) == 1
            seen_versions.add(pinned[0])
            assert auto.tokens(messages) <= auto.trigger_tokens
    assert len(seen_versions) == 2 and any("close the ticket" in v for v in seen_versions)


def test_pins_over_the_budget_are_an_error_naming_them(tmp_path: Path) -> None:
    big = tmp_path / "HUGE.md"
    big.write_text("Read every line. " * 2000, encoding="utf-8")
    with pytest.raises(BudgetError, match=r"HUGE\.md"):
        compactor.compact_messages(_history(10), 500, pin=[big])
    with pytest.raises(InputError, match=r"missing\.md"):
        compactor.compact_messages(_history(10), 500, pin=[tmp_path / "missing.md"])


def test_target_ratio_sets_the_budget_and_its_alias() -> None:
    history = _history(20)
    total = compactor.count_message_tokens(history)
    out = compactor.compact_messages(history, target_ratio=0.3)
    assert out.report["target_tokens"] == int(total * 0.3)
    assert compactor.count_message_tokens(out) <= int(total * 0.3)
    same = compactor.compact_messages(history, target_compression_ratio=0.3)
    assert same == out
    with pytest.raises(InputError, match="target_ratio"):
        compactor.compact_messages(history, target_ratio=1.5)
    with pytest.raises(InputError, match="a budget"):
        compactor.compact_messages(history)


def test_the_latest_request_stays_verbatim_with_the_turns_after_it() -> None:
    history = _history(12)
    request = "Now also check whether order #W1005 was paid with the gift card, please."
    history.append({"role": "user", "content": request})
    for i in range(12, 14):
        history += _turn(i, rows=3)
    out = compactor.compact_messages(history, compactor.count_message_tokens(history) // 3)
    assert any(m.get("content") == request for m in out)


def test_an_empty_value_is_in_no_text() -> None:
    from compactor.plugins.compress.eight_segment.history import contains_value

    assert contains_value("", set(), "") is False
    assert contains_value("x = 1", {"x", "1"}, "") is False


def _mini_histories(count: int) -> list[list[dict[str, Any]]]:
    from ..helpers import EVAL

    path = EVAL / "agent-trajectories-mini-swe-agent-swebench" / "conversations.jsonl"
    if not path.exists():
        pytest.skip(f"no dev data at {path}")
    with path.open(encoding="utf-8") as lines:
        return [json.loads(line)["messages"] for line, _ in zip(lines, range(count), strict=False)]


@pytest.mark.parametrize("ratio", [0.6, 0.9])
def test_a_target_ratio_fills_90_to_100_percent_of_it(ratio: float) -> None:
    # coding-agent histories whose summary alone says all it has in a fraction of the room: the
    # latest turns kept verbatim fill the rest
    for history in _mini_histories(4):
        target = int(compactor.count_message_tokens(history) * ratio)
        out = compactor.compact_messages(history, target_ratio=ratio)
        sent = compactor.count_message_tokens(out)
        assert 0.9 * target <= sent <= target, (sent, target)
        assert out.summary  # still compacted: a summary and the originals behind it
        plain = compactor.compact_messages(history, target)  # a budget is a ceiling, not a target
        assert compactor.count_message_tokens(plain) <= sent


def test_the_cli_target_ratio_fills_it(tmp_path: Path) -> None:
    from ..helpers import run_cli

    history = _mini_histories(1)[0]
    path = tmp_path / "history.json"
    path.write_text(json.dumps(history), encoding="utf-8")
    result = run_cli("conversation", str(path), "--target-ratio", "0.6")
    assert result.returncode == 0, result.stderr
    target = int(compactor.count_message_tokens(history) * 0.6)
    assert 0.9 * target <= compactor.count_message_tokens(json.loads(result.stdout)) <= target


def test_validate_ratio_min_fill_retries_an_under_filled_history() -> None:
    from compactor.pipeline import Pipeline

    history = _mini_histories(1)[0]
    pipeline = Pipeline.from_string(
        "version: 1\nname: fill\nsteps:\n  - use: chunk.messages\n  - use: compress.eight_segment\n"
        "  - use: validate.ratio\n    with: {min_fill: 0.9}\noutput: {format: messages}\n")
    target = int(compactor.count_message_tokens(history) * 0.6)
    out = compactor.compact_messages(history, target, pipeline=pipeline)
    ratio = [s for s in out.report["steps"] if s["step"] == "validate.ratio"]
    details = ratio[-1]["details"]
    attempts = details.get("attempts") or details.get("validate.ratio", {}).get("attempts")
    assert attempts and attempts[0]["tokens"] < 0.9 * target  # the first output under-filled
    assert 0.9 * target <= compactor.count_message_tokens(out) <= target  # the retry filled it


def test_a_room_too_small_for_both_requests_keeps_the_latest_verbatim() -> None:
    # a policy that takes most of the room, a chat that has not reached a tool yet: the opening
    # request gives way to the one the assistant must answer now
    system = {"role": "system", "content": "Policy. " + " ".join(f"Rule {k}: confirm before acting."
                                                                  for k in range(60))}
    history = [system, {"role": "user", "content": "I want to change my flight from New York to Chicago."}]
    for k in range(3):
        history += [{"role": "assistant", "content": f"Sure, could you give me detail {k} of the booking?"},
                    {"role": "user", "content": f"Here is detail {k}: it was booked in May for two people."}]
    latest = "I also need to change the passenger to myself and add 3 checked bags."
    history.append({"role": "user", "content": latest})
    fixed = compactor.count_message_tokens([system])
    budget = fixed + 80
    out = compactor.compact_messages(history, budget)
    assert compactor.count_message_tokens(out) <= budget
    assert out[-1] == history[-1]  # the latest request, verbatim
    assert history[1] not in out  # the opening one went into the summary


def _tau(indices: tuple[int, ...]) -> list[list[dict[str, Any]]]:
    from ..helpers import EVAL

    path = EVAL / "agent-trajectories-tau-bench" / "conversations.jsonl"
    if not path.exists():
        pytest.skip(f"no dev data at {path}")
    lines = path.read_text(encoding="utf-8").splitlines()
    return [json.loads(lines[i])["messages"] for i in indices]


@pytest.mark.parametrize(("share", "runs"), [(0.3, (4, 27, 39)), (0.15, (4, 19))])
def test_the_customers_latest_request_reaches_every_call_of_a_loop(share: float,
                                                                   runs: tuple[int, ...]) -> None:
    # tau-bench runs replayed call by call with a trigger of the system prompt + `share` of the rest:
    # the customer's latest message is sent word for word at every call where it takes at most half
    # the room (a room of 60 to 1500 tokens beside a 1259-token policy)
    for history in _tau(runs):
        system = compactor.count_message_tokens(history[:1])
        trigger = system + int(share * (compactor.count_message_tokens(history) - system))
        auto = AutoCompactor(window=2 * trigger, trigger=trigger, record=False)
        for end, message in enumerate(history):
            if message["role"] != "assistant" or end < 2:
                continue
            view = history[:end]
            sent = list(auto.maybe_compact(view))
            latest = next(m["content"] for m in reversed(view) if m["role"] == "user")
            cost = compactor.count_message_tokens([{"role": "user", "content": latest}])
            if cost > (trigger - system) // 2:
                continue
            assert latest in "\n".join(str(m.get("content")) for m in sent), (end, latest)
        assert auto.compactions >= 1
