"""compactor.integrations.langchain with LangChain's real classes: a ContextualCompressionRetriever
over CompactorCompressor, and a create_agent loop with CompactorMiddleware and a fake model."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest

pytest.importorskip("langchain")
pytest.importorskip("langchain_classic")

from langchain.agents import create_agent
from langchain_classic.retrievers import ContextualCompressionRetriever
from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    ToolMessage,
    convert_to_openai_messages,
)
from langchain_core.retrievers import BaseRetriever
from langchain_core.tools import tool
from pydantic import Field

import compactor
from compactor.apps.tools import expand_ids
from compactor.formats.clearing import STUB_MARK
from compactor.formats.messages import TOKENS_PER_REPLY
from compactor.integrations.langchain import (
    CHUNKS_KEY,
    SOURCE_KEY,
    TOKENS_KEY,
    CompactorCompressor,
    CompactorMiddleware,
    copy_id,
    document_source,
    is_summary,
    openai_messages,
    rebuild,
)

RANGE = re.compile(r"\b[0-9a-f]{16}-\d{4}(?:\.\.\d{4})?\b")

# -- retriever -------------------------------------------------------------------------------------

FILLER = ("Our stores are open from nine to six on weekdays. Parking is free for customers. "
          "The loyalty card collects points on every purchase. Gift wrapping is available at the desk. ")
DOCS = [
    Document(page_content=FILLER * 6, metadata={"source": "https://shop.example/hours", "title": "Hours"},
             id="d0"),
    Document(page_content=("Refunds are accepted within 30 days of delivery when the item is unused. "
                           "Refunds go back to the original payment method within 5 business days. "
                           + FILLER.replace("stores", "outlets") * 3),
             metadata={"source": "https://shop.example/refunds", "title": "Refund policy", "rank": 2},
             id="d1"),
    Document(page_content="Shipping to Canada takes 7 to 10 days and costs 15 dollars. " * 4,
             metadata={"url": "https://shop.example/shipping"}, id="d2"),
    Document(page_content=("A refund for a damaged item needs a photo of the damage. The refund is "
                           "approved by the support team within 2 days. " + FILLER * 2),
             metadata={"source": "https://shop.example/damaged", "title": "Damaged items"}, id="d3"),
]


class FixedRetriever(BaseRetriever):
    """Returns the same documents for every query (the base retriever under test)."""

    docs: list[Document]

    def _get_relevant_documents(self, query: str, *,
                                run_manager: CallbackManagerForRetrieverRun) -> list[Document]:
        return list(self.docs)


def test_compression_retriever_keeps_the_answers_within_budget() -> None:
    store = compactor.MemoryStore()
    compressor = CompactorCompressor(pipeline="qa", budget=90, store=store)
    retriever = ContextualCompressionRetriever(base_compressor=compressor,
                                               base_retriever=FixedRetriever(docs=DOCS))
    query = "How many days do customers have to ask for a refund, and how is a refund paid?"
    kept = retriever.invoke(query)
    text = "\n\n".join(d.page_content for d in kept)
    assert "within 30 days of delivery" in text and "original payment method" in text
    counter = compactor.get_counter("cl100k_base")
    assert sum(d.metadata[TOKENS_KEY] for d in kept) <= 90 and counter.count(text) <= 90
    # retrieval order, ids and metadata kept; each text traces back to its document's chunks
    order = [d.id for d in kept]
    assert order == sorted(order) and "d1" in order and "d0" not in order  # d0 is all filler
    by_id = {d.id: d for d in DOCS}
    for doc in kept:
        original = by_id[doc.id]
        assert {k: v for k, v in doc.metadata.items() if not k.startswith("compactor_")} == original.metadata
        assert doc.metadata[SOURCE_KEY] == document_source(original).id
        chunks = compactor.expand(doc.metadata[CHUNKS_KEY], store)
        assert all(cid.startswith(doc.metadata[SOURCE_KEY]) for cid in chunks)
        assert all(text in original.page_content for text in chunks.values())
        first_sentence = doc.page_content.split("\n\n")[0][:40]
        assert any(first_sentence in text for text in chunks.values())
    # the async path (run in an executor by LangChain) gives the same documents
    assert [d.page_content for d in asyncio.run(retriever.ainvoke(query))] == [d.page_content for d in kept]


def test_compressor_edge_cases() -> None:
    compressor = CompactorCompressor(budget=50)
    assert compressor.compress_documents([], "anything") == []
    assert compressor.compress_documents([Document(page_content="  ")], "anything") == []
    with pytest.raises(compactor.CompactorError):
        CompactorCompressor(pipeline="no-such-pipeline")
    with pytest.raises(ValueError, match="greater than 0"):
        CompactorCompressor(budget=0)


# -- agent -----------------------------------------------------------------------------------------

SYSTEM = "You are a support agent for an online shop. Check orders with get_order before answering."
ORDERS = [f"#W{1000 + i}" for i in range(16)]


@tool
def get_order(order_id: str) -> str:
    """Look up an order by its id (e.g. #W1003): status, items, address, history."""
    n = int(order_id.lstrip("#W"))
    return json.dumps({
        "order_id": order_id, "status": "pending" if n % 4 == 0 else "delivered",
        "customer": {"name": f"Customer {n}", "email": f"customer{n}@example.com",
                     "address": {"street": f"{n} Main Street", "city": "Springfield", "zip": f"{n:05d}"}},
        "items": [{"sku": f"SKU-{n}-{k}", "name": f"item {k} of order {n}", "price": 10 + n % 7 + k,
                   "quantity": 1 + k % 2} for k in range(5)],
        "history": [{"at": f"2026-03-{1 + k:02d}", "event": event}
                    for k, event in enumerate(["created", "paid", "packed", "shipped", "delivered"])],
    })


@tool
def search_catalog(query: str) -> str:
    """Search the product catalog; returns matching products with prices and stock."""
    return json.dumps([{"sku": f"CAT-{len(query)}-{k}", "title": f"{query} variant {k}", "price": 20 + k,
                        "stock": 3 * k, "description": f"A {query} in colour {k}, machine washable."}
                       for k in range(6)])


class ToolCallingFakeModel(GenericFakeChatModel):
    """GenericFakeChatModel with `bind_tools` (create_agent binds the tools before every call; the
    base class does not implement it) and every request recorded and checked before it answers."""

    requests: list[list[BaseMessage]] = Field(default_factory=list)
    bound: list[str] = Field(default_factory=list)
    check: Any = None

    def bind_tools(self, tools: Sequence[Any], *, tool_choice: Any = None, **kwargs: Any) -> Any:
        self.bound = [t.name for t in tools]
        return self

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None,
                  **kwargs: Any) -> Any:
        self.requests.append(list(messages))
        if self.check is not None:
            self.check(messages)
        return super()._generate(messages, stop=stop, run_manager=run_manager, **kwargs)


