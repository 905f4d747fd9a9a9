"""Provenance: where every kept character came from in the caller's input.

Clean steps rewrite a source's working text (line ends, whitespace, zero-width characters, dropped
duplicate paragraphs). Each rewrite records its edits, and `OffsetMap` composes them, so a span of
the working text maps back to the exact slice of the input it came from: `base[start:end]`.

A map is a list of pieces that tile the working text. An exact piece is a verbatim copy (offsets
move one for one); any other piece came from a rewritten stretch of the base, and a span touching
it takes all of that stretch, so the base slice always covers what was kept. Lookups and
composition cost the number of edits, not the text length.

HTML pages map to the text `clean.html` extracted (`base_kind == "extracted_text"`); a working text
a third-party cleaner replaced without recording edits maps to itself (`"text"`).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import regex

if TYPE_CHECKING:
    from compactor.document import Context, Source

BaseKind = Literal["input", "extracted_text", "text"]
# one piece: working text [new_start, new_end) came from base [old_start, old_end); exact when copied
Piece = tuple[int, int, int, int, bool]


@dataclass(frozen=True, slots=True)
class Edits:
    """One rewrite of a text: pieces tiling the new text, pointing into the old one."""

    pieces: tuple[Piece, ...]
    length: int  # of the new text
    text: str | None = None  # the new text itself (a reference, for checking a map is current)


class Rewriter:
    """Builds a new text from stretches of an old one, recording where each piece came from."""

    def __init__(self, text: str) -> None:
        self.text = text
        self._parts: list[str] = []
        self._pieces: list[list[int | bool]] = []
        self._at = 0  # length of the new text so far

    def keep(self, start: int, end: int) -> None:
        """Copy `text[start:end]` verbatim."""
        if start >= end:
            return
        last = self._pieces[-1] if self._pieces else None
        if last is not None and last[4] and last[3] == start and last[1] == self._at:
            last[1] = int(last[1]) + end - start
            last[3] = end
        else:
            self._pieces.append([self._at, self._at + end - start, start, end, True])
        self._parts.append(self.text[start:end])
        self._at += end - start

    def replace(self, start: int, end: int, new: str) -> None:
        """Write `new` in place of `text[start:end]` (an empty `new` deletes it)."""
        if new == self.text[start:end]:
            self.keep(start, end)
            return
        if new:
            self._pieces.append([self._at, self._at + len(new), start, end, False])
            self._parts.append(new)
            self._at += len(new)

    def insert(self, at: int, new: str) -> None:
        """Write `new`, which the old text does not hold (a joiner), at old position `at`."""
        self.replace(at, at, new)

    def result(self) -> tuple[str, Edits]:
        """The new text and its edits."""
        pieces = tuple((int(a), int(b), int(c), int(d), bool(e)) for a, b, c, d, e in self._pieces)
        text = "".join(self._parts)
        return text, Edits(pieces, self._at, text)


def regex_edit(text: str, pattern: regex.Pattern[str],
               replacement: str | Callable[[regex.Match[str]], str]) -> tuple[str, Edits | None]:
    """`pattern.sub(replacement, text)` with its edits (None when nothing changed)."""
    rewriter: Rewriter | None = None
    done = 0
    for match in pattern.finditer(text):
        new = replacement if isinstance(replacement, str) else replacement(match)
        if new == match.group():
            continue
        if rewriter is None:
            rewriter = Rewriter(text)
        rewriter.keep(done, match.start())
        rewriter.replace(match.start(), match.end(), new)
        done = match.end()
    if rewriter is None:
        return text, None
    rewriter.keep(done, len(text))
    return rewriter.result()


def spans_edit(text: str, spans: Iterable[tuple[int, int]], replacement: str,
               ) -> tuple[str, Edits | None]:
    """`replacement` written over each of `spans` (in order, not overlapping), with its edits (None
    when nothing changed): `regex_edit` for matches found another way."""
    rewriter: Rewriter | None = None
    done = 0
    for start, end in spans:
        if text[start:end] == replacement:
            continue
        if rewriter is None:
            rewriter = Rewriter(text)
        rewriter.keep(done, start)
        rewriter.replace(start, end, replacement)
        done = end
    if rewriter is None:
        return text, None
    rewriter.keep(done, len(text))
    return rewriter.result()


def splice(text: str, spans: Sequence[tuple[int, int]], joiner: str) -> tuple[str, Edits]:
    """The spans of `text` joined by `joiner` (what is left when the rest is dropped)."""
    rewriter = Rewriter(text)
    for i, (start, end) in enumerate(spans):
        if i:
            rewriter.insert(start, joiner)
        rewriter.keep(start, end)
    return rewriter.result()


@dataclass(frozen=True, slots=True)
class OffsetMap:
    """Maps offsets of a source's working text to offsets of `base` (the input, or the text
    extracted from a page)."""

    base: str
    base_kind: BaseKind
    pieces: tuple[Piece, ...]
    length: int  # of the working text
    text: str | None = None  # the working text (a reference): a map only holds for its own text

    @classmethod
    def identity(cls, text: str, base_kind: BaseKind = "input") -> OffsetMap:
        """The map of a text that is its own base."""
        return cls(text, base_kind, ((0, len(text), 0, len(text), True),) if text else (), len(text),
                   text)

    def holds_for(self, text: str) -> bool:
        """Whether this map was made for `text` (not for a text a later step replaced)."""
        if self.text is None:
            return self.length == len(text)
        return self.text is text or self.text == text

    def then(self, edits: Edits) -> OffsetMap:
        """The map of a text rewritten from this map's working text by `edits`."""
        out: list[Piece] = []
        prev = self.pieces
        starts = [p[0] for p in prev]
        for new_start, new_end, mid_start, mid_end, exact in edits.pieces:
            if not exact:
                out.append((new_start, new_end, self.start(mid_start),
                            max(self.start(mid_start), self.end(mid_end)), False))
                continue
            i = max(0, bisect_right(starts, mid_start) - 1)
            at = mid_start
            while at < mid_end and i < len(prev):
                p_start, p_end, o_start, o_end, p_exact = prev[i]
                stop = min(mid_end, p_end)
                if stop > at:
                    n0, n1 = new_start + at - mid_start, new_start + stop - mid_start
                    if p_exact:
                        out.append((n0, n1, o_start + at - p_start, o_start + stop - p_start, True))
                    else:
                        out.append((n0, n1, o_start, o_end, False))
                    at = stop
                i += 1
        return OffsetMap(self.base, self.base_kind, _merged(out), edits.length, edits.text)

    def _piece(self, pos: int) -> Piece | None:
        if not self.pieces:
            return None
        i = bisect_right(self.pieces, (pos, float("inf"))) - 1
        return self.pieces[max(i, 0)]

    def start(self, pos: int) -> int:
        """Base offset where working-text character `pos` starts."""
        if pos >= self.length:
            return self.pieces[-1][3] if self.pieces else 0
        piece = self._piece(pos)
        if piece is None:
            return 0
        new_start, _, old_start, _, exact = piece
        return old_start + pos - new_start if exact else old_start

    def end(self, pos: int) -> int:
        """Base offset just after working-text character `pos - 1`."""
        if pos <= 0:
            return self.pieces[0][2] if self.pieces else 0
        piece = self._piece(min(pos, self.length) - 1)
        if piece is None:
            return 0
        new_start, _, old_start, old_end, exact = piece
        return old_start + min(pos, self.length) - new_start if exact else old_end

    def ranges(self, start: int, end: int) -> list[tuple[int, int]]:
        """Base ranges of the working-text span `[start, end)`: one, unless a clean step dropped
        text inside it (a duplicate paragraph), which the base ranges then leave out. Gaps of
        whitespace or invisible characters do not split a range."""
        if end <= start or not self.pieces:
            return []
        out: list[list[int]] = []
        i = max(0, bisect_right(self.pieces, (start, float("inf"))) - 1)
        while i < len(self.pieces) and self.pieces[i][0] < end:
            new_start, new_end, old_start, old_end, exact = self.pieces[i]
            i += 1
            if exact:
                a = old_start + max(start, new_start) - new_start
                b = old_start + min(end, new_end) - new_start
            else:
                a, b = old_start, old_end
            if b <= a:
                continue  # text a step inserted (a joiner): nothing in the base
            if out and (a <= out[-1][1] or _invisible(self.base[out[-1][1]:a])):
                out[-1][1] = max(out[-1][1], b)
            else:
                out.append([a, b])
        base = self.base
        trimmed = []
        for a, b in out:  # a range that starts or ends at a joiner keeps no blank edge
            while a < b and base[a].isspace():
                a += 1
            while b > a and base[b - 1].isspace():
                b -= 1
            if b > a:
                trimmed.append((a, b))
        return trimmed

    def span(self, start: int, end: int) -> tuple[int, int]:
        """Base offsets `[start, end)` of the working-text span `[start, end)`."""
        if end <= start:
            at = self.start(start)
            return at, at
        return self.start(start), self.end(end)


