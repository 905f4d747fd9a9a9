"""A tool call still waiting for its results at the end of a history: kept whole and last, with the
turns before it, by the plan, compact_messages, AutoCompactor and the command line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import compactor
from compactor.apps.auto import AutoCompactor
from compactor.formats.compaction import pending_call, plan_compaction
from compactor.formats.messages import message_tokens, read_messages, units
from compactor.text.tokens import get_counter

from ...helpers import EVAL, run_cli


def _call(call_id: str, name: str, **arguments: Any) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}


def _dump(messages: list[dict[str, Any]]) -> list[str]:
    return [json.dumps(m, sort_keys=True, ensure_ascii=False) for m in messages]


def _summary_at(out: list[dict[str, Any]]) -> int:
    [at] = [i for i, m in enumerate(out)
            if m["role"] != "system" and str(m.get("content") or "").startswith("[compactor]")]
    return at


def _tau_run_waiting() -> list[dict[str, Any]]:
    """A real tau-bench run (the airline agent, 4,104 tokens) cut just after its last tool call: what
    an agent loop holds between the model's call and running the tool."""
    path = EVAL / "agent-trajectories-tau-bench" / "conversations.jsonl"
    if not path.exists():
        pytest.skip(f"evaluation data not found: {path}")
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    messages = next(r["messages"] for r in rows if r.get("chars", 0) >= 15000)
    last = max(i for i, m in enumerate(messages) if m["role"] == "assistant" and m.get("tool_calls"))
    return list(messages[:last + 1])


def _coding_run_waiting(turns: int = 30) -> list[dict[str, Any]]:
    """A coding agent's run whose last message calls two tools, one already answered."""
    history: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a careful coding agent."},
        {"role": "user", "content": "Find why the nightly export drops rows and fix it."}]
    for i in range(turns):
        history += [{"role": "assistant", "content": f"Reading src/export/part_{i}.py.",
                     "tool_calls": [_call(f"r{i}", "read_file", path=f"src/export/part_{i}.py")]},
                    {"role": "tool", "tool_call_id": f"r{i}",
                     "content": "\n".join(f"def step_{i}_{k}(rows): return rows[{k}:]" for k in range(8))}]
    history += [{"role": "assistant", "content": "Running the export tests and the linter.",
                 "tool_calls": [_call("t1", "bash", command="pytest tests/test_export.py -q"),
                                _call("t2", "bash", command="ruff check src/export")]},
                {"role": "tool", "tool_call_id": "t2", "content": "All checks passed!"}]
    return history


# -- a tool call waiting for its results --------------------------------------------------------------


@pytest.mark.parametrize("budget", [1000, 2000, 4000])
def test_a_real_run_waiting_for_a_tool_keeps_the_call_and_recent_turns(budget: int) -> None:
    history = _tau_run_waiting()
    # its system prompt (1,256 tokens) goes out as an excerpt in 1,000 tokens, as asked
    out = compactor.compact_messages(history, budget, compress_system=budget < 1500)
    assert compactor.count_message_tokens(out) <= budget
    assert _dump(out[-1:]) == _dump(history[-1:])  # the call, byte for byte, last
    at = _summary_at(out)
    # recent turns kept verbatim between the summary and the call, as they were
    tail = out[at + 1:]
    assert len(tail) >= 3, tail
    assert _dump(tail) == _dump(history[len(history) - len(tail):])
    assert not any("latest turn" in note for note in out.report["notes"])
    # everything before the call is a valid request; the call's results will answer it
    complete = units(read_messages([*out, {"role": "tool", "tool_call_id": history[-1]["tool_calls"][0]["id"],
                                           "content": "ok"}]))
    assert all(u.complete for u in complete)


def test_a_call_with_some_of_its_results_stays_whole_and_keep_last_counts_the_turns_before() -> None:
    history = _coding_run_waiting()
    for keep_last in (0, 2):
        out = compactor.compact_messages(history, 1500, keep_last=keep_last)
        assert compactor.count_message_tokens(out) <= 1500
        assert _dump(out[-2:]) == _dump(history[-2:])  # the call and the result it already has
        turns = len(out) - _summary_at(out) - 3  # the messages kept before the call
        assert turns == 2 * keep_last


def test_the_plan_puts_the_pending_call_last_and_the_summary_room_pays_for_it() -> None:
    parsed = read_messages(_coding_run_waiting())
    counter = get_counter("cl100k_base")
    costs = [message_tokens(m, counter) for m in parsed]
    pending = pending_call(parsed)
    assert pending is not None and (pending.start, pending.end) == (len(parsed) - 2, len(parsed))
    plan = plan_compaction(parsed, costs, 1200, keep_last=1)
    assert plan.tail == (len(parsed) - 4, len(parsed) - 3, len(parsed) - 2, len(parsed) - 1)
    assert plan.dropped and plan.dropped[-1] == len(parsed) - 5
    spent = 3 + sum(costs[i] for i in (*plan.head, *plan.tail)) + 3 + counter.count("user")
    assert spent + plan.summary_tokens == 1200
    assert pending_call(parsed[:-2]) is None  # answered calls are not pending


def test_a_pending_call_too_big_for_the_budget_is_summarised_with_a_note_saying_so() -> None:
    history = _coding_run_waiting()
    history[-2] = {**history[-2], "content": "Running the tests. " + "Plan detail. " * 400}
    out = compactor.compact_messages(history, 600)
    assert compactor.count_message_tokens(out) <= 600
    assert all(u.complete for u in units(read_messages(out)))  # nothing orphaned
    [note] = [n for n in out.report["notes"] if "pending tool call" in n]
    assert "summarised" in note and "use a budget of at least" in note


def test_the_command_line_keeps_the_pending_call(tmp_path: Path) -> None:
    history = _coding_run_waiting()
    path = tmp_path / "history.json"
    path.write_text(json.dumps(history), encoding="utf-8")
    result = run_cli("conversation", str(path), "--budget", "1000")
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert compactor.count_message_tokens(out) <= 1000
    assert _dump(out[-2:]) == _dump(history[-2:])
    assert out[-3]["role"] == "tool" and out[-3] == history[-3]  # a recent turn kept before it
    assert "latest turn" not in result.stderr


def test_auto_compactor_and_compact_messages_agree_on_the_pending_call() -> None:
    history = _coding_run_waiting()
    auto = AutoCompactor(window=8000, reserve=2000, record=False)
    direct = compactor.compact_messages(history, 1500)
    looped = auto.compact(history, budget=1500)
    for out in (direct, looped):
        assert compactor.count_message_tokens(out) <= 1500
        assert _dump(out[-2:]) == _dump(history[-2:]) and out[-3] == history[-3]
