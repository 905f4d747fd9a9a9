"""compress.select: one template filled with many names shares its credit, so other answers get in."""

from __future__ import annotations

import random

from compactor import Pipeline

FIRST = ["Anna", "Tom", "Marta", "Paul", "Ines", "Karl", "Lena", "Oscar", "Rosa", "Viktor", "Greta", "Felix"]
LAST = ["Berg", "Novak", "Keller", "Moreau", "Lund", "Costa", "Fischer", "Horvat", "Jensen", "Bauer"]
NEEDLE = "Ivo Duarte founded the Orla choir in 1962 with a handful of friends."


def text_with_templates(count: int) -> str:
    """`count` records of one template, all naming the choir, and the needle in the middle."""
    rng = random.Random(1)
    lines = [f"{rng.choice(FIRST)} {rng.choice(LAST)} joined the Orla choir in {rng.randrange(1950, 2024)}."
             for _ in range(count)]
    lines.insert(count // 2, NEEDLE)
    return " ".join(lines)


def pipeline(templates: float) -> Pipeline:
    return Pipeline.from_string(
        "version: 1\nsteps:\n  - use: chunk.sentences\n    with: {size: 160, pack: false}\n"
        "  - use: score.relevance\n"
        f"  - use: compress.select\n    with: {{redundancy: 0.0, templates: {templates}}}\n")


def test_needle_among_templated_records_is_kept() -> None:
    context = pipeline(0.7).run(text_with_templates(200), query="Who started the Orla choir?", budget=120)
    assert context.output is not None
    assert "Ivo Duarte" in context.output


def test_without_the_discount_the_template_fills_the_budget() -> None:
    """The same input with the discount off: the records tie with the needle and fill the budget
    first (this is what the discount is for)."""
    context = pipeline(1.0).run(text_with_templates(200), query="Who started the Orla choir?", budget=120)
    assert context.output is not None
    assert "Ivo Duarte" not in context.output
    assert context.output.count("joined the Orla choir") >= 5


def test_discount_keeps_order_and_plain_text_unchanged() -> None:
    """Text without templates ranks the same with or without the discount."""
    text = ("The migration failed at step three because the disk was full. The weather in Paris was sunny. "
            "Engineers freed 200 GB and the migration finished at 14:00. A cat slept on the keyboard.")
    on = pipeline(0.7).run(text, query="why did the migration fail", budget=30).output
    off = pipeline(1.0).run(text, query="why did the migration fail", budget=30).output
    assert on == off
