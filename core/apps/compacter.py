"""ContextCompacter: the stateful search-result service of a deep-research agent.

    >>> compacter = ContextCompacter(strategy_name="fact_centric", store="research.sqlite", session="q42")
    >>> compacter.process_search_results([(url, html), ...], query="...")
    >>> compacter.get_checklist_context()            # facts (A), chunk text (B) or a summary (C)
    >>> compacter.reconstruct_report_context([fact.id, ...], budget=8000)
    >>> compacter.chunk_store[chunk_id]              # the original text of any chunk of the session

Each batch runs a pipeline (`deep-search` by default) whose compress step is the strategy component
(`compress.fact_centric`, `compress.chunk_filtering`, `compress.summarization`); the session's
knowledge goes in and comes out of the pipeline through the context, and the chunk store keeps the
original text of every chunk, so whatever a strategy keeps can be given back verbatim. A batch is
committed to the store in one transaction after its pipeline run. Every checklist context stays
within the session's checklist budget, counted on the text the agent gets.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any

from compactor.apps.common import llm_mapping
from compactor.config import PipelineSpec, load_spec
from compactor.document import Budget, Chunk, Context, Fact, Source, chunk_id, content_hash
from compactor.errors import ConfigError, InputError, Problem, StoreConflict
from compactor.formats.search_context import PREVIOUS, fact_line, heading, summary_sentences
from compactor.pipeline import Pipeline, pipeline_folder, read_pipeline_text
from compactor.registry import ComponentInfo, Registry, build_registry
from compactor.state import Knowledge, State, thaw
from compactor.store import Batch, ChunkStore, open_store

STRATEGIES = ("fact_centric", "chunk_filtering", "summarization")
# what a strategy keeps between batches besides its knowledge base: the checklist's fact ids and
# budget (A), the kept chunks' scores and sizes (B)
_STATE = ("checklist", "checklist_budget", "chunk_scores")
_ALIASES = {"a": "fact_centric", "b": "chunk_filtering", "c": "summarization"}
# a batch whose session changed under it (a writer that skipped the session lock) runs again
_ATTEMPTS = 3

SearchResult = tuple[str, str] | Mapping[str, Any] | Source


def strategy_name_of(name: str) -> str:
    """`fact_centric`, `compress.fact_centric` or `A` -> `fact_centric` (ConfigError otherwise)."""
    short = name.removeprefix("compress.")
    short = _ALIASES.get(short.lower(), short)
    if short not in STRATEGIES:
        raise ConfigError(Problem(f"unknown strategy {name!r}; choose from {', '.join(STRATEGIES)}",
                                  field="strategy"))
    return short


strategy_name = strategy_name_of  # the name earlier releases exported


def pipeline_with_strategy(pipeline: str | Pipeline, strategy: str | None,
                           plugins: Iterable[Any] = (), *, llm: bool = False) -> Pipeline:
    """The pipeline (a name or file), with its strategy step (the step that provides `Knowledge`)
    switched to `strategy` when given, and asking the model first when `llm`; every other step
    keeps its place in the file."""
    if isinstance(pipeline, Pipeline):
        if strategy is None and not llm:
            return pipeline
        raise ConfigError("pass a pipeline name or file (not a Pipeline) to switch its strategy or "
                          "turn on its LLM extraction")
    text, label = read_pipeline_text(pipeline)
    if strategy is None and not llm:
        return Pipeline.from_string(text, file=label, plugins=plugins)
    registry = build_registry(plugins=plugins)
    spec = load_spec(text, label, registry, None, pipeline_folder(label))
    if strategy is not None:
        spec = _with_strategy(spec, registry, strategy_name_of(strategy))
    return Pipeline(_with_llm(spec) if llm else spec, registry)


def _with_strategy(spec: PipelineSpec, registry: Registry, strategy: str) -> PipelineSpec:
    """`spec` with its strategy step using the component of `strategy` (with its defaults)."""
    providers = spec.providers(Knowledge)
    if not providers:
        raise ConfigError(Problem(f"no strategy step (a compress step providing knowledge: "
                                  f"{', '.join(STRATEGIES)}) to switch", spec.file, field="steps"))
    step, info = providers[0]
    if _short(info) == strategy:
        return spec
    target = next((c for c in registry.components.values()
                   if c.stage == "compress" and _short(c) == strategy and Knowledge in c.cls.provides), None)
    if target is None:
        raise ConfigError(Problem(f"no component provides the knowledge of strategy {strategy!r}",
                                  spec.file, field="steps"))
    params = {p.name: p.default for p in target.cls.parameters()}
    label = step.label if step.label != info.name else target.name
    switched = replace(step, label=label, components=((target, params),))
    return replace(spec, steps=tuple(switched if s is step else s for s in spec.steps))


def _with_llm(spec: PipelineSpec) -> PipelineSpec:
    """`spec` with its strategy step asking the model first (`llm: true`); the step's guard keeps
    the rule result for any reply it refuses."""
    step, info = spec.providers(Knowledge)[0]
    ((component, params),) = step.components
    if "llm" not in {p.name for p in component.cls.parameters()}:
        raise ConfigError(Problem(f"strategy {info.name!r} has no LLM path", spec.file, field="llm"))
    switched = replace(step, components=((component, {**params, "llm": True}),))
    return replace(spec, steps=tuple(switched if s is step else s for s in spec.steps))


def _first(value: Any) -> float:
    """A stored chunk score (a number or a list whose first item is the relevance) as a float."""
    if isinstance(value, list | tuple):
        value = value[0] if value else 0.0
    return float(value or 0.0)


def _short(info: ComponentInfo) -> str:
    """A strategy component's short name: what `strategy=` and the session store call it."""
    return info.name.split(".", 1)[-1]


