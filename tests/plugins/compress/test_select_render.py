"""compress.select and the renderers: budget used closely, never exceeded, provenance kept."""

from __future__ import annotations

import json

import pytest

from compactor import Pipeline, Source, get_counter
from compactor.plugins.render import fit

COUNTER = get_counter("cl100k_base")
ARTICLE = " ".join(f"Finding {i}: the cache hit rate rose to {50 + i}% after change {i}." for i in range(80))
ZH = "".join(f"第{i}项发现：缓存命中率在第{i}次修改后上升到百分之{50 + i}。" for i in range(60))


def pipeline(fmt: str, order: str = "position") -> Pipeline:
    fmt = fmt.removeprefix("render.")
    return Pipeline.from_string(
        "version: 1\nsteps:\n  - use: chunk.sentences\n    with: {size: 64}\n"
        f"  - use: compress.select\n    with: {{order: {order}}}\n  - use: render.{fmt}\n")


@pytest.mark.parametrize("fmt", ["render.text", "render.markdown"])
@pytest.mark.parametrize("budget", [40, 130, 333])
def test_select_uses_the_budget_closely_and_never_exceeds_it(fmt: str, budget: int) -> None:
    sources = [Source.from_text(ARTICLE, uri="https://a.example/report", title="Report A"),
               Source.from_text(ZH, uri="https://b.example/zh", title="报告 B")]
    context = pipeline(fmt).run(sources, budget=budget)
    assert context.output is not None
    tokens = COUNTER.count(context.output)
    assert tokens == context.output_tokens
    assert budget - 20 <= tokens <= budget  # within one sentence (~18 tokens) of the budget
    if fmt == "render.markdown":
        assert context.output.startswith("## Report A\n<https://a.example/report>")


def test_kept_text_traces_back_to_chunks() -> None:
    context = pipeline("text").run(ARTICLE, budget=200)
    [segment] = context.segments
    source = context.sources[0]
    spans = [context.chunk(cid) for cid in segment.chunk_ids]
    for piece in segment.text.split("\n\n[…]\n\n"):
        assert any(piece in source.text[c.start:c.end] or c.text.strip() in piece for c in spans)


def test_score_order_keeps_best_chunks_in_reading_order() -> None:
    from compactor import Component, ScoreSet, hookimpl

    class LastIsBest(Component):
        """Scores later chunks higher (test helper)."""

        name = "test.last_is_best"
        stage = "score"

        @hookimpl
        def compactor_score(self, context, run):  # type: ignore[no-untyped-def]
            n = len(context.chunks)
            return ScoreSet(self.name, {c.id: (i + 1) / n for i, c in enumerate(context.chunks)})

    class Plugin:
        @hookimpl
        def compactor_register_components(self, register):  # type: ignore[no-untyped-def]
            register(LastIsBest)

    text = " ".join(f"Sentence {i} is here." for i in range(200))
    p = Pipeline.from_string(
        "version: 1\nsteps:\n  - use: chunk.sentences\n    with: {size: 30}\n"
        "  - use: test.last_is_best\n  - use: compress.select\n", plugins=[Plugin()])
    context = p.run(text, budget=100)
    assert "Sentence 199 is here." in context.output
    assert "Sentence 0 is here." not in context.output
    numbers = [int(w) for w in context.output.replace(".", " ").split() if w.isdigit()]
    assert numbers == sorted(numbers)
    assert all(0 < c.scores["combined"] <= 1 for c in context.chunks)


def test_json_render_reports_provenance_and_kept_flags() -> None:
    context = pipeline("json").run(ARTICLE, budget=120)
    data = json.loads(context.output or "")
    kept = [c for c in data["chunks"] if c["kept"]]
    assert kept and len(kept) < len(data["chunks"])
    assert data["text_tokens"] <= 120


def test_fit_cuts_whole_parts_then_the_last_part() -> None:
    parts = ["alpha beta gamma. " * 20, "delta epsilon. " * 20, "zeta eta. " * 20]
    text = fit(parts, "\n\n", COUNTER, 70)
    assert 50 <= COUNTER.count(text) <= 70
    assert text.startswith(parts[0].rstrip()[:40])
    assert fit(parts, "\n\n", COUNTER, None) == "\n\n".join(parts)


def test_render_text_without_compress_fits_the_budget() -> None:
    p = Pipeline.from_string("version: 1\nsteps:\n  - use: chunk.tokens\n    with: {size: 64, overlap: 8}\n"
                             "  - use: render.text\n")
    context = p.run(ARTICLE, budget=90)
    assert 60 <= COUNTER.count(context.output or "") <= 90
