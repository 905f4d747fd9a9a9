"""render.text, render.markdown, render.json, render.messages: the final output."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, ClassVar

from compactor.components import Component, param
from compactor.document import Context, Segment, Source, frozen_mapping
from compactor.errors import InputError
from compactor.formats.compaction import assemble
from compactor.formats.messages import to_dict
from compactor.hookspecs import hookimpl
from compactor.kit import REFERENCES, render_footnotes, source_heading, source_titles
from compactor.provenance import OffsetMap, kept_spans, source_map
from compactor.run import Run
from compactor.state import CompactionPlan, RunInputs
from compactor.text.language import is_chinese
from compactor.text.spans import token_windows
from compactor.text.tokens import TokenCounter


def kept_segments(context: Context) -> list[Segment]:
    """What to render: the segments if a compressor ran, else every chunk or source in full."""
    if context.segments or any(r.stage == "compress" and not r.skipped for r in context.reports):
        return list(context.segments)
    if context.chunks:
        return [Segment(id=c.id, text=c.text, chunk_ids=(c.id,), source_id=c.source_id,
                        title=context.source(c.source_id).title, tokens=c.tokens,
                        spans=((c.source_id, c.start, c.end),))
                for c in context.chunks]
    return [Segment(id=s.id, text=s.text, chunk_ids=(), source_id=s.id,
                    title=s.title or s.uri, tokens=s.tokens, spans=((s.id, 0, len(s.text)),))
            for s in context.sources]


def fit(parts: list[str], joiner: str, counter: TokenCounter, limit: int | None) -> str:
    """Join parts, dropping whole trailing parts and then cutting the last one so the result has
    at most `limit` tokens. A safety net: compressors normally leave nothing to cut."""
    text = joiner.join(parts)
    if limit is None or counter.count(text) <= limit:
        return text
    lo, hi = 0, len(parts)
    while lo < hi:  # the largest number of whole parts that fits
        mid = (lo + hi + 1) // 2
        if counter.count(joiner.join(parts[:mid])) <= limit:
            lo = mid
        else:
            hi = mid - 1
    head = joiner.join(parts[:lo])
    if lo < len(parts):
        room = limit - counter.count(head + joiner) if head else limit
        if room > 8:
            windows = token_windows(parts[lo], counter, room)
            tail = parts[lo][windows[0][0]:windows[0][1]].rstrip()
            candidate = f"{head}{joiner}{tail}" if head else tail
            while tail and counter.count(candidate) > limit:
                tail = tail[: int(len(tail) * 0.9)]
                candidate = f"{head}{joiner}{tail}" if head else tail
            return candidate
    return head


class TextRenderer(Component):
    """Kept text only, sections separated by blank lines."""

    name = "render.text"
    stage = "render"
    budgeted: ClassVar[bool] = True

    @hookimpl
    def compactor_render(self, context: Context, run: Run) -> str:
        parts = [s.text for s in kept_segments(context) if s.text.strip()]
        return fit(parts, "\n\n", run.counter, context.resolved_budget())


class MarkdownRenderer(Component):
    """One section per source: heading with its title, the URL, then the kept text."""

    name = "render.markdown"
    stage = "render"
    budgeted: ClassVar[bool] = True

    @hookimpl
    def compactor_render(self, context: Context, run: Run) -> str:
        titles = run.settings.get("output", {}).get("titles", True)
        parts = []
        for segment in kept_segments(context):
            source = context.source(segment.source_id) if segment.source_id else None
            head = source_heading(source) if titles and source is not None else ""
            parts.append(head + segment.text)
        return fit(parts, "\n\n", run.counter, context.resolved_budget())


class JsonRenderer(Component):
    """Everything with provenance: kept text per source, chunk ids, offsets, tokens, scores, steps.

    Offsets index each source's input (`offsets_into: "input"`), or for an HTML page the text
    extracted from it (`"extracted_text"`, given as `base_text`), mapped through every clean step:
    `spans` are the verbatim stretches of the output with `base[start:end] == text`; a chunk only
    partly kept has `"partial": true` and `"kept": false`.

    The budget bounds the kept text (`text` fields), not the JSON around it.
    """

    name = "render.json"
    stage = "render"
    budgeted: ClassVar[bool] = False

    @hookimpl
    def compactor_render(self, context: Context, run: Run) -> str:
        segments = kept_segments(context)
        spans = kept_spans(context.evolve(segments=tuple(segments)))
        partial = {cid for span in spans for cid in span.partial}
        # a segment with spans keeps what its spans hold; one without (a summary) cites its chunks
        kept_ids = ({cid for s in segments if not s.spans for cid in s.chunk_ids}
                    | {cid for span in spans for cid in span.chunk_ids}) - partial
        maps = {s.id: source_map(s) for s in context.sources}
        data: dict[str, Any] = {
            "query": context.query,
            "budget": context.resolved_budget(),
            "input_tokens": inputs.input_tokens if (inputs := context.state.get(RunInputs)) else None,
            "text_tokens": sum(s.tokens or 0 for s in segments),
            "sources": [_source_entry(s, maps[s.id]) for s in context.sources],
            "segments": [{"id": s.id, "source_id": s.source_id, "title": s.title,
                          "tokens": s.tokens, "chunk_ids": list(s.chunk_ids), "text": s.text}
                         for s in segments],
            "spans": [span.to_dict() for span in spans],
            "chunks": [{"id": c.id, "source_id": c.source_id,
                        **dict(zip(("start", "end"), maps[c.source_id].span(c.start, c.end),
                                   strict=True)),
                        "tokens": c.tokens, "lang": c.lang, "kept": c.id in kept_ids,
                        "partial": c.id in partial,
                        "scores": dict(c.scores), "labels": dict(c.labels)}
                       for c in context.chunks],
            "facts": [{"id": f.id, "text": f.text, "chunk_ids": list(f.chunk_ids),
                       "source_url": f.source_url, "score": f.score} for f in context.facts],
            "steps": [{"step": r.step, "stage": r.stage, "tokens_in": r.tokens_in,
                       "tokens_out": r.tokens_out, "seconds": round(r.seconds, 6),
                       "skipped": r.skipped} for r in context.reports],
        }
        return json.dumps(data, ensure_ascii=False, indent=2, default=str)


def _source_entry(source: Source, offsets: OffsetMap) -> dict[str, Any]:
    """A source in the JSON: what its offsets index, and that text when it is not the input."""
    entry: dict[str, Any] = {"id": source.id, "kind": source.kind, "uri": source.uri,
                             "title": source.title, "tokens": source.tokens,
                             "offsets_into": offsets.base_kind}
    if offsets.base_kind != "input":
        entry["base_text"] = offsets.base
    return entry


class MessagesRenderer(Component):
    """A compacted history as the JSON message list to send back to the model (head verbatim, the
    summary message, tail verbatim); several histories give one JSON object per line.

    Not budget-checked as text: the compressor already fitted the messages' token cost (OpenAI's
    per-message accounting) to the budget, and JSON syntax is not part of that cost.
    """

    name = "render.messages"
    stage = "render"
    budgeted: ClassVar[bool] = False

    @hookimpl
    def compactor_render(self, context: Context, run: Run) -> str:
        found = context.state.get(CompactionPlan)
        plans = found.plans if found is not None else {}
        lists = []
        for source in context.sources:
            if source.kind != "conversation":
                continue
            plan = plans.get(source.id)
            if plan is None:
                lists.append((source, [to_dict(m) for m in source.messages]))
            else:
                lists.append((source, assemble(source.messages, plan, plan.summary, plan.summary_role)))
        if not lists:
            got = ", ".join(f"{s.uri or s.id} ({s.kind})" for s in context.sources[:3]) or "no input"
            raise InputError("render.messages needs a conversation (a JSON message list) as input; "
                             f"got {got}")
        if len(lists) == 1:
            return json.dumps(lists[0][1], ensure_ascii=False, indent=2, default=str)
        return "\n".join(json.dumps({"id": source.uri or source.id, "messages": messages}, ensure_ascii=False,
                                    default=str) for source, messages in lists)


class FootnoteRenderer(Component):
    """Markdown: one section per topic, each fact with its `[^n]` footnote, then the references."""

    name = "render.footnotes"
    stage = "render"

    heading: str | None = param(None, doc="the references heading (default: by the language)")

    @hookimpl
    def compactor_render(self, context: Context, run: Run) -> str:
        facts = {f.id: f for f in context.facts}
        if not any(s.metadata.get("fact_ids") for s in context.segments):
            # no topic structure: one section of every fact in order
            segment = Segment(id="facts", text="", title=context.query or "Facts", chunk_ids=(),
                              metadata=frozen_mapping({"fact_ids": list(facts)}))
            segments: Sequence[Segment] = (segment,)
        else:
            segments = context.segments
        lang = "zh" if is_chinese((s.title or "")[:20] for s in segments) else "en"
        heading = self.heading or REFERENCES[lang]
        text, numbers = render_footnotes(segments, facts, source_titles(context), heading)
        run.note("footnotes", len(numbers))
        return text
