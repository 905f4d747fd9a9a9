"""compactor.integrations.openai_agents: the SDK's Runner over several turns against the local
OpenAI-compatible server, with a CompactorSession that compacts the history under a budget."""

from __future__ import annotations

import asyncio
import copy
import itertools
import json
import re
import subprocess
import sys
import time
from typing import Any

import pytest

agents = pytest.importorskip("agents")

from agents import Agent, OpenAIChatCompletionsModel, RunConfig, Runner, function_tool  # noqa: E402
from agents.memory import Session  # noqa: E402
from openai import AsyncOpenAI  # noqa: E402

import compactor  # noqa: E402
from compactor.errors import CompactorError  # noqa: E402
from compactor.formats.clearing import STUB_MARK, stub_ref  # noqa: E402
from compactor.integrations.openai_agents import (  # noqa: E402
    CompactorSession,
    drop_orphan_outputs,
    from_compaction,
    to_messages,
)

from ..openai_server import FakeOpenAI, Recorded, Reply  # noqa: E402

WINDOW = 5_000
ID = re.compile(r"\b[0-9a-f]{16}-\d{4}")  # a cited id, or the first of a cited range


def _order(order_id: str) -> dict[str, Any]:
    n = int(order_id.strip("#W"))
    return {"order_id": order_id, "status": "delivered" if n % 3 else "pending",
            "tracking": f"TRK-{n}-{n * 7919 % 100_000:05d}",
            "items": [{"sku": f"SKU-{n}-{k}", "name": f"widget {k} of order {n}", "price": 10 + k + n % 7,
                       "warehouse": ["Reno", "Dayton", "Leeds"][k % 3]} for k in range(14)]}


@function_tool
def get_order(order_id: str) -> str:
    """Look up an order by its id (like #W1003) and return it as JSON."""
    return json.dumps(_order(order_id))


