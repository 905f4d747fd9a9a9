"""The LLM-written research report: the model writes from the footnoted findings, and its reply is
used only when the guard accepts it and every footnote it cites resolves to the page the findings
gave that number. Otherwise the rule-built report stands."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from compactor.apps.research_report import DEFINITION, ResearchReport, footnote_refs, unresolved_footnotes
from compactor.llm.guard import Request, complete_guarded
from compactor.run import Run, StepRecord
from compactor.text.language import is_chinese
from compactor.text.tokens import get_counter

PROMPTS = {
    "en": """You are writing the final report of a research project.
Question: {query}

Below are the findings of each research topic, each finding with a Markdown footnote [^n] to its
source, and the references that define the footnotes. Write a structured, data-driven Markdown report
with these sections: "## Summary", "## Key findings" (one "### <topic>" subsection per topic, using the
topic names below exactly), "## Conclusions" and "## References".
Rules: use only facts stated in the findings; keep their numbers, dates and names exactly; cite every
statement with the footnote numbers of the findings it comes from; copy the reference lines you cite
unchanged ("[^n]: ..."); never invent a footnote, a source or a number. At most {budget} tokens.

Topics: {topics}

{context}""",
    "zh": """你在撰写一个研究项目的最终报告。
问题：{query}

下面是每个研究主题的发现，每条发现都带有指向来源的 Markdown 脚注 [^n]，以及定义这些脚注的参考文献。
请写一份结构化、以数据为依据的 Markdown 报告，包含这些部分："## 摘要"、"## 核心发现"（每个主题一个
"### <主题>" 小节，主题名称与下面完全一致）、"## 结论" 和 "## 参考文献"。
规则：只使用发现中写明的事实；数字、日期和名称保持原样；每个陈述都用其来源发现的脚注编号标注；
原样抄写你引用的参考文献行（"[^n]: ..."）；不得编造脚注、来源或数字。不超过 {budget} 个 token。

主题：{topics}

{context}""",
}


def footnote_problems(reply: str, footnotes: Mapping[str, str], topics: Sequence[str]) -> list[str]:
    """Why a written report cannot be used: a footnote without a definition, a definition that does
    not point to the page the findings gave that number, no citation at all, a topic left out."""
    problems: list[str] = []
    unresolved = unresolved_footnotes(reply)
    if unresolved:
        problems.append(f"footnote(s) without a definition: {', '.join(unresolved[:5])}")
    for match in DEFINITION.finditer(reply):
        number, target = match.group(1), match.group(2)
        if number not in footnotes:
            problems.append(f"footnote [^{number}] is not one of the findings' sources")
        elif footnotes[number] not in target:
            problems.append(f"footnote [^{number}] points to {target[:80]!r}, not {footnotes[number]!r}")
    if not footnote_refs(reply):
        problems.append("no footnote cited")
    flat = " ".join(reply.split()).lower()
    missing = [t for t in topics if " ".join(t.split()).lower() not in flat]
    if missing:
        problems.append(f"topic(s) left out: {'; '.join(missing[:3])}")
    return problems


def write_report(rules: ResearchReport, context: ResearchReport, *, budget: int | None, query: str | None,
                 llm: Mapping[str, Any], max_tokens: int = 1500) -> tuple[ResearchReport, list[str]]:
    """The LLM's report written from `context` (the footnoted findings), or `rules` when the reply is
    refused; also returns why it was refused (empty when used)."""
    counter = get_counter()
    limit = budget or max_tokens
    lang = "zh" if is_chinese([query or "", *context.topics]) else "en"
    prompt = PROMPTS[lang].format(query=query or "-", budget=limit, topics="; ".join(context.topics),
                                  context=str(context))
    step = StepRecord(index=0, label="research.report", stage="render")
    run = Run(counter=counter, pipeline="research-report", settings={"llm": dict(llm)}, step=step)
    reply = complete_guarded(
        [Request(prompt, str(context), max_tokens=limit, query=query)], run,
        accept=lambda _, text: footnote_problems(text, context.footnotes, context.topics),
        label="report")[0]
    if reply is None:
        errors = step.details.get("llm_error", [])
        why = [str(r) for r in step.details.get("llm_rejected", [])]
        why += [str(e) for e in errors] if isinstance(errors, list) else [str(errors)]
        if step.details.get("llm_declined"):
            why.append(str(step.details["llm_declined"]))
        return rules, why or ["no usable reply"]
    written = reply if reply.endswith("\n") else reply + "\n"
    cited = set(footnote_refs(written))
    used = {n: url for n, url in context.footnotes.items() if n in cited}
    return ResearchReport(written, footnotes=used, topics=context.topics, sections=context.sections,
                          cited=context.cited, fact_ids=context.fact_ids, method="llm"), []
