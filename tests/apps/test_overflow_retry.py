"""Compact and retry on a context overflow: `with_overflow_retry` around the real `openai` clients
against the local OpenAI-compatible server, `is_context_overflow` on OpenAI-, Anthropic- and
LangChain-shaped errors, and `CompactorMiddleware` retrying a model call that overflowed."""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any

import openai
import pytest

import compactor
from compactor.apps.overflow import OverflowRetry, retry_target

from .. import openai_server as fake
from ..openai_server import FakeOpenAI, Reply, overflow_above

openai_server = fake.openai_server

WINDOW = 1500  # the server's model window, in compactor's tokens
LAST = "Thanks. Now refund order #W1003 and tell me the new total of my open orders."
TOOLS = [{"type": "function", "function": {
    "name": "get_order", "description": "Look up an order by its id.",
    "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}},
                   "required": ["order_id"]}}}]


def _turn(i: int) -> list[dict[str, Any]]:
    call = {"id": f"call{i}", "type": "function",
            "function": {"name": "get_order", "arguments": json.dumps({"order_id": f"#W{1000 + i}"})}}
    result = {"order_id": f"#W{1000 + i}", "status": "pending" if i % 4 == 3 else "delivered",
              "items": [{"sku": f"SKU-{i}-{k}", "price": 10 + i + k} for k in range(4)]}
    return [{"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"call{i}", "content": json.dumps(result)},
            {"role": "assistant", "content": f"Order #W{1000 + i} is {result['status']}."}]


def _history(turns: int = 24) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a support agent for an online shop."},
        {"role": "user", "content": "Please check all my orders, one by one."}]
    for i in range(turns):
        messages += _turn(i)
    messages.append({"role": "user", "content": LAST})
    return messages


def _pairs_intact(messages: list[dict[str, Any]]) -> bool:
    """Every tool message answers a call of the assistant message before its run; every call is answered."""
    open_calls: set[str] = set()
    for m in messages:
        if m.get("role") == "tool":
            if m.get("tool_call_id") not in open_calls:
                return False
            open_calls.discard(m["tool_call_id"])
            continue
        if open_calls:
            return False
        if m.get("role") == "assistant":
            open_calls = {c["id"] for c in m.get("tool_calls") or []}
    return not open_calls


def _client(server: FakeOpenAI, **options: Any) -> OverflowRetry:
    raw = openai.OpenAI(api_key="sk-test-secret", base_url=server.base_url, max_retries=0)
    return compactor.with_overflow_retry(raw, **options)


def _tokens(messages: list[dict[str, Any]]) -> int:
    return compactor.count_message_tokens(messages)


def test_an_overflow_is_compacted_and_sent_once_more(openai_server: FakeOpenAI) -> None:
    openai_server.respond = overflow_above(WINDOW, "Refunded #W1003.")
    history = _history()
    assert _tokens(history) > 1.5 * WINDOW
    client = _client(openai_server)
    reply = client.chat.completions.create(model="m", messages=history, tools=TOOLS, temperature=0)

    assert reply.choices[0].message.content == "Refunded #W1003."
    first, second = (r.json for r in openai_server.requests)
    assert first["messages"] == history  # sent as it was
    sent = second["messages"]
    # the error stated the window (1,500) and the size (ours): half the window is the target
    assert _tokens(sent) <= WINDOW // 2 < _tokens(history)
    assert _pairs_intact(sent)
    assert sent[:2] == history[:2] and sent[-1] == history[-1]  # head and the latest request verbatim
    assert any(str(m.get("content") or "").startswith("[compactor]") for m in sent)
    # every other argument unchanged; the loop continues from what was sent
    assert {k: v for k, v in second.items() if k != "messages"} == {
        k: v for k, v in first.items() if k != "messages"}
    assert second["tools"] == TOOLS
    assert client.last_messages == sent and client.retries == 1
    assert client.auto is not None and client.auto.compactions == 1
    dropped = client.auto.history[0].dropped_ids
    assert any("#W1000" in text for text in client.auto.expand(dropped[:3]).values())


