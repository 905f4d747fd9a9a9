"""A real HTTP server on 127.0.0.1 that answers as OpenAI Chat Completions, OpenAI Responses and
Anthropic Messages do, plain and streamed (SSE), for the proxy's tests and benchmark.

Every request is recorded with its raw body bytes, headers and path (query included). `respond`
(a function of the recorded request) scripts the answer; by default each API path gets a reply in
its own shape with `text`, streamed when the request asked for it, its events `gap` seconds apart.
Any other path is answered with a JSON echo of the method, path and body. No pytest import: the
benchmark runs it as a script (`python tests/upstream_server.py PORT [GAP [TEXT]]`).
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Answer:
    """One response: `body` verbatim, or `events` (SSE frames) written `gap` seconds apart."""

    status: int = 200
    body: bytes = b""
    events: tuple[bytes, ...] = ()
    gap: float = 0.0
    content_type: str = "application/json"
    headers: tuple[tuple[str, str], ...] = ()  # more response headers


@dataclass(frozen=True)
class Recorded:
    """One request as the server got it."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    received: float

    @property
    def json(self) -> Any:
        try:
            return json.loads(self.body)
        except ValueError:
            return None


def sse(data: Any, event: str | None = None) -> bytes:
    """One server-sent event frame."""
    head = f"event: {event}\n" if event else ""
    text = data if isinstance(data, str) else json.dumps(data)
    return f"{head}data: {text}\n\n".encode()