def _script(model: ToolCallingFakeModel, found: dict[str, str],
            lookup: Callable[[list[str]], dict[str, str]] | None = None) -> Iterator[AIMessage]:
    """The agent's side: look up every order (with a catalog search every third turn, two calls in
    one message), then, once the history was compacted twice, expand an id the summary cites (the
    first that `lookup` resolves to one of the agent's own turns, not to an earlier summary)."""
    for i, order in enumerate(ORDERS):
        calls = [{"name": "get_order", "args": {"order_id": order}, "id": f"call_order_{i}"}]
        if i % 3 == 2:
            calls.append({"name": "search_catalog", "args": {"query": f"replacement {i}"},
                          "id": f"call_search_{i}"})
        yield AIMessage(content=f"Checking order {order}.", tool_calls=calls)
    summary = next((m for m in model.requests[-1] if is_summary(m)), None)
    assert summary is not None, "the history was never compacted"
    cited = _cited_ids(str(summary.content))
    assert cited, summary.content
    wanted = cited[0]
    if lookup is not None:
        wanted = next((i for i in cited if "[compactor" not in lookup([i]).get(i, "[compactor")), wanted)
    found["id"] = wanted
    yield AIMessage(content="", tool_calls=[{"name": "expand_context", "args": {"ids": [wanted]},
                                             "id": "call_expand"}])
    answer = model.requests[-1][-1]
    assert isinstance(answer, ToolMessage) and answer.tool_call_id == "call_expand"
    found["text"] = str(answer.content)
    yield AIMessage(content="Orders #W1000, #W1004, #W1008 and #W1012 are pending; refund issued.")


def _cited_ids(text: str) -> list[str]:
    """The ids a summary cites, ranges (`<source>-0001..0008`) spelt out, in order of appearance."""
    return list(dict.fromkeys(expand_ids(RANGE.findall(text))))


