"""compactor-proxy end to end: the app under uvicorn on a real socket (127.0.0.1), a fake upstream
(a real HTTP server answering in each API's shape, plain and SSE) and the real openai and anthropic
clients pointed at the proxy. Skipped without the `proxy` extra."""

from __future__ import annotations

import copy
import gzip
import io
import itertools
import json
import logging
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

import anthropic
import httpx
import openai
import uvicorn

import compactor
from compactor import AutoCompactor, count_message_tokens
from compactor.integrations.proxy import create_app, main

from ..upstream_server import Answer, FakeUpstream, Recorded, answer, sse

KEY = "sk-test-never-log-me-4c1f0a9e"
WINDOW = 4000
TRIGGER = 2000
CHAT = "/v1/chat/completions"


class Served:
    """The proxy app under uvicorn on a free port, in a thread."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False,
                                                    lifespan="on", server_header=False, date_header=False))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)
        self.clients: list[Any] = []  # SDK clients made for this server, closed with it (their pools)

    @property
    def root(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def proxy(self) -> Any:
        return self.app.state.proxy

    def __enter__(self) -> Served:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            assert time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        for client in self.clients:
            client.close()
        self.server.should_exit = True
        self.thread.join(10)
        self.sock.close()


@pytest.fixture
def upstream() -> Iterator[FakeUpstream]:
    server = FakeUpstream().start()
    yield server
    server.close()


@pytest.fixture
def serve(upstream: FakeUpstream) -> Iterator[Callable[..., Served]]:
    """Start a proxy in front of `upstream` (keywords go to `create_app`)."""
    started: list[Served] = []

    def start(**options: Any) -> Served:
        options.setdefault("window", WINDOW)
        options.setdefault("trigger", TRIGGER)
        served = Served(create_app(options.pop("upstream", upstream.base_url + "/v1"), **options)).__enter__()
        started.append(served)
        return served

    yield start
    for served in started:
        served.__exit__()


def openai_client(served: Served) -> openai.OpenAI:
    client = openai.OpenAI(base_url=served.root + "/v1", api_key=KEY, max_retries=0)
    served.clients.append(client)
    return client


def anthropic_client(served: Served) -> anthropic.Anthropic:
    client = anthropic.Anthropic(base_url=served.root, api_key=KEY, max_retries=0)
    served.clients.append(client)
    return client


def order(i: int) -> str:
    """A tool output: an order record with a unique marker."""
    return json.dumps({"order_id": f"#W{1000 + i}", "status": "delivered" if i % 3 else "pending",
                       "total": 20 + i, "items": [f"item-{i}-{k}" for k in range(6)],
                       "note": f"marker-{i:03d} shipped from warehouse {i % 7} on day {i}"})


def chat_history(task: str = "Check my orders and refund #W1003.", turns: int = 40) -> list[dict[str, Any]]:
    """A support agent's history past the trigger: tool calls with their results, then a question."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are a support agent."},
                                      {"role": "user", "content": task}]
    for i in range(turns):
        call = {"id": f"c{i}", "type": "function",
                "function": {"name": "get_order", "arguments": json.dumps({"order_id": f"#W{1000 + i}"})}}
        messages += [{"role": "assistant", "content": None, "tool_calls": [call]},
                     {"role": "tool", "tool_call_id": f"c{i}", "content": order(i)}]
    messages.append({"role": "user", "content": "Which of those orders are still pending?"})
    return messages


def valid_tool_pairs(messages: list[dict[str, Any]]) -> bool:
    """Every tool result answers a call made before it, and every call is answered."""
    called: set[str] = set()
    answered: set[str] = set()
    for message in messages:
        for call in message.get("tool_calls") or []:
            called.add(call["id"])
        if message.get("role") == "tool":
            if message["tool_call_id"] not in called:
                return False
            answered.add(message["tool_call_id"])
    return called == answered