def test_a_second_overflow_is_raised_and_nothing_loops(openai_server: FakeOpenAI) -> None:
    openai_server.queue(Reply.context_overflow(), Reply.context_overflow(8192, 8500))
    client = _client(openai_server)
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model="m", messages=_history())
    assert len(openai_server.requests) == 2
    assert caught.value.code == "context_length_exceeded" and "8500 tokens" in str(caught.value)
    assert _tokens(openai_server.requests[1].json["messages"]) < _tokens(_history())
    assert client.retries == 1


def test_another_error_is_raised_at_once_without_compacting(openai_server: FakeOpenAI) -> None:
    body = {"error": {"message": "Invalid value for 'temperature': must be at most 2.",
                      "type": "invalid_request_error", "param": "temperature", "code": "invalid_value"}}
    openai_server.queue(Reply(status=400, body=json.dumps(body)))
    client = _client(openai_server)
    with pytest.raises(openai.BadRequestError, match="temperature"):
        client.chat.completions.create(model="m", messages=_history(), temperature=5)
    assert len(openai_server.requests) == 1 and client.auto is None and client.retries == 0
    limited = {"error": {"message": "Rate limit reached: too many tokens per minute.", "type": "tokens",
                         "code": "rate_limit_exceeded"}}
    openai_server.queue(Reply(status=429, body=json.dumps(limited)))
    with pytest.raises(openai.RateLimitError):
        client.chat.completions.create(model="m", messages=_history())
    assert len(openai_server.requests) == 2 and client.auto is None


def test_a_request_that_fits_is_sent_once_and_the_client_passes_through(openai_server: FakeOpenAI) -> None:
    openai_server.respond = overflow_above(WINDOW)
    client = _client(openai_server)
    messages = _history(2)
    assert client.chat.completions.create(model="m", messages=messages).choices[0].message.content == "ok"
    assert len(openai_server.requests) == 1 and client.last_messages is messages and client.retries == 0
    # the rest is the client's own; the wrapper's repr names no key and no address
    assert str(client.base_url).startswith(openai_server.base_url)
    assert client.chat.completions.with_raw_response is not None
    assert "sk-test" not in repr(client) and "127.0.0.1" not in repr(client)


def test_a_known_window_and_a_given_compactor(openai_server: FakeOpenAI) -> None:
    # the configured window is far larger than the model's: the retry still compacts to what the
    # error shows the model accepts, not to the compactor's own target
    openai_server.respond = overflow_above(WINDOW)
    client = _client(openai_server, window=100_000, keep_last=2)
    assert client.auto is not None and client.auto.target_tokens == 40_000
    client.chat.completions.create(model="m", messages=_history())
    assert _tokens(openai_server.requests[1].json["messages"]) <= WINDOW // 2
    assert client.auto.target_tokens == 40_000  # lowered for the retry only

    own = compactor.AutoCompactor(window=4_000, target=600)
    client = _client(openai_server, compactor=own)
    client.chat.completions.create(model="m", messages=_history())
    assert client.auto is own and own.compactions == 1
    assert _tokens(openai_server.requests[-1].json["messages"]) <= 600
    with pytest.raises(TypeError):
        compactor.with_overflow_retry(client.client, compactor=own, window=4_000)
    with pytest.raises(TypeError):
        compactor.with_overflow_retry(client.client, reserve=1_000)
    with pytest.raises(compactor.InputError):
        compactor.with_overflow_retry(client.client, target=1.5)
    with pytest.raises(TypeError):
        compactor.with_overflow_retry(object())


