"""The search-result strategies of a deep-research agent, as compress components.

* `compress.fact_centric` (A): query-relevant facts, each with its chunk ids and source URL, merged
  across batches when they say the same thing. Rules first; an LLM extraction pass is optional and
  guarded (its facts must cite chunks of the batch and invent nothing).
* `compress.chunk_filtering` (B): the ids of the relevant chunks; the checklist context is the
  original text of the best of them within the session budget. Rules first; an LLM pick of chunk ids
  is optional and guarded (every id must be a chunk of the batch).
* `compress.summarization` (C): a rolling summary updated per batch, extractive by rules (sentences
  of the previous summary compete with the new batch's), LLM optional. Its segment lists each
  summary sentence with the chunks it came from (an LLM sentence: the chunks it shares most with).

State between batches travels in the context: `facts`, and the typed `Knowledge` state: the
shown fact ids (`checklist`) and `checklist_budget` (A), `kept_chunk_ids`, the shown ids (`checklist`)
and `chunk_scores` (B), the `summary` (C); `compactor.ContextCompacter` loads and stores it.
Sentences flagged by `classify.injection` are quarantined (the rest of their chunk stays usable;
the flagged chunks are listed in the step report) unless `quarantine: false`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

from compactor import kit
from compactor.components import Component, DataPath, param
from compactor.document import Chunk, Context, Fact, Segment, frozen_mapping
from compactor.formats.search_context import PREVIOUS, fact_line, heading, summary_sentences
from compactor.hookspecs import hookimpl
from compactor.kit import Kept, fill, segments_for, template_for, usable
from compactor.llm.guard import Request, complete_guarded
from compactor.run import Run
from compactor.state import Knowledge
from compactor.text import terms as ts
from compactor.text.fidelity import invented_facts
from compactor.text.language import is_chinese

DEFAULT_BATCH_BUDGET = 4000


def _urls(context: Context) -> dict[str, str | None]:
    return {s.id: s.uri for s in context.sources}


def _lang(chunks: Sequence[Chunk]) -> str:
    """The prompt's language: the chunks' own."""
    return "zh" if is_chinese(c.text for c in chunks) else "en"


def fact_lines(facts: Sequence[Fact], limit: int | None, run: Run) -> tuple[str, list[Fact]]:
    """Facts as a Markdown list (best first until `limit` tokens), and the facts that made it."""
    shown = kit.fit_facts(facts, limit, run.counter)
    return "\n".join(fact_line(f) for f in shown), shown


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
    return {s.id: t for s in context.sources if (t := kit.page_title(s.title, s.text))}


class _Strategy(Component):
    """What the search strategies that extract per batch declare alike."""

    share: float | None = param(0.1, gt=0, le=1, doc="the checklist budget, a share of each batch's input")
    min_tokens: int = param(50, ge=0, doc="the checklist budget of a batch at least")
    threshold: float = param(0.3, ge=0, le=1, doc="kept: at least this share of the batch's best")
    min_score: float = param(0.1, ge=0, le=1, doc="kept: at least this relevance")
    quarantine: bool = param(True, doc="leave out text flagged as injection")
    llm: bool = param(False, doc="extract with the LLM")
    prompt: DataPath | None = param(None, doc="a prompt file in place of the built-in one")


class FactCentric(_Strategy):
    """Strategy A: query-relevant facts with chunk ids and source URLs, merged across batches.

    A batch's facts are its sentences whose relevance (`kit.scored_sentences`) is at least
    `threshold` times the batch's best and at least `min_score`: a relevance bar, not a count, so
    a batch with two relevant sentences gives two facts and a rich one gives many (`max_facts`
    caps the count). The budget bounds what is shown, not what is known: all of them stay in the
    knowledge base, and their
    chunks (with their neighbours) make the report context; the checklist shows the best-scored
    facts within the session's checklist budget: `share` of each batch's input tokens (at least
    `min_tokens`, within the pipeline budget), summed over the batches and capped at the budget's
    `max_tokens`.
    """

    name = "compress.fact_centric"
    stage = "compress"
    requires = ("chunks",)
    provides = ("facts", "segments", Knowledge)

    max_facts: int | None = param(None, ge=1, doc="facts per batch at most")

    @hookimpl
    def compactor_compress(self, context: Context, run: Run) -> Context:
        context, chunks = usable(context, run, self.quarantine)
        urls = _urls(context)
        budget = batch_budget(context, self.share, self.min_tokens)
        new = self._llm_facts(chunks, context, budget, run) if self.llm and chunks else None
        if new is None:
            shown_before = set(_knowledge(context).checklist or (f.id for f in context.facts))
            anchors = [(f.text, f.score) for f in context.facts if f.id in shown_before]
            ranked = kit.scored_sentences(chunks, context.query, run.counter, titles=_titles(context),
                                          anchors=anchors)
            new = kit.keep_facts(ranked, urls, threshold=self.threshold, floor=self.min_score,
                                 max_facts=self.max_facts)
            run.note("extraction", "rules")
        else:
            run.note("extraction", "llm")
        working = {f.text: f.span for f in new if f.span}  # where this batch's facts are, for its segment
        new = kit.with_input_spans(new, context.sources)
        facts, merged = kit.merge_facts(context.facts, new)
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
            parsed, problems = kit.parse_llm_facts(reply, {c.id: c for c in chunks}, _urls(context))
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


class ChunkFiltering(_Strategy):
    """Strategy B: keep the ids of the chunks relevant to the query; the checklist context is the
    original text of the best of them, in source order, within the session's checklist budget.

    A chunk is as relevant as its best sentence (`kit.scored_sentences`); a batch keeps the chunks
    at least `threshold` times as relevant as its best and at least `min_score` (within the budget's
    `max_tokens` per batch): that is the knowledge base, and the report context. The checklist shows
    the most relevant kept chunks whose rendered text (chunk texts and one heading per page) fits the
    session budget: `share` of each batch's input tokens (at least `min_tokens`), summed over the
    batches and capped at the budget's `max_tokens`, like fact_centric's. With `llm: true` the model
    picks the batch's relevant chunk ids instead of the rules; a reply citing an id that is not a
    chunk of the batch is refused, and a refused reply keeps the rules' choice.
    """

    name = "compress.chunk_filtering"
    stage = "compress"
    requires = ("chunks",)
    provides = ("segments", Knowledge)

    share: float | None = param(0.2, gt=0, le=1, doc="the checklist budget, a share of each batch's input")
    min_tokens: int = param(150, ge=0, doc="the checklist budget of a batch at least")
    threshold: float = param(0.35, ge=0, le=1, doc="kept: at least this share of the batch's best")
    max_chunks: int | None = param(None, ge=1, doc="chunks per batch at most")

    @hookimpl
    def compactor_compress(self, context: Context, run: Run) -> Context:
        context, chunks = usable(context, run, self.quarantine)
        value: dict[str, float] = {}
        for cand in kit.scored_sentences(chunks, context.query, run.counter, titles=_titles(context),
                                         max_tokens=None):
            value[cand.chunk.id] = max(value.get(cand.chunk.id, 0.0), cand.relevance)
        best = max(value.values(), default=0.0)
        bar = max(self.min_score, self.threshold * best)
        ranked = sorted((c for c in chunks if value.get(c.id, 0.0) >= bar and best > 0),
                        key=lambda c: (-value[c.id], c.source_id, c.index))
        picked = self._llm_chunks(chunks, context, run) if self.llm and chunks else None
        if picked is None:
            run.note("extraction", "rules")
        else:
            run.note("extraction", "llm")
            by_id = {c.id: c for c in chunks}
            ranked = [by_id[i] for i in picked]
            # the model's order is its ranking: scores in (0.5, 1] that keep it across batches
            value = {i: round(1.0 - rank / (2 * len(picked)), 4) for rank, i in enumerate(picked)}
        limit = context.budget.max_tokens
        kept: list[Chunk] = []
        used = 0
        for chunk in ranked:
            if self.max_chunks is not None and len(kept) >= self.max_chunks:
                break
            if limit is not None and used + chunk.tokens > limit:
                continue
            kept.append(chunk)
            used += chunk.tokens
        known = _knowledge(context)
        scores = {str(k): list(v) for k, v in (known.chunk_scores or {}).items()}
        heads = _heading_costs(context, run)
        scores.update({c.id: [round(value[c.id], 4), c.tokens, heads.get(c.source_id, 0)] for c in kept})
        ids = list(dict.fromkeys([*known.kept_chunk_ids, *(c.id for c in kept)]))
        batch = batch_budget(context, self.share, self.min_tokens)
        session = session_budget(context, batch)
        shown = fit_chunk_ids(ids, scores, session)
        run.note("kept_chunks", len(kept))
        run.note("total_kept_chunks", len(ids))
        run.note("chunk_ids", [c.id for c in kept])
        run.note("batch_budget", batch)
        run.note("checklist_budget", session)
        run.note("checklist_chunks", len(shown))
        segments = segments_for(context, [Kept(c, c.start, c.end) for c in kept],
                                quarantine=self.quarantine)
        cap = context.resolved_budget()
        while kept and cap is not None and run.counter.count(
                "\n\n".join(s.text for s in segments)) > cap:  # the gap marks between kept chunks
            kept.remove(min(kept, key=lambda c: value[c.id]))
            segments = segments_for(context, [Kept(c, c.start, c.end) for c in kept],
                                    quarantine=self.quarantine)
        knowledge = known.evolve(strategy="chunk_filtering", kept_chunk_ids=ids, checklist=shown,
                                 checklist_budget=session, chunk_scores={i: scores[i] for i in ids
                                                                         if i in scores})
        return context.evolve(segments=segments, state=context.state.with_(knowledge))

    def _llm_chunks(self, chunks: list[Chunk], context: Context, run: Run) -> list[str] | None:
        """The batch's relevant chunk ids as the model ranks them, or None when its reply is refused
        (an id that is not a chunk of the batch, no JSON list, a refusal): the rules decide then."""
        lang = _lang(chunks)
        content = "\n\n".join(f"[{c.id}] {c.text.strip()}" for c in chunks)
        count = self.max_chunks or len(chunks)
        prompt = fill(template_for(self.prompt, "chunks", lang), query=context.query or "",
                      budget=str(count), content=content)
        known = {c.id for c in chunks}
        picked: list[str] = []

        def usable_ids(_: int, reply: str) -> list[str]:
            ids, problems = parse_chunk_ids(reply, known)
            picked[:] = ids[:count]
            return problems

        allowance = 16 * min(count, len(chunks)) + 32  # a JSON list of ids, with room for spacing
        reply = complete_guarded([Request(prompt, content, allowance)], run, check_reply=False,
                                 accept=usable_ids, label="chunk ids")[0]
        return None if reply is None else list(picked)


def parse_chunk_ids(reply: str, known: set[str]) -> tuple[list[str], list[str]]:
    """Chunk ids from an LLM reply (a JSON list of ids, or an object holding one), most relevant
    first, and the problems that refuse the reply: no JSON list, an item that is no id, an id that
    is not one of `known`."""
    text = reply.strip()
    start, end = text.find("["), text.rfind("]")
    if start < 0 or end <= start:
        return [], ["reply holds no JSON list of chunk ids"]
    try:
        items = json.loads(text[start:end + 1])
    except json.JSONDecodeError as exc:
        return [], [f"reply is not a JSON list of chunk ids: {exc.msg}"]
    if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
        return [], ["reply is not a JSON list of chunk id strings"]
    ids = [i.strip().strip("[]") for i in items]
    unknown = [i for i in ids if i not in known]
    if unknown:
        return [], [f"unknown chunk id(s): {', '.join(unknown[:5])}"]
    return list(dict.fromkeys(ids)), []


def _heading_costs(context: Context, run: Run) -> dict[str, int]:
    """Each page's heading tokens in a rendered context, with the blank line after it."""
    sources = list(context.sources)
    costs = run.counter.count_many([heading(s.title, s.uri, s.id) for s in sources])
    return {s.id: cost + 2 for s, cost in zip(sources, costs, strict=True)}


