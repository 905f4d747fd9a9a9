"""validate.loss counts each item once and looks for all of them in one pass over the kept text; what
it reports is what the plain definition (a set of items per chunk, a substring search per item) says."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

import pytest

from compactor import kit
from compactor.components import score_value
from compactor.document import Chunk, Context, Segment
from compactor.kit import CATEGORY_WEIGHTS, loss_report
from compactor.text import terms as ts
from compactor.text.relevance import index_terms

WORDS = ["the", "pump", "valve", "restarted", "at", "noon", "after", "Paris", "London", "Edwards", "Ward",
         "NASA", "HTTP", "getUserName", "user_id", "config.yaml", "os.path.join", "1,000", "45%",
         "1.2 million", "May 1, 2024", "2013年", "“关键词”", "迁移", "失败", "ΟΔΟΣ", "Σίσυφος", "𝄞music",
         "`x = 1`", "3.14", "$20", "engine", "engines", "running", "ran"]


def _plain_report(context: Context, min_retention: float = 0.5, important: float = 0.8) -> dict[str, Any]:
    """The definition, written the direct way."""
    chunks = list(context.chunks)
    kept_text = "\n".join(s.text for s in context.segments) if context.segments else (context.output or "")
    kept_terms = set(index_terms(kept_text))
    kept_numbers = ts.numbers(kept_text)
    kept_lower = kept_text.lower()

    def in_kept(item: str) -> bool:
        return item.lower() in kept_lower

    weight = {c.id: score_value(c, "combined", 1.0) for c in chunks}
    chunk_terms = {c.id: index_terms(c.text) for c in chunks}
    sig = {c.id: ts.signals(c.text) for c in chunks}
    query = set(index_terms(context.query or ""))
    df: Counter[str] = Counter()
    for terms in chunk_terms.values():
        df.update(set(terms))
    n = len(chunks) or 1
    tf: Counter[str] = Counter(t for terms in chunk_terms.values() for t in terms)
    keywords = {t for t, _ in sorted(tf.items(), key=lambda kv: -kv[1] * (1 + (n / df[kv[0]]) ** 0.5))[:30]}

    def category(items_by_chunk: Mapping[str, Any], present: Callable[[str], bool]) -> dict[str, Any]:
        best: dict[str, float] = {}
        for cid, items in items_by_chunk.items():
            for item in items:
                best[item] = max(best.get(item, 0.0), weight.get(cid, 1.0))
        total = sum(best.values())
        if not best or total <= 0:
            return {"retention": 1.0, "items": 0, "kept": 0, "lost": []}
        kept = {item for item in best if present(item)}
        lost = sorted((i for i in best if i not in kept), key=lambda i: -best[i])
        return {"retention": round(sum(best[i] for i in kept) / total, 4), "items": len(best),
                "kept": len(kept), "lost": lost[:10]}

    categories = {
        "query_terms": category({c: query & set(t) for c, t in chunk_terms.items()}, kept_terms.__contains__),
        "keywords": category({c: keywords & set(t) for c, t in chunk_terms.items()}, kept_terms.__contains__),
        "technical_terms": category({c: s.identifiers | s.acronyms for c, s in sig.items()}, in_kept),
        "numbers_dates": category({c: s.numbers | s.dates for c, s in sig.items()},
                                  lambda i: i in kept_numbers or in_kept(i)),
        "entities": category({c: s.entities for c, s in sig.items()}, in_kept),
        "structure": category({c: s.structure for c, s in sig.items()}, in_kept),
    }
    used = {k: v for k, v in categories.items() if v["items"]}
    total_w = sum(CATEGORY_WEIGHTS[k] for k in used)
    retention = (sum(CATEGORY_WEIGHTS[k] * v["retention"] for k, v in used.items()) / total_w
                 if total_w else 1.0)
    kept_ids = {cid for s in context.segments for cid in s.chunk_ids}
    important_lost = any(score_value(c, "importance") >= important for c in chunks if c.id not in kept_ids)
    shift = 0.1 if important_lost else 0.0
    level = ("minimal" if retention >= 0.75 + shift else "acceptable" if retention >= 0.55 + shift
             else "moderate" if retention >= 0.35 + shift else "severe")
    return {"level": level, "retention": round(retention, 4), "passed": retention >= min_retention,
            "important_lost": important_lost, "categories": categories}


def _context(rng: random.Random) -> Context:
    """Sentences of a small vocabulary (many ties, repeated names), random scores, a repeated chunk id,
    and a kept text made of whole, cut and changed chunks."""
    chunks = []
    for i in range(rng.randint(1, 120)):
        text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 14)))
        if rng.random() < 0.1:
            text = "# " + text + "\n" + " ".join(rng.choice(WORDS) for _ in range(5))
        scores = {}
        if rng.random() < 0.9:
            scores["combined"] = rng.choice([0.0, -0.2, float("nan"), 0.5, 1.0, round(rng.random(), 2)])
        if rng.random() < 0.5:
            scores["score.importance"] = round(rng.random(), 2)
        chunk_id = f"s-{i:04d}" if rng.random() < 0.97 else "s-0000"
        chunks.append(Chunk(id=chunk_id, source_id="s", index=i, start=0, end=len(text), text=text, tokens=5,
                            scores=scores))
    kept = [c for c in chunks if rng.random() < 0.3]
    pieces = []
    for c in kept:
        cut = rng.random()
        pieces.append(c.text if cut < 0.6 else c.text[: len(c.text) // 2] if cut < 0.8 else c.text.upper())
    segment = Segment(id="seg", text=" ".join(pieces), chunk_ids=tuple(c.id for c in kept))
    query = " ".join(rng.choice(WORDS) for _ in range(rng.randint(0, 4)))
    if rng.random() < 0.2:
        return Context(chunks=tuple(chunks), query=query, output=segment.text)
    return Context(chunks=tuple(chunks), query=query, segments=(segment,) if kept else ())


@pytest.mark.parametrize(("numpy_from", "index_from"),
                         [(0, 0), (10**9, 10**12), (kit._NUMPY_FROM, kit._INDEX_FROM)])
def test_the_report_is_the_plain_definition(monkeypatch: pytest.MonkeyPatch, numpy_from: int,
                                            index_from: int) -> None:
    monkeypatch.setattr(kit, "_NUMPY_FROM", numpy_from)  # 0: terms and items are counted in numpy
    monkeypatch.setattr(kit, "_INDEX_FROM", index_from)  # 0: every search goes through the 3-gram index
    rng = random.Random(30)
    for _ in range(60):
        context = _context(rng)
        for important in (0.0, 0.8):
            assert loss_report(context, 0.5, important) == _plain_report(context, 0.5, important)


def test_an_item_of_a_kept_chunk_is_looked_for_too() -> None:
    # a chunk named by the kept segment is not kept whole: the sentence cut from it loses its name
    text = "Pumps failed twice. Then Alice Moreau fixed them."
    chunk = Chunk(id="s-0000", source_id="s", index=0, start=0, end=len(text), text=text, tokens=12)
    segment = Segment(id="seg", text="Pumps failed twice.", chunk_ids=("s-0000",))
    entities = loss_report(Context(chunks=(chunk,), segments=(segment,)))["categories"]["entities"]
    assert "Alice Moreau" in entities["lost"]


@pytest.mark.parametrize("spread", [0, 1, 3, 256])
def test_the_three_gram_index_finds_what_a_substring_search_finds(monkeypatch: pytest.MonkeyPatch,
                                                                 spread: int) -> None:
    monkeypatch.setattr(kit._ThreeGrams, "_SPREAD", spread)  # 0: every item is searched for directly
    rng = random.Random(spread)
    for alphabet in ("ab", "abc ", "aé€𝄞 b", "ab\x00\U0010ffff", "中文字 ab"):
        for size in (3, 5, 40, 400):
            text = "".join(rng.choice(alphabet) for _ in range(size))
            items = []
            for _ in range(60):
                if rng.random() < 0.5:
                    start = rng.randrange(len(text))
                    items.append(text[start:start + rng.randint(0, 12)])
                else:
                    items.append("".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12))))
            assert kit._ThreeGrams(text).occur(items) == [item in text for item in items]
