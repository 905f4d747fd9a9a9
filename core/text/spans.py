"""Chunking mechanics shared by the chunk components: token windows and unit packing.

Exact counts from one encode: tiktoken splits text into pre-tokens before BPE, and BPE never
crosses a pre-token. A cut where a space follows a non-space character, where a non-space follows
a newline, or where punctuation follows a letter or digit (Chinese 。，included) is a pre-token
boundary in any string containing it ("safe"). So the count of any span is: a short encode of the
edge before its first safe cut, plus the token-index difference between its first and last safe cut
in the whole-text encoding, plus a short encode of the edge after its last safe cut (`SpanCounter`).
Chunkers count all their units at once (`_PieceCounter`): token indices of every cut in a few array
operations; a text whose cuts are mostly unsafe (Chinese sentence ends) has each unit encoded alone.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left
from collections.abc import Sequence
from itertools import accumulate, islice
from typing import Any, cast

import regex

from compactor.text.tokens import TokenCounter

_WS = frozenset(b" \t\n\r\x0b\x0c")
_SENTENCE_END = tuple(s.encode() for s in (".", "!", "?", "。", "！", "？", "…", ".\"", ".'",
                                             "”", "」", "；"))
Span = tuple[int, int, int]  # start, end (characters), tokens

#: The gap mark: what stands between two kept stretches of a text that are not adjacent in the original
#: (an excerpt, a source's kept spans), so a reader sees that something was left out there. Every
#: component that drops text from the middle of a source writes this one mark.
GAP_MARK = "\n\n[…]\n\n"
#: Its tokens with the default counter, for a budget that reserves room for a join.
GAP_TOKENS = 3


_SAFE = r"(?<=\S)(?= )|(?<=\n)(?=\S)|(?<=[\p{L}\p{N}])(?=[^\s\p{L}\p{N}\p{M}'’])"
_SAFE_FORWARD = regex.compile(_SAFE)
_SAFE_BACKWARD = regex.compile(_SAFE, regex.REVERSE)
_CHECKPOINT_STEP = 256  # characters between the byte offsets `SpanCounter.byte_at` starts from
_ARRAY_MIN_TOKENS = 256  # tokens from which `SpanCounter.tokens_at` works on arrays
_EDGE_SCAN = 512  # characters searched for a safe cut at each edge before encoding the span whole


def is_safe_cut(text: str, cut: int) -> bool:
    """Whether cutting `text` at `cut` keeps token counts additive on both sides."""
    if cut <= 0 or cut >= len(text):
        return True
    return _SAFE_FORWARD.match(text, cut) is not None


class SpanCounter:
    """Exact token counts of any span of one text, from a single encode of the whole text."""

    def __init__(self, text: str, counter: TokenCounter) -> None:
        self.text = text
        self.counter = counter
        self.encoding = counter.encoding
        self.tokens = counter.encode(text)
        self.ascii = text.isascii()
        self._offsets: list[int] | None = None
        self._checkpoints: list[int] | None = None  # byte offset of every _CHECKPOINT_STEP-th character
        self._starts: Any = None  # numpy: the byte offset where each token starts, then the total
        self._wide: Any = None  # numpy: non-ASCII characters' offsets, extra UTF-8 bytes before each

    @property
    def offsets(self) -> list[int]:
        """Byte offset where each token starts, plus the total length at the end."""
        if self._offsets is None:
            self._offsets = byte_offsets(token_table(self.encoding), self.tokens)
        return self._offsets

    def byte_at(self, char: int) -> int:
        """Byte offset of a character offset."""
        if self.ascii:
            return char
        if self._wide is not None:  # `tokens_at` has run
            wide, extra = self._wide
            return char + int(extra[wide.searchsorted(char)])
        step = _CHECKPOINT_STEP
        checkpoints = self._checkpoints
        if checkpoints is None:
            text = self.text
            checkpoints = self._checkpoints = list(accumulate(
                (len(text[i:i + step].encode("utf-8", "surrogatepass"))
                 for i in range(0, len(text), step)), initial=0))
        base = char - char % step
        return checkpoints[base // step] + len(self.text[base:char].encode("utf-8", "surrogatepass"))

    def token_at(self, char: int) -> int:
        """Index of the first token starting at or after a character offset."""
        if self._offsets is None and self._starts is not None:  # `tokens_at` has run: no list needed
            return int(self._starts.searchsorted(self.byte_at(char)))
        return bisect_left(self.offsets, self.byte_at(char))

    def tokens_at(self, chars: Sequence[int]) -> list[int]:
        """`token_at` of each of many character offsets: in a few array operations for a long
        text, whose offsets list would cost a Python step per token."""
        if len(self.tokens) < _ARRAY_MIN_TOKENS or self._offsets is not None:
            return [self.token_at(char) for char in chars]
        import numpy as np

        if self._starts is None:
            self._starts = _token_starts(token_table(self.encoding), self.tokens)
        found = np.searchsorted(self._starts, self._bytes_at(chars))
        return cast(list[int], found.tolist())

    def _bytes_at(self, chars: Sequence[int]) -> Any:
        """Byte offsets of character offsets (a numpy array): each character before an offset
        that is not ASCII adds 1-3 bytes to it."""
        import numpy as np

        at = np.asarray(chars, dtype=np.int64)
        if self.ascii:
            return at
        if self._wide is None:
            points = np.frombuffer(self.text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
            wide = np.flatnonzero(points >= 0x80)
            extra = np.zeros(len(wide) + 1, dtype=np.int64)
            np.cumsum(1 + (points[wide] >= 0x800) + (points[wide] >= 0x10000).astype(np.int64),
                      out=extra[1:])
            self._wide = (wide, extra)
        wide, extra = self._wide
        return at + extra[np.searchsorted(wide, at)]

    def _encode_count(self, start: int, end: int) -> int:
        return len(self.counter.encode(self.text[start:end])) if end > start else 0

    def count(self, start: int, end: int) -> int:
        """Exact number of tokens in `text[start:end]`."""
        if end <= start:
            return 0
        text = self.text
        first = start if is_safe_cut(text, start) else None
        if first is None:
            found = _SAFE_FORWARD.search(text, start + 1, min(end, start + _EDGE_SCAN))
            first = found.start() if found else None
        last = end if is_safe_cut(text, end) else None
        if last is None:
            found = _SAFE_BACKWARD.search(text, max(start, end - _EDGE_SCAN), end - 1)
            last = found.start() if found else None
        if first is None or last is None or first > last:
            return self._encode_count(start, end)
        return (self._encode_count(start, first) + self.token_at(last) - self.token_at(first)
                + self._encode_count(last, end))


def token_table(enc: object) -> Sequence[bytes]:
    """Bytes of every token id, built once per encoding: a list lookup instead of a decode call per
    token is what makes boundary search cheap."""
    cached = _TABLES.get(id(enc))
    if cached is not None and cached[0] is enc:
        return cached[1]
    ranks = getattr(enc, "_mergeable_ranks", None)
    table: Sequence[bytes]
    if isinstance(ranks, dict) and ranks:
        built = [b""] * (max(ranks.values()) + 1)
        for token_bytes, rank in ranks.items():
            built[rank] = token_bytes
        table = built
    else:  # the approximate encoding keeps its own growing list
        table = getattr(enc, "_pieces", None) or cast(Sequence[bytes], _DecodingTable(enc))
    _TABLES[id(enc)] = (enc, table)
    return table


class _DecodingTable:
    """Fallback table for encodings without ranks: decodes on demand."""

    def __init__(self, enc: object) -> None:
        self.enc = enc

    def __getitem__(self, token: int) -> bytes:
        return self.enc.decode_single_token_bytes(token)  # type: ignore[attr-defined]


_TABLES: dict[int, tuple[object, Sequence[bytes]]] = {}


def byte_offsets(table: Sequence[bytes], tokens: Sequence[int]) -> list[int]:
    """Byte offset where each token starts, plus the total length at the end."""
    lengths = _LENGTHS.get(id(table))
    if lengths is None or len(lengths) != len(table):
        lengths = [len(t) for t in table] if not isinstance(table, _DecodingTable) else None
        if lengths is not None:
            _LENGTHS[id(table)] = lengths
    if lengths is None:
        return list(accumulate((len(table[t]) for t in tokens), initial=0))
    return list(accumulate(map(lengths.__getitem__, tokens), initial=0))


_LENGTHS: dict[int, list[int]] = {}


def _token_starts(table: Sequence[bytes], tokens: Sequence[int]) -> Any:
    """`byte_offsets` as a numpy array, from a per-encoding array of token lengths (a gather and
    a cumulative sum instead of a Python step per token)."""
    import numpy as np

    lengths = _LENGTH_ARRAYS.get(id(table))
    if lengths is None or len(lengths) != len(table):
        if isinstance(table, _DecodingTable):
            return np.asarray(byte_offsets(table, tokens), dtype=np.int64)
        lengths = np.fromiter(map(len, table), dtype=np.int64, count=len(table))
        _LENGTH_ARRAYS[id(table)] = lengths
    ids = array("I", tokens)
    starts = np.zeros(len(ids) + 1, dtype=np.int64)
    np.cumsum(lengths[np.frombuffer(ids, dtype=f"u{ids.itemsize}")], out=starts[1:])
    return starts


_LENGTH_ARRAYS: dict[int, Any] = {}


def token_windows(text: str, counter: TokenCounter, size: int, overlap: int = 0) -> list[Span]:
    """Windows of at most `size` tokens with `overlap`, cut at sentence ends, then whitespace,
    then any character boundary; the text is encoded once."""
    if not text:
        return []
    spans_counter = SpanCounter(text, counter)
    tokens, offs = spans_counter.tokens, spans_counter.offsets
    n = len(tokens)
    if n <= size:
        return [(0, len(text), n)]
    table = token_table(counter.encoding)
    data = text.encode("utf-8", "surrogatepass")
    ascii_only = len(data) == len(text)
    slack = max(1, min(size // 4, 128))
    spans: list[Span] = []
    start_tok, start_char = 0, 0
    while True:
        if n - start_tok <= size:
            spans.append((start_char, len(text), n - start_tok))
            break
        end_tok = _best_end(table, tokens, offs, data, start_tok, size, slack)
        end_char = start_char + (offs[end_tok] - offs[start_tok] if ascii_only
                                 else len(data[offs[start_tok]:offs[end_tok]].decode("utf-8")))
        spans.append((start_char, end_char, end_tok - start_tok))
        if overlap <= 0:
            start_tok, start_char = end_tok, end_char
            continue
        next_tok = _best_start(table, tokens, offs, data, max(start_tok + 1, end_tok - overlap),
                               end_tok)
        start_char = start_char + (offs[next_tok] - offs[start_tok] if ascii_only
                                   else len(data[offs[start_tok]:offs[next_tok]].decode("utf-8")))
        start_tok = next_tok
    return _exact(text, spans, spans_counter, size)


def _aligned(data: bytes, offset: int) -> bool:
    return offset >= len(data) or (data[offset] & 0xC0) != 0x80


def _rank(prev: bytes, nxt: bytes) -> int:
    """How good a cut between two tokens is: 4 paragraph, 3 sentence, 2 whitespace, 1 any."""
    if not prev or not nxt:
        return 1
    if prev[-1] == 0x0A and nxt[0] not in _WS:
        return 4 if prev.endswith(b"\n\n") else 3
    if nxt[0] == 0x20 and prev[-1] not in _WS:
        stripped = prev.rstrip(b"\"')]")
        return 3 if stripped.endswith(_SENTENCE_END) else 2
    if prev.endswith(_SENTENCE_END[4:]):  # CJK sentence punctuation needs no space after it
        return 3
    return 1


def _best_end(table: Sequence[bytes], tokens: Sequence[int], offs: Sequence[int], data: bytes,
              start_tok: int, size: int, slack: int) -> int:
    """The cut (a token index) for a window starting at `start_tok`: the rightmost paragraph or
    sentence end in the last `slack` tokens, else the rightmost whitespace, else any character
    boundary."""
    hi = start_tok + size
    lo = max(start_tok + 1, hi - slack)
    best_rank, best_cut = 0, -1
    for cut in range(hi, lo - 1, -1):
        if not _aligned(data, offs[cut]):
            continue
        rank = _rank(table[tokens[cut - 1]], table[tokens[cut]] if cut < len(tokens) else b"")
        if rank >= 3:
            return cut
        if rank > best_rank:
            best_rank, best_cut = rank, cut
    if best_cut > 0:
        return best_cut
    cut = lo - 1  # no character boundary near the end: walk back, then forward
    while cut > start_tok + 1 and not _aligned(data, offs[cut]):
        cut -= 1
    if not _aligned(data, offs[cut]):
        cut = hi
        while cut < len(tokens) and not _aligned(data, offs[cut]):
            cut += 1
    return cut


def _best_start(table: Sequence[bytes], tokens: Sequence[int], offs: Sequence[int], data: bytes,
                want: int, limit: int) -> int:
    """The first good cut at or after token `want` (before `limit`) for an overlapping start."""
    fallback = -1
    for cut in range(want, limit):
        if _aligned(data, offs[cut]):
            if _rank(table[tokens[cut - 1]], table[tokens[cut]]) >= 2:
                return cut
            if fallback < 0:
                fallback = cut
    return fallback if fallback >= 0 else limit


def _exact(text: str, spans: list[Span], counter: SpanCounter, size: int) -> list[Span]:
    """Exact counts for spans with an unsafe edge; shrink the rare one a different BPE merge at a cut
    pushed over `size`, keeping coverage."""
    out = list(spans)
    for i, (start, end, _) in enumerate(out):
        if is_safe_cut(text, start) and is_safe_cut(text, end):
            continue
        count = counter.count(start, end)
        while count > size and end - start > 1:
            end -= 1
            count = counter.count(start, end)
        out[i] = (start, end, count)
        if i + 1 < len(out) and out[i + 1][0] > end:
            _, nend, _ = out[i + 1]
            out[i + 1] = (end, nend, counter.count(end, nend))
    return out


def safe_pieces(text: str, spans: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """Move each cut between units to a safe place inside the whitespace around it, if any."""
    return _safe_pieces(text, spans)[0]


def _safe_pieces(text: str, spans: Sequence[tuple[int, int]]) -> tuple[list[tuple[int, int]], list[bool]]:
    """`safe_pieces`, and whether each piece starts at a safe cut, then True for the text's end."""
    out: list[tuple[int, int]] = []
    safe = [True]
    if not spans:
        return out, safe
    length = len(text)
    safe_at = _SAFE_FORWARD.match
    start = 0
    for _, end in islice(spans, len(spans) - 1):
        if end >= start + 2 and text[end - 1] == " " and not text[end - 2].isspace():
            cut, ok = end - 1, True  # "word. |Next": the usual case, safe before the space
        else:
            cut, ok = end, end <= 0 or end >= length or safe_at(text, end) is not None
        if not ok:
            ws = end
            while ws > start + 1 and text[ws - 1].isspace():
                ws -= 1
            if ws < end and safe_at(text, ws) is not None:
                cut, ok = ws, True
        if cut > start:
            out.append((start, cut))
            safe.append(ok)
            start = cut
    out.append((start, length))
    safe.append(True)
    return out, safe


