"""AutoCompactor: the trigger, repeated compaction that keeps earlier summaries and ids, counters."""

from __future__ import annotations

import json

import pytest

import compactor
from compactor.apps.auto import AutoCompactor, Compaction


def _turn(i: int) -> list[dict]:
    call = {"id": f"call{i}", "type": "function",
            "function": {"name": "get_order", "arguments": json.dumps({"order_id": f"#W{1000 + i}"})}}
    result = {"order_id": f"#W{1000 + i}", "status": "delivered" if i % 3 else "pending",
              "items": [{"name": f"item-{i}", "price": 10 + i}]}
    return [{"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"call{i}", "content": json.dumps(result)},
            {"role": "assistant", "content": f"Order #W{1000 + i} costs {10 + i} dollars."}]


def _pairs_intact(messages: list[dict]) -> bool:
    """Every tool message answers a call of the assistant message just before its run of results."""
    open_calls: set[str] = set()
    for m in messages:
        if m.get("role") == "assistant":
            open_calls = {c["id"] for c in m.get("tool_calls") or []}
        elif m.get("role") == "tool":
            if m.get("tool_call_id") not in open_calls:
                return False
        else:
            open_calls = set()
    return True


def _loop(auto: AutoCompactor, turns: int) -> list[dict]:
    messages = [{"role": "system", "content": "You are a support agent for an online shop."},
                {"role": "user", "content": "Please check all my orders and refund order #W1003."}]
    for i in range(turns):
        messages = auto.maybe_compact([*messages, *_turn(i)])
        assert auto.tokens(messages) <= auto.trigger_tokens
        assert _pairs_intact(messages)
    return messages


def test_trigger_from_reserve_fraction_or_default() -> None:
    assert AutoCompactor(10_000, reserve=2_000).trigger_tokens == 8_000
    assert AutoCompactor(10_000, trigger=0.9).trigger_tokens == 9_000
    assert AutoCompactor(10_000, trigger=7_000).trigger_tokens == 7_000
    assert AutoCompactor(45_000).trigger_tokens == 36_000  # the seeds' 45k x 0.8
    assert AutoCompactor(10_000, reserve=2_000, target=0.25).target_tokens == 2_000


@pytest.mark.parametrize("kwargs", [{"window": 0}, {"window": 1000, "reserve": 1000},
                                    {"window": 1000, "reserve": 10, "trigger": 0.5},
                                    {"window": 1000, "trigger": 1.5}, {"window": 1000, "trigger": 2000},
                                    {"window": 1000, "target": 0.0}, {"window": 1000, "tools_tokens": -1}])
def test_bad_settings_name_the_option(kwargs: dict) -> None:
    with pytest.raises(compactor.InputError):
        AutoCompactor(**kwargs)


def test_under_the_trigger_nothing_changes() -> None:
    auto = AutoCompactor(100_000)
    messages = [{"role": "user", "content": "hello"}]
    out = auto.maybe_compact(messages)
    assert out == messages and out is not messages
    assert out[0] is messages[0]
    assert auto.compactions == 0 and auto.checks == 1 and auto.tokens_saved == 0


def test_repeated_compaction_keeps_earlier_ids_and_counts() -> None:
    seen: list[Compaction] = []
    auto = AutoCompactor(window=2_400, reserve=600, target=0.5, on_compact=seen.append)
    messages = _loop(auto, 70)
    assert auto.compactions >= 2 and len(seen) == auto.compactions
    assert auto.tokens_saved == sum(c.tokens_before - c.tokens_after for c in seen) > 0
    assert all(c.tokens_after < c.tokens_before for c in seen)
    # the request keeps the system message and the opening request verbatim
    assert messages[0]["role"] == "system" and "refund order #W1003" in messages[1]["content"]
    # ids the first compaction dropped are still expandable after the later ones
    first = seen[0].dropped_ids
    originals = auto.expand(first[:3])
    assert any("#W1000" in text for text in originals.values())
    # the latest summary cites the earlier summary's ids (it was summarised in turn)
    summary = next(m["content"] for m in messages if m["content"] and m["content"].startswith("[compactor]"))
    assert "expand_context" in summary
    stats = auto.stats()
    assert stats["compactions"] == auto.compactions and stats["last"]["tokens_after"] == seen[-1].tokens_after


def test_expand_call_answers_with_originals(tmp_path) -> None:
    auto = AutoCompactor(window=2_000, reserve=500, store=str(tmp_path / "auto.db"))
    _loop(auto, 40)
    assert auto.compactions >= 1
    wanted = auto.history[0].dropped_ids[1]
    call = {"id": "x1", "type": "function",
            "function": {"name": "expand_context", "arguments": json.dumps({"ids": [wanted]})}}
    reply = auto.handle_expand_call(call)
    assert reply["role"] == "tool" and reply["tool_call_id"] == "x1"
    assert wanted in reply["content"] and "order_id" in reply["content"]
    # the store is a real SQLite file another process could read
    assert compactor.expand([wanted], str(tmp_path / "auto.db"))[wanted] == auto.expand([wanted])[wanted]


def test_compact_now_whatever_the_size() -> None:
    auto = AutoCompactor(window=50_000)
    messages = [{"role": "user", "content": "Start."}]
    for i in range(12):
        messages += _turn(i)
    out = auto.compact(messages)
    assert auto.compactions == 1 and auto.tokens(out) <= auto.target_tokens


def test_import_compactor_is_lazy_about_it() -> None:
    import subprocess
    import sys

    code = "import sys, compactor; print('compactor.apps.auto' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True).stdout.strip() == "False"
    assert compactor.AutoCompactor is AutoCompactor


def test_compactions_are_runs_the_monitor_lists(tmp_path) -> None:
    from compactor.ops.monitor import rolling_stats

    path = str(tmp_path / "runs.sqlite")
    auto = AutoCompactor(window=2_400, reserve=600, store=path)
    _loop(auto, 70)
    stats = rolling_stats(compactor.open_store(path))["auto-compaction"]
    assert stats["runs"] == auto.compactions >= 2
    assert 0 < stats["mean_ratio"] < 1 and stats["success_rate"] == 1.0
    quiet = AutoCompactor(window=2_400, reserve=600, record=False)
    _loop(quiet, 40)
    assert quiet.compactions and quiet.store.runs() == []


def _history(turns: int, system: str = "You are a support agent.") -> list[dict]:
    messages = [{"role": "system", "content": system}, {"role": "user", "content": "Check my orders."}]
    for i in range(turns):
        messages += _turn(i)
    return messages


def test_a_call_waiting_for_its_results_stays_after_the_summary() -> None:
    # the loop compacts between the model's call and running the tools: the results it appends next
    # must still answer a call in the request, so the pending call (and results so far) stay verbatim
    auto = AutoCompactor(window=3_000, reserve=1_000)
    calls = [{"id": f"p{k}", "type": "function", "function": {"name": "get_order", "arguments": "{}"}}
             for k in range(2)]
    pending = {"role": "assistant", "content": None, "tool_calls": calls}
    messages = [*_history(40), pending]
    out = auto.maybe_compact(messages)
    assert auto.compactions == 1 and out[-1] == pending and out.summary is not None
    assert out[-2]["role"] == "assistant" and out[-2]["content"].startswith("Order #W1039")  # tail kept
    assert auto.tokens(out) <= auto.target_tokens
    first = {"role": "tool", "tool_call_id": "p0", "content": "{\"status\": \"pending\"}"}
    out = auto.compact([*messages, first])
    assert out[-2:] == [pending, first]
    assert _pairs_intact([*out, {"role": "tool", "tool_call_id": "p1", "content": "{}"}])


def test_a_system_prompt_bigger_than_the_target_does_not_fail_the_loop() -> None:
    # the system prompt alone is past the target (750) but under the trigger (1,500): compacting
    # takes more of the room below the trigger instead of raising BudgetError mid-loop
    auto = AutoCompactor(window=2_000, reserve=500)
    messages = _history(0, system="Rule: always be polite to the customer. " * 110)
    assert auto.target_tokens < auto.tokens(messages[:1]) < auto.trigger_tokens
    for i in range(30):
        messages = auto.maybe_compact([*messages, *_turn(i)])
        assert auto.tokens(messages) <= auto.trigger_tokens
        assert messages[0]["content"].startswith("Rule: always")
    assert auto.compactions >= 2
    # past the trigger the system prompt goes out as an excerpt, with one warning
    huge = AutoCompactor(window=2_000, reserve=500)
    with pytest.warns(UserWarning, match="compress_system"):
        out = huge.maybe_compact(_history(30, system="Rule: always be polite. " * 400))
    assert huge.tokens(out) <= huge.trigger_tokens
    assert out[0]["content"] != "Rule: always be polite. " * 400
    assert any("excerpt" in w for w in out.report["warnings"])
    # and where nothing fits (pins larger than the trigger) the error says so
    pinned = AutoCompactor(window=2_000, reserve=500, pin=["Never refund without a receipt. " * 300])
    with pytest.raises(compactor.BudgetError, match="pins take"):
        pinned.maybe_compact(_history(30))


def test_a_loop_that_keeps_the_full_history_is_not_compacted_from_scratch_every_turn() -> None:
    auto = AutoCompactor(window=2_400, reserve=600)
    full = [{"role": "system", "content": "You are a support agent for an online shop."},
            {"role": "user", "content": "Please check all my orders and refund order #W1003."}]
    sent = []
    for i in range(80):
        full += _turn(i)
        sent = auto.maybe_compact(full)  # the loop passes its whole history every time
        assert auto.tokens(sent) <= auto.trigger_tokens
        assert _pairs_intact(sent)
    # compacted about as often as a loop that passes back the compacted list, not at every turn
    assert 2 <= auto.compactions <= auto.checks // 5
    other = AutoCompactor(window=2_400, reserve=600)
    _loop(other, 80)
    assert auto.compactions <= other.compactions + 1
    # the last turns sent are the last turns of the full history
    assert sent[-1] == full[-1]
    forgetful = AutoCompactor(window=2_400, reserve=600, remember=False)
    for i in range(1, 30):
        forgetful.maybe_compact(full[: 2 + 3 * (50 + i)])
    assert forgetful.compactions == 29  # without the memo every call past the trigger compacts


def test_editing_what_was_sent_does_not_leak_into_later_turns() -> None:
    auto = AutoCompactor(window=2_400, reserve=600)
    full = [{"role": "system", "content": "You are a support agent."},
            {"role": "user", "content": "Check my orders."}]
    for i in range(40):
        full += _turn(i)
        sent = auto.maybe_compact(full)
        if auto.compactions:
            break
    summary = next(m for m in sent if str(m.get("content") or "").startswith("[compactor]"))
    summary["content"] = "EDITED BY THE CALLER"
    full += _turn(99)
    again = auto.maybe_compact(full)
    assert all(m.get("content") != "EDITED BY THE CALLER" for m in again)


def test_extra_tokens_count_for_one_call_and_leave_tools_tokens_alone() -> None:
    # one compactor shared by two loops: one counts its request's own overhead (extra_tokens) for its
    # call; the other, polling all the while, sees tools_tokens and the trigger as configured
    import threading

    during: list[int] = []
    auto = AutoCompactor(window=3_000, reserve=1_000, tools_tokens=100, on_compact=lambda _: during.append(
        auto.tools_tokens))
    history = _history(12)
    extra = auto.trigger_tokens - auto.tokens(history) + 50  # over the trigger only with the extra
    assert extra > 0 and not auto.should_compact(history) and auto.should_compact(history, extra_tokens=extra)
    other = _history(10)
    seen: list[tuple[int, bool]] = []
    done = threading.Event()

    def other_loop() -> None:
        while not done.is_set():
            seen.append((auto.tools_tokens, auto.should_compact(other)))

    watcher = threading.Thread(target=other_loop)
    watcher.start()
    try:
        assert auto.maybe_compact(history) == history  # without the extra: under the trigger
        out = auto.maybe_compact(history, extra_tokens=extra)
    finally:
        done.set()
        watcher.join()
    assert auto.compactions == 1 and during == [100] and auto.tools_tokens == 100
    assert seen and set(seen) == {(100, False)}
    # the room the history was compacted into leaves the extra out; tokens_after counts it
    assert auto.tokens(out, extra_tokens=extra) <= auto.trigger_tokens
    assert auto.history[-1].tokens_after == auto.tokens(out, extra_tokens=extra)
    assert auto.history[-1].tokens_before == auto.tokens(history, extra_tokens=extra)
    with pytest.raises(compactor.InputError, match="extra_tokens"):
        auto.maybe_compact(history, extra_tokens=-1)
    with pytest.raises(compactor.InputError, match="extra_tokens"):
        auto.compact(history, extra_tokens=True)  # type: ignore[arg-type]


def test_an_unknown_keyword_is_refused_when_built_with_the_closest_one() -> None:
    with pytest.raises(compactor.InputError, match=r"keep_lst: unknown option; did you mean keep_last\?"):
        AutoCompactor(10_000, keep_lst=3)
    with pytest.raises(compactor.InputError, match=r"tools_tokes: unknown option; did you mean tools_tokens"):
        AutoCompactor(10_000, tools_tokes=300)
    with pytest.raises(compactor.InputError, match=r"keep_tool_result: unknown option; did you mean "
                                                   r"keep_tool_results\?"):
        AutoCompactor(10_000, keep_tool_result=2)
    with pytest.raises(compactor.InputError, match=r"budgett: unknown option; did you mean budget\?"):
        compactor.compact_messages([{"role": "user", "content": "hi"}], budgett=100)
    with pytest.raises(compactor.InputError, match="format must be one of"):
        AutoCompactor(10_000, format="claude")
    assert AutoCompactor(10_000, keep_tool_results=2, exclude_tools=["read_file"]).compactions == 0


def test_keep_last_and_tiers_for_one_compaction_leave_the_settings_alone() -> None:
    """A caller's per-call `keep_last` and `tiers` shape that compaction only; a bad one is refused
    as the settings would be."""
    auto = compactor.AutoCompactor(window=6_000, reserve=2_000, keep_last=2)
    history = [{"role": "user", "content": "Check every order."}]
    for i in range(40):
        history += [{"role": "assistant", "content": f"Order {i} looked up: delivered on day {i}. " * 6},
                    {"role": "user", "content": f"Thanks, next one is {i + 1}."}]
    once = auto.compact(history, keep_last=6, tiers=("summary",))
    assert once.report["tiers"]["summary"]["used"] and set(once.report["tiers"]) == {"summary"}
    assert [m["content"] for m in once[-6:]] == [m["content"] for m in history[-6:]]
    again = auto.compact(history)
    assert again[-3]["content"] != history[-3]["content"]  # the settings' keep_last=2 again
    assert "clear" in again.report["tiers"]  # and the settings' tiers
    with pytest.raises(compactor.InputError, match="keep_last"):
        auto.compact(history, keep_last=-1)