def test_a_retry_leaves_the_shared_compactors_trigger_and_target_alone(openai_server: FakeOpenAI) -> None:
    # one AutoCompactor shared by two loops: while one retries after an overflow (compacting far
    # below the target), the other still compacts at the configured trigger, and nothing is reset
    settings: list[tuple[int, int]] = []

    def note(_: Any) -> None:
        settings.append((own.trigger_tokens, own.target_tokens))

    own = compactor.AutoCompactor(window=4_000, target=600, on_compact=note)
    configured = (own.trigger_tokens, own.target_tokens)
    other = _history(8)  # the other loop's history: under the trigger, over the retry's target
    assert own.target_tokens < WINDOW // 2 < _tokens(other) < own.trigger_tokens
    seen: list[bool] = []
    done = threading.Event()

    def other_loop() -> None:
        while not done.is_set():
            seen.append(own.should_compact(other))

    def respond(request: Any) -> Reply:
        note(None)  # the server's side of each request
        return overflow_above(WINDOW)(request)

    openai_server.respond = respond
    client = _client(openai_server, compactor=own)
    watcher = threading.Thread(target=other_loop)
    watcher.start()
    try:
        client.chat.completions.create(model="m", messages=_history())
    finally:
        done.set()
        watcher.join()
    assert client.retries == 1 and own.compactions == 1
    assert _tokens(openai_server.requests[1].json["messages"]) <= WINDOW // 2
    # during the compaction (on_compact), at each request and afterwards: the configured settings
    assert len(settings) == 3 and set(settings) == {configured}
    assert (own.trigger_tokens, own.target_tokens) == configured
    assert seen and not any(seen)


def test_a_retry_counts_its_requests_tools_without_changing_the_compactor(openai_server: FakeOpenAI) -> None:
    # the wrapper's own compactor: each request's tool schemas are that retry's extra_tokens, so a
    # loop reading the compactor while a retry runs sees tools_tokens as configured
    during: list[int] = []
    client = _client(openai_server, window=100_000, keep_last=2, tools_tokens=10,
                     on_compact=lambda _: during.append(client.auto.tools_tokens))  # type: ignore[union-attr]
    auto = client.auto
    assert auto is not None and auto.tools_tokens == 10
    seen: list[int] = []
    done = threading.Event()

    def other_loop() -> None:
        while not done.is_set():
            seen.append(auto.tools_tokens)

    openai_server.respond = overflow_above(WINDOW)
    history = _history()
    watcher = threading.Thread(target=other_loop)
    watcher.start()
    try:
        client.chat.completions.create(model="m", messages=history, tools=TOOLS)
    finally:
        done.set()
        watcher.join()
    assert client.retries == 1 and during == [10] and auto.tools_tokens == 10
    assert seen and set(seen) == {10}
    # the schemas were counted for the retry: the messages and the schemas fit the retry's target
    tools = auto.counter.count(json.dumps([TOOLS], ensure_ascii=False))
    assert tools > 10
    sent = openai_server.requests[1].json["messages"]
    stated = _Status(f"maximum context length is {WINDOW} tokens. However, your messages resulted in "
                     f"{_tokens(history)} tokens.", 400)
    assert _tokens(sent) + tools <= retry_target(stated, _tokens(history) + tools)
    assert auto.history[0].tokens_after == _tokens(sent) + tools


def test_compact_to_a_budget_for_one_call() -> None:
    auto = compactor.AutoCompactor(window=4_000, target=600)
    history = _history()
    compacted = auto.compact(history, budget=300)
    assert auto.tokens(compacted) <= 300 and (auto.trigger_tokens, auto.target_tokens) == (3_200, 600)
    assert auto.tokens(auto.compact(history)) > 300  # the next compaction is at the target again
    with pytest.raises(compactor.InputError):
        auto.compact(history, budget=0)


def test_a_history_that_cannot_get_smaller_is_not_sent_again(openai_server: FakeOpenAI) -> None:
    openai_server.queue(Reply.context_overflow(8192, 9000))
    client = _client(openai_server)
    messages = [{"role": "user", "content": "hello"}]
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model="m", messages=messages)
    assert len(openai_server.requests) == 1 and client.retries == 0


def test_anthropic_style_overflow_through_an_openai_compatible_proxy(openai_server: FakeOpenAI) -> None:
    openai_server.respond = overflow_above(WINDOW, style="anthropic")
    client = _client(openai_server)
    reply = client.chat.completions.create(model="claude", messages=_history())
    assert reply.choices[0].message.content == "ok"
    sent = openai_server.requests[1].json["messages"]
    assert len(openai_server.requests) == 2 and _tokens(sent) <= WINDOW // 2
    assert _pairs_intact(sent) and sent[-1]["content"] == LAST


