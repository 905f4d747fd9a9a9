"""Static word vectors: the table loads once, texts embed in one batch, meaning counts beyond shared words."""

from __future__ import annotations

import importlib.resources

import pytest

from compactor.text import semantic as sem


def test_the_table_ships_with_the_package_and_loads_once() -> None:
    ref = importlib.resources.files("compactor.text") / "data" / "vectors.en.npz"
    assert ref.is_file()
    found = sem.table()
    assert found is not None and sem.table() is found
    vocab, vectors = found
    assert "film" in vocab and vectors.shape == (len(vocab), vectors.shape[1])


def test_a_paraphrase_is_closer_than_an_unrelated_sentence() -> None:
    sims = sem.similarities("Who directed the film?", [
        "The movie was made by a famous director.",
        "The shark is a large fish that lives in the ocean.",
    ])
    assert sims is not None and sims[0] > sims[1] + 0.1


def test_unknown_words_split_into_pieces_and_han_text_has_no_rows() -> None:
    vocab = sem.table()[0]  # type: ignore[index]
    assert len(sem.rows_of("unbelievableness", vocab)) >= 2
    assert sem.rows_of("北京大学", vocab) == []


def test_a_text_without_known_words_embeds_as_zeros() -> None:
    vectors = sem.embed(["", "北京", "river"])
    assert vectors is not None
    assert not vectors[0].any() and not vectors[1].any()
    assert vectors[2] @ vectors[2] == pytest.approx(1.0, abs=1e-4)


def test_sums_add_up_over_texts() -> None:
    parts = sem.sums(["The river floods.", "The bridge opened."])
    whole = sem.sums(["The river floods. The bridge opened."])
    assert parts is not None and whole is not None
    assert parts.sum(axis=0) == pytest.approx(whole[0], abs=1e-4)


def test_sums_in_blocks_equal_one_by_one() -> None:
    texts = [f"river {k} " * (k % 5) + "bridge" * (k % 3) for k in range(150)]
    together = sem.sums(texts)
    alone = [sem.sums([t]) for t in texts]
    assert together is not None and all(a is not None for a in alone)
    for k, one in enumerate(alone):
        assert together[k] == pytest.approx(one[0], abs=1e-5)  # type: ignore[index]


def test_without_the_table_the_engine_still_scores(monkeypatch: pytest.MonkeyPatch) -> None:
    from compactor.text import relevance as rel

    monkeypatch.setattr(sem, "sums", lambda texts: None)
    import compactor

    out = compactor.compress("The bridge opened in 1932. Fish swim. Birds fly over the hills today.",
                             query="When did the bridge open?", budget=10, pipeline="qa")
    assert "1932" in out
    texts = ["The movie was made by a young director from Ohio.", "Tickets were sold at the door."]
    chunks = [compactor.Chunk(f"c{i}", "s", i, 0, len(t), t, 8) for i, t in enumerate(texts)]
    # with the table the film sentence scores on meaning alone; without it nothing does
    assert rel.score_chunks("Who filmed it?", chunks, [], rel.Settings(semantic=0.2)).values == [0.0, 0.0]
