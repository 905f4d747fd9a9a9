"""LangChain adapters: a document compressor for retrievers and an agent middleware for histories.

    >>> from compactor.integrations.langchain import CompactorCompressor, CompactorMiddleware
    >>> retriever = ContextualCompressionRetriever(            # langchain_classic.retrievers
    ...     base_compressor=CompactorCompressor(pipeline="qa", budget=800), base_retriever=base)
    >>> compaction = CompactorMiddleware(window=128_000, reserve=16_000)
    >>> agent = create_agent(model, tools=[...], middleware=[compaction])   # adds `expand_context`

`CompactorCompressor` runs any compactor pipeline over the retrieved documents and returns what it
kept, one Document per source document still represented, in retrieval order, with the chunk ids
the text came from in its metadata. `CompactorMiddleware` runs an `AutoCompactor` before every model
call: once the agent's messages pass the trigger they are replaced (as LangChain's own
SummarizationMiddleware does) by what the compaction produced: the head, one summary message and
the last turns, or, from the cheap tiers, every message with old tool outputs as stubs. A kept
message is the very object of the state (ids, tool calls and their results unchanged) unless a
tier changed its text, when it is a copy carrying the compacted text. The middleware registers the
`expand_context` tool, which reads the summarised originals back.

Needs the extra: `pip install "compactor[langchain]"` (langchain, langchain-core; the retriever
`ContextualCompressionRetriever` lives in langchain-classic in LangChain 1.x).
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, cast

from langchain.agents.middleware import AgentMiddleware, AgentState, ModelRequest, ModelResponse
from langchain.agents.structured_output import AutoStrategy, ToolStrategy
from langchain_core.callbacks import Callbacks
from langchain_core.documents import BaseDocumentCompressor, Document
from langchain_core.messages import (
    AIMessage,
    AnyMessage,
    BaseMessage,
    HumanMessage,
    RemoveMessage,
    SystemMessage,
    convert_to_messages,
    convert_to_openai_messages,
)
from langchain_core.tools import BaseTool, StructuredTool
from langchain_core.utils.function_calling import convert_to_openai_tool
from langgraph.graph.message import REMOVE_ALL_MESSAGES
from langgraph.runtime import Runtime
from langgraph.types import Command
from pydantic import ConfigDict, Field, PrivateAttr

from compactor.apps.auto import AutoCompactor, AutoCounters
from compactor.apps.common import llm_mapping, pipeline_for
from compactor.apps.conversation import CompactedMessages, count_message_tokens
from compactor.apps.overflow import compact_for_retry, is_context_overflow
from compactor.apps.pins import pin_slots
from compactor.apps.tools import EXPAND_TOOL, EXPAND_TOOL_NAME
from compactor.document import Context, Segment, Source
from compactor.errors import CompactorError
from compactor.formats.clearing import REDUCED_MARK, STUB_MARK
from compactor.formats.compaction import same_turn
from compactor.formats.messages import TOKENS_PER_REPLY, read_messages, to_dict
from compactor.store import Batch, open_store

try:  # LangChain versions whose wrap_model_call can return a state update with the response
    from langchain.agents.middleware import ExtendedModelResponse
except ImportError:  # pragma: no cover - older LangChain 1.x: a retry's compaction stays in the request
    ExtendedModelResponse = None  # type: ignore[assignment,misc]

#: Metadata keys the compressor adds to each Document it returns.
SOURCE_KEY = "compactor_source_id"
CHUNKS_KEY = "compactor_chunk_ids"
TOKENS_KEY = "compactor_tokens"
#: `additional_kwargs["lc_source"]` of the summary message (SummarizationMiddleware uses "summarization").
SUMMARY_MARK = "compactor"
#: `additional_kwargs["lc_source"]` of a pinned message a compaction put in (`pin=`).
PIN_MARK = "compactor-pin"
#: Between a message's id and the digest of the compacted content a copy of it carries.
_COPY = "~compactor-"
_TIER_MARKS = (STUB_MARK, REDUCED_MARK)
_SUMMARY, _PIN = "summary", "pin"  # what a message of a compaction stands for, when not a kept one


# -- retrievers -------------------------------------------------------------------------------------


class CompactorCompressor(BaseDocumentCompressor):
    """A `BaseDocumentCompressor` running a compactor pipeline (`qa` by default: query-aware) over the
    retrieved documents, within `budget` tokens for all of them together.

    Each document becomes a compactor `Source` (url from `metadata["source"]` or `["url"]`, title
    from `["title"]`); each returned Document is the kept text of one of them, in retrieval order,
    with its metadata and id unchanged plus `compactor_source_id`, `compactor_chunk_ids` (the ids of
    the chunks the text was cut from) and `compactor_tokens`. A document with nothing kept is left
    out. With `store` (a path or a `ChunkStore`), every chunk is written to it under `session`, so
    `compactor.expand(ids, store)` returns the full text around what was kept.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    pipeline: Any = "qa"
    """A shipped pipeline's name, a pipeline file or a `compactor.Pipeline`."""
    budget: int = Field(default=1000, gt=0)
    """Tokens for all kept text together."""
    plugins: tuple[Any, ...] = ()
    """Objects with hookimpls adding components to a named pipeline."""
    llm: Any = None
    """None (rules only), True or LLM settings for the pipeline's guarded LLM steps."""
    store: Any = None
    """Where the chunks' original text is written (a path or a ChunkStore), or None."""
    session: str = "langchain-retriever"

    _runner: Any = PrivateAttr(default=None)

    def model_post_init(self, context: Any, /) -> None:
        self._runner = pipeline_for(self.pipeline, self.plugins)  # a bad name fails here, not mid-query
        if self.store is not None:
            self.store = open_store(self.store)

    def compress_documents(self, documents: Sequence[Document], query: str,
                           callbacks: Callbacks | None = None) -> Sequence[Document]:
        """The kept text of `documents` for `query`, one Document per document still represented."""
        first: dict[str, int] = {}  # source id -> the first document with that url and text
        sources: list[Source] = []
        for i, doc in enumerate(documents):
            if not doc.page_content.strip():
                continue
            source = document_source(doc)
            if source.id not in first:
                first[source.id] = i
                sources.append(source)
        if not sources:
            return []
        result = self._runner.run(sources, query=query or None, budget=self.budget,
                                  llm=llm_mapping(self.llm))
        if self.store is not None:
            self.store.commit_batch(self.session, Batch(
                sources=result.sources, chunks=result.chunks,
                report={"kind": "langchain-retriever", "query": query}))
        kept: dict[int, list[Segment]] = {}
        for segment in result.segments:
            owner = first.get(_segment_source(segment, result) or "")
            if owner is not None:
                kept.setdefault(owner, []).append(segment)
        if not kept and result.output:  # a pipeline whose segments cross sources (topics, summaries)
            return [Document(page_content=result.output,
                             metadata={SOURCE_KEY: [s.id for s in sources],
                                       CHUNKS_KEY: [c for s in result.segments for c in s.chunk_ids],
                                       TOKENS_KEY: result.output_tokens})]
        out: list[Document] = []
        counter = self._runner.counter
        for i in sorted(kept):
            doc, segments = documents[i], kept[i]
            text = "\n\n".join(s.text for s in segments)
            metadata = {**doc.metadata, SOURCE_KEY: _segment_source(segments[0], result),
                        CHUNKS_KEY: [c for s in segments for c in s.chunk_ids],
                        TOKENS_KEY: counter.count(text)}
            out.append(Document(page_content=text, metadata=metadata, id=doc.id))
        return out


