"""The search-result strategies of seed 000, as compress components.

* `compress.fact_centric` (A): query-relevant facts, each with its chunk ids and source URL, merged
  across batches when they say the same thing. Rules first; an LLM extraction pass is optional and
  guarded (its facts must cite chunks of the batch and invent nothing).
* `compress.chunk_filtering` (B): the ids of the relevant chunks; the checklist context is their
  original text.
* `compress.summarization` (C): a rolling summary updated per batch, extractive by rules (sentences
  of the previous summary compete with the new batch's), LLM optional. The only strategy that may
  lose the link to chunks: its segment lists the chunks its sentences came from, but an LLM summary
  cites the whole batch.

State between batches travels in the context: `facts` (A), `meta["kept_chunk_ids"]` (B),
`meta["summary"]` (C); `compactor.ContextCompacter` loads and stores it. Chunks flagged by
`classify.injection` are quarantined (left out and listed in the step report) unless
`quarantine: false`.
"""

from __future__ import annotations

from collections.abc import Sequence

from compactor.components import Component, score_value
from compactor.document import Chunk, Context, Fact, Segment, frozen_mapping
from compactor.fidelity import invented_facts
from compactor.hookspecs import hookimpl
from compactor.plugins import facts as fx
from compactor.plugins.injection import usable_chunks
from compactor.plugins.llm_fallback import fill, template_for
from compactor.plugins.llm_guard import Request, complete_guarded
from compactor.plugins.select import Kept, segments_for
from compactor.run import Run
from compactor.sentences import detect_lang, split_sentences

DEFAULT_BATCH_BUDGET = 4000


def _urls(context: Context) -> dict[str, str | None]:
    return {s.id: s.uri for s in context.sources}


def _lang(chunks: Sequence[Chunk]) -> str:
    lang = detect_lang("\n".join(c.text for c in chunks[:50]))
    return "zh" if lang == "zh" else "en"


def fact_lines(facts: Sequence[Fact], limit: int | None, run: Run) -> tuple[str, list[Fact]]:
    """Facts as a Markdown list (best first until `limit` tokens), and the facts that made it."""
    lines: list[str] = []
    shown: list[Fact] = []
    used = 0
    costs = run.counter.count_many([f"- {f.text}\n" for f in facts])
    for fact, cost in sorted(zip(facts, costs, strict=True), key=lambda fc: -fc[0].score):
        if limit is not None and used + cost > limit:
            continue
        lines.append(f"- {fact.text}")
        shown.append(fact)
        used += cost
    return "\n".join(lines), shown


class FactCentric(Component):
    """Strategy A: query-relevant facts with chunk ids and source URLs, merged across batches."""

    name = "compress.fact_centric"
    stage = "compress"
    requires = ("chunks",)
    provides = ("facts", "segments")

    def __init__(self, *, max_facts: int = 40, min_score: float = 0.2, quarantine: bool = True,
                 llm: bool = False, prompt: str | None = None) -> None:
        self.max_facts = max_facts
        self.min_score = min_score
        self.quarantine = quarantine
        self.llm = llm
        self.prompt = prompt

    @hookimpl
    def compactor_compress(self, context: Context, run: Run) -> Context:
        chunks = usable_chunks(context, run, self.quarantine)
        urls = _urls(context)
        new = self._llm_facts(chunks, context, run) if self.llm and chunks else None
        if new is None:
            new = fx.rule_facts(chunks, context.query, run.counter, urls, max_facts=self.max_facts,
                                min_score=self.min_score)
            run.note("extraction", "rules")
        else:
            run.note("extraction", "llm")
        facts, merged = fx.merge_facts(context.facts, new)
        run.note("new_facts", len(new) - merged)
        run.note("merged_facts", merged)
        run.note("facts", len(facts))
        text, shown = fact_lines(facts, context.resolved_budget(), run)
        segment = Segment(id="facts", text=text, title="Facts",
                          chunk_ids=tuple(dict.fromkeys(c for f in shown for c in f.chunk_ids)),
                          metadata=frozen_mapping({"fact_ids": [f.id for f in shown]}))
        return context.evolve(facts=tuple(facts), segments=(segment,) if shown else ())

    def _llm_facts(self, chunks: list[Chunk], context: Context, run: Run) -> list[Fact] | None:
        lang = _lang(chunks)
        content = "\n\n".join(f"[{c.id}] {c.text.strip()}" for c in chunks)
        prompt = fill(template_for(self.prompt, "facts", lang), query=context.query or "",
                      budget=str(self.max_facts), content=content)
        reply = complete_guarded([Request(prompt, content)], run, check_reply=False)[0]
        if reply is None:
            return None
        parsed, problems = fx.parse_llm_facts(reply, {c.id: c for c in chunks}, _urls(context))
        accepted: list[Fact] = []
        for fact, source in parsed:
            invented = invented_facts(fact.text, f"{source}\n{context.query or ''}")
            if invented:
                problems.append(f"{fact.text[:60]!r}: invented {', '.join(invented)}")
            else:
                accepted.append(fact)
        if problems:
            run.note("llm_rejected", problems)
        if not accepted:
            run.note("llm_declined", "no usable fact in the LLM reply; rule extraction used")
            return None
        return accepted[: self.max_facts]


