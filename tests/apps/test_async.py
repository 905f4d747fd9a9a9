"""The async faces: the same results as the sync ones, and an event loop that keeps running meanwhile."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

import compactor
from compactor.apps.auto import AutoCompactor

from .. import openai_server as fake
from ..openai_server import FakeOpenAI, Reply

openai_server = fake.openai_server


def _history(turns: int) -> list[dict[str, Any]]:
    history: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a support agent for an online shop."},
        {"role": "user", "content": "Please check all my orders and refund order #W1003."}]
    for i in range(turns):
        call = {"id": f"call{i}", "type": "function",
                "function": {"name": "get_order", "arguments": json.dumps({"order_id": f"#W{1000 + i}"})}}
        result = {"order_id": f"#W{1000 + i}", "status": "delivered" if i % 3 else "pending",
                  "items": [{"name": f"item-{i}-{k}", "price": 10 + k} for k in range(6)]}
        history += [{"role": "assistant", "content": None, "tool_calls": [call]},
                    {"role": "tool", "tool_call_id": f"call{i}", "content": json.dumps(result)},
                    {"role": "assistant", "content": f"Order #W{1000 + i} costs {10 + i} dollars."},
                    {"role": "user", "content": f"And order #W{1001 + i}?"}]
    return history


async def _ticking(work: Callable[[], Awaitable[Any]]) -> tuple[Any, float, int, float]:
    """Run `work` beside a task that ticks every 5 ms: the result, the longest gap between two
    ticks, how many ticks there were and how long the work took."""
    gaps: list[float] = []
    done = asyncio.Event()

    async def tick() -> None:
        last = time.perf_counter()
        while not done.is_set():
            await asyncio.sleep(0.005)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    ticker = asyncio.create_task(tick())
    await asyncio.sleep(0.01)
    started = time.perf_counter()
    result = await work()
    seconds = time.perf_counter() - started
    done.set()
    await ticker
    return result, max(gaps), len(gaps), seconds


def test_acompact_messages_equals_the_sync_result_and_leaves_the_loop_running() -> None:
    history = _history(260)
    sync = compactor.compact_messages(history, 3_000, session="s")
    result, gap, ticks, seconds = asyncio.run(_ticking(
        lambda: compactor.acompact_messages(history, 3_000, session="s")))
    assert list(result) == list(sync) and result.report["dropped_ids"] == sync.report["dropped_ids"]
    assert ticks >= 10 and gap < seconds / 3, (gap, seconds)  # blocking would leave one gap of it all


def test_amaybe_compact_equals_maybe_compact_and_keeps_the_loop_running() -> None:
    history = _history(260)
    sync = AutoCompactor(16_000, trigger=8_000, session="a").maybe_compact(history)
    auto = AutoCompactor(16_000, trigger=8_000, session="a")
    result, gap, ticks, seconds = asyncio.run(_ticking(lambda: auto.amaybe_compact(history)))
    assert list(result) == list(sync) and auto.compactions == 1
    assert ticks >= 10 and gap < seconds / 3, (gap, seconds)  # blocking would leave one gap of it all
    small = asyncio.run(auto.amaybe_compact(history[:6]))
    assert small == history[:6] and auto.compactions == 1
    again = asyncio.run(auto.acompact(history[:40], extra_tokens=100, format="chat"))
    assert isinstance(again, compactor.CompactedMessages) and auto.compactions == 2


def test_acompress_equals_compress() -> None:
    text = " ".join(f"Sentence {i} says the build failed at step {i % 7} with code E{i}." for i in range(300))
    sync = compactor.compress(text, query="what failed?", budget=200)
    result = asyncio.run(compactor.acompress(text, query="what failed?", budget=200))
    assert result == sync and len(result) < len(text)


def test_a_slow_llm_rewrite_does_not_block_the_loop(openai_server: FakeOpenAI) -> None:
    openai_server.default = Reply(content="A short prose summary without sections.", delay=0.6)
    history = _history(40)
    settings = {"model": "m", "base_url": openai_server.base_url, "api_key": "sk-test", "max_retries": 0}
    result, gap, ticks, seconds = asyncio.run(_ticking(
        lambda: compactor.acompact_messages(history, 1_500, llm=settings)))
    assert openai_server.requests and seconds >= 0.6
    assert result.report["method"] == "rules" and result.summary  # the prose was refused, rules kept
    assert ticks >= 20 and gap < 0.3, (gap, ticks)  # blocking would leave a gap of 0.6 s or more


def test_async_faces_refuse_what_the_sync_ones_refuse() -> None:
    with pytest.raises(compactor.InputError, match="keep_lst: unknown option; did you mean keep_last"):
        asyncio.run(compactor.acompact_messages(_history(2), 500, keep_lst=3))
    with pytest.raises(compactor.InputError, match="budget must be a positive number"):
        asyncio.run(AutoCompactor(10_000).acompact(_history(2), budget=0))