def _check_history(messages: list[BaseMessage]) -> None:
    """Every ToolMessage answers a call of the AIMessage before its run; every call is answered."""
    open_calls: set[str] = set()
    for m in messages:
        if isinstance(m, ToolMessage):
            assert m.tool_call_id in open_calls, f"orphan tool result {m.tool_call_id}"
            open_calls.discard(m.tool_call_id)
            continue
        assert not open_calls, f"tool calls without results: {open_calls}"
        if isinstance(m, AIMessage):
            open_calls = {c["id"] for c in m.tool_calls}
    assert not open_calls or isinstance(messages[-1], AIMessage)  # only the last may wait for results


def test_agent_loop_compacts_twice_and_expands() -> None:
    system_tokens = compactor.count_message_tokens([{"role": "system", "content": SYSTEM}])
    middleware = CompactorMiddleware(window=4000, trigger=2600, target=0.55, keep_last=2,
                                     tools_tokens=system_tokens)
    trigger = middleware.auto.trigger_tokens
    found: dict[str, str] = {}
    seen_ids: dict[str, str] = {}
    sizes: list[int] = []

    def check(messages: list[BaseMessage]) -> None:
        assert messages[0].type == "system" and messages[1].type == "human"
        assert "W1000" in str(messages[1].content)  # the opening request, always verbatim
        _check_history(messages)
        tokens = compactor.count_message_tokens(convert_to_openai_messages(messages))
        sizes.append(tokens)
        assert tokens <= trigger, f"{tokens} tokens sent, trigger {trigger}"
        ids = [m.id for m in messages[1:]]
        assert None not in ids and len(set(ids)) == len(ids)
        for m in messages[1:]:  # a kept message is the same message: same id, same content
            assert seen_ids.setdefault(str(m.id), str(m.content)) == str(m.content)

    model = ToolCallingFakeModel(messages=iter([]), check=check)
    model.messages = _script(model, found, lambda ids: middleware.auto.expand(ids))
    agent = create_agent(model, tools=[get_order, search_catalog], system_prompt=SYSTEM,
                         middleware=[middleware])
    request = f"Check orders {', '.join(ORDERS)} and refund the pending ones."
    result = agent.invoke({"messages": [HumanMessage(request)]}, {"recursion_limit": 200})

    assert set(model.bound) == {"get_order", "search_catalog", "expand_context"}
    assert len(model.requests) == len(ORDERS) + 2
    assert middleware.compactions >= 2 and middleware.tokens_saved > 0
    assert middleware.stats()["compactions"] == middleware.compactions
    assert max(sizes) > trigger * 0.8  # the history did grow towards the trigger between compactions
    summaries = [m for m in result["messages"] if is_summary(m)]
    assert len(summaries) == 1 and isinstance(summaries[0], HumanMessage)
    _check_history(result["messages"])
    assert result["messages"][-1].content.startswith("Orders #W1000")
    # the model asked for an id the summary cited and got the original message back
    original = middleware.auto.expand([found["id"]])[found["id"]]
    assert found["text"] == f"[{found['id']}]\n{original}"
    assert "order_id" in original or "Checking order" in original
    # what the first compaction dropped is still reachable from the last summary: it cites the
    # earlier summary (stored when it was compacted in turn), which cites the first dropped ids
    first_dropped = set(middleware.auto.history[0].dropped_ids)
    texts, reached = [str(summaries[0].content)], set()
    for _ in range(middleware.compactions):
        cited = set(expand_ids(RANGE.findall("\n".join(texts)))) - reached
        reached |= cited
        texts = list(middleware.auto.expand(sorted(cited)).values())
    assert first_dropped <= reached


def test_middleware_leaves_a_short_history_alone_and_tool_reports_errors() -> None:
    middleware = CompactorMiddleware(window=100_000)
    state = {"messages": [HumanMessage("hello", id="h1")]}
    assert middleware.before_model(state, None) is None  # type: ignore[arg-type]
    assert asyncio.run(middleware.abefore_model(state, None)) is None  # type: ignore[arg-type]
    assert middleware.compactions == 0 and middleware.auto.checks == 2
    assert middleware.expand_tool.invoke({"ids": ["0123456789abcdef-0001"]}).startswith("error: ")
    with pytest.raises(TypeError):
        CompactorMiddleware()
    with pytest.raises(TypeError):
        CompactorMiddleware(4000, auto=compactor.AutoCompactor(4000))


