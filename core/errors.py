"""One exception tree for everything compactor raises on purpose.

    CompactorError
    ├── ConfigError        a pipeline file or option is wrong (exit code 2)
    ├── InputError         an input file or stream cannot be read (exit code 2)
    │   └── StoreError     a --store file is not a usable compactor store (exit code 2)
    │       └── StoreConflict  a session changed under a batch (retried by the compacter)
    ├── PluginError        a plugin failed to load or a component is unknown
    ├── StageError         a component failed while running a step (exit code 1)
    ├── BudgetError        the budget cannot hold any output (exit code 2)
    ├── FidelityError      kept content does not trace back to original chunks
    ├── ConditionError     a `when:` expression is outside the grammar (also a ValueError)
    └── LLMError           an LLM call failed; `reason` says how, `retryable` whether to try again

    CompactorWarning (a UserWarning)  degraded but working: an approximation or fallback is in use

Every error compactor raises on purpose is here, so `except compactor.CompactorError` catches them all
and the CLI maps each to its exit code.
"""

from __future__ import annotations

from dataclasses import dataclass


class CompactorError(Exception):
    """Base class: a user-facing failure with a message worth printing as is."""

    exit_code = 1


@dataclass(frozen=True, slots=True)
class Problem:
    """One located problem in a configuration file."""

    message: str
    file: str | None = None
    line: int | None = None
    column: int | None = None
    field: str | None = None

    def __str__(self) -> str:
        if self.file is None:  # an option or argument, not a place in a file
            return f"{self.field}: {self.message}" if self.field else self.message
        where = self.file
        if self.line is not None:
            where += f":{self.line}"
            if self.column is not None:
                where += f":{self.column}"
        field = f" {self.field}:" if self.field else ""
        return f"{where}:{field} {self.message}"


class ConfigError(CompactorError):
    """Pipeline configuration problems, all of them at once."""

    exit_code = 2

    def __init__(self, problems: list[Problem] | Problem | str) -> None:
        if isinstance(problems, str):
            problems = [Problem(problems)]
        elif isinstance(problems, Problem):
            problems = [problems]
        self.problems = list(problems)
        count = len(self.problems)
        head = "" if count == 1 else f"{count} problems in pipeline configuration:\n"
        super().__init__(head + "\n".join(str(p) for p in self.problems))


class InputError(CompactorError):
    """An input cannot be read or has no usable text."""

    exit_code = 2


class StoreError(InputError):
    """The chunk store file cannot be used: not a compactor store, newer, read-only, corrupted, busy.

    An InputError, so code that caught store failures as input errors keeps working."""

    exit_code = 2


class StoreConflict(StoreError):
    """A session's knowledge changed between the read and the write of a batch (another writer
    that did not hold the session lock); the batch must be computed again."""


class PluginError(CompactorError):
    """A plugin could not be loaded, or a component name is unknown or taken."""

    exit_code = 2


class StageError(CompactorError):
    """A component raised while running its step."""

    exit_code = 1


class BudgetError(CompactorError):
    """The budget cannot hold any output: the system messages and a one-line summary of a
    conversation, or the smallest unit a pipeline keeps. A usage error: ask for more tokens."""

    exit_code = 2


class FidelityError(CompactorError):
    """Kept content cannot be traced back to original chunks."""

    exit_code = 1


class ConditionError(CompactorError, ValueError):
    """A `when:` expression is outside the grammar; the message says which part. Also a ValueError,
    as it was before it joined the tree."""

    exit_code = 2


#: LLM failures worth trying again later (rate limits, server errors, network trouble).
RETRYABLE = frozenset({"rate_limited", "server_error", "timeout", "connection"})


class LLMError(CompactorError):
    """An LLM call failed; `reason` says how (timeout, rate_limited, server_error, malformed, ...)."""

    exit_code = 1

    def __init__(self, message: str, *, reason: str, status: int | None = None, attempts: int = 1) -> None:
        super().__init__(message)
        self.reason = reason
        self.status = status
        self.attempts = attempts

    @property
    def retryable(self) -> bool:
        """Whether trying again later may succeed (rate limits, server errors, network trouble)."""
        return self.reason in RETRYABLE

    def __repr__(self) -> str:
        return f"LLMError({str(self)!r}, reason={self.reason!r}, status={self.status!r})"


class CompactorWarning(UserWarning):
    """Degraded but working: an approximation or fallback is in use."""
