"""Stemming from many threads at once: `compress.map_reduce` maps chunks in a thread pool,
and every thread stems through `textstats.stem`. One shared snowball stemmer raced there (IndexError,
or wrong stems such as "term" -> "last" that the process-wide cache then kept for every later run).

These tests force frequent thread switches (`sys.setswitchinterval(1e-6)`) so a race shows up in
every run, then check every cached stem against a fresh single-threaded stemmer.
"""

from __future__ import annotations

import importlib.resources
import json
import random
import sys
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import TypeVar

import snowballstemmer

from compactor import Pipeline
from compactor.text import terms as ts

T = TypeVar("T")
THREADS = 8
SUFFIXES = ("", "s", "ing", "ed", "ness", "ational", "ization", "fulness", "ly", "ive")


def vocabulary() -> list[str]:
    """About 10k real English word types (the Punkt data's vocabulary), with derived forms that
    walk the stemmer's longer suffix rules."""
    data = importlib.resources.files("compactor.text").joinpath("data/punkt_en.json").read_text("utf-8")
    words = sorted(w for w in json.loads(data)["ortho_context"] if w.isascii() and w.isalpha())
    rng = random.Random(12)
    derived = {w + rng.choice(SUFFIXES) for w in words}
    return sorted(set(words) | derived | {"term", "terms", "remember", "remembered", "usa", "last"})


def single_threaded(words: list[str]) -> dict[str, str]:
    """What a private, never-shared stemmer says."""
    stemmer = snowballstemmer.stemmer("english")
    return {w: stemmer.stemWord(w) for w in words}


@contextmanager
def contention() -> Iterator[None]:
    """Thread switches as often as the interpreter allows; restored afterwards."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(old)


def together(job: Callable[[int], T], n: int = THREADS) -> list[T]:
    """`job(i)` on n threads released at the same moment."""
    start = threading.Barrier(n)

    def run(i: int) -> T:
        start.wait()
        return job(i)

    with ThreadPoolExecutor(max_workers=n) as pool:
        return list(pool.map(run, range(n)))


def clear_caches() -> None:
    """Every per-word and per-text cache in textstats (a user stems new text)."""
    for value in vars(ts).values():
        if callable(getattr(value, "cache_clear", None)):
            value.cache_clear()


def test_stem_from_many_threads_matches_a_private_stemmer_and_caches_only_right_stems() -> None:
    words = vocabulary()
    assert len(words) > 10000
    expected = single_threaded(words)
    orders = []
    for i in range(THREADS):  # each thread meets the words in its own order: misses overlap
        order = list(words)
        random.Random(i).shuffle(order)
        orders.append(order)

    def stem_all(i: int) -> tuple[dict[str, str], list[str]]:
        got, failed = {}, []
        for w in orders[i]:
            try:
                got[w] = ts.stem(w)
            except Exception as e:  # count every failure, then check the rest
                failed.append(f"{w}: {e!r}")
        return got, failed

    clear_caches()
    try:
        with contention():
            results = together(stem_all)
        assert [f for _, failed in results for f in failed] == []
        for got, _ in results:  # what each thread was told ...
            assert {w: s for w, s in got.items() if s != expected[w]} == {}
        assert ts.stem.cache_info().currsize >= len(words)
        cached = {w: ts.stem(w) for w in words}  # ... and what the cache now holds for everyone
        assert {w: s for w, s in cached.items() if s != expected[w]} == {}
        assert cached["term"] == "term" and cached["remember"] == "rememb"
    finally:
        clear_caches()  # leave no state behind for other tests


MAP = """
version: 1
name: map-under-contention
steps:
  - use: chunk.tokens
    with: {size: 300, overlap: 0}
  - use: compress.map_reduce
    with: {max_tokens: 1000, safety_margin: 0.8, map_share: 0.3, concurrency: %d}
"""


def test_map_reduce_map_step_in_a_thread_pool_keeps_the_stem_cache_right() -> None:
    words = vocabulary()
    rng = random.Random(3)
    sentences = [" ".join(rng.sample(words, 12)).capitalize() + "." for _ in range(600)]
    text = "\n\n".join(" ".join(sentences[i:i + 6]) for i in range(0, len(sentences), 6))
    pipeline = Pipeline.from_string(MAP % THREADS)
    clear_caches()
    try:
        with contention():
            contexts = together(lambda i: pipeline.run(text, query="term remember"), n=2)
        for context in contexts:
            details = context.reports[1].details
            assert details["compression_decision"] == "compress_first"
            assert details["map_chunks"] > THREADS  # the pool had work for every thread
        expected = single_threaded(words)
        cached = {w: ts.stem(w) for w in words}
        assert {w: s for w, s in cached.items() if s != expected[w]} == {}
        assert contexts[0].output == contexts[1].output
        mapped_terms = {t for s in sentences for t in ts.terms(s)}  # from the cache the map filled
        clear_caches()
        assert mapped_terms == {t for s in sentences for t in ts.terms(s)}  # recomputed by one thread
    finally:
        clear_caches()
