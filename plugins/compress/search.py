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

State between batches travels in the context: `facts`, and the typed `Knowledge` state: the
shown fact ids (`checklist`) and `checklist_budget` (A), `kept_chunk_ids` and `chunk_scores` (B),
the `summary` (C); `compactor.ContextCompacter` loads and stores it. Sentences flagged by
`classify.injection` are quarantined (the rest of their chunk stays usable; the flagged chunks are
listed in the step report) unless `quarantine: false`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from compactor.components import Component, DataPath
from compactor.document import Chunk, Context, Fact, Segment, frozen_mapping
from compactor.hookspecs import hookimpl
from compactor.llm.guard import Request, complete_guarded
from compactor.plugins.classify import usable
from compactor.plugins.compress import facts as fx
from compactor.plugins.compress.select import Kept, segments_for
from compactor.plugins.llm import fill, template_for
from compactor.run import Run
from compactor.state import Knowledge
from compactor.text.fidelity import invented_facts
from compactor.text.language import is_chinese
from compactor.text.sentences import split_sentences

DEFAULT_BATCH_BUDGET = 4000


def _urls(context: Context) -> dict[str, str | None]:
    return {s.id: s.uri for s in context.sources}


def _lang(chunks: Sequence[Chunk]) -> str:
    """The prompt's language: the chunks' own."""
    return "zh" if is_chinese(c.text for c in chunks) else "en"


def fact_lines(facts: Sequence[Fact], limit: int | None, run: Run) -> tuple[str, list[Fact]]:
    """Facts as a Markdown list (best first until `limit` tokens), and the facts that made it."""
    shown = fx.fit_facts(facts, limit, run.counter)
    return "\n".join(fx.fact_line(f) for f in shown), shown


def batch_budget(context: Context, share: float | None, floor: int = 0) -> int | None:
    """A batch's checklist budget: `share` of its input tokens but at least `floor` (so a short batch
    still shows its best facts), within the context's budget."""
    limits = [context.resolved_budget()]
    if share is not None:
        tokens = context.input_tokens
        limits.append(max(1, int(share * tokens), min(floor, tokens)))
    known = [x for x in limits if x is not None]
    return min(known) if known else None


def session_budget(context: Context, batch: int | None) -> int | None:
    """The session's checklist budget: the batch budgets so far, within the budget's `max_tokens`."""
    if batch is None:
        return context.budget.max_tokens
    total = int(_knowledge(context).checklist_budget or 0) + batch
    cap = context.budget.max_tokens
    return total if cap is None else min(total, cap)


def _knowledge(context: Context) -> Knowledge:
    """What the session knows so far (empty on its first batch)."""
    return context.state.get(Knowledge, _NO_KNOWLEDGE)


_NO_KNOWLEDGE = Knowledge()


def _titles(context: Context) -> dict[str, str]:
    return {s.id: t for s in context.sources if (t := fx.page_title(s.title, s.text))}


def _shares(params: dict[str, Any]) -> list[str]:
    share = params["share"]
    return [] if share is None or 0 < share <= 1 else [f"share must be in (0, 1] of the budget, not {share}"]


def _unit_interval(params: dict[str, Any], *names: str) -> list[str]:
    return [f"{n} must be in [0, 1], not {params[n]}" for n in names if not 0 <= params[n] <= 1]


def _at_least_one(params: dict[str, Any], *names: str) -> list[str]:
    return [f"{n} must be at least 1, not {params[n]}" for n in names
            if params[n] is not None and params[n] < 1]