def test_import_compactor_does_not_import_langchain() -> None:
    code = ("import sys, compactor; compactor.AutoCompactor; compactor.compact_messages; "
            "print(any(m.split('.')[0] in ('langchain', 'langchain_core', 'langgraph') "
            "or m.startswith('compactor.integrations') for m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_the_middleware_counts_the_system_prompt_and_tools_it_cannot_see_in_the_state() -> None:
    middleware = CompactorMiddleware(window=4000, trigger=2600, target=0.55, keep_last=2)  # no tools_tokens
    trigger = middleware.auto.trigger_tokens
    sizes: list[int] = []

    def check(messages: list[BaseMessage]) -> None:
        _check_history(messages)
        sizes.append(compactor.count_message_tokens(convert_to_openai_messages(messages)))

    model = ToolCallingFakeModel(messages=iter([]), check=check)
    model.messages = _script(model, {})
    long_system = SYSTEM + " " + " ".join(f"Rule {k}: never promise a refund before the order is checked."
                                          for k in range(40))
    agent = create_agent(model, tools=[get_order, search_catalog], system_prompt=long_system,
                         middleware=[middleware])
    agent.invoke({"messages": [HumanMessage("Check orders " + ", ".join(ORDERS))]}, {"recursion_limit": 200})
    overhead = middleware.request_overhead
    system_only = compactor.count_message_tokens([{"role": "system", "content": long_system}])
    assert overhead > system_only - 10  # the system prompt and the three tool schemas
    assert middleware.auto.tools_tokens == overhead
    tool_schema_tokens = overhead - (system_only - TOKENS_PER_REPLY)
    # every request after the first one, schemas included, stays under the trigger
    assert all(size + tool_schema_tokens <= trigger for size in sizes[1:]), (sizes, tool_schema_tokens)
    assert middleware.compactions >= 2


def test_the_middleware_counts_a_structured_output_schema_in_async_runs() -> None:
    # response_format's schema goes to the model outside request.tools (a tool per schema for
    # ToolStrategy); it was not counted, so requests could pass the trigger by its size
    from langchain.agents.structured_output import ProviderStrategy, ToolStrategy
    from pydantic import BaseModel

    class Refunds(BaseModel):
        """The orders to refund, with a reason for each one the customer should read."""

        order_ids: list[str] = Field(description="Order ids like #W1003 whose status is pending")
        reasons: list[str] = Field(description="One sentence per refunded order, in the same order")

    def run(response_format: Any) -> CompactorMiddleware:
        middleware = CompactorMiddleware(window=4000, trigger=2600)
        model = ToolCallingFakeModel(messages=iter([]))
        answer = {"name": "Refunds", "args": {"order_ids": [], "reasons": []}, "id": "call_final"}
        model.messages = iter([AIMessage(content="", tool_calls=[answer] if response_format else []),
                               AIMessage(content="done")])
        agent = create_agent(model, tools=[get_order], system_prompt=SYSTEM, middleware=[middleware],
                             response_format=response_format)
        asyncio.run(agent.ainvoke({"messages": [HumanMessage("Refund pending orders")]}))
        return middleware

    plain = run(None).request_overhead
    with_tool = run(ToolStrategy(Refunds)).request_overhead
    assert with_tool - plain > 40  # the Refunds schema, its descriptions included
    from compactor.integrations.langchain import response_format_schemas

    schema = response_format_schemas(ProviderStrategy(Refunds))
    assert schema and schema[0]["function"]["parameters"]["properties"]["order_ids"]
    assert response_format_schemas(Refunds) == response_format_schemas(ToolStrategy(Refunds))
    assert response_format_schemas(None) == []


def test_each_turns_request_reaches_every_model_call_of_a_thread() -> None:
    """A thread of several turns (a checkpointer keeps the messages between invocations): at every
    model call the current turn's request is sent word for word, not only as a summary line, while
    the history is compacted again and again."""
    from langgraph.checkpoint.memory import InMemorySaver

    middleware = CompactorMiddleware(window=3000, trigger=1800, target=0.5, keep_last=2)
    turns = [f"Now check orders {', '.join(ORDERS[k:k + 4])} and tell me which are pending (turn {k // 4})."
             for k in range(0, 16, 4)]
    current: dict[str, str] = {}
    seen: list[bool] = []

    def check(messages: list[BaseMessage]) -> None:
        _check_history(messages)
        sent = "\n".join(str(m.content) for m in messages)
        seen.append(current["request"] in sent)

    def script() -> Iterator[AIMessage]:
        for k in range(0, 16, 4):
            for i, order in enumerate(ORDERS[k:k + 4]):
                yield AIMessage(content=f"Checking {order}.", tool_calls=[
                    {"name": "get_order", "args": {"order_id": order}, "id": f"call_{k}_{i}"}])
            yield AIMessage(content=f"Turn {k // 4}: done.")

    model = ToolCallingFakeModel(messages=script(), check=check)
    agent = create_agent(model, tools=[get_order], system_prompt=SYSTEM, middleware=[middleware],
                         checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "t1"}, "recursion_limit": 100}
    for request in turns:
        current["request"] = request
        agent.invoke({"messages": [HumanMessage(request)]}, config)
    assert middleware.compactions >= 2
    assert len(seen) == 20 and all(seen), seen