def page_of(chunk: str) -> str:
    """The source id a chunk id is made from (`<source id>-<index>`)."""
    return chunk.rsplit("-", 1)[0]


def fit_chunk_ids(ids: Sequence[str], scores: Mapping[str, Sequence[float]], budget: int | None) -> list[str]:
    """The most relevant of `ids` whose rendered text fits `budget`: each chunk's tokens and the
    blank line after it, plus its page's heading the first time the page appears (as recorded in
    `scores`: [relevance, tokens, heading tokens]); in the order of `ids`. Ids without a recorded
    score (sessions older than scores) count as unscored and cost nothing."""
    if budget is None:
        return list(ids)
    chosen = {i for i in ids if i not in scores}
    pages: set[str] = set()
    used = 0
    for i in sorted((i for i in ids if i in scores), key=lambda i: -scores[i][0]):
        row = scores[i]
        head = int(row[2]) if len(row) > 2 and page_of(i) not in pages else 0
        cost = int(row[1]) + 2 + head
        if used + cost <= budget:
            chosen.add(i)
            pages.add(page_of(i))
            used += cost
    return [i for i in ids if i in chosen]


class Summarization(Component):
    """Strategy C: a rolling summary of everything seen so far, within `max_tokens`.

    By rules, the sentences of the previous summary and of the batch's chunks compete on query
    relevance and information; the summary keeps the older sentences first. With `llm: true` the
    LLM updates the summary instead, and its reply is used only if it invents nothing. Either way the
    segment's metadata lists every summary sentence with the chunks it came from (`sentences`: a
    rules sentence is copied from its chunk; an LLM sentence is traced to the chunks it shares most
    terms with); a sentence kept from the previous summary cites `summary:<n>`, the n-th sentence of
    that summary (`summary_sentences`), whose chunks the caller recorded.
    """

    name = "compress.summarization"
    stage = "compress"
    requires = ("chunks",)
    provides = ("segments", Knowledge)

    max_tokens: int = param(1500, ge=1, doc="the summary's tokens at most")
    llm: bool = param(False, doc="update the summary with the LLM")
    prompt: DataPath | None = param(None, doc="a prompt file in place of the built-in one")
    quarantine: bool = param(True, doc="leave out text flagged as injection")

    @hookimpl
    def compactor_compress(self, context: Context, run: Run) -> Context:
        context, chunks = usable(context, run, self.quarantine)
        known = _knowledge(context)
        previous = [_previous_chunk(i, text) for i, text in enumerate(summary_sentences(known.summary))]
        limit = min(self.max_tokens, context.resolved_budget() or self.max_tokens)
        summary, sentences = self._rules(previous, chunks, context.query, limit, run)
        method = "rules"
        if self.llm and chunks:
            reply = self._llm(known.summary, chunks, context, limit, run)
            if reply is not None:
                summary, method = reply, "llm"
                sentences = trace_sentences(summary_sentences(reply), [*previous, *chunks])
        run.note("method", method)
        run.note("summary_tokens", run.counter.count(summary))
        sources = [c for _, ids in sentences for c in ids if not c.startswith(PREVIOUS)]
        segment = Segment(id="summary", text=summary, title="Summary",
                          chunk_ids=tuple(dict.fromkeys(sources)),
                          metadata=frozen_mapping({"method": method, "provenance": "sentences",
                                                   "sentences": [[t, list(ids)] for t, ids in sentences]}))
        return context.evolve(segments=(segment,) if summary else (), state=context.state.with_(
            known.evolve(strategy="summarization", summary=summary)))

    @staticmethod
    def _rules(previous: list[Chunk], chunks: list[Chunk], query: str | None, limit: int,
               run: Run) -> tuple[str, list[tuple[str, list[str]]]]:
        pool = kit.candidates([*previous, *chunks], query, run.counter)
        chosen: list[kit.Candidate] = []
        used = 0
        for cand in pool:
            if any(kit.same_fact(cand.terms, c.terms) for c in chosen):
                continue
            if used + cand.tokens + 1 > limit:  # + the newline that joins it
                continue
            chosen.append(cand)
            used += cand.tokens + 1
        order = {c.id: i for i, c in enumerate([*previous, *chunks])}
        chosen.sort(key=lambda c: (order[c.chunk.id], c.chunk.text.find(c.text)))
        text = "\n".join(c.text for c in chosen)
        while text and run.counter.count(text) > limit:
            chosen.pop()
            text = "\n".join(c.text for c in chosen)
        return text, [(c.text, [c.chunk.id]) for c in chosen]

    def _llm(self, previous: str, chunks: list[Chunk], context: Context, limit: int,
             run: Run) -> str | None:
        lang = _lang(chunks)
        content = "\n\n".join(c.text.strip() for c in chunks)
        prompt = fill(template_for(self.prompt, "summary", lang), query=context.query or "",
                      budget=str(limit), content=f"{previous}\n\n---\n\n{content}" if previous else content)
        return complete_guarded([Request(prompt, f"{previous}\n{content}", limit, context.query)], run)[0]


