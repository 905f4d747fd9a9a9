"""classify.rules: content type, technical level, actionability and language per chunk.

The pattern tables are data (`data/classify.yaml`, English and Chinese); a pipeline may point
`patterns:` at its own file with the same shape. Scores are weighted matches per 100 tokens, so a long
chunk does not win by length alone.

Speed: a text is scanned by a pattern only when the pattern can match it. `compactor.text.prefilter`
finds the literals each pattern requires (every match of ``\b(?:api|endpoint)s?\b`` contains "api"
or "endpoint") for the whole table in one pass, and names the patterns worth running: 2-4 of the 26
per chunk on real text, instead of all 26 (one alternation of the patterns is no substitute: the
`regex` module scans it slower than the patterns one by one, and it loses matches that overlap, such
as "in progress" and "progress"). Levels only need to know whether a pattern matches (`search`).
The labels are the ones a scan with every pattern gives.

The steps label all chunks at once (`classify_texts`, `scan_texts`): a call per pattern per chunk
costs more than its scan, so each pattern runs once over the chunks joined, and only where a match
can start (`compactor.text.prefilter.Scanner`). The labels are those of one chunk at a time.
"""

from __future__ import annotations

import functools
import importlib.resources
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import regex
import yaml

from compactor.components import Component, DataPath, param
from compactor.document import Context
from compactor.hookspecs import hookimpl

# the quarantine helpers live in the kit; importable from here as before
from compactor.kit import clean_parts as clean_parts
from compactor.kit import is_quarantined as is_quarantined
from compactor.kit import quarantine_report as quarantine_report
from compactor.kit import split_quarantined as split_quarantined
from compactor.kit import usable as usable
from compactor.kit import usable_chunks as usable_chunks
from compactor.run import Run
from compactor.text import instructions
from compactor.text.confusables import has_special, skeleton
from compactor.text.language import detect_lang
from compactor.text.prefilter import Prefilter, Scanner
from compactor.text.sentences import split_sentences

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
    scanner: Scanner  # over `scans`: their matches in many texts at once


_HAN = regex.compile(r"\p{Han}")


def _compile(pattern: str, english: bool) -> regex.Pattern[str]:
    flags = regex.IGNORECASE | regex.MULTILINE if english else regex.MULTILINE
    return regex.compile(pattern, flags)


@functools.cache
def load_tables(path: str | None = None) -> Tables:
    """Read and compile a pattern table file (the shipped one when `path` is None)."""
    if path is None:
        text = (importlib.resources.files("compactor.plugins") / "data" / "classify.yaml").read_text(
            encoding="utf-8")
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
    items = [scan[2] for scan in scans]
    return Tables(float(data.get("min_score", 1.0)), types, literals, levels, action, scans,
                  Prefilter(items), Scanner(items))


def _literal(pattern: str) -> bool:
    return regex.escape(pattern, literal_spaces=True) == pattern


class _Tally:
    """What a text's scans found: per type its weighted total and matched words (in table order),
    the technical levels seen, and the number of actionable and historical matches."""

    __slots__ = ("actions", "levels", "totals")

    def __init__(self) -> None:
        self.totals: dict[str, tuple[list[float], list[str]]] = {}
        self.levels: set[str] = set()
        self.actions: dict[str, int] = {}

    def add(self, kind: str, name: str, item: Any, weight: float, count: int, found: list[str]) -> None:
        """One scan's `count` matches (`found`: the words its first ones matched)."""
        if kind in ("pattern", "literal"):
            total, words = self.totals.setdefault(name, ([0.0], []))
            total[0] += weight * count
            words.extend(found)
        elif kind == "level":
            if name in ("advanced", "intermediate"):
                self.levels.add(name)
        elif name in ("actionable", "historical"):
            self.actions[name] = count


def _findall_value(match: Any, groups: int) -> str:
    """What `findall` gives for a match: the match, or its first group."""
    return str(match.group()) if not groups else str(match.group(1) or "")