def test_async_client(openai_server: FakeOpenAI) -> None:
    openai_server.respond = overflow_above(WINDOW, "done")

    async def run() -> tuple[str | None, OverflowRetry]:
        raw = openai.AsyncOpenAI(api_key="sk-test", base_url=openai_server.base_url, max_retries=0)
        client = compactor.with_overflow_retry(raw)
        try:
            reply = await client.chat.completions.create(model="m", messages=_history())
        finally:
            await raw.close()
        return reply.choices[0].message.content, client

    content, client = asyncio.run(run())
    assert content == "done" and client.retries == 1 and len(openai_server.requests) == 2
    sent = openai_server.requests[1].json["messages"]
    assert sent == client.last_messages and _tokens(sent) <= WINDOW // 2 and _pairs_intact(sent)


class _AnthropicBadRequest(Exception):
    """Shaped as anthropic.BadRequestError: status 400, the whole error body."""

    def __init__(self, message: str) -> None:
        self.status_code = 400
        self.body = {"type": "error", "error": {"type": "invalid_request_error", "message": message}}
        super().__init__(f"Error code: 400 - {self.body}")


class _Status(Exception):
    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status_code = status


def _openai_error(server: FakeOpenAI, reply: Reply) -> openai.APIStatusError:
    server.queue(reply)
    client = openai.OpenAI(api_key="sk-test", base_url=server.base_url, max_retries=0)
    with pytest.raises(openai.APIStatusError) as caught:
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    return caught.value


def test_is_context_overflow(openai_server: FakeOpenAI) -> None:
    overflow = _openai_error(openai_server, Reply.context_overflow())
    assert isinstance(overflow, openai.BadRequestError) and compactor.is_context_overflow(overflow)
    # the code alone is enough, and the message alone
    coded = {"error": {"message": "Input rejected.", "type": "invalid_request_error",
                       "code": "context_length_exceeded"}}
    assert compactor.is_context_overflow(_openai_error(openai_server, Reply(status=400,
                                                                           body=json.dumps(coded))))
    assert compactor.is_context_overflow(_openai_error(openai_server, Reply.prompt_too_long()))
    other = _openai_error(openai_server, Reply(status=400))
    assert not compactor.is_context_overflow(other)
    anthropic = _AnthropicBadRequest("prompt is too long: 210000 tokens > 200000 maximum")
    assert compactor.is_context_overflow(anthropic)
    assert not compactor.is_context_overflow(_AnthropicBadRequest("messages: roles must alternate"))
    assert not compactor.is_context_overflow(_Status("Rate limit: too many tokens per minute", 429))
    assert compactor.is_context_overflow(_Status("Please reduce the length of the messages.", 413))
    assert compactor.is_context_overflow(ValueError("This model's maximum context length is 4096 tokens"))
    assert not compactor.is_context_overflow(ValueError("boom"))
    try:  # a wrapper raised from an overflow
        try:
            raise overflow
        except openai.BadRequestError as exc:
            raise RuntimeError("the model call failed") from exc
    except RuntimeError as wrapped:
        assert compactor.is_context_overflow(wrapped)


def test_retry_target_reads_the_window_the_error_states() -> None:
    # our count 9,000 for the provider's 10,000 over its 8,000-token window: 7,200 of ours fit
    stated = _Status("This model's maximum context length is 8000 tokens. However, your messages "
                     "resulted in 10000 tokens.", 400)
    assert retry_target(stated, 9_000) == 3_600
    assert retry_target(_AnthropicBadRequest("prompt is too long: 250,000 tokens > 200,000 maximum"),
                        250_000) == 100_000
    assert retry_target(_Status("maximum context length is 4096 tokens", 400), 6_000) == 2_048
    assert retry_target(_Status("prompt is too long", 400), 6_000) == 3_000  # half the failed request


# -- LangChain -------------------------------------------------------------------------------------