def _mostly_unsafe(safe: Sequence[bool]) -> bool:
    """Whether most cuts between pieces are unsafe (Chinese sentences: 。 then a letter is inside
    one pre-token). Counting from a whole-text encode then needs two short encodes and two
    pattern searches at nearly every cut, which costs more than encoding each piece alone."""
    return 2 * (len(safe) - sum(safe)) > len(safe)


class _PieceCounter:
    """Exact counts of runs of consecutive pieces of a tiling: the difference of token indices
    in the whole-text encode between safe cuts, else the run encoded alone (mostly unsafe cuts)
    or `SpanCounter.count` (its short encodes at the edges)."""

    def __init__(self, text: str, units: Sequence[tuple[int, int]], counter: TokenCounter) -> None:
        self.text = text
        self.pieces, self.safe = _safe_pieces(text, units)
        self.counter = counter
        self.alone = _mostly_unsafe(self.safe)
        self._spans: SpanCounter | None = None
        self._bounds: list[int] | None = None

    @property
    def spans(self) -> SpanCounter:
        if self._spans is None:
            self._spans = SpanCounter(self.text, self.counter)
        return self._spans

    @property
    def bounds(self) -> list[int]:
        """Token index in the whole-text encode where each piece starts, then the token total."""
        if self._bounds is None:
            spans = self.spans
            self._bounds = [*spans.tokens_at([s for s, _ in self.pieces]), len(spans.tokens)]
        return self._bounds

    def count(self, i: int, j: int) -> int:
        """Tokens of pieces i..j-1 on their own."""
        if self.safe[i] and self.safe[j]:
            bounds = self.bounds
            return bounds[j] - bounds[i]
        start, end = self.pieces[i][0], self.pieces[j - 1][1]
        if self.alone:
            return self.counter.count(self.text[start:end])
        return self.spans.count(start, end)

    def each(self) -> list[int]:
        """The count of every piece."""
        text, pieces = self.text, self.pieces
        if self.alone:
            return self.counter.count_many([text[s:e] for s, e in pieces])
        bounds, safe, spans = self.bounds, self.safe, self.spans
        return [bounds[i + 1] - bounds[i] if safe[i] and safe[i + 1] else spans.count(start, end)
                for i, (start, end) in enumerate(pieces)]


