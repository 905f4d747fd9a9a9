"""validate.loss and validate.ratio: measure what compression lost, and retry when it lost too much.

The measure is `compactor.kit.loss_report` (compress.eight_segment measures its drafts with it too):
loss is weighted by value, an item (a query term, a number, a name...) counts as much as the most
valuable chunk it occurs in, so dropping low-value chunks costs little and dropping the one chunk
with the answer costs a lot. Without scores every item weighs the same.
"""

from __future__ import annotations

from typing import Any

from compactor.components import Component, param
from compactor.document import Context
from compactor.hookspecs import hookimpl
from compactor.kit import CATEGORY_WEIGHTS as CATEGORY_WEIGHTS  # the loss measure, importable from here
from compactor.kit import LEVELS as LEVELS
from compactor.kit import loss_report as loss_report
from compactor.run import Run
from compactor.state import BudgetShare, LossReport


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
    when it fills less than `min_fill` of the budget (a ratio controller keeps a ratio between
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
