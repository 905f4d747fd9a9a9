"""Step bookkeeping: token counts on what a stage returns, and the step observer.

Compressors stay free of bookkeeping: the pipeline makes sure every returned context carries token
counts (`with_counts`: counted once, with the run's counter, and cached on the objects so later
stages never count again; a source whose cost is not its text's, such as a conversation, is counted by
the rule the caller passes), and `StepObserver`, one wrapper of the step-level hook, measures each
step's time and the tokens going in and out.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from compactor.document import Context, Source
from compactor.hookspecs import hookimpl
from compactor.run import Run

if TYPE_CHECKING:
    from compactor.config import StepSpec
    from compactor.text.tokens import TokenCounter

#: How a source that costs something other than its text is counted: the source with `tokens` set.
SourceCounter = Callable[[Source, "TokenCounter"], Source]


def with_counts(context: Context, run: Run, count_source: SourceCounter | None = None) -> Context:
    """Fill in missing token counts on sources and segments, counting each text once. A source that
    `count_source` takes (it returns it with `tokens` set, else unchanged) costs what that says: the
    pipeline passes the chat-request cost of a conversation."""
    sources = context.sources
    if count_source is not None:
        sources = tuple(count_source(s, run.counter) if s.tokens is None else s for s in sources)
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


class StepObserver:
    """Registered in every pipeline's plugin manager: one wrapper of the step-level hook measures
    every step (time, tokens in and out) into `run.step`. It is the innermost wrapper, so other
    observers' step wrappers see the figures filled in. (When it is the only step wrapper, the
    pipeline calls `measured` itself rather than going through the hook: the same bookkeeping,
    without a hook call per step.)"""

    @hookimpl(wrapper=True, trylast=True)
    def compactor_step(self, step: StepSpec, context: Context, run: Run) -> Generator[None, Any, Any]:
        started = step_started(context, run)
        result = yield
        step_finished(step, context, run, result, started)
        return result

    @staticmethod
    def measured(step: StepSpec, context: Context, run: Run, execute: Callable[[], Any]) -> Any:
        """`execute()` (the step), measured as the wrapper measures it."""
        started = step_started(context, run)
        result = execute()
        step_finished(step, context, run, result, started)
        return result


def step_started(context: Context, run: Run) -> float:
    """Note the tokens going into the current step; the time it starts."""
    if run.step is not None:
        run.step.tokens_in = context.tokens
    return time.perf_counter()


def step_finished(step: StepSpec, context: Context, run: Run, result: Any, started: float) -> None:
    """Note the step's time and the tokens coming out (the rendered text's, for a render step)."""
    record = run.step
    if record is None:
        return
    record.calls += 1
    record.seconds += time.perf_counter() - started
    if isinstance(result, Context):
        if step.stage == "render" and result.output_tokens is not None:
            record.tokens_out = result.output_tokens
        else:
            record.tokens_out = result.tokens
    else:
        record.tokens_out = context.tokens