def document_source(doc: Document) -> Source:
    """A Document as a compactor Source (url and title from its metadata)."""
    meta = doc.metadata or {}
    url = meta.get("source") or meta.get("url")
    title = meta.get("title")
    return Source.from_text(doc.page_content, uri=str(url) if url else None,
                            title=str(title) if title else None)


def _segment_source(segment: Segment, result: Context) -> str | None:
    """The source a segment's text came from: its own, else its first chunk's."""
    if segment.source_id:
        return segment.source_id
    owners = {c.id: c.source_id for c in result.chunks}
    return next((owners[c] for c in segment.chunk_ids if c in owners), None)


# -- agents -----------------------------------------------------------------------------------------


class CompactorMiddleware(AutoCounters, AgentMiddleware):
    """Compacts the agent's messages before a model call once they pass the trigger.

    Takes `AutoCompactor`'s settings (`window`, `reserve` or `trigger`, `target`, `keep_last`,
    `tools_tokens`, `store`, `session`, `pipeline`, `plugins`, `llm`, `query`, ...) or a ready
    `auto=`. The state's messages are measured as OpenAI messages; the agent's system prompt and
    tool schemas are not in the state, so the middleware measures them on each model request
    (`wrap_model_call`) and counts them against the trigger from the next check on (the larger of
    that and `tools_tokens`); before the first request, only `tools_tokens` counts.
    Past the trigger the state's messages are replaced by the compacted list (`rebuild`), which is
    what the compaction counted: the messages it keeps as they are are the state's own objects, so
    ids, AIMessage tool calls and their ToolMessages stay as they were, and a tool call is never
    kept without its results; a ToolMessage whose output a tier cleared or reduced, or that a
    summary brought back from its stub, is a copy with that text; pins (`pin=`) go in once after
    every compaction. `tools` holds the `expand_context` tool (create_agent offers it to the
    model); `compactions`, `tokens_saved` and `stats()` count.

    When the model call raises a context-length error (`is_context_overflow`: the provider's
    exception, as LangChain chat models raise it) the request's messages are compacted
    (`compact_for_retry`: to the target, or lower when the error shows a smaller window) and the
    model is called once more with them; a second error of any kind is raised. The compacted
    history also replaces the state's messages with the reply (when the request carried the
    state's own messages), so the next calls start from it rather than overflowing again.
    """

    def __init__(self, window: int | None = None, *, auto: AutoCompactor | None = None,
                 **settings: Any) -> None:
        if auto is None:
            if window is None:
                raise TypeError("CompactorMiddleware needs window= (tokens) or auto= (an AutoCompactor)")
            auto = AutoCompactor(window, **{"remember": False, **settings})  # the state is replaced
        elif window is not None or settings:
            raise TypeError("give auto= or AutoCompactor settings, not both")
        self.auto = auto
        self.expand_tool = expand_tool(auto)
        self.tools: Sequence[BaseTool] = [self.expand_tool]
        self.configured_tools_tokens = auto.tools_tokens
        #: What the last model request spent outside the state's messages (system prompt, tools).
        self.request_overhead = 0

    def __repr__(self) -> str:
        return f"CompactorMiddleware({self.auto!r})"


    def before_model(self, state: AgentState[Any], runtime: Runtime[Any]) -> dict[str, Any] | None:
        """The state update replacing the messages when they passed the trigger, else None."""
        messages = list(state["messages"])
        if not messages:
            return None
        dicts, owners = openai_messages(messages)
        unpinned = [m for m in messages if not is_pin(m)]
        if len(unpinned) == len(messages):
            compacted = self.auto.maybe_compact(dicts)
        else:
            # measured with the pins an earlier compaction put in (they are sent), compacted without
            # them: the compaction puts them in again as they read now, and its report's indices
            # are those of the list it was given
            before = self.auto.tokens(dicts)
            self.auto.checks += 1
            if before <= self.auto.trigger_tokens:
                return None
            messages = unpinned
            dicts, owners = openai_messages(messages)
            compacted = self.auto.compact(dicts, tokens_before=before)
        if not isinstance(compacted, CompactedMessages):
            return None
        if compacted.summary is None and not compacted.report.get("replaced"):
            return None  # the cheap tiers changed nothing
        return {"messages": [RemoveMessage(id=REMOVE_ALL_MESSAGES),
                             *rebuild(messages, dicts, owners, compacted)]}

    async def abefore_model(self, state: AgentState[Any], runtime: Runtime[Any]) -> dict[str, Any] | None:
        """As `before_model` (compaction is local CPU work, milliseconds to a second)."""
        return self.before_model(state, runtime)

    def wrap_model_call(self, request: ModelRequest[Any],
                        handler: Callable[[ModelRequest[Any]], ModelResponse[Any]],
                        ) -> ModelResponse[Any] | ExtendedModelResponse[Any]:
        """Measures the request's system prompt and tool schemas (not in the state) for the next
        check; on a context overflow, compacts the request's messages and calls the model once more."""
        overhead = self._measure(request)
        try:
            return handler(request)
        except Exception as exc:
            if not is_context_overflow(exc):
                raise
            failure = exc
            # a compactor error carries the overflow as its context
            retry = self._overflow_retry(request, exc, overhead)
        if retry is None:
            raise failure
        return self._with_state(request, retry, handler(retry))

    async def awrap_model_call(self, request: ModelRequest[Any],
                               handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
                               ) -> ModelResponse[Any] | ExtendedModelResponse[Any]:
        """As `wrap_model_call`."""
        overhead = self._measure(request)
        try:
            return await handler(request)
        except Exception as exc:
            if not is_context_overflow(exc):
                raise
            failure = exc
            # a compactor error carries the overflow as its context
            retry = self._overflow_retry(request, exc, overhead)
        if retry is None:
            raise failure
        return self._with_state(request, retry, await handler(retry))

    def _overflow_retry(self, request: ModelRequest[Any], failure: BaseException,
                        overhead: int) -> ModelRequest[Any] | None:
        """The request with its messages compacted after `failure`, or None when that cannot make
        it smaller (the overflow is then raised as it came). `overhead`: what this request spends
        outside its messages (`_measure`); the part the compactor's `tools_tokens` does not cover
        (another request with fewer tools measured since) is this retry's `extra_tokens`."""
        messages = [m for m in request.messages if not is_pin(m)]  # the compaction puts them in again
        dicts, owners = openai_messages(messages)
        extra = max(0, overhead - self.auto.tools_tokens)
        compacted = compact_for_retry(self.auto, dicts, failure, extra_tokens=extra)
        if compacted is None:
            return None
        if compacted.summary is None or "head" in compacted.report:
            shorter = rebuild(messages, dicts, owners, compacted)  # kept messages are the same objects
        else:  # a summary without a plan to place it (another pipeline): the compacted dicts as messages
            shorter = convert_to_messages(list(compacted))
        return request.override(messages=cast("list[AnyMessage]", shorter))

    @staticmethod
    def _with_state(request: ModelRequest[Any], retry: ModelRequest[Any],
                    response: ModelResponse[Any]) -> ModelResponse[Any] | ExtendedModelResponse[Any]:
        """The retry's response, with a state update replacing the state's messages by the compacted
        ones and the reply, when the request carried the state's own message objects (a request an
        earlier middleware rewrote for this call only is not written back)."""
        state = list(request.state.get("messages") or ()) if request.state else []
        same = len(state) == len(request.messages) and all(
            a is b for a, b in zip(state, request.messages, strict=True))
        if ExtendedModelResponse is None or not same:
            return response
        # the model node first adds the reply, then applies this update: it must carry the reply too
        update = [RemoveMessage(id=REMOVE_ALL_MESSAGES), *retry.messages, *response.result]
        return ExtendedModelResponse(model_response=response, command=Command(update={"messages": update}))

    def _measure(self, request: ModelRequest[Any]) -> int:
        """What `request` spends outside the state's messages (its system prompt, tool and
        structured-output schemas); it becomes the compactor's `tools_tokens` (at least the
        configured one), the overhead learned for the next checks, which cannot see the request."""
        counter = self.auto.counter
        overhead = 0
        if request.system_message is not None:
            overhead += count_message_tokens(convert_to_openai_messages([request.system_message]))
            overhead -= TOKENS_PER_REPLY  # the reply priming is counted with the messages
        schemas = [t if isinstance(t, dict) else convert_to_openai_tool(t) for t in request.tools or ()]
        schemas += response_format_schemas(request.response_format)
        if schemas:
            overhead += counter.count(json.dumps(schemas, ensure_ascii=False, default=str))
        self.request_overhead = overhead
        counted = max(self.configured_tools_tokens, overhead)
        if self.auto.tools_tokens != counted:  # learned once while the agent's prompt and tools stay
            self.auto.tools_tokens = counted
        return counted


