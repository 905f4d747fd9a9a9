"""`compactor-mcp`: compactor's faces as MCP tools, for agents in MCP hosts (Claude Desktop, IDEs)
that cannot import Python, over stdio or streamable HTTP.

    compactor-mcp --store ~/.cache/compactor/mcp.sqlite
    compactor-mcp --transport streamable-http --host 127.0.0.1 --port 8765   # http://127.0.0.1:8765/mcp

Tools: `compress` (text to a budget), `compact_messages` (a chat history to a budget; the ids its
summary cites go back through `expand`), `expand` (originals by chunk id) and the search session of
`ContextCompacter` (`process_search_results`, `get_checklist_context`, `reconstruct_report_context`).
Every tool shares one SQLite chunk store (`--store`, else `$COMPACTOR_STORE`, else a file in a
temporary folder removed at exit), so ids and sessions from one call serve the next, and a restarted
server with the same `--store` still expands them.

What a model reads of a call is its text content, so that is the result itself (the compressed
text, the originals, the checklist); the figures (tokens, ratio, ids, counts) are the structured
content, described by each tool's output schema. Each tool has a title and annotations (read-only,
idempotent, never destructive, no network), so a host can run the read-only ones without asking.
Bad arguments come back as tool errors (`isError`) the model can read; the server keeps serving.
Needs the `mcp` extra (`pip install 'compactor[mcp]'`); `import compactor` never loads this module.
"""

# no `from __future__ import annotations`: the SDK reads the tools' annotations at run time, and
# some name objects local to build_server

import argparse
import contextlib
import importlib.resources
import inspect
import io
import json
import os
import re
import signal
import socket
import sys
import tempfile
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from typing import Annotated, Any, BinaryIO, Literal, TypeVar

from pydantic import BaseModel, Field, ValidationError

try:
    import anyio
    import mcp_types
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError
    from mcp.server.stdio import stdio_server
    from mcp.shared.message import SessionMessage
    from mcp_types import CallToolResult, TextContent, ToolAnnotations
except ImportError as exc:  # pragma: no cover - the message is the point
    raise ImportError("compactor's MCP server needs the mcp package: pip install 'compactor[mcp]'") from exc

import compactor
from compactor.apps.compacter import ContextCompacter, fact_to_dict, pipeline_with_strategy
from compactor.errors import CompactorError, StoreError
from compactor.pipeline import Pipeline, resolved_pipeline, shipped_pipelines
from compactor.store import ChunkStore, SQLiteStore

#: `expand` answers with at most this many characters of originals; the ids past it are listed.
EXPAND_LIMIT_CHARS = 200_000
SEARCH_PIPELINE = "deep-search"
TRANSPORTS = ("stdio", "streamable-http")
HTTP_PATH = "/mcp"
INSTRUCTIONS = (
    "compactor compresses text, chat histories and web search results to a token budget, rule-first, "
    "and keeps every original in a chunk store: pass the chunk ids a summary or a fact cites to `expand` "
    "to read them verbatim. Search sessions: call `process_search_results` for each batch of results "
    "(same `session`), `get_checklist_context` for what was learned, `reconstruct_report_context` for "
    "the original text behind chosen facts when writing the report."
)

Session = Annotated[str, Field(min_length=1, max_length=200, description="session id: names the work "
                                                                          "in the store across calls")]
Budget = Annotated[int, Field(gt=0, description="token budget (cl100k_base tokens)")]


# -- results: pydantic models, so each tool publishes an output schema -------------------------


class CompressResult(BaseModel):
    text: str = Field(description="the compressed text (also the call's text content)")
    pipeline: str = Field(description="the shipped pipeline that ran")
    tokens: int = Field(description="tokens of `text` by the pipeline's tokenizer")
    input_tokens: int = Field(description="tokens of the input as the pipeline first read it")
    ratio: float = Field(description="tokens / input_tokens (0 for an empty input)")
    budget: int | None = Field(description="the budget given (null: the pipeline's own)")
    warnings: list[str] = Field(description="what the pipeline's steps warned about (e.g. no main text)")


TIERS_ALL: tuple[Literal["clear", "reduce", "summary"], ...] = ("clear", "reduce", "summary")


