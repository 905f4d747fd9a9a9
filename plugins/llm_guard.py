"""One guarded LLM call for components that offer an optional LLM pass (fact extraction, rolling
summaries, map-reduce): the same settings, checks and reporting as `llm.fallback`.

A reply is used only when it is non-empty, fits its token limit and introduces no number, date, URL,
email or name that its input lacks; otherwise the caller keeps its rule output and the step report
says why (`llm_rejected`, `llm_error`, `llm_declined`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from compactor.fidelity import invented_facts
from compactor.llm import LLMClient, LLMError, LLMSettings
from compactor.run import Run


@dataclass(frozen=True, slots=True)
class Request:
    """One prompt, the text its answer must stay faithful to, and the answer's token limit."""

    prompt: str
    source: str
    max_tokens: int | None = None


def settings_for(run: Run) -> LLMSettings | None:
    """The pipeline's LLM settings, or None (noted in the step report) when none is configured."""
    settings = LLMSettings.from_mapping(run.settings.get("llm") or {})
    if not settings.configured:
        run.note("llm_declined", "no LLM configured")
        return None
    return settings


def check(reply: str, request: Request, run: Run) -> list[str]:
    """Why a reply cannot be used (empty when it can)."""
    problems = []
    if not reply.strip():
        problems.append("empty reply")
    invented = invented_facts(reply, request.source)
    if invented:
        problems.append(f"invented facts not in the input: {', '.join(invented)}")
    if request.max_tokens is not None and (tokens := run.counter.count(reply)) > request.max_tokens:
        problems.append(f"reply has {tokens} tokens, over the limit of {request.max_tokens}")
    return problems


def complete_guarded(requests: Sequence[Request], run: Run, *, check_reply: bool = True,
                     ) -> list[str | None]:
    """Send every request (bounded concurrency, retries as configured); each result is the checked
    reply or None. Rejections and errors are listed in the step report."""
    settings = settings_for(run)
    if settings is None:
        return [None] * len(requests)
    run.note("llm_model", settings.model)
    try:
        with LLMClient(settings) as client:
            replies = client.complete_many([[{"role": "user", "content": r.prompt}] for r in requests],
                                           temperature=settings.temperature, max_tokens=settings.max_tokens)
    except LLMError as exc:  # pragma: no cover - complete_many returns errors per request
        run.note("llm_error", str(exc))
        return [None] * len(requests)
    results: list[str | None] = []
    rejected: list[str] = []
    errors: list[str] = []
    for i, (request, reply) in enumerate(zip(requests, replies, strict=True)):
        if isinstance(reply, LLMError):
            errors.append(f"request {i}: {reply}")
            results.append(None)
            continue
        problems = check(reply, request, run) if check_reply else []
        if problems:
            rejected.append(f"request {i}: {'; '.join(problems)}")
            results.append(None)
        else:
            results.append(reply.strip())
    run.note("llm_calls", len(requests))
    run.note("llm_accepted", sum(r is not None for r in results))
    if rejected:
        run.note("llm_rejected", rejected)
    if errors:
        run.note("llm_error", errors)
        run.warn(f"{len(errors)} LLM call(s) failed; rule output kept for them")
    return results
