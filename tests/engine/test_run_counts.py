"""Token counts through a run: the input encoded once, step reports unchanged, the glue between steps,
and the warm-up a server calls at start-up."""

from __future__ import annotations

import math
from typing import Any

import pytest

from compactor import Component, Pipeline, hookimpl
from compactor.components import ScoreSet
from compactor.document import Chunk, Context
from compactor.pipeline import _merge_scores, shipped_pipelines, warm_up
from compactor.text.tokens import TokenCounter, get_counter

# CR LF line ends, doubled spaces, trailing blanks and a repeated paragraph: every clean step rewrites
PARAGRAPHS = [
    f"Report {i}: the migration of shard {i} failed at 02:{i % 60:02d} because the disk was full.  "
    f"The team restored the backup \r\nand the service was back by 03:00 .   \n"
    f"Customers in region {i % 7} saw errors for {i} minutes; refunds go to the original card."
    for i in range(60)]
TEXT = "\n\n".join([*PARAGRAPHS, PARAGRAPHS[1], PARAGRAPHS[2]])


class _Spy:
    """A tiktoken encoding that notes the length of every text it encodes."""

    def __init__(self, real: Any) -> None:
        self._real = real
        self.calls: list[int] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def encode_ordinary(self, text: str) -> list[int]:
        self.calls.append(len(text))
        return self._real.encode_ordinary(text)  # type: ignore[no-any-return]

    def encode_ordinary_batch(self, texts: list[str]) -> list[list[int]]:
        return [self.encode_ordinary(t) for t in texts]


def _spied(pipeline: Pipeline) -> _Spy:
    spy = _Spy(pipeline.counter.encoding)
    pipeline.counter = TokenCounter(spy, pipeline.counter.requested)  # type: ignore[arg-type]
    return spy


def test_the_input_is_encoded_once_and_the_reports_keep_their_figures(
        monkeypatch: pytest.MonkeyPatch) -> None:
    pipeline = Pipeline.from_yaml("qa")
    spy = _spied(pipeline)
    context = pipeline.run(TEXT, query="why did the migration fail?", budget=300)
    whole = [n for n in spy.calls if n > len(TEXT) // 2]
    assert whole == [len(TEXT)], whole  # clean steps' rewrites and the chunker reuse that encode
    # the same run counting every text afresh (what each step report used to cost)
    monkeypatch.setattr(TokenCounter, "for_run", lambda self: self)
    plain = Pipeline.from_yaml("qa").run(TEXT, query="why did the migration fail?", budget=300)
    figures = [(r.step, r.tokens_in, r.tokens_out) for r in context.reports]
    assert figures == [(r.step, r.tokens_in, r.tokens_out) for r in plain.reports]
    assert figures[2][1] != figures[2][2] and figures[3][1] != figures[3][2]  # normalize, dedupe cut
    assert context.output == plain.output
    assert [s.tokens for s in context.sources] == [get_counter().count(s.text) for s in context.sources]


class Upper(Component):
    """Upper-cases every source without recording edits (a third-party cleaner's way)."""

    name = "test.upper"
    stage = "clean"

    @hookimpl
    def compactor_clean(self, context: Context, run: Any) -> Context:
        return context.evolve(sources=tuple(s.with_text(s.text.upper()) for s in context.sources))


class Offers:
    @staticmethod
    @hookimpl
    def compactor_register_components(register: Any) -> None:
        register(Upper)


def test_a_rewrite_without_recorded_edits_is_counted_afresh() -> None:
    pipeline = Pipeline.from_string("version: 1\nsteps:\n  - use: clean.normalize\n  - use: test.upper\n"
                                    "  - use: chunk.sentences\n", plugins=[Offers()])
    context = pipeline.run(TEXT)
    upper = context.sources[0].text
    assert upper.isupper() and context.sources[0].tokens == get_counter().count(upper)
    assert context.reports[1].tokens_out == get_counter().count(upper)


def test_merged_scores_are_clamped_to_0_1_and_combined_by_weight() -> None:
    chunks = tuple(Chunk(id=f"c{i}", source_id="s", index=i, start=i, end=i + 1, text="x", tokens=1)
                   for i in range(5))
    values = {"c0": -1.0, "c1": math.nan, "c2": 2.5, "c3": 0.25, "c4": math.inf}
    merged = _merge_scores(Context(chunks=chunks), [ScoreSet("a.x", values, {"c3": {"why": 1}}),
                                                    ScoreSet("b.y", {"c3": 0.75})], {"a.x": 3.0})
    assert [c.scores["a.x"] for c in merged.chunks] == [0.0, 0.0, 1.0, 0.25, 1.0]
    assert merged.chunks[3].scores["combined"] == (0.25 * 3 + 0.75) / 4
    assert merged.chunks[3].features["a.x"] == {"why": 1} and "b.y" not in merged.chunks[3].features
    assert "combined" in merged.chunks[0].scores and merged.chunks[4].features == {}


def test_warm_up_loads_every_shipped_pipeline_and_runs_none_that_may_call_a_model(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    ran: list[str] = []
    real = Pipeline.run

    def noted(self: Pipeline, *args: Any, **kwargs: Any) -> Context:
        ran.append(self.spec.name)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Pipeline, "run", noted)
    llm = tmp_path / "llm.yaml"
    llm.write_text("version: 1\nname: with-llm\nsteps:\n  - use: chunk.sentences\n"
                   "  - use: compress.summarization\n    with: {llm: true}\n", encoding="utf-8")
    warm_up([*shipped_pipelines(), llm])
    assert sorted(ran) == sorted(shipped_pipelines())  # conversation and transcripts get their inputs


def test_compactor_exports_warm_up() -> None:
    import compactor

    compactor.warm_up(("qa",))
    assert compactor.compress("Refunds go to the card. Pets travel in the hold.", query="refund",
                              budget=20, pipeline="qa")