def classify_text(text: str, tokens: int, tables: Tables) -> dict[str, Any]:
    """Labels for one text: type, confidence, keywords, technical level, actionability, language."""
    tally = _Tally()
    han = _HAN.search(text) is not None
    for index in sorted(tables.prefilter.possible(text, han)):
        kind, name, item, weight = tables.scans[index]
        if kind == "pattern":
            matches = item.findall(text)
            if matches:
                tally.add(kind, name, item, weight, len(matches),
                          [m if isinstance(m, str) else m[0] for m in matches[:3]])
        elif kind == "literal":
            hits = text.count(item) if han else 0
            if hits:
                tally.add(kind, name, item, weight, hits, [item])
        elif kind == "level":
            if name in ("advanced", "intermediate") and item.search(text):
                tally.add(kind, name, item, weight, 1, [])
        elif name in ("actionable", "historical"):
            tally.add(kind, name, item, weight, len(item.findall(text)), [])
    return _labels(text, tokens, tables, tally)


def classify_texts(texts: Sequence[str], tokens: Sequence[int], tables: Tables) -> list[dict[str, Any]]:
    """`classify_text` of each text, from one run of the tables over them all
    (`compactor.text.prefilter.Scanner`)."""
    tallies: dict[int, _Tally] = {}
    han: dict[int, bool] = {}
    for (kind, name, item, weight), hits in zip(tables.scans, tables.scanner.run(texts), strict=True):
        if not hits or (kind == "level" and name not in ("advanced", "intermediate")) or \
                (kind == "action" and name not in ("actionable", "historical")):
            continue
        groups = item.groups if kind == "pattern" else 0
        at, size = 0, len(hits)
        while at < size:  # the hits of one text at a time
            i = hits[at][0]
            end = at + 1
            while end < size and hits[end][0] == i:
                end += 1
            if kind != "literal" or han.setdefault(i, _HAN.search(texts[i]) is not None):
                found = [item] if kind == "literal" else [] if kind != "pattern" else \
                    [_findall_value(hit[3], groups) for hit in hits[at:min(end, at + 3)]]
                tally = tallies.get(i)
                if tally is None:
                    tally = tallies[i] = _Tally()
                tally.add(kind, name, item, weight, end - at, found)
            at = end
    return [_labels(text, tokens[i], tables, tallies.get(i)) for i, text in enumerate(texts)]


_PLAIN = {"type": "general", "confidence": 0.5, "keywords": [], "type_scores": {},
          "technical_level": "basic", "actionability": "informational"}


def _labels(text: str, tokens: int, tables: Tables, tally: _Tally | None) -> dict[str, Any]:
    """The labels of a text from what its scans found."""
    # an ASCII text holds no CJK character: English, as `detect_lang` finds
    language = "en" if text.isascii() else detect_lang(text)
    if tally is None:
        return {**_PLAIN, "keywords": [], "type_scores": {}, "language": language}
    scores: dict[str, float] = {}
    keywords: dict[str, list[str]] = {}
    best, confidence = "general", 0.5
    if tally.totals:
        per_100 = 100.0 / max(tokens, 20)
        for name, (total, found) in tally.totals.items():  # in table order: scans are indexed type by type
            if total[0]:
                scores[name] = total[0] * per_100
                keywords[name] = sorted({k.strip().lower() for k in found if len(k.strip()) > 1})[:8]
        if scores:
            best = max(scores, key=lambda k: scores[k])
            if best == "general" or scores[best] < tables.min_score:
                best = "general"
            else:
                ranked = sorted(scores.values(), reverse=True)
                margin = (ranked[0] - (ranked[1] if len(ranked) > 1 else 0.0)) / ranked[0]
                confidence = round(0.4 + 0.3 * margin + 0.3 * min(1.0, ranked[0] / 20), 3)
    level = ("advanced" if "advanced" in tally.levels
             else "intermediate" if "intermediate" in tally.levels else "basic")
    action_hits = tally.actions
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
        "language": language,
    }


