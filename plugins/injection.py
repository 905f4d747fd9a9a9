"""classify.injection: flag text in fetched pages that addresses the model instead of the reader.

Web pages can carry prompt injections: "ignore previous instructions", "你现在是...", fake system or
chat-template markers (also HTML-escaped, `&lt;|im_start|&gt;`), requests to reveal the system prompt
or to hide things from the user. Each rule has a weight; a chunk whose weighted hits reach
`threshold` gets the label `injection = {"score", "rules", "matches", "spans"}`, where `spans` are the
source offsets of the sentences holding the hits (a chat-template message runs on to its closing
marker, or to the end of its paragraph).

Quarantine removes those sentences, not the chunk around them. The search strategies and
`compress.topics` work on `usable(...)`: a flagged chunk is replaced by its clean parts, new chunks
(`<chunk id>.1`, `.2`, ...) whose text is still `source.text[start:end]`; the flagged chunk stays
in the context (and the store) and is listed in the step report as quarantined. Compressors that
build their output with `select.segments_for` (`compress.select`, `compress.chunk_filtering`,
`compress.map_reduce`'s rule paths) cut the flagged spans out of what they keep.

Hidden HTML text (display:none, zero font size, off-screen, clipped, text in its background's
colour, the hidden attribute, aria-hidden) never reaches the chunks: `clean.html` drops it, which
is the first line of defence.
"""

from __future__ import annotations

import functools
import importlib.resources
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import regex
import yaml

from compactor.components import Component, DataPath
from compactor.document import Chunk, Context, frozen_mapping
from compactor.hookspecs import hookimpl
from compactor.prefilter import Prefilter
from compactor.run import Run
from compactor.sentences import split_sentences

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
def _prefilter(rules: tuple[tuple[str, float, regex.Pattern[str]], ...]) -> Prefilter:
    return Prefilter([pattern for _, _, pattern in rules])


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
    table = tuple(rules) if rules is not None else load_rules()
    # only the rules whose required words occur in the text run (compactor.prefilter: exact)
    possible = _prefilter(table).possible(text)
    for index, (name, weight, pattern) in enumerate(table):
        if index not in possible:
            continue
        found = [m.group().strip() for m in pattern.finditer(text)]
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
    for _, _, pattern in rules if rules is not None else load_rules():
        for m in pattern.finditer(text):
            a, b = m.span()
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


def clean_parts(chunk: Chunk, run: Run) -> list[Chunk]:
    """The parts of a flagged chunk outside its injected spans, as chunks of their own (id
    `<chunk id>.<n>`, text `source.text[start:end]`, the chunk's scores, labelled `part_of`). No
    parts for a chunk flagged without spans: it is quarantined whole."""
    finding = chunk.labels.get("injection")
    spans = finding.get("spans") if hasattr(finding, "get") else None
    if not spans:
        return []
    pieces: list[tuple[int, int]] = []
    at = chunk.start
    for a, b in sorted((int(a), int(b)) for a, b in spans):
        if a > at:
            pieces.append((at, min(a, chunk.end)))
        at = max(at, b)
    if at < chunk.end:
        pieces.append((at, chunk.end))
    kept = []
    for a, b in pieces:
        text = chunk.text[a - chunk.start:b - chunk.start]
        lead, trail = len(text) - len(text.lstrip()), len(text) - len(text.rstrip())
        if regex.search(r"\w", text):
            kept.append((a + lead, b - trail))
    texts = [chunk.text[a - chunk.start:b - chunk.start] for a, b in kept]
    labels = frozen_mapping({**{k: v for k, v in chunk.labels.items() if k != "injection"},
                             "part_of": chunk.id})
    return [Chunk(id=f"{chunk.id}.{n}", source_id=chunk.source_id, index=chunk.index, start=a, end=b,
                  text=text, tokens=tokens, lang=chunk.lang, labels=labels, scores=chunk.scores,
                  features=chunk.features)
            for n, ((a, b), text, tokens) in enumerate(
                zip(kept, texts, run.counter.count_many(texts), strict=True), start=1)]


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


def quarantine_report(flagged: Sequence[Chunk], context: Context,
                      parts: dict[str, list[str]] | None = None) -> list[dict[str, Any]]:
    """What was kept out, for step reports: chunk id, source URL, the matched text, the removed
    `spans`, and the ids of the clean `parts` that stand in for the chunk."""
    urls = {s.id: s.uri for s in context.sources}
    return [{"chunk_id": c.id, "url": urls.get(c.source_id), **dict(c.labels["injection"]),
             "parts": list((parts or {}).get(c.id, ()))} for c in flagged]


def usable(context: Context, run: Run, quarantine: bool = True) -> tuple[Context, list[Chunk]]:
    """The chunks a compressor may use, and the context to go on with.

    With `quarantine`, each flagged chunk is replaced by its clean parts (`clean_parts`), which the
    returned context also holds, right after the flagged chunk, so facts and kept ids that cite them
    resolve (and are stored) like any chunk; the flagged chunks are listed in the step report.
    Calling it again on its own result gives the same chunks."""
    if not quarantine:
        return context, list(context.chunks)
    have = {c.id for c in context.chunks}
    chunks: list[Chunk] = []
    every: list[Chunk] = []
    flagged: list[Chunk] = []
    parts_of: dict[str, list[str]] = {}
    for chunk in context.chunks:
        if "part_of" in chunk.labels and chunk.labels["part_of"] in have:
            continue  # made by an earlier call: made again below, from the flagged chunk
        every.append(chunk)
        if not is_quarantined(chunk):
            chunks.append(chunk)
            continue
        flagged.append(chunk)
        parts = clean_parts(chunk, run)
        parts_of[chunk.id] = [p.id for p in parts]
        chunks.extend(parts)
        every.extend(parts)
    run.note("quarantined", quarantine_report(flagged, context, parts_of))
    if flagged:
        context = context.evolve(chunks=tuple(every))
    return context, chunks


def usable_chunks(context: Context, run: Run, quarantine: bool = True) -> list[Chunk]:
    """The chunks `usable` gives (flagged ones replaced by their clean parts). A caller that keeps
    ids of these chunks must go on with `usable`'s context, which holds the parts."""
    return usable(context, run, quarantine)[1]


class InjectionClassifier(Component):
    """Flags chunks with prompt-injection text (English and Chinese rules) as `injection`."""

    name = "classify.injection"
    stage = "classify"
    requires = ("chunks",)
    provides = ("labels",)

    def __init__(self, *, threshold: float = 0.8, rules: DataPath | None = None) -> None:
        self.threshold = threshold
        self.rules = load_rules(rules)

    @hookimpl
    def compactor_classify(self, context: Context, run: Run) -> dict[str, dict[str, Any]]:
        labels: dict[str, dict[str, Any]] = {}
        for chunk in context.chunks:
            finding = scan(chunk.text, self.rules)
            if finding and finding["score"] >= self.threshold:
                spans = [[chunk.start + a, chunk.start + b]
                         for a, b in injected_spans(chunk.text, self.rules)]
                labels[chunk.id] = {"injection": {**finding, "spans": spans}}
        run.note("flagged", sorted(labels))
        return labels