def response_format_schemas(response_format: Any) -> list[dict[str, Any]]:
    """The schemas a structured-output `response_format` adds to a request (a tool per schema for
    `ToolStrategy`, the JSON schema for `ProviderStrategy`), as tool specs to count; they are sent
    outside `request.tools`."""
    if response_format is None:
        return []
    specs = getattr(response_format, "schema_specs", None)
    if specs is None and getattr(response_format, "schema_spec", None) is not None:
        specs = [response_format.schema_spec]
    if specs is None:  # AutoStrategy, or a bare schema (a pydantic model, a dict...)
        try:
            schema = response_format.schema if isinstance(response_format, AutoStrategy) else response_format
            specs = ToolStrategy(schema).schema_specs
        except Exception:  # a schema LangChain itself cannot read: nothing to count
            return []
    return [{"type": "function", "function": {"name": spec.name, "description": spec.description,
                                              "parameters": spec.json_schema}} for spec in specs]


def expand_tool(auto: AutoCompactor) -> BaseTool:
    """The `expand_context` tool answering from `auto`'s store (an error text for unknown ids)."""

    def expand_context(ids: list[str]) -> str:
        call = {"id": None, "type": "function",
                "function": {"name": EXPAND_TOOL_NAME, "arguments": {"ids": ids}}}
        return str(auto.handle_expand_call(call)["content"])

    spec = EXPAND_TOOL["function"]
    return StructuredTool.from_function(expand_context, name=EXPAND_TOOL_NAME,
                                        description=spec["description"], args_schema=spec["parameters"])