class RuleClassifier(Component):
    """Labels each chunk with its content type (with confidence and the matched keywords),
    technical level, actionability and language, from English and Chinese pattern tables."""

    name = "classify.rules"
    stage = "classify"
    requires = ("chunks",)
    provides = ("labels",)

    patterns: DataPath | None = param(None, doc="a pattern table (YAML) in place of the built-in one")

    def __post_init__(self) -> None:
        self.tables = load_tables(self.patterns)

    @hookimpl
    def compactor_classify(self, context: Context, run: Run) -> dict[str, dict[str, Any]]:
        chunks = context.chunks
        labels = dict(zip((c.id for c in chunks),
                          classify_texts([c.text for c in chunks], [c.tokens for c in chunks], self.tables),
                          strict=True))
        counts: dict[str, int] = {}
        for item in labels.values():
            counts[item["type"]] = counts.get(item["type"], 0) + 1
        run.note("types", dict(sorted(counts.items())))
        return labels


# A chat-template marker, literal or escaped (HTML entities, \u003c): where a fake message starts,
# and where it ends. What an opener starts is injected up to its closer (or its paragraph's end).
_LT = r"(?:<|&lt;|&\#0*60;|&\#x0*3c;|\\u003c|\\x3c)"
_GT = r"(?:>|&gt;|&\#0*62;|&\#x0*3e;|\\u003e|\\x3e)"
_BAR = r"\s?[|\uff5c]\s?"
_OPENER_RE = regex.compile(
    rf"{_LT}{_BAR}(?:im_start|system|user|assistant|start_header_id){_BAR}{_GT}"
    rf"|(?:\[|&\#0*91;)INST(?:\]|&\#0*93;)|{_LT}{_LT}SYS{_GT}{_GT}|{_LT}start_of_turn{_GT}",
    regex.IGNORECASE)
# the role line after an opener (`system`, Llama 3's `<|end_header_id|>`) and the blank lines after it
_HEADER_TAIL_RE = regex.compile(
    rf"\s*(?:system|user|assistant|developer|tool)?\s*(?:{_LT}{_BAR}end_header_id{_BAR}{_GT})?\s*",
    regex.IGNORECASE)
_CLOSER_RE = regex.compile(
    rf"{_LT}{_BAR}(?:im_end|eot_id|end|endoftext){_BAR}{_GT}"
    rf"|(?:\[|&\#0*91;)/INST(?:\]|&\#0*93;)|{_LT}{_LT}/SYS{_GT}{_GT}|{_LT}end_of_turn{_GT}",
    regex.IGNORECASE)


@functools.lru_cache(maxsize=8)
def _plan(rules: tuple[tuple[str, float, regex.Pattern[str]], ...]) -> tuple[Prefilter, int]:
    """(the prefilter of the table's own rules, where `compactor.text.instructions`' rules start in
    it or its length). Those rules have cue words of their own (`instructions.candidates`): whole
    words, which skip far more rules than the literals a substring prefilter can use."""
    shipped = instructions.rules()
    own = len(rules) - len(shipped)
    if own < 0 or rules[own:] != shipped:
        own = len(rules)
    return Prefilter([pattern for _, _, pattern in rules[:own]]), own


def _possible(rules: tuple[tuple[str, float, regex.Pattern[str]], ...], text: str) -> set[int]:
    """The indices of the rules of `rules` that can match skeleton text `text`."""
    prefilter, own = _plan(rules)
    possible = set(prefilter.possible(text))
    if own < len(rules):
        possible.update(own + i for i in instructions.candidates(text))
    return possible