_VISIBLE = regex.compile(r"[^\s\p{Cc}\p{Cf}]")


def _invisible(text: str) -> bool:
    return _VISIBLE.search(text) is None


def _merged(pieces: Iterable[Piece]) -> tuple[Piece, ...]:
    out: list[Piece] = []
    for piece in pieces:
        if out:
            a, b, c, d, e = out[-1]
            if e and piece[4] and b == piece[0] and d == piece[2]:
                out[-1] = (a, piece[1], c, piece[3], True)
                continue
        out.append(piece)
    return tuple(out)


@dataclass(frozen=True, slots=True)
class KeptSpan:
    """A verbatim stretch of the output: its text as the input has it, and where it is there.

    `start`/`end` index the source's base text (`offsets_into` says which: the caller's input, or
    the text extracted from an HTML page), so `base[start:end] == text`. `chunk_ids` are the chunks
    it overlaps; `partial` lists those it holds only part of.
    """

    source_id: str
    start: int
    end: int
    text: str
    offsets_into: BaseKind
    chunk_ids: tuple[str, ...]
    partial: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, object]:
        """The JSON form (`render.json` and the Python API agree on it)."""
        return {"source_id": self.source_id, "start": self.start, "end": self.end, "text": self.text,
                "offsets_into": self.offsets_into, "chunk_ids": list(self.chunk_ids),
                "partial": list(self.partial)}