#: an LLM sentence is traced to the chunks sharing at least this share of its best chunk's overlap
TRACE_SHARE = 0.7
TRACE_MAX = 3


def _previous_chunk(index: int, text: str) -> Chunk:
    """A previous summary sentence as a pseudo chunk, so it competes with the batch's sentences."""
    return Chunk(id=f"{PREVIOUS}{index}", source_id="summary", index=index, start=0, end=len(text),
                 text=text, tokens=0, scores=frozen_mapping({"combined": 0.8}))


def trace_sentences(sentences: Sequence[str], chunks: Sequence[Chunk]) -> list[tuple[str, list[str]]]:
    """Each sentence with the chunks it most likely came from: those sharing the largest share of
    its content terms (at least `TRACE_SHARE` of the best overlap, at most `TRACE_MAX`)."""
    chunk_terms = [(c.id, frozenset(ts.terms(c.text))) for c in chunks]
    out: list[tuple[str, list[str]]] = []
    for sentence in sentences:
        mine = frozenset(ts.terms(sentence))
        overlap = sorted(((len(mine & terms), cid) for cid, terms in chunk_terms if mine & terms),
                         key=lambda x: -x[0])
        top = overlap[0][0] if overlap else 0
        out.append((sentence, [cid for n, cid in overlap if n >= TRACE_SHARE * top][:TRACE_MAX]))
    return out
