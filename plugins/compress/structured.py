"""compress.structured: tool results and tabular documents reduced by their structure.

A step before chunking (a clean-stage step). In a conversation it reads each tool result (JSON, JSON
Lines, CSV, Markdown tables), keeps the fields, counts, low-cardinality values and the rows another
message mentions (ids, names, numbers), and hands the reduced text to the history compressor in
`source.metadata["structured"]` (message index -> text). The messages themselves are not touched:
those kept verbatim go out as they came, and a summarised one is stored whole under its chunk id, the
id the reduced text's `[... N more rows: expand <id>]` markers cite.

In a document (the qa pipeline) it rewrites structured blocks of the working text when the input does
not fit the budget, with provenance kept, so the scorers see the rows that matter to the query
instead of 40 near-identical ones.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Sequence
from typing import Any

from compactor.components import Component, param
from compactor.document import Context, Source, chunk_id, frozen_mapping
from compactor.formats.messages import answers, calls
from compactor.formats.structured import References, reduce_text
from compactor.hookspecs import hookimpl
from compactor.provenance import Rewriter
from compactor.run import Run
from compactor.state import ConversationOptions

#: Where the reduced tool results travel to the history compressor (message index as text -> text).
METADATA_KEY = "structured"


class _Conversation:
    """The words of every message of a conversation (in how many messages each occurs), read once
    and only when a tool result has a list to cut."""

    def __init__(self, texts: Sequence[str]) -> None:
        self.texts = texts
        self._counts: Counter[str] | None = None
        self._text = ""

    def read(self) -> tuple[Counter[str], str]:
        if self._counts is None:
            self._counts = Counter()
            for text in self.texts:
                self._counts.update(References([text]).words)
            self._text = References(self.texts).text
        return self._counts, self._text


class _Elsewhere(References):
    """The references of a whole conversation, less one message's own words (a row is not kept
    because the tool result itself mentions it)."""

    def __init__(self, conversation: _Conversation, own: str) -> None:
        self.conversation = conversation
        self.own = own
        self.own_words: set[str] | None = None
        self.own_text = ""
        self.words = set()
        self.text = ""

    def mentions(self, value: str) -> bool:
        key = value.strip().lower()
        if len(key) < 3:
            return False
        counts, whole = self.conversation.read()
        if self.own_words is None:
            own = References([self.own])
            self.own_words, self.own_text = own.words, own.text
        if counts.get(key, 0) - (key in self.own_words) > 0:
            return True
        if " " in key and len(key) <= 200:
            return whole.count(key) > self.own_text.count(key)
        return False


class StructuredReducer(Component):
    """Reduces JSON / JSON Lines / CSV / Markdown-table tool results and document blocks by structure.

    `max_rows`, `min_list_chars`: lists up to this many items or characters stay whole.
    `head`/`tail`: rows always kept at each end. `max_kept`: rows kept per list in all.
    `distinct`: a field with at most this many values lists them. `min_tokens`: smaller texts are
    left alone. `documents`: also rewrite structured blocks of plain documents (only when the input
    exceeds the budget).
    """

    name = "compress.structured"
    stage = "clean"

    max_rows: int = param(6, ge=1, doc="lists up to this many items stay whole")
    min_list_chars: int = param(1500, ge=0, doc="lists up to this many characters stay whole")
    head: int = param(1, ge=0, doc="rows always kept at the start")
    tail: int = param(1, ge=0, doc="rows always kept at the end")
    max_kept: int = param(12, ge=1, doc="rows kept per list in all")
    distinct: int = param(5, ge=1, doc="a field with at most this many values lists them")
    min_tokens: int = param(100, ge=0, doc="smaller texts are left alone")
    documents: bool = param(True, doc="also rewrite structured blocks of documents over the budget")

    def _reduce(self, text: str, references: References, ref: str | None, run: Run,
                minify: bool = True) -> str | None:
        if len(text) < self.min_tokens:  # shorter than min_tokens (a token is a character or more)
            return None
        found = reduce_text(text, references=references, ref=ref, max_rows=self.max_rows,
                            min_list_chars=self.min_list_chars, head=self.head,
                            tail=self.tail, max_kept=self.max_kept, distinct=self.distinct, min_chars=0,
                            size=run.counter.count, minify=minify)
        if found is None or run.counter.count(text) < self.min_tokens:
            return None
        return found.text

    @hookimpl
    def compactor_clean(self, context: Context, run: Run) -> Context:
        options = context.state.get(ConversationOptions, ConversationOptions()).values
        query = " ".join(q for q in (context.query, options.get("focus")) if isinstance(q, str))
        budget = context.resolved_budget()
        sources: list[Source] = []
        reduced_messages = reduced_blocks = 0
        for source in context.sources:
            fits = budget is not None and context.tokens <= budget // 2  # no compaction ahead: skip
            if source.kind == "conversation" and source.messages and not fits:
                found = self._conversation(source, query, run)
                if found:
                    reduced_messages += len(found)
                    source = dataclasses.replace(source, metadata=frozen_mapping(
                        {**source.metadata, METADATA_KEY: frozen_mapping(found)}))
            elif self.documents and source.kind != "conversation" and (
                    budget is None or context.tokens > budget):
                new = self._reduce(source.text, References([query]), None, run)
                if new is not None:
                    reduced_blocks += 1
                    source = _rewritten(source, new)
            sources.append(source)
        if not reduced_messages and not reduced_blocks:
            return context
        run.note("reduced", {"messages": reduced_messages, "documents": reduced_blocks})
        return context.evolve(sources=tuple(sources))

    def _conversation(self, source: Source, query: str, run: Run) -> dict[str, str]:
        texts = [_message_text(m) for m in source.messages]
        conversation = _Conversation([*texts, query])
        found: dict[str, str] = {}
        for i, message in enumerate(source.messages):
            if answers(message) is None or not message.content:
                continue
            refs = _Elsewhere(conversation, texts[i])
            # minified alone is no use to the summary, which quotes values, not whole outputs
            new = self._reduce(message.content, refs, chunk_id(source.id, i), run, minify=False)
            if new is not None:
                found[str(i)] = new
        return found


def _message_text(message: Any) -> str:
    return "\n".join([message.content, *(f"{c.name} {c.arguments}" for c in calls(message))])


def _rewritten(source: Source, new: str) -> Source:
    """`source` with working text `new`, provenance kept for the unchanged prefix and suffix."""
    old = source.text
    start = 0
    limit = min(len(old), len(new))
    while start < limit and old[start] == new[start]:
        start += 1
    end = 0
    while end < limit - start and old[len(old) - 1 - end] == new[len(new) - 1 - end]:
        end += 1
    rewriter = Rewriter(old)
    rewriter.keep(0, start)
    rewriter.replace(start, len(old) - end, new[start:len(new) - end])
    rewriter.keep(len(old) - end, len(old))
    text, edits = rewriter.result()
    return source.with_text(text, edits=edits)
