"""`compactor-proxy`: a compacting HTTP proxy between any agent and its provider, set up by swapping
the agent's base URL; no code changes in the agent.

    compactor-proxy --upstream https://api.openai.com/v1 --window 128000 --expand-tool
    OPENAI_BASE_URL=http://127.0.0.1:8080/v1 ANTHROPIC_BASE_URL=http://127.0.0.1:8080 my-agent

It serves `POST /v1/chat/completions` (OpenAI Chat), `POST /v1/responses` (OpenAI Responses) and
`POST /v1/messages` (Anthropic Messages). A request whose history is under the trigger goes upstream
byte for byte; past it, the history is compacted with an `AutoCompactor` (the tiers: clear, reduce,
summary) and the request goes out with the compacted history. Conversations are told apart by their
prefix (API, model, system prompt, first user message), so each keeps its own compaction state and
store session; clients resend the whole history every time, and the compactor remembers its last
compaction. Anything else (other paths and methods, bodies that are not JSON or not a history it
reads) passes through untouched. Responses are relayed as they arrive (SSE streams chunk by chunk).
Keys (Authorization, x-api-key, api-key) go to the upstream only and are never logged; the log
carries paths without their query and token counts.

Why Starlette under uvicorn: an ASGI app streams a response from an async generator, so a relayed SSE
stream is never buffered; uvicorn is the standard server for it (HTTP/1.1 keep-alive, graceful
shutdown), and tests run the same app in-process on a real socket. httpx is the upstream client
(async, streaming, already a dependency). Needs the `proxy` extra (`pip install 'compactor[proxy]'`).

With `expand_tool` (`--expand-tool`) a compacted request also offers the expand tool in that API's
tool format; when the upstream's reply calls it and nothing else, the proxy answers from the store
and asks again (at most `MAX_EXPAND_ROUNDS` times), so the client sees one normal reply. Those
requests are buffered per round: a streamed one is streamed upstream, read whole, and its final
round's stream is relayed to the client once it has ended. Without it, compaction runs with
`expand_tool=None`, so no summary or stub mentions a tool the model does not have.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import logging
import os
import sys
import zlib
from collections import OrderedDict
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import httpx

from compactor.apps.auto import AutoCompactor
from compactor.apps.tools import EXPAND_TOOL, EXPAND_TOOL_NAME, handle_expand_call
from compactor.errors import CompactorError, InputError
from compactor.formats.providers import check_wire, tool_in
from compactor.formats.records import INPUT_LIMIT_ENV, max_input_bytes
from compactor.store import ChunkStore, open_store

if TYPE_CHECKING:  # the `proxy` extra is imported where the app is built
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response

log = logging.getLogger(__name__)

#: The routes the proxy compacts: path -> API.
ROUTES = {"/v1/chat/completions": "chat", "/v1/responses": "responses", "/v1/messages": "anthropic"}
#: Body size cap without `--max-body` and without $COMPACTOR_MAX_INPUT_BYTES.
DEFAULT_MAX_BODY = 32 * 1024 * 1024
#: How many times one request may answer the model's expand calls before its reply goes back as it is.
MAX_EXPAND_ROUNDS = 4
#: Bodies under this size (and under the trigger in bytes) have their history checked on the event
#: loop (a count of a few thousand tokens at most); others in a worker thread.
INLINE_BYTES = 16 * 1024
#: Replies of a known length up to this size that are not event streams are read whole, then sent.
BUFFER_BYTES = 1024 * 1024
#: Conversations kept (each with its own AutoCompactor); the least recently used go first.
MAX_CONVERSATIONS = 256
#: Headers that belong to one connection (RFC 9110 7.6.1), and those httpx or uvicorn set themselves.
#: `expect` too: uvicorn answered the client's 100-continue, and the proxy holds the whole body.
HOP_BY_HOP = frozenset({"connection", "keep-alive", "proxy-authenticate", "proxy-authorization",
                        "proxy-connection", "te", "trailer", "trailers", "transfer-encoding", "upgrade",
                        "host", "content-length", "expect"})
#: Seconds to wait on the upstream (connecting, and between bytes of its reply) without `--timeout`.
DEFAULT_TIMEOUT = 600.0
#: Request fields that point at history the provider keeps: the request's own is only the new part.
SERVER_STATE = ("previous_response_id", "conversation")
#: Request content encodings the proxy reads on a compacting route (zlib's window bits for each).
ENCODINGS = {"gzip": 31, "x-gzip": 31, "deflate": 15}


@dataclass
class Conversation:
    """One conversation's compactor, and a lock so its requests compact one at a time."""

    auto: AutoCompactor
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


