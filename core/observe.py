"""Step bookkeeping: token counts on what a stage returns, and the step observer.

Compressors stay free of bookkeeping: the pipeline makes sure every returned context carries token
counts (`with_counts`: counted once, with the run's counter, and cached on the objects so later
stages never count again; a source whose cost is not its text's, such as a conversation, is counted by
the rule the caller passes), and `StepObserver`, one wrapper of the step-level hook, measures each
step's time and the tokens going in and out. The figures cost no second encode of the input: the run's
counter keeps the input's tokens, a clean step's rewrite is counted from them by re-encoding only the
stretches it changed, and the chunker's whole-text encode takes the kept tokens.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from compactor.document import Context, Source
from compactor.hookspecs import hookimpl
from compactor.provenance import source_map
from compactor.run import Run

if TYPE_CHECKING:
    from compactor.config import StepSpec
    from compactor.text.tokens import TokenCounter

#: How a source that costs something other than its text is counted: the source with `tokens` set.
SourceCounter = Callable[[Source, "TokenCounter"], Source]


def with_counts(context: Context, run: Run, count_source: SourceCounter | None = None,
                before: Context | None = None) -> Context:
    """Fill in missing token counts on sources and segments, counting each text once. A source that
    `count_source` takes (it returns it with `tokens` set, else unchanged) costs what that says: the
    pipeline passes the chat-request cost of a conversation. `before` is the context the step was
    given: a source it rewrote with recorded edits is counted from the run's kept tokens of its
    earlier text, encoding only the rewritten stretches (`TokenCounter.rewritten`)."""
    counter = run.counter
    sources = context.sources
    if count_source is not None:
        sources = tuple(count_source(s, counter) if s.tokens is None else s for s in sources)
    missing = [s for s in sources if s.tokens is None]
    if missing:
        counts = _rewritten_counts(missing, before, counter) if before is not None else {}
        rest = [s for s in missing if s.id not in counts]
        counts.update(zip((s.id for s in rest), counter.keep([s.text for s in rest]), strict=True))
        sources = tuple(replace(s, tokens=counts[s.id]) if s.tokens is None else s for s in sources)
    counter.retain(s.text for s in sources)
    segments = context.segments
    if any(s.tokens is None for s in segments):
        texts = [s.text for s in segments if s.tokens is None]
        counts_iter = iter(counter.count_many(texts))
        segments = tuple(replace(s, tokens=next(counts_iter)) if s.tokens is None else s
                         for s in segments)
    unchanged = all(a is b for a, b in zip(sources, context.sources, strict=True))
    if unchanged and segments is context.segments:
        return context
    return context.evolve(sources=sources, segments=segments)


def _rewritten_counts(missing: list[Source], before: Context, counter: TokenCounter) -> dict[str, int]:
    """Counts of the sources in `missing` that rewrite a source of `before` (same id) with recorded
    edits, taken from that source's kept tokens; the others are left out."""
    earlier = {s.id: s for s in before.sources}
    counts: dict[str, int] = {}
    for source in missing:
        old = earlier.get(source.id)
        same = verbatim(old, source) if old is not None and old.text is not source.text else None
        count = counter.rewritten(old.text, source.text, same) if same and old is not None else None
        if count is not None:
            counts[source.id] = count
    return counts


def verbatim(old: Source, new: Source) -> list[tuple[int, int, int]] | None:
    """The stretches `new.text` copies verbatim from `old.text`, as (new start, old start, length),
    read from the two offset maps where both copy the same base text exactly; None when the maps
    cannot say (a rewrite that recorded no edits, a new base such as a page's extracted text)."""
    new_map = new.offsets
    if new_map is None or not new_map.holds_for(new.text):
        return None
    old_map = source_map(old)
    if new_map.base_kind != old_map.base_kind or not (new_map.base is old_map.base
                                                      or new_map.base == old_map.base):
        return None
    news = [p for p in new_map.pieces if p[4]]
    olds = [p for p in old_map.pieces if p[4]]
    out: list[tuple[int, int, int]] = []
    i = j = 0
    while i < len(news) and j < len(olds):
        n_start, _, b_start, b_end, _ = news[i]
        o_start, _, c_start, c_end, _ = olds[j]
        low, high = max(b_start, c_start), min(b_end, c_end)
        if low < high:
            at_new, at_old = n_start + low - b_start, o_start + low - c_start
            if out and out[-1][0] + out[-1][2] == at_new and out[-1][1] + out[-1][2] == at_old:
                out[-1] = (out[-1][0], out[-1][1], out[-1][2] + high - low)
            else:
                out.append((at_new, at_old, high - low))
        if b_end <= c_end:
            i += 1
        else:
            j += 1
    return out


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