@pytest.mark.parametrize("pin", [None, "Always name the order id in a reply."])
def test_after_clearings_a_summary_sends_what_the_compaction_counted(pin: str | None) -> None:
    """Old tool outputs are cleared into stubs first; when that is no longer enough a summary is
    written from their originals, and a stub kept in the tail comes back as its original. Every
    request is what the compaction before it produced (kept tool messages and pins included), under
    the trigger, with ids that always name the same content."""
    system_tokens = compactor.count_message_tokens([{"role": "system", "content": SYSTEM}])
    # every older output cleared at each compaction; a summary compacts to the trigger, so its tail
    # has room for turns whose outputs the state holds as stubs
    middleware = CompactorMiddleware(window=4000, trigger=2000, target=1.0, keep_last=4,
                                     keep_tool_results=0, tools_tokens=system_tokens, pin=pin)
    auto = middleware.auto
    trigger = auto.trigger_tokens
    seen_ids: dict[str, str] = {}
    tiers: list[list[str]] = []
    stubs: set[str] = set()  # tool call ids whose output a request carried as a stub
    restored: list[str] = []  # ... and a later request, after a summary, as the original again
    done = {"compactions": 0}

    def check(messages: list[BaseMessage]) -> None:
        _check_history(messages)
        sent = convert_to_openai_messages(messages)
        tokens = compactor.count_message_tokens(sent)
        assert tokens <= trigger, f"{tokens} tokens sent, trigger {trigger}"
        ids = [m.id for m in messages[1:]]
        assert None not in ids and len(set(ids)) == len(ids)
        for m in messages[1:]:  # an id always names the same content
            assert seen_ids.setdefault(str(m.id), str(m.content)) == str(m.content), m.id
        tools = {m.tool_call_id: str(m.content) for m in messages if isinstance(m, ToolMessage)}
        if pin is not None:  # once in every request after the first compaction
            assert [m.content for m in messages].count(pin) == (1 if auto.compactions else 0)
        if auto.compactions > done["compactions"]:  # compacted just before this request
            done["compactions"] = auto.compactions
            tiers.append(auto.stats()["tiers"])
            compacted = auto.last
            assert compacted is not None
            # what the model got is what the compaction produced and counted, message for message
            assert [(m["role"], m.get("tool_call_id"), m.get("content")) for m in sent[1:]] == [
                (m["role"], m.get("tool_call_id"), m.get("content")) for m in compacted]
            if compacted.summary is not None:
                restored.extend(i for i in tools if i in stubs and not tools[i].startswith(STUB_MARK))
        stubs.update(i for i, text in tools.items() if text.startswith(STUB_MARK))

    model = ToolCallingFakeModel(messages=iter([]), check=check)
    model.messages = _script(model, {})
    agent = create_agent(model, tools=[get_order, search_catalog], system_prompt=SYSTEM,
                         middleware=[middleware])
    request = f"Check orders {', '.join(ORDERS)} and refund the pending ones."
    result = agent.invoke({"messages": [HumanMessage(request)]}, {"recursion_limit": 200})

    assert len(model.requests) == len(ORDERS) + 2
    cheap = [t for t in tiers if "summary" not in t]
    assert cheap and "clear" in cheap[0] and tiers.index(cheap[0]) < next(
        k for k, t in enumerate(tiers) if "summary" in t)
    assert restored, "no summary brought a kept stub back to its original"
    _check_history(result["messages"])