def pack_units(
    text: str,
    units: Sequence[tuple[int, int]],
    counter: TokenCounter,
    size: int,
    overlap: int = 0,
) -> list[tuple[int, int, int, int, int]]:
    """Greedily pack consecutive units (sentences, paragraphs) into chunks of at most `size`
    tokens; a unit larger than `size` is cut into token windows. Returns
    (start, end, tokens, first unit, last unit + 1) per chunk, with exact token counts."""
    if not units:
        return []
    counts = _PieceCounter(text, units, counter)
    pieces, bounds = counts.pieces, counts.bounds
    estimate = [max(bounds[i + 1] - bounds[i], 1) for i in range(len(pieces))]
    exact = counts.count
    chunks: list[tuple[int, int, int, int, int]] = []
    i = 0
    while i < len(pieces):
        start = pieces[i][0]
        total, j = estimate[i], i + 1
        while j < len(pieces) and total + estimate[j] <= size:
            total += estimate[j]
            j += 1
        count = exact(i, j)
        while count > size and j - 1 > i:  # the estimate was a token short somewhere
            j -= 1
            count = exact(i, j)
        if count > size:  # one unit larger than a chunk: cut it into token windows
            end = pieces[i][1]
            for ws, we, wt in token_windows(text[start:end], counter, size, overlap):
                chunks.append((start + ws, start + we, wt, i, i + 1))
            i += 1
            continue
        chunks.append((start, pieces[j - 1][1], count, i, j))
        if j >= len(pieces):
            break
        back, carried = j, 0
        while overlap > 0 and back - 1 > i and carried + estimate[back - 1] <= overlap:
            back -= 1
            carried += estimate[back]
        i = back
    return chunks


def unit_chunks(
    text: str,
    units: Sequence[tuple[int, int]],
    counter: TokenCounter,
    size: int,
) -> list[tuple[int, int, int, int, int]]:
    """One chunk per unit (sentence), with exact token counts from one encode of the text (or of
    each unit, when most cuts between units are unsafe); a unit larger than `size` is cut into
    token windows. Same tuples as `pack_units`."""
    if not units:
        return []
    pieces_counter = _PieceCounter(text, units, counter)
    pieces, counts = pieces_counter.pieces, pieces_counter.each()
    chunks: list[tuple[int, int, int, int, int]] = []
    for i, ((start, end), tokens) in enumerate(zip(pieces, counts, strict=True)):
        if tokens <= size:
            chunks.append((start, end, tokens, i, i + 1))
            continue
        for ws, we, wt in token_windows(text[start:end], counter, size):
            chunks.append((start + ws, start + we, wt, i, i + 1))
    return chunks