def anthropic_history(task: str = "Check my orders and refund #W1003.", turns: int = 40) -> list[Any]:
    """The same agent in Anthropic Messages: tool_use blocks, their tool_result blocks, a question."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": task}]
    for i in range(turns):
        messages += [{"role": "assistant", "content": [
                         {"type": "text", "text": f"Looking up #W{1000 + i}."},
                         {"type": "tool_use", "id": f"tu{i}", "name": "get_order",
                          "input": {"order_id": f"#W{1000 + i}"}}]},
                     {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"tu{i}",
                                                   "content": order(i)}]}]
    messages += [{"role": "assistant", "content": "I have read them all."},
                 {"role": "user", "content": "Which of those orders are still pending?"}]
    return messages


def responses_history(task: str = "Check my orders and refund #W1003.", turns: int = 40) -> list[Any]:
    """The same agent as Responses input items: function_call and function_call_output items."""
    items: list[dict[str, Any]] = [{"role": "user", "content": task}]
    for i in range(turns):
        items += [{"type": "function_call", "call_id": f"c{i}", "name": "get_order",
                   "arguments": json.dumps({"order_id": f"#W{1000 + i}"})},
                  {"type": "function_call_output", "call_id": f"c{i}", "output": order(i)}]
    items.append({"role": "user", "content": "Which of those orders are still pending?"})
    return items


def anthropic_pairs_valid(messages: list[dict[str, Any]]) -> bool:
    """Every tool_use is answered by a tool_result in the next turn, and every result answers one."""
    for before, after in zip([{"content": []}, *messages], [*messages, {"content": []}], strict=True):
        asked = {b["id"] for b in _blocks(before) if b.get("type") == "tool_use"}
        answered = {b["tool_use_id"] for b in _blocks(after) if b.get("type") == "tool_result"}
        if asked != answered:
            return False
    return True


def _blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = message.get("content")
    return [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []


def responses_pairs_valid(items: list[dict[str, Any]]) -> bool:
    """Every function_call_output follows its function_call, and every call has its output."""
    called: set[str] = set()
    answered: set[str] = set()
    for item in items:
        if item.get("type") == "function_call":
            called.add(item["call_id"])
        elif item.get("type") == "function_call_output":
            if item["call_id"] not in called:
                return False
            answered.add(item["call_id"])
    return called == answered


def history_tokens(items: list[Any], fmt: str) -> int:
    return AutoCompactor(window=WINDOW, trigger=TRIGGER, record=False).tokens(items, format=fmt)


def test_small_requests_go_upstream_byte_for_byte(serve: Callable[..., Served],
                                                  upstream: FakeUpstream) -> None:
    served = serve()
    raw = b'{"model":"m",  "messages":[{"role":"user","content":"caf\\u00e9 \xc3\xa9"}],"temperature":0.5}'
    reply = httpx.post(served.root + CHAT, content=raw, headers={"content-type": "application/json"})
    assert reply.status_code == 200 and reply.json()["choices"][0]["message"]["content"] == "ok"
    assert upstream.requests[-1].body == raw
    assert upstream.requests[-1].path == CHAT
    for path, body in (("/v1/messages", b'{"model":"m","max_tokens":9,"system":"s",\n'
                                        b'"messages":[{"role":"user","content":"hi"}]}'),
                       ("/v1/responses", b'{"model":"m","input":[{"role":"user","content":"hi"}]}')):
        assert httpx.post(served.root + path, content=body).status_code == 200
        assert upstream.requests[-1].body == body and upstream.requests[-1].path == path
    # the SDKs' own requests too, with their replies read back
    completion = openai_client(served).chat.completions.create(
        model="m", messages=[{"role": "user", "content": "hello"}])
    assert completion.choices[0].message.content == "ok"
    assert upstream.requests[-1].json["messages"] == [{"role": "user", "content": "hello"}]
    message = anthropic_client(served).messages.create(
        model="m", max_tokens=10, system="be brief", messages=[{"role": "user", "content": "hello"}])
    assert message.content[0].text == "ok"  # type: ignore[union-attr]
    assert upstream.requests[-1].json["system"] == "be brief"
    response = openai_client(served).responses.create(model="m", input=[{"role": "user", "content": "hi"}])
    assert response.output_text == "ok"


def test_a_long_chat_history_arrives_compacted_under_the_trigger(
        serve: Callable[..., Served], upstream: FakeUpstream) -> None:
    served = serve()
    history = chat_history()
    assert count_message_tokens(history) > 2 * TRIGGER
    reply = openai_client(served).chat.completions.create(model="m", messages=history)  # type: ignore[arg-type]
    assert reply.choices[0].message.content == "ok"
    sent = upstream.bodies(CHAT)[-1]["messages"]
    assert count_message_tokens(sent) <= TRIGGER
    assert sent[-1] == history[-1] and sent[0] == history[0] and sent[1] == history[1]
    assert valid_tool_pairs(sent)
    assert "expand_context" not in json.dumps(sent)  # the model has no expand tool
    assert re.search(r"[0-9a-f]{16}-\d{4}", json.dumps(sent))  # the ids are listed all the same


def test_a_long_anthropic_history_arrives_compacted_in_its_own_format(
        serve: Callable[..., Served], upstream: FakeUpstream) -> None:
    served = serve()
    history = anthropic_history()
    system = "You are a support agent."
    assert history_tokens(history, "anthropic") > 2 * TRIGGER
    message = anthropic_client(served).messages.create(model="m", max_tokens=100, system=system,
                                                       messages=history)  # type: ignore[arg-type]
    assert message.content[0].text == "ok"  # type: ignore[union-attr]
    sent = upstream.bodies("/v1/messages")[-1]
    assert sent["system"] == system and sent["max_tokens"] == 100
    messages = sent["messages"]
    assert history_tokens(messages, "anthropic") <= TRIGGER
    assert messages[-1] == history[-1]
    opening = messages[0]["content"]  # the task, with the summary after it in the same user turn
    task = history[0]["content"]
    assert messages[0]["role"] == "user" and (opening == task or opening[0] == {"type": "text", "text": task})
    assert all(m["role"] in ("user", "assistant") for m in messages)
    assert all(a["role"] != b["role"] for a, b in itertools.pairwise(messages))
    assert anthropic_pairs_valid(messages)
    assert "expand_context" not in json.dumps(messages)


def test_a_long_responses_history_arrives_compacted_in_its_own_format(
        serve: Callable[..., Served], upstream: FakeUpstream) -> None:
    served = serve()
    history = responses_history()
    assert history_tokens(history, "responses") > 2 * TRIGGER
    response = openai_client(served).responses.create(model="m", instructions="You are a support agent.",
                                                      input=history)  # type: ignore[arg-type]
    assert response.output_text == "ok"
    sent = upstream.bodies("/v1/responses")[-1]
    assert sent["instructions"] == "You are a support agent."
    items = sent["input"]
    assert history_tokens(items, "responses") <= TRIGGER
    assert items[-1] == history[-1] and items[0] == history[0]
    assert responses_pairs_valid(items)
    assert "expand_context" not in json.dumps(items)


def test_conversations_keep_separate_state(serve: Callable[..., Served], upstream: FakeUpstream) -> None:
    served = serve()
    client = openai_client(served)
    first, second = chat_history("Refund #W1003."), chat_history("Cancel #W1010.", turns=45)
    client.chat.completions.create(model="m", messages=first)  # type: ignore[arg-type]
    client.chat.completions.create(model="m", messages=second)  # type: ignore[arg-type]
    conversations = list(served.proxy.conversations.values())
    assert len(conversations) == 2
    assert {c.auto.compactions for c in conversations} == {1}
    assert len({c.auto.session for c in conversations}) == 2
    # the first conversation goes on: its compaction is remembered, not redone, and the other's
    # turns never appear in it
    grown = [*first, {"role": "assistant", "content": "#W1000 and #W1003 are pending."},
             {"role": "user", "content": "Refund #W1003 then."}]
    client.chat.completions.create(model="m", messages=grown)  # type: ignore[arg-type]
    sent = upstream.bodies(CHAT)[-1]["messages"]
    assert sent[-1] == grown[-1] and sent[-2] == grown[-2]
    assert count_message_tokens(sent) <= TRIGGER
    assert "Cancel #W1010." not in json.dumps(sent)
    assert [c.auto.compactions for c in served.proxy.conversations.values()] == [1, 1]


def test_a_store_file_keeps_the_originals_and_the_conversations_are_bounded(
        serve: Callable[..., Served], upstream: FakeUpstream, tmp_path: Path) -> None:
    store = tmp_path / "proxy.sqlite"
    served = serve(store=str(store), max_conversations=2)
    client = openai_client(served)
    for task in ("Refund #W1003.", "Cancel #W1010.", "Track #W1020."):
        client.chat.completions.create(model="m", messages=chat_history(task))  # type: ignore[arg-type]
    assert len(served.proxy.conversations) == 2  # the least recently used went
    cited = re.findall(r"[0-9a-f]{16}-\d{4}", json.dumps(upstream.bodies(CHAT)[0]))
    originals = compactor.expand([f"{cited[0][:16]}-0003"], store=str(store))  # m3: the first tool output
    assert "marker-000" in "".join(originals.values())


def test_streams_are_relayed_as_they_arrive(serve: Callable[..., Served], upstream: FakeUpstream) -> None:
    served = serve()
    upstream.text, upstream.gap = "one two three four", 0.15
    stream = openai_client(served).chat.completions.create(
        model="m", messages=[{"role": "user", "content": "count"}], stream=True)
    arrivals, text = [], []
    for chunk in stream:
        arrivals.append(time.monotonic())
        text.append(chunk.choices[0].delta.content or "")
    assert "".join(text) == "one two three four"
    assert arrivals[0] < upstream.finished[-1] - 0.3  # the first chunk came while the upstream still wrote
    with anthropic_client(served).messages.stream(
            model="m", max_tokens=10, messages=[{"role": "user", "content": "count"}]) as events:
        first = None
        for _ in events.text_stream:
            first = first or time.monotonic()
        assert events.get_final_message().content[0].text == "one two three four"  # type: ignore[union-attr]
    assert first is not None and first < upstream.finished[-1] - 0.3
    parts = [e.delta for e in openai_client(served).responses.create(
        model="m", input=[{"role": "user", "content": "count"}], stream=True)
        if e.type == "response.output_text.delta"]
    assert "".join(parts) == "one two three four"


def test_a_body_over_the_cap_gets_a_clear_413(serve: Callable[..., Served], upstream: FakeUpstream) -> None:
    served = serve(max_body=2000)
    big = json.dumps({"messages": [{"role": "user", "content": "x" * 5000}]})
    reply = httpx.post(served.root + CHAT, content=big)
    assert reply.status_code == 413
    error = reply.json()["error"]
    assert "2000 bytes" in error["message"] and "--max-body" in error["message"]

    def chunks() -> Iterator[bytes]:  # no content-length: reading stops at the cap
        yield from (b"x" * 1000 for _ in range(10))

    assert httpx.post(served.root + "/v1/files", content=chunks()).status_code == 413
    assert upstream.requests == []


@pytest.fixture
def debug_log() -> Iterator[io.StringIO]:
    """Everything every logger writes at DEBUG, as text."""
    text, root = io.StringIO(), logging.getLogger()
    handler, level = logging.StreamHandler(text), root.level
    handler.setFormatter(logging.Formatter("%(name)s %(message)s"))
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    yield text
    root.removeHandler(handler)
    root.setLevel(level)


def test_keys_are_forwarded_and_never_logged(serve: Callable[..., Served], upstream: FakeUpstream,
                                            debug_log: io.StringIO) -> None:
    served = serve()
    openai_client(served).chat.completions.create(model="m", messages=chat_history())  # type: ignore[arg-type]
    assert upstream.requests[-1].headers["authorization"] == f"Bearer {KEY}"
    anthropic_client(served).messages.create(model="m", max_tokens=5,
                                             messages=[{"role": "user", "content": "x"}])
    got = upstream.requests[-1].headers
    assert KEY in got.get("x-api-key", got["authorization"])  # the SDK sends one or the other
    httpx.post(served.root + "/v1/messages", headers={"x-api-key": KEY},
               json={"model": "m", "max_tokens": 5, "messages": chat_history()})
    assert upstream.requests[-1].headers["x-api-key"] == KEY
    with socket.create_connection(("127.0.0.1", served.port)) as raw:  # a client that logs nothing itself
        raw.sendall(f"GET /v1/models?key={KEY} HTTP/1.1\r\nHost: x\r\napi-key: {KEY}\r\n"
                    f"Connection: close\r\n\r\n".encode())
        assert raw.makefile("rb").readline().startswith(b"HTTP/1.1 200")
    assert upstream.requests[-1].headers["api-key"] == KEY and upstream.requests[-1].path.endswith(KEY)
    logged = debug_log.getvalue()
    assert "compactor.integrations.proxy" in logged and "httpx" in logged  # the proxy and httpx did log
    assert KEY not in logged


def test_what_the_proxy_does_not_read_passes_through(serve: Callable[..., Served],
                                                     upstream: FakeUpstream) -> None:
    served = serve(upstream=upstream.base_url)  # given without /v1
    models = httpx.get(served.root + "/v1/models?limit=2", headers={"x-trace": "t1"})
    assert models.json() == {"method": "GET", "path": "/v1/models?limit=2", "body": ""}
    assert upstream.requests[-1].headers["x-trace"] == "t1"
    odd = ((CHAT, b"not json {"), (CHAT, b'{"model": "m", "messages": "hi"}'), ("/v1/files", b"\x00\x01"))
    for path, body in odd:
        httpx.post(served.root + path, content=body)
        assert upstream.requests[-1].body == body and upstream.requests[-1].path == path
    httpx.delete(served.root + "/v1/files/f1")
    assert (upstream.requests[-1].method, upstream.requests[-1].path) == ("DELETE", "/v1/files/f1")
    nested = serve(upstream=upstream.base_url + "/api/v1/")
    httpx.get(nested.root + "/v1/models")
    assert upstream.requests[-1].path == "/api/v1/models"


def test_upstream_errors_are_relayed_and_an_unreachable_one_is_a_502(
        serve: Callable[..., Served], upstream: FakeUpstream) -> None:
    served = serve()
    error = b'{"error": {"message": "slow down", "type": "rate_limit"}}'
    upstream.respond = lambda request: Answer(status=429, body=error)
    small = b'{"model":"m","messages":[{"role":"user","content":"x"}]}'
    reply = httpx.post(served.root + CHAT, content=small)
    assert (reply.status_code, reply.content) == (429, error)
    with pytest.raises(openai.RateLimitError):
        openai_client(served).chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{closed.getsockname()[1]}"
    gone = serve(upstream=dead)
    reply = httpx.post(gone.root + CHAT, content=b"{}")
    assert reply.status_code == 502 and "could not reach the upstream" in reply.json()["error"]["message"]


def expand_script(final: str, calls: list[Recorded]) -> Callable[[Recorded], Answer]:
    """The upstream's model: asked with a compacted history, it calls expand on the first ids the
    history cites (an id or a range); given the originals, it answers `final`."""
    def respond(request: Recorded) -> Answer:
        calls.append(request)
        if len(calls) % 2 == 0:
            return answer(request, final)
        ids = re.findall(r"[0-9a-f]{16}-\d{4}(?:\.\.\d{4})?", json.dumps(request.json))
        assert ids, "the compacted history cites no id"
        call = {"id": "call_x", "name": "expand_context", "arguments": {"ids": ids[:1]}}
        return answer(request, calls=[call])
    return respond


HISTORIES: dict[str, Callable[[], list[Any]]] = {
    "chat": chat_history, "anthropic": anthropic_history, "responses": responses_history}
PATHS = {"chat": CHAT, "anthropic": "/v1/messages", "responses": "/v1/responses"}


def ask(api: str, served: Served, history: list[Any], stream: bool) -> str:
    """Send `history` with the API's own client; the text of the reply the client read (a tool
    call in it fails the test)."""
    if api == "anthropic":
        client = anthropic_client(served)
        if stream:
            with client.messages.stream(model="m", max_tokens=50, messages=history) as events:
                text = "".join(events.text_stream)
                final = events.get_final_message()
        else:
            final = client.messages.create(model="m", max_tokens=50, messages=history)
            text = "".join(getattr(b, "text", "") for b in final.content)
        assert [b.type for b in final.content] == ["text"]
        return text
    if api == "responses":
        if stream:
            events = list(openai_client(served).responses.create(model="m", input=history, stream=True))
            assert not any("function_call" in e.type for e in events)
            return "".join(getattr(e, "delta", "") for e in events if e.type == "response.output_text.delta")
        response = openai_client(served).responses.create(model="m", input=history)
        assert [o.type for o in response.output] == ["message"]
        return response.output_text
    if stream:
        chunks = list(openai_client(served).chat.completions.create(model="m", messages=history, stream=True))
        assert not any(c.choices and c.choices[0].delta.tool_calls for c in chunks)
        return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    reply = openai_client(served).chat.completions.create(model="m", messages=history)
    assert not reply.choices[0].message.tool_calls
    return reply.choices[0].message.content or ""


def tool_names(api: str, body: dict[str, Any]) -> list[str]:
    return [t["function"]["name"] if api == "chat" else t["name"] for t in body.get("tools", [])]


def expand_answer(api: str, body: dict[str, Any]) -> str:
    """The text of the proxy's answer to the expand call, last in the upstream's second request."""
    if api == "anthropic":
        result = body["messages"][-1]["content"][0]
        assert result["type"] == "tool_result" and result["tool_use_id"] == "call_x"
        return str(result["content"])
    if api == "responses":
        item = body["input"][-1]
        assert item["type"] == "function_call_output" and item["call_id"] == "call_x"
        return str(item["output"])
    message = body["messages"][-1]
    assert message["role"] == "tool" and message["tool_call_id"] == "call_x"
    return str(message["content"])


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
@pytest.mark.parametrize("api", ["chat", "anthropic", "responses"])
def test_the_proxy_answers_the_expand_tool_itself(serve: Callable[..., Served], upstream: FakeUpstream,
                                                  api: str, stream: bool) -> None:
    served = serve(expand_tool=True)
    seen: list[Recorded] = []
    upstream.respond = expand_script("#W1000 and #W1003 are pending.", seen)
    assert ask(api, served, HISTORIES[api](), stream) == "#W1000 and #W1003 are pending."
    assert len(seen) == 2 and all(r.path == PATHS[api] for r in seen)
    first, second = seen[0].json, seen[1].json
    assert tool_names(api, first) == ["expand_context"] == tool_names(api, second)
    assert "marker-000" not in json.dumps(first)
    assert "marker-000" in expand_answer(api, second)  # an original the compacted history had left out


def test_a_small_request_with_the_expand_tool_on_is_still_sent_as_it_came(
        serve: Callable[..., Served], upstream: FakeUpstream) -> None:
    served = serve(expand_tool=True)
    raw = b'{"model": "m", "messages": [{"role": "user", "content": "hi"}]}'
    assert httpx.post(served.root + CHAT, content=raw).json()["choices"][0]["message"]["content"] == "ok"
    assert upstream.requests[-1].body == raw


def test_the_console_script_refuses_bad_settings(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--upstream", "ftp://x", "--window", "1000"]) == 2
    assert "--upstream must be an http(s) URL" in capsys.readouterr().err
    assert main(["--upstream", "http://127.0.0.1:1/v1", "--window", "1000", "--trigger", "2000"]) == 2
    assert "trigger" in capsys.readouterr().err


def client_calls(api: str, served: Served, history: list[Any], stream: bool) -> list[tuple[str, Any]]:
    """Send `history` with the API's own client (declaring its own `get_order` tool); the tool calls
    the client read, as (name, arguments) in the order the reply gives them."""
    schema = {"type": "object", "properties": {"order_id": {"type": "string"}}}
    if api == "anthropic":
        client = anthropic_client(served)
        tools: Any = [{"name": "get_order", "description": "an order", "input_schema": schema}]
        if stream:
            with client.messages.stream(model="m", max_tokens=50, messages=history, tools=tools) as events:
                final = events.get_final_message()
        else:
            final = client.messages.create(model="m", max_tokens=50, messages=history, tools=tools)
        assert final.stop_reason == "tool_use"
        return [(b.name, b.input) for b in final.content if b.type == "tool_use"]
    if api == "responses":
        tools = [{"type": "function", "name": "get_order", "parameters": schema}]
        if stream:
            events = list(openai_client(served).responses.create(model="m", input=history, tools=tools,
                                                                 stream=True))
            added = [e.item.name for e in events if e.type == "response.output_item.added"]
            assert all(e.output_index < len(added) for e in events if hasattr(e, "output_index"))
            response = next(e.response for e in events if e.type == "response.completed")
            assert added == [o.name for o in response.output if o.type == "function_call"]
        else:
            response = openai_client(served).responses.create(model="m", input=history, tools=tools)
        return [(o.name, json.loads(o.arguments)) for o in response.output if o.type == "function_call"]
    tools = [{"type": "function", "function": {"name": "get_order", "parameters": schema}}]
    if stream:
        calls: dict[int, list[str]] = {}
        finish = None
        for chunk in openai_client(served).chat.completions.create(model="m", messages=history, tools=tools,
                                                                   stream=True):
            for part in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
                call = calls.setdefault(part.index, ["", ""])
                call[0] += part.function.name or "" if part.function else ""
                call[1] += part.function.arguments or "" if part.function else ""
            finish = (chunk.choices[0].finish_reason if chunk.choices else None) or finish
        assert finish == "tool_calls" and sorted(calls) == list(range(len(calls)))  # numbered from 0
        return [(name, json.loads(arguments)) for name, arguments in (calls[i] for i in sorted(calls))]
    reply = openai_client(served).chat.completions.create(model="m", messages=history, tools=tools)
    return [(c.function.name, json.loads(c.function.arguments))
            for c in reply.choices[0].message.tool_calls or []]


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
@pytest.mark.parametrize("api", ["chat", "anthropic", "responses"])
def test_a_reply_calling_expand_and_the_clients_tools_reaches_the_client_without_the_expand_call(
        serve: Callable[..., Served], upstream: FakeUpstream, api: str, stream: bool) -> None:
    served = serve(expand_tool=True)
    seen: list[Recorded] = []

    def respond(request: Recorded) -> Answer:  # the model asks for an original and an order at once
        seen.append(request)
        ids = re.findall(r"[0-9a-f]{16}-\d{4}", json.dumps(request.json))
        return answer(request, calls=[
            {"id": "call_x", "name": "expand_context", "arguments": {"ids": ids[:1]}},
            {"id": "call_y", "name": "get_order", "arguments": {"order_id": "#W1003"}}])

    upstream.respond = respond
    assert client_calls(api, served, HISTORIES[api](), stream) == [("get_order", {"order_id": "#W1003"})]
    assert len(seen) == 1  # the client runs its tool; the expand call is not answered alone
    assert tool_names(api, seen[0].json)[-1] == "expand_context"


def test_a_model_that_only_ever_expands_stops_and_the_client_never_sees_the_call(
        serve: Callable[..., Served], upstream: FakeUpstream) -> None:
    served = serve(expand_tool=True)
    seen: list[Recorded] = []

    def respond(request: Recorded) -> Answer:
        seen.append(request)
        return answer(request, calls=[{"id": f"call_{len(seen)}", "name": "expand_context",
                                       "arguments": {"ids": ["0123456789abcdef-0001"]}}])

    upstream.respond = respond
    reply = openai_client(served).chat.completions.create(model="m", messages=chat_history())  # type: ignore[arg-type]
    assert len(seen) == 5  # MAX_EXPAND_ROUNDS answered, then the reply as it is
    assert not reply.choices[0].message.tool_calls and reply.choices[0].finish_reason == "stop"


def raw_request(served: Served, head: bytes, body: bytes = b"{}") -> bytes:
    """Send one hand-written request (`head`: request line and headers) and read the whole answer."""
    with socket.create_connection(("127.0.0.1", served.port), timeout=10) as conn:
        conn.sendall(head + b"Host: x\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % len(body) + body)
        return b"".join(iter(lambda: conn.recv(65536), b""))


def test_request_targets_never_leave_the_upstream_or_its_path(serve: Callable[..., Served],
                                                              upstream: FakeUpstream) -> None:
    served = serve(upstream=upstream.base_url + "/api/v1")
    for target in (b"http://evil.example/v1/chat/completions", b"@evil.example/v1/models", b"*"):
        assert raw_request(served, b"POST " + target + b" HTTP/1.1\r\n").startswith(b"HTTP/1.1 4")
    for target in (b"/v1/../../admin", b"/v1/%2e%2e/%2E%2E/admin", b"/v1/./models", b"/v1/files/..%2f..%2fx"):
        answer_ = raw_request(served, b"GET " + target + b" HTTP/1.1\r\n")
        assert answer_.startswith(b"HTTP/1.1 400") and b"dot segment" in answer_, target
    assert upstream.requests == []
    raw_request(served, b"GET /v1/files/a%2Fb?x=%2F HTTP/1.1\r\n")  # an encoded slash stays encoded
    raw_request(served, b"GET //evil.example/v1/models HTTP/1.1\r\n")
    paths = [r.path for r in upstream.requests]
    assert paths == ["/api/v1/files/a%2Fb?x=%2F", "/api//evil.example/v1/models"]
    assert {r.headers["host"] for r in upstream.requests} == {upstream.base_url.split("//")[1]}


def test_lone_surrogates_in_a_long_history_do_not_break_the_proxy(serve: Callable[..., Served],
                                                                   upstream: FakeUpstream) -> None:
    served = serve()
    history = chat_history()
    history[3]["content"] += "SURROGATE"
    body = json.dumps({"model": "m", "messages": history}).replace("SURROGATE", "\\ud83d \\u00e9")
    reply = httpx.post(served.root + CHAT, content=body)
    assert reply.status_code == 200 and reply.json()["choices"][0]["message"]["content"] == "ok"
    assert upstream.requests[-1].json is not None  # valid JSON went up (as sent, or compacted)


def test_a_responses_request_on_server_side_state_goes_as_sent(serve: Callable[..., Served],
                                                                upstream: FakeUpstream) -> None:
    served = serve()
    for state in ({"previous_response_id": "resp_0"}, {"conversation": "conv_1"}):
        body = json.dumps({"model": "m", **state, "input": responses_history()}).encode()
        assert httpx.post(served.root + "/v1/responses", content=body).status_code == 200
        assert upstream.requests[-1].body == body  # what the proxy cannot see, it does not compact
    assert served.proxy.conversations == {}


def test_a_stuck_upstream_is_a_504_after_the_timeout(serve: Callable[..., Served], upstream: FakeUpstream,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    served = serve(timeout=0.5)
    upstream.respond = lambda request: (time.sleep(2), answer(request))[1]
    started = time.monotonic()
    small = {"model": "m", "messages": [{"role": "user", "content": "x"}]}
    reply = httpx.post(served.root + CHAT, json=small, timeout=10)
    assert reply.status_code == 504 and "--timeout" in reply.json()["error"]["message"]
    assert time.monotonic() - started < 1.5
    seen: dict[str, Any] = {}

    def run(app: Any, **kwargs: Any) -> None:
        seen.update(kwargs, timeout=app.state.proxy.timeout)

    monkey = pytest.MonkeyPatch()
    monkey.setattr(uvicorn, "run", run)
    try:
        assert main(["--upstream", upstream.base_url, "--window", "1000", "--timeout", "30"]) == 0
        assert (seen["host"], seen["timeout"]) == ("127.0.0.1", 30.0)  # the default binding is local
        assert main(["--upstream", upstream.base_url, "--window", "1000"]) == 0
        assert seen["timeout"] == 600.0
        assert main(["--upstream", upstream.base_url, "--window", "1000", "--timeout", "0"]) == 2
        assert "timeout" in capsys.readouterr().err
    finally:
        monkey.undo()


def test_a_gzip_request_body_is_read_and_compacted(serve: Callable[..., Served],
                                                   upstream: FakeUpstream) -> None:
    served = serve(max_body=200_000)
    plain = json.dumps({"model": "m", "messages": chat_history()}).encode()
    reply = httpx.post(served.root + CHAT, content=gzip.compress(plain), headers={"content-encoding": "gzip"})
    assert reply.status_code == 200
    sent = upstream.requests[-1]
    assert "content-encoding" not in sent.headers and count_message_tokens(sent.json["messages"]) <= TRIGGER
    small = gzip.compress(b'{"model":"m","messages":[{"role":"user","content":"hi"}]}')
    httpx.post(served.root + CHAT, content=small, headers={"content-encoding": "gzip"})
    assert upstream.requests[-1].body == small and upstream.requests[-1].headers["content-encoding"] == "gzip"
    bomb = gzip.compress(b'{"messages": "' + b" " * 1_000_000 + b'"}')  # 1 MB from 1 KB: over the cap
    reply = httpx.post(served.root + CHAT, content=bomb, headers={"content-encoding": "gzip"})
    assert reply.status_code == 413 and len(upstream.requests) == 2


def test_expect_100_continue_is_answered_here_not_forwarded(serve: Callable[..., Served],
                                                            upstream: FakeUpstream) -> None:
    served = serve()
    body = b'{"model":"m","messages":[{"role":"user","content":"hi"}]}'
    answered = raw_request(served, b"POST /v1/chat/completions HTTP/1.1\r\nExpect: 100-continue\r\n", body)
    assert answered.startswith(b"HTTP/1.1 100") and b"HTTP/1.1 200" in answered
    assert upstream.requests[-1].body == body and "expect" not in upstream.requests[-1].headers


def test_a_client_leaving_mid_stream_closes_the_upstream_stream(serve: Callable[..., Served],
                                                                upstream: FakeUpstream) -> None:
    served = serve()
    upstream.respond = lambda request: Answer(events=tuple(sse({"n": n}) for n in range(200)), gap=0.02,
                                              content_type="text/event-stream")
    streamed = {"model": "m", "stream": True, "messages": []}
    with httpx.stream("POST", served.root + CHAT, json=streamed) as reply:
        assert next(reply.iter_raw()).startswith(b"data: {")
    left = time.monotonic()
    while not upstream.aborted and time.monotonic() < left + 3:
        time.sleep(0.02)
    assert upstream.aborted and upstream.aborted[0] - left < 1.0 and not upstream.finished
    pool = served.proxy.client._transport._pool
    assert all(c.is_idle() or c.is_closed() for c in pool.connections)  # nothing left reading it


def test_two_clients_with_one_opening_never_see_each_others_turns(serve: Callable[..., Served],
                                                                  upstream: FakeUpstream) -> None:
    served = serve()
    mine, theirs = chat_history("Refund #W1003."), chat_history("Refund #W1003.", turns=42)
    for message in theirs[2:-1]:  # the same opening (one prefix key), other turns
        if message["role"] == "tool":
            message["content"] = message["content"].replace("marker", "THEIRS")
    client = openai_client(served)
    sent = []
    for history in (mine, theirs, [*mine, {"role": "assistant", "content": "pending: #W1000"},
                                   {"role": "user", "content": "Refund it."}]):
        client.chat.completions.create(model="m", messages=history)  # type: ignore[arg-type]
        sent.append(json.dumps(upstream.bodies(CHAT)[-1]["messages"]))
    assert len(served.proxy.conversations) == 1  # one key, so one compactor for both
    assert "THEIRS" not in sent[0] + sent[2] and "THEIRS" in sent[1]
    assert "marker-" not in sent[1] and "Refund it." in sent[2]
    edited = copy.deepcopy(mine)  # a client that edits an earlier message is read again, not remembered
    edited[3]["content"] = edited[3]["content"].replace("marker-001", "EDITED-001")
    client.chat.completions.create(model="m", messages=edited)  # type: ignore[arg-type]
    assert "marker-001" not in json.dumps(upstream.bodies(CHAT)[-1]["messages"])


def test_a_compacted_history_sent_back_from_elsewhere_is_not_compacted_twice(
        serve: Callable[..., Served], upstream: FakeUpstream) -> None:
    served = serve()
    client = openai_client(served)
    client.chat.completions.create(model="m", messages=chat_history())  # type: ignore[arg-type]
    compacted = upstream.bodies(CHAT)[-1]["messages"]
    other = serve()  # another proxy (or a restart): it never saw this compaction
    openai_client(other).chat.completions.create(model="m", messages=[
        *compacted, {"role": "assistant", "content": "noted"}, {"role": "user", "content": "next?"}])
    resent = upstream.bodies(CHAT)[-1]["messages"]
    assert resent[:len(compacted)] == compacted and resent[-1]["content"] == "next?"
    assert [c.auto.compactions for c in other.proxy.conversations.values()] == [0]


def test_concurrent_requests_of_one_conversation_compact_once(serve: Callable[..., Served],
                                                              upstream: FakeUpstream) -> None:
    served = serve()
    history = chat_history()
    replies: list[int] = []

    def send() -> None:
        replies.append(httpx.post(served.root + CHAT, json={"model": "m", "messages": history},
                                  timeout=30).status_code)

    threads = [threading.Thread(target=send) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert replies == [200] * 4
    bodies = upstream.bodies(CHAT)
    assert len(bodies) == 4 and all(b == bodies[0] for b in bodies)  # one compaction, reused
    assert [c.auto.compactions for c in served.proxy.conversations.values()] == [1]


@pytest.mark.parametrize(("path", "stream", "bad"), [
    (CHAT, False, Answer(status=500, body=b"<html><body>Bad</body></html>", content_type="text/html")),
    (CHAT, False, Answer(body=b'{"choices": [{"message": {"tool_calls": [')),
    ("/v1/messages", False, Answer(body=b"null")),
    ("/v1/responses", True, Answer(events=(sse({"type": "response.created", "response": {}}),),
                                   content_type="text/event-stream")),
    (CHAT, True, Answer(events=(b"data: {not json\n\n", b": comment\n\n"), content_type="text/event-stream")),
], ids=["html-500", "cut-json", "json-null", "sse-without-final-event", "sse-not-json"])
def test_an_odd_upstream_reply_to_a_compacted_request_reaches_the_client_as_it_came(
        serve: Callable[..., Served], upstream: FakeUpstream, path: str, stream: bool, bad: Answer) -> None:
    served = serve(expand_tool=True)
    upstream.respond = lambda request: bad
    history = anthropic_history() if path == "/v1/messages" else chat_history() if path == CHAT \
        else responses_history()
    name = "input" if path == "/v1/responses" else "messages"
    body = {"model": "m", "max_tokens": 5, "stream": stream, name: history}
    reply = httpx.post(served.root + path, json=body)
    assert reply.status_code == bad.status and reply.content == (bad.body or b"".join(bad.events))
    assert reply.headers["content-type"] == bad.content_type and len(upstream.requests) == 1
    assert "expand_context" in json.dumps(upstream.requests[0].json)  # it was compacted and offered


def test_with_n_choices_the_proxy_does_not_answer_for_one_and_drop_the_others(
        serve: Callable[..., Served], upstream: FakeUpstream) -> None:
    served = serve(expand_tool=True)
    expand = {"id": "call_x", "type": "function",
              "function": {"name": "expand_context", "arguments": '{"ids": ["0123456789abcdef-0001"]}'}}
    reply = {"id": "c", "object": "chat.completion", "created": 0, "model": "m", "choices": [
        {"index": 0, "message": {"role": "assistant", "content": None, "tool_calls": [expand]},
         "finish_reason": "tool_calls"},
        {"index": 1, "message": {"role": "assistant", "content": "two"}, "finish_reason": "stop"}]}
    upstream.respond = lambda request: Answer(body=json.dumps(reply).encode())
    got = openai_client(served).chat.completions.create(model="m", n=2, messages=chat_history())  # type: ignore[arg-type]
    assert len(upstream.requests) == 1 and [c.message.content for c in got.choices] == [None, "two"]
    assert not got.choices[0].message.tool_calls and got.choices[0].finish_reason == "stop"


def test_requests_the_proxy_reads_oddly_still_get_an_answer(serve: Callable[..., Served],
                                                            upstream: FakeUpstream) -> None:
    served = serve()
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64," + "iVBORw0KGgo" * 2000}}
    with_image = chat_history()
    with_image[1] = {"role": "user", "content": [{"type": "text", "text": "Refund this."}, image]}
    unanswered = chat_history()
    del unanswered[5]  # a tool call whose result is missing
    schemas = [{"type": "function", "function": {"name": f"t{i}", "description": "word " * 400,
                                                 "parameters": {"type": "object"}}} for i in range(12)]
    system = [{"type": "text", "text": "You are a support agent.", "cache_control": {"type": "ephemeral"}}]
    bodies = [
        (CHAT, {"model": "m", "messages": with_image}),
        (CHAT, {"model": "m", "messages": unanswered}),
        (CHAT, {"model": "m", "messages": chat_history(turns=4), "tools": schemas}),  # tools over the trigger
        (CHAT, {"model": "m", "messages": chat_history(), "n": 2, "stream": True,
                "stream_options": {"include_usage": True}}),
        ("/v1/messages", {"model": "m", "max_tokens": 5, "system": system, "messages": anthropic_history()}),
        ("/v1/responses", {"model": "m", "input": "just a string"}),
        (CHAT, {"model": "m", "messages": []}), (CHAT, None), (CHAT, 3),
    ]
    for path, body in bodies:
        reply = httpx.post(served.root + path, json=body)
        assert reply.status_code == 200, (path, body)
        sent = upstream.requests[-1].json
        if isinstance(body, dict):
            assert {k: v for k, v in sent.items() if k not in ("messages", "input")} == \
                   {k: v for k, v in body.items() if k not in ("messages", "input")}  # the rest as it came
    assert "image_url" in json.dumps(upstream.bodies(CHAT)[0])  # the image the user sent is not dropped
    duplicate = b'{"model": "m", "messages": [{"role": "user", "content": "a"}], "messages": ' + \
        json.dumps(chat_history()).encode() + b"}"  # the last of a duplicate key counts, as in most parsers
    assert httpx.post(served.root + CHAT, content=duplicate).status_code == 200
    assert count_message_tokens(upstream.requests[-1].json["messages"]) <= TRIGGER


def test_headers_hosts_lengths_encodings_and_both_keys(serve: Callable[..., Served], upstream: FakeUpstream,
                                                       debug_log: io.StringIO) -> None:
    served = serve()
    headers = {"host": "evil.example", "x-api-key": KEY, "authorization": f"Bearer {KEY}",
               "accept-encoding": "gzip", "connection": "keep-alive, x-drop", "te": "trailers"}
    reply = httpx.post(served.root + CHAT + f"?key={KEY}", json={"model": "m", "messages": chat_history()},
                       headers=headers)
    got = upstream.requests[-1]
    assert got.headers["host"] == upstream.base_url.split("//")[1]  # the upstream's own host
    assert got.headers["content-length"] == str(len(got.body)) and len(got.body) < len(reply.request.content)
    assert (got.headers["x-api-key"], got.headers["authorization"]) == (KEY, f"Bearer {KEY}")
    assert "te" not in got.headers and got.headers["accept-encoding"] == "gzip"
    zipped = gzip.compress(json.dumps(answer(got).body.decode()).encode())  # goes back as it came
    upstream.respond = lambda request: Answer(body=zipped, headers=(("Content-Encoding", "gzip"),))
    reply = httpx.post(served.root + CHAT, json={"model": "m", "messages": chat_history()}, headers=headers)
    assert reply.headers["content-encoding"] == "gzip" and json.loads(reply.json())["choices"]
    upstream.respond = lambda request: (time.sleep(1.5), answer(request))[1]
    slow = serve(timeout=0.3)
    error = httpx.post(slow.root + CHAT + f"?key={KEY}", json={"model": "m", "messages": []}, headers=headers)
    assert error.status_code == 504 and KEY not in error.text and KEY not in debug_log.getvalue()