def _lookups(count: int) -> list[BaseMessage]:
    messages: list[BaseMessage] = [HumanMessage("Check my orders.", id="h0")]
    for i in range(count):
        calls = [{"name": "get_order", "args": {"order_id": ORDERS[i]}, "id": f"c{i}"}]
        messages += [AIMessage(content="", tool_calls=calls, id=f"a{i}"),
                     ToolMessage(get_order.invoke({"order_id": ORDERS[i]}), tool_call_id=f"c{i}", id=f"t{i}",
                                 name="get_order", artifact={"n": i})]
    return messages


def test_rebuild_copies_what_a_tier_changed_and_refuses_another_list() -> None:
    messages = _lookups(6)
    dicts, owners = openai_messages(messages)
    tokens = compactor.count_message_tokens(dicts)
    cleared = compactor.compact_messages(dicts, tokens - 200, tiers=compactor.TIERS)
    assert cleared.summary is None and cleared.report["replaced"]
    out = rebuild(messages, dicts, owners, cleared)
    changed = {int(i) for i in cleared.report["replaced"]}
    assert convert_to_openai_messages(out) == list(cleared)
    for i, (before, after) in enumerate(zip(messages, out, strict=True)):
        if i in changed:  # a copy: the compacted text, the same call and metadata, a derived id
            assert isinstance(after, ToolMessage) and str(after.content).startswith(STUB_MARK)
            assert (after.tool_call_id, after.name, after.artifact) == (before.tool_call_id, before.name,
                                                                          before.artifact)
            assert after.id == copy_id(before.id, before.content, after.content) != before.id
        else:
            assert after is before
    # back to the original content, a stub's copy takes the original id again
    stub = out[min(changed)]
    assert copy_id(stub.id, stub.content, messages[min(changed)].content) == messages[min(changed)].id
    shifted = [HumanMessage("first", id="x"), *messages]
    with pytest.raises(compactor.CompactorError, match="does not line up"):
        rebuild(shifted, *openai_messages(shifted), cleared)


# -- LangChain's own conventions ----------------------------------------------------------------------


def _profiled(window: int | None = 8000) -> ToolCallingFakeModel:
    """A fake chat model whose profile gives the window (as langchain-core 1.x chat models do)."""
    profile = None if window is None else {"max_input_tokens": window}
    return ToolCallingFakeModel(messages=iter([]), profile=profile)


def _chat(turns: int) -> list[BaseMessage]:
    messages: list[BaseMessage] = [HumanMessage("Check every order and refund the pending ones.", id="m0")]
    for i in range(turns):
        call = {"name": "get_order", "args": {"order_id": ORDERS[i % 16]}, "id": f"c{i}"}
        messages += [AIMessage(f"Checking {ORDERS[i % 16]}.", tool_calls=[call], id=f"a{i}"),
                     ToolMessage(get_order.invoke({"order_id": ORDERS[i % 16]}), tool_call_id=f"c{i}",
                                 id=f"t{i}")]
    return messages


def test_the_middleware_takes_summarization_middlewares_forms_and_the_models_window() -> None:
    fraction = CompactorMiddleware(model=_profiled(8000), trigger=("fraction", 0.75), keep=("messages", 6))
    assert fraction.auto.window == 8000 and fraction.auto.trigger_tokens == 6000
    either = CompactorMiddleware(_profiled(10_000), trigger=[("tokens", 6000), ("messages", 50)])
    assert either.auto.window == 10_000 and either.auto.trigger_tokens == 6000
    both = CompactorMiddleware(window=9000, trigger={"tokens": 3000, "messages": 10})
    assert both.clauses == [{"tokens": 3000, "messages": 10}] and both.auto.trigger_tokens == 3000
    bare = CompactorMiddleware(trigger=("tokens", 6000))  # no model, no window: the threshold is the window
    assert bare.auto.window == 6000 and bare.auto.trigger_tokens == 6000
    assert CompactorMiddleware(window=8000, trigger=0.5).auto.trigger_tokens == 4000  # the compactor's forms
    # SummarizationMiddleware's checks and messages
    with pytest.raises(ValueError, match="Model profile information is required"):
        CompactorMiddleware(_profiled(None), trigger=("fraction", 0.8))
    with pytest.raises(ValueError, match="Model profile information is required"):
        CompactorMiddleware(trigger=("tokens", 5000), keep=("fraction", 0.2))
    with pytest.raises(ValueError, match="thresholds must be greater than 0"):
        CompactorMiddleware(window=8000, keep=("messages", 0))
    with pytest.raises(ValueError, match="Fractional trigger values must be between 0 and 1"):
        CompactorMiddleware(window=8000, trigger=("fraction", 1.5))
    with pytest.raises(ValueError, match="Unsupported context size type turns for keep"):
        CompactorMiddleware(window=8000, keep=("turns", 3))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="Unsupported trigger metric"):
        CompactorMiddleware(window=8000, trigger={"tokenz": 10})
    with pytest.raises(TypeError, match=r"keep= .* or keep_last="):
        CompactorMiddleware(window=8000, keep=("messages", 4), keep_last=2)


