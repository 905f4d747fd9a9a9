"""llm.fallback: ask an LLM to compress when the rules fall short, and keep its reply only if it is safe.

The rule output stays unless the reply passes every check of the LLM guard (`compactor.llm.guard`):
non-empty, within the budget (also the `max_tokens` sent to the endpoint), no refusal, injection or
chat-template text the input lacks, no number, date, URL, email or name the input lacks, and at least
`min_coverage` of the input's weighted key content kept. Anything else (no LLM configured, an endpoint
error, a rejected reply) keeps the rule output, says why in the step's report and, for a rejection,
warns on stderr.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from compactor.components import Component, DataPath, param, score_value
from compactor.document import Chunk, Context, Segment, frozen_mapping
from compactor.errors import LLMError
from compactor.hookspecs import hookimpl
from compactor.kit import fill, template_for, usable
from compactor.llm import guard as llm_guard
from compactor.llm.client import LLMClient, LLMSettings
from compactor.run import Run
from compactor.text.language import is_chinese

Policy = Literal["explicit", "severe_loss", "important"]
#: A chunk at least this important (score `score.importance`) makes the `important` policy call the LLM.
IMPORTANT = 0.8


def is_important(chunk: Chunk) -> bool:
    """Whether classify/score marked a chunk as critical."""
    labels = chunk.labels
    return (score_value(chunk, "importance") >= IMPORTANT or labels.get("critical") is True
            or "critical" in (labels.get("importance"), labels.get("priority"), labels.get("type")))


class LLMFallback(Component):
    """Replaces the rule output with an LLM summary when asked, only if the guard accepts it.

    Policies: `explicit` runs whenever the step runs (gate it with `when:`), `severe_loss` only after
    a validate step reported level "severe", `important` only when a chunk is marked critical. The
    summary is one segment citing every chunk the LLM read; it keeps no character offsets (a summary
    cannot), and its metadata says `llm: true`. The reply's allowance is the budget (else the
    pipeline's `llm.max_tokens`); `min_coverage` (default 0.25, in [0, 1]) is the weighted share of
    the input's key content (query terms, numbers, names, frequent terms) the reply must keep.
    """

    name = "llm.fallback"
    stage = "fallback"
    requires = ("chunks",)
    provides = ("segments",)

    policy: Policy = param("explicit", doc="when the fallback runs")
    prompt: DataPath | None = param(None, doc="a prompt file with a {content} placeholder")
    language: Literal["auto", "en", "zh"] = param("auto", doc="the prompt's language")
    max_input_tokens: int = param(12000, gt=0, doc="tokens of chunks the LLM reads at most")
    min_coverage: float = param(llm_guard.DEFAULT_MIN_COVERAGE, ge=0, le=1,
                                doc="share of the input's key content the reply must keep")

    def check(self) -> list[str]:
        """The prompt file must be readable and hold the content placeholder."""
        problems: list[str] = []
        if self.prompt is not None:
            path = Path(self.prompt)
            try:
                text = path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                problems.append(f"cannot read prompt file {str(path)!r}: {exc}")
            else:
                if "{content}" not in text:
                    problems.append(f"prompt file {str(path)!r} has no {{content}} placeholder")
        return problems

    @hookimpl
    def compactor_fallback(self, context: Context, run: Run) -> Context | None:
        why_not = self._policy_says_no(context, run)
        if why_not:
            self._decline(run, why_not)
            return None
        settings = LLMSettings.from_mapping(run.settings.get("llm") or {})
        if not settings.configured:
            self._decline(run, "no LLM configured")
            return None
        chunks = self._input_chunks(context, run)
        if not chunks:
            self._decline(run, f"no chunk fits max_input_tokens={self.max_input_tokens}")
            return None
        content = "\n\n".join(f"[{c.id}] {c.text.strip()}" for c in chunks)
        allowance = context.resolved_budget() or settings.max_tokens
        lang = self._lang(chunks)
        prompt = fill(self._template(lang), query=context.query or ("（无）" if lang == "zh" else "(none)"),
                      budget=str(allowance), content=content)
        run.note("model", settings.model)
        run.note("input_chunks", len(chunks))
        run.note("language", lang)
        try:
            deadline = run.step.deadline_for(settings.deadline) if run.step is not None else None
            with LLMClient(settings, deadline_at=deadline) as client:
                reply = client.complete([{"role": "user", "content": prompt}],
                                        temperature=settings.temperature, max_tokens=allowance)
        except LLMError as exc:
            run.note("error", str(exc))
            run.note("reason", exc.reason)
            run.warn(f"{self.name}: LLM call failed, rule output kept: {exc}")
            return None
        verdict = llm_guard.review(reply, content, max_tokens=allowance, counter=run.counter,
                                   query=context.query, min_coverage=self.min_coverage,
                                   basis="\n\n".join(c.text for c in chunks))
        if verdict.tokens is not None:
            run.note("reply_tokens", verdict.tokens)
        if verdict.coverage is not None:
            run.note("coverage", verdict.coverage.share)
        if verdict.invented:
            run.note("invented", list(verdict.invented))
        if verdict.instructions:
            run.note("instructions", list(verdict.instructions))
        if not verdict.accepted:
            reason = "; ".join(verdict.problems)
            run.note("rejected", reason)
            run.note("accepted", False)
            llm_guard.report_rejections(run, self.name, [reason])
            return None
        run.note("accepted", True)
        reply = reply.strip()
        tokens = verdict.tokens if verdict.tokens is not None else run.counter.count(reply)
        segment = Segment(id="llm-fallback", text=reply, chunk_ids=tuple(c.id for c in chunks),
                          title="LLM summary", tokens=tokens,
                          metadata=frozen_mapping({"model": settings.model, "llm": True}))
        return context.evolve(segments=(segment,))

    # -- helpers -----------------------------------------------------------------------------------

    def _decline(self, run: Run, reason: str) -> None:
        run.note("declined", reason)
        run.note("reason", reason)  # the pipeline overwrites "declined" with True when we return None
        return None

    def _policy_says_no(self, context: Context, run: Run) -> str | None:
        if self.policy == "severe_loss":
            severe = [name for name, report in run.results.items() if report.get("level") == "severe"]
            return None if severe else "policy severe_loss: no validate step reported a severe loss"
        if self.policy == "important":
            if any(is_important(c) for c in context.chunks):
                return None
            return "policy important: no chunk is marked critical"
        return None

    def _input_chunks(self, context: Context, run: Run) -> list[Chunk]:
        """Every chunk if they fit `max_input_tokens`, else the most valuable ones (those the rules
        kept first, then by score), always in source order."""
        order = {s.id: i for i, s in enumerate(context.sources)}
        clean = usable(context, run)[1]  # what classify.injection flagged never reaches the LLM
        chunks = sorted(clean, key=lambda c: (order.get(c.source_id, len(order)), c.index))
        costs = run.counter.count_many([f"[{c.id}] {c.text.strip()}\n\n" for c in chunks])
        if sum(costs) <= self.max_input_tokens:
            return chunks
        kept = {cid for s in context.segments for cid in s.chunk_ids}
        ranked = sorted(range(len(chunks)), key=lambda i: (chunks[i].id not in kept,
                                                           -score_value(chunks[i], "combined"), i))
        chosen: set[int] = set()
        used = 0
        for i in ranked:
            if used + costs[i] <= self.max_input_tokens:
                chosen.add(i)
                used += costs[i]
        run.note("input_truncated", True)
        return [chunks[i] for i in sorted(chosen)]

    def _lang(self, chunks: list[Chunk]) -> str:
        if self.language != "auto":
            return self.language
        return "zh" if is_chinese(c.text for c in chunks) else "en"

    def _template(self, lang: str) -> str:
        return template_for(self.prompt, "fallback", lang)
