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

import dataclasses
import hashlib
import json
import re
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Literal, cast

from langchain.agents.middleware import AgentMiddleware, AgentState, ModelRequest, ModelResponse
from langchain.agents.structured_output import AutoStrategy, ToolStrategy
from langchain.chat_models import init_chat_model
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

from compactor.apps.auto import AUTO_KEYWORDS, AutoCompactor, AutoCounters
from compactor.apps.common import in_worker, llm_mapping, pipeline_for, refuse_unknown
from compactor.apps.conversation import CompactedMessages, count_message_tokens
from compactor.apps.overflow import compact_for_retry, is_context_overflow
from compactor.apps.pins import pin_slots
from compactor.apps.tools import EXPAND_TOOL, EXPAND_TOOL_NAME
from compactor.document import Context, Segment, Source
from compactor.errors import CompactorError
from compactor.formats.clearing import REDUCED_MARK, STUB_MARK
from compactor.formats.compaction import same_turn
from compactor.formats.messages import TOKENS_PER_REPLY, messages_tokens, read_messages, to_dict, units
from compactor.store import Batch, open_store
from compactor.text.sentences import split_sentences
from compactor.text.spans import GAP_MARK
from compactor.text.terms import terms

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

#: LangChain's context sizes (`SummarizationMiddleware`'s `trigger` and `keep`).
ContextSize = tuple[Literal["tokens", "fraction", "messages"], int | float]
#: SummarizationMiddleware's error for a fraction without a model profile, word for word.
PROFILE_NEEDED = ("Model profile information is required to use fractional token limits, "
                  "and is unavailable for the specified model. Please use absolute token "
                  "counts instead, or pass "
                  '`\n\nChatModel(..., profile={"max_input_tokens": ...})`.\n\n'
                  "with a desired integer value of the model's maximum input tokens.")
_MIDDLEWARE_KEYWORDS = frozenset({"model", "trigger", "keep", "token_counter", "window", "auto"})
_BULLET = re.compile(r"^\s*(?:[-*\u2022]|\d+[.)])\s+")


# -- retrievers -------------------------------------------------------------------------------------