class CompactResult(BaseModel):
    messages: list[dict[str, Any]] = Field(description="the compacted message list, ready to send (the "
                                                       "call's text content is this list as JSON)")
    session: str = Field(description="the store session holding the summarised originals")
    dropped_ids: list[str] = Field(description="chunk ids of the summarised messages (for `expand`)")
    summary: str | None = Field(description="the summary message's text (null when the history fitted)")
    input_tokens: int = Field(description="tokens of the history as given")
    output_tokens: int = Field(description="tokens of `messages` (OpenAI per-message accounting)")
    ratio: float = Field(description="output_tokens / input_tokens")
    kind: str | None = Field(description="the summary template used: coding, tool, chat or meeting")
    tiers: dict[str, dict[str, Any]] = Field(default_factory=dict, description=(
        "which compaction tiers ran and the tokens each saved"))


class ExpandResult(BaseModel):
    texts: dict[str, str] = Field(description="original text by chunk id, in the order asked")
    omitted: list[str] = Field(description=f"ids left out past {EXPAND_LIMIT_CHARS} characters; "
                                           "ask for them in another call")


class SearchResult(BaseModel):
    url: str = Field(description="the page's address")
    content: str = Field(description="the page: HTML or plain text")
    title: str | None = Field(default=None, description="the page's title, if known")


class BatchResult(BaseModel):
    session: str = Field(description="the session the batch went into (pass it to the next calls)")
    strategy: str = Field(description="fact_centric, chunk_filtering or summarization")
    batch: int = Field(description="the batch's number in the session")
    results: int = Field(description="search results with text")
    new_pages: int = Field(description="pages not seen before in the session")
    chunks: int = Field(description="chunks stored from the new pages")
    dropped_pages: list[Any] = Field(description="pages dropped as duplicates of earlier ones")
    quarantined: list[Any] = Field(description="chunks quarantined as prompt injection")


class FactItem(BaseModel):
    id: str
    text: str
    chunk_ids: list[str]
    source_url: str | None
    score: float


class ChecklistResult(BaseModel):
    session: str
    strategy: str
    text: str = Field(description="the checklist as text (also the call's text content): facts citing "
                                  "chunk ids (A), chunk text (B) or the rolling summary (C)")
    tokens: int = Field(description="tokens of `text`")
    facts: list[FactItem] = Field(description="strategy A's checklist facts, best first (empty for B, C)")


class ReportContextResult(BaseModel):
    session: str
    text: str = Field(description="the verbatim original chunks behind the chosen items, by source "
                                  "(also the call's text content)")
    tokens: int = Field(description="tokens of `text`")


# -- tool metadata: descriptions, annotations, results ----------------------------------------------


def clean_description(doc: str) -> str:
    """A docstring as a host shows it to a model: the source's indentation and line wrapping are
    noise there, so each paragraph becomes one line, single-spaced."""
    paragraphs = inspect.cleandoc(doc).split("\n\n")
    return "\n".join(" ".join(p.split()) for p in paragraphs if p.strip())


F = TypeVar("F", bound=Callable[..., Any])


def _tool(server: MCPServer, title: str, *, read_only: bool, idempotent: bool) -> Callable[[F], F]:
    """Register a tool with its title, clean description and annotations. No tool deletes or
    overwrites anything (the store only grows), and none reaches the network."""
    def register(fn: F) -> F:
        annotations = ToolAnnotations(title=title, read_only_hint=read_only, destructive_hint=False,
                                      idempotent_hint=idempotent, open_world_hint=False)
        server.add_tool(fn, title=title, description=clean_description(fn.__doc__ or ""),
                        annotations=annotations)
        return fn
    return register


def _result(text: str, figures: BaseModel) -> CallToolResult:
    """A call's result: `text` is what the model reads, `figures` the structured content."""
    return CallToolResult(content=[TextContent(type="text", text=text)],
                          structured_content=figures.model_dump(mode="json"))


@contextlib.contextmanager
def _tool_errors() -> Iterator[None]:
    """compactor's user-facing failures as tool errors the model reads, not crashes."""
    try:
        yield
    except CompactorError as exc:
        raise ToolError(f"{type(exc).__name__}: {exc}") from exc


# -- which pipelines `compress` offers --------------------------------------------------------------

