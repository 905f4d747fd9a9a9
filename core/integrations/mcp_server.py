"""`compactor-mcp`: compactor's faces as MCP tools over stdio, for agents in MCP hosts (Claude
Desktop, IDEs) that cannot import Python.

    compactor-mcp --store ~/.cache/compactor/mcp.sqlite

Tools: `compress` (text to a budget), `compact_messages` (a chat history to a budget; the ids its
summary cites go back through `expand`), `expand` (originals by chunk id) and the search session of
`ContextCompacter` (`process_search_results`, `get_checklist_context`, `reconstruct_report_context`).
Every tool shares one SQLite chunk store (`--store`, else `$COMPACTOR_STORE`, else a file in a
temporary folder removed at exit), so ids and sessions from one call serve the next, and a restarted
server with the same `--store` still expands them. Bad arguments come back as tool errors
(`isError`) the model can read; the server keeps serving. Needs the `mcp` extra
(`pip install 'compactor[mcp]'`); `import compactor` never loads this module.
"""

# no `from __future__ import annotations`: the SDK reads the tools' annotations at run time, and
# some name objects local to build_server

import argparse
import contextlib
import importlib.resources
import io
import json
import os
import sys
import tempfile
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from typing import Annotated, Any, BinaryIO, Literal

from pydantic import BaseModel, Field, ValidationError

try:
    import anyio
    import mcp_types
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError
    from mcp.server.stdio import stdio_server
    from mcp.shared.message import SessionMessage
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
    text: str = Field(description="the compressed text")
    tokens: int = Field(description="tokens of `text` by the pipeline's tokenizer")
    pipeline: str = Field(description="the shipped pipeline that ran")


TIERS_ALL: tuple[Literal["clear", "reduce", "summary"], ...] = ("clear", "reduce", "summary")


class CompactResult(BaseModel):
    messages: list[dict[str, Any]] = Field(description="the compacted message list, ready to send")
    session: str = Field(description="the store session holding the summarised originals")
    dropped_ids: list[str] = Field(description="chunk ids of the summarised messages (for `expand`)")
    summary: str | None = Field(description="the summary message's text (null when the history fitted)")
    input_tokens: int = Field(description="tokens of the history as given")
    output_tokens: int = Field(description="tokens of `messages` (OpenAI per-message accounting)")
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
    text: str = Field(description="the checklist as text: facts citing chunk ids (A), chunk text (B) "
                                  "or the rolling summary (C)")
    facts: list[FactItem] = Field(description="strategy A's checklist facts, best first (empty for B, C)")


class ReportContextResult(BaseModel):
    session: str
    text: str = Field(description="the verbatim original chunks behind the chosen items, by source")
    tokens: int = Field(description="tokens of `text`")


# -- the server ------------------------------------------------------------------------------------


@contextlib.contextmanager
def _tool_errors() -> Iterator[None]:
    """compactor's user-facing failures as tool errors the model reads, not crashes."""
    try:
        yield
    except CompactorError as exc:
        raise ToolError(f"{type(exc).__name__}: {exc}") from exc


class _Tools:
    """What the tools share: the store and the resolved search pipelines (one per strategy)."""

    def __init__(self, store: ChunkStore) -> None:
        self.store = store
        self.pipelines = tuple(shipped_pipelines())
        self._search: dict[str, Pipeline] = {}
        self._lock = threading.Lock()

    def pipeline_file(self, name: str) -> str:
        """The packaged file of a shipped pipeline (a path, so no file in the working folder shadows
        the name); ToolError for any other name."""
        if name not in self.pipelines:
            raise ToolError(f"unknown pipeline {name!r}; choose from {', '.join(self.pipelines)}")
        return str(importlib.resources.files("compactor.pipelines").joinpath(f"{name}.yaml"))

    def search_pipeline(self, strategy: str) -> Pipeline:
        with self._lock:
            if strategy not in self._search:
                self._search[strategy] = pipeline_with_strategy(self.pipeline_file(SEARCH_PIPELINE), strategy)
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


