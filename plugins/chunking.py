"""Chunking mechanics shared by the chunk components: token windows and unit packing.

Exact counts without counting twice: tiktoken splits text into pre-tokens before BPE, and a cut
where a space follows a non-space character, or where a newline is followed by a non-space
character, is always a pre-token boundary. Token counts of pieces cut at such "safe" places add up
exactly, so a chunk's count is the sum of its pieces' counts; only chunks with an unsafe cut (e.g.
Chinese text without spaces) are counted again.
"""

from __future__ import annotations

from collections.abc import Sequence

from compactor.tokens import TokenCounter

_WS = frozenset(b" \t\n\r\x0b\x0c")
_SENTENCE_END = tuple(s.encode() for s in (".", "!", "?", "。", "！", "？", "…", ".\"", ".'",
                                             "”", "」", "；"))
Span = tuple[int, int, int]  # start, end (characters), tokens


def is_safe_cut(text: str, cut: int) -> bool:
    """Whether cutting `text` at `cut` keeps token counts additive on both sides."""
    if cut <= 0 or cut >= len(text):
        return True
    before, after = text[cut - 1], text[cut]
    return (after == " " and not before.isspace()) or (before == "\n" and not after.isspace())


def token_windows(text: str, counter: TokenCounter, size: int, overlap: int = 0) -> list[Span]:
    """Windows of at most `size` tokens with `overlap`, cut at sentence ends, then whitespace,
    then any character boundary; the text is encoded once."""
    if not text:
        return []
    enc = counter.encoding
    tokens = enc.encode_ordinary(text)
    n = len(tokens)
    if n <= size:
        return [(0, len(text), n)]
    data = text.encode("utf-8", "surrogatepass")
    ascii_only = len(data) == len(text)
    slack = max(1, min(size // 4, 128))
    spans: list[Span] = []
    start_tok, start_byte, start_char = 0, 0, 0
    while True:
        if n - start_tok <= size:
            spans.append((start_char, len(text), n - start_tok))
            break
        end_tok, end_byte = _best_end(enc, tokens, data, start_tok, start_byte, size, slack)
        end_char = start_char + (end_byte - start_byte if ascii_only
                                 else len(data[start_byte:end_byte].decode("utf-8")))
        spans.append((start_char, end_char, end_tok - start_tok))
        if overlap <= 0:
            start_tok, start_byte, start_char = end_tok, end_byte, end_char
            continue
        next_tok = max(start_tok + 1, end_tok - overlap)
        next_tok, next_byte = _best_start(enc, tokens, data, start_tok, start_byte, next_tok,
                                          end_tok)
        start_char = start_char + (next_byte - start_byte if ascii_only
                                   else len(data[start_byte:next_byte].decode("utf-8")))
        start_tok, start_byte = next_tok, next_byte
    return _exact(text, spans, counter, size)


def _boundary_bytes(enc: object, tokens: Sequence[int], lo: int, hi: int) -> list[bytes]:
    return [enc.decode_single_token_bytes(t) for t in tokens[lo:hi]]  # type: ignore[attr-defined]


def _aligned(data: bytes, offset: int) -> bool:
    return offset >= len(data) or (data[offset] & 0xC0) != 0x80


def _rank(prev: bytes, nxt: bytes) -> int:
    """How good a cut between two tokens is: 4 paragraph, 3 sentence, 2 whitespace, 1 any."""
    if not prev or not nxt:
        return 1
    if prev.endswith(b"\n") and nxt[0] not in _WS:
        return 4 if prev.endswith(b"\n\n") else 3
    if nxt[0] == 0x20 and prev[-1] not in _WS:
        stripped = prev.rstrip(b"\"')]")
        return 3 if stripped.endswith(_SENTENCE_END) else 2
    if prev.endswith(_SENTENCE_END[4:]):  # CJK sentence punctuation needs no space after it
        return 2
    return 1


def _best_end(enc: object, tokens: Sequence[int], data: bytes, start_tok: int, start_byte: int,
              size: int, slack: int) -> tuple[int, int]:
    hi = start_tok + size
    lo = max(start_tok + 1, hi - slack)
    base = start_byte + len(enc.decode_bytes(tokens[start_tok:lo - 1]))  # type: ignore[attr-defined]
    pieces = _boundary_bytes(enc, tokens, lo - 1, hi + 1)
    offsets = [base]
    for piece in pieces:
        offsets.append(offsets[-1] + len(piece))
    best: tuple[int, int, int] | None = None  # rank, token index, byte offset
    for k in range(hi - lo + 1):  # cut before token lo + k
        cut_tok = lo + k
        offset = offsets[k + 1]
        if not _aligned(data, offset):
            continue
        rank = _rank(pieces[k], pieces[k + 1] if k + 1 < len(pieces) else b"")
        if best is None or rank >= best[0]:
            best = (rank, cut_tok, offset)
    if best is None:  # no character boundary near the end: walk back until there is one
        cut_tok, offset = lo - 1, offsets[0]
        while cut_tok > start_tok + 1 and not _aligned(data, offset):
            offset -= len(enc.decode_single_token_bytes(tokens[cut_tok - 1]))  # type: ignore[attr-defined]
            cut_tok -= 1
        if not _aligned(data, offset):  # a single huge multi-token character run: move forward
            cut_tok, offset = hi, offsets[-2]
            while cut_tok < len(tokens) and not _aligned(data, offset):
                offset += len(enc.decode_single_token_bytes(tokens[cut_tok]))  # type: ignore[attr-defined]
                cut_tok += 1
        return cut_tok, offset
    return best[1], best[2]


def _best_start(enc: object, tokens: Sequence[int], data: bytes, anchor_tok: int,
                anchor_byte: int, want: int, limit: int) -> tuple[int, int]:
    """The first good cut at or after token `want` (before `limit`) for an overlapping start."""
    offset = anchor_byte + len(enc.decode_bytes(tokens[anchor_tok:want]))  # type: ignore[attr-defined]
    fallback: tuple[int, int] | None = None
    prev = enc.decode_single_token_bytes(tokens[want - 1]) if want > 0 else b""  # type: ignore[attr-defined]
    for cut in range(want, limit):
        nxt = enc.decode_single_token_bytes(tokens[cut])  # type: ignore[attr-defined]
        if _aligned(data, offset):
            if _rank(prev, nxt) >= 2:
                return cut, offset
            if fallback is None:
                fallback = (cut, offset)
        offset += len(nxt)
        prev = nxt
    return fallback if fallback is not None else (limit, offset)


def _exact(text: str, spans: list[Span], counter: TokenCounter, size: int) -> list[Span]:
    """Recount the spans whose cuts are unsafe, so every count is the count of the span's text."""
    unsafe = [i for i, (s, e, _) in enumerate(spans)
              if not (is_safe_cut(text, s) and is_safe_cut(text, e))]
    if not unsafe:
        return spans
    counts = counter.count_many([text[spans[i][0]:spans[i][1]] for i in unsafe])
    out = list(spans)
    for i, count in zip(unsafe, counts, strict=True):
        start, end, _ = out[i]
        while count > size and end - start > 1:  # BPE merged differently at a cut: shrink
            end -= 1
            count = counter.count(text[start:end])
        out[i] = (start, end, count)
        if i + 1 < len(out) and out[i + 1][0] > end:  # keep coverage after shrinking
            _, nend, _ = out[i + 1]
            out[i + 1] = (end, nend, counter.count(text[end:nend]))
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
    (start, end, tokens, first unit, last unit + 1) per chunk."""
    pieces = safe_pieces(text, units)
    if not pieces:
        return []
    counts = counter.count_many([text[s:e] for s, e in pieces])
    chunks: list[tuple[int, int, int, int, int]] = []
    i = 0
    while i < len(pieces):
        start, end = pieces[i]
        if counts[i] > size:
            for ws, we, wt in token_windows(text[start:end], counter, size, overlap):
                chunks.append((start + ws, start + we, wt, i, i + 1))
            i += 1
            continue
        total, j = counts[i], i + 1
        while j < len(pieces) and total + counts[j] <= size:
            total += counts[j]
            j += 1
        chunks.append((start, pieces[j - 1][1], total, i, j))
        if j >= len(pieces):
            break
        back, carried = j, 0
        while overlap > 0 and back - 1 > i and carried + counts[back - 1] <= overlap:
            back -= 1
            carried += counts[back]
        i = back
    return _exact_packed(text, chunks, pieces, counter, size)


def _exact_packed(text: str, chunks: list[tuple[int, int, int, int, int]],
                  pieces: Sequence[tuple[int, int]], counter: TokenCounter,
                  size: int) -> list[tuple[int, int, int, int, int]]:
    """Recount chunks whose inner cuts are unsafe; split any that grew past `size`."""
    suspect = []
    for k, (start, end, _, first, last) in enumerate(chunks):
        cuts = [start, end] + [pieces[u][0] for u in range(first + 1, last)]
        if not all(is_safe_cut(text, c) for c in cuts):
            suspect.append(k)
    if not suspect:
        return chunks
    counts = counter.count_many([text[chunks[k][0]:chunks[k][1]] for k in suspect])
    out: list[tuple[int, int, int, int, int]] = []
    fixed = dict(zip(suspect, counts, strict=True))
    for k, chunk in enumerate(chunks):
        start, end, _, first, last = chunk
        if k not in fixed:
            out.append(chunk)
            continue
        if fixed[k] <= size:
            out.append((start, end, fixed[k], first, last))
            continue
        for ws, we, wt in token_windows(text[start:end], counter, size):
            out.append((start + ws, start + we, wt, first, last))
    return out