@dataclass
class Outgoing:
    """What goes upstream for a request the proxy read: the body, and the parsed request when the
    history was compacted (None: the client's bytes go as they are)."""

    body: bytes
    data: dict[str, Any] | None = None
    conversation: Conversation | None = None


class Proxy:
    """The proxy's state: settings, the upstream client, and the conversations by prefix key."""

    def __init__(self, upstream: str, *, window: int, trigger: int | float | None = None,
                 store: str | ChunkStore | None = None, expand_tool: bool = False,
                 max_body: int | None = None, max_conversations: int = MAX_CONVERSATIONS,
                 timeout: float = DEFAULT_TIMEOUT, **options: Any) -> None:
        self.upstream = _upstream_root(upstream)
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0:
            raise InputError(f"timeout must be a positive number of seconds, not {timeout!r}")
        self.max_body = default_max_body() if max_body is None else _positive("max_body", max_body)
        self.max_conversations = _positive("max_conversations", max_conversations)
        self.expand_tool = expand_tool
        self.timeout = float(timeout)
        self.store = open_store(store)
        self._settings: dict[str, Any] = {"window": window, "trigger": trigger, "store": self.store,
                                          "expand_tool": EXPAND_TOOL_NAME if expand_tool else None,
                                          **options}
        self._probe = AutoCompactor(record=False, **self._settings)  # checks the settings now
        self.counter = self._probe.counter
        self._expand_tokens = {api: self.counter.count(json.dumps(tool_in(EXPAND_TOOL, check_wire(api))))
                               for api in ROUTES.values()}
        self.conversations: OrderedDict[str, Conversation] = OrderedDict()
        self.client: httpx.AsyncClient | None = None

    def conversation(self, key: str) -> Conversation:
        """The conversation of a prefix key, made on first use; the least recently used past the
        bound is dropped (its originals stay in the store)."""
        found = self.conversations.get(key)
        if found is None:
            found = Conversation(AutoCompactor(session=f"proxy-{key[:16]}", **self._settings))
            self.conversations[key] = found
            while len(self.conversations) > self.max_conversations:
                self.conversations.popitem(last=False)
        else:
            self.conversations.move_to_end(key)
        return found

    def url(self, path: str, query: str) -> str:
        """The upstream URL of a request path: the upstream's root (its path without a final `/v1`)
        followed by the path, so `--upstream http://h/v1` and `http://h` both send `/v1/messages` to
        `http://h/v1/messages`."""
        return self.upstream + path + (f"?{query}" if query else "")

    async def prepare(self, api: str, body: bytes) -> Outgoing:
        """The body to send for a request on a compacting route: the client's bytes while the
        history is under the trigger or not one the proxy reads, else the compacted request."""
        from starlette.concurrency import run_in_threadpool

        try:
            data = json.loads(body)
        except ValueError:
            return Outgoing(body)
        name = "input" if api == "responses" else "messages"
        items = data.get(name) if isinstance(data, dict) else None
        if not isinstance(items, list) or not items or not all(isinstance(i, dict) for i in items):
            return Outgoing(body)
        if api == "responses" and any(data.get(k) for k in SERVER_STATE):
            return Outgoing(body)  # the history lives upstream: what is sent is only its newest part
        conversation = self.conversation(_key(api, data, items))
        fmt = {} if api == "chat" else {"format": api}

        def compact() -> list[Any]:  # the overhead (tool schemas can be large) is counted with the rest
            return conversation.auto.maybe_compact(items, extra_tokens=self._overhead(api, data), **fmt)

        # a short history is counted faster than a thread is woken; one that might pass the trigger
        # (a token takes at least a byte) goes to a worker, so the event loop relays other streams
        # while it compacts
        inline = len(body) + self._expand_tokens[api] < min(INLINE_BYTES, conversation.auto.trigger_tokens)
        async with conversation.lock:
            try:
                result = compact() if inline else await run_in_threadpool(compact)
            except (CompactorError, UnicodeError) as exc:  # a history compactor cannot read (or with
                # lone surrogates, which UTF-8 cannot carry): it goes as it came
                log.warning("%s: history left as sent (%s)", api, type(exc).__name__)
                return Outgoing(body)
        if len(result) == len(items) and all(a is b for a, b in zip(result, items, strict=True)):
            log.debug("%s: %d items under the trigger, forwarded as sent", api, len(items))
            return Outgoing(body)
        data[name] = list(result)
        if self.expand_tool:
            _add_tool(api, data)
        log.info("%s: history of %d items sent as %d (compactions: %d)", api, len(items), len(result),
                 conversation.auto.compactions)
        return Outgoing(_dumps(data), data, conversation)

    def _overhead(self, api: str, data: dict[str, Any]) -> int:
        """Tokens the request spends outside its history: tool schemas, the top-level system prompt
        (Anthropic) or instructions (Responses), and the expand tool when the proxy adds it."""
        parts = [data.get("tools"), data.get("system") if api == "anthropic" else None,
                 data.get("instructions") if api == "responses" else None]
        text = "".join(p if isinstance(p, str) else json.dumps(p, ensure_ascii=False) for p in parts if p)
        return self.counter.count(text) + (self._expand_tokens[api] if self.expand_tool else 0)