PROBE_TEXT = ("The coolant pump stopped at 03:14 because valve V-12 was left closed. The shift restarted "
              "it at 04:02. The canteen serves soup on Fridays.")
PROBE_HTML = ("<!DOCTYPE html><html><head><title>Incident</title><style>p {margin: 0}</style></head><body>"
              "<nav><a href='/'>Home</a></nav><h1>Incident</h1><p>" + PROBE_TEXT + "</p>"
              "<script>var shown = 1;</script></body></html>")
PROBE_QUERY = "why did the pump stop"
#: A tag left in the output: the pipeline passed the page through instead of reading it.
_TAG = re.compile(r"<[A-Za-z!/][^>]*>")


def pipeline_file(name: str) -> str:
    """The packaged file of a shipped pipeline (a path, so no file in the working folder shadows
    the name)."""
    return str(importlib.resources.files("compactor.pipelines").joinpath(f"{name}.yaml"))


def reads_text(name: str) -> bool:
    """Whether a shipped pipeline turns a plain text and an HTML page into clean text, with and
    without a query. Pipelines do not declare what input they read (a conversation, subtitles,
    trusted plain text), so it is found out by running them on a small example of each."""
    pipeline = resolved_pipeline(pipeline_file(name))
    for text in (PROBE_TEXT, PROBE_HTML):
        for query in (None, PROBE_QUERY):
            try:
                out = pipeline.run(text, query=query).output or ""
            except CompactorError:
                return False
            if not out.strip() or _TAG.search(out):
                return False
    return True


# -- the server ------------------------------------------------------------------------------------


class _Tools:
    """What the tools share: the store and the resolved search pipelines (one per strategy)."""

    def __init__(self, store: ChunkStore) -> None:
        self.store = store
        self.pipelines = tuple(shipped_pipelines())
        #: the pipelines `compress` offers: those that read text and HTML into clean text
        self.text_pipelines = tuple(name for name in self.pipelines if reads_text(name))
        self._search: dict[str, Pipeline] = {}
        self._lock = threading.Lock()

    def search_pipeline(self, strategy: str) -> Pipeline:
        with self._lock:
            if strategy not in self._search:
                self._search[strategy] = pipeline_with_strategy(pipeline_file(SEARCH_PIPELINE), strategy)
            return self._search[strategy]

    def known_session(self, session: str) -> None:
        if session not in self.store.sessions():
            raise ToolError(f"unknown session {session!r}")

    def compacter(self, session: str, strategy: str | None = None, *, query: str | None = None,
                  budget: int | None = None, create: bool = False) -> ContextCompacter:
        """The search session's compacter: its strategy from the store unless the session is new."""
        stored = self.store.knowledge(session, "strategy") if session in self.store.sessions() else None
        if stored is None and not create:
            if session in self.store.sessions():
                raise ToolError(f"session {session!r} has no search results (call process_search_results)")
            raise ToolError(f"unknown session {session!r}")
        chosen = strategy or stored or "fact_centric"
        return ContextCompacter(None, store=self.store, session=session, query=query, budget=budget,
                                pipeline=self.search_pipeline(chosen))


def _pipeline_help(names: Sequence[str]) -> str:
    described = "; ".join(f"{n}: {resolved_pipeline(pipeline_file(n)).spec.description.rstrip('.')}"
                          for n in names)
    return ("a shipped pipeline (default: qa when a query is given, else generic, in reading order). "
            + described)