@functools.cache
def load_rules(path: str | None = None) -> tuple[tuple[str, float, regex.Pattern[str]], ...]:
    """(name, weight, pattern) per rule and language, from a file of the shipped table's shape, or
    the shipped table followed by the rules of `compactor.text.instructions` (what an instruction
    does: addressed to the model, override, act, secrecy, steer, marker). Folded YAML joins pattern
    lines with spaces, so whitespace in patterns is removed."""
    if path is None:
        text = (importlib.resources.files("compactor.plugins") / "data" / "injection.yaml").read_text(
            encoding="utf-8")
    else:
        text = Path(path).read_text(encoding="utf-8")
    rules = []
    for rule in yaml.safe_load(text)["rules"]:
        for lang, flags in (("en", regex.IGNORECASE | regex.MULTILINE), ("zh", regex.MULTILINE)):
            if rule.get(lang):
                pattern = "".join(str(rule[lang]).split())
                rules.append((str(rule["name"]), float(rule["weight"]), regex.compile(pattern, flags)))
    if path is None:
        rules.extend(instructions.rules())
    return tuple(rules)


def _rule_hits(text: str, rules: Sequence[tuple[str, float, regex.Pattern[str]]] | None,
               ) -> Iterator[tuple[str, float, list[tuple[int, int]]]]:
    """(rule name, weight, offsets in `text` of its matches) for every rule that may match. The rules
    read the text's skeleton (`compactor.text.confusables`: no invisible characters, look-alike
    letters folded); only the rules whose required words occur in it run (`compactor.text.prefilter`:
    exact)."""
    table = tuple(rules) if rules is not None else load_rules()
    skel = skeleton(text)
    possible = _possible(table, skel.text)
    for index, (name, weight, pattern) in enumerate(table):
        if index in possible:
            yield name, weight, [skel.span(*m.span()) for m in pattern.finditer(skel.text)]


def scan(text: str, rules: Sequence[tuple[str, float, regex.Pattern[str]]] | None = None,
         ) -> dict[str, Any] | None:
    """The injection finding for a text (score, rule names, matched snippets), or None. The rules
    read the text's skeleton (`compactor.text.confusables`: no invisible characters, look-alike
    letters folded), so "Ig\u200bnore" and a Cyrillic "а" hide nothing; snippets are original text."""
    return _finding(text, _rule_hits(text, rules))


def scan_texts(texts: Sequence[str], rules: Sequence[tuple[str, float, regex.Pattern[str]]] | None = None,
               scanner: Scanner | None = None) -> list[dict[str, Any] | None]:
    """`scan` of each text, from one run of the rules over all their skeletons
    (`compactor.text.prefilter.Scanner`; `scanner`: the rules', when the caller keeps it)."""
    table = tuple(rules) if rules is not None else load_rules()
    skeletons = [skeleton(t) if has_special(t) else None for t in texts]
    read = [t if k is None else k.text for t, k in zip(texts, skeletons, strict=True)]
    found = (scanner or rule_scanner(table)).run(read)
    per_text: dict[int, list[tuple[str, float, list[tuple[int, int]]]]] = {}
    for (name, weight, _), hits in zip(table, found, strict=True):
        at = 0
        while at < len(hits):
            i = hits[at][0]
            spans = []
            while at < len(hits) and hits[at][0] == i:
                a, b = hits[at][1], hits[at][2]
                skeleton_of = skeletons[i]
                spans.append((a, b) if skeleton_of is None else skeleton_of.span(a, b))
                at += 1
            per_text.setdefault(i, []).append((name, weight, spans))
    return [_finding(texts[i], per_text[i]) if i in per_text else None for i in range(len(texts))]


@functools.lru_cache(maxsize=8)
def rule_scanner(rules: tuple[tuple[str, float, regex.Pattern[str]], ...]) -> Scanner:
    """The rules' scanner: `compactor.text.instructions`' rules, when the table ends with them, run
    only on the texts holding their cue words, as `_possible` has them."""
    _, own = _plan(rules)
    return Scanner([pattern for _, _, pattern in rules],
                   {own + i: instructions.cue_sets(i) for i in range(len(rules) - own)})


