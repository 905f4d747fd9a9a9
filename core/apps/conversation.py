"""`compact_messages`: an agent's history, compacted to a budget and ready to send back (seed 004).

    >>> short = compactor.compact_messages(history, budget=8000, keep_last=4)
    >>> client.chat.completions.create(model=..., messages=short, tools=[compactor.EXPAND_TOOL, ...])
    >>> compactor.expand(["<id>"], session=short)           # the originals of what was summarised

The result is a list of plain message dicts (a `CompactedMessages`, which is a `list`): the system
message(s) and the first request unchanged, one summary message with the 8 sections, and the last
turns unchanged. Every message of the history is written to the chunk store (memory by default, a
SQLite file with `store=`), so the ids the summary cites can be expanded back, by the agent too:
offer `EXPAND_TOOL` and answer its calls with `handle_expand_call`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from compactor.apps.common import PipelineArg, llm_mapping, pipeline_for
from compactor.document import Budget, Context
from compactor.errors import ConfigError, InputError, Problem
from compactor.formats.compaction import KINDS, assemble
from compactor.formats.messages import (
    conversation_source,
    message_chunks,
    messages_tokens,
    read_messages,
)
from compactor.formats.system_prompt import system_records
from compactor.state import CompactionPlan, ConversationOptions, State, thaw
from compactor.store import Batch, ChunkStore, open_store
from compactor.text.tokens import get_counter

DEFAULT_SESSION = "conversation"
SUMMARY_ROLES = ("user", "system", "assistant")


class CompactedMessages(list[dict[str, Any]]):
    """The compacted message list (a plain `list` of dicts, JSON-ready) with what it came from:
    `store` and `session` for `expand`, `report` (tokens, plan, quality), `summary` text."""

    store: ChunkStore
    session: str
    report: dict[str, Any]

    def __init__(self, messages: Iterable[dict[str, Any]], *, store: ChunkStore, session: str,
                 report: dict[str, Any]) -> None:
        super().__init__(messages)
        self.store = store
        self.session = session
        self.report = report

    @property
    def summary(self) -> str | None:
        """The summary message's text (None when the history already fitted)."""
        return self.report.get("summary")

    @property
    def dropped_ids(self) -> list[str]:
        """Chunk ids of the messages that were summarised rather than kept."""
        return list(self.report.get("dropped_ids", []))