def _langchain_agent(server: FakeOpenAI, middleware: Any) -> Any:
    """create_agent with a chat model that sends its requests through the real openai client to the
    local server, so a context overflow is the SDK's own BadRequestError (as ChatOpenAI raises it)."""
    pytest.importorskip("langchain")
    from langchain.agents import create_agent
    from langchain_core.language_models.chat_models import BaseChatModel
    from langchain_core.messages import AIMessage, BaseMessage, convert_to_openai_messages
    from langchain_core.outputs import ChatGeneration, ChatResult
    from langchain_core.tools import tool

    client = openai.OpenAI(api_key="sk-test", base_url=server.base_url, max_retries=0)

    class ServerModel(BaseChatModel):
        @property
        def _llm_type(self) -> str:
            return "local-openai"

        def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
            return self

        def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None,
                      **kwargs: Any) -> ChatResult:
            reply = client.chat.completions.create(model="m", messages=convert_to_openai_messages(messages))
            message = AIMessage(content=reply.choices[0].message.content or "")
            return ChatResult(generations=[ChatGeneration(message=message)])

    @tool
    def get_order(order_id: str) -> str:
        """Look up an order by its id."""
        return json.dumps({"order_id": order_id, "status": "delivered"})

    return create_agent(ServerModel(), tools=[get_order], system_prompt=_history()[0]["content"],
                        middleware=[middleware])


@pytest.mark.parametrize("run", ["invoke", "ainvoke"])
def test_langchain_middleware_compacts_and_retries_an_overflowing_model_call(
        openai_server: FakeOpenAI, run: str) -> None:
    pytest.importorskip("langchain")
    from langchain_core.messages import convert_to_messages, convert_to_openai_messages

    from compactor.integrations.langchain import CompactorMiddleware, is_summary

    openai_server.respond = overflow_above(WINDOW, "Refunded #W1003.")
    middleware = CompactorMiddleware(window=100_000)  # far larger than the model's: no compaction before
    agent = _langchain_agent(openai_server, middleware)
    state = {"messages": convert_to_messages(_history()[1:])}
    result = agent.invoke(state) if run == "invoke" else asyncio.run(agent.ainvoke(state))

    assert len(openai_server.requests) == 2 and middleware.compactions == 1
    first, second = (r.json["messages"] for r in openai_server.requests)
    assert _tokens(second) < WINDOW < _tokens(first)
    assert _tokens(second) <= WINDOW // 2 + middleware.request_overhead  # the target, tools counted
    assert _pairs_intact(second) and second[0]["role"] == "system" and second[-1]["content"] == LAST
    assert second[1] == first[1]  # the opening request verbatim
    # the agent finished, and its state now holds the compacted history and the reply
    messages = result["messages"]
    assert messages[-1].content == "Refunded #W1003."
    assert sum(is_summary(m) for m in messages) == 1
    assert convert_to_openai_messages(messages[:-1]) == second[1:]


def test_langchain_middleware_raises_other_errors_and_a_second_overflow(openai_server: FakeOpenAI) -> None:
    pytest.importorskip("langchain")
    from langchain_core.exceptions import ContextOverflowError
    from langchain_core.messages import convert_to_messages

    from compactor.integrations.langchain import CompactorMiddleware

    assert compactor.is_context_overflow(ContextOverflowError("input exceeds the model's context limit"))
    state = {"messages": convert_to_messages(_history()[1:])}
    openai_server.queue(Reply(status=400))
    agent = _langchain_agent(openai_server, CompactorMiddleware(window=100_000))
    with pytest.raises(openai.BadRequestError, match="scripted error"):
        agent.invoke(state)
    assert len(openai_server.requests) == 1
    openai_server.queue(Reply.context_overflow(), Reply.context_overflow(8192, 8300))
    middleware = CompactorMiddleware(window=100_000)
    with pytest.raises(openai.BadRequestError, match="8300 tokens"):
        _langchain_agent(openai_server, middleware).invoke(state)
    assert len(openai_server.requests) == 3 and middleware.compactions == 1
