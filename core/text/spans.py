"""Chunking mechanics shared by the chunk components: token windows and unit packing.

Exact counts from one encode: tiktoken splits text into pre-tokens before BPE, and BPE never
crosses a pre-token. A cut where a space follows a non-space character, where a non-space follows
a newline, or where punctuation follows a letter or digit (Chinese 。，included) is a pre-token
boundary in any string containing it ("safe"). So the count of any span is: a short encode of the
edge before its first safe cut, plus the token-index difference between its first and last safe cut
in the whole-text encoding, plus a short encode of the edge after its last safe cut (`SpanCounter`).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from itertools import accumulate
from typing import cast

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
        self.offsets = byte_offsets(token_table(self.encoding), self.tokens)
        self.ascii = text.isascii()
        self._step = 256
        if not self.ascii:
            step = self._step
            self._checkpoints = list(accumulate(
                (len(text[i:i + step].encode("utf-8", "surrogatepass"))
                 for i in range(0, len(text), step)), initial=0))

    def byte_at(self, char: int) -> int:
        """Byte offset of a character offset."""
        if self.ascii:
            return char
        base = char - char % self._step
        return self._checkpoints[base // self._step] + len(
            self.text[base:char].encode("utf-8", "surrogatepass"))

    def token_at(self, char: int) -> int:
        """Index of the first token starting at or after a character offset."""
        return bisect_left(self.offsets, self.byte_at(char))

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
    out: list[tuple[int, int]] = []
    start = 0
    for i, (_, end) in enumerate(spans):
        if i == len(spans) - 1:
            out.append((start, len(text)))
            break
        cut = end
        if not is_safe_cut(text, cut):
            ws = cut
            while ws > start + 1 and text[ws - 1].isspace():
                ws -= 1
            if ws < cut and is_safe_cut(text, ws):
                cut = ws
        if cut > start:
            out.append((start, cut))
            start = cut
    return out


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
    pieces = safe_pieces(text, units)
    if not pieces:
        return []
    spans = SpanCounter(text, counter)
    bounds = [spans.token_at(s) for s, _ in pieces] + [len(spans.tokens)]
    estimate = [max(bounds[i + 1] - bounds[i], 1) for i in range(len(pieces))]
    chunks: list[tuple[int, int, int, int, int]] = []
    i = 0
    while i < len(pieces):
        start = pieces[i][0]
        total, j = estimate[i], i + 1
        while j < len(pieces) and total + estimate[j] <= size:
            total += estimate[j]
            j += 1
        exact = spans.count(start, pieces[j - 1][1])
        while exact > size and j - 1 > i:  # the estimate was a token short somewhere
            j -= 1
            exact = spans.count(start, pieces[j - 1][1])
        if exact > size:  # one unit larger than a chunk: cut it into token windows
            end = pieces[i][1]
            for ws, we, wt in token_windows(text[start:end], counter, size, overlap):
                chunks.append((start + ws, start + we, wt, i, i + 1))
            i += 1
            continue
        chunks.append((start, pieces[j - 1][1], exact, i, j))
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
    """One chunk per unit (sentence), with exact token counts from one encode of the text; a unit
    larger than `size` is cut into token windows. Same tuples as `pack_units`."""
    pieces = safe_pieces(text, units)
    if not pieces:
        return []
    spans = SpanCounter(text, counter)
    chunks: list[tuple[int, int, int, int, int]] = []
    for i, (start, end) in enumerate(pieces):
        tokens = spans.count(start, end)
        if tokens <= size:
            chunks.append((start, end, tokens, i, i + 1))
            continue
        for ws, we, wt in token_windows(text[start:end], counter, size):
            chunks.append((start + ws, start + we, wt, i, i + 1))
    return chunks