def build_server(store: ChunkStore) -> MCPServer:
    """The MCP server over `store`: every tool reads and writes it."""
    tools = _Tools(store)
    server: MCPServer = MCPServer("compactor", instructions=INSTRUCTIONS, version=compactor.__version__,
                                  log_level="WARNING")
    pipeline_field = Field(description="a shipped pipeline (default: qa, query-aware, when a query is given, "
                                       "else generic, in reading order): " + ", ".join(tools.pipelines),
                           json_schema_extra={"enum": list(tools.pipelines)})

    @server.tool()
    def compress(
        text: Annotated[str, Field(min_length=1, description="the text to compress (plain, HTML, SRT ...)")],
        query: Annotated[str | None, Field(description="what the reader needs; relevant text is kept first")]
        = None,
        budget: Annotated[int | None, Field(gt=0, description="token budget (default: the pipeline's)")]
        = None,
        pipeline: Annotated[str | None, pipeline_field] = None,
    ) -> CompressResult:
        """Compress text to a token budget with a shipped pipeline; with a `query`, the sentences most
        relevant to it are kept first, verbatim."""
        pipeline = pipeline or ("qa" if query else "generic")
        file = tools.pipeline_file(pipeline)
        with _tool_errors():
            out = compactor.compress(text, query=query, budget=budget, pipeline=file)
            tokens = resolved_pipeline(file).counter.count(out)
        return CompressResult(text=out, tokens=tokens, pipeline=pipeline)

    @server.tool()
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
    ) -> CompactResult:
        """Compact a chat history to `budget` tokens: system message and first request kept, the middle
        summarised into sections citing chunk ids, the last turns kept. The summarised messages are
        stored under `session`; `expand` gives them back by id."""
        with _tool_errors():
            short = compactor.compact_messages(messages, budget, keep_last=keep_last, store=tools.store,
                                               session=session, query=query, kind=kind, tiers=tiers,
                                               keep_tool_results=keep_tool_results, expand_tool="expand")
        report = short.report
        return CompactResult(messages=list(short), session=short.session, dropped_ids=short.dropped_ids,
                             summary=short.summary, input_tokens=int(report.get("original_tokens", 0)),
                             output_tokens=int(report["output_tokens"]), kind=report.get("kind"),
                             tiers=dict(report.get("tiers") or {}))

    @server.tool()
    def expand(
        ids: Annotated[list[str], Field(min_length=1, max_length=10_000, description=(
            "chunk ids or ranges cited by a summary or a fact, e.g. \"3f2a9c0d1e2b4a56-0012\" or "
            "\"3f2a9c0d1e2b4a56-0002..0057\""))],
        session: Annotated[str | None, Field(description="only accept ids of this session's sources")]
        = None,
    ) -> ExpandResult:
        """The original text of compacted messages or search-result chunks, by chunk id."""
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
        return ExpandResult(texts=texts, omitted=[i for i in found if i not in texts])

    @server.tool()
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
    ) -> BatchResult:
        """Chunk, store and compress one batch of web search results into a research session; call it
        once per batch with the same `session`."""
        with _tool_errors():
            compacter = tools.compacter(session, strategy, query=query, budget=budget, create=True)
            report = compacter.process_search_results([r.model_dump() for r in results], query=query)
        return BatchResult(session=session, strategy=compacter.strategy, batch=report["batch"],
                           results=report["results"], new_pages=report["new_pages"], chunks=report["chunks"],
                           dropped_pages=report["dropped_pages"], quarantined=report["quarantined"])

    @server.tool()
    def get_checklist_context(session: Session) -> ChecklistResult:
        """What a research session has learned so far: the checklist facts (A), the relevant chunks'
        text (B) or the rolling summary (C)."""
        with _tool_errors():
            compacter = tools.compacter(session)
            found = compacter.get_checklist_context()
            text = compacter.checklist_text()
        facts = [] if isinstance(found, str) else [FactItem(**{k: v for k, v in fact_to_dict(f).items()
                                                                if k != "span"}) for f in found]
        return ChecklistResult(session=session, strategy=compacter.strategy, text=text, facts=facts)

    @server.tool()
    def reconstruct_report_context(
        session: Session,
        items: Annotated[list[str] | None, Field(description=(
            "fact ids (A) or chunk ids (B, C) to reconstruct; default: all of the session's"))] = None,
        budget: Annotated[int | None, Field(gt=0, description="token budget of the text")] = None,
        context: Annotated[int | None, Field(ge=0, le=20, description=(
            "neighbouring chunks of the same page on each side (default 1 for A, 0 otherwise)"))] = None,
    ) -> ReportContextResult:
        """The verbatim original text behind chosen facts or chunk ids, grouped by source with titles
        and URLs, within `budget` tokens: the evidence for writing the report."""
        with _tool_errors():
            compacter = tools.compacter(session)
            text = compacter.reconstruct_report_context(items, budget, context=context)
            tokens = compacter.pipeline.counter.count(text)
        return ReportContextResult(session=session, text=text, tokens=tokens)

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


def main(argv: Sequence[str] | None = None) -> int:
    """The `compactor-mcp` console script: serve over stdio until the client closes it."""
    parser = argparse.ArgumentParser(
        prog="compactor-mcp", description="compactor's tools as an MCP server over stdio.")
    parser.add_argument("--store", metavar="PATH",
                        help="SQLite chunk store shared by every tool and kept across restarts "
                             "(default: $COMPACTOR_STORE, else a temporary file removed at exit)")
    args = parser.parse_args(argv)
    with contextlib.ExitStack() as stack:
        path = os.path.expanduser(args.store) if args.store else default_store_path(
            stack.enter_context(tempfile.TemporaryDirectory(prefix="compactor-mcp-")))
        try:
            store = SQLiteStore(path)
        except StoreError as exc:
            print(f"compactor-mcp: {exc}", file=sys.stderr)
            return 2
        stack.callback(store.close)
        anyio.run(serve_stdio, build_server(store))
    return 0


if __name__ == "__main__":
    sys.exit(main())