def openai_messages(messages: Sequence[BaseMessage]) -> tuple[list[dict[str, Any]], list[int]]:
    """The messages as OpenAI dicts and, for each dict, the index of the message it came from (a
    HumanMessage of Anthropic tool_result blocks becomes several tool messages)."""
    dicts: list[dict[str, Any]] = []
    owners: list[int] = []
    for i, message in enumerate(messages):
        converted = convert_to_openai_messages([message])
        dicts.extend(converted)
        owners.extend([i] * len(converted))
    return dicts, owners


def rebuild(messages: Sequence[BaseMessage], dicts: Sequence[dict[str, Any]], owners: Sequence[int],
            compacted: CompactedMessages) -> list[BaseMessage]:
    """The compacted history as LangChain messages, for any compaction of `dicts` (the messages as
    `openai_messages` gave them): cheap tiers, a summary, pins. What is sent is what the compaction
    produced and counted. A kept message the compaction sends as it is stays the original object
    (id, tool calls, metadata). One whose text it changed (a tool output cleared or reduced, a stub
    a summary brought back to its original, a system message sent as an excerpt) is a copy with
    the new text and an id derived from the original's (`copy_id`), so an id always names one
    content; a message kept in part is converted from its kept dicts. The summary and each pin are
    new messages. Raises `CompactorError` when the compaction does not line up with `dicts` (a
    compaction of another list)."""
    if len(dicts) != len(owners) or any(not 0 <= o < len(messages) for o in owners):
        raise CompactorError(f"owners has {len(owners)} entries for {len(dicts)} dicts of {len(messages)} "
                             "messages: give the dicts and owners openai_messages returned for them")
    report = compacted.report
    slots: list[int | str]
    if compacted.summary is None:  # cheap tiers only: every message, in order
        slots = list(range(len(dicts)))
    elif "head" in report and "tail" in report:
        slots = [*(int(i) for i in report["head"]), _SUMMARY, *(int(i) for i in report["tail"])]
    else:
        raise CompactorError("the compaction has a summary but no head and tail to place it between")
    slots = pin_slots(slots, compacted, list(report.get("pin_texts") or ()), _PIN)
    excerpts = {int(i) for i in (report.get("system") or {})}
    normal = [to_dict(m) for m in read_messages(list(dicts))]  # as the compaction reads them
    sizes = Counter(owners)
    out: list[BaseMessage] = []
    run: list[tuple[int, dict[str, Any]]] = []  # consecutive kept dicts of one message

    def flush() -> None:
        if run:
            owner = owners[run[0][0]]
            out.extend(_kept(messages[owner], run, normal, sizes[owner]))
            run.clear()

    for slot, message in zip(slots, compacted, strict=True):
        if isinstance(slot, str):
            flush()
            if slot == _SUMMARY:
                out.append(_summary_message(str(message.get("content")), str(message.get("role", "user"))))
            else:
                out.append(_pin_message(message))
            continue
        if not 0 <= slot < len(dicts) or not _lines_up(normal[slot], message, slot in excerpts):
            raise CompactorError(f"the compaction does not line up with the messages: its message "
                                 f"{message.get('role')!r} stands for dict {slot} (a compaction of "
                                 "another list?)")
        if run and owners[run[-1][0]] != owners[slot]:
            flush()
        run.append((slot, message))
    flush()
    return out