def build_server(store: ChunkStore) -> MCPServer:
    """The MCP server over `store`: every tool reads and writes it."""
    tools = _Tools(store)
    server: MCPServer = MCPServer("compactor", title="compactor", instructions=INSTRUCTIONS,
                                  version=compactor.__version__, log_level="WARNING")
    # the choices as a Literal, so the schema's enum and the validation are one list, and `null`
    # (the default) is a choice of its own
    pipeline_name: Any = Literal.__getitem__(tools.text_pipelines)
    pipeline_arg: Any = Annotated[pipeline_name | None,
                                  Field(description=_pipeline_help(tools.text_pipelines))]

    @_tool(server, "Compress text", read_only=True, idempotent=True)
    def compress(
        text: Annotated[str, Field(min_length=1, description="the text to compress (plain or HTML)")],
        query: Annotated[str | None, Field(description="what the reader needs; relevant text is kept first")]
        = None,
        budget: Annotated[int | None, Field(gt=0, description="token budget (default: the pipeline's)")]
        = None,
        pipeline: pipeline_arg = None,
    ) -> Annotated[CallToolResult, CompressResult]:
        """Compress text to a token budget with a shipped pipeline; with a `query`, the sentences most
        relevant to it are kept first, verbatim. The result is the compressed text."""
        name = pipeline or ("qa" if query else "generic")
        chosen = resolved_pipeline(pipeline_file(name))
        with _tool_errors():
            done = chosen.run(text, query=query, budget=budget)
        out = done.output or ""
        tokens = chosen.counter.count(out)
        warnings = [w for report in done.reports for w in report.warnings]
        figures = CompressResult(text=out, pipeline=name, tokens=tokens, input_tokens=done.input_tokens,
                                 ratio=round(tokens / done.input_tokens, 4) if done.input_tokens else 0.0,
                                 budget=budget, warnings=warnings)
        return _result(out, figures)

    @_tool(server, "Compact a chat history", read_only=False, idempotent=True)
    def compact_messages(
        messages: Annotated[list[dict[str, Any]], Field(min_length=1, description=(
            "the chat history: OpenAI-style messages ({role, content, tool_calls ...})"))],
        budget: Budget,
        session: Session = "conversation",
        keep_last: Annotated[int, Field(ge=0, le=1000, description="last turns kept verbatim")] = 4,
        query: Annotated[str | None, Field(description="text whose matches rise in every summary section")]
        = None,
        kind: Annotated[Literal["auto", "coding", "tool", "chat", "meeting"] | None,
                        Field(description="summary template (default: detected)")] = None,
        tiers: Annotated[tuple[Literal["clear", "reduce", "summary"], ...], Field(
            min_length=1, description="compaction tiers, cheapest first: clear old tool outputs into "
                                      "stubs, reduce structured outputs, summarise")] = TIERS_ALL,
        keep_tool_results: Annotated[int, Field(ge=0, le=1000, description=(
            "tool outputs kept whole by the clear tier (the latest ones)"))] = 3,
    ) -> Annotated[CallToolResult, CompactResult]:
        """Compact a chat history to `budget` tokens: system message and first request kept, the middle
        summarised into sections citing chunk ids, the last turns kept. The summarised messages are
        stored under `session`; `expand` gives them back by id. The result is the compacted message
        list as JSON."""
        with _tool_errors():
            short = compactor.compact_messages(messages, budget, keep_last=keep_last, store=tools.store,
                                               session=session, query=query, kind=kind, tiers=tiers,
                                               keep_tool_results=keep_tool_results, expand_tool="expand")
        report = short.report
        sent = list(short)
        before, after = int(report.get("original_tokens", 0)), int(report["output_tokens"])
        figures = CompactResult(messages=sent, session=short.session, dropped_ids=short.dropped_ids,
                                summary=short.summary, input_tokens=before, output_tokens=after,
                                ratio=round(after / before, 4) if before else 0.0, kind=report.get("kind"),
                                tiers=dict(report.get("tiers") or {}))
        return _result(json.dumps(sent, ensure_ascii=False), figures)

    @_tool(server, "Expand chunk ids", read_only=True, idempotent=True)
    def expand(
        ids: Annotated[list[str], Field(min_length=1, max_length=10_000, description=(
            "chunk ids or ranges cited by a summary or a fact, e.g. \"3f2a9c0d1e2b4a56-0012\" or "
            "\"3f2a9c0d1e2b4a56-0002..0057\""))],
        session: Annotated[str | None, Field(description="only accept ids of this session's sources")]
        = None,
    ) -> Annotated[CallToolResult, ExpandResult]:
        """The original text of compacted messages or search-result chunks, by chunk id. The result is
        each original under its id in brackets."""
        from compactor.apps.tools import expand_ids

        with _tool_errors():
            wanted = expand_ids(ids)
            if session is not None:
                tools.known_session(session)
                sources = {s.id for s in tools.store.sources(session)}
                foreign = [i for i in wanted if i.rpartition("-")[0] not in sources]
                if foreign:
                    raise ToolError(f"chunk id(s) not in session {session!r}: {', '.join(foreign[:10])}")
            found = compactor.expand(wanted, tools.store)
        texts: dict[str, str] = {}
        used = 0
        for cid, body in found.items():
            if texts and used + len(body) > EXPAND_LIMIT_CHARS:
                break
            texts[cid] = body
            used += len(body)
        omitted = [i for i in found if i not in texts]
        text = "\n\n".join(f"[{cid}]\n{body}" for cid, body in texts.items())
        if omitted:
            text += (f"\n\n[{len(omitted)} more past {EXPAND_LIMIT_CHARS} characters; expand them in "
                     f"another call: {', '.join(omitted)}]")
        return _result(text, ExpandResult(texts=texts, omitted=omitted))

    @_tool(server, "Add search results to a research session", read_only=False, idempotent=False)
    def process_search_results(
        results: Annotated[list[SearchResult], Field(min_length=1, max_length=500,
                                                     description="one batch of search results")],
        session: Session,
        query: Annotated[str | None, Field(description="the research question")] = None,
        strategy: Annotated[Literal["fact_centric", "chunk_filtering", "summarization"] | None, Field(
            description="A: fact_centric (facts citing chunks), B: chunk_filtering (relevant chunks), "
                        "C: summarization (a rolling summary). Default: the session's, else fact_centric")]
        = None,
        budget: Annotated[int | None, Field(gt=0, description="token budget of the batch's output")] = None,
    ) -> Annotated[CallToolResult, BatchResult]:
        """Chunk, store and compress one batch of web search results into a research session; call it
        once per batch with the same `session`, then `get_checklist_context` for what was learned."""
        with _tool_errors():
            compacter = tools.compacter(session, strategy, query=query, budget=budget, create=True)
            report = compacter.process_search_results([r.model_dump() for r in results], query=query)
        figures = BatchResult(session=session, strategy=compacter.strategy, batch=report["batch"],
                              results=report["results"], new_pages=report["new_pages"],
                              chunks=report["chunks"], dropped_pages=report["dropped_pages"],
                              quarantined=report["quarantined"])
        text = (f"Batch {figures.batch} of session {session!r} ({figures.strategy}): {figures.results} "
                f"results, {figures.new_pages} new pages, {figures.chunks} chunks stored, "
                f"{len(figures.dropped_pages)} duplicate pages dropped, {len(figures.quarantined)} chunks "
                "quarantined as prompt injection. Call get_checklist_context for what was learned.")
        return _result(text, figures)

    @_tool(server, "Read a research session's checklist", read_only=True, idempotent=True)
    def get_checklist_context(session: Session) -> Annotated[CallToolResult, ChecklistResult]:
        """What a research session has learned so far: the checklist facts (A), the relevant chunks'
        text (B) or the rolling summary (C)."""
        with _tool_errors():
            compacter = tools.compacter(session)
            found = compacter.get_checklist_context()
            text = compacter.checklist_text()
            tokens = compacter.pipeline.counter.count(text)
        facts = [] if isinstance(found, str) else [FactItem(**{k: v for k, v in fact_to_dict(f).items()
                                                                if k != "span"}) for f in found]
        return _result(text, ChecklistResult(session=session, strategy=compacter.strategy, text=text,
                                             tokens=tokens, facts=facts))

    @_tool(server, "Rebuild report evidence", read_only=True, idempotent=True)
    def reconstruct_report_context(
        session: Session,
        items: Annotated[list[str] | None, Field(description=(
            "fact ids (A) or chunk ids (B, C) to reconstruct; default: all of the session's"))] = None,
        budget: Annotated[int | None, Field(gt=0, description="token budget of the text")] = None,
        context: Annotated[int | None, Field(ge=0, le=20, description=(
            "neighbouring chunks of the same page on each side (default 1 for A, 0 otherwise)"))] = None,
    ) -> Annotated[CallToolResult, ReportContextResult]:
        """The verbatim original text behind chosen facts or chunk ids, grouped by source with titles
        and URLs, within `budget` tokens: the evidence for writing the report."""
        with _tool_errors():
            compacter = tools.compacter(session)
            text = compacter.reconstruct_report_context(items, budget, context=context)
            tokens = compacter.pipeline.counter.count(text)
        return _result(text, ReportContextResult(session=session, text=text, tokens=tokens))

    return server