class _WithoutQuery(logging.Filter):
    """Drops the query from the URLs httpx logs: some providers take the key as a query parameter."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(a.copy_with(query=None) if isinstance(a, httpx.URL) else a
                                for a in record.args)
        return True


def _hide_queries() -> None:
    """Install `_WithoutQuery` on httpx's logger, once per process."""
    logger = logging.getLogger("httpx")
    if not any(isinstance(f, _WithoutQuery) for f in logger.filters):
        logger.addFilter(_WithoutQuery())


def default_max_body() -> int:
    """$COMPACTOR_MAX_INPUT_BYTES when set, else 32 MiB."""
    return max_input_bytes() if os.environ.get(INPUT_LIMIT_ENV, "").strip() else DEFAULT_MAX_BODY


def create_app(upstream: str, *, window: int, trigger: int | float | None = None,
               store: str | ChunkStore | None = None, expand_tool: bool = False,
               max_body: int | None = None, max_conversations: int = MAX_CONVERSATIONS,
               timeout: float = DEFAULT_TIMEOUT, **options: Any) -> Starlette:
    """The proxy as an ASGI app (serve it with uvicorn). `window`/`trigger` and any other keyword
    (`reserve`, `target`, `keep_last`, `tiers`, ...) go to each conversation's `AutoCompactor`;
    `store`: where originals go (a path for SQLite; default in memory); `timeout`: seconds to wait
    on the upstream (to connect, and between the bytes of a reply, so a long stream that keeps
    coming is never cut). `app.state.proxy` is the `Proxy`."""
    from starlette.applications import Starlette
    from starlette.routing import Route

    _hide_queries()
    proxy = Proxy(upstream, window=window, trigger=trigger, store=store, expand_tool=expand_tool,
                  max_body=max_body, max_conversations=max_conversations, timeout=timeout, **options)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        limits = httpx.Limits(max_connections=1000, max_keepalive_connections=100)
        async with httpx.AsyncClient(timeout=httpx.Timeout(proxy.timeout, connect=min(10.0, proxy.timeout)),
                                     limits=limits,
                                     trust_env=False) as client:
            proxy.client = client
            yield
            proxy.client = None

    async def endpoint(request: Request) -> Response:
        return await _handle(proxy, request)

    methods = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]
    app = Starlette(routes=[Route("/{path:path}", endpoint, methods=methods)], lifespan=lifespan)
    app.state.proxy = proxy
    return app


async def _handle(proxy: Proxy, request: Request) -> Response:
    """One request: read it (capped), compact it on a compacting route, send it, relay the reply."""
    path = request.url.path
    if any(segment in (".", "..") for segment in path.split("/")):
        # `..` would leave the upstream's base path once the URL is resolved (`%2e%2e` included)
        return _error(400, "invalid_request", "compactor-proxy refuses paths with dot segments (. or ..)")
    body = await _read_capped(request, proxy.max_body)
    if body is None:
        return _too_large(proxy, request.method, path)
    api = ROUTES.get(path.rstrip("/")) if request.method == "POST" else None
    headers = [(k, v) for k, v in request.headers.items() if k.lower() not in HOP_BY_HOP]
    encoding = request.headers.get("content-encoding", "").strip().lower()
    readable = body
    if api and encoding:
        decoded = _decompressed(body, encoding, proxy.max_body)
        if decoded is _OVER:
            return _too_large(proxy, request.method, path)
        readable = decoded if isinstance(decoded, bytes) else b""  # not one it reads: goes as it came
    outgoing = await proxy.prepare(api, readable) if api and readable else Outgoing(body)
    if outgoing.data is None:
        outgoing = Outgoing(body)  # the client's own bytes, still encoded as they came
    elif encoding:
        headers = [(k, v) for k, v in headers if k.lower() != "content-encoding"]
    # the path as the client sent it, encoded slashes kept; the upstream's host, never one the
    # target names (an absolute-form target never reaches here: its path does not start with /)
    raw = request.scope.get("raw_path")
    url = proxy.url(raw.decode("latin-1") if isinstance(raw, bytes) else path, request.url.query)
    if api and outgoing.data is not None and outgoing.conversation is not None and proxy.expand_tool:
        return await _expand_rounds(proxy, api, url, headers, outgoing.data, outgoing.conversation)
    log.debug("%s %s -> upstream (%d bytes)", request.method, path, len(outgoing.body))
    return await _relay(proxy, request.method, url, headers, outgoing.body)