def _kept(original: BaseMessage, run: Sequence[tuple[int, dict[str, Any]]],
          normal: Sequence[dict[str, Any]], size: int) -> list[BaseMessage]:
    """A kept message as the compaction sends it: the original object, a copy with the compacted
    text, or (kept in part, or several dicts changed) new messages from the compacted dicts."""
    same = all(part.get("content") == normal[i].get("content") for i, part in run)
    if same and len(run) == size:
        return [original]
    if len(run) == size == 1:
        old, new = normal[run[0][0]].get("content"), run[0][1].get("content")
        return [original.model_copy(update={"content": new if new is not None else "",
                                            "id": copy_id(original.id, old, new)})]
    parts = [part for _, part in run]
    converted = list(convert_to_messages(parts))
    for n, message in enumerate(converted):
        message.id = None if original.id is None else f"{copy_id(original.id, None, parts)}-{n}"
    return converted


def copy_id(message_id: str | None, old: Any, new: Any) -> str | None:
    """The id of a copy of message `message_id` whose content went from `old` to `new`: the
    original id with the digest of the new content, or the original id itself when a stub or a
    reduction is back to the output it replaced (the content that id was first seen with)."""
    if message_id is None:
        return None
    base, separator, _ = message_id.partition(_COPY)
    if separator and _tiered(old) and not _tiered(new):
        return base
    data = json.dumps(new, sort_keys=True, ensure_ascii=False, default=str)
    return f"{base}{_COPY}{hashlib.sha256(data.encode()).hexdigest()[:16]}"