# -- stdio: every line gets an answer ------------------------------------------------------------

_NOT_JSON = object()


def rejections(line: str, error: Exception) -> list[mcp_types.JSONRPCError]:
    """The JSON-RPC errors answering a line the SDK cannot read as one message: -32700 for text
    that is not JSON (a lone surrogate escape, nesting too deep), -32600 for JSON that is not a
    JSON-RPC message, one per id of a batch (MCP has no batches). The id is the line's own when
    it can be read, so a client waiting on it stops waiting; null otherwise."""
    try:
        data: Any = json.loads(line)
    except (ValueError, RecursionError):
        data = _NOT_JSON
    if data is _NOT_JSON or (isinstance(error, ValidationError)
                             and any(e["type"] == "json_invalid" for e in error.errors())):
        return [_error(_id_of(data), mcp_types.PARSE_ERROR, f"parse error: {_first_error(error)}")]
    if isinstance(data, list):
        message = "batches are not supported: send one JSON-RPC message per line"
        ids = [_id_of(item) for item in data]
        return [_error(i, mcp_types.INVALID_REQUEST, message) for i in ids if i is not None] or [
            _error(None, mcp_types.INVALID_REQUEST, message)]
    return [_error(_id_of(data), mcp_types.INVALID_REQUEST,
                   f"invalid request: not a JSON-RPC 2.0 message ({_first_error(error)})")]