def _too_large(proxy: Proxy, method: str, path: str) -> Response:
    log.warning("%s %s: body over %d bytes refused", method, path, proxy.max_body)
    return _error(413, "request_too_large",
                  f"the request body is over the proxy's limit of {proxy.max_body} bytes; raise it with "
                  f"--max-body BYTES (or {INPUT_LIMIT_ENV})")


_OVER = object()  # a decompressed body past the cap


def _decompressed(body: bytes, encoding: str, cap: int) -> bytes | object | None:
    """A gzip or deflate body decompressed, never past `cap` bytes (`_OVER` then, so a small bomb
    costs nothing); None for another encoding or a body that does not decompress."""
    bits = ENCODINGS.get(encoding)
    if bits is None:
        return None
    inflater = zlib.decompressobj(bits)
    try:
        out = inflater.decompress(body, cap + 1)
    except zlib.error:
        return None
    if len(out) > cap or inflater.unconsumed_tail:
        return _OVER
    return out if inflater.eof else None


def _dumps(data: Any) -> bytes:
    """A body as JSON in UTF-8; with `\\u` escapes where the text holds lone surrogates UTF-8 cannot
    carry (they came in as escapes too)."""
    try:
        return json.dumps(data, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(data).encode("ascii")


async def _read_capped(request: Request, cap: int) -> bytes | None:
    """The request body, or None once it passes `cap` bytes (reading stops there)."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > cap:
        return None
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > cap:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


async def _relay(proxy: Proxy, method: str, url: str, headers: list[tuple[str, str]],
                 body: bytes) -> Response:
    """Send upstream and relay the reply as it arrives: status, headers, raw bytes (still encoded as
    the upstream sent them, so `content-encoding` stays true)."""
    from starlette.background import BackgroundTask
    from starlette.responses import Response, StreamingResponse

    client = _client(proxy)
    try:
        reply = await client.send(client.build_request(method, url, headers=headers, content=body),
                                  stream=True)
    except httpx.HTTPError as exc:
        return _unreachable(exc, proxy)
    length = reply.headers.get("content-length", "")
    if length.isdigit() and int(length) <= BUFFER_BYTES and "event-stream" not in reply.headers.get(
            "content-type", ""):  # a small whole reply: one send, without a streaming task per request
        try:
            content = b"".join([chunk async for chunk in reply.aiter_raw()])
        except httpx.HTTPError as exc:
            return _unreachable(exc, proxy)
        finally:
            await reply.aclose()
        whole = Response(content, status_code=reply.status_code)
        whole.raw_headers = _reply_headers(reply, keep_length=True)
        return whole
    response = StreamingResponse(reply.aiter_raw(), status_code=reply.status_code,
                                 background=BackgroundTask(reply.aclose))
    response.raw_headers = _reply_headers(reply, keep_length=True)
    return response


async def _expand_rounds(proxy: Proxy, api: str, url: str, headers: list[tuple[str, str]],
                         data: dict[str, Any], conversation: Conversation) -> Response:
    """Send a compacted request that offers the expand tool; while the reply calls it and nothing
    else, answer from the store and send again. The last reply goes to the client whole."""
    from starlette.responses import Response

    client = _client(proxy)
    headers = [*((k, v) for k, v in headers if k.lower() != "accept-encoding"),
               ("accept-encoding", "identity")]  # the replies are read here, so they come unencoded
    name = "input" if api == "responses" else "messages"
    streamed = bool(data.get("stream"))
    # with n choices, answering one's expand call would drop the others: each only loses its call
    rounds = MAX_EXPAND_ROUNDS if data.get("n") in (None, 1) else 0
    for round_ in range(rounds + 1):
        body = _dumps(data)
        try:
            reply = await client.post(url, headers=headers, content=body)
        except httpx.HTTPError as exc:
            return _unreachable(exc, proxy)
        turn = None
        if reply.is_success and round_ < rounds:
            answer = _sse_reply(api, reply.content) if streamed else _json(reply.content)
            turn = _expand_turn(api, answer, conversation.auto.store) if answer is not None else None
        if turn is None:
            # the client has no expand tool: a call to it beside the client's own calls (or past the
            # last round) is taken out of what the client reads
            content = _without_expand(api, reply.content, streamed) if reply.is_success else reply.content
            response = Response(content, status_code=reply.status_code)
            length = (b"content-length", str(len(content)).encode())
            response.raw_headers = [*_reply_headers(reply, keep_length=False), length]
            return response
        log.info("%s: answered the model's expand call (round %d)", api, round_ + 1)
        data[name] = [*data[name], *turn]
    raise AssertionError("unreachable")  # pragma: no cover


def _client(proxy: Proxy) -> httpx.AsyncClient:
    if proxy.client is None:
        raise RuntimeError("the proxy's upstream client is not open: serve the app with its lifespan")
    return proxy.client


def _reply_headers(reply: httpx.Response, *, keep_length: bool) -> list[tuple[bytes, bytes]]:
    """The upstream's response headers for the client, without hop-by-hop ones; the length only
    when the body is relayed as it came, the encoding only then too (httpx decoded it otherwise)."""
    drop = HOP_BY_HOP if keep_length else HOP_BY_HOP | {"content-encoding"}
    out = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in reply.headers.multi_items()
           if k.lower() not in drop]
    if keep_length and "content-length" in reply.headers:
        out.append((b"content-length", reply.headers["content-length"].encode("latin-1")))
    return out


def _error(status: int, kind: str, message: str) -> Response:
    from starlette.responses import JSONResponse

    return JSONResponse({"error": {"type": kind, "message": message}}, status_code=status)


def _unreachable(exc: httpx.HTTPError, proxy: Proxy) -> Response:
    waited = isinstance(exc, httpx.ReadTimeout | httpx.WriteTimeout)  # connected, then nothing came
    if waited:
        log.warning("upstream timed out: %s", type(exc).__name__)
        return _error(504, "upstream_timeout", f"the upstream sent nothing for {proxy.timeout:g} seconds; "
                                               f"raise the wait with --timeout SECONDS")
    log.warning("upstream unreachable: %s", type(exc).__name__)
    return _error(502, "upstream_unreachable", f"compactor-proxy could not reach the upstream "
                                               f"({type(exc).__name__})")


def _upstream_root(upstream: str) -> str:
    """The upstream URL without a trailing slash or a final `/v1` (request paths carry `/v1`)."""
    parts = urlsplit(upstream.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise InputError(f"--upstream must be an http(s) URL such as https://api.openai.com/v1, "
                         f"not {upstream!r}")
    path = parts.path.rstrip("/")
    path = path[:-3] if path.endswith("/v1") else path
    return f"{parts.scheme}://{parts.netloc}{path}"


def _positive(name: str, value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise InputError(f"{name} must be a positive whole number, not {value!r}")
    return value


def _key(api: str, data: dict[str, Any], items: Sequence[dict[str, Any]]) -> str:
    """A conversation's key: the hash of its API, model, system prompt and first user message,
    which a client resends unchanged with every turn."""
    if api == "chat":
        system: Any = [m.get("content") for m in items if m.get("role") in ("system", "developer")][:1]
    else:
        system = data.get("system") if api == "anthropic" else data.get("instructions")
    first = next((m.get("content") for m in items if m.get("role") == "user"), None)
    text = json.dumps([api, data.get("model"), system, first], sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _tool_name(api: str, tool: Any) -> Any:
    if not isinstance(tool, dict):
        return None
    function = tool.get("function")
    return function.get("name") if api == "chat" and isinstance(function, dict) else tool.get("name")


def _add_tool(api: str, data: dict[str, Any]) -> None:
    """Offer the expand tool unless the request already has a tool of that name."""
    tools = data.get("tools")
    tools = list(tools) if isinstance(tools, list) else []
    if not any(_tool_name(api, t) == EXPAND_TOOL_NAME for t in tools):
        data["tools"] = [*tools, tool_in(EXPAND_TOOL, check_wire(api))]


def _json(content: bytes) -> dict[str, Any] | None:
    try:
        data = json.loads(content)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def _sse_events(content: bytes) -> list[dict[str, Any]]:
    """The JSON data of each server-sent event in a stream (`[DONE]` and comments skipped)."""
    events = []
    for block in content.replace(b"\r\n", b"\n").split(b"\n\n"):
        lines = [line[5:].strip() for line in block.split(b"\n") if line.startswith(b"data:")]
        parsed = _json(b"\n".join(lines)) if lines and lines != [b"[DONE]"] else None
        if parsed is not None:
            events.append(parsed)
    return events


def _sse_reply(api: str, content: bytes) -> dict[str, Any] | None:
    """The reply a stream adds up to, in the API's non-streamed shape (as far as tool calls need)."""
    events = _sse_events(content)
    if api == "responses":
        done = [e["response"] for e in events if e.get("type") == "response.completed"
                and isinstance(e.get("response"), dict)]
        return done[-1] if done else None
    if api == "anthropic":
        return _anthropic_message(events)
    return _chat_message(events)


def _chat_message(events: list[dict[str, Any]]) -> dict[str, Any]:
    """A chat completion from its chunks: the first choice's content and tool calls."""
    text: list[str] = []
    calls: dict[int, dict[str, Any]] = {}
    for event in events:
        choices = event.get("choices") or []
        delta = choices[0].get("delta") or {} if choices and isinstance(choices[0], dict) else {}
        text.append(delta.get("content") or "")
        for part in delta.get("tool_calls") or []:
            call = calls.setdefault(part.get("index", 0), {"id": None, "type": "function",
                                                           "function": {"name": "", "arguments": ""}})
            call["id"] = part.get("id") or call["id"]
            function = part.get("function") or {}
            call["function"]["name"] += function.get("name") or ""
            call["function"]["arguments"] += function.get("arguments") or ""
    message = {"role": "assistant", "content": "".join(text) or None,
               "tool_calls": [calls[i] for i in sorted(calls)]}
    return {"choices": [{"message": message}]}


def _anthropic_message(events: list[dict[str, Any]]) -> dict[str, Any]:
    """An Anthropic message from its stream: content blocks with their deltas applied."""
    blocks: dict[int, dict[str, Any]] = {}
    partial_json: dict[int, str] = {}
    for event in events:
        kind, index = event.get("type"), event.get("index", 0)
        if kind == "content_block_start" and isinstance(event.get("content_block"), dict):
            blocks[index] = dict(event["content_block"])
        elif kind == "content_block_delta" and index in blocks:
            delta = event.get("delta") or {}
            if delta.get("type") == "input_json_delta":
                partial_json[index] = partial_json.get(index, "") + (delta.get("partial_json") or "")
            elif delta.get("type") == "text_delta":
                blocks[index]["text"] = blocks[index].get("text", "") + (delta.get("text") or "")
            elif delta.get("type") == "thinking_delta":
                blocks[index]["thinking"] = blocks[index].get("thinking", "") + (delta.get("thinking") or "")
            elif delta.get("type") == "signature_delta":
                blocks[index]["signature"] = delta.get("signature")
    for index, raw in partial_json.items():
        blocks[index]["input"] = _json(raw.encode("utf-8")) or {}
    return {"content": [blocks[i] for i in sorted(blocks)]}


def _expand_turn(api: str, reply: dict[str, Any], store: ChunkStore) -> list[dict[str, Any]] | None:
    """When `reply` calls the expand tool and nothing else: the history items that carry the call and
    its answers from the store, in the API's format. None otherwise."""
    def answer(call_id: Any, arguments: Any) -> str:
        call = {"id": call_id, "function": {"name": EXPAND_TOOL_NAME, "arguments": arguments}}
        return str(handle_expand_call(call, store)["content"])

    if api == "chat":
        choices = reply.get("choices") or [{}]
        message = choices[0].get("message") or {} if isinstance(choices[0], dict) else {}
        calls = message.get("tool_calls") or []
        if not calls or any((c.get("function") or {}).get("name") != EXPAND_TOOL_NAME for c in calls):
            return None
        results = [{"role": "tool", "tool_call_id": c.get("id"),
                    "content": answer(c.get("id"), c["function"].get("arguments"))}
                   for c in calls]
        return [{"role": "assistant", "content": message.get("content"), "tool_calls": calls}, *results]
    if api == "anthropic":
        content = [b for b in reply.get("content") or [] if isinstance(b, dict)]
        uses = [b for b in content if b.get("type") == "tool_use"]
        if not uses or any(b.get("name") != EXPAND_TOOL_NAME for b in uses):
            return None
        results = [{"type": "tool_result", "tool_use_id": b.get("id"),
                    "content": answer(b.get("id"), b.get("input"))} for b in uses]
        return [{"role": "assistant", "content": content}, {"role": "user", "content": results}]
    output = [o for o in reply.get("output") or [] if isinstance(o, dict)]
    calls = [o for o in output if o.get("type") == "function_call"]
    if not calls or any(o.get("name") != EXPAND_TOOL_NAME for o in calls):
        return None
    return [*output, *({"type": "function_call_output", "call_id": o.get("call_id"),
                        "output": answer(o.get("call_id"), o.get("arguments"))}
                       for o in calls)]


def _without_expand(api: str, content: bytes, streamed: bool) -> bytes:
    """A reply (JSON, or an SSE stream) without its calls to the expand tool, renumbered where the
    stream numbers its parts; the bytes as they came when there is none or it cannot be read."""
    if streamed:
        return _sse_without_expand(api, content)
    reply = _json(content)
    if reply is None or not _strip_reply(api, reply):
        return content
    return _dumps(reply)


def _is_expand(api: str, call: Any) -> bool:
    """Whether a tool call (chat `tool_calls` item, Anthropic block, Responses item) calls expand."""
    if not isinstance(call, dict):
        return False
    if api == "chat":
        return isinstance(call.get("function"), dict) and call["function"].get("name") == EXPAND_TOOL_NAME
    kind = "tool_use" if api == "anthropic" else "function_call"
    return call.get("type") == kind and call.get("name") == EXPAND_TOOL_NAME


def _strip_reply(api: str, reply: dict[str, Any]) -> bool:
    """Take the expand calls out of a whole reply, in place; whether there were any. A reply left
    without calls ends as a plain one (`stop`, `end_turn`)."""
    if api == "chat":
        found = False
        for choice in reply.get("choices") or []:
            message = choice.get("message") if isinstance(choice, dict) else None
            calls = message.get("tool_calls") if isinstance(message, dict) else None
            if not isinstance(message, dict) or not isinstance(calls, list) or not any(
                    _is_expand(api, c) for c in calls):
                continue
            found = True
            kept = [c for c in calls if not _is_expand(api, c)]
            if kept:
                message["tool_calls"] = kept
            else:
                del message["tool_calls"]
                if choice.get("finish_reason") == "tool_calls":
                    choice["finish_reason"] = "stop"
        return found
    name = "content" if api == "anthropic" else "output"
    items = reply.get(name)
    if not isinstance(items, list) or not any(_is_expand(api, i) for i in items):
        return False
    reply[name] = [i for i in items if not _is_expand(api, i)]
    if api == "anthropic" and reply.get("stop_reason") == "tool_use" and not any(
            isinstance(b, dict) and b.get("type") == "tool_use" for b in reply[name]):
        reply["stop_reason"] = "end_turn"
    return True


def _sse_without_expand(api: str, content: bytes) -> bytes:
    """An SSE stream without the events of expand calls: chat tool-call deltas, Anthropic content
    blocks and Responses output items are dropped and the rest renumbered; final events that carry
    the whole reply lose those calls too. Frames that are not JSON go as they came."""
    kinds: dict[str, type[_StreamEdit]] = {"chat": _ChatStreamEdit, "anthropic": _AnthropicStreamEdit,
                                           "responses": _ResponsesStreamEdit}
    edit = kinds[api]()
    out: list[bytes] = []
    changed = False
    text = content.replace(b"\r\n", b"\n")
    for block in text.split(b"\n\n"):
        lines = block.split(b"\n")
        data = [line[5:].strip() for line in lines if line.startswith(b"data:")]
        event = _json(b"\n".join(data)) if data else None
        if event is None:
            out.append(block)
            continue
        edited = edit(event)
        if edited is None:
            changed = True
            continue
        if edited is not event or edit.touched:
            changed = True
            edit.touched = False
            head = [line for line in lines if line and not line.startswith(b"data:")]
            payload = _dumps(edited)
            out.append(b"\n".join([*head, b"data: " + payload]))
        else:
            out.append(block)
    return b"\n\n".join(out) if changed else content


class _StreamEdit:
    """Drops and renumbers the events of one stream's expand calls; `touched` when the last event
    was changed in place."""

    touched = False

    def __call__(self, event: dict[str, Any]) -> dict[str, Any] | None:
        raise NotImplementedError


class _ChatStreamEdit(_StreamEdit):
    """Chat chunks: tool-call deltas by (choice, index); the first delta of a call carries its name."""

    def __init__(self) -> None:
        self.indexes: dict[tuple[int, int], int | None] = {}  # (choice, index) -> new index, None: dropped
        self.kept: dict[int, int] = {}
        self.dropped: set[int] = set()

    def __call__(self, event: dict[str, Any]) -> dict[str, Any] | None:
        choices = event.get("choices")
        if not isinstance(choices, list):
            return event
        emptied = False
        for choice in choices:
            if not isinstance(choice, dict):
                continue
            number = choice.get("index", 0)
            delta = choice.get("delta")
            parts = delta.get("tool_calls") if isinstance(delta, dict) else None
            if isinstance(delta, dict) and isinstance(parts, list) and parts:
                kept = [p for p in (self._part(number, p) for p in parts) if p is not None]
                if len(kept) != len(parts) or kept != parts:
                    self.touched = True
                if kept:
                    delta["tool_calls"] = kept
                else:
                    del delta["tool_calls"]
                    emptied = emptied or not any(v for v in delta.values())
            if (choice.get("finish_reason") == "tool_calls" and number in self.dropped
                    and not self.kept.get(number)):
                choice["finish_reason"] = "stop"
                self.touched = True
        if emptied and all(isinstance(c, dict) and not any(v for v in (c.get("delta") or {}).values())
                           and c.get("finish_reason") is None for c in choices):
            return None
        return event

    def _part(self, choice: int, part: Any) -> Any:
        if not isinstance(part, dict):
            return part
        key = (choice, part.get("index", 0))
        if key not in self.indexes:
            function = part.get("function")
            if isinstance(function, dict) and function.get("name") == EXPAND_TOOL_NAME:
                self.indexes[key] = None
                self.dropped.add(choice)
            else:
                self.indexes[key] = self.kept.get(choice, 0)
                self.kept[choice] = self.kept.get(choice, 0) + 1
        index = self.indexes[key]
        if index is None:
            return None
        return part if part.get("index", 0) == index else {**part, "index": index}


class _AnthropicStreamEdit(_StreamEdit):
    """Anthropic events: content blocks by index, renumbered past a dropped one."""

    def __init__(self) -> None:
        self.dropped: set[int] = set()
        self.tool_uses = 0

    def __call__(self, event: dict[str, Any]) -> dict[str, Any] | None:
        kind, index = event.get("type"), event.get("index")
        if kind == "content_block_start" and isinstance(index, int):
            block = event.get("content_block")
            if isinstance(block, dict) and block.get("type") == "tool_use":
                if block.get("name") == EXPAND_TOOL_NAME:
                    self.dropped.add(index)
                    return None
                self.tool_uses += 1
        if isinstance(index, int) and kind in ("content_block_start", "content_block_delta",
                                               "content_block_stop"):
            if index in self.dropped:
                return None
            shift = sum(1 for d in self.dropped if d < index)
            return {**event, "index": index - shift} if shift else event
        delta = event.get("delta")
        if (kind == "message_delta" and isinstance(delta, dict) and delta.get("stop_reason") == "tool_use"
                and self.dropped and not self.tool_uses):
            return {**event, "delta": {**delta, "stop_reason": "end_turn"}}
        return event


class _ResponsesStreamEdit(_StreamEdit):
    """Responses events: output items by `output_index`, renumbered past a dropped one; the final
    events' `response.output` filtered."""

    def __init__(self) -> None:
        self.dropped: set[int] = set()

    def __call__(self, event: dict[str, Any]) -> dict[str, Any] | None:
        index = event.get("output_index")
        if isinstance(index, int):
            added = event.get("type") == "response.output_item.added"
            if added and _is_expand("responses", event.get("item")):
                self.dropped.add(index)
            if index in self.dropped:
                return None
            shift = sum(1 for d in self.dropped if d < index)
            return {**event, "output_index": index - shift} if shift else event
        response = event.get("response")
        if isinstance(response, dict) and isinstance(response.get("output"), list) and _strip_reply(
                "responses", response):
            self.touched = True
        return event


def _trigger_arg(text: str) -> int | float:
    """`--trigger`: whole tokens (6000) or a fraction of the window (0.8)."""
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected tokens (6000) or a fraction of the window (0.8), "
                                         f"not {text!r}") from None