class ChunkFiltering(Component):
    """Strategy B: keep the ids of the chunks relevant to the query (best first, within the batch
    budget); the checklist context is their original text, in source order."""

    name = "compress.chunk_filtering"
    stage = "compress"
    requires = ("chunks",)
    provides = ("segments",)

    def __init__(self, *, min_score: float = 0.35, max_chunks: int | None = None,
                 quarantine: bool = True) -> None:
        self.min_score = min_score
        self.max_chunks = max_chunks
        self.quarantine = quarantine

    @hookimpl
    def compactor_compress(self, context: Context, run: Run) -> Context:
        chunks = usable_chunks(context, run, self.quarantine)
        value = {c.id: score_value(c, "combined") for c in chunks}
        relevance = {c.id: float(c.scores.get("relevance", 1.0)) for c in chunks}
        top = max(value.values(), default=0.0)
        ranked = sorted(chunks, key=lambda c: (-value[c.id], c.source_id, c.index))
        limit = context.resolved_budget() or DEFAULT_BATCH_BUDGET
        kept: list[Chunk] = []
        used = 0
        for chunk in ranked:
            weak = value[chunk.id] < self.min_score * top or (context.query and relevance[chunk.id] <= 0)
            if top <= 0 or weak:
                break
            if self.max_chunks is not None and len(kept) >= self.max_chunks:
                break
            if used + chunk.tokens > limit:
                continue
            kept.append(chunk)
            used += chunk.tokens
        previous = list(context.meta.get("kept_chunk_ids", ()))
        ids = list(dict.fromkeys([*previous, *(c.id for c in kept)]))
        run.note("kept_chunks", len(kept))
        run.note("total_kept_chunks", len(ids))
        run.note("chunk_ids", [c.id for c in kept])
        segments = segments_for(context, [Kept(c, c.start, c.end) for c in kept])
        return context.evolve(segments=segments,
                              meta=frozen_mapping({**context.meta, "kept_chunk_ids": ids}))


class Summarization(Component):
    """Strategy C: a rolling summary of everything seen so far, within `max_tokens`.

    By rules, the sentences of the previous summary and of the batch's chunks compete on query
    relevance and information; the summary keeps the older sentences first. With `llm: true` the
    LLM updates the summary instead, and its reply is used only if it invents nothing.
    """

    name = "compress.summarization"
    stage = "compress"
    requires = ("chunks",)
    provides = ("segments",)

    def __init__(self, *, max_tokens: int = 1500, llm: bool = False, prompt: str | None = None,
                 quarantine: bool = True) -> None:
        self.max_tokens = max_tokens
        self.llm = llm
        self.prompt = prompt
        self.quarantine = quarantine

    @hookimpl
    def compactor_compress(self, context: Context, run: Run) -> Context:
        chunks = usable_chunks(context, run, self.quarantine)
        previous = str(context.meta.get("summary", ""))
        limit = min(self.max_tokens, context.resolved_budget() or self.max_tokens)
        summary, sources = self._rules(previous, chunks, context.query, limit, run)
        method = "rules"
        if self.llm and chunks:
            reply = self._llm(previous, chunks, context, limit, run)
            if reply is not None:
                summary, sources, method = reply, [c.id for c in chunks], "llm"
        run.note("method", method)
        run.note("summary_tokens", run.counter.count(summary))
        segment = Segment(id="summary", text=summary, title="Summary", chunk_ids=tuple(sources),
                          metadata=frozen_mapping({"method": method, "provenance": "partial"}))
        return context.evolve(segments=(segment,) if summary else (),
                              meta=frozen_mapping({**context.meta, "summary": summary}))

    @staticmethod
    def _rules(previous: str, chunks: list[Chunk], query: str | None, limit: int,
               run: Run) -> tuple[str, list[str]]:
        old = [previous[s:e].strip() for s, e in split_sentences(previous)] if previous else []
        old_set = frozenset(old)
        pseudo = Chunk(id="summary", source_id="summary", index=0, start=0, end=len(previous),
                       text=previous, tokens=0, scores=frozen_mapping({"combined": 0.8}))
        pool = fx.candidates([pseudo, *chunks] if previous else chunks, query, run.counter)
        chosen: list[fx.Candidate] = []
        used = 0
        for cand in pool:
            if any(fx.same_fact(cand.terms, c.terms) for c in chosen):
                continue
            if used + cand.tokens + 1 > limit:  # + the newline that joins it
                continue
            chosen.append(cand)
            used += cand.tokens + 1
        order = {id(c): i for i, c in enumerate(chunks)}
        chosen.sort(key=lambda c: (c.text not in old_set,
                                   old.index(c.text) if c.text in old_set else 0,
                                   order.get(id(c.chunk), -1), c.chunk.text.find(c.text)))
        text = "\n".join(c.text for c in chosen)
        while text and run.counter.count(text) > limit:
            chosen.pop()
            text = "\n".join(c.text for c in chosen)
        return text, list(dict.fromkeys(c.chunk.id for c in chosen if c.chunk.id != "summary"))

    def _llm(self, previous: str, chunks: list[Chunk], context: Context, limit: int,
             run: Run) -> str | None:
        lang = _lang(chunks)
        content = "\n\n".join(c.text.strip() for c in chunks)
        prompt = fill(template_for(self.prompt, "summary", lang), query=context.query or "",
                      budget=str(limit), content=f"{previous}\n\n---\n\n{content}" if previous else content)
        source = f"{previous}\n{content}\n{context.query or ''}"
        return complete_guarded([Request(prompt, source, limit)], run)[0]