def test_a_model_string_is_read_with_init_chat_model(monkeypatch: pytest.MonkeyPatch) -> None:
    import compactor.integrations.langchain as module

    asked: list[str] = []

    def fake_init(name: str, **kwargs: Any) -> Any:
        asked.append(name)
        return _profiled(32_000)

    monkeypatch.setattr(module, "init_chat_model", fake_init)
    middleware = CompactorMiddleware("openai:gpt-4.1-mini", trigger=("fraction", 0.5))
    assert asked == ["openai:gpt-4.1-mini"] and middleware.auto.window == 32_000
    assert middleware.auto.trigger_tokens == 16_000


def test_a_messages_trigger_and_keep_messages_keep_the_last_messages_whole() -> None:
    middleware = CompactorMiddleware(window=100_000, trigger=("messages", 12), keep=("messages", 5))
    short = {"messages": _chat(5)}  # 11 messages: under the trigger whatever their tokens
    assert middleware.before_model(short, None) is None  # type: ignore[arg-type]
    messages = _chat(8)  # 17 messages
    update = middleware.before_model({"messages": messages}, None)  # type: ignore[arg-type]
    assert update is not None and middleware.compactions == 1
    sent = update["messages"][1:]
    # at least the last 5 messages, whole tool calls with their results: the last three turns
    assert sent[-6:] == messages[-6:] and all(a is b for a, b in zip(sent[-6:], messages[-6:], strict=True))
    assert messages[-7] not in sent and any(is_summary(m) for m in sent)
    _check_history(sent)


def test_keep_tokens_and_a_token_counter_decide_as_langchain_does() -> None:
    counted: list[int] = []

    def per_message(messages: Sequence[Any]) -> int:  # the caller's own count: 1000 a message
        counted.append(len(messages))
        return 1000 * len(messages)

    middleware = CompactorMiddleware(window=100_000, trigger=("tokens", 15_000), keep=("tokens", 1500),
                                     token_counter=per_message)
    assert middleware.before_model({"messages": _chat(6)}, None) is None  # type: ignore[arg-type]
    messages = _chat(7)  # 15 messages: 15,000 by its count, a few thousand by compactor's
    update = middleware.before_model({"messages": messages}, None)  # type: ignore[arg-type]
    assert counted == [13, 15] and update is not None
    sent = update["messages"][1:]
    counter = compactor.get_counter("cl100k_base")
    tail = [m for m in sent if m in messages[1:]]
    kept_tokens = compactor.count_message_tokens(convert_to_openai_messages(tail)) - TOKENS_PER_REPLY
    turn = compactor.count_message_tokens(convert_to_openai_messages(messages[-2:])) - TOKENS_PER_REPLY
    assert tail == messages[-len(tail):] and len(tail) >= 2
    assert kept_tokens <= 1500 or len(tail) == 2, (kept_tokens, turn, counter)


def test_an_agent_under_a_tokens_trigger_keeps_every_later_request_under_it() -> None:
    middleware = CompactorMiddleware(model=_profiled(6000), trigger=("tokens", 2600), keep=("messages", 4))
    sizes: list[int] = []

    def check(messages: list[BaseMessage]) -> None:
        _check_history(messages)
        sizes.append(compactor.count_message_tokens(convert_to_openai_messages(messages)))

    model = ToolCallingFakeModel(messages=iter([]), check=check)
    model.messages = _script(model, {})
    agent = create_agent(model, tools=[get_order, search_catalog], system_prompt=SYSTEM,
                         middleware=[middleware])
    asyncio.run(agent.ainvoke({"messages": [HumanMessage("Check orders " + ", ".join(ORDERS))]},
                              {"recursion_limit": 200}))
    schemas = middleware.request_overhead - (compactor.count_message_tokens(
        [{"role": "system", "content": SYSTEM}]) - TOKENS_PER_REPLY)
    assert middleware.compactions >= 2 and max(sizes) + schemas > 2000
    assert all(size + schemas < 2600 for size in sizes[1:]), (sizes, schemas)


