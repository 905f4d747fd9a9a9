"""How a search session's context reads: a page's heading, a fact's checklist line, a summary's
sentences. Shared by the search strategies (`compress.fact_centric`, `compress.chunk_filtering`,
`compress.summarization`) and `ContextCompacter`, so that what a budget counts is what is shown."""

from __future__ import annotations

from compactor.document import Fact
from compactor.text.sentences import split_sentences

#: The id prefix of a previous summary's sentence where it competes with a batch's sentences.
PREVIOUS = "summary:"


def heading(title: str | None, url: str | None, source_id: str) -> str:
    """A page's heading in a rendered context: its title (else URL, else id), then its URL."""
    head = f"## {title or url or source_id}"
    if url and url != title:
        head += f"\n<{url}>"
    return head


def fact_line(fact: Fact) -> str:
    """How a fact reads in a checklist (what its budget counts)."""
    return f"- {fact.text}"


def summary_sentences(summary: str) -> list[str]:
    """A summary's sentences, as its provenance lists them (one per line for a rules summary)."""
    return [summary[s:e].strip() for s, e in split_sentences(summary) if summary[s:e].strip()]
