"""compress.topics: topic compression with footnote citations (rendered by render.footnotes).

Sources carry their research topic in `metadata["topic"]` (the JSONL field `topic`, or
`ContextCompacter.compress_topics`); sources without one share the query as their topic. Per topic,
the facts relevant to the topic (and the query) are kept verbatim from their chunks, and every fact
carries a Markdown footnote `[^n]` for its source URL. Numbers are given by first appearance over all
topics in order, so several topics merge into one report context with one consistent references list
at the end. Everything is rendered by `compactor.kit.render_footnotes`, which `compress.topics` also
uses to stay within the budget.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping

from compactor.components import Component, param
from compactor.document import Chunk, Context, Fact, Segment, frozen_mapping
from compactor.hookspecs import hookimpl
from compactor.kit import REFERENCES as REFERENCES  # the footnote helpers, importable from here as before
from compactor.kit import reference_of as reference_of
from compactor.kit import render_footnotes as render_footnotes
from compactor.kit import rule_facts, source_titles, usable, with_input_spans
from compactor.run import Run


def _position(fact: Fact, chunks: Mapping[str, Chunk], order: Mapping[str, int]) -> tuple[int, int]:
    chunk = chunks[fact.chunk_ids[0]]
    return order[chunk.source_id], chunk.start + chunk.text.find(fact.text)



class TopicCompressor(Component):
    """Per research topic, the facts that matter for it, each with a footnote to its source."""

    name = "compress.topics"
    stage = "compress"
    requires = ("chunks",)
    provides = ("facts", "segments")

    max_facts: int = param(15, ge=1, doc="facts per topic at most")
    min_score: float = param(0.15, ge=0, le=1, doc="kept: at least this relevance")
    quarantine: bool = param(True, doc="leave out text flagged as injection")

    @hookimpl
    def compactor_compress(self, context: Context, run: Run) -> Context:
        context, chunks = usable(context, run, self.quarantine)
        default = context.query or "research"
        topic_of = {s.id: str(s.metadata.get("topic") or default) for s in context.sources}
        urls = {s.id: s.uri for s in context.sources}
        order = {s.id: i for i, s in enumerate(context.sources)}
        topics: dict[str, list[Chunk]] = {}
        for chunk in chunks:
            topics.setdefault(topic_of[chunk.source_id], []).append(chunk)
        all_facts: dict[str, Fact] = {}
        segments: list[Segment] = []
        for topic, members in topics.items():
            query = topic if topic == context.query or not context.query else f"{topic} {context.query}"
            found = rule_facts(members, query, run.counter, urls, max_facts=self.max_facts,
                               min_score=self.min_score)
            if not found:  # nothing names the topic: its most informative statements stand for it
                found = rule_facts(members, None, run.counter, urls, max_facts=self.max_facts,
                                   min_score=self.min_score)
            located = {c.id: c for c in members}
            found.sort(key=functools.partial(_position, chunks=located, order=order))
            working = {f.id: f.span for f in found if f.span}  # working-text spans, for the segment
            for fact in with_input_spans(found, context.sources):  # facts keep input offsets
                all_facts.setdefault(fact.id, fact)
            ids = tuple(dict.fromkeys(c for f in found for c in f.chunk_ids))
            segments.append(Segment(id=f"topic-{len(segments) + 1}", text="\n".join(f.text for f in found),
                                    title=topic, chunk_ids=ids, metadata=frozen_mapping(
                                        {"topic": topic, "fact_ids": [f.id for f in found],
                                         "fact_spans": working}),
                                    spans=tuple(working.values())))
        segments = self._fit(segments, all_facts, context, run)
        run.note("topics", {s.title: len(s.metadata["fact_ids"]) for s in segments})
        return context.evolve(facts=tuple(all_facts.values()), segments=tuple(segments))

    @staticmethod
    def _fit(segments: list[Segment], facts: dict[str, Fact], context: Context, run: Run) -> list[Segment]:
        """Drop the lowest-scored facts (over all topics) until the rendered text fits the budget."""
        limit = context.resolved_budget()
        if limit is None:
            return segments
        titles = source_titles(context)
        keep = {fid for s in segments for fid in s.metadata["fact_ids"]}

        def rebuilt() -> list[Segment]:
            out = []
            for s in segments:
                ids = [f for f in s.metadata["fact_ids"] if f in keep]
                out.append(Segment(id=s.id, text="\n".join(facts[f].text for f in ids), title=s.title,
                                   chunk_ids=tuple(dict.fromkeys(c for f in ids for c in facts[f].chunk_ids)),
                                   metadata=frozen_mapping({**s.metadata, "fact_ids": ids}),
                                   spans=tuple(sp for f in ids
                                               if (sp := s.metadata.get("fact_spans", {}).get(f)))))
            return out

        current = rebuilt()
        dropped = 0
        while keep and run.counter.count(render_footnotes(current, facts, titles)[0]) > limit:
            worst = sorted(keep, key=lambda f: facts[f].score)
            over = run.counter.count(render_footnotes(current, facts, titles)[0]) - limit
            step = max(1, min(len(worst) // 4, over // 40))  # drop several at once when far over
            for fid in worst[:step]:
                keep.discard(fid)
                dropped += 1
            current = rebuilt()
        run.note("dropped_for_budget", dropped)
        return current
