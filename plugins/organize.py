"""chunk.segments and organize.hierarchical: retrieved transcript segments, organised per file.

`organize.hierarchical` groups each file's segments into blocks of consecutive indices and writes the
labelled layout (file start/end markers, block numbers with their index range, `[start-end]`
timestamps, a note that blocks are not continuous in time), after a file overview, in English or
Chinese. Over the length limit (characters or tokens, `unit:`), it keeps the segments that matter for
the question by rules, file by file, each with its timestamps, and lists what it left out; an
optional LLM pass (the pipeline's `llm:`, temperature 0.3 and max_tokens 1500 by default) may write a
per-file summary instead, used only if it fits and invents nothing (timestamps included).
"""

from __future__ import annotations

import heapq
import itertools
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from compactor.components import Component, DataPath, param
from compactor.document import Context, Segment, Source, TranscriptSegment, chunk_id, frozen_mapping
from compactor.errors import InputError
from compactor.formats.transcripts import overview, spoken
from compactor.hookspecs import hookimpl
from compactor.llm.guard import Request, complete_guarded
from compactor.llm.templates import fill, template_for
from compactor.run import Run
from compactor.state import TranscriptOptions
from compactor.text import utterances as ut
from compactor.text.language import is_chinese
from compactor.text.relevance import index_terms
from compactor.text.sentences import split_sentences

Unit = Literal["chars", "tokens"]
OnFailure = Literal["overview", "rules"]


@dataclass(slots=True)
class _Line:
    """One segment of one file, ready to lay out."""

    position: int          # place in the source (chunk index)
    segment: TranscriptSegment
    chunk: str
    score: float = 0.0
    #: The segment's most relevant sentences, when the whole segment is too long to keep.
    excerpt: str | None = None

    @property
    def text(self) -> str:
        s = self.segment
        who = f"{s.speaker}: " if s.speaker else ""
        return f"[{s.start:.2f}-{s.end:.2f}] {who}{self.excerpt or ' '.join(s.text.split())}"


LABELS = {
    "en": {"start": "[File start: {f}]", "end": "[File end: {f}]", "block": "[Block {n} - indices {a}-{b}]",
           "block_end": "[Block end: {n}]",
           "note": "Note: the blocks above come from different parts of the same file; they are not "
                   "continuous in time.",
           "kept": "File {f}:",
           "gap": "…", "left": "Left out: {files}."},
    "zh": {"start": "[文件开始: {f}]", "end": "[文件结束: {f}]", "block": "[块开始: {n} - 索引: {a}-{b}]",
           "block_end": "[块结束: {n}]", "note": "请注意：以上内容来自同一视频的不同块，不保证时间连续性。",
           "kept": "文件 {f}:", "gap": "……",
           "left": "未保留：{files}。"},
}


def blocks(lines: Sequence[_Line]) -> list[list[_Line]]:
    """Runs of consecutive segment indices (the input is sorted by index; a repeated index with other
    text stays in its run)."""
    runs: list[list[_Line]] = []
    for line in lines:
        if runs and line.segment.index - runs[-1][-1].segment.index in (0, 1):
            runs[-1].append(line)
        else:
            runs.append([line])
    return runs


def layout(file: str, lines: Sequence[_Line], lang: str) -> str:
    """One file in the labelled layout."""
    labels = LABELS[lang]
    out = [labels["start"].format(f=file)]
    runs = blocks(lines)
    for n, run in enumerate(runs, 1):
        if n > 1:
            out.append("")  # a blank line between blocks
        out.append("  " + labels["block"].format(n=n, a=run[0].segment.index, b=run[-1].segment.index))
        out.extend(f"  {line.text}" for line in run)
        out.append("  " + labels["block_end"].format(n=n))
    out.append(labels["end"].format(f=file))
    if len(runs) > 1:
        out.append("")
        out.append(labels["note"])
    return "\n".join(out)


def kept_layout(file: str, kept: Sequence[_Line], total: int, lang: str) -> str:
    """One file after compression: its kept segments with timestamps, gaps marked."""
    labels = LABELS[lang]
    out = [labels["kept"].format(f=file, k=len(kept), n=total)]
    for n, run in enumerate(blocks(kept)):
        if n:
            out.append(labels["gap"])
        out.extend(line.text for line in run)
    return "\n".join(out)


