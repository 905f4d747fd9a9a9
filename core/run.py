"""The run journal handed to every stage hook next to the context."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from compactor.text.tokens import TokenCounter


@dataclass(slots=True)
class StepRecord:
    """Bookkeeping for the step being run; the observer wrapper fills in tokens and time."""

    index: int
    label: str
    stage: str
    tokens_in: int = 0
    tokens_out: int = 0
    seconds: float = 0.0
    calls: int = 0
    details: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    #: When the step's LLM calls must be done (monotonic clock), set by its first call.
    llm_deadline: float | None = None

    def deadline_for(self, seconds: float | None) -> float | None:
        """The step's overall LLM deadline: `seconds` from its first call, shared by later ones."""
        if seconds is None or seconds <= 0:
            return None
        if self.llm_deadline is None:
            self.llm_deadline = time.monotonic() + seconds
        return self.llm_deadline


@dataclass(slots=True)
class Run:
    """Per-run services and journal: what a component may need besides the context.

    `counter` is the pipeline's token counter (count with it, never with a private one, so every
    stage agrees on sizes); `note` and `warn` attach details and warnings to the current step's
    report; `results` holds the reports of earlier validate steps for `when:` conditions.
    """

    counter: TokenCounter
    pipeline: str = "<inline>"
    settings: Mapping[str, Any] = field(default_factory=dict)
    step: StepRecord | None = None
    results: dict[str, Mapping[str, Any]] = field(default_factory=dict)
    trace: bool = False
    #: The label of the step that raised, when a run fails in a step (for run observers).
    failed_step: str | None = None

    def note(self, key: str, value: Any) -> None:
        """Record a detail in the current step's report."""
        if self.step is not None:
            self.step.details[key] = value

    def warn(self, message: str) -> None:
        """Record a warning in the current step's report."""
        if self.step is not None:
            self.step.warnings.append(message)
