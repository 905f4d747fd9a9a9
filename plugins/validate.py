"""validate.loss and validate.ratio: measure what compression lost, and retry when it lost too much.

Loss is weighted by value: an item (a query term, a number, a name...) counts as much as the most
valuable chunk it occurs in, so dropping low-value chunks costs little and dropping the one chunk
with the answer costs a lot. Without scores every item weighs the same.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from collections.abc import Set as AbstractSet
from typing import Any

from compactor.components import Component, param, score_value
from compactor.document import Chunk, Context
from compactor.hookspecs import hookimpl
from compactor.run import Run
from compactor.state import BudgetShare, LossReport
from compactor.text import terms as ts
from compactor.text.relevance import index_terms

LEVELS = ("minimal", "acceptable", "moderate", "severe")
CATEGORY_WEIGHTS = {"query_terms": 0.3, "keywords": 0.2, "technical_terms": 0.15,
                    "numbers_dates": 0.15, "entities": 0.1, "structure": 0.1}


def _weights(chunks: Iterable[Chunk]) -> dict[str, float]:
    return {c.id: score_value(c, "combined", 1.0) for c in chunks}


def _category(items_by_chunk: Mapping[str, AbstractSet[str]], weight: dict[str, float],
              present: Callable[[str], bool]) -> dict[str, Any]:
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


def loss_report(context: Context, min_retention: float = 0.5,
                important: float = 0.8) -> dict[str, Any]:
    """Retention per category, overall retention and a level: minimal, acceptable, moderate, severe."""
    chunks = list(context.chunks)
    kept_text = "\n".join(s.text for s in context.segments) if context.segments else (
        context.output or "")
    kept_terms = set(index_terms(kept_text))
    kept_numbers = ts.numbers(kept_text)
    kept_lower = kept_text.lower()
    in_kept = _finder(kept_lower)
    weight = _weights(chunks)
    chunk_terms = {c.id: index_terms(c.text) for c in chunks}
    sig = {c.id: ts.signals(c.text) for c in chunks}
    query = set(index_terms(context.query or ""))
    df: Counter[str] = Counter()
    for terms in chunk_terms.values():
        df.update(set(terms))
    n = len(chunks) or 1
    tf: Counter[str] = Counter(t for terms in chunk_terms.values() for t in terms)
    keywords = {t for t, _ in sorted(tf.items(), key=lambda kv: -kv[1] * (1 + (n / df[kv[0]]) ** 0.5))
                [:30]} if tf else set()
    categories = {
        "query_terms": _category({cid: query & set(t) for cid, t in chunk_terms.items()}, weight,
                                 lambda i: i in kept_terms),
        "keywords": _category({cid: keywords & set(t) for cid, t in chunk_terms.items()}, weight,
                              lambda i: i in kept_terms),
        "technical_terms": _category(
            {cid: s.identifiers | s.acronyms for cid, s in sig.items()},
            weight, in_kept),
        "numbers_dates": _category(
            {cid: s.numbers | s.dates for cid, s in sig.items()},
            weight, lambda i: i in kept_numbers or in_kept(i)),
        "entities": _category({cid: s.entities for cid, s in sig.items()}, weight, in_kept),
        "structure": _category({cid: s.structure for cid, s in sig.items()}, weight, in_kept),
    }
    used = {k: v for k, v in categories.items() if v["items"]}
    total_w = sum(CATEGORY_WEIGHTS[k] for k in used)
    retention = (sum(CATEGORY_WEIGHTS[k] * v["retention"] for k, v in used.items()) / total_w
                 if total_w else 1.0)
    kept_ids = _kept_ids(context)
    important_lost = any(score_value(c, "importance") >= important for c in chunks if c.id not in kept_ids)
    shift = 0.1 if important_lost else 0.0
    if retention >= 0.75 + shift:
        level = "minimal"
    elif retention >= 0.55 + shift:
        level = "acceptable"
    elif retention >= 0.35 + shift:
        level = "moderate"
    else:
        level = "severe"
    return {"level": level, "retention": round(retention, 4), "passed": retention >= min_retention,
            "important_lost": important_lost, "categories": categories}


_GRAM = 4


def _finder(kept_lower: str) -> Callable[[str], bool]:
    """Whether an item occurs (case-insensitively) in the kept text. An item with a 4-character
    piece the kept text does not have is absent without a scan of the kept text (most lost items);
    the others are confirmed by the scan, so the answer is exact."""
    grams = {kept_lower[i:i + _GRAM] for i in range(len(kept_lower) - _GRAM + 1)}

    def present(item: str) -> bool:
        low = item.lower()
        step = _GRAM
        if len(low) >= _GRAM and any(low[i:i + _GRAM] not in grams
                                     for i in range(0, len(low) - _GRAM + 1, step)):
            return False
        return low in kept_lower

    return present


def _kept_ids(context: Context) -> set[str]:
    return {cid for s in context.segments for cid in s.chunk_ids}


class LossValidator(Component):
    """Reports what compression kept of the query terms, keywords, technical terms, numbers and
    dates, named entities and structure (headings, code), weighted by chunk value, with a level
    (minimal / acceptable / moderate / severe) and `passed` against `min_retention`."""

    name = "validate.loss"
    stage = "validate"
    requires = ("chunks",)
    provides = (LossReport,)

    min_retention: float = param(0.5, doc="the retention below which the report fails")
    important: float = param(0.8, doc="the score from which a chunk counts as important")

    @hookimpl
    def compactor_validate(self, context: Context, run: Run) -> dict[str, Any]:
        return loss_report(context, self.min_retention, self.important)


class RatioController(Component):
    """Bounded retries: when `validate.loss` says the loss is too high, compress again with a larger
    share of the budget; when the kept text is over budget, compress again with a smaller share;
    when it fills less than `min_fill` of the budget (the seed's controller keeps a ratio between
    0.3 and 0.9), again with a larger share and a request to fill (`BudgetShare.fill`: a history
    compressor keeps more turns verbatim). Every attempt is reported; after `max_attempts` the last
    result stands."""

    name = "validate.ratio"
    stage = "validate"
    requires = ("segments",)
    provides = (BudgetShare,)

    max_attempts: int = param(2, ge=0, le=10, doc="retries at most")
    step: float = param(0.15, gt=0, le=1, doc="how much the budget share changes per retry")
    expand_on: list[str] | None = param(None, choices=LEVELS,
                                        doc="loss levels that ask for a larger share (default: severe)")
    min_fill: float = param(0.0, ge=0, lt=1, doc="the share of the budget the result must fill")

    @property
    def levels(self) -> list[str]:
        """The loss levels that ask for a larger share."""
        return list(self.expand_on) if self.expand_on is not None else ["severe"]

    @hookimpl
    def compactor_validate(self, context: Context, run: Run) -> dict[str, Any]:
        given = context.state.get(BudgetShare, BudgetShare())
        share = float(given.share)
        attempts = [dict(a) for a in given.attempts]
        budget = context.resolved_budget()
        tokens = context.tokens
        found = context.state.get(LossReport)
        loss = found.values if found is not None else loss_report(context)
        attempt = {"share": share, "tokens": tokens, "level": loss.get("level"),
                   "retention": loss.get("retention")}
        attempts.append(attempt)
        report: dict[str, Any] = {"attempts": attempts, "share": share, "action": "accept"}
        if len(attempts) > self.max_attempts:
            report["action"] = "give_up" if loss.get("level") in self.levels else "accept"
            return report
        if budget is not None and tokens > budget:
            report.update(action="tighten", retry={"budget_share": round(share * budget / tokens * 0.97, 4),
                                                   "ratio_attempts": attempts})
        elif loss.get("level") in self.levels and share < 1.0:
            report.update(action="expand", retry={"budget_share": min(1.0, round(share + self.step, 4)),
                                                  "ratio_attempts": attempts})
        elif budget is not None and tokens < self.min_fill * budget:
            # under-filled: a larger share, or (at the whole budget) more kept verbatim
            report.update(action="fill", retry={"budget_share": min(1.0, round(share + self.step, 4)),
                                                "ratio_attempts": attempts, "fill": self.min_fill})
        return report