def _id_of(data: Any) -> str | int | None:
    found = data.get("id") if isinstance(data, dict) else None
    return found if isinstance(found, str | int) and not isinstance(found, bool) else None


def _first_error(error: Exception) -> str:
    if isinstance(error, ValidationError) and error.errors():
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        return (f"{where}: {first['msg']}" if where else first["msg"])[:200]
    return str(error)[:200] or type(error).__name__


def _error(request_id: str | int | None, code: int, message: str) -> mcp_types.JSONRPCError:
    return mcp_types.JSONRPCError(jsonrpc="2.0", id=request_id,
                                  error=mcp_types.ErrorData(code=code, message=message))


class CheckedLines:
    """The server's input lines, each read as the SDK will read it: a line that is not one
    JSON-RPC message is answered with an error (through `reply`) instead of being passed on,
    because the SDK drops such a line without a reply and the client would wait forever."""

    def __init__(self, lines: Any, reply: Callable[[mcp_types.JSONRPCError], Awaitable[None]] | None = None
                 ) -> None:
        self.lines = lines
        self.reply = reply

    async def __aiter__(self) -> AsyncIterator[str]:
        async for line in self.lines:
            try:
                mcp_types.jsonrpc_message_adapter.validate_json(line, by_name=False)
            except (ValidationError, ValueError, RecursionError) as exc:
                if self.reply is not None:
                    for answer in rejections(line, exc):
                        await self.reply(answer)
                continue
            yield line


@contextlib.contextmanager
def _wire_stdin() -> Iterator[BinaryIO]:
    """The process's stdin for the server alone: fd 0 points at the null device meanwhile (as the
    SDK does), so a handler or child process reading stdin cannot steal the client's lines."""
    try:
        wire = os.dup(0)
        quiet = os.open(os.devnull, os.O_RDONLY)
    except OSError:  # no real descriptor 0: serve sys.stdin as is
        yield sys.stdin.buffer
        return
    os.dup2(quiet, 0)
    os.close(quiet)
    try:
        yield os.fdopen(wire, "rb", closefd=False)
    finally:
        os.dup2(wire, 0)  # the wire is never closed: a worker thread may still block reading it


async def serve_stdio(server: MCPServer) -> None:
    """`server.run("stdio")`, except that every line read gets an answer (see `CheckedLines`)."""
    lowlevel = server._lowlevel_server  # private: MCPServer runs stdio only on its own input
    with _wire_stdin() as wire:
        lines = CheckedLines(anyio.wrap_file(io.TextIOWrapper(wire, encoding="utf-8", errors="replace")))
        async with stdio_server(stdin=lines) as (read_stream, write_stream):  # type: ignore[arg-type]
            async def reply(error: mcp_types.JSONRPCError) -> None:
                await write_stream.send(SessionMessage(error))

            lines.reply = reply
            await lowlevel.run(read_stream, write_stream, lowlevel.create_initialization_options())