def pieces(text: str, count: int = 4) -> list[str]:
    """`text` cut into `count` parts (the stream's deltas)."""
    size = max(1, -(-len(text) // count))
    return [text[i:i + size] for i in range(0, len(text), size)] or [""]


def chat_reply(text: str | None = "ok", calls: list[dict[str, Any]] | None = None,
               model: str = "m") -> dict[str, Any]:
    """An OpenAI chat completion with `text`, or with tool `calls` ({"id", "name", "arguments"})."""
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if calls:
        message["tool_calls"] = [{"id": c["id"], "type": "function",
                                  "function": {"name": c["name"], "arguments": json.dumps(c["arguments"])}}
                                 for c in calls]
    return {"id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": model,
            "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}


def chat_events(text: str | None = "ok", calls: list[dict[str, Any]] | None = None,
                model: str = "m") -> tuple[bytes, ...]:
    """The same completion as `chat.completion.chunk` events, then `[DONE]`."""
    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        return sse({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 0, "model": model,
                    "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})

    frames = [chunk({"role": "assistant", "content": ""})]
    frames += [chunk({"content": part}) for part in pieces(text or "")] if text else []
    for index, call in enumerate(calls or []):
        frames.append(chunk({"tool_calls": [{"index": index, "id": call["id"], "type": "function",
                                             "function": {"name": call["name"], "arguments": ""}}]}))
        frames.append(chunk({"tool_calls": [{"index": index, "function": {
            "arguments": json.dumps(call["arguments"])}}]}))
    frames.append(chunk({}, "tool_calls" if calls else "stop"))
    return (*frames, sse("[DONE]"))


def responses_reply(text: str = "ok", calls: list[dict[str, Any]] | None = None,
                    model: str = "m") -> dict[str, Any]:
    """An OpenAI Responses response with an output message, or with function calls."""
    output: list[dict[str, Any]] = [
        {"type": "function_call", "id": f"fc_{c['id']}", "call_id": c["id"], "name": c["name"],
         "arguments": json.dumps(c["arguments"]), "status": "completed"} for c in calls or []]
    if not calls:
        output = [{"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
                   "content": [{"type": "output_text", "text": text, "annotations": []}]}]
    return {"id": "resp_1", "object": "response", "created_at": 0, "model": model, "status": "completed",
            "output": output, "parallel_tool_calls": True, "tool_choice": "auto", "tools": [],
            "usage": {"input_tokens": 1, "output_tokens": 1, "total_tokens": 2,
                      "input_tokens_details": {"cached_tokens": 0},
                      "output_tokens_details": {"reasoning_tokens": 0}}}


def responses_events(text: str = "ok", calls: list[dict[str, Any]] | None = None,
                     model: str = "m") -> tuple[bytes, ...]:
    """The same response as Responses stream events: created, text deltas, completed."""
    done = responses_reply(text, calls, model)
    start = {**done, "status": "in_progress", "output": []}
    frames = [sse({"type": "response.created", "sequence_number": 0, "response": start}, "response.created")]
    for n, part in enumerate(pieces(text) if not calls else []):
        frames.append(sse({"type": "response.output_text.delta", "sequence_number": n + 1, "item_id": "msg_1",
                           "output_index": 0, "content_index": 0, "delta": part, "logprobs": []},
                          "response.output_text.delta"))
    for index, item in enumerate(done["output"] if calls else []):  # each call: added, arguments, done
        for kind, extra in (("response.output_item.added", {"item": {**item, "arguments": "",
                                                                      "status": "in_progress"}}),
                            ("response.function_call_arguments.delta", {"item_id": item["id"],
                                                                        "delta": item["arguments"]}),
                            ("response.function_call_arguments.done", {"item_id": item["id"],
                                                                       "arguments": item["arguments"]}),
                            ("response.output_item.done", {"item": item})):
            frames.append(sse({"type": kind, "sequence_number": len(frames), "output_index": index, **extra},
                              kind))
    frames.append(sse({"type": "response.completed", "sequence_number": len(frames), "response": done},
                      "response.completed"))
    return tuple(frames)


def anthropic_reply(text: str = "ok", calls: list[dict[str, Any]] | None = None,
                    model: str = "m") -> dict[str, Any]:
    """An Anthropic message with a text block, or with tool_use blocks."""
    content = [{"type": "tool_use", "id": c["id"], "name": c["name"], "input": c["arguments"]}
               for c in calls or []] or [{"type": "text", "text": text}]
    return {"id": "msg_1", "type": "message", "role": "assistant", "model": model, "content": content,
            "stop_reason": "tool_use" if calls else "end_turn", "stop_sequence": None,
            "usage": {"input_tokens": 1, "output_tokens": 1}}


def anthropic_events(text: str = "ok", calls: list[dict[str, Any]] | None = None,
                     model: str = "m") -> tuple[bytes, ...]:
    """The same message as Anthropic stream events."""
    done = anthropic_reply(text, calls, model)
    frames = [sse({"type": "message_start", "message": {**done, "content": [], "stop_reason": None}},
                  "message_start")]
    for index, block in enumerate(done["content"]):
        empty = {**block, "input": {}} if block["type"] == "tool_use" else {**block, "text": ""}
        frames.append(sse({"type": "content_block_start", "index": index, "content_block": empty},
                          "content_block_start"))
        if block["type"] == "tool_use":
            deltas = [{"type": "input_json_delta", "partial_json": p}
                      for p in pieces(json.dumps(block["input"]))]
        else:
            deltas = [{"type": "text_delta", "text": p} for p in pieces(block["text"])]
        frames += [sse({"type": "content_block_delta", "index": index, "delta": d}, "content_block_delta")
                   for d in deltas]
        frames.append(sse({"type": "content_block_stop", "index": index}, "content_block_stop"))
    frames.append(sse({"type": "message_delta", "delta": {"stop_reason": done["stop_reason"],
                                                          "stop_sequence": None},
                       "usage": {"output_tokens": 1}}, "message_delta"))
    frames.append(sse({"type": "message_stop"}, "message_stop"))
    return tuple(frames)


SHAPES: dict[str, tuple[Callable[..., dict[str, Any]], Callable[..., tuple[bytes, ...]]]] = {
    "/v1/chat/completions": (chat_reply, chat_events),
    "/v1/responses": (responses_reply, responses_events),
    "/v1/messages": (anthropic_reply, anthropic_events),
}


def answer(request: Recorded, text: str = "ok", calls: list[dict[str, Any]] | None = None,
           gap: float = 0.0) -> Answer:
    """The API's answer to `request` with `text` (or tool `calls`), streamed if it asked to be."""
    shape = SHAPES.get(request.path.split("?")[0])
    if shape is None:
        echo = {"method": request.method, "path": request.path,
                "body": request.body.decode("utf-8", "replace")}
        return Answer(body=json.dumps(echo).encode())
    data = request.json if isinstance(request.json, dict) else {}
    model = str(data.get("model", "m"))
    if data.get("stream"):
        return Answer(events=shape[1](text, calls, model), gap=gap, content_type="text/event-stream")
    return Answer(body=json.dumps(shape[0](text, calls, model)).encode())


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256  # the listen backlog: 50 streams connect at once


class FakeUpstream:
    """The server: `base_url` (http://127.0.0.1:PORT), `requests` (every one, in order), `respond`
    (scripts answers; default `answer(request, text, gap=gap)`)."""

    def __init__(self, text: str = "ok", gap: float = 0.0, port: int = 0, record: bool = True) -> None:
        self.text = text
        self.gap = gap
        self.record = record
        self.requests: list[Recorded] = []
        self.respond: Callable[[Recorded], Answer] | None = None
        self.finished: list[float] = []  # when each streamed answer's last event was written
        self.aborted: list[float] = []  # when a stream's reader was found gone
        self._lock = threading.Lock()
        self._server = _Server(("127.0.0.1", port), self._handler())
        # a short poll: `close` (shutdown) waits for one, and every test closes a server
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.02},
                                        daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> FakeUpstream:
        self._thread.start()
        return self

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def bodies(self, path: str) -> list[Any]:
        """The JSON bodies the server got on `path`, in order."""
        return [r.json for r in self.requests if r.path == path]

    def _answer(self, request: Recorded) -> Answer:
        if self.record:
            with self._lock:
                self.requests.append(request)
        if self.respond is not None:
            return self.respond(request)
        return answer(request, self.text, gap=self.gap)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        upstream = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # headers and body go in two writes: no 40 ms delayed-ACK wait

            def _serve(self) -> None:
                size = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(size) if size else b""
                request = Recorded(self.command, self.path, {k.lower(): v for k, v in self.headers.items()},
                                   body, time.monotonic())
                reply = upstream._answer(request)
                self.send_response(reply.status)
                self.send_header("Content-Type", reply.content_type)
                for name, value in reply.headers:
                    self.send_header(name, value)
                if reply.events:
                    self.send_header("Connection", "close")
                    self.end_headers()
                    for n, frame in enumerate(reply.events):
                        try:
                            self.wfile.write(frame)
                            self.wfile.flush()
                        except OSError:  # the proxy closed the connection
                            upstream.aborted.append(time.monotonic())
                            self.close_connection = True
                            return
                        if n == len(reply.events) - 1:
                            upstream.finished.append(time.monotonic())
                        time.sleep(reply.gap)
                    self.close_connection = True
                    return
                self.send_header("Content-Length", str(len(reply.body)))
                self.end_headers()
                try:
                    self.wfile.write(reply.body)
                except OSError:  # the proxy gave up waiting (its timeout) and closed the connection
                    upstream.aborted.append(time.monotonic())
                    self.close_connection = True

            do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _serve

            def log_message(self, format: str, *args: Any) -> None:  # quiet
                pass

        return Handler


def running(upstream: FakeUpstream) -> Iterator[FakeUpstream]:
    """Start, yield, close (for a fixture)."""
    upstream.start()
    try:
        yield upstream
    finally:
        upstream.close()


if __name__ == "__main__":  # the benchmark's upstream in its own process: PORT [GAP [TEXT]]
    server = FakeUpstream(text=sys.argv[3] if len(sys.argv) > 3 else "ok", port=int(sys.argv[1]),
                          gap=float(sys.argv[2]) if len(sys.argv) > 2 else 0.0, record=False)
    print(server.base_url, flush=True)
    server._server.serve_forever()
