"""benchmarks/agent_loop.py: its replay and metrics on a small hand-checked tool-calling history."""

from __future__ import annotations

import importlib.util
import json
import sys
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

from ..helpers import REPO


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    path = REPO / "benchmarks" / "agent_loop.py"
    spec = importlib.util.spec_from_file_location("agent_loop_bench", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    saved = list(sys.path)
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path[:] = saved  # the benchmark puts its folder first, for its helpers
    return module


def call(cid: str, name: str, **args: Any) -> dict[str, Any]:
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


#: One big reservation dump (index 3, about 1,100 tokens) among small messages (each under 40).
ROWS = "\n".join(f"SFO to JFK on 2024-05-{10 + k % 20:02d}, flight HAT{100 + k}, fare class economy, "
                 f"seat {k}A" for k in range(40))
HISTORY: list[dict[str, Any]] = [
    {"role": "system", "content": "You are an airline agent."},
    {"role": "user",
     "content": "Please rebook reservation ABC123 for user mia_li_3668 to the earliest flight."},
    {"role": "assistant", "content": None,
     "tool_calls": [call("c1", "get_reservation_details", reservation_id="ABC123"),
                    call("c2", "get_user_details", user_id="mia_li_3668")]},
    {"role": "tool", "tool_call_id": "c1", "content": "reservation ABC123\n" + ROWS},
    {"role": "tool", "tool_call_id": "c2",
     "content": '{"user_id": "mia_li_3668", "payment_id": "credit_card_4421"}'},
    {"role": "assistant", "content": None,
     "tool_calls": [call("c3", "search_direct_flight", origin="SFO", destination="JFK", date="2024-05-17")]},
    {"role": "tool", "tool_call_id": "c3", "content": '[{"flight_number": "HAT042", "departs": "06:10"}]'},
    {"role": "assistant", "content": None,
     "tool_calls": [call("c4", "update_reservation_flights", reservation_id="ABC123", flight_number="HAT042",
                         payment_id="credit_card_4421")]},
    {"role": "tool", "tool_call_id": "c4",
     "content": '{"status": "ok", "reservation_id": "ABC123", "flight": "HAT042"}'},
    {"role": "assistant", "content": "Done: reservation ABC123 is now on HAT042."},
]
FRAC = 0.5


def test_the_history_is_shaped_as_the_expectations_assume(bench: ModuleType) -> None:
    sizes = [bench.toks([m]) - 3 for m in HISTORY]
    assert sizes[3] > 1000 and max(sizes[:3] + sizes[4:]) < 40
    system = bench.toks(HISTORY[:1])
    trigger = system + int(FRAC * (bench.toks(HISTORY) - system))
    assert 600 < trigger < 700  # below any view holding message 3, far above every view without it
    # calls at 2, 5, 7, 9; what each uses and the view already holds
    assert bench.needed_values(HISTORY[2]) == ["ABC123", "mia_li_3668"]
    assert bench.needed_values(HISTORY[5]) == ["2024-05-17", "JFK", "SFO"]  # only in message 3
    assert bench.needed_values(HISTORY[7]) == ["ABC123", "HAT042", "credit_card_4421"]
    assert bench.needed_values(HISTORY[9]) == ["ABC123", "HAT042"]  # the last line's words with digits


def test_last_and_mask_on_the_views(bench: ModuleType) -> None:
    trigger = 650
    view = HISTORY[:9]
    # keep-last: the oldest go (the request and the big dump with them), from the last call whose
    # results follow it
    assert bench.m_last(view, trigger, {}, "tau") == [HISTORY[0], *HISTORY[5:9]]
    # masking: four tool outputs, the oldest stubbed, the last three whole; then it fits
    masked = bench.m_mask(view, trigger, {}, "tau")
    assert [m["content"] for m in masked if m.get("role") == "tool"] == [
        bench.STUB, HISTORY[4]["content"], HISTORY[6]["content"], HISTORY[8]["content"]]
    assert masked[:3] == HISTORY[:3] and masked[4:] == HISTORY[4:9]
    # with three tool outputs none is stubbed, so still over: keep-last, which cannot start on a result
    assert bench.m_mask(HISTORY[:7], trigger, {}, "tau") == [HISTORY[0], HISTORY[5], HISTORY[6]]
    assert bench.m_last(HISTORY[:5], trigger, {}, "tau") == [HISTORY[0]]  # only c2's result fitted


def test_replay_counts(bench: ModuleType) -> None:
    methods = {k: bench.METHODS[k] for k in ("full", "last", "mask")}
    agg = bench.new_agg(methods)
    bench.replay({"messages": HISTORY}, "tau", FRAC, methods, agg)
    full = agg.pop("_full_tokens")
    assert full == sum(bench.toks(HISTORY[:i]) for i in (2, 5, 7, 9))
    fields = ("calls", "errors", "need_total", "need_kept", "req_total", "req_kept", "over", "broken",
              "breaks")
    got = {k: {f: g[f] for f in fields} for k, g in agg.items()}
    assert got == {
        "full": dict(calls=4, errors=0, need_total=10, need_kept=10, req_total=4, req_kept=4, over=0,
                     broken=0, breaks=0),
        # sent: [0, 1], [0], [0, 5, 6], [0, 5, 6, 7, 8]: values kept 2 + 0 + 1 (HAT042) + 2; the request
        # only at the first call; one break (the second call sends less than the first)
        "last": dict(calls=4, errors=0, need_total=10, need_kept=5, req_total=4, req_kept=1, over=0, broken=0,
                     breaks=1),
        # as last until the fourth call, which sends the whole view with message 3 stubbed: a second
        # break, the request back
        "mask": dict(calls=4, errors=0, need_total=10, need_kept=5, req_total=4, req_kept=2, over=0, broken=0,
                     breaks=2),
    }
    assert agg["full"]["tokens"] == full
    assert agg["last"]["tokens"] == sum(bench.toks(s) for s in (
        HISTORY[:2], HISTORY[:1], [HISTORY[0], *HISTORY[5:7]], [HISTORY[0], *HISTORY[5:9]]))


def test_broken_pairs_and_errors(bench: ModuleType) -> None:
    assert bench.broken(HISTORY) == 0
    assert bench.broken(HISTORY[:8]) == 0  # the last message's own call is waiting for its results
    assert bench.broken([HISTORY[0], *HISTORY[4:]]) == 1  # c2's result without its call
    assert bench.broken([*HISTORY[:3], HISTORY[4], HISTORY[9]]) == 1  # c1 never answered

    def boom(view: list[dict[str, Any]], trigger: int, state: dict[str, Any],
             kind: str) -> list[dict[str, Any]]:
        raise ValueError("no")

    agg = bench.new_agg({"boom": boom})
    bench.replay({"messages": HISTORY}, "tau", FRAC, {"boom": boom}, agg)
    assert agg["boom"]["errors"] == 4 and agg["boom"]["need_kept"] == 0 and agg["boom"]["tokens"] == 4 * 3
    assert agg["boom"]["error_samples"] == ["ValueError: no"] * 3


def test_tier_reports_are_summed_once_per_compaction(bench: ModuleType) -> None:
    report = {"tiers": {"clear": {"ran": True, "saved": 120}, "summary": {"ran": False, "saved": 0}}}
    auto = SimpleNamespace(compactions=1, last=SimpleNamespace(report=report))
    a: dict[str, Any] = {}
    state = {"auto": auto}
    bench.note_tiers(a, state)
    bench.note_tiers(a, state)  # no new compaction: nothing added
    auto.compactions = 2
    bench.note_tiers(a, state)
    assert a["tiers"] == {"compactions": 2, "clear": {"ran": 2, "saved": 240},
                          "summary": {"ran": 0, "saved": 0}}
    b: dict[str, Any] = {}
    bench.note_tiers(b, {"auto": SimpleNamespace(compactions=1, last=SimpleNamespace(report={}))})
    assert "tiers" not in b  # a compactor without the report prints nothing


def test_a_compactor_refusing_tiers_is_left_out(bench: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(window: int, **options: Any) -> None:
        if "tiers" in options:
            raise TypeError("unexpected keyword argument 'tiers'")

    monkeypatch.setattr(bench.compactor, "AutoCompactor", refuse)
    assert "tiers" in (bench.unavailable("compactor:clear") or "")