def _completion(message: dict[str, Any], model: str) -> str:
    return json.dumps({"id": "chatcmpl-test", "object": "chat.completion", "created": int(time.time()),
                       "model": model,
                       "choices": [{"index": 0, "logprobs": None, "message": message,
                                    "finish_reason": "tool_calls" if message.get("tool_calls") else "stop"}],
                       "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}})


class Script:
    """The scripted model: a user line `order #W...` gets a get_order call, `expand` an
    expand_context call for an id the summary in the request cites; a tool result gets a reply."""

    def __init__(self) -> None:
        self.calls = itertools.count()
        self.expanded: list[str] = []

    def __call__(self, request: Recorded) -> Reply:
        messages = request.json["messages"]
        last = messages[-1]
        model = str(request.json.get("model"))
        if last["role"] == "user" and last["content"].startswith("order "):
            return self._call("get_order", {"order_id": last["content"].split()[1]}, model)
        if last["role"] == "user" and last["content"] == "expand":
            summary = next(m["content"] for m in messages if str(m.get("content")).startswith("[compactor]"))
            wanted = ID.findall(summary)[0]
            self.expanded.append(wanted)
            return self._call("expand_context", {"ids": [wanted]}, model)
        if last["role"] == "tool":
            return Reply(body=_completion({"role": "assistant", "content": f"Done: {last['content'][:60]}"},
                                          model))
        return Reply(content="How can I help?")

    def _call(self, name: str, args: dict[str, Any], model: str) -> Reply:
        call = {"id": f"call_{next(self.calls)}", "type": "function",
                "function": {"name": name, "arguments": json.dumps(args)}}
        return Reply(body=_completion({"role": "assistant", "content": None, "tool_calls": [call]}, model))


def _valid_chat(messages: list[dict[str, Any]]) -> bool:
    """Every tool message answers a call of the assistant message before its run of results, and
    every call is answered."""
    open_calls: set[str] = set()
    for m in messages:
        if m["role"] == "tool":
            if m.get("tool_call_id") not in open_calls:
                return False
            open_calls.discard(m["tool_call_id"])
            continue
        if open_calls:
            return False  # a call left unanswered
        if m["role"] == "assistant":
            open_calls = {c["id"] for c in m.get("tool_calls") or []}
    return not open_calls


def _request_tokens(request: Recorded) -> int:
    counter = compactor.get_counter("cl100k_base")
    tools = counter.count(json.dumps(request.json.get("tools") or []))
    return compactor.count_message_tokens(request.json["messages"]) + tools


async def _conversation(server: FakeOpenAI, session: CompactorSession, lines: list[str]) -> list[str]:
    client = AsyncOpenAI(base_url=server.base_url, api_key="sk-test", max_retries=0)
    model = OpenAIChatCompletionsModel(model="test-model", openai_client=client)
    agent = Agent(name="support", instructions="You are a support agent for an online shop.",
                  tools=[get_order, session.expand_tool()], model=model)
    config = RunConfig(tracing_disabled=True)
    outputs = []
    for line in lines:
        result = await Runner.run(agent, line, session=session, run_config=config)
        outputs.append(str(result.final_output))
    await client.close()
    return outputs


@pytest.fixture
def scripted() -> Any:
    with FakeOpenAI() as server:
        server.respond = Script()
        yield server


def test_runner_over_many_turns_sends_a_compacted_valid_history(scripted: FakeOpenAI, tmp_path) -> None:
    session = CompactorSession("shop-1", window=WINDOW, reserve=2_500, tools_tokens=300,
                               store=str(tmp_path / "compactor.db"), items=str(tmp_path / "agent.db"))
    lines = [f"order #W{1000 + i}" for i in range(10)] + ["expand"]
    outputs = asyncio.run(_conversation(scripted, session, lines))
    assert outputs[0].startswith("Done: {\"order_id\": \"#W1000\"")
    requests = scripted.requests
    assert len(requests) == 2 * len(lines)
    for request in requests:
        messages = request.json["messages"]
        assert messages[0] == {"role": "system", "content": "You are a support agent for an online shop."}
        assert _valid_chat(messages), messages
        assert _request_tokens(request) <= WINDOW
    # the history grew past the trigger and was compacted, at least twice, with a summary in requests
    assert session.compactions >= 2 and session.tokens_saved > 0
    compacted = [r for r in requests if any(str(m.get("content")).startswith("[compactor")  # a summary
                                            or STUB_MARK in str(m.get("content"))  # or a cleared output
                                            for m in r.json["messages"])]
    assert len(compacted) >= len(requests) // 2
    assert any(str(m.get("content")).startswith("[compactor]") for r in requests for m in r.json["messages"])
    # the turn's request reaches the model word for word at each of its calls
    for k, request in enumerate(requests):
        assert {"role": "user", "content": lines[k // 2]} in request.json["messages"], k
    # without compaction the last request would have carried every order
    full = sum(len(json.dumps(_order(f"#W{1000 + i}"))) for i in range(10))
    assert len(json.dumps(requests[-1].json["messages"])) < full / 2
    # the model expanded an id its summary cited and got the original text back through the tool
    wanted = scripted.respond.expanded[0]
    original = session.expand([wanted])[wanted]
    answer = requests[-1].json["messages"][-1]
    assert answer["role"] == "tool" and f"[{wanted}]\n{original}" in answer["content"]
    assert original.strip() and "error" not in answer["content"][:10]
    # after several compactions every range the last summary cites still expands, back to the
    # first order's tool output in full, and the ids the first compaction dropped are still there
    summary = next(m["content"] for m in requests[-2].json["messages"]
                   if str(m.get("content")).startswith("[compactor]"))
    ranges = re.findall(r"[0-9a-f]{16}-\d{4}\.\.\d{4}", summary)
    originals = session.expand(ranges)
    assert any(json.dumps(_order("#W1000")) in text for text in originals.values())
    first_dropped = session.auto.history[0].dropped_ids
    assert set(session.expand(first_dropped)) == set(first_dropped)
    # every stored item is kept as it came, all 10 orders in full
    stored = asyncio.run(session.items.get_items())
    outputs_stored = [i["output"] for i in stored if i.get("type") == "function_call_output"]
    assert [json.loads(o)["order_id"] for o in outputs_stored[:10]] == [f"#W{1000 + i}" for i in range(10)]


def test_compacted_view_survives_a_new_process(scripted: FakeOpenAI, tmp_path) -> None:
    paths = {"store": str(tmp_path / "c.db"), "items": str(tmp_path / "a.db")}
    first = CompactorSession("s", window=WINDOW, reserve=2_500, tools_tokens=300, **paths)
    asyncio.run(_conversation(scripted, first, [f"order #W{2000 + i}" for i in range(6)]))
    assert first.compactions >= 1
    view = asyncio.run(first.get_items())
    again = CompactorSession("s", window=WINDOW, reserve=2_500, tools_tokens=300, **paths)
    assert asyncio.run(again.get_items()) == view and again.compactions == 0
    # a summary or a cleared output (the cheap tier first): either cites ids the new process expands
    compacted = "\n".join(str(i.get("content") or i.get("output") or "") for i in view
                          if str(i.get("content") or i.get("output") or "").startswith("[compactor"))
    cited = ID.findall(compacted)
    assert cited and again.expand(cited[:1])


def test_session_protocol_as_the_sdk_documents() -> None:
    session = CompactorSession("p", window=100_000)
    assert isinstance(session, Session)

    async def go() -> None:
        assert await session.get_items() == [] and await session.pop_item() is None
        items = [{"role": "user", "content": "hi"},
                 {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
                 {"type": "function_call_output", "call_id": "c1", "output": "42"},
                 {"role": "assistant", "content": "It is 42."}]
        await session.add_items(items)  # type: ignore[arg-type]
        assert await session.get_items() == items  # under the trigger: as stored
        assert await session.get_items(limit=2) == items[2:]  # the latest N, in order
        assert await session.pop_item() == items[3]
        assert await session.get_items() == items[:3]
        await session.clear_session()
        assert await session.get_items() == [] and await session.get_items(limit=3) == []

    asyncio.run(go())


def _lookup(i: int, reply: str) -> list[dict[str, Any]]:
    """One exchange as the runner stores it: a request, a get_order call, its output, a reply."""
    return [{"role": "user", "content": f"order #W{3000 + i}"},
            {"type": "function_call", "call_id": f"c{i}", "name": "get_order",
             "arguments": json.dumps({"order_id": f"#W{3000 + i}"})},
            {"type": "function_call_output", "call_id": f"c{i}",
             "output": json.dumps(_order(f"#W{3000 + i}"))},
            {"role": "assistant", "content": reply}]


def test_pop_after_compaction_recompacts_from_the_stored_items() -> None:
    session = CompactorSession("q", window=3_000, reserve=1_200, keep_last=2)

    async def go() -> None:
        for i in range(8):
            await session.add_items(_lookup(i, f"Order #W{3000 + i} found."))  # type: ignore[arg-type]
        view = await session.get_items()
        assert session.compactions == 1 and len(view) < 32
        assert await session.get_items() == view and session.compactions == 1  # checkpoint, no rework
        popped = await session.pop_item()
        assert popped == {"role": "assistant", "content": "Order #W3007 found."}
        after = await session.get_items()
        assert session.compactions == 2 and popped not in after
        assert after[-1]["type"] == "function_call_output" and after[-1]["call_id"] == "c7"
        assert session.stats()["covered_items"] == 31

    asyncio.run(go())


def test_items_to_messages_pairs_calls_and_keeps_reasoning_with_its_turn() -> None:
    items = [{"role": "user", "content": [{"type": "input_text", "text": "check"},
                                          {"type": "input_image", "image_url": "http://x/y.png"}]},
             {"type": "reasoning", "id": "rs_1", "summary": []},
             {"type": "message", "role": "assistant", "id": "msg_1",
              "content": [{"type": "output_text", "text": "Looking.", "annotations": []}]},
             {"type": "function_call", "call_id": "a", "name": "f", "arguments": "{\"x\": 1}"},
             {"type": "function_call", "call_id": "b", "name": "g", "arguments": "{}"},
             {"type": "function_call_output", "call_id": "a", "output": "one"},
             {"type": "function_call_output", "call_id": "b",
              "output": [{"type": "input_text", "text": "two"}]},
             {"type": "web_search_call", "id": "ws_1", "status": "completed", "action": {"query": "q"}},
             {"type": "function_call_output", "call_id": "zz", "output": "orphan"}]
    messages, owners = to_messages(items)
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "tool", "assistant", "assistant"]
    assert messages[0]["content"] == "check\n[input_image]"
    assert messages[1]["content"] == "Looking." and [c["id"] for c in messages[1]["tool_calls"]] == ["a", "b"]
    assert owners[1] == [1, 2, 3, 4] and messages[3]["content"] == "two"
    assert messages[4]["content"].startswith("[web_search_call]")
    assert drop_orphan_outputs(items) == items[:-1]


def test_import_compactor_does_not_load_the_sdk() -> None:
    code = ("import sys, compactor; compactor.AutoCompactor; import compactor.integrations; "
            "print('agents' in sys.modules, 'compactor.integrations.openai_agents' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


class ManyCalls:
    """The scripted model for one long run: a get_order call per model request until `calls` results
    are in, then a final answer."""

    def __init__(self, calls: int) -> None:
        self.calls = calls
        self.count = itertools.count()

    def __call__(self, request: Recorded) -> Reply:
        model = str(request.json.get("model"))
        done = sum(1 for m in request.json["messages"] if m["role"] == "tool")
        n = next(self.count)
        if n >= self.calls:
            return Reply(body=_completion({"role": "assistant", "content": f"Checked {done} orders."}, model))
        call = {"id": f"call_{n}", "type": "function",
                "function": {"name": "get_order", "arguments": json.dumps({"order_id": f"#W{1000 + n}"})}}
        return Reply(body=_completion({"role": "assistant", "content": None, "tool_calls": [call]}, model))


async def _long_run(server: FakeOpenAI, session: CompactorSession) -> str:
    """One Runner run of many tool calls (14 orders) with the session's input filter."""
    client = AsyncOpenAI(base_url=server.base_url, api_key="sk-test", max_retries=0)
    model = OpenAIChatCompletionsModel(model="test-model", openai_client=client)
    agent = Agent(name="support", instructions="You are a support agent for an online shop.",
                  tools=[get_order, session.expand_tool()], model=model)
    result = await Runner.run(agent, "check orders #W1000 to #W1013", session=session, max_turns=30,
                              run_config=session.run_config(tracing_disabled=True))
    await client.close()
    return str(result.final_output)


def test_the_input_filter_compacts_within_one_long_run(tmp_path) -> None:
    session = CompactorSession("long-run", window=WINDOW, reserve=2_500, tools_tokens=300,
                               store=str(tmp_path / "compactor.db"))

    with FakeOpenAI() as server:
        server.respond = ManyCalls(14)
        final = asyncio.run(_long_run(server, session))
        requests = list(server.requests)
    assert final.startswith("Checked")
    assert len(requests) == 15 and session.compactions >= 2  # compacted inside the one run
    for request in requests:
        messages = request.json["messages"]
        assert messages[0]["role"] == "system" and _valid_chat(messages)
        assert _request_tokens(request) <= WINDOW - 2_500 + 300  # trigger, with the schemas measured apart
    last = requests[-1].json["messages"]
    summary = next(m["content"] for m in last if str(m.get("content")).startswith("[compactor]"))
    cited = ID.findall(summary)[0]
    assert "order_id" in session.expand([cited])[cited] or "check orders" in session.expand([cited])[cited]
    # without the filter the same run sends the whole growing history
    plain = CompactorSession("long-run-plain", window=WINDOW, reserve=2_500, tools_tokens=300)

    async def run_plain(server: FakeOpenAI) -> None:
        client = AsyncOpenAI(base_url=server.base_url, api_key="sk-test", max_retries=0)
        model = OpenAIChatCompletionsModel(model="test-model", openai_client=client)
        agent = Agent(name="support", instructions="You are a support agent.", tools=[get_order], model=model)
        await Runner.run(agent, "check orders", session=plain, max_turns=30,
                         run_config=RunConfig(tracing_disabled=True))
        await client.close()

    with FakeOpenAI() as server:
        server.respond = ManyCalls(14)
        asyncio.run(run_plain(server))
        assert max(_request_tokens(r) for r in server.requests) > WINDOW - 2_500 + 300


def test_items_replaced_under_a_view_that_end_the_same_way_are_read_afresh() -> None:
    # the view checked only the last item it covered: popping a rewound exchange and adding another
    # that ends the same way ("yes") served the old summary and lost the new request
    session = CompactorSession("rewind", window=3_000, reserve=1_200, keep_last=2)

    def exchange(order: str) -> list[Any]:
        return [{"role": "user", "content": f"Refund order {order} instead?"},
                {"role": "assistant", "content": "Done."}, {"role": "user", "content": "yes"}]

    async def go() -> None:
        for i in range(8):
            await session.add_items(_lookup(i, "Done."))  # type: ignore[arg-type]
        await session.add_items(exchange("#W3001"))  # type: ignore[arg-type]
        first = json.dumps(await session.get_items())
        assert session.compactions == 1 and "#W3001 instead" in first
        for _ in range(3):
            await session.pop_item()
        await session.add_items(exchange("#W9999"))  # type: ignore[arg-type]
        second = json.dumps(await session.get_items())
        assert "#W9999 instead" in second and "#W3001 instead" not in second
        assert session.compactions == 2

    asyncio.run(go())


# -- the cheap tiers (clear, reduce) before the summary ------------------------------------------------


class ExpandsAStub:
    """The scripted model for one long run: a get_order call per request until `calls` results are
    in, then an expand_context call for the latest cleared output a request showed, then an answer.
    It notes which tiers the compaction before each request used."""

    def __init__(self, session: CompactorSession, calls: int) -> None:
        self.session = session
        self.calls = calls
        self.count = itertools.count()
        self.expanded: list[str] = []
        self.stubs: dict[str, str] = {}  # order id -> the id its stub cites, from every request
        self.tiers: list[tuple[str, ...]] = []

    def __call__(self, request: Recorded) -> Reply:
        last = self.session.auto.last
        self.tiers.append(() if last is None else
                          tuple(name for name, tier in last.report["tiers"].items() if tier["used"]))
        model = str(request.json.get("model"))
        self.stubs.update(_stubs(request.json["messages"]))
        n = next(self.count)
        if n < self.calls:
            call = {"id": f"call_{n}", "type": "function",
                    "function": {"name": "get_order", "arguments": json.dumps({"order_id": f"#W{1000 + n}"})}}
        elif not self.expanded:
            self.expanded.append(list(self.stubs.values())[-1])
            call = {"id": "call_expand", "type": "function",
                    "function": {"name": "expand_context", "arguments": json.dumps({"ids": self.expanded})}}
        else:
            return Reply(body=_completion({"role": "assistant", "content": "Checked them all."}, model))
        return Reply(body=_completion({"role": "assistant", "content": None, "tool_calls": [call]}, model))


def _stubs(messages: list[dict[str, Any]]) -> dict[str, str]:
    """The cleared outputs of a chat request: the order each answered -> the id its stub cites."""
    orders = {c["id"]: json.loads(c["function"]["arguments"]).get("order_id")
              for m in messages for c in m.get("tool_calls") or ()}
    return {orders[m["tool_call_id"]]: str(stub_ref(m["content"])) for m in messages
            if m["role"] == "tool" and m["content"].startswith(STUB_MARK)}


def test_tiers_hold_every_model_call_of_a_tool_heavy_run_under_the_trigger(tmp_path) -> None:
    session = CompactorSession("tiers-run", window=WINDOW, reserve=2_500, tools_tokens=300,
                               tiers=compactor.TIERS, store=str(tmp_path / "compactor.db"))
    script = ExpandsAStub(session, 14)

    with FakeOpenAI() as server:
        server.respond = script
        final = asyncio.run(_long_run(server, session))
        requests = list(server.requests)
    assert final == "Checked them all." and len(requests) == 16
    trigger = session.auto.trigger_tokens
    for request in requests:
        messages = request.json["messages"]
        assert messages[0]["role"] == "system" and _valid_chat(messages)
        # the cleared outputs are what was sent: the messages and the configured schemas fit the trigger
        assert compactor.count_message_tokens(messages) + 300 <= trigger
    # the first compactions cleared old outputs (no summary yet), and said so
    cheap = [t for t in script.tiers if t and "summary" not in t]
    assert cheap and "clear" in cheap[0] and script.tiers.index(cheap[0]) < len(script.tiers) // 2
    assert session.compactions >= 2 and session.stats()["tiers"]
    # every stub a request carried expands to the output it replaced
    assert len(script.stubs) >= 5
    for order, ref in script.stubs.items():
        assert json.dumps(_order(order)) in session.expand([ref])[ref]
    # and the model read one back through the session's expand tool
    answer = requests[-1].json["messages"][-1]
    wanted = script.expanded[0]
    assert answer["role"] == "tool" and wanted in answer["content"]
    assert session.auto.expand([wanted])[wanted] in answer["content"]
    assert "order_id" in answer["content"] and not answer["content"].startswith(STUB_MARK)
    # the session stores every output in full: only what was sent was cleared
    stored = asyncio.run(session.items.get_items())
    outputs = [i["output"] for i in stored if i.get("type") == "function_call_output"]
    assert outputs[:14] == [json.dumps(_order(f"#W{1000 + i}")) for i in range(14)]


def test_from_compaction_sends_cleared_outputs_and_keeps_the_callers_items() -> None:
    items: list[dict[str, Any]] = [{"role": "user", "content": "Check my orders, please."}]
    for i in range(8):
        items += _lookup(i, f"Order #W{3000 + i} found.")
    before = copy.deepcopy(items)
    messages, owners = to_messages(items)
    tokens = compactor.count_message_tokens(messages)
    for budget, tiers in ((tokens - 100, ["clear"]), (tokens // 2, ["clear", "reduce"])):
        compacted = compactor.compact_messages(messages, budget, tiers=compactor.TIERS)
        used = [name for name, tier in compacted.report["tiers"].items() if tier["used"]]
        assert compacted.summary is None and used == tiers
        out = from_compaction(items, owners, compacted)
        assert len(out) == len(items) and items == before  # the caller's items are not edited
        changed = {int(i) for i in compacted.report["replaced"]}
        assert len(changed) >= 5
        for index, item in enumerate(out):
            message = owners.index([index])
            if message in changed:  # a copy of the output item, with the compacted text
                assert item is not items[index] and item["output"] == compacted[message]["content"]
                assert {k: v for k, v in item.items() if k != "output"} == {
                    k: v for k, v in items[index].items() if k != "output"}
            else:
                assert item is items[index]


def test_a_summary_after_a_clearing_and_pins_stay_under_the_trigger(tmp_path) -> None:
    pin = "Always name the order id in a reply."
    paths = {"store": str(tmp_path / "c.db"), "items": str(tmp_path / "a.db")}
    settings: dict[str, Any] = {"window": 3_000, "reserve": 1_200, "keep_last": 2, "tiers": compactor.TIERS,
                                "pin": pin, **paths}
    session = CompactorSession("pinned", **settings)

    async def go(session: CompactorSession, orders: range) -> list[list[str]]:
        used = []
        for i in orders:
            await session.add_items(_lookup(i, f"Order #W{3000 + i} found."))  # type: ignore[arg-type]
            view = await session.get_items()
            assert session.auto.tokens(to_messages(view)[0]) <= session.auto.trigger_tokens
            assert [item.get("content") for item in view].count(pin) == (1 if session.compactions else 0)
            assert _valid_chat(to_messages(view)[0])
            used.append(session.stats()["tiers"])
        return used

    used = asyncio.run(go(session, range(8)))
    assert ["clear", "reduce"] in used and ["summary"] in used
    assert used.index(["clear", "reduce"]) < used.index(["summary"])
    # a new process carries on from the view, its pin once, and the stubs it cited still expand
    again = CompactorSession("pinned", **settings)
    asyncio.run(go(again, range(8, 12)))
    view = asyncio.run(again.get_items())
    summary = next(i["content"] for i in view if str(i.get("content")).startswith("[compactor]"))
    assert again.expand(ID.findall(summary)[:1])
    assert len(asyncio.run(again.items.get_items())) == 48  # every item kept as it came


def test_from_compaction_refuses_a_compaction_of_other_items() -> None:
    items = [item for i in range(6) for item in _lookup(i, "Done.")]
    messages, owners = to_messages(items)
    compacted = compactor.compact_messages(messages, 900, keep_last=2)
    assert len(from_compaction(items, owners, compacted)) < len(items)
    shifted = [{"role": "user", "content": "first"}, *items]
    with pytest.raises(CompactorError, match="does not line up"):
        from_compaction(shifted, to_messages(shifted)[1], compacted)


def test_the_input_filter_counts_the_instructions_without_changing_the_shared_compactor() -> None:
    # the agent's instructions are this call's overhead (extra_tokens): a loop reading the session's
    # compactor meanwhile sees tools_tokens as configured, during the compaction and after it
    import threading

    from agents.run_config import CallModelData, ModelInputData

    during: list[int] = []
    session = CompactorSession("shared", window=3_000, reserve=1_200, tools_tokens=200, keep_last=2,
                               on_compact=lambda _: during.append(session.auto.tools_tokens))
    instructions = "You are a support agent for an online shop. " + "Check every order first. " * 60
    extra = session.auto.counter.count(instructions) + 4
    items = [item for i in range(6) for item in _lookup(i, f"Order #W{3000 + i} found.")]
    other = to_messages(items[:4])[0]  # another loop's short history
    seen: list[tuple[int, bool]] = []
    done = threading.Event()

    def other_loop() -> None:
        while not done.is_set():
            seen.append((session.auto.tools_tokens, session.auto.should_compact(other)))

    given = ModelInputData(input=items, instructions=instructions)  # type: ignore[arg-type]
    data: CallModelData[Any] = CallModelData(model_data=given, agent=None, context=None)  # type: ignore[arg-type]
    watcher = threading.Thread(target=other_loop)
    watcher.start()
    try:
        sent = session.input_filter(data)
    finally:
        done.set()
        watcher.join()
    assert session.compactions == 1 and during == [200] and session.auto.tools_tokens == 200
    assert seen and set(seen) == {(200, False)}
    assert sent.instructions == instructions
    # the instructions were counted for the call: what is sent fits the trigger with them
    messages = to_messages(sent.input)[0]  # type: ignore[arg-type]
    assert session.auto.tokens(messages, extra_tokens=extra) <= session.auto.trigger_tokens
    assert session.auto.history[-1].tokens_after == session.auto.tokens(messages, extra_tokens=extra)


# -- a plain Runner.run: the agent measured from itself -------------------------------------------

LONG_INSTRUCTIONS = ("You are the support agent of an online shop that sells widgets. "
                     + " ".join(f"Rule {k}: check the order with get_order, the stock with check_stock and "
                                f"the carrier with track_parcel before you promise anything to a customer."
                                for k in range(30)))


@function_tool
def check_stock(sku: str, warehouse: str) -> str:
    """Check how many units of a SKU a warehouse (Reno, Dayton or Leeds) holds, with the next
    delivery date, the supplier, the reorder threshold and the shelf the units are on."""
    return json.dumps({"sku": sku, "warehouse": warehouse, "units": 12})


@function_tool
def track_parcel(tracking: str, carrier: str, include_history: bool) -> str:
    """Track a parcel by its tracking number with its carrier; with include_history, every scan
    from the depot to the door with times and places, else the latest scan only."""
    return json.dumps({"tracking": tracking, "status": "in transit"})


@function_tool
def refund_order(order_id: str, amount: float, reason: str, notify_customer: bool) -> str:
    """Refund an order (all of it or part of it) to the original payment method, with the reason
    the customer reads in the email, and notify the customer when asked to."""
    return json.dumps({"order_id": order_id, "refunded": amount})


class ThreeCallsARun:
    """Each run (a user line `orders N`, N = 1000, 1003, ...): three get_order calls, one per
    request, then a reply (four requests a run, whatever a compaction left of the line)."""

    def __init__(self) -> None:
        self.count = itertools.count()

    def __call__(self, request: Recorded) -> Reply:
        model = str(request.json.get("model"))
        n = next(self.count)
        run, step = divmod(n, 4)
        if step == 3:
            answer = {"role": "assistant", "content": f"Checked orders {1000 + 3 * run}."}
            return Reply(body=_completion(answer, model))
        order = json.dumps({"order_id": f"#W{1000 + 3 * run + step}"})
        call = {"id": f"call_{n}", "type": "function", "function": {"name": "get_order", "arguments": order}}
        return Reply(body=_completion({"role": "assistant", "content": None, "tool_calls": [call]}, model))


def test_a_plain_runner_run_keeps_every_request_under_the_trigger(tmp_path) -> None:
    # long instructions and four more tools than the session is told about: no tools_tokens, no
    # run_config filter; the bound agent's own instructions and schemas are measured
    session = CompactorSession("plain", window=WINDOW, reserve=1_500, store=str(tmp_path / "c.db"))
    trigger = session.auto.trigger_tokens

    async def conversation(server: FakeOpenAI) -> list[str]:
        client = AsyncOpenAI(base_url=server.base_url, api_key="sk-test", max_retries=0)
        model = OpenAIChatCompletionsModel(model="test-model", openai_client=client)
        agent = session.bind(Agent(name="support", instructions=LONG_INSTRUCTIONS, model=model,
                                   tools=[get_order, check_stock, track_parcel, refund_order,
                                          session.expand_tool()]))
        outputs = []
        for n in range(6):
            result = await Runner.run(agent, f"orders {1000 + 3 * n}", session=session,
                                      run_config=RunConfig(tracing_disabled=True))
            outputs.append(str(result.final_output))
        await client.close()
        return outputs

    with FakeOpenAI() as server:
        server.respond = ThreeCallsARun()
        outputs = asyncio.run(conversation(server))
        requests = list(server.requests)
    assert outputs == [f"Checked orders {1000 + 3 * n}." for n in range(6)] and len(requests) == 24
    schemas = compactor.get_counter("cl100k_base").count(json.dumps(requests[0].json["tools"]))
    assert len(requests[0].json["tools"]) == 5 and schemas > 400  # what a tools_tokens guess would miss
    sizes = [_request_tokens(r) for r in requests]
    assert all(size <= trigger for size in sizes), (sizes, trigger)
    assert max(sizes) > trigger - 600 and session.compactions >= 3  # it did grow to the trigger
    for request in requests:
        messages = request.json["messages"]
        assert messages[0] == {"role": "system", "content": LONG_INSTRUCTIONS} and _valid_chat(messages)
    # every item was stored whole; what was sent was compacted
    stored = asyncio.run(session.items.get_items())
    assert sum(1 for i in stored if i.get("type") == "function_call_output") == 18
    # unbound, the same conversation passes the trigger
    plain = CompactorSession("unbound", window=WINDOW, reserve=1_500)

    async def unbound(server: FakeOpenAI) -> None:
        client = AsyncOpenAI(base_url=server.base_url, api_key="sk-test", max_retries=0)
        model = OpenAIChatCompletionsModel(model="test-model", openai_client=client)
        agent = Agent(name="support", instructions=LONG_INSTRUCTIONS, model=model,
                      tools=[get_order, check_stock, track_parcel, refund_order])
        for n in range(6):
            await Runner.run(agent, f"orders {1000 + 3 * n}", session=plain,
                             run_config=RunConfig(tracing_disabled=True))
        await client.close()

    with FakeOpenAI() as server:
        server.respond = ThreeCallsARun()
        asyncio.run(unbound(server))
        assert sum(1 for r in server.requests if _request_tokens(r) > trigger) >= 3


def test_bind_keeps_the_agents_own_hooks_and_measures_each_agent() -> None:
    from agents import AgentHooks

    seen: list[str] = []

    class Mine(AgentHooks[Any]):
        async def on_llm_start(self, context: Any, agent: Any, system_prompt: Any, input_items: Any) -> None:
            seen.append(f"{agent.name}:{len(input_items)}")

    session = CompactorSession("hooks", window=WINDOW, reserve=1_500)
    first = Agent(name="a", instructions=LONG_INSTRUCTIONS, tools=[get_order], hooks=Mine())
    second = Agent(name="b", instructions="Short.")
    assert session.bind(first, second) is first
    assert session.bind(first).hooks is first.hooks  # bound once
    counter = session.auto.counter
    assert session.overheads["a"] > counter.count(LONG_INSTRUCTIONS) + 40  # the instructions and the tool
    assert 0 < session.overheads["b"] < 10
    from pydantic import BaseModel

    class Refund(BaseModel):
        order_ids: list[str]
        reason_for_each_refund_the_customer_reads: list[str]

    session.bind(Agent(name="c", instructions="Short.", output_type=Refund))
    assert session.overheads["c"] > session.overheads["b"] + 20  # the output schema is sent too
    items: list[Any] = [{"role": "user", "content": "hi"}]
    asyncio.run(first.hooks.on_llm_start(None, first, LONG_INSTRUCTIONS, items))  # type: ignore[union-attr,arg-type]
    assert seen == ["a:1"] and items == [{"role": "user", "content": "hi"}]


def test_the_session_refuses_an_unknown_keyword_at_construction() -> None:
    with pytest.raises(compactor.InputError, match="CompactorSession: keep_lst: unknown option; "
                                                   "did you mean keep_last"):
        CompactorSession("typo", window=WINDOW, keep_lst=3)
    with pytest.raises(compactor.InputError, match="did you mean tools_tokens"):
        CompactorSession("typo", window=WINDOW, tool_tokens=300)
    assert CompactorSession("ok", window=WINDOW, keep_last=3, tiers=compactor.TIERS).auto.window == WINDOW