def _strategy_of(pipeline: Pipeline) -> str:
    providers = pipeline.spec.providers(Knowledge)
    if not providers:
        raise ConfigError(Problem("the pipeline has no strategy step (a compress step providing "
                                  f"knowledge: {', '.join(STRATEGIES)})", pipeline.spec.file,
                                  field="steps"))
    return _short(providers[0][1])


def fact_to_dict(fact: Fact) -> dict[str, Any]:
    """A fact as JSON-ready data (how the knowledge base stores it)."""
    data: dict[str, Any] = {"id": fact.id, "text": fact.text, "chunk_ids": list(fact.chunk_ids),
            "source_url": fact.source_url, "score": fact.score}
    if fact.span is not None:
        data["span"] = list(fact.span)
    return data


def fact_from_dict(data: Mapping[str, Any]) -> Fact:
    """The inverse of `fact_to_dict`."""
    return Fact(id=str(data["id"]), text=str(data["text"]), chunk_ids=tuple(data["chunk_ids"]),
                source_url=data.get("source_url"), score=float(data.get("score", 0.0)),
                span=_span(data.get("span")))


def _span(value: Any) -> tuple[str, int, int] | None:
    if isinstance(value, list | tuple) and len(value) == 3:
        return str(value[0]), int(value[1]), int(value[2])
    return None


def to_source(item: SearchResult, position: int) -> Source:
    """A search result as a web-page source: `(url, content)`, a mapping with `url` and `content`
    (optional `title`, `topic`), or a Source."""
    if isinstance(item, Source):
        return item
    if isinstance(item, Mapping):
        url, content = item.get("url"), item.get("content")
        title, topic = item.get("title"), item.get("topic")
    elif isinstance(item, tuple | list) and len(item) == 2:
        (url, content), title, topic = item, None, None
    else:
        raise InputError(f"search result {position}: expected (url, content) or {{url, content}}, "
                         f"got {type(item).__name__}")
    if not isinstance(content, str):
        raise InputError(f"search result {position}: content must be text, not {type(content).__name__}")
    metadata = {"topic": topic} if topic else {}
    return Source.from_text(content, kind="web_page", uri=str(url) if url else None,
                            title=str(title) if title else None, metadata=metadata)