def compact_messages(messages: Iterable[Any] | str | bytes, budget: int, *, keep_last: int = 4,
                     llm: Any = None, role: str | None = None, summary_role: str = "user",
                     store: str | ChunkStore | None = None, session: str | None = None,
                     pipeline: PipelineArg = "conversation", plugins: Iterable[Any] = (),
                     kind: str | None = None, query: str | None = None, focus: str | None = None,
                     keep_files: int = 0, compress_system: bool | None = None) -> CompactedMessages:
    """Compact a message list to at most `budget` tokens (OpenAI's per-message accounting).

    `messages`: dicts in the OpenAI chat, legacy-function or content-block format, `Message`s, SDK
    message objects, or JSON text. `keep_last`: turns kept verbatim at the end (a tool call with its
    results is one turn), fewer when they do not fit. `llm`: None for rules only; True, a settings
    mapping (`{"model": ..., "base_url": ...}`) or `LLMSettings` for a guarded rewrite of the rule
    summary. `role`: write the handoff summary of that speaker. `kind`: "coding", "tool", "chat" or
    "meeting" forces the template (default: detected; the result's `report["kind"]` says which).
    `query` (or its older name `focus`): text whose matches rise in every section ("the refund for
    order 123"). `pipeline`/`plugins`: as every face takes them. `keep_files`:
    coding agents, keep the latest view of that many files worked on last verbatim.
    `compress_system`: when the system message(s) would take more than half the budget, send an
    excerpt of them instead, chosen for the history's opening request (stable across compactions;
    the original is stored for `expand`); None leaves it to the pipeline (`compress.eight_segment`'s
    `compress_system`, off by default). Never fails because the history is long; without
    `compress_system`, raises `BudgetError` if the system message alone leaves no room for a summary.
    """
    if not isinstance(budget, int) or isinstance(budget, bool) or budget <= 0:
        raise InputError(f"budget must be a positive number of tokens, not {budget!r}")
    if summary_role not in SUMMARY_ROLES:
        raise InputError(f"summary_role must be one of {', '.join(SUMMARY_ROLES)}, not {summary_role!r}")
    if kind is not None and kind not in (*KINDS, "auto"):
        raise InputError(f"kind must be one of auto, {', '.join(KINDS)}, not {kind!r}")
    if not isinstance(keep_files, int) or isinstance(keep_files, bool) or keep_files < 0:
        raise InputError(f"keep_files must be 0 or more, not {keep_files!r}")
    if query is not None and focus is not None and query != focus:
        raise InputError("query and focus are the same option (focus is its older name): give one")
    focus = query if query is not None else focus
    if focus is not None and not isinstance(focus, str):
        raise InputError(f"query must be text, not {type(focus).__name__}")
    parsed = read_messages(messages)
    source = conversation_source(parsed)
    runner = pipeline_for(pipeline, plugins)
    if not runner.spec.provides(CompactionPlan):
        raise ConfigError(Problem("compact_messages needs a pipeline with a history compressor (a step "
                                  "that provides CompactionPlan, such as compress.eight_segment)",
                                  runner.spec.file, field="steps"))
    target = open_store(store)
    session_id = session or DEFAULT_SESSION
    llm_settings = llm_mapping(llm)
    options = {"keep_last": keep_last, "role": role, "summary_role": summary_role,
               "llm": llm_settings is not None, "kind": kind, "focus": focus, "keep_files": keep_files}
    if compress_system is not None:
        options["compress_system"] = bool(compress_system)
    context = Context(sources=(source,), budget=Budget(max_tokens=budget),
                      state=State([ConversationOptions(options)]))
    result = runner.run(context, output_format="messages", store=target, session=session_id,
                        llm=llm_settings)
    found = result.state.get(CompactionPlan)
    plan = thaw(found.for_source(source.id)) if found is not None else {}  # JSON-ready, as reported
    if not plan:
        raise InputError("the pipeline has no history compressor step (such as compress.eight_segment): "
                         "nothing compacted the history")
    out = assemble(parsed, plan, plan.get("summary"), summary_role)  # the input dicts, copied as they are
    counter = runner.counter
    dropped = set(plan["dropped"])
    chunks = [c for c in result.chunks if c.source_id == source.id]
    if [c.units for c in chunks] != [(i, i + 1) for i in range(len(parsed))]:  # not chunk.messages' work
        chunks = message_chunks(source, counter)
    dropped_chunks = [c for c in chunks if c.index in dropped]
    originals = system_records(parsed, plan, counter)  # system messages sent as an excerpt
    if dropped_chunks or originals:  # only what left the window: each message is stored once
        target.commit_batch(session_id, Batch(
            sources=(source, *(s for s, _ in originals)),
            chunks=[*dropped_chunks, *(c for _, c in originals)],
            report={"kind": "conversation", "tokens": plan.get("tokens")}))
    report = {**plan, "source_id": source.id, "dropped_ids": [c.id for c in dropped_chunks],
              "output_tokens": plan["tokens"],
              "steps": [{"step": r.step, "tokens_in": r.tokens_in, "tokens_out": r.tokens_out,
                         "seconds": round(r.seconds, 6), "details": dict(r.details),
                         "warnings": list(r.warnings)} for r in result.reports]}
    return CompactedMessages(out, store=target, session=session_id, report=report)


def count_message_tokens(messages: Iterable[Any], encoding: str = "cl100k_base") -> int:
    """What a message list costs in a chat request (OpenAI's per-message accounting)."""
    return messages_tokens(read_messages(list(messages)), get_counter(encoding))
