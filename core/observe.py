"""The step observer: wrapper hooks that do every stage's bookkeeping.

Compressors stay free of bookkeeping: this plugin wraps each stage hook call, measures its time and
the tokens going in and out, and makes sure the returned context carries token counts (counted once,
with the run's counter, and cached on the objects so later stages never count again).
"""

from __future__ import annotations

import time
from collections.abc import Generator
from dataclasses import replace
from typing import Any

from compactor.document import Context, Source, frozen_mapping
from compactor.formats.messages import TOKENS_PER_REPLY, message_tokens
from compactor.hookspecs import hookimpl
from compactor.run import Run


def with_counts(context: Context, run: Run) -> Context:
    """Fill in missing token counts on sources and segments, counting each text once. A conversation
    counts what its messages cost in a chat request; the per-message costs are kept in its metadata
    (`message_tokens`) for the message chunker."""
    sources = tuple(_conversation_counts(s, run) if s.tokens is None and s.kind == "conversation"
                    and s.messages and "spans" in s.metadata else s for s in context.sources)
    missing = [s for s in sources if s.tokens is None]
    if missing:
        counts = dict(zip((s.id for s in missing), run.counter.count_many([s.text for s in missing]),
                          strict=True))
        sources = tuple(replace(s, tokens=counts[s.id]) if s.tokens is None else s for s in sources)
    segments = context.segments
    if any(s.tokens is None for s in segments):
        texts = [s.text for s in segments if s.tokens is None]
        counts_iter = iter(run.counter.count_many(texts))
        segments = tuple(replace(s, tokens=next(counts_iter)) if s.tokens is None else s
                         for s in segments)
    unchanged = all(a is b for a, b in zip(sources, context.sources, strict=True))
    if unchanged and segments is context.segments:
        return context
    return context.evolve(sources=sources, segments=segments)


def _conversation_counts(source: Source, run: Run) -> Source:
    costs = [message_tokens(m, run.counter) for m in source.messages]
    return replace(source, tokens=TOKENS_PER_REPLY + sum(costs),
                   metadata=frozen_mapping({**source.metadata, "message_tokens": tuple(costs)}))


class StepObserver:
    """Registered in every pipeline's plugin manager; wraps all stage hooks."""

    def _observe(self, context: Context, run: Run) -> Generator[None, Any, Any]:
        step = run.step
        started = time.perf_counter()
        if step is not None and step.calls == 0:
            step.tokens_in = context.tokens
        result = yield
        if isinstance(result, Context):
            result = with_counts(result, run)
        if step is not None:
            step.calls += 1
            step.seconds += time.perf_counter() - started
            if isinstance(result, Context):
                step.tokens_out = result.tokens
            elif isinstance(result, str):
                step.tokens_out = run.counter.count(result)
            else:
                step.tokens_out = context.tokens
        return result

    @hookimpl(wrapper=True)
    def compactor_clean(self, context: Context, run: Run) -> Generator[None, Any, Any]:
        return (yield from self._observe(context, run))

    @hookimpl(wrapper=True)
    def compactor_chunk(self, context: Context, run: Run) -> Generator[None, Any, Any]:
        return (yield from self._observe(context, run))

    @hookimpl(wrapper=True)
    def compactor_classify(self, context: Context, run: Run) -> Generator[None, Any, Any]:
        return (yield from self._observe(context, run))

    @hookimpl(wrapper=True)
    def compactor_score(self, context: Context, run: Run) -> Generator[None, Any, Any]:
        return (yield from self._observe(context, run))

    @hookimpl(wrapper=True)
    def compactor_compress(self, context: Context, run: Run) -> Generator[None, Any, Any]:
        return (yield from self._observe(context, run))

    @hookimpl(wrapper=True)
    def compactor_validate(self, context: Context, run: Run) -> Generator[None, Any, Any]:
        return (yield from self._observe(context, run))

    @hookimpl(wrapper=True)
    def compactor_fallback(self, context: Context, run: Run) -> Generator[None, Any, Any]:
        return (yield from self._observe(context, run))

    @hookimpl(wrapper=True)
    def compactor_render(self, context: Context, run: Run) -> Generator[None, Any, Any]:
        return (yield from self._observe(context, run))
