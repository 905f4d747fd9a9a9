"""classify.rules: content type, technical level, actionability and language per chunk.

The pattern tables are data (`data/classify.yaml`, English and Chinese); a pipeline may point
`patterns:` at its own file with the same shape. Scores are weighted matches per 100 tokens, so a long
chunk does not win by length alone.

Speed: a text is scanned by a pattern only when the pattern can match it. `compactor.prefilter`
finds the literals each pattern requires (every match of ``\b(?:api|endpoint)s?\b`` contains "api"
or "endpoint") for the whole table in one pass, and names the patterns worth running: 2-4 of the 26
per chunk on real text, instead of all 26 (one alternation of the patterns is no substitute: the
`regex` module scans it slower than the patterns one by one, and it loses matches that overlap, such
as "in progress" and "progress"). Levels only need to know whether a pattern matches (`search`).
The labels are the ones a scan with every pattern gives.
"""

from __future__ import annotations

import functools
import importlib.resources
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import regex
import yaml

from compactor.components import Component, DataPath
from compactor.document import Context
from compactor.hookspecs import hookimpl
from compactor.prefilter import Prefilter
from compactor.run import Run
from compactor.sentences import detect_lang

CONTENT_TYPES = ("technical_specification", "code_implementation", "error_information",
                 "user_interaction", "workflow_status", "documentation", "general")


@dataclass(frozen=True, slots=True)
class Tables:
    """Compiled pattern tables."""

    min_score: float
    types: dict[str, list[tuple[regex.Pattern[str], float]]]  # regex patterns
    literals: dict[str, list[tuple[str, float]]]  # plain Chinese patterns: counted with str.count
    levels: dict[str, regex.Pattern[str]]
    actionability: dict[str, regex.Pattern[str]]
    # every scan of the tables as (kind, name, literal or pattern, weight), in the order the labels
    # add them up: per type its literals, then its patterns; then levels; then actionability
    scans: tuple[tuple[str, str, Any, float], ...]
    prefilter: Prefilter  # over `scans`: which of them can match a text


_HAN = regex.compile(r"\p{Han}")


def _compile(pattern: str, english: bool) -> regex.Pattern[str]:
    flags = regex.IGNORECASE | regex.MULTILINE if english else regex.MULTILINE
    return regex.compile(pattern, flags)


@functools.cache
def load_tables(path: str | None = None) -> Tables:
    """Read and compile a pattern table file (the shipped one when `path` is None)."""
    if path is None:
        text = importlib.resources.files("compactor.plugins").joinpath(
            "data", "classify.yaml").read_text(encoding="utf-8")
    else:
        text = Path(path).read_text(encoding="utf-8")
    data: Mapping[str, Any] = yaml.safe_load(text)
    types = {
        name: [(_compile(p, lang == "en"), float(w)) for lang in ("en", "zh")
               for p, w in (spec.get(lang) or {}).items() if lang == "en" or not _literal(p)]
        for name, spec in data["types"].items()
    }
    literals = {name: [(p, float(w)) for p, w in (spec.get("zh") or {}).items() if _literal(p)]
                for name, spec in data["types"].items()}
    levels = {name: _compile(f"{spec['en']}|{spec['zh']}", True)
              for name, spec in data["technical_level"].items()}
    action = {name: _compile(f"{spec['en']}|{spec['zh']}", True)
              for name, spec in data["actionability"].items()}
    scans = (*(scan for name in types for scan in (
                  *(("literal", name, lit, w) for lit, w in literals[name]),
                  *(("pattern", name, p, w) for p, w in types[name]))),
             *(("level", name, p, 0.0) for name, p in levels.items()),
             *(("action", name, p, 0.0) for name, p in action.items()))
    return Tables(float(data.get("min_score", 1.0)), types, literals, levels, action, scans,
                  Prefilter([scan[2] for scan in scans]))


def _literal(pattern: str) -> bool:
    return regex.escape(pattern, literal_spaces=True) == pattern


def classify_text(text: str, tokens: int, tables: Tables) -> dict[str, Any]:
    """Labels for one text: type, confidence, keywords, technical level, actionability, language."""
    per_100 = 100.0 / max(tokens, 20)
    scores: dict[str, float] = {}
    keywords: dict[str, list[str]] = {}
    han = _HAN.search(text) is not None
    totals: dict[str, tuple[list[float], list[str]]] = {}
    level_found: set[str] = set()
    action_hits: dict[str, int] = {}
    for index in sorted(tables.prefilter.possible(text, han)):
        kind, name, item, weight = tables.scans[index]
        if kind == "pattern":
            matches = item.findall(text)
            if matches:
                total, found = totals.setdefault(name, ([0.0], []))
                total[0] += weight * len(matches)
                found.extend(m if isinstance(m, str) else m[0] for m in matches[:3])
        elif kind == "literal":
            hits = text.count(item) if han else 0
            if hits:
                total, found = totals.setdefault(name, ([0.0], []))
                total[0] += weight * hits
                found.append(item)
        elif kind == "level":
            if name in ("advanced", "intermediate") and item.search(text):
                level_found.add(name)
        elif name in ("actionable", "historical"):
            action_hits[name] = len(item.findall(text))
    for name, (total, found) in totals.items():  # in table order: scans are indexed type by type
        if total[0]:
            scores[name] = total[0] * per_100
            keywords[name] = sorted({k.strip().lower() for k in found if len(k.strip()) > 1})[:8]
    best = max(scores, key=lambda k: scores[k]) if scores else "general"
    if best != "general" and scores[best] < tables.min_score:
        best = "general"
    ranked = sorted(scores.values(), reverse=True)
    if best == "general":
        confidence = 0.5
    else:
        margin = (ranked[0] - (ranked[1] if len(ranked) > 1 else 0.0)) / ranked[0]
        confidence = round(0.4 + 0.3 * margin + 0.3 * min(1.0, ranked[0] / 20), 3)
    level = ("advanced" if "advanced" in level_found
             else "intermediate" if "intermediate" in level_found else "basic")
    if action_hits.get("actionable", 0) > action_hits.get("historical", 0):
        actionability = "actionable"
    elif action_hits.get("historical", 0):
        actionability = "historical"
    else:
        actionability = "informational"
    return {
        "type": best,
        "confidence": confidence,
        "keywords": keywords.get(best, []),
        "type_scores": {k: round(v, 3) for k, v in sorted(scores.items())},
        "technical_level": level,
        "actionability": actionability,
        "language": detect_lang(text),
    }


class RuleClassifier(Component):
    """Labels each chunk with its content type (with confidence and the matched keywords),
    technical level, actionability and language, from English and Chinese pattern tables."""

    name = "classify.rules"
    stage = "classify"
    requires = ("chunks",)
    provides = ("labels",)

    def __init__(self, *, patterns: DataPath | None = None) -> None:
        self.patterns = patterns
        self.tables = load_tables(patterns)

    @hookimpl
    def compactor_classify(self, context: Context, run: Run) -> dict[str, dict[str, Any]]:
        labels = {c.id: classify_text(c.text, c.tokens, self.tables) for c in context.chunks}
        counts: dict[str, int] = {}
        for item in labels.values():
            counts[item["type"]] = counts.get(item["type"], 0) + 1
        run.note("types", dict(sorted(counts.items())))
        return labels