class HierarchicalOrganizer(Component):
    """Organises retrieved transcript segments per file and block; compresses by the question when
    the result is over `max_length` (`unit`: chars by default, or tokens).

    Run options in `context.state` (`TranscriptOptions`) (max_length, unit, llm) override the
    parameters; a token budget from the pipeline or `--budget` applies as well.
    """

    name = "organize.hierarchical"
    stage = "compress"
    requires = ("chunks",)
    provides = ("segments",)

    max_length: int | None = param(2000, doc="the result's length at most, in `unit`s")
    unit: Unit = param("chars", doc="what max_length counts")
    language: Literal["auto", "en", "zh"] = param("auto", doc="the labels' language")
    llm: bool = param(False, doc="rewrite the selection with the LLM")
    prompt: DataPath | None = param(None, doc="a prompt file in place of the built-in one")
    max_input_tokens: int = param(12000, doc="tokens the LLM reads at most")
    overview: bool = param(False, doc="put the file overview line on top")
    on_llm_failure: OnFailure = param("rules", doc="what a failed LLM pass gives")

    @hookimpl
    def compactor_compress(self, context: Context, run: Run) -> Context:
        # run options (`TranscriptOptions`) stand in for parameters, checked as a pipeline file's are
        return self.overridden(context.state.get(TranscriptOptions, TranscriptOptions()).values)._organise(
            context, run)

    def _organise(self, context: Context, run: Run) -> Context:
        unit, max_length, on_failure = self.unit, self.max_length, self.on_llm_failure
        budget = context.resolved_budget()
        files = [s for s in context.sources if s.kind == "transcript" and s.segments]
        if not files:
            kinds = sorted({s.kind.replace("_", " ") for s in context.sources})
            names = ", ".join(dict.fromkeys(s.uri or s.id for s in context.sources)) or "the input"
            raise InputError(f"{names}: organize.hierarchical needs transcript segments (SRT or VTT "
                             f"subtitles, or JSON segments); it has none (it is {' and '.join(kinds)})")
        lang = self.language if self.language != "auto" else ("zh" if is_chinese(spoken(files)) else "en")

        def measure(text: str) -> int:
            return len(text) if unit == "chars" else run.counter.count(text)

        def fits(text: str) -> bool:
            ok = max_length is None or measure(text) <= max_length
            return ok and (budget is None or run.counter.count(text) <= budget)

        # the tighter of the two limits, in the unit that selection counts
        limit = max_length if max_length is not None else 10**9
        if budget is not None:
            limit = min(limit, budget * (4 if unit == "chars" else 1))

        lines = {s.id: _lines(s, context, run) for s in files}
        summary = overview(files, lang == "zh")
        head = summary if self.overview else None
        organised = [layout(s.uri or s.id, lines[s.id], lang) for s in files]
        if fits("\n\n".join(_with(head, organised))):
            run.note("mode", "organised")
            return context.evolve(segments=self._segments(files, head, organised, lines))
        kept = self._select(files, lines, context.query, fits, measure, limit, lang, head, run)
        parts = compressed_parts(files, lines, kept, head, lang)
        while not fits("\n\n".join(parts)) and any(kept.values()):  # the left-out line pushed it over
            weakest = min((line for s in files for line in kept[s.id]), key=lambda line: line.score)
            for s in files:
                kept[s.id] = [line for line in kept[s.id] if line is not weakest]
            parts = compressed_parts(files, lines, kept, head, lang)
        if not fits("\n\n".join(parts)):  # a limit smaller than the overview: the overview, cut
            parts = [cut_to(summary, fits)]
            kept = {s.id: [] for s in files}
            head = None
        mode = "rules"
        if self.llm:
            limit_text = f"{max_length} {'characters' if unit == 'chars' else 'tokens'}"
            reply = self._llm(context.query or "", summary, "\n\n".join(organised),
                              lambda text: fits("\n\n".join(_with(head, [text]))), limit_text, lang, run)
            if reply is not None:
                return self._done(context, run, files, head, [reply], {s.id: [] for s in files}, lines,
                                  "llm")
            if on_failure == "overview":
                shown = summary if fits(summary) else cut_to(summary, fits)
                return self._done(context, run, files, None, [shown],
                                  {s.id: [] for s in files}, lines, "overview")
        body = parts[1:] if head is not None else parts
        return self._done(context, run, files, head, body, kept, lines, mode)

    def _done(self, context: Context, run: Run, files: Sequence[Source], head: str | None, body: list[str],
              kept: dict[str, list[_Line]], lines: dict[str, list[_Line]], mode: str) -> Context:
        run.note("mode", mode)
        run.note("kept_segments", {s.uri or s.id: len(kept[s.id]) for s in files})
        if mode == "overview":
            return context.evolve(segments=(Segment(id="overview", text=body[0], chunk_ids=(),
                                                    title="Overview"),))
        return context.evolve(segments=self._segments(files, head, body, kept if mode != "llm" else lines,
                                                      llm=mode == "llm"))

    def _select(self, files: Sequence[Source], lines: dict[str, list[_Line]], query: str | None,
                fits: Callable[[str], bool], measure: Callable[[str], int], limit: int, lang: str,
                head: str | None, run: Run) -> dict[str, list[_Line]]:
        """Sentences of the segments, most worth their cost first: relevance to the question (the
        segment's own, and spread from matches nearby: an answer sits in a stretch of talk) times the
        content words they add to what is already kept (each word weighed by how much it is said near
        the matches); filler is never kept. Every file's best sentence comes before any file's second."""
        everything = [line for s in files for line in lines[s.id]]
        own, index, terms = ut.relevance([line.segment.text for line in everything], query or "")
        near: list[float] = []
        for s in files:  # relevance spreads within a file only
            near.extend(ut.spread(own[len(near):len(near) + len(lines[s.id])], ut.SPREAD))
        whole = sum(index.idf(t) for t in terms) or 1.0
        cap = max(limit // 2, 24)
        pieces = {id(line): _sentences(line.segment.text, cap, measure) for line in everything}
        units: list[_Unit] = []
        for line, mine, around in zip(everything, own, near, strict=True):
            line.score = WEIGHTS.own * mine + WEIGHTS.around * around + WEIGHTS.floor
            for k, sentence in enumerate(pieces[id(line)]):
                words = ut.content_terms(sentence)
                if len(words) < ut.MIN_CONTENT:
                    continue
                have = set(index_terms(sentence))
                match = sum(index.idf(t) for t in terms if t in have) / whole
                units.append(_Unit(line, k, sentence, line.score + WEIGHTS.sentence * match, words,
                                   measure(sentence) + 1))
        frames = {id(line): measure(line.text) - measure(" ".join(line.segment.text.split())) + 1
                  for line in everything}
        headers = {s.id: measure(kept_layout(s.uri or s.id, [], len(lines[s.id]), lang)) + 4 for s in files}
        file_of = {id(line): s.id for s in files for line in lines[s.id]}
        used = measure(head) if head else 0
        chosen: dict[int, list[_Unit]] = {}
        covered: set[str] = set()
        # a term is worth what the talk around the question makes of it: how often it is said where
        # the question's matches are, against how often it is said anywhere
        regional: dict[str, float] = {}
        said: dict[str, int] = {}
        for line, around in zip(everything, near, strict=True):
            for term in ut.content_terms(line.segment.text):
                regional[term] = regional.get(term, 0.0) + around
                said[term] = said.get(term, 0) + 1
        worth = {t: regional[t] / said[t] ** WEIGHTS.topic_damp + WEIGHTS.topic_floor for t in said}

        def extra(unit: _Unit) -> int:
            line = unit.line
            fresh = id(line) not in chosen
            first_of_file = fresh and not any(file_of[key] == file_of[id(line)] for key in chosen)
            return unit.cost + (frames[id(line)] if fresh else 2) + (headers[file_of[id(line)]]
                                                                      if first_of_file else 0)

        def take(unit: _Unit) -> None:
            nonlocal used
            used += extra(unit)
            chosen.setdefault(id(unit.line), []).append(unit)
            covered.update(unit.words)

        def gain(unit: _Unit) -> float:
            fresh = sum(worth.get(t, WEIGHTS.topic_floor) for t in unit.words - covered)
            opening = 0 if id(unit.line) in chosen else WEIGHTS.opening * frames[id(unit.line)]
            return unit.score * fresh / (unit.cost + opening) ** WEIGHTS.cost_power

        for s in files:  # each file's best sentence first
            mine_units = [u for u in units if file_of[id(u.line)] == s.id]
            best = max(mine_units, key=gain, default=None)
            if best is not None and used + extra(best) <= limit:
                take(best)
        taken = {id(u) for group in chosen.values() for u in group}
        heap = [(-gain(u), n) for n, u in enumerate(units) if id(u) not in taken]
        heapq.heapify(heap)
        while heap:  # lazy greedy: a unit's gain only falls as more is covered
            _, n = heapq.heappop(heap)
            unit = units[n]
            value = gain(unit)
            if heap and value < -heap[0][0] - 1e-12:
                heapq.heappush(heap, (-value, n))
                continue
            if value > 0 and used + extra(unit) <= limit:
                take(unit)

        def kept() -> dict[str, list[_Line]]:
            for line in everything:
                group = sorted(chosen.get(id(line), []), key=lambda u: u.position)
                line.excerpt = _joined(group, pieces[id(line)])
            return {s.id: [line for line in lines[s.id] if id(line) in chosen] for s in files}

        def render() -> str:
            return "\n\n".join(compressed_parts(files, lines, kept(), head, lang))

        def drop(unit: _Unit) -> None:
            chosen[id(unit.line)].remove(unit)
            if not chosen[id(unit.line)]:
                del chosen[id(unit.line)]

        while chosen and not fits(render()):  # the estimate was short: drop the weakest sentence
            drop(min((u for group in chosen.values() for u in group), key=lambda u: u.score))

        # the estimate errs high: fill what is left with the best sentences that still fit, checked
        # on the rendered text (a bounded number of tries)
        slack = limit - measure(render())
        taken = {id(u) for group in chosen.values() for u in group}
        spare = sorted((u for u in units if id(u) not in taken and u.cost <= slack), key=gain, reverse=True)
        for unit in spare[:REFILL_TRIES]:
            if gain(unit) <= 0 or extra(unit) > slack + 2:
                continue
            chosen.setdefault(id(unit.line), []).append(unit)
            text = render()
            if fits(text):
                covered.update(unit.words)
                slack = limit - measure(text)
            else:
                drop(unit)
        result = kept()
        run.note("selected", sum(len(v) for v in result.values()))
        return result

    def _llm(self, question: str, head: str, organised: str, fits: Callable[[str], bool], limit: str,
             lang: str, run: Run) -> str | None:
        tokens = run.counter.encode(organised)
        if len(tokens) > self.max_input_tokens:
            cut = tokens[: self.max_input_tokens]
            organised = run.counter.encoding.decode_bytes(cut).decode("utf-8", "ignore")
        prompt = fill(template_for(self.prompt, "transcripts", lang), query=question, budget=limit,
                      content=f"{head}\n\n{organised}")
        return complete_guarded([Request(prompt, organised, query=question)], run, accept=lambda _, reply: (
            [] if fits(f"{head}\n\n{reply}") else ["the summary is over the length limit"]))[0]

    @staticmethod
    def _segments(files: Sequence[Source], head: str | None, body: list[str], kept: dict[str, list[_Line]],
                  llm: bool = False) -> tuple[Segment, ...]:
        segments = [Segment(id="overview", text=head, chunk_ids=(), title="Overview")] if head else []
        if llm:
            ids = tuple(line.chunk for s in files for line in kept[s.id])
            segments.append(Segment(id="llm", text=body[0], chunk_ids=ids, title="Summary",
                                    metadata=frozen_mapping({"llm": True})))
            return tuple(segments)
        texts = iter(body)
        for s in files:
            if kept[s.id]:
                ids = tuple(x.chunk for x in kept[s.id])
                segments.append(Segment(id=s.id, text=next(texts), chunk_ids=ids, title=s.uri))
        segments.extend(Segment(id="left-out", text=t, chunk_ids=()) for t in texts)
        return tuple(segments)


def _with(head: str | None, parts: list[str]) -> list[str]:
    return [head, *parts] if head is not None else parts


def compressed_parts(files: Sequence[Source], lines: dict[str, list[_Line]], kept: dict[str, list[_Line]],
                     head: str | None, lang: str) -> list[str]:
    """The compressed output's parts: the overview (if shown), each file's kept lines, the files left
    out."""
    parts = _with(head, [kept_layout(s.uri or s.id, kept[s.id], len(lines[s.id]), lang) for s in files
                            if kept[s.id]])
    left = [s.uri or s.id for s in files if not kept[s.id]]
    if left:
        parts.append(LABELS[lang]["left"].format(files=", ".join(left)))
    return parts


def cut_to(text: str, fits: Callable[[str], bool]) -> str:
    """The start of `text` that fits, ending in an ellipsis."""
    while len(text) > 1 and not fits(text + "…"):
        text = text[: int(len(text) * 0.9)]
    return text + "…" if fits(text + "…") else ""


@dataclass(frozen=True, slots=True)
class _Weights:
    """How a sentence's worth is made: the segment's own relevance, the relevance spread from
    matches nearby, a floor so that content away from any match still counts, the share of the
    question's weight the sentence itself matches, and how strongly cost divides the worth (below 1:
    a longer sentence that adds more content words is not penalised in full). A content word counts
    by how often it is said near the question's matches over the square root (`topic_damp`) of how
    often it is said at all: the words of the stretch that answers, not the meeting's stock phrases.
    A sentence of a segment not yet kept also pays a share (`opening`) of the segment's timestamp
    and speaker frame, so a few fuller segments beat many scattered fragments.
    Tuned on one half of the dev meetings (QMSum, VCSum) and checked on the other."""

    own: float = 1.0
    around: float = 2.0
    floor: float = 0.2
    sentence: float = 0.5
    cost_power: float = 0.85
    topic_damp: float = 0.5
    topic_floor: float = 0.05
    opening: float = 0.25


WEIGHTS = _Weights()
#: Sentences tried, each on the rendered text, to fill the room the cost estimate left.
REFILL_TRIES = 24


@dataclass(slots=True)
class _Unit:
    """One sentence of one segment, a candidate for the compressed output."""

    line: _Line
    position: int
    text: str
    score: float
    words: frozenset[str]
    cost: int


_CLAUSE = re.compile(r"(?<=[,;，；、])\s*")


def _sentences(text: str, cap: int, measure: Callable[[str], int]) -> list[str]:
    """A segment's sentences (whitespace collapsed); one over `cap` is cut at its clauses, and a
    clause still over `cap` is left out (it could never be kept)."""
    out: list[str] = []
    for a, b in split_sentences(text) or [(0, len(text))]:
        sentence = " ".join(text[a:b].split())
        if not sentence:
            continue
        if measure(sentence) <= cap:
            out.append(sentence)
            continue
        clauses = (" ".join(c.split()) for c in _CLAUSE.split(sentence))
        out.extend(c for c in clauses if c and measure(c) <= cap)
    return out


def _joined(units: Sequence[_Unit], sentences: Sequence[str]) -> str | None:
    """The kept sentences of a segment in order, a gap marked by an ellipsis; None when all are kept
    (the segment is shown whole)."""
    if not units:
        return None
    if len(units) == len(sentences):
        return None
    out = units[0].text
    for before, unit in itertools.pairwise(units):
        out += (" " if unit.position == before.position + 1 else " … ") + unit.text
    return out


def _lines(source: Source, context: Context, run: Run) -> list[_Line]:
    """A file's segments sorted by index (then start), one per index; repeated indices are noted."""
    ids = {c.units[0]: c.id for c in context.chunks if c.source_id == source.id and c.units
           and c.units[1] == c.units[0] + 1}
    lines = [_Line(n, seg, ids.get(n, chunk_id(source.id, n))) for n, seg in enumerate(source.segments)]
    lines.sort(key=lambda line: (line.segment.index, line.segment.start, line.position))
    unique: list[_Line] = []
    for line in lines:  # the same segment retrieved twice is shown once
        previous = unique[-1].segment if unique else None
        if previous is not None and (previous.index, previous.text) == (line.segment.index,
                                                                         line.segment.text):
            run.warn(f"{source.uri or source.id}: segment {line.segment.index} retrieved twice; shown once")
            continue
        unique.append(line)
    return unique
