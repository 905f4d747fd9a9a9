"""chunk.segments and organize.hierarchical: retrieved transcript segments, organised per file (seed 002).

`organize.hierarchical` groups each file's segments into blocks of consecutive indices and writes the
seed's labelled layout (file start/end markers, block numbers with their index range, `[start-end]`
timestamps, a note that blocks are not continuous in time), after a file overview, in English or
Chinese. Over the length limit (characters or tokens, `unit:`), it keeps the segments that matter for
the question by rules, file by file, each with its timestamps, and lists what it left out; an
optional LLM pass (the pipeline's `llm:`, temperature 0.3 and max_tokens 1500 by default) may write a
per-file summary instead, used only if it fits and invents nothing (timestamps included).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from compactor.components import Component, DataPath
from compactor.document import Context, Segment, Source, TranscriptSegment, chunk_id, frozen_mapping
from compactor.errors import InputError
from compactor.formats.transcripts import overview, spoken
from compactor.hookspecs import hookimpl
from compactor.llm.guard import Request, complete_guarded
from compactor.plugins.compress import facts as fx
from compactor.plugins.llm import fill, template_for
from compactor.plugins.score import bm25_scores
from compactor.run import Run
from compactor.state import TranscriptOptions
from compactor.text.language import is_chinese
from compactor.text.relevance import index_terms
from compactor.text.sentences import split_sentences
from compactor.text.terms import is_han

Unit = Literal["chars", "tokens"]
#: Score a segment takes from the relevant one right before it (an answer follows its question),
#: half that from two before, and from the one right after it.
AFTER, BEFORE = 0.5, 0.1


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
           "kept": "File {f} ({k} of {n} segments kept):",
           "gap": "…", "left": "Left out: {files}."},
    "zh": {"start": "[文件开始: {f}]", "end": "[文件结束: {f}]", "block": "[块开始: {n} - 索引: {a}-{b}]",
           "block_end": "[块结束: {n}]", "note": "请注意：以上内容来自同一视频的不同块，不保证时间连续性。",
           "kept": "文件 {f}（{n} 个片段中保留 {k} 个）：", "gap": "……",
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
    """One file in the seed's labelled layout."""
    labels = LABELS[lang]
    out = [labels["start"].format(f=file)]
    runs = blocks(lines)
    for n, run in enumerate(runs, 1):
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
    the result is over `max_length` (`unit`: chars, as the seed counts, or tokens).

    Run options in `context.state` (`TranscriptOptions`) (max_length, unit, llm) override the
    parameters; a token budget from the pipeline or `--budget` applies as well.
    """

    name = "organize.hierarchical"
    stage = "compress"
    requires = ("chunks",)
    provides = ("segments",)

    def __init__(self, *, max_length: int | None = 2000, unit: Unit = "chars", language: Literal[
            "auto", "en", "zh"] = "auto", llm: bool = False, prompt: DataPath | None = None,
                 max_input_tokens: int = 12000) -> None:
        self.max_length = max_length
        self.unit = unit
        self.language = language
        self.llm = llm
        self.prompt = prompt
        self.max_input_tokens = max_input_tokens

    @hookimpl
    def compactor_compress(self, context: Context, run: Run) -> Context:
        options = dict(context.state.get(TranscriptOptions, TranscriptOptions()).values)
        unit: Unit = options.get("unit") or self.unit
        max_length = options.get("max_length", self.max_length)
        budget = context.resolved_budget()
        files = [s for s in context.sources if s.kind == "transcript" and s.segments]
        if not files:
            kinds = sorted({s.kind.replace("_", " ") for s in context.sources})
            raise InputError("organize.hierarchical needs transcript segments (SRT or VTT subtitles, "
                             f"or JSON segments); the input has none (it is {' and '.join(kinds)})")
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
        head = overview(files, lang == "zh")
        organised = [head] + [layout(s.uri or s.id, lines[s.id], lang) for s in files]
        if fits("\n\n".join(organised)):
            run.note("mode", "organised")
            return context.evolve(segments=self._segments(files, organised, lines, lines))
        kept = self._select(files, lines, context.query, fits, measure, limit, lang, head, run)
        parts = compressed_parts(files, lines, kept, head, lang)
        while not fits("\n\n".join(parts)) and any(kept.values()):  # the left-out line pushed it over
            weakest = min((line for s in files for line in kept[s.id]), key=lambda line: line.score)
            for s in files:
                kept[s.id] = [line for line in kept[s.id] if line is not weakest]
            parts = compressed_parts(files, lines, kept, head, lang)
        if not fits("\n\n".join(parts)):  # a limit smaller than the overview: the overview, cut
            parts = [cut_to(head, fits)]
            kept = {s.id: [] for s in files}
        mode = "rules"
        if bool(options.get("llm", self.llm)):
            limit_text = f"{max_length} {'characters' if unit == 'chars' else 'tokens'}"
            reply = self._llm(context.query or "", head, "\n\n".join(organised), fits, limit_text, lang, run)
            if reply is not None:
                parts, mode = [head, reply], "llm"
        run.note("mode", mode)
        run.note("kept_segments", {s.uri or s.id: len(kept[s.id]) for s in files})
        return context.evolve(segments=self._segments(files, parts, kept, lines, llm=mode == "llm"))

    def _select(self, files: Sequence[Source], lines: dict[str, list[_Line]], query: str | None,
                fits: Callable[[str], bool], measure: Callable[[str], int], limit: int, lang: str, head: str,
                run: Run) -> dict[str, list[_Line]]:
        """Best segments first (question relevance, information, neighbours), every file's best one
        before any file's second, while the compressed layout fits."""
        everything = [line for s in files for line in lines[s.id]]
        docs = [list(index_terms(line.segment.text)) for line in everything]
        query_terms = match_terms(query or "")
        raw, _ = bm25_scores(docs, query_terms, 1.2, 0.75) if query_terms else ([0.0] * len(docs), {})
        top = max(raw, default=0.0) or 1.0
        for line, doc, value in zip(everything, docs, raw, strict=True):
            line.score = value / top + 0.2 * fx.information(line.segment.text) + min(len(set(doc)), 20) / 400
        for s in files:  # the segments right after a relevant one (a question's answer) and before it
            file_lines = lines[s.id]
            base = [line.score for line in file_lines]
            for n, line in enumerate(file_lines):
                pulls = ((n - 1, AFTER), (n - 2, AFTER / 2), (n + 1, BEFORE))
                near = [weight * base[m] for m, weight in pulls if 0 <= m < len(file_lines)
                        and abs(file_lines[m].segment.index - line.segment.index) == abs(m - n)]
                line.score += max(near, default=0.0)
        order: list[tuple[int, float, str, int]] = []
        for s in files:
            ranked = sorted(range(len(lines[s.id])), key=lambda n: -lines[s.id][n].score)
            order.extend((rank, -lines[s.id][n].score, s.id, n) for rank, n in enumerate(ranked))
        order.sort(key=lambda item: (item[0] > 0, item[1]))  # each file's best first, then by score

        def render(picked: dict[str, set[int]]) -> str:
            chosen_lines = {s.id: [lines[s.id][n] for n in sorted(picked[s.id])] for s in files}
            return "\n\n".join(compressed_parts(files, lines, chosen_lines, head, lang))

        # a long segment competes with its most relevant sentences (each kept verbatim)
        cap = max(limit // 2, 24)
        for line in everything:
            if measure(line.text) > cap:
                frame = measure(line.text) - measure(line.segment.text)  # timestamps and speaker
                line.excerpt = excerpt(line.segment.text, query_terms, max(8, cap - frame), measure)
        # estimate with per-line costs, then verify the rendered text once and trim the weakest
        costs = {s.id: [measure(line.text) + 1 for line in lines[s.id]] for s in files}
        headers = {s.id: measure(kept_layout(s.uri or s.id, [], len(lines[s.id]), lang)) + 4 for s in files}
        used = measure(head)
        chosen: dict[str, set[int]] = {s.id: set() for s in files}
        for _, _, sid, n in order:
            extra = costs[sid][n] + (0 if chosen[sid] else headers[sid]) + 2  # + a possible gap mark
            if used + extra <= limit:
                chosen[sid].add(n)
                used += extra
        while any(chosen.values()) and not fits(render(chosen)):
            sid, n = min(((sid, n) for sid, picked in chosen.items() for n in picked),
                         key=lambda pair: lines[pair[0]][pair[1]].score)
            chosen[sid].discard(n)
        run.note("selected", sum(len(v) for v in chosen.values()))
        return {s.id: [lines[s.id][n] for n in sorted(chosen[s.id])] for s in files}

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
    def _segments(files: Sequence[Source], parts: list[str], kept: dict[str, list[_Line]],
                  lines: dict[str, list[_Line]], llm: bool = False) -> tuple[Segment, ...]:
        segments = [Segment(id="overview", text=parts[0], chunk_ids=(), title="Overview")]
        if llm:
            ids = tuple(line.chunk for s in files for line in lines[s.id])
            segments.append(Segment(id="llm", text=parts[1], chunk_ids=ids, title="Summary",
                                    metadata=frozen_mapping({"llm": True})))
            return tuple(segments)
        texts = iter(parts[1:])
        for s in files:
            if kept[s.id]:
                ids = tuple(x.chunk for x in kept[s.id])
                segments.append(Segment(id=s.id, text=next(texts), chunk_ids=ids, title=s.uri))
        segments.extend(Segment(id="left-out", text=t, chunk_ids=()) for t in texts)
        return tuple(segments)


def match_terms(query: str) -> list[str]:
    """The question's index terms; for Chinese, its character bigrams without the single characters
    (a single common character matches nearly every line)."""
    found = list(index_terms(query))
    han_bigrams = [t for t in found if len(t) == 2 and all(is_han(ch) for ch in t)]
    if not han_bigrams:
        return found
    return [t for t in found if not (len(t) == 1 and is_han(t))]


def compressed_parts(files: Sequence[Source], lines: dict[str, list[_Line]], kept: dict[str, list[_Line]],
                     head: str, lang: str) -> list[str]:
    """The compressed output's parts: overview, each file's kept lines, the files left out."""
    parts = [head] + [kept_layout(s.uri or s.id, kept[s.id], len(lines[s.id]), lang) for s in files
                      if kept[s.id]]
    left = [s.uri or s.id for s in files if not kept[s.id]]
    if left:
        parts.append(LABELS[lang]["left"].format(files=", ".join(left)))
    return parts


def cut_to(text: str, fits: Callable[[str], bool]) -> str:
    """The start of `text` that fits, ending in an ellipsis."""
    while len(text) > 1 and not fits(text + "…"):
        text = text[: int(len(text) * 0.9)]
    return text + "…" if fits(text + "…") else ""


def excerpt(text: str, query_terms: Sequence[str], room: int, measure: Callable[[str], int]) -> str:
    """The sentences of a long segment that best match the question (information breaking ties),
    in their order, joined by an ellipsis, within `room`."""
    spans = split_sentences(text)
    sentences = [" ".join(text[a:b].split()) for a, b in spans]
    sentences = [x for x in sentences if x]
    scores, _ = bm25_scores([list(index_terms(x)) for x in sentences], query_terms, 1.2, 0.75)
    ranked = sorted(range(len(sentences)), key=lambda n: (-scores[n], -fx.information(sentences[n]), n))
    chosen: list[int] = []
    for n in ranked:
        trial = " … ".join(sentences[m] for m in sorted([*chosen, n]))
        if measure(trial) <= room:
            chosen.append(n)
    if not chosen:  # even the best sentence is too long: its start
        best = sentences[ranked[0]] if ranked else text
        while len(best) > 1 and measure(best + " …") > room:
            best = best[: int(len(best) * 0.8)]
        return best + " …"
    return " … ".join(sentences[m] for m in sorted(chosen))


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
