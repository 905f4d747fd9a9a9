"""Meaning beyond shared words, without a model at run time: static word vectors.

BM25 only sees the words a question and a sentence share; "Who directed the film?" and "The movie
was made by ..." share none. A sentence encoder sees that, but costs a model and a second of CPU per
document. `data/vectors.en.npz` holds what such an encoder (all-MiniLM-L6-v2, Apache-2.0) knows of
each entry of its WordPiece vocabulary, distilled by `benchmarks/distill_vectors.py` in the model2vec
manner: each entry embedded alone, reduced by PCA, weighted by its Zipf frequency (SIF, so "the"
weighs almost nothing) and quantised to int8. A text's vector is the sum of its words' vectors (a
word outside the vocabulary is split into WordPiece pieces, as the model does), and similarity is
the cosine. Everything is batched: a gather and a segmented sum per block of a document's texts.

The table loads once per process. Without numpy or the table the signal is absent (one warning)
and the relevance engine scores by its lexical evidence alone.
"""

from __future__ import annotations

import functools
import importlib.resources
import re
import unicodedata
import warnings
from collections.abc import Sequence
from itertools import chain
from typing import TYPE_CHECKING, Any

import regex

if TYPE_CHECKING:
    import numpy as np

_WORD = regex.compile(r"[\p{L}\p{N}]+")
_ASCII_WORD = re.compile(r"[A-Za-z0-9]+")
_MAX_PIECES = 6  # a longer split is noise (a code, a hash): the word is left out
_ABSENT: tuple[int, ...] = ()
_BLOCK = 64  # texts summed per gather


@functools.cache
def table() -> tuple[dict[str, int], Any] | None:
    """The vocabulary (entry -> row) and the float32 matrix of weighted vectors, or None."""
    try:
        import numpy as np
    except ImportError:
        warnings.warn("numpy is not installed: relevance works without its semantic signal", stacklevel=2)
        return None
    try:
        ref = importlib.resources.files("compactor.text") / "data" / "vectors.en.npz"
        with ref.open("rb") as f, np.load(f) as data:
            tokens = data["tokens"].tolist()
            vectors = data["vectors"].astype(np.float32) * data["scale"].astype(np.float32)[:, None]
    except (FileNotFoundError, OSError, KeyError, ValueError) as err:
        warnings.warn(f"no word vectors ({err}): relevance works without its semantic signal", stacklevel=2)
        return None
    return {t: i for i, t in enumerate(tokens)}, vectors


def _fold(word: str) -> str:
    """Lower case without accents, as the uncased model reads text."""
    word = word.lower()
    if word.isascii():
        return word
    return "".join(ch for ch in unicodedata.normalize("NFD", word) if unicodedata.category(ch) != "Mn")


def _pieces(word: str, vocab: dict[str, int]) -> tuple[int, ...]:
    """Rows of a word: itself, or its greedy longest-match WordPiece split (None when unsplittable)."""
    row = vocab.get(word)
    if row is not None:
        return (row,)
    out: list[int] = []
    start = 0
    while start < len(word):
        end = len(word)
        while end > start:
            piece = word[start:end] if start == 0 else "##" + word[start:end]
            found = vocab.get(piece)
            if found is not None:
                out.append(found)
                break
            end -= 1
        if end == start or len(out) > _MAX_PIECES:
            return _ABSENT
        start = end
    return tuple(out)


class _Rows(dict[str, tuple[int, ...]]):
    """Token -> rows, shared by every call (bounded by clearing, like the relevance term cache)."""

    limit = 300_000


_ROWS = _Rows()


def rows_of(text: str, vocab: dict[str, int]) -> list[int]:
    """The table rows of a text's words, in order (Han text has none: its path is elsewhere)."""
    return [row for rows in _token_rows(_words(text), vocab) for row in rows]


def _words(text: str) -> list[str]:
    """The text's words: letters and digits (ASCII text takes the stdlib pattern, twice as fast
    and, on ASCII, the same words)."""
    return _ASCII_WORD.findall(text) if text.isascii() else _WORD.findall(text)


def _token_rows(tokens: list[str], vocab: dict[str, int]) -> list[tuple[int, ...]]:
    """Each token's rows, through the shared token cache."""
    known = _ROWS
    found = [known.get(token) for token in tokens]
    if None in found:
        for k, rows in enumerate(found):
            if rows is None:
                token = tokens[k]
                rows = known.get(token)
                if rows is None:
                    rows = _ABSENT if "\u3400" <= token[0] <= "\u9fff" else _pieces(_fold(token), vocab)
                    if len(known) >= _Rows.limit:
                        known.clear()
                    known[token] = rows
                found[k] = rows
    return found  # type: ignore[return-value]  # no None left


def sums(texts: Sequence[str]) -> np.ndarray | None:
    """Summed word vectors of the texts (zeros for a text without known words), or None without
    the table. One gather and a segmented sum per block of texts; sums add up, so a passage's
    vector is the sum of its sentences'."""
    found = table()
    if found is None:
        return None
    import numpy as np

    vocab, vectors = found
    tokens: list[str] = []
    per_text = np.zeros(len(texts), dtype=np.int64)
    for i, text in enumerate(texts):
        words = _words(text)
        per_text[i] = len(words)
        tokens.extend(words)
    token_rows = _token_rows(tokens, vocab)
    widths = np.fromiter(map(len, token_rows), dtype=np.int64, count=len(token_rows))
    flat = list(chain.from_iterable(token_rows))
    # rows per text: the widths of its tokens summed
    token_ends = np.cumsum(per_text)
    width_sums = np.concatenate(([0], np.cumsum(widths)))
    counts = width_sums[token_ends] - width_sums[token_ends - per_text]
    out = np.zeros((len(texts), vectors.shape[1]), dtype=np.float32)
    if not flat:
        return out
    table_rows = np.asarray(flat, dtype=np.int64)
    ends = np.cumsum(counts)
    starts = ends - counts
    # a block of texts at a time: the gathered rows then stay in cache (a whole document's would
    # be tens of MB, and gathering them four times slower)
    for first in range(0, len(texts), _BLOCK):
        last = min(first + _BLOCK, len(texts))
        lo, hi = int(starts[first]), int(ends[last - 1])
        if hi > lo:
            nonempty = counts[first:last] > 0
            out[first:last][nonempty] = np.add.reduceat(vectors[table_rows[lo:hi]],
                                                        starts[first:last][nonempty] - lo, axis=0)
    return out


def unit(vectors: np.ndarray) -> np.ndarray:
    """Rows scaled to length 1 (a zero row stays zero), so a dot product is the cosine."""
    import numpy as np

    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return np.divide(vectors, norms, out=np.zeros_like(vectors), where=norms > 0)


def embed(texts: Sequence[str]) -> np.ndarray | None:
    """Unit vectors of the texts, or None without the table."""
    found = sums(texts)
    return None if found is None else unit(found)


def similarities(query: str, texts: Sequence[str]) -> list[float] | None:
    """Cosine of the query with each text (0 for a text or query without known words), or None
    without the table."""
    found = embed([query, *texts])
    if found is None:
        return None
    return (found[1:] @ found[0]).tolist()