class ContextCompacter:
    """Stateful compression of search results for a deep-research agent."""

    def __init__(self, strategy: str | None = "fact_centric", *,
                 store: str | ChunkStore | None = None, session: str | None = None,
                 pipeline: str | Pipeline = "deep-search", query: str | None = None,
                 budget: int | None = None, plugins: Iterable[Any] = (),
                 strategy_name: str | None = None, llm: Any = None) -> None:
        if strategy_name is not None:  # the name search agents give the same argument
            if strategy not in (None, "fact_centric") and strategy_name_of(strategy) != strategy_name_of(
                    strategy_name):
                raise ConfigError(Problem(f"strategy {strategy!r} and strategy_name {strategy_name!r} "
                                          "disagree; pass one", field="strategy_name"))
            strategy = strategy_name
        #: LLM settings for the strategy's guarded extraction (None: the pipeline file decides).
        self.llm = llm_mapping(llm)
        self.pipeline = pipeline_with_strategy(pipeline, strategy, plugins, llm=self.llm is not None)
        self.strategy = _strategy_of(self.pipeline)
        configured = self.pipeline.spec.store
        self.store = open_store(store if store is not None else configured.get("path"))
        self.session = session or configured.get("session") or uuid.uuid4().hex[:16]
        self.query = query
        self.budget = budget
        self.store.ensure_session(self.session)
        stored = self.store.knowledge(self.session, "strategy")
        if stored is not None and stored != self.strategy:
            raise InputError(f"session {self.session!r} was built with strategy {stored!r}, "
                             f"not {self.strategy!r}")

    def __repr__(self) -> str:
        return f"ContextCompacter({self.strategy!r}, store={self.store!r}, session={self.session!r})"

    # -- knowledge -------------------------------------------------------------------------

    @property
    def facts(self) -> list[Fact]:
        """Strategy A's knowledge base: every fact so far."""
        return [fact_from_dict(f) for f in self.store.knowledge(self.session, "facts", [])]

    @property
    def checklist(self) -> list[Fact]:
        """Strategy A's checklist: the best facts within the session's checklist budget."""
        facts = self.facts
        shown = self.store.knowledge(self.session, "checklist")
        if shown is None:  # a session from before checklists were budgeted
            return sorted(facts, key=lambda f: -f.score)
        by_id = {f.id: f for f in facts}
        return [by_id[i] for i in shown if i in by_id]

    @property
    def chunk_ids(self) -> list[str]:
        """Strategy B's knowledge base: the relevant chunk ids so far, in the order they were found."""
        return list(self.store.knowledge(self.session, "kept_chunk_ids", []))

    @property
    def checklist_chunk_ids(self) -> list[str]:
        """Strategy B's checklist: the most relevant kept chunk ids whose text fits the checklist
        budget, in the order they were found."""
        kept = self.chunk_ids
        shown = self.store.knowledge(self.session, "checklist")
        if shown is None:  # a session from before chunk checklists were budgeted
            return kept
        known = set(kept)
        return [i for i in shown if i in known]

    @property
    def summary(self) -> str:
        """Strategy C's knowledge base: the rolling summary."""
        return str(self.store.knowledge(self.session, "summary", ""))

    @property
    def summary_sentences(self) -> list[Fact]:
        """Strategy C's summary, one Fact per sentence (id `s-...`) with the chunks it came from:
        what `reconstruct_report_context` takes to give back a sentence's originals."""
        return [Fact(id=str(r["id"]), text=str(r["text"]), chunk_ids=tuple(r["chunk_ids"]))
                for r in self.store.knowledge(self.session, "summary_sentences", [])]

    def findings(self) -> list[Fact]:
        """What the session kept, as Facts best first, whatever the strategy: the facts (A), the
        kept chunks verbatim, most relevant first (B), the summary's sentences with the
        chunks they came from (C). Each carries its page's URL, so a report can cite it."""
        if self.strategy == "fact_centric":
            return sorted(self.facts, key=lambda f: -f.score)
        urls = {s.id: s.url for s in self.store.sources(self.session)}
        if self.strategy == "chunk_filtering":
            ids = self.chunk_ids
            scores = self.store.knowledge(self.session, "chunk_scores") or {}
            chunks = self.store.chunks(ids)
            ranked = sorted((chunks[i] for i in ids if i in chunks), key=lambda c: -_first(scores.get(c.id)))
            return [Fact(id=c.id, text=c.text, chunk_ids=(c.id,), source_url=urls.get(c.source_id),
                         score=_first(scores.get(c.id)), span=(c.source_id, c.start, c.end)) for c in ranked]
        sentences = self.summary_sentences
        sources = {c.id: c.source_id for c in self.store.chunks(
            [i for f in sentences for i in f.chunk_ids]).values()}
        count = len(sentences)
        return [replace(f, source_url=next((urls.get(sources[i]) for i in f.chunk_ids if i in sources), None),
                        score=(count - k) / count) for k, f in enumerate(sentences)]

    @property
    def knowledge_base(self) -> list[Fact] | list[str] | str:
        """The compressed knowledge, shaped by the strategy: every fact (A), every relevant chunk id
        (B), the rolling summary (C). A copy: changing it changes nothing in the session."""
        if self.strategy == "fact_centric":
            return self.facts
        if self.strategy == "chunk_filtering":
            return self.chunk_ids
        return self.summary

    @property
    def chunk_store(self) -> Mapping[str, str]:
        """Chunk id -> original text of every chunk of this session, read-only: the single source
        of truth every strategy's knowledge points back to."""
        return SessionChunks(self.store, self.session)

    # -- the search agent's interface --------------------------------------------------------------------

    def process_search_results(self, search_results: Iterable[SearchResult],
                               query: str | None = None) -> dict[str, Any]:
        """Chunk, store and compress one batch of search results; returns the batch report.

        The batch holds the session's lock from reading the knowledge base to committing, so batches
        run by several processes (or threads) on one session compose as if run one after another:
        every fact kept, each page new to exactly one of them. A writer that skipped the lock makes
        the commit fail its version check, and the batch is computed again from the new state."""
        query = query if query is not None else self.query
        sources = [to_source(item, i) for i, item in enumerate(search_results)]
        sources = [s for s in sources if s.text.strip()]
        budget = Budget(max_tokens=self.budget) if self.budget else self.pipeline.spec.budget
        for attempt in range(_ATTEMPTS):
            with self.store.lock_session(self.session):
                try:
                    return self._batch(sources, query, budget)
                except StoreConflict:
                    if attempt == _ATTEMPTS - 1:
                        raise
        raise AssertionError("unreachable")

    def _batch(self, sources: list[Source], query: str | None, budget: Budget) -> dict[str, Any]:
        """One batch against the session as it is now (the caller holds the session's lock)."""
        base = self.store.version(self.session)
        stored = self.store.knowledge(self.session, "strategy")
        if stored is not None and stored != self.strategy:  # another process started the session
            raise InputError(f"session {self.session!r} was built with strategy {stored!r}, "
                             f"not {self.strategy!r}")
        known = Knowledge(strategy=self.strategy, kept_chunk_ids=tuple(self.chunk_ids), summary=self.summary,
                          **{k: self.store.knowledge(self.session, k) for k in _STATE
                             if self.store.knowledge(self.session, k) is not None})
        context = Context(sources=tuple(sources), facts=tuple(self.facts), query=query, budget=budget,
                          state=State([known]))
        result = (self.pipeline.run(context, store=self.store, session=self.session, llm=self.llm)
                  if sources else context)
        details = {r.step: dict(r.details) for r in result.reports}
        knowledge: dict[str, Any] = {"strategy": self.strategy}
        learned = result.state.get(Knowledge, known)
        if self.strategy == "fact_centric":
            knowledge["facts"] = [fact_to_dict(f) for f in result.facts]
        elif self.strategy == "chunk_filtering":
            knowledge["kept_chunk_ids"] = list(learned.kept_chunk_ids)
        else:
            knowledge["summary"] = learned.summary
            knowledge["summary_sentences"] = self._sentence_records(result.segments)
        knowledge.update({k: thaw(v) for k in _STATE if (v := getattr(learned, k)) is not None})
        quarantined = [q for d in details.values() for q in d.get("quarantined", [])]
        dropped = [p for d in details.values() for p in d.get("dropped_pages", [])]
        report = {"query": query, "results": len(sources), "new_pages": len(result.sources),
                  "chunks": len(result.chunks), "dropped_pages": dropped, "quarantined": quarantined}
        signatures = {s.id: tuple(s.metadata["signature"]) for s in result.sources
                      if "signature" in s.metadata}
        number = self.store.commit_batch(self.session, Batch(
            sources=result.sources, chunks=result.chunks, signatures=signatures, knowledge=knowledge,
            report=report), base=base)
        return {"batch": number, **report, "steps": details}

    def get_checklist_context(self) -> list[Fact] | str:
        """A: the checklist facts (best first, within the checklist budget); B: the original text of
        the most relevant chunks, within the checklist budget; C: the rolling summary."""
        if self.strategy == "fact_centric":
            return self.checklist
        if self.strategy == "chunk_filtering":
            return self._render(self._checklist_chunks())
        return self.summary

    def checklist_text(self) -> str:
        """The checklist context as text: facts as a Markdown list citing their chunk ids, or without
        the citations when those would push it over the checklist budget (the facts were fitted to
        the budget as plain lines, and every fact matters more than its citation)."""
        context = self.get_checklist_context()
        if isinstance(context, str):
            return context
        cited = "\n".join(f"- {f.text} [{', '.join(f.chunk_ids)}]" for f in context)
        limit = self._checklist_budget()
        if limit is None or self.pipeline.counter.count(cited) <= limit:
            return cited
        return "\n".join(fact_line(f) for f in context)

    def _checklist_budget(self) -> int | None:
        stored = self.store.knowledge(self.session, "checklist_budget")
        return int(stored) if stored is not None else self.budget

    def _checklist_chunks(self) -> list[Chunk]:
        """B's checklist chunks in source order; a rendering over the checklist budget (a heading
        longer than recorded) drops the least relevant until it fits."""
        chunks = self._chunks_in_order(self.checklist_chunk_ids)
        limit = self._checklist_budget()
        if limit is None or self.pipeline.counter.count(self._render(chunks)) <= limit:
            return chunks
        scores = self.store.knowledge(self.session, "chunk_scores") or {}
        ranked = sorted(chunks, key=lambda c: -_first(scores.get(c.id)))
        while ranked and self.pipeline.counter.count(self._render(self._order(ranked))) > limit:
            ranked.pop()
        return self._order(ranked)

    def _sentence_records(self, segments: Sequence[Any]) -> list[dict[str, Any]]:
        """The new summary's sentences with the chunk ids each came from; a sentence kept from the
        previous summary inherits that sentence's chunks."""
        before = summary_sentences(self.summary)
        earlier = {_norm(r.text): list(r.chunk_ids) for r in self.summary_sentences}
        records: list[dict[str, Any]] = []
        for segment in segments:
            for text, refs in segment.metadata.get("sentences", []) if segment.id == "summary" else []:
                ids: list[str] = []
                for ref in refs:
                    if not str(ref).startswith(PREVIOUS):
                        ids.append(str(ref))
                        continue
                    at = int(str(ref).removeprefix(PREVIOUS))
                    ids.extend(earlier.get(_norm(before[at]), []) if at < len(before) else [])
                records.append({"id": sentence_id(str(text)), "text": str(text),
                                "chunk_ids": list(dict.fromkeys(ids))})
        return records

    def _sentence_chunks(self, items: Sequence[str | Fact]) -> list[str]:
        """The chunk ids behind summary sentences given by id, text or Fact (a sentence's text may be
        a part of it, or hold it)."""
        records = self.summary_sentences
        ids: list[str] = []
        missing: list[str] = []
        for item in items:
            key = item.id if isinstance(item, Fact) else str(item)
            text = _norm(item.text if isinstance(item, Fact) else str(item))
            found = next((r for r in records if r.id == key), None) or next(
                (r for r in records if text and _norm(r.text) == text), None) or next(
                (r for r in records if text and (text in _norm(r.text) or _norm(r.text) in text)), None)
            if found is None:
                missing.append(key[:60])
            else:
                ids.extend(found.chunk_ids)
        if missing:
            raise InputError(f"relevant_items: no summary sentence of session {self.session!r} matches "
                             f"{', '.join(repr(m) for m in missing)}")
        return list(dict.fromkeys(ids))

    def reconstruct_report_context(self, relevant_items: Sequence[str | Fact] | None = None,
                                   budget: int | None = None, *, context: int | None = None) -> str:
        """The verbatim original text of the chunks behind the selected facts (A; by default every
        fact of the knowledge base, not only the checklist's) or chunk ids (B, C), with `context`
        neighbouring chunks of the same page on each side (default 1 for A, 0 otherwise), grouped by
        source in arrival order with titles and URLs, within `budget` tokens: the chunks behind
        facts come first, most relevant fact first, then their neighbours."""
        if self.strategy == "summarization" and relevant_items is None:
            return self.summary
        if self.strategy == "summarization":
            ids = self._sentence_chunks(relevant_items or [])
        elif self.strategy == "fact_centric":
            facts = {f.id: f for f in self.facts}
            chosen = list(facts.values()) if relevant_items is None else [
                facts.get(i.id if isinstance(i, Fact) else i) for i in relevant_items]
            missing = [str(i) for i, f in zip(relevant_items or [], chosen, strict=False) if f is None]
            if missing:
                raise InputError(f"unknown fact id(s) in session {self.session!r}: {', '.join(missing)}")
            ranked = sorted((f for f in chosen if f is not None), key=lambda f: -f.score)
            ids = list(dict.fromkeys(c for f in ranked for c in f.chunk_ids))
        else:
            items = self.chunk_ids if relevant_items is None else [
                i.id if isinstance(i, Fact) else i for i in relevant_items]
            ids = list(dict.fromkeys(items))
        stored = self.store.chunks(ids)
        missing = [i for i in ids if i not in stored]
        if missing:
            raise InputError(f"chunk id(s) not in the store: {', '.join(missing[:10])}")
        chosen_chunks = [stored[i] for i in ids]
        width = context if context is not None else (1 if self.strategy == "fact_centric" else 0)
        chosen_chunks += self._neighbours(chosen_chunks, width)
        if budget is not None:
            chosen_chunks = self._fit(chosen_chunks, budget)
        return self._render(self._order(chosen_chunks))

    def _neighbours(self, chunks: Sequence[Chunk], width: int) -> list[Chunk]:
        """The chunks up to `width` places before and after each of `chunks` in its page, nearest
        first, leaving out chunks already given and quarantined ones."""
        if width <= 0 or not chunks:
            return []
        have = {c.id for c in chunks}
        wanted = [chunk_id(c.source_id, c.index + step) for distance in range(1, width + 1)
                  for c in chunks for step in (-distance, distance) if c.index + step >= 0]
        wanted = [i for i in dict.fromkeys(wanted) if i not in have]
        quarantined = {q.get("chunk_id") for b in self.store.batches(self.session)
                       for q in b.get("report", {}).get("quarantined", [])}
        found = self.store.chunks(wanted)
        return [found[i] for i in wanted if i in found and i not in quarantined]

    # -- helpers ---------------------------------------------------------------------------

    def _chunks_in_order(self, ids: Sequence[str]) -> list[Chunk]:
        stored = self.store.chunks(ids)
        return self._order([stored[i] for i in ids if i in stored])

    def _order(self, chunks: Sequence[Chunk]) -> list[Chunk]:
        seq = {s.id: s.seq for s in self.store.sources(self.session)}
        return sorted(chunks, key=lambda c: (seq.get(c.source_id, len(seq)), c.index))

    def _render(self, chunks: Sequence[Chunk]) -> str:
        pages = {s.id: s for s in self.store.sources(self.session)} if chunks else {}
        parts: list[str] = []
        current: str | None = None
        for chunk in chunks:
            if chunk.source_id != current:
                current = chunk.source_id
                page = pages.get(chunk.source_id)
                url, title = (page.url, page.title) if page else (None, None)
                parts.append(heading(title, url, chunk.source_id))
            parts.append(chunk.text)
        return "\n\n".join(parts)

    def _fit(self, chunks: list[Chunk], budget: int) -> list[Chunk]:
        """Most important first while the estimate fits (chunk and heading counts plus joins), then
        drop the least important until the rendered text truly fits."""
        counter = self.pipeline.counter
        costs = counter.count_many([c.text for c in chunks])
        kept: list[Chunk] = []
        heads: set[str] = set()
        used = 0
        for chunk, cost in zip(chunks, costs, strict=True):
            head = 0 if chunk.source_id in heads else counter.count(self._render([chunk])) - cost + 2
            if used + cost + head + 2 <= budget:
                kept.append(chunk)
                heads.add(chunk.source_id)
                used += cost + head + 2
        while kept and counter.count(self._render(self._order(kept))) > budget:
            kept.pop()
        return kept


def sentence_id(text: str) -> str:
    """Stable id of a summary sentence: the hash of its whitespace-normalised text."""
    return "s-" + content_hash(" ".join(text.split()), 12)


def _norm(text: str) -> str:
    return " ".join(text.lower().split())


class SessionChunks(Mapping[str, str]):
    """A session's chunks as a read-only mapping, chunk id -> original text, read from the store
    on each access (so it follows batches added later)."""

    def __init__(self, store: ChunkStore, session: str) -> None:
        self._store = store
        self._session = session

    def _pages(self) -> set[str]:
        return {s.id for s in self._store.sources(self._session)}

    def __getitem__(self, key: str) -> str:
        found = self._store.chunks([key]).get(key)
        if found is None or found.source_id not in self._pages():
            raise KeyError(key)
        return found.text

    def __iter__(self) -> Iterator[str]:
        return iter([c.id for c in self._store.session_chunks(self._session)])

    def __len__(self) -> int:
        return len(self._store.session_chunks(self._session))

    def __repr__(self) -> str:
        return f"<chunk_store of session {self._session!r}: {len(self)} chunks>"