class FactCentric(Component):
    """Strategy A: query-relevant facts with chunk ids and source URLs, merged across batches.

    A batch's facts are its sentences whose relevance (`facts.scored_sentences`) is at least
    `threshold` times the batch's best and at least `min_score`: a relevance bar, not a count, so
    a batch with two relevant sentences gives two facts and a rich one gives many (at most the
    budget's `max_tokens` of fact text per batch). All of them stay in the knowledge base, and their
    chunks (with their neighbours) make the report context; the checklist shows the best-scored
    facts within the session's checklist budget: `share` of each batch's input tokens (at least
    `min_tokens`, within the pipeline budget), summed over the batches and capped at the budget's
    `max_tokens`.
    """

    name = "compress.fact_centric"
    stage = "compress"
    requires = ("chunks",)
    provides = ("facts", "segments", Knowledge)

    def __init__(self, *, share: float | None = 0.1, min_tokens: int = 50, threshold: float = 0.3,
                 min_score: float = 0.1, max_facts: int | None = None, quarantine: bool = True,
                 llm: bool = False, prompt: DataPath | None = None) -> None:
        self.share = share
        self.min_tokens = min_tokens
        self.threshold = threshold
        self.min_score = min_score
        self.max_facts = max_facts
        self.quarantine = quarantine
        self.llm = llm
        self.prompt = prompt

    @staticmethod
    def check_params(params: dict[str, Any]) -> list[str]:
        return _shares(params) + _unit_interval(params, "threshold", "min_score") + _at_least_one(
            params, "max_facts") + ([] if params["min_tokens"] >= 0 else ["min_tokens must be 0 or more"])

    @hookimpl
    def compactor_compress(self, context: Context, run: Run) -> Context:
        context, chunks = usable(context, run, self.quarantine)
        urls = _urls(context)
        budget = batch_budget(context, self.share, self.min_tokens)
        new = self._llm_facts(chunks, context, budget, run) if self.llm and chunks else None
        if new is None:
            shown_before = set(_knowledge(context).checklist or (f.id for f in context.facts))
            anchors = [(f.text, f.score) for f in context.facts if f.id in shown_before]
            ranked = fx.scored_sentences(chunks, context.query, run.counter, titles=_titles(context),
                                         anchors=anchors)
            new = fx.keep_facts(ranked, urls, threshold=self.threshold, floor=self.min_score,
                                max_tokens=context.budget.max_tokens, max_facts=self.max_facts)
            run.note("extraction", "rules")
        else:
            run.note("extraction", "llm")
        working = {f.text: f.span for f in new if f.span}  # where this batch's facts are, for its segment
        new = fx.with_input_spans(new, context.sources)
        facts, merged = fx.merge_facts(context.facts, new)
        limit = session_budget(context, budget)
        text, shown = fact_lines(facts, limit, run)
        run.note("new_facts", len(new) - merged)
        run.note("merged_facts", merged)
        run.note("facts", len(facts))
        run.note("batch_budget", budget)
        run.note("checklist_budget", limit)
        run.note("checklist_facts", len(shown))
        here = {s.id for s in context.sources}
        segment = Segment(id="facts", text=text, title="Facts",
                          chunk_ids=tuple(dict.fromkeys(c for f in shown for c in f.chunk_ids)),
                          metadata=frozen_mapping({"fact_ids": [f.id for f in shown]}),
                          spans=tuple(span for f in shown if (span := working.get(f.text))
                                      and span[0] in here))
        knowledge = _knowledge(context).evolve(strategy="fact_centric", checklist=[f.id for f in shown],
                                               checklist_budget=limit)
        return context.evolve(facts=tuple(facts), segments=(segment,) if shown else (),
                              state=context.state.with_(knowledge))

    def _llm_facts(self, chunks: list[Chunk], context: Context, budget: int | None,
                   run: Run) -> list[Fact] | None:
        lang = _lang(chunks)
        content = "\n\n".join(f"[{c.id}] {c.text.strip()}" for c in chunks)
        count = self.max_facts or max(3, (budget or DEFAULT_BATCH_BUDGET) // 30)
        prompt = fill(template_for(self.prompt, "facts", lang), query=context.query or "",
                      budget=str(count), content=content)
        accepted: list[Fact] = []
        dropped: list[str] = []

        def usable(_: int, reply: str) -> list[str]:
            """The reply is accepted when at least one fact cites a real chunk and invents nothing."""
            parsed, problems = fx.parse_llm_facts(reply, {c.id: c for c in chunks}, _urls(context))
            for fact, source in parsed:
                invented = invented_facts(fact.text, f"{source}\n{context.query or ''}")
                if invented:
                    problems.append(f"{fact.text[:60]!r}: invented {', '.join(invented)}")
                else:
                    accepted.append(fact)
            dropped.extend(problems)
            return [] if accepted else [*problems, "no usable fact in the reply"]

        reply = complete_guarded([Request(prompt, content)], run, check_reply=False, accept=usable)[0]
        if reply is None:
            return None
        if dropped:  # facts left out of an accepted reply
            run.note("llm_dropped_facts", dropped)
        return accepted[:count]


class ChunkFiltering(Component):
    """Strategy B: keep the ids of the chunks relevant to the query; the checklist context is their
    original text, in source order.

    A chunk is as relevant as its best sentence (`facts.scored_sentences`); a batch keeps the chunks
    at least `threshold` times as relevant as its best and at least `min_score`, best first within
    the batch budget (`share` of the batch's input tokens when given, within the pipeline budget).
    Across batches the kept chunks are re-fitted to the session budget (the batch budgets summed,
    capped at the budget's `max_tokens`): the least relevant go first.
    """

    name = "compress.chunk_filtering"
    stage = "compress"
    requires = ("chunks",)
    provides = ("segments", Knowledge)

    def __init__(self, *, share: float | None = None, threshold: float = 0.35, min_score: float = 0.1,
                 max_chunks: int | None = None, quarantine: bool = True) -> None:
        self.share = share
        self.threshold = threshold
        self.min_score = min_score
        self.max_chunks = max_chunks
        self.quarantine = quarantine

    @staticmethod
    def check_params(params: dict[str, Any]) -> list[str]:
        return _shares(params) + _unit_interval(params, "threshold", "min_score") + _at_least_one(
            params, "max_chunks")

    @hookimpl
    def compactor_compress(self, context: Context, run: Run) -> Context:
        context, chunks = usable(context, run, self.quarantine)
        value: dict[str, float] = {}
        for cand in fx.scored_sentences(chunks, context.query, run.counter, titles=_titles(context),
                                        max_tokens=None):
            value[cand.chunk.id] = max(value.get(cand.chunk.id, 0.0), cand.relevance)
        best = max(value.values(), default=0.0)
        bar = max(self.min_score, self.threshold * best)
        ranked = sorted((c for c in chunks if value.get(c.id, 0.0) >= bar and best > 0),
                        key=lambda c: (-value[c.id], c.source_id, c.index))
        limit = batch_budget(context, self.share) or DEFAULT_BATCH_BUDGET
        kept: list[Chunk] = []
        used = 0
        for chunk in ranked:
            if self.max_chunks is not None and len(kept) >= self.max_chunks:
                break
            if used + chunk.tokens > limit:
                continue
            kept.append(chunk)
            used += chunk.tokens
        known = _knowledge(context)
        scores = {str(k): list(v) for k, v in (known.chunk_scores or {}).items()}
        scores.update({c.id: [round(value[c.id], 4), c.tokens] for c in kept})
        previous = list(known.kept_chunk_ids)
        found = list(dict.fromkeys([*previous, *(c.id for c in kept)]))
        session = session_budget(context, limit)
        fitted = _fit_ids(found, scores, session)
        ids = [i for i in found if i in fitted]
        run.note("kept_chunks", len(kept))
        run.note("total_kept_chunks", len(ids))
        run.note("chunk_ids", [c.id for c in kept])
        run.note("batch_budget", limit)
        run.note("checklist_budget", session)
        segments = segments_for(context, [Kept(c, c.start, c.end) for c in kept],
                                quarantine=self.quarantine)
        cap = context.resolved_budget()
        while kept and cap is not None and run.counter.count(
                "\n\n".join(s.text for s in segments)) > cap:  # the gap marks between kept chunks
            kept.remove(min(kept, key=lambda c: value[c.id]))
            segments = segments_for(context, [Kept(c, c.start, c.end) for c in kept],
                                    quarantine=self.quarantine)
        knowledge = known.evolve(strategy="chunk_filtering", kept_chunk_ids=ids, checklist_budget=session,
                                 chunk_scores={i: scores[i] for i in ids if i in scores})
        return context.evolve(segments=segments, state=context.state.with_(knowledge))


def _fit_ids(ids: Sequence[str], scores: dict[str, list[float]], budget: int | None) -> set[str]:
    """The most relevant of `ids` whose token counts fit `budget` (ids without a recorded score, from
    sessions older than scores, are kept and not counted)."""
    if budget is None:
        return set(ids)
    fitted = {i for i in ids if i not in scores}
    used = 0
    for i in sorted((i for i in ids if i in scores), key=lambda i: -scores[i][0]):
        if used + int(scores[i][1]) <= budget:
            fitted.add(i)
            used += int(scores[i][1])
    return fitted


class Summarization(Component):
    """Strategy C: a rolling summary of everything seen so far, within `max_tokens`.

    By rules, the sentences of the previous summary and of the batch's chunks compete on query
    relevance and information; the summary keeps the older sentences first. With `llm: true` the
    LLM updates the summary instead, and its reply is used only if it invents nothing.
    """

    name = "compress.summarization"
    stage = "compress"
    requires = ("chunks",)
    provides = ("segments", Knowledge)

    def __init__(self, *, max_tokens: int = 1500, llm: bool = False, prompt: DataPath | None = None,
                 quarantine: bool = True) -> None:
        self.max_tokens = max_tokens
        self.llm = llm
        self.prompt = prompt
        self.quarantine = quarantine

    @staticmethod
    def check_params(params: dict[str, Any]) -> list[str]:
        return _at_least_one(params, "max_tokens")

    @hookimpl
    def compactor_compress(self, context: Context, run: Run) -> Context:
        context, chunks = usable(context, run, self.quarantine)
        known = _knowledge(context)
        previous = known.summary
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
        return context.evolve(segments=(segment,) if summary else (), state=context.state.with_(
            known.evolve(strategy="summarization", summary=summary)))

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
        return complete_guarded([Request(prompt, f"{previous}\n{content}", limit, context.query)], run)[0]