class CompactorCompressor(BaseDocumentCompressor):
    """A `BaseDocumentCompressor` running a compactor pipeline (`qa` by default: query-aware) over the
    retrieved documents, within `budget` tokens for all of them together.

    Each document becomes a compactor `Source` (url from `metadata["source"]` or `["url"]`, title
    from `["title"]`); each returned Document is the kept text of one of them and only of that
    one, in retrieval order, with its metadata and id unchanged plus `compactor_source_id`,
    `compactor_chunk_ids` (the ids of the chunks the text was cut from) and `compactor_tokens`.
    A pipeline whose output mixes sources (topics, a search report) is split back by source: each
    line goes to the document it was taken from (a line read in no document is left out). The
    smallest unit kept is a whole sentence: a word window a budget cut out of a sentence is left
    out, and so is a document left with no content word. With `store` (a path or a `ChunkStore`),
    every chunk is written to it under `session`, so `compactor.expand(ids, store)` returns the
    full text around what was kept. An unknown keyword is an `InputError` naming the closest one.
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

    def __init__(self, **data: Any) -> None:
        fields = type(self).model_fields
        unknown = {key: value for key, value in data.items() if key not in fields}
        refuse_unknown("CompactorCompressor", unknown, sorted(fields))
        super().__init__(**data)

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
        kept: dict[str, list[Kept]] = {}
        for segment in result.segments:
            for piece in attributed(segment, result):
                kept.setdefault(piece.source_id, []).append(piece)
        out: list[Document] = []
        counter = self._runner.counter
        for source_id in sorted(kept, key=lambda sid: first.get(sid, len(documents))):
            if source_id not in first:
                continue
            doc, pieces = documents[first[source_id]], kept[source_id]
            text = _joined(pieces)
            if not terms(text):
                continue  # nothing that could answer anything: no content word
            chunk_ids = list(dict.fromkeys(c for p in pieces for c in p.chunk_ids))
            metadata = {**doc.metadata, SOURCE_KEY: source_id, CHUNKS_KEY: chunk_ids,
                        TOKENS_KEY: counter.count(text)}
            out.append(Document(page_content=text, metadata=metadata, id=doc.id))
        return out


@dataclasses.dataclass(frozen=True, slots=True)
class Kept:
    """A piece of kept text and the one source it was read from (`gap`: not next to the piece
    before it in the source, so a gap mark goes between them; `line`: a line of a mixed output)."""

    source_id: str
    text: str
    chunk_ids: tuple[str, ...]
    gap: bool = True
    line: bool = False


def attributed(segment: Segment, result: Context) -> list[Kept]:
    """The pieces of a segment, each with the one source it came from: its verbatim spans trimmed
    to whole sentences, or (a segment without spans, written across sources) its lines, each
    credited to the source holding it, else to the chunk of the segment sharing most of its words;
    a line read in none is left out."""
    owners = {c.id: c.source_id for c in result.chunks}
    if segment.spans:
        pieces = []
        for source_id, start, end in segment.spans:
            text = _whole_sentences(result.source(source_id).text, start, end)
            if text:
                chunk_ids = tuple(c for c in segment.chunk_ids if owners.get(c) == source_id)
                pieces.append(Kept(source_id, text, chunk_ids))
        return pieces
    mine = {owners[c] for c in segment.chunk_ids if c in owners}
    if segment.source_id and mine <= {segment.source_id}:
        return [Kept(segment.source_id, segment.text, segment.chunk_ids)]
    texts = {s.id: " ".join(s.text.split()) for s in result.sources}
    chunks = [c for c in result.chunks if c.id in set(segment.chunk_ids)] or list(result.chunks)
    pieces = []
    for line in segment.text.splitlines():
        body = _BULLET.sub("", line).strip()
        if not terms(body):
            continue
        flat = " ".join(body.split())
        found = next((sid for sid in [*sorted(mine), *texts] if flat in texts.get(sid, "")), None)
        ids: tuple[str, ...] = ()
        if found is None:  # rewritten: the chunk sharing most of its words, when most are shared
            words = set(terms(body))
            best = max(chunks, key=lambda c: len(words & set(terms(c.text))), default=None)
            if best is None or 2 * len(words & set(terms(best.text))) < len(words):
                continue
            found, ids = best.source_id, (best.id,)
        else:
            ids = tuple(c.id for c in chunks if c.source_id == found and flat in " ".join(c.text.split()))
        pieces.append(Kept(found, line.strip(), ids, line=True))
    return pieces


def _whole_sentences(text: str, start: int, end: int) -> str:
    """The whole sentences of `text` inside [start, end) (a kept span a budget cut mid-sentence
    loses the cut sentence: a fragment answers nothing)."""
    inside = [(a, b) for a, b in _sentences(text) if a >= start - _slack(text, a, start)
              and b <= end + _slack(text, end, b)]
    if not inside:
        return ""
    return text[inside[0][0]:inside[-1][1]].strip()


def _slack(text: str, a: int, b: int) -> int:
    """How far [a, b) is whitespace only (a kept span is stripped of the spaces around it)."""
    return b - a if a <= b and not text[a:b].strip() else 0


_SENTENCES: dict[int, tuple[str, list[tuple[int, int]]]] = {}


def _sentences(text: str) -> list[tuple[int, int]]:
    """Sentence spans of a source's text (the last few texts remembered: one result asks often)."""
    found = _SENTENCES.get(id(text))
    if found is not None and found[0] is text:
        return found[1]
    spans = split_sentences(text)
    if len(_SENTENCES) > 64:
        _SENTENCES.clear()
    _SENTENCES[id(text)] = (text, spans)
    return spans


def _joined(pieces: Sequence[Kept]) -> str:
    """A document's pieces: lines of a mixed output one per line, spans with a gap mark between."""
    out = ""
    for n, piece in enumerate(pieces):
        if n:
            out += "\n" if piece.line and pieces[n - 1].line else GAP_MARK
        out += piece.text
    return out