def test_every_face_refuses_an_unknown_keyword_at_construction() -> None:
    with pytest.raises(compactor.InputError, match="CompactorMiddleware: keep_lst: unknown option; "
                                                   "did you mean keep_last"):
        CompactorMiddleware(window=8000, keep_lst=6)
    with pytest.raises(compactor.InputError, match="did you mean token_counter"):
        CompactorMiddleware(window=8000, token_count=len)
    with pytest.raises(compactor.InputError, match="CompactorCompressor: budgett: unknown option; "
                                                   "did you mean budget"):
        CompactorCompressor(budgett=100)
    assert CompactorMiddleware(window=8000, keep_last=6, exclude_tools=["x"]).auto.window == 8000


def test_the_async_hook_compacts_in_a_worker_thread() -> None:
    import threading

    threads: list[int] = []

    def counting(messages: Sequence[Any]) -> int:
        threads.append(threading.get_ident())
        return 10_000

    middleware = CompactorMiddleware(window=100_000, trigger=("tokens", 5000), token_counter=counting)

    async def run() -> tuple[int, Any]:
        return threading.get_ident(), await middleware.abefore_model({"messages": _chat(6)}, None)  # type: ignore[arg-type]

    loop_thread, update = asyncio.run(run())
    assert update is not None and threads and loop_thread not in threads


def test_each_document_holds_only_its_own_sources_text_and_metadata() -> None:
    pages = [Document(f"Page {p}: the {w} policy says items ship in {p + 2} days. Returns for {w} goods "
                      f"take {p + 5} days. Contact {w}@shop.example for help with {w} orders. " * 3,
                      metadata={"url": f"https://shop.example/{w}", "title": w.title()}, id=w)
             for p, w in enumerate(["garden", "kitchen", "toys"])]
    by_id = {d.id: d for d in pages}
    for pipeline in ("topics", "deep-search", "qa", "generic"):
        kept = CompactorCompressor(pipeline=pipeline, budget=80).compress_documents(
            pages, "how long do returns take?")
        assert kept, pipeline
        assert len({d.id for d in kept}) == len(kept)  # one Document per source
        for doc in kept:
            original = by_id[doc.id]
            assert doc.metadata["url"] == original.metadata["url"]
            assert doc.metadata[SOURCE_KEY] == document_source(original).id
            others = [w for w in by_id if w != doc.id]
            assert not any(w in doc.page_content for w in others), (pipeline, doc)
            for line in doc.page_content.replace("[…]", "\n").splitlines():
                body = line.lstrip("- ").strip()
                assert not body or body in " ".join(original.page_content.split()), (pipeline, line)
        if pipeline in ("topics", "deep-search"):
            assert {d.id for d in kept} == set(by_id)  # the returns line of every page, each in its own


def test_no_document_is_a_fragment_of_a_sentence() -> None:
    # the qa selection fills a budget with a window of words cut out of a sentence too long for
    # the room left ("The kitchen policy says"): the compressor keeps whole sentences only
    docs = [Document("Refunds are accepted within 30 days of delivery when the item is unused. "
                     "Refunds go back to the original payment method within 5 business days.",
                     metadata={"source": "refunds.md"}, id="r"),
            Document("The warehouse in Leeds ships every parcel with a tracking number that the customer "
                     "receives by email as soon as the carrier scans the parcel at the depot. " * 3,
                     metadata={"source": "shipping.md"}, id="s")]
    for budget in (20, 30, 45, 60):
        kept = CompactorCompressor(budget=budget).compress_documents(docs, "How long do refunds take?")
        for doc in kept:
            text = doc.page_content.replace("[…]", " ")
            assert text.rstrip().endswith("."), (budget, doc.page_content)
            sentences = [s.strip() + "." for s in text.split(".") if s.strip()]
            assert all(s in docs[0 if doc.id == "r" else 1].page_content for s in sentences)
            assert doc.metadata[TOKENS_KEY] >= 5
        assert sum(d.metadata[TOKENS_KEY] for d in kept) <= budget
    assert [d.id for d in CompactorCompressor(budget=30).compress_documents(docs, "refund days")] == ["r"]
