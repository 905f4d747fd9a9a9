"""classify.injection: flag text in fetched pages that addresses the model instead of the reader.

Web pages can carry prompt injections: "ignore previous instructions", "你现在是...", fake system or
chat-template markers, requests to reveal the system prompt or to hide things from the user. Each
rule has a weight; a chunk whose weighted hits reach `threshold` gets the label
`injection = {"score", "rules", "matches"}`, and the search strategies keep such chunks out of the
checklist and report contexts (their step reports list what was quarantined, with chunk ids).

Hidden HTML elements (display:none, the hidden attribute, aria-hidden) never reach the chunks:
`clean.html` drops them, which is the first line of defence.
"""

from __future__ import annotations

import functools
import importlib.resources
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import regex
import yaml

from compactor.components import Component
from compactor.document import Chunk, Context
from compactor.hookspecs import hookimpl
from compactor.run import Run


@functools.cache
def load_rules(path: str | None = None) -> tuple[tuple[str, float, regex.Pattern[str]], ...]:
    """(name, weight, pattern) per rule and language, from the shipped table or a file of that shape.
    Folded YAML joins pattern lines with spaces, so whitespace in patterns is removed."""
    if path is None:
        text = importlib.resources.files("compactor.plugins").joinpath(
            "data", "injection.yaml").read_text(encoding="utf-8")
    else:
        text = Path(path).read_text(encoding="utf-8")
    rules = []
    for rule in yaml.safe_load(text)["rules"]:
        for lang, flags in (("en", regex.IGNORECASE | regex.MULTILINE), ("zh", regex.MULTILINE)):
            if rule.get(lang):
                pattern = "".join(str(rule[lang]).split())
                rules.append((str(rule["name"]), float(rule["weight"]), regex.compile(pattern, flags)))
    return tuple(rules)


def scan(text: str, rules: Sequence[tuple[str, float, regex.Pattern[str]]] | None = None,
         ) -> dict[str, Any] | None:
    """The injection finding for a text (score, rule names, matched snippets), or None."""
    score = 0.0
    hit: list[str] = []
    matches: list[str] = []
    for name, weight, pattern in rules if rules is not None else load_rules():
        found = [m.group().strip() for m in pattern.finditer(text)]
        if found:
            score += weight * min(len(found), 2)
            hit.append(name)
            matches.extend(found[:2])
    if not matches:
        return None
    return {"score": round(score, 3), "rules": sorted(set(hit)), "matches": matches[:5]}


def is_quarantined(chunk: Chunk) -> bool:
    """True when `classify.injection` flagged the chunk."""
    return bool(chunk.labels.get("injection"))


def split_quarantined(chunks: Iterable[Chunk]) -> tuple[list[Chunk], list[Chunk]]:
    """(clean chunks, flagged chunks), both in their original order."""
    clean: list[Chunk] = []
    flagged: list[Chunk] = []
    for chunk in chunks:
        (flagged if is_quarantined(chunk) else clean).append(chunk)
    return clean, flagged


def quarantine_report(flagged: Sequence[Chunk], context: Context) -> list[dict[str, Any]]:
    """What was kept out, for step reports: chunk id, source URL and the matched text."""
    urls = {s.id: s.uri for s in context.sources}
    return [{"chunk_id": c.id, "url": urls.get(c.source_id), **dict(c.labels["injection"])}
            for c in flagged]


def usable_chunks(context: Context, run: Run, quarantine: bool = True) -> list[Chunk]:
    """The context's chunks, minus flagged ones when `quarantine` (listed in the step report)."""
    if not quarantine:
        return list(context.chunks)
    clean, flagged = split_quarantined(context.chunks)
    run.note("quarantined", quarantine_report(flagged, context))
    return clean


class InjectionClassifier(Component):
    """Flags chunks with prompt-injection text (English and Chinese rules) as `injection`."""

    name = "classify.injection"
    stage = "classify"
    requires = ("chunks",)
    provides = ("labels",)

    def __init__(self, *, threshold: float = 0.8, rules: str | None = None) -> None:
        self.threshold = threshold
        self.rules = load_rules(rules)

    @hookimpl
    def compactor_classify(self, context: Context, run: Run) -> dict[str, dict[str, Any]]:
        labels: dict[str, dict[str, Any]] = {}
        for chunk in context.chunks:
            finding = scan(chunk.text, self.rules)
            if finding and finding["score"] >= self.threshold:
                labels[chunk.id] = {"injection": finding}
        run.note("flagged", sorted(labels))
        return labels