def _finding(text: str, rule_hits: Iterable[tuple[str, float, list[tuple[int, int]]]],
             ) -> dict[str, Any] | None:
    """The finding from each rule's matches in `text` (offsets), in table order."""
    score = 0.0
    hit: list[str] = []
    matches: list[str] = []
    for name, weight, spans in rule_hits:
        found = [text[a:b].strip() for a, b in spans]
        if found:
            score += weight * min(len(found), 2)
            hit.append(name)
            matches.extend(found[:2])
    if not matches:
        return None
    return {"score": round(score, 3), "rules": sorted(set(hit)), "matches": matches[:5]}


def injected_spans(text: str, rules: Sequence[tuple[str, float, regex.Pattern[str]]] | None = None,
                   ) -> list[tuple[int, int]]:
    """The offsets in `text` of what quarantine removes, merged and in order: the sentences holding
    rule hits, and each fake chat message whole, from its opening marker to its closing one (or
    else to the end of its paragraph)."""
    hits = []
    for _, _, matched in _rule_hits(text, rules):
        for a, b in matched:
            while a < b and text[a].isspace():  # `^\s*` may start on the blank line before
                a += 1
            while b > a and text[b - 1].isspace():
                b -= 1
            if b > a:
                hits.append((a, b))
    if not hits:
        return []
    found: list[tuple[int, int]] = []
    for m in _OPENER_RE.finditer(text):
        if found and m.start() < found[-1][1]:
            continue  # inside the message before
        close = _CLOSER_RE.search(text, m.end())
        header = _HEADER_TAIL_RE.match(text, m.end())
        paragraph = text.find("\n\n", header.end() if header else m.end())
        found.append((m.start(), close.end() if close is not None else
                      len(text) if paragraph < 0 else paragraph))
    loose = [(a, b) for a, b in hits if not any(s <= a and b <= e for s, e in found)]
    if loose:
        sentences = split_sentences(text)
        starts = [s for s, _ in sentences]
        ends = [e for _, e in sentences]
        for a, b in loose:
            first = bisect_right(ends, a)  # the sentence holding the hit's first character
            last = min(max(first, bisect_left(starts, b) - 1), len(sentences) - 1)  # and its last
            found.append((a, b) if first >= len(sentences) else (sentences[first][0], sentences[last][1]))
    spans: list[tuple[int, int]] = []
    for start, end in sorted(found):
        if spans and start <= spans[-1][1]:
            spans[-1] = (spans[-1][0], max(spans[-1][1], end))
        else:
            spans.append((start, end))
    return spans


class InjectionClassifier(Component):
    """Flags chunks with prompt-injection text (English and Chinese rules) as `injection`."""

    name = "classify.injection"
    stage = "classify"
    requires = ("chunks",)
    provides = ("labels",)

    threshold: float = param(0.8, gt=0, doc="the score a chunk must reach to be flagged")
    rules: DataPath | None = param(None, doc="a rules table (YAML) in place of the built-in one")

    def __post_init__(self) -> None:
        self.rule_table = load_rules(self.rules)
        self.scanner = rule_scanner(self.rule_table)

    @hookimpl
    def compactor_classify(self, context: Context, run: Run) -> dict[str, dict[str, Any]]:
        labels: dict[str, dict[str, Any]] = {}
        chunks = context.chunks
        findings = scan_texts([c.text for c in chunks], self.rule_table, self.scanner)
        for chunk, finding in zip(chunks, findings, strict=True):
            if finding and finding["score"] >= self.threshold:
                spans = [[chunk.start + a, chunk.start + b]
                         for a, b in injected_spans(chunk.text, self.rule_table)]
                labels[chunk.id] = {"injection": {**finding, "spans": spans}}
        run.note("flagged", sorted(labels))
        return labels
