"""compress.map_reduce: the report stage's token router and map-reduce summarizer, rule-based by default.

Below `max_tokens x safety_margin` (45000 x 0.8 = 36000 by default) the observations pass straight
through ("direct_to_reporter"). Above it ("compress_first"), every chunk (use `chunk.tokens` with
size 8000 and overlap 400, as a report graph splits) is mapped to its query-relevant sentences in parallel
with bounded concurrency, the extracts are reduced (overlap repeats merged, order kept), and when the
result is still above half of `max_tokens` (45000 // 2 = 22500, a report graph's
`max_observations_tokens // 2`) a second pass keeps the best sentences across all extracts.
The step report records the decision, the estimated tokens and the reason, like a report graph's state
fields (`compression_decision`, `estimated_tokens`, `decision_reason`).

Rule extracts are spans of the original text, so every kept sentence traces to its chunk. With
`llm: true` the map and reduce prompts (package data, overridable) run on the pipeline's LLM, and
every reply is checked by the LLM guard (`compactor.llm.guard`): a refusal, an instruction, an
invented number, date or name, a reply over its allowance (the `max_tokens` sent) or one keeping
less than `min_coverage` (default 0.25) of its input's weighted key content is rejected. The guard
decides per reply, so paid calls are not thrown away for one bad answer:

- map: each chunk's reply (allowance: its share of the target) is used when accepted; a refused
  chunk contributes its rule extract instead. With no reply accepted the rule result stays.
- reduce: one call merges that mix (allowance: the routing threshold, or the budget). Refused, the
  mix itself is the reduced text when it fits that allowance; otherwise the rule result stays.
- second pass: when the reduced text is over the second-pass target (`max_tokens // 2`, or the
  budget) one more call condenses it to the target; refused, the reduced text stays.

The step report says what each stage used (`llm_map_accepted`, `llm_map_refused`, `llm_reduce`,
`llm_second_pass`) and carries `data_source_note`, the line a reporter adds under its report.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from compactor.components import Component, DataPath, param
from compactor.document import Chunk, Context, Segment, frozen_mapping
from compactor.formats.routing import COMPRESS, DATA_SOURCE_NOTES, DIRECT, data_source_note
from compactor.hookspecs import hookimpl
from compactor.kit import Kept, fill, segments_for, template_for, usable
from compactor.llm import guard as llm_guard
from compactor.llm.client import LLMSettings
from compactor.llm.guard import Request, complete_guarded
from compactor.run import Run
from compactor.text import terms as ts
from compactor.text.extracts import query_idf, rule_extract, sentence_score
from compactor.text.language import is_chinese
from compactor.text.sentences import split_sentences
from compactor.text.tokens import TokenCounter

__all__ = ["COMPRESS", "DATA_SOURCE_NOTES", "DIRECT", "MapReduce", "data_source_note", "rule_extract"]


@dataclass(frozen=True, slots=True)
class Sentence:
    chunk: Chunk
    start: int  # offsets into the chunk's text
    end: int
    terms: frozenset[str]
    score: float = 0.0
    tokens: int = 0


def _sentences(chunk: Chunk) -> list[Sentence]:
    out = []
    for start, end in split_sentences(chunk.text):
        text = chunk.text[start:end]
        if text.strip():
            out.append(Sentence(chunk, start, end, frozenset(ts.terms(text))))
    return out


def _score(sentences: list[Sentence], query: str | None, counter: TokenCounter) -> list[Sentence]:
    """Query relevance (idf-weighted share of query terms) plus information (numbers, names)."""
    query_terms = set(ts.terms(query or ""))
    idf = query_idf((s.terms for s in sentences), query_terms)
    costs = counter.count_many([s.chunk.text[s.start:s.end] for s in sentences])
    scored = []
    for s, cost in zip(sentences, costs, strict=True):
        score = sentence_score(s.chunk.text[s.start:s.end], s.terms, query_terms, idf)
        scored.append(Sentence(s.chunk, s.start, s.end, s.terms, score, cost))
    return scored


def _best(sentences: list[Sentence], limit: int) -> list[Sentence]:
    """The best sentences within `limit` tokens (at least one), back in reading order."""
    chosen: list[Sentence] = []
    used = 0
    for s in sorted(sentences, key=lambda s: -s.score):
        if used + s.tokens <= limit or not chosen:
            chosen.append(s)
            used += s.tokens
    return sorted(chosen, key=lambda s: (s.chunk.source_id, s.chunk.start + s.start))


class MapReduce(Component):
    """Token router plus map-reduce: pass through below the threshold, else extract per chunk
    (in parallel), merge, and run a second pass while the result is over half of `max_tokens`."""

    name = "compress.map_reduce"
    stage = "compress"
    requires = ("chunks",)
    provides = ("segments",)

    max_tokens: int = param(45000, ge=1, doc="the model's window: above its safety share, map-reduce")
    safety_margin: float = param(0.8, gt=0, le=1, doc="the share of max_tokens passed through as it is")
    map_share: float = param(0.25, gt=0, le=1, doc="what each chunk's extract may take, a share")
    second_pass: bool = param(True, doc="reduce again while over half of max_tokens")
    concurrency: int = param(4, ge=1, doc="chunks extracted at once")
    llm: bool = param(False, doc="extract and merge with the LLM")
    map_prompt: DataPath | None = param(None, doc="a map prompt file in place of the built-in one")
    reduce_prompt: DataPath | None = param(None, doc="a reduce prompt file in place of the built-in one")
    min_coverage: float = param(llm_guard.DEFAULT_MIN_COVERAGE, ge=0, le=1,
                                doc="share of the input's key content a reply must keep")

    @property
    def threshold(self) -> int:
        return int(self.max_tokens * self.safety_margin)

    @hookimpl
    def compactor_compress(self, context: Context, run: Run) -> Context:
        estimated = context.input_tokens
        threshold = self.threshold
        chunks = list(context.chunks)
        run.note("estimated_tokens", estimated)
        run.note("threshold", threshold)
        lang = "zh" if is_chinese(c.text[:2000] for c in chunks[:5]) else "en"
        if estimated <= threshold:
            run.note("compression_decision", DIRECT)
            run.note("data_source_note", data_source_note(False, lang))
            run.note("decision_reason", f"{estimated} tokens <= {threshold} "
                                        f"({self.max_tokens} x {self.safety_margin})")
            return context.evolve(segments=segments_for(context, [Kept(c, c.start, c.end) for c in chunks]))
        run.note("compression_decision", COMPRESS)
        run.note("data_source_note", data_source_note(True, lang))
        run.note("decision_reason",
                 f"{estimated} tokens > {threshold} ({self.max_tokens} x {self.safety_margin})")
        extracts = self._map(chunks, context.query, run)
        kept = self._reduce(extracts)
        segments = self._segments(context, kept)
        # the merged result as written (gap marks and joins cost tokens too): the combined tokens
        tokens = sum(run.counter.count_many([g.text for g in segments]))
        run.note("map_chunks", len(chunks))
        run.note("tokens_after_map", tokens)
        passes = 1
        # a second pass when the merged result is still over `max_observations_tokens // 2`
        # (45000 // 2 = 22500), not half the 36000 routing threshold; never above that threshold
        # (a safety_margin under 0.5) nor above the caller's budget, which the output must fit.
        half = min(self.max_tokens // 2, threshold)
        target = min(half, context.resolved_budget() or half)
        run.note("second_pass_above", target)
        if tokens > target and self.second_pass:
            kept = _best(kept, target)
            passes = 2
            segments = self._segments(context, kept)
            by_score = sorted(kept, key=lambda s: s.score)  # drop the weakest until it truly fits
            while len(kept) > 1 and sum(run.counter.count_many([g.text for g in segments])) > target:
                kept.remove(by_score.pop(0))
                segments = self._segments(context, kept)
        run.note("passes", passes)
        if self.llm:
            # the LLM never reads what classify.injection flagged: only the clean parts of chunks
            segments = self._llm(usable(context, run)[1], context, target, run) or segments
        run.note("tokens_after_reduce", sum(run.counter.count_many([s.text for s in segments])))
        return context.evolve(segments=segments)

    @staticmethod
    def _segments(context: Context, kept: list[Sentence]) -> tuple[Segment, ...]:
        return segments_for(context, [Kept(s.chunk, s.chunk.start + s.start, s.chunk.start + s.end)
                                      for s in kept])

    def _map(self, chunks: list[Chunk], query: str | None, run: Run) -> list[list[Sentence]]:
        # `_sentences` runs on pool threads: everything it calls must share no mutable state across
        # threads (textstats.stem keeps one snowball stemmer per thread; its lru_cache is thread-safe).
        with ThreadPoolExecutor(max_workers=self.concurrency, thread_name_prefix="compactor-map") as pool:
            per_chunk = list(pool.map(_sentences, chunks))
        flat = _score([s for group in per_chunk for s in group], query, run.counter)
        out: list[list[Sentence]] = []
        i = 0
        for chunk, group in zip(chunks, per_chunk, strict=True):
            scored = flat[i:i + len(group)]
            i += len(group)
            out.append(_best(scored, max(1, int(chunk.tokens * self.map_share))) if scored else [])
        return out

    @staticmethod
    def _reduce(extracts: list[list[Sentence]]) -> list[Sentence]:
        """All extracts in reading order; a sentence repeated by overlapping windows is kept once."""
        seen: set[tuple[str, int]] = set()
        merged: list[Sentence] = []
        for group in extracts:
            for s in group:
                key = (s.chunk.source_id, s.chunk.start + s.start)
                if key not in seen:
                    seen.add(key)
                    merged.append(s)
        return sorted(merged, key=lambda s: (s.chunk.source_id, s.chunk.start + s.start))

    def _llm(self, chunks: list[Chunk], context: Context, target: int,
             run: Run) -> tuple[Segment, ...] | None:
        """LLM map over the chunks (a refused reply replaced by that chunk's rule extract), an LLM
        reduce of that mix, and a second pass when the reduced text is over `target`; None keeps
        the rule result."""
        if not chunks:
            return None
        lang = "zh" if is_chinese(c.text[:2000] for c in chunks[:5]) else "en"
        # every call's allowance is also the `max_tokens` sent on the wire: never past the model's
        # output cap, the pipeline's `llm.max_tokens` (1500 by default), which providers enforce
        cap = LLMSettings.from_mapping(run.settings.get("llm") or {}).max_tokens
        target = min(target, cap)
        per_map = min(cap, max(200, target // len(chunks)))
        query = context.query or ""
        maps = complete_guarded([Request(fill(template_for(self.map_prompt, "map", lang), query=query,
                                              budget=str(per_map), content=c.text), c.text, per_map,
                                         context.query)
                                 for c in chunks], run, min_coverage=self.min_coverage, label="map")
        refused = [i for i, m in enumerate(maps) if m is None]
        run.note("llm_map_accepted", len(chunks) - len(refused))
        run.note("llm_map_refused", refused)
        if len(refused) == len(chunks):
            run.note("llm_used", False)
            return None
        parts = [m if m is not None else rule_extract(c.text, context.query, per_map, run.counter)
                 for c, m in zip(chunks, maps, strict=True)]
        mix = "\n\n".join(p for p in parts if p.strip())
        source = "\n".join(c.text for c in chunks)
        # the reduced text must fit what the reporter may receive: the routing threshold (or the budget)
        ceiling = min(self.threshold, context.resolved_budget() or self.threshold, cap)
        reduce_template = template_for(self.reduce_prompt, "reduce", lang)
        reduced = complete_guarded([Request(fill(reduce_template, query=query, budget=str(ceiling),
                                                 content=mix), source, ceiling, context.query)],
                                   run, min_coverage=self.min_coverage, label="reduce")[0]
        if reduced is None:
            if run.counter.count(mix) > ceiling:
                run.note("llm_reduce", f"rejected; the mix is over {ceiling} tokens, rule result kept")
                run.note("llm_used", False)
                return None
            run.note("llm_reduce", "rejected; the mix of map replies and rule extracts kept")
            reduced = mix
        else:
            run.note("llm_reduce", "accepted")
        tokens = run.counter.count(reduced)
        run.note("llm_tokens_after_reduce", tokens)
        if self.second_pass and tokens > target:
            condensed = complete_guarded([Request(fill(reduce_template, query=query, budget=str(target),
                                                       content=reduced), source, target, context.query)],
                                         run, min_coverage=self.min_coverage, label="second pass")[0]
            run.note("llm_second_pass", "accepted" if condensed is not None else
                     "rejected; the reduced text kept")
            reduced = condensed if condensed is not None else reduced
        run.note("llm_used", True)
        return (Segment(id="map-reduce", text=reduced, chunk_ids=tuple(c.id for c in chunks),
                        title="Summary", metadata=frozen_mapping({"llm": True})),)
