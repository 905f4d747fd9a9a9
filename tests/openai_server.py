"""A real, scriptable OpenAI-compatible HTTP server on 127.0.0.1 for LLM tests (no mocking of `openai`).

Tests queue `Reply` objects (status, chat content or raw body, headers, delay); each POST to
`/v1/chat/completions` takes the next one, or `default` (or `respond(request)`) when the queue is empty.
Every request is recorded with its JSON body and headers, and the server tracks how many requests
were in flight at once, so concurrency limits can be checked.

    def test_x(openai_server):
        openai_server.queue(Reply(status=429, headers={"Retry-After": "1"}), Reply(content="ok"))
        ... LLMSettings(model="m", base_url=openai_server.base_url, api_key="sk-test") ...

A context window: `Reply.context_overflow()` is OpenAI's context-length error (HTTP 400, code
`context_length_exceeded`), `Reply.prompt_too_long()` Anthropic's ("prompt is too long"), and
`openai_server.respond = overflow_above(2000)` answers every request whose messages are over 2,000
tokens with that error, as a model with that window would.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest


@dataclass(frozen=True)
class Reply:
    """One scripted response: an OpenAI chat completion with `content`, or `body` verbatim."""

    content: str | None = "ok"
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    body: bytes | str | None = None
    content_type: str = "application/json"

    @classmethod
    def context_overflow(cls, window: int = 8192, tokens: int = 9000) -> Reply:
        """OpenAI's answer to a request of `tokens` tokens over a `window`-token model."""
        return cls(status=400, body=json.dumps({"error": {
            "message": (f"This model's maximum context length is {window} tokens. However, your messages "
                        f"resulted in {tokens} tokens. Please reduce the length of the messages."),
            "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded"}}))

    @classmethod
    def prompt_too_long(cls, window: int = 200_000, tokens: int = 210_000) -> Reply:
        """Anthropic's answer to the same (its error body, with no code)."""
        message = f"prompt is too long: {tokens} tokens > {window} maximum"
        return cls(status=400, body=json.dumps({"type": "error", "error": {
            "type": "invalid_request_error", "message": message}}))


@dataclass(frozen=True)
class Recorded:
    """One request as the server saw it."""

    path: str
    headers: dict[str, str]
    json: dict[str, Any]
    received: float

    @property
    def prompt(self) -> str:
        """All message contents of the request, joined (what the model was asked)."""
        return "\n".join(str(m.get("content", "")) for m in self.json.get("messages", []))


def overflow_above(window: int, content: str = "ok", *,
                   style: str = "openai") -> Callable[[Recorded], Reply]:
    """A `respond` for FakeOpenAI: a model with a `window`-token context. A request whose messages
    are over `window` tokens (as compactor counts them) gets the context-length error (`style`
    "openai" or "anthropic"), any other a completion with `content`."""
    from compactor.apps.conversation import count_message_tokens

    def respond(request: Recorded) -> Reply:
        tokens = count_message_tokens(request.json.get("messages", []))
        if tokens <= window:
            return Reply(content=content)
        if style == "anthropic":
            return Reply.prompt_too_long(window, tokens)
        return Reply.context_overflow(window, tokens)

    return respond


def completion(content: str | None, model: str = "test-model") -> dict[str, Any]:
    """A chat completion in the OpenAI response format."""
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "finish_reason": "stop", "logprobs": None,
                     "message": {"role": "assistant", "content": content}}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }


class FakeOpenAI:
    """The server plus its script and journal; use as a context manager or the `openai_server` fixture."""

    def __init__(self) -> None:
        self.replies: list[Reply] = []
        self.default = Reply()
        self.respond: Callable[[Recorded], Reply] | None = None
        self.requests: list[Recorded] = []
        self.active = 0
        self.max_active = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._httpd.daemon_threads = True
        self._httpd.handle_error = lambda request, address: None  # type: ignore[method-assign]
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="fake-openai", daemon=True)

    @property
    def base_url(self) -> str:
        """The `base_url` to give the client (ends in /v1, like OpenAI's)."""
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def queue(self, *replies: Reply) -> None:
        """Script the next responses, in order."""
        with self._lock:
            self.replies.extend(replies)

    def _next(self, request: Recorded) -> Reply:
        with self._lock:
            self.requests.append(request)
            if self.replies:
                return self.replies.pop(0)
        return self.respond(request) if self.respond is not None else self.default

    def _enter(self) -> None:
        with self._lock:
            self.active += 1
            self.max_active = max(self.max_active, self.active)

    def _leave(self) -> None:
        with self._lock:
            self.active -= 1

    def start(self) -> FakeOpenAI:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()  # wakes handlers sleeping in a slow reply
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> FakeOpenAI:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _handler_for(server: FakeOpenAI) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:  # keep test output clean
            pass

        def do_POST(self) -> None:
            server._enter()
            try:
                self._serve()
            except OSError:  # the client gave up (timeout) and closed the connection
                pass
            finally:
                server._leave()

        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                payload = json.loads(raw or b"{}")
            except json.JSONDecodeError:
                payload = {"_raw": raw.decode("utf-8", "replace")}
            request = Recorded(self.path, {k.lower(): v for k, v in self.headers.items()}, payload,
                               time.monotonic())
            if not self.path.rstrip("/").endswith("/chat/completions"):
                self._send(Reply(status=404, body=json.dumps({"error": {"message": "not found"}})))
                return
            reply = server._next(request)
            if reply.delay and server._stop.wait(reply.delay):
                return
            self._send(reply, model=str(payload.get("model", "test-model")))

        def _send(self, reply: Reply, model: str = "test-model") -> None:
            if reply.body is not None:
                body = reply.body.encode("utf-8") if isinstance(reply.body, str) else reply.body
            elif reply.status >= 400:
                body = json.dumps({"error": {"message": f"scripted error {reply.status}",
                                             "type": "test_error", "code": None}}).encode()
            else:
                body = json.dumps(completion(reply.content, model)).encode("utf-8")
            self.send_response(reply.status)
            self.send_header("Content-Type", reply.content_type)
            self.send_header("Content-Length", str(len(body)))
            for key, value in reply.headers.items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(body)

    return Handler


@pytest.fixture
def openai_server() -> Iterator[FakeOpenAI]:
    """A running FakeOpenAI for one test."""
    with FakeOpenAI() as server:
        yield server
