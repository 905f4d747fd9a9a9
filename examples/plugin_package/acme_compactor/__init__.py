"""acme-compactor: an example plugin with one component for each pipeline stage.

Each component is a `Component` subclass with a dotted `name`, its `stage`, keyword-only
parameters (the YAML `with:` schema) and the one stage hook of its stage. The module-level
`compactor_register_components` offers them; the entry point in pyproject.toml names this module.
`Timer` is an observer: not a component, passed as `plugins=[Timer()]` when wanted.
"""

from __future__ import annotations

import time
from collections.abc import Generator, Mapping
from typing import Any

from compactor import Chunk, Component, Context, LossReport, Run, ScoreSet, Segment, hookimpl
from compactor.document import chunk_id


class Shout(Component):
    """Upper-cases every source (a clean step: same sources, new text)."""

    name = "acme.shout"
    stage = "clean"

    def __init__(self, *, exclaim: bool = False) -> None:
        self.exclaim = exclaim

    @hookimpl
    def compactor_clean(self, context: Context, run: Run) -> Context:
        mark = "!" if self.exclaim else ""
        return context.evolve(sources=tuple(s.with_text(s.text.upper() + mark) for s in context.sources))


def line_spans(text: str) -> list[tuple[int, int]]:
    """(start, end) of every non-blank line of `text`, without its line break."""
    spans, start = [], 0
    for line in text.splitlines(keepends=True):
        if line.strip():
            spans.append((start, start + len(line.rstrip("\r\n"))))
        start += len(line)
    return spans


class Lines(Component):
    """One chunk per non-blank line, with its offsets and its size counted by the run's counter."""

    name = "acme.lines"
    stage = "chunk"
    provides = ("chunks",)

    @hookimpl
    def compactor_chunk(self, context: Context, run: Run) -> Context:
        chunks = [Chunk(id=chunk_id(s.id, i), source_id=s.id, index=i, start=a, end=b,
                        text=s.text[a:b], tokens=run.counter.count(s.text[a:b]))
                  for s in context.sources for i, (a, b) in enumerate(line_spans(s.text))]
        return context.evolve(chunks=tuple(chunks), segments=())


class Urgent(Component):
    """Labels the chunks that contain `word` (a classify step: labels per chunk id)."""

    name = "acme.urgent"
    stage = "classify"
    requires = ("chunks",)
    provides = ("labels",)

    def __init__(self, *, word: str = "URGENT") -> None:
        self.word = word

    @hookimpl
    def compactor_classify(self, context: Context, run: Run) -> Mapping[str, Mapping[str, Any]]:
        return {c.id: {"acme.urgent": True} for c in context.chunks if self.word in c.text}


class Shortest(Component):
    """Scores short chunks higher: 1 / (1 + tokens), with the size as the feature behind it."""

    name = "acme.shortest"
    stage = "score"
    requires = ("chunks",)
    provides = ("scores",)

    @hookimpl
    def compactor_score(self, context: Context, run: Run) -> ScoreSet:
        return ScoreSet(self.name, {c.id: 1 / (1 + c.tokens) for c in context.chunks},
                        {c.id: {"tokens": c.tokens} for c in context.chunks})


class KeepLabelled(Component):
    """Keeps the labelled chunks (else the best-scored one) as segments that cite their chunks."""

    name = "acme.keep_labelled"
    stage = "compress"
    requires = ("chunks",)
    provides = ("segments",)

    @hookimpl
    def compactor_compress(self, context: Context, run: Run) -> Context:
        kept = [c for c in context.chunks if c.labels.get("acme.urgent")]
        if not kept and context.chunks:
            kept = [max(context.chunks, key=lambda c: sum(c.scores.values()))]
        run.note("kept_chunks", len(kept))
        return context.evolve(segments=tuple(
            Segment(id=c.id, text=c.text, chunk_ids=(c.id,), source_id=c.source_id, tokens=c.tokens,
                    spans=((c.source_id, c.start, c.end),)) for c in kept))


class KeptShare(Component):
    """Reports the share of chunks kept; it provides `LossReport`, so the report becomes state."""

    name = "acme.kept_share"
    stage = "validate"
    requires = ("segments",)
    provides = (LossReport,)

    @hookimpl
    def compactor_validate(self, context: Context, run: Run) -> Mapping[str, Any]:
        share = len(context.segments) / max(1, len(context.chunks))
        return {"retention": share, "passed": share > 0, "level": "acceptable"}


class FirstLine(Component):
    """When nothing was kept, keeps the first chunk; otherwise declines (returns None)."""

    name = "acme.first_line"
    stage = "fallback"

    @hookimpl
    def compactor_fallback(self, context: Context, run: Run) -> Context | None:
        if context.segments or not context.chunks:
            return None
        first = context.chunks[0]
        return context.evolve(segments=(Segment(id=first.id, text=first.text, chunk_ids=(first.id,),
                                                source_id=first.source_id),))


class Bullets(Component):
    """Renders the kept segments as a bullet list (a render step returns the final text)."""

    name = "acme.bullets"
    stage = "render"

    @hookimpl
    def compactor_render(self, context: Context, run: Run) -> str:
        return "\n".join(f"- {s.text.strip()}" for s in context.segments)


class Timer:
    """An observer: wraps every run and every step (wrappers only: a plain observer is refused)."""

    def __init__(self) -> None:
        self.steps: list[tuple[str, float]] = []
        self.runs: list[tuple[str, int | None]] = []

    @hookimpl(wrapper=True)
    def compactor_step(self, step: Any, context: Context, run: Run) -> Generator[None, Context, Context]:
        started = time.perf_counter()
        result = yield  # the step's resulting context
        self.steps.append((step.label, time.perf_counter() - started))
        return result

    @hookimpl(wrapper=True)
    def compactor_run(self, pipeline: Any, run: Run) -> Generator[None, Context, Context]:
        context = yield  # the final context; raises what the run raised
        self.runs.append((pipeline.spec.name, context.output_tokens))
        return context


COMPONENTS = (Shout, Lines, Urgent, Shortest, KeepLabelled, KeptShare, FirstLine, Bullets)


@hookimpl
def compactor_register_components(register: Any) -> None:
    for component in COMPONENTS:
        register(component)