def main(argv: Sequence[str] | None = None) -> int:
    """The `compactor-proxy` console script: serve until interrupted."""
    parser = argparse.ArgumentParser(
        prog="compactor-proxy",
        description="A compacting proxy for OpenAI Chat Completions, OpenAI Responses and Anthropic "
                    "Messages: point any agent's base URL at it.")
    parser.add_argument("--upstream", required=True, metavar="URL",
                        help="the provider's base URL, with or without /v1 (https://api.openai.com/v1)")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8080, help="port to listen on (default 8080)")
    parser.add_argument("--window", type=int, required=True, metavar="N",
                        help="the model's context window in tokens")
    parser.add_argument("--trigger", type=_trigger_arg, metavar="TOKENS|FRACTION",
                        help="compact past this many tokens, or this share of the window (default 0.8)")
    parser.add_argument("--store", metavar="PATH",
                        help="SQLite chunk store for the originals (default: in memory)")
    parser.add_argument("--expand-tool", action="store_true",
                        help="offer the expand tool on compacted requests and answer its calls here")
    parser.add_argument("--max-body", type=int, metavar="BYTES",
                        help=f"largest request body (default ${INPUT_LIMIT_ENV}, else 32 MiB)")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, metavar="SECONDS",
                        help=f"seconds to wait on the upstream before a 504 (to connect, and between the "
                             f"bytes of its reply; default {DEFAULT_TIMEOUT:g})")
    parser.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    args = parser.parse_args(argv)
    try:
        import uvicorn
    except ImportError:
        print("compactor-proxy needs the proxy extra: pip install 'compactor[proxy]'", file=sys.stderr)
        return 2
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        app = create_app(args.upstream, window=args.window, trigger=args.trigger,
                         store=os.path.expanduser(args.store) if args.store else None,
                         expand_tool=args.expand_tool, max_body=args.max_body, timeout=args.timeout)
    except CompactorError as exc:
        print(f"compactor-proxy: {exc}", file=sys.stderr)
        return exc.exit_code
    # no access log: a request line carries the query string, where some providers put keys
    # the upstream's own date and server headers go back, not uvicorn's beside them
    uvicorn.run(app, host=args.host, port=args.port, access_log=False, log_level=args.log_level,
                server_header=False, date_header=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