#: Sources whose text compactor rendered from a parsed input (a message list, subtitles): their
#: offsets index that rendering, which the JSON carries, not the file.
RENDERED_KINDS = frozenset({"conversation", "transcript"})


def source_map(source: Source) -> OffsetMap:
    """A source's offset map (identity for a source no clean step changed). A map made for another
    text (a step replaced the text without recording edits) is not trusted: offsets then index the
    working text, and say so."""
    if source.offsets is not None and source.offsets.holds_for(source.text):
        return source.offsets
    own = source.text == source.original and source.kind not in RENDERED_KINDS
    return OffsetMap.identity(source.text, "input" if own else "text")


def kept_spans(context: Context) -> list[KeptSpan]:
    """Every verbatim stretch the compressors kept, in output order, mapped to the input."""
    maps: dict[str, OffsetMap] = {}
    by_source: dict[str, list[tuple[int, int, str]]] = {}
    for chunk in context.chunks:
        by_source.setdefault(chunk.source_id, []).append((chunk.start, chunk.end, chunk.id))
    starts: dict[str, list[int]] = {}
    longest: dict[str, int] = {}
    for sid, rows in by_source.items():
        rows.sort()
        starts[sid] = [r[0] for r in rows]
        longest[sid] = max(e - s for s, e, _ in rows)
    out: list[KeptSpan] = []
    seen: set[tuple[str, int, int]] = set()
    for segment in context.segments:
        for source_id, start, end in segment.spans:
            if (source_id, start, end) in seen:
                continue
            seen.add((source_id, start, end))
            try:
                source = context.source(source_id)
            except KeyError:
                continue
            offsets = maps.get(source_id)
            if offsets is None:
                offsets = maps[source_id] = source_map(source)
            rows = by_source.get(source_id, [])
            first = bisect_right(starts.get(source_id, []), start - longest.get(source_id, 0))
            last = bisect_right(starts.get(source_id, []), end)
            chunks = [(s, e, cid) for s, e, cid in rows[max(0, first - 1):last] if s < end and e > start]
            partial = tuple(cid for s, e, cid in chunks if not _holds(source.text, start, end, s, e))
            ids = tuple(cid for _, _, cid in chunks)
            out.extend(KeptSpan(source_id, a, b, offsets.base[a:b], offsets.base_kind, ids, partial)
                       for a, b in offsets.ranges(start, end))
    return out


def _holds(text: str, start: int, end: int, chunk_start: int, chunk_end: int) -> bool:
    """Whether the span `[start, end)` holds all of a chunk's text but surrounding whitespace."""
    if start <= chunk_start and chunk_end <= end:
        return True
    inner = text[max(start, chunk_start):min(end, chunk_end)]
    return (not text[chunk_start:max(start, chunk_start)].strip()
            and not text[min(end, chunk_end):chunk_end].strip() and bool(inner.strip()))