def default_store_path(folder: str) -> str:
    """`$COMPACTOR_STORE`, else a store file in `folder`."""
    return os.environ.get("COMPACTOR_STORE") or os.path.join(folder, "compactor-mcp.sqlite")


def _port(value: str) -> int:
    try:
        port = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {value!r}") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"a port is 0 to 65535 (0: any free port), got {port}")
    return port


def listen(host: str, port: int) -> socket.socket:
    """A listening socket on `host`:`port` (IPv4 or IPv6, as the host resolves), bound before the
    server starts so that a port in use or an unknown host is a clear message, and port 0 a free
    port the caller can print."""
    family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0][0]
    return socket.create_server((host, port), family=family)


def http_url(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if sock.family == socket.AF_INET6 else host
    return f"http://{shown}:{port}{HTTP_PATH}"


async def serve_http(server: MCPServer, sock: socket.socket, host: str) -> None:
    """The streamable HTTP transport under uvicorn (the SDK's own server) on `sock`. The SDK
    checks the Host and Origin headers when `host` is a loopback address (DNS rebinding)."""
    import uvicorn

    app = server.streamable_http_app(streamable_http_path=HTTP_PATH, host=host)
    await uvicorn.Server(uvicorn.Config(app, log_level="warning")).serve(sockets=[sock])


def main(argv: Sequence[str] | None = None) -> int:
    """The `compactor-mcp` console script: serve over stdio until the client closes it, or over
    streamable HTTP until interrupted."""
    parser = argparse.ArgumentParser(
        prog="compactor-mcp", description="compactor's tools as an MCP server over stdio or streamable HTTP.")
    parser.add_argument("--store", metavar="PATH",
                        help="SQLite chunk store shared by every tool and kept across restarts "
                             "(default: $COMPACTOR_STORE, else a temporary file removed at exit)")
    parser.add_argument("--transport", choices=TRANSPORTS, default="stdio",
                        help="stdio (default: the host starts the server and talks on its stdin and "
                             f"stdout) or streamable-http (the server listens at http://HOST:PORT{HTTP_PATH})")
    parser.add_argument("--host", help="address to listen on with streamable-http (default 127.0.0.1)")
    parser.add_argument("--port", type=_port,
                        help="port to listen on with streamable-http (default 8000; 0: any free port)")
    args = parser.parse_args(argv)
    if args.transport == "stdio" and (args.host is not None or args.port is not None):
        parser.error("--host and --port apply to --transport streamable-http; stdio has no address")
    with contextlib.ExitStack() as stack:
        path = os.path.expanduser(args.store) if args.store else default_store_path(
            stack.enter_context(tempfile.TemporaryDirectory(prefix="compactor-mcp-")))
        try:
            store = SQLiteStore(path)
        except StoreError as exc:
            print(f"compactor-mcp: {exc}", file=sys.stderr)
            return 2
        stack.callback(store.close)
        if args.transport == "stdio":
            anyio.run(serve_stdio, build_server(store))
            return 0
        host = args.host or "127.0.0.1"
        port = 8000 if args.port is None else args.port
        try:
            sock = stack.enter_context(listen(host, port))
        except OSError as exc:
            print(f"compactor-mcp: cannot listen on {host} port {port}: {exc.strerror or exc}",
                  file=sys.stderr)
            return 2
        server = build_server(store)
        # uvicorn shuts down on SIGINT or SIGTERM, then raises the signal again: as KeyboardInterrupt
        # both, so the store is closed and a temporary one removed before a clean exit
        signal.signal(signal.SIGTERM, signal.default_int_handler)
        with contextlib.suppress(KeyboardInterrupt):
            try:
                print(f"compactor-mcp: serving MCP over streamable HTTP at {http_url(sock)}", file=sys.stderr,
                      flush=True)
                anyio.run(serve_http, server, sock, host)
            finally:
                # a signal uvicorn raises again on its way out must not cut the clean-up short
                for number in (signal.SIGINT, signal.SIGTERM):
                    signal.signal(number, signal.SIG_IGN)
    return 0


if __name__ == "__main__":
    sys.exit(main())
