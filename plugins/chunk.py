"""chunk.tokens, chunk.sentences, chunk.paragraphs: cut every source's text into chunks."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable

import regex

from compactor.components import Component, param
from compactor.document import Chunk, Context, Source, chunk_id
from compactor.formats.messages import message_chunks
from compactor.hookspecs import hookimpl
from compactor.run import Run
from compactor.text.language import ANY_CJK_RANGES, Lang, detect_lang, has_cjk
from compactor.text.sentences import split_sentences
from compactor.text.spans import pack_units, token_windows, unit_chunks
from compactor.text.tokens import TokenCounter

_PARAGRAPH_BREAK = regex.compile(r"\n[ \t]*\n\s*")


class _Sized(Component):
    """What every chunker declares: its stage, what it provides, `size` tokens per chunk (at least 8)."""

    stage = "chunk"
    provides = ("chunks",)
    size: int = param(512, ge=8, unit="tokens", doc="tokens per chunk")


class _Overlapping(_Sized):
    """A chunker whose chunks may repeat the end of the one before, up to `overlap` tokens."""

    overlap: int = param(0, doc="tokens repeated from the previous chunk")

    def check(self) -> list[str]:
        if 0 <= self.overlap < self.size:
            return []
        return [f"overlap must be at least 0 and smaller than the size ({self.size})"]


Cut = list[tuple[int, int, int, tuple[int, int] | None]]  # start, end, tokens, units


def source_chunks(source: Source, cut: Cut) -> list[Chunk]:
    """The chunks of one source from cuts of its text."""
    text, sid = source.text, source.id
    langs = span_langs(text, [(start, end) for start, end, _, _ in cut])
    return [Chunk(id=chunk_id(sid, index), source_id=sid, index=index, start=start, end=end,
                  text=text[start:end], tokens=tokens, lang=lang, units=units)
            for index, ((start, end, tokens, units), lang) in enumerate(zip(cut, langs, strict=True))]


def _class_ranges(body: str) -> list[tuple[int, int]]:
    """The code point ranges of a character class body made of characters and `a-b` ranges."""
    ranges, i = [], 0
    while i < len(body):
        if i + 2 < len(body) and body[i + 1] == "-":
            ranges.append((ord(body[i]), ord(body[i + 2])))
            i += 3
        else:
            ranges.append((ord(body[i]), ord(body[i])))
            i += 1
    return ranges


_ARRAY_MIN_SPANS = 32  # spans from which `span_langs` looks for CJK characters in one pass
#: `has_cjk`'s characters as sorted bounds: a code point is CJK when it sorts after an odd count.
_CJK_BOUNDS = [bound for lo, hi in sorted(_class_ranges(ANY_CJK_RANGES)) for bound in (lo, hi + 1)]


def span_langs(text: str, spans: list[tuple[int, int]]) -> list[Lang]:
    """`detect_lang` of each span of `text`. A span without a CJK character is English by
    detect_lang's rule (no CJK letters among its letters), so one array pass over the text finds
    the spans that need the call: in English text, nearly none."""
    if not has_cjk(text):
        return ["en"] * len(spans)
    if len(spans) < _ARRAY_MIN_SPANS:
        return [detect_lang(text[start:end]) for start, end in spans]
    import numpy as np

    points = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    high = np.flatnonzero(points >= _CJK_BOUNDS[0])
    cjk = high[np.searchsorted(_CJK_BOUNDS, points[high], side="right") % 2 == 1]
    bounds = np.asarray(spans, dtype=np.int64)
    holds = (np.searchsorted(cjk, bounds[:, 0]) < np.searchsorted(cjk, bounds[:, 1])).tolist()
    return [detect_lang(text[start:end]) if held else "en"
            for (start, end), held in zip(spans, holds, strict=True)]


def paragraph_cut(text: str, counter: TokenCounter, size: int, overlap: int = 0) -> Cut:
    """Whole paragraphs packed up to `size` tokens (long ones cut by token windows)."""
    return [(s, e, t, (a, b))
            for s, e, t, a, b in pack_units(text, paragraph_spans(text), counter, size, overlap)]


def _chunked(context: Context, cut: Callable[[str], Cut]) -> Context:
    chunks: list[Chunk] = []
    for source in context.sources:
        if source.text.strip():
            chunks.extend(source_chunks(source, cut(source.text)))
    return context.evolve(chunks=tuple(chunks), segments=())


class TokenChunker(_Overlapping):
    """Windows of `size` tokens with `overlap`, cut at sentence ends or whitespace when possible.

    Example: `{use: chunk.tokens, with: {size: 8000, overlap: 400}}` (the report graph's map-reduce sizes).
    """

    name = "chunk.tokens"

    overlap: int = param(64, doc="tokens repeated from the previous chunk")

    @hookimpl
    def compactor_chunk(self, context: Context, run: Run) -> Context:
        return _chunked(context, lambda text: [
            (s, e, t, None) for s, e, t in token_windows(text, run.counter, self.size, self.overlap)
        ])


class SentenceChunker(_Overlapping):
    """Whole sentences packed up to `size` tokens (Punkt for English, rules for Chinese).

    `overlap` repeats trailing sentences of the previous chunk, up to that many tokens. With
    `pack: false` every sentence is a chunk of its own (query-aware selection ranks sentences, and
    a packed chunk would carry its neighbours' score); sentences over `size` are still cut.
    """

    name = "chunk.sentences"

    size: int = param(256, ge=8, unit="tokens", doc="tokens per chunk")
    pack: bool = param(True, doc="pack sentences up to size (false: one chunk per sentence)")

    @hookimpl
    def compactor_chunk(self, context: Context, run: Run) -> Context:
        def cut(text: str) -> list[tuple[int, int, int, tuple[int, int] | None]]:
            spans = joined_headings(text, split_sentences(text))
            cut = (pack_units(text, spans, run.counter, self.size, self.overlap) if self.pack
                   else unit_chunks(text, spans, run.counter, self.size))
            return [(s, e, t, (a, b)) for s, e, t, a, b in cut]

        return _chunked(context, cut)


_HEADING_MAX = 40  # characters of a heading line
_HEADING_END = regex.compile(r"[.!?;:。！？；：…]\W*$")
_BLANKS_BEFORE = regex.compile(r"[ \t]*", regex.REVERSE)
_BLANK_LINE_PAIR = regex.compile(r"\n[ \t]*(?=\n)")  # a newline, blanks, then another newline
_BREAK_LOOKBACK = 8  # characters before a sentence searched for a paragraph break


def joined_headings(text: str, spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Sentence spans (in text order) with a heading line joined to the sentence after it: a short
    first line of a paragraph without end punctuation, followed by a single newline (a title over
    its text). Punkt already keeps such a line with its sentence in English; Chinese rules end a
    sentence at every newline, which left the title alone (a chunk that scores on its name but says
    nothing) and its paragraph's first sentence without the subject it is about.

    Only sentences starting just after a paragraph break (or the text's leading whitespace) can be
    headings, so one pass over the blank lines finds the few worth checking."""
    if len(spans) < 2:
        return list(spans)
    first_word = len(text) - len(text.lstrip())
    heads = [k for k in _after_breaks(text, spans, first_word)
             if _is_heading(text, spans[k][0], spans[k][1], first_word)]
    out: list[tuple[int, int]] = []
    done = 0  # spans before this index are in `out`
    for k in heads:
        if k < done:  # the sentence under a heading just joined: never a heading itself
            continue
        out.extend(spans[done:k])
        out.append((spans[k][0], spans[k + 1][1]))
        done = k + 2
    out.extend(spans[done:])
    return out


def _after_breaks(text: str, spans: list[tuple[int, int]], first_word: int) -> list[int]:
    """Indexes (sorted, never the last) of the spans whose start, blanks before it set aside, is at
    most `first_word` or has a blank line in the `_BREAK_LOOKBACK` characters before it."""
    starts = [s for s, _ in spans]
    windows = [(0, first_word)]  # where the start (before its blanks) may be
    windows += [(m.end() + 1, m.start() + _BREAK_LOOKBACK) for m in _BLANK_LINE_PAIR.finditer(text)]
    found: set[int] = set()
    last = len(spans) - 1
    for lo, hi in windows:
        k = bisect_left(starts, lo)
        while k < last and _blank_start(text, starts[k]) <= hi:
            found.add(k)
            k += 1
    return sorted(found)


def _blank_start(text: str, start: int) -> int:
    """Where the run of spaces and tabs ending at `start` begins."""
    return _BLANKS_BEFORE.match(text, 0, start).start()  # type: ignore[union-attr]


def _is_heading(text: str, start: int, end: int, first_word: int) -> bool:
    """Whether `text[start:end]` is a heading line: one short line ending in a newline, first in
    its paragraph (or in the text), without end punctuation."""
    line = text[start:end]
    body = line.strip()
    if not body or len(body) > _HEADING_MAX or line.count("\n") != 1:
        return False
    if not line.rstrip(" \t").endswith("\n") or _HEADING_END.search(body):
        return False
    begin = _blank_start(text, start)
    return begin <= first_word or _PARAGRAPH_BREAK.search(
        text, max(0, begin - _BREAK_LOOKBACK), begin) is not None


def paragraph_spans(text: str) -> list[tuple[int, int]]:
    """Spans that tile the text, one per paragraph (blank lines end a paragraph)."""
    spans, start = [], 0
    for match in _PARAGRAPH_BREAK.finditer(text):
        if match.end() < len(text):
            spans.append((start, match.end()))
            start = match.end()
    spans.append((start, len(text)))
    return spans


class ParagraphChunker(_Overlapping):
    """Whole paragraphs packed up to `size` tokens; long paragraphs are cut by token windows."""

    name = "chunk.paragraphs"

    @hookimpl
    def compactor_chunk(self, context: Context, run: Run) -> Context:
        return _chunked(context, lambda text: paragraph_cut(text, run.counter, self.size, self.overlap))


class MessageChunker(_Sized):
    """One chunk per conversation message, so chunk `i` of a history is message `i` and the store can
    give any message back by its id; its token count is the message's cost in a chat request. Other
    sources are packed by paragraphs up to `size` tokens."""

    name = "chunk.messages"

    @hookimpl
    def compactor_chunk(self, context: Context, run: Run) -> Context:
        chunks: list[Chunk] = []
        sources = []
        for source in context.sources:
            spans = source.unit_spans if source.kind == "conversation" else None
            if spans and len(spans) == len(source.messages):
                if source.text != source.original:  # messages are kept verbatim, never cleaned
                    run.warn(f"{source.uri or source.id}: a clean step changed the conversation's text; "
                             "its messages are chunked from the original")
                    source = source.with_text(source.original)
                sources.append(source)
                chunks.extend(message_chunks(source, run.counter))
                continue
            sources.append(source)
            if source.text.strip():
                chunks.extend(source_chunks(source, paragraph_cut(source.text, run.counter, self.size)))
        return context.evolve(sources=tuple(sources), chunks=tuple(chunks), segments=())


class SegmentChunker(_Sized):
    """One chunk per transcript segment (chunk `i` is the source's segment `i`); other sources are
    packed by paragraphs up to `size` tokens."""

    name = "chunk.segments"

    @hookimpl
    def compactor_chunk(self, context: Context, run: Run) -> Context:
        chunks: list[Chunk] = []
        for source in context.sources:
            spans = source.unit_spans if source.kind == "transcript" else None
            if spans and len(spans) == len(source.segments) and source.text == source.original:
                counts = run.counter.count_many([source.text[s:e] for s, e in spans])
                chunks.extend(source_chunks(source, [(s, e, t, (i, i + 1)) for i, ((s, e), t)
                                                     in enumerate(zip(spans, counts, strict=True))]))
            elif source.text.strip():
                chunks.extend(source_chunks(source, paragraph_cut(source.text, run.counter, self.size)))
        return context.evolve(chunks=tuple(chunks), segments=())