def document_source(doc: Document) -> Source:
    """A Document as a compactor Source (url and title from its metadata)."""
    meta = doc.metadata or {}
    url = meta.get("source") or meta.get("url")
    title = meta.get("title")
    return Source.from_text(doc.page_content, uri=str(url) if url else None,
                            title=str(title) if title else None)


# -- agents -----------------------------------------------------------------------------------------


class CompactorMiddleware(AutoCounters, AgentMiddleware):
    """Compacts the agent's messages before a model call once they pass the trigger.

    Takes `SummarizationMiddleware`'s configuration: `model` (a chat model, or a "provider:name"
    string for `init_chat_model`) whose profile's `max_input_tokens` is the window;
    `trigger=("tokens", 6000)`, `("fraction", 0.75)`, `("messages", 50)`, a dict of them (all
    met) or a list (any one met); `keep=("messages", 6)`, `("tokens", N)` or `("fraction", f)`:
    the last turns kept verbatim after the summary, whole tool calls with their results (at least
    that many messages, within that many tokens); `token_counter`: counts the state's messages for
    the trigger. The summary is compactor's (rules, or `llm=`), never a call to `model`.
    It also takes `AutoCompactor`'s settings (`window`, `reserve` or `trigger` as tokens or a
    fraction, `target`, `keep_last`, `tools_tokens`, `store`, `session`, `pipeline`, `plugins`,
    `llm`, `query`, ...) or a ready `auto=`; an unknown keyword is an `InputError` naming the
    closest one. The state's messages are measured as OpenAI messages; the agent's system prompt
    and tool schemas are not in the state, so the middleware measures them on each model request
    (`wrap_model_call`) and counts them against the trigger from the next check on (the larger of
    that and `tools_tokens`); before the first request, only `tools_tokens` counts.
    Past the trigger the state's messages are replaced by the compacted list (`rebuild`), which is
    what the compaction counted: the messages it keeps as they are are the state's own objects, so
    ids, AIMessage tool calls and their ToolMessages stay as they were, and a tool call is never
    kept without its results; a ToolMessage whose output a tier cleared or reduced, or that a
    summary brought back from its stub, is a copy with that text; pins (`pin=`) go in once after
    every compaction. `tools` holds the `expand_context` tool (create_agent offers it to the
    model); `compactions`, `tokens_saved` and `stats()` count. The async hooks run the
    compaction in a worker thread, so the event loop is never blocked.

    When the model call raises a context-length error (`is_context_overflow`: the provider's
    exception, as LangChain chat models raise it) the request's messages are compacted
    (`compact_for_retry`: to the target, or lower when the error shows a smaller window) and the
    model is called once more with them; a second error of any kind is raised. The compacted
    history also replaces the state's messages with the reply (when the request carried the
    state's own messages), so the next calls start from it rather than overflowing again.
    """

    def __init__(self, model: Any = None, *, trigger: Any = None, keep: ContextSize | None = None,
                 token_counter: Callable[[Sequence[BaseMessage]], int] | None = None,
                 window: int | None = None, auto: AutoCompactor | None = None, **settings: Any) -> None:
        if isinstance(model, int) and not isinstance(model, bool):  # CompactorMiddleware(128_000)
            if window is not None:
                raise TypeError("give the window once: CompactorMiddleware(window=...)")
            model, window = None, model
        refuse_unknown("CompactorMiddleware", {k: v for k, v in settings.items() if k not in AUTO_KEYWORDS},
                       sorted(AUTO_KEYWORDS | _MIDDLEWARE_KEYWORDS))
        chat_model = init_chat_model(model) if isinstance(model, str) else model
        self.model = chat_model
        self.token_counter = token_counter
        self.keep = None if keep is None else validate_context_size(keep, "keep")
        self.clauses = trigger_clauses(trigger)  # None: the AutoCompactor's own trigger (tokens)
        if auto is not None:
            if window is not None or settings or model is not None or self.clauses is not None \
                    or keep is not None:
                raise TypeError("give auto= or AutoCompactor settings, not both")
        else:
            if keep is not None and "keep_last" in settings:
                raise TypeError("give keep= (LangChain's form) or keep_last= (turns), not both")
            window = window if window is not None else profile_window(chat_model)
            if self.clauses is not None or (self.keep is not None and self.keep[0] == "fraction"):
                fractions = any("fraction" in c for c in self.clauses or ()) or (
                    self.keep is not None and self.keep[0] == "fraction")
                if fractions and window is None:
                    raise ValueError(PROFILE_NEEDED)
                tokens = [int(c["tokens"]) for c in self.clauses or () if "tokens" in c]
                if window is None and tokens:
                    window = max(tokens)  # no model or window: the largest token threshold
            if window is None:
                raise TypeError("CompactorMiddleware needs window= (tokens), model= (a chat model with "
                                "a profile), a (\"tokens\", N) trigger, or auto= (an AutoCompactor)")
            if self.clauses is not None:
                settings["trigger"] = clause_tokens(self.clauses, window)
            elif trigger is not None:
                settings["trigger"] = trigger
            auto = AutoCompactor(window, **{"remember": False, **settings})  # the state is replaced
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
        # measured with the pins an earlier compaction put in (they are sent), compacted without
        # them: the compaction puts them in again as they read now, and its report's indices are
        # those of the list it was given
        before = self.auto.tokens(dicts)
        self.auto.checks += 1
        if not self._due(messages, before):
            return None
        unpinned = [m for m in messages if not is_pin(m)]
        if len(unpinned) < len(messages):
            messages = unpinned
            dicts, owners = openai_messages(messages)
        # met by a message count or the caller's counter while under the compactor's own trigger:
        # the summary alone, to half the size (the target would leave such a history as it is)
        summary_only = before <= self.auto.trigger_tokens
        turns, tail = kept_turns(self.keep, dicts, self.auto) if self.keep is not None else (None, 0)
        # (the kept turns take at most half of a compaction's budget)
        budget = max(1, min(self.auto.target_tokens, before - 1, max(before // 2, 2 * tail + 200))) \
            if summary_only else None
        compacted = self.auto.compact(dicts, tokens_before=before, budget=budget, keep_last=turns,
                                      tiers=("summary",) if summary_only else None)
        if compacted.summary is None and not compacted.report.get("replaced"):
            return None  # the cheap tiers changed nothing
        return {"messages": [RemoveMessage(id=REMOVE_ALL_MESSAGES),
                             *rebuild(messages, dicts, owners, compacted)]}

    async def abefore_model(self, state: AgentState[Any], runtime: Runtime[Any]) -> dict[str, Any] | None:
        """As `before_model`, in a worker thread: the event loop goes on while it compacts."""
        return await in_worker(self.before_model, state, runtime)

    def _due(self, messages: Sequence[BaseMessage], tokens: int) -> bool:
        """Whether the trigger is met: past the compactor's trigger (`tokens`, overhead included),
        or, with LangChain's clauses, any clause whose every threshold is reached (tokens by
        `token_counter` when given, plus the overhead outside the state)."""
        if self.clauses is None:
            return tokens > self.auto.trigger_tokens
        if self.token_counter is not None:
            tokens = int(self.token_counter(list(messages))) + self.auto.tools_tokens
        return any(clause_met(clause, len(messages), tokens, self.auto.window) for clause in self.clauses)

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
        """As `wrap_model_call`; the retry's compaction runs in a worker thread."""
        overhead = self._measure(request)
        try:
            return await handler(request)
        except Exception as exc:
            if not is_context_overflow(exc):
                raise
            failure = exc
            # a compactor error carries the overflow as its context; the compaction in a worker
            retry = await in_worker(self._overflow_retry, request, exc, overhead)
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


def validate_context_size(context: Any, name: str) -> ContextSize:
    """A `("tokens" | "fraction" | "messages", value)` tuple, checked as SummarizationMiddleware
    checks it (same messages)."""
    if not isinstance(context, tuple) or len(context) != 2:
        raise ValueError(f"{name} must be a (kind, value) tuple such as (\"tokens\", 6000), "
                         f"(\"fraction\", 0.75) or (\"messages\", 50), not {context!r}")
    kind, value = context
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{name} value must be a number, got {value!r}")
    if kind == "fraction":
        if not 0 < value <= 1:
            raise ValueError(f"Fractional {name} values must be between 0 and 1, got {value}.")
    elif kind in {"tokens", "messages"}:
        if not isinstance(value, int):
            raise ValueError(f"{kind} {name} values must be integers, got {value!r}")
        if value <= 0:
            raise ValueError(f"{name} thresholds must be greater than 0, got {value}.")
    else:
        raise ValueError(f"Unsupported context size type {kind} for {name}.")
    return cast(ContextSize, (kind, value))


def trigger_clauses(trigger: Any) -> list[dict[str, int | float]] | None:
    """LangChain's trigger as clauses (every threshold of a clause met: AND; any clause: OR), or
    None for the compactor's own form (tokens, or a fraction of the window, or nothing)."""
    if trigger is None or isinstance(trigger, int | float):
        return None

    def clause(item: Any) -> dict[str, int | float]:
        if isinstance(item, tuple):
            kind, value = validate_context_size(item, "trigger")
            return {kind: value}
        if isinstance(item, Mapping):
            if not item:
                raise ValueError("trigger clause must specify at least one of 'tokens', 'messages', "
                                 "'fraction'")
            for kind, value in item.items():
                if kind not in {"tokens", "messages", "fraction"}:
                    raise ValueError(f"Unsupported trigger metric: {kind!r}")
                validate_context_size((kind, value), "trigger")
            return dict(item)
        raise TypeError(f"Unsupported trigger item type: {type(item)}")

    if isinstance(trigger, list):
        if not trigger:
            raise ValueError("trigger must hold at least one condition")
        return [clause(item) for item in trigger]
    if isinstance(trigger, tuple | Mapping):
        return [clause(trigger)]
    raise TypeError(f"Unsupported trigger type: {type(trigger)}")


def clause_tokens(clauses: Sequence[Mapping[str, int | float]], window: int) -> int:
    """The fewest tokens at which a clause can be met: the compactor's trigger, from which its
    target and the room of a compaction follow (80% of the window for message counts alone)."""
    levels = []
    for clause in clauses:
        needed = [int(v) if k == "tokens" else max(1, int(window * v)) for k, v in clause.items()
                  if k in ("tokens", "fraction")]
        if needed:
            levels.append(max(needed))
    return max(1, min(window, min(levels) if levels else int(window * 0.8)))


def clause_met(clause: Mapping[str, int | float], messages: int, tokens: int, window: int) -> bool:
    """Whether every threshold of a clause is reached (LangChain's "reaches or exceeds")."""
    for kind, value in clause.items():
        if kind == "messages" and messages < value:
            return False
        if kind == "tokens" and tokens < value:
            return False
        if kind == "fraction" and tokens < max(1, int(window * value)):
            return False
    return True


def profile_window(model: Any) -> int | None:
    """The model's `profile["max_input_tokens"]` (langchain-core 1.x chat models), or None."""
    profile = getattr(model, "profile", None) if model is not None else None
    value = profile.get("max_input_tokens") if isinstance(profile, Mapping) else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def kept_turns(keep: ContextSize, dicts: Sequence[dict[str, Any]], auto: AutoCompactor) -> tuple[int, int]:
    """The compaction's `keep_last` (turns, a tool call with its results being one) for LangChain's
    `keep`: the fewest last turns holding that many messages, or the most whose tokens fit that
    many tokens (a share of the window for a fraction); at least one. And their tokens."""
    parsed = read_messages(list(dicts))
    tiles = units(parsed)
    kind, value = keep
    turns = held = tokens = 0
    limit = int(value) if kind == "tokens" else max(1, int(auto.window * value))
    for tile in reversed(tiles):
        cost = messages_tokens(parsed[tile.start:tile.end], auto.counter) - TOKENS_PER_REPLY
        if kind == "messages":
            if held >= value:
                break
            held += tile.end - tile.start
        elif turns and tokens + cost > limit:
            break
        tokens += cost
        turns += 1
    return max(1, turns), tokens


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