def _lines_up(original: dict[str, Any], kept: dict[str, Any], excerpt: bool) -> bool:
    """Whether a kept message of a compaction is `original`: its role, its calls and the call it
    answers; its text too, unless a tier changed it (a stub, a reduction, a summary's restored
    original) or it is a system message sent as an excerpt."""
    if not same_turn(original, kept):
        return False
    old, new = original.get("content"), kept.get("content")
    return old == new or excerpt or _tiered(old) or _tiered(new)


def _tiered(content: Any) -> bool:
    """Whether a message's content is a stub or a reduction (its text, or a block's, starts with a mark)."""
    if isinstance(content, str):
        return content.startswith(_TIER_MARKS)
    if isinstance(content, list):
        texts = [b.get(key) for b in content if isinstance(b, dict) for key in ("text", "content")]
        return any(isinstance(text, str) and text.startswith(_TIER_MARKS) for text in texts)
    return False


def _pin_message(part: dict[str, Any]) -> BaseMessage:
    """A pin the compaction put in, as a message whose id is its text's digest (the same pin keeps
    its id from one compaction to the next)."""
    message = convert_to_messages([part])[0]
    data = json.dumps(part, sort_keys=True, ensure_ascii=False, default=str)
    message.id = f"compactor-pin-{hashlib.sha256(data.encode()).hexdigest()[:16]}"
    message.additional_kwargs["lc_source"] = PIN_MARK
    return message


def _summary_message(text: str, role: str) -> AnyMessage:
    kind = {"system": SystemMessage, "assistant": AIMessage}.get(role, HumanMessage)
    return kind(content=text, id=f"compactor-{uuid.uuid4().hex}",
                additional_kwargs={"lc_source": SUMMARY_MARK})


def is_summary(message: BaseMessage) -> bool:
    """Whether `message` is a summary this middleware wrote."""
    return message.additional_kwargs.get("lc_source") == SUMMARY_MARK


def is_pin(message: BaseMessage) -> bool:
    """Whether `message` is a pin a compaction put in (the next compaction puts it in again)."""
    return message.additional_kwargs.get("lc_source") == PIN_MARK
