"""clean.normalize, clean.html, clean.dedupe, clean.seen: make each source's working text clean and unique,
and each page new to its session."""

from __future__ import annotations

import unicodedata
from dataclasses import replace
from typing import Any, Literal

import regex

from compactor.components import Component, param
from compactor.document import Context, Source, frozen_mapping
from compactor.hookspecs import hookimpl
from compactor.plugins.clean.html import extract_main_text
from compactor.provenance import Edits, OffsetMap, Rewriter, regex_edit, source_map, splice
from compactor.run import Run
from compactor.store import ChunkStore
from compactor.text import similarity as textsim

_LINE_ENDS = regex.compile(r"\r\n?|\x85")
# zero-width joiners (U+200C, U+200D) stay: they join emoji and Indic and Persian letters
_ZERO_WIDTH = regex.compile(r"[\u200b\u2060\ufeff\u00ad]")
_CONTROL = regex.compile(r"[^\P{Cc}\n\t\f\v]")  # form feed and vertical tab are blanks
# ASCII blanks only: no-break and other Unicode spaces are the source's and stay as they are
_SPACES = regex.compile(r"[ \t\f\v]{2,}|[\t\f\v]")
_TRAILING = regex.compile(r" +(?=\n)")
_BLANK_LINES = regex.compile(r"\n{3,}")
_LOOKS_HTML = regex.compile(r"<(?:html|body|div|p|article|head|span|table|br)\b", regex.IGNORECASE)
# Markup is a page's structure only when elements close (or the text opens with a tag): a stray `<br>` or an
# unclosed `<div class=...>` left in plain text (copied from a wiki, a dataset) does not make it a page
_STRUCTURE = regex.compile(
    r"</(?:html|body|div|p|article|head|span|table|li|ul|ol|tr|td|section|main|h[1-6])\s*>"
    r"|\A\s*<(?:!doctype|html|body|head|div|p|article|span|table|section|main)\b",
    regex.IGNORECASE)
_CLUSTER = regex.compile(r"\X")

Form = Literal["NFC", "NFKC", "none"]
_UNICODE_FORMS: dict[str, Literal["NFC", "NFKC"]] = {"NFC": "NFC", "NFKC": "NFKC"}


def _unicode_form(text: str, name: str) -> tuple[str, Edits | None]:
    """`form` applied per grapheme cluster, only on lines that need it (NFC is a no-op on almost
    every line), so each change is recorded where it happens."""
    form = _UNICODE_FORMS.get(name)
    if form is None or unicodedata.is_normalized(form, text):
        return text, None
    rewriter = Rewriter(text)
    done = line_start = 0
    for line in text.split("\n"):
        line_end = line_start + len(line)
        if not unicodedata.is_normalized(form, line):
            for match in _CLUSTER.finditer(text, line_start, line_end):
                cluster = match.group()
                new = unicodedata.normalize(form, cluster)
                if new != cluster:
                    rewriter.keep(done, match.start())
                    rewriter.replace(match.start(), match.end(), new)
                    done = match.end()
        line_start = line_end + 1
    rewriter.keep(done, len(text))
    return rewriter.result()


def normalize_edits(text: str, form: Form = "NFC", collapse_whitespace: bool = True,
                    ) -> tuple[str, list[Edits]]:
    """The normalised text and the edits of each step that changed it (see `normalize_text`)."""
    edits: list[Edits] = []
    text, done = regex_edit(text, _LINE_ENDS, "\n")
    if done:
        edits.append(done)
    text, done = _unicode_form(text, form)
    if done:
        edits.append(done)
    steps: list[tuple[regex.Pattern[str], str]] = [(_ZERO_WIDTH, ""), (_CONTROL, "")]
    if collapse_whitespace:
        steps += [(_SPACES, " "), (_TRAILING, ""), (_BLANK_LINES, "\n\n")]
    for pattern, replacement in steps:
        text, done = regex_edit(text, pattern, replacement)
        if done:
            edits.append(done)
    if collapse_whitespace:
        text, done = _stripped(text)
        if done:
            edits.append(done)
    return text, edits


def _stripped(text: str) -> tuple[str, Edits | None]:
    """`text.strip()` with its edits (a regex `\\s+$` is quadratic on long inner blank runs)."""
    start = len(text) - len(text.lstrip())
    end = len(text.rstrip())
    if start == 0 and end == len(text):
        return text, None
    rewriter = Rewriter(text)
    rewriter.keep(start, max(start, end))
    return rewriter.result()


def normalize_text(text: str, form: Form = "NFC", collapse_whitespace: bool = True) -> str:
    """Canonical Unicode form (NFC: the same text, composed), unified line ends, no control or
    zero-width characters, and runs of ASCII blanks as one space. Compatibility folding (NFKC)
    changes meaning (`10⁶` becomes `106`, `km²` becomes `km2`) and is only done when asked."""
    return normalize_edits(text, form, collapse_whitespace)[0]


class NormalizeCleaner(Component):
    """Unicode normal form (NFC by default; NFKC only when a pipeline asks, as it changes meaning),
    line ends, control and zero-width characters, and ASCII whitespace runs. Every change is
    recorded, so kept text maps back to the input's offsets."""

    name = "clean.normalize"
    stage = "clean"

    form: Form = param("NFC", doc="Unicode normal form (NFKC changes meaning: only on request)")
    collapse_whitespace: bool = param(True, doc="ASCII whitespace runs become one space")

    @hookimpl
    def compactor_clean(self, context: Context, run: Run) -> Context:
        sources = []
        for source in context.sources:
            text, edits = normalize_edits(source.text, self.form, self.collapse_whitespace)
            if not edits:
                sources.append(source)
                continue
            offsets = source_map(source)
            for done in edits:
                offsets = offsets.then(done)
            sources.append(source.with_text(text, offsets=offsets))
        return context.evolve(sources=tuple(sources))


class HtmlCleaner(Component):
    """HTML to main text: drops scripts, navigation, footers, forms and boilerplate blocks, keeps
    headings, paragraphs, lists and tables, and picks the main content by text density.

    Sources that are not HTML pass through unchanged.
    """

    name = "clean.html"
    stage = "clean"

    include_tables: bool = param(True, doc="keep data tables as text")

    @hookimpl
    def compactor_clean(self, context: Context, run: Run) -> Context:
        sources = []
        converted = empty = 0
        for source in context.sources:
            if not (source.kind == "web_page" or _LOOKS_HTML.search(source.text[:4096])):
                sources.append(source)
                continue
            if not _LOOKS_HTML.search(source.text) or (source.kind != "web_page"
                                                       and not _STRUCTURE.search(source.text)):
                sources.append(source)  # a web page delivered as plain text, or text with a stray tag
                continue
            extracted = extract_main_text(source.text, include_tables=self.include_tables)
            converted += 1
            if not extracted.text.strip():
                empty += 1
                run.warn(f"no main text found in {source.uri or source.id}")
            sources.append(source.with_text(
                extracted.text, offsets=OffsetMap.identity(extracted.text, "extracted_text"),
                title=source.title or extracted.title))
        run.note("pages", converted)
        if empty:
            run.note("empty_pages", empty)
        return context.evolve(sources=tuple(sources))


_PARAGRAPHS = regex.compile(r"\n\s*\n")


def paragraph_spans(text: str) -> list[tuple[int, int]]:
    """The paragraphs of a text (blank-line separated) as spans without their edge newlines,
    blank ones left out."""
    spans = []
    start = 0
    for match in [*_PARAGRAPHS.finditer(text), None]:
        end = len(text) if match is None else match.start()
        a, b = start, end
        while a < b and text[a] == "\n":
            a += 1
        while b > a and text[b - 1] == "\n":
            b -= 1
        if text[a:b].strip():
            spans.append((a, b))
        if match is not None:
            start = match.end()
    return spans


class DedupeCleaner(Component):
    """Drops exact and near-duplicate paragraphs within and across sources (first one wins).

    Near duplicates: the Jaccard similarity of word-bigram sets (CJK characters count as words)
    reaching `threshold`, found by `textsim.JaccardIndex` (prefix filtering). Each paragraph's
    lookup is bounded, so templated text (thousands of paragraphs of one sentence with names and
    numbers varied) stays linear; real text never reaches the bounds and is deduplicated exactly.
    The report's `capped` counts lookups that hit a bound (there a near duplicate may be kept).
    """

    name = "clean.dedupe"
    stage = "clean"

    threshold: float = param(0.75, gt=0, le=1, doc="Jaccard similarity of shingles that makes a repeat")
    min_chars: int = param(40, ge=0, unit="characters", doc="shorter paragraphs are never dropped")
    near: bool = param(True, doc="near-duplicates too, not only exact repeats")

    @hookimpl
    def compactor_clean(self, context: Context, run: Run) -> Context:
        # first pass: each paragraph's words and shingles; no key marks a paragraph kept as is
        parsed: list[list[tuple[tuple[int, int], str | None, set[int]]]] = []
        first: dict[str, set[int]] = {}  # shingles of the first paragraph with each text
        orders: list[list[int]] = []  # the same, in text order: a tie order that every process shares
        for source in context.sources:
            paragraphs: list[tuple[tuple[int, int], str | None, set[int]]] = []
            for span in paragraph_spans(source.text):
                paragraph = source.text[span[0]:span[1]]
                words = textsim.words(paragraph)
                if len(paragraph.strip()) < self.min_chars or not words:
                    paragraphs.append((span, None, set()))
                    continue
                key = " ".join(words)
                shingles = first.get(key)
                if shingles is None:
                    order = textsim.shingle_order(words) if self.near else []
                    orders.append(order)
                    shingles = first[key] = set(order)
                paragraphs.append((span, key, shingles))
            parsed.append(paragraphs)
        # the index looks shingles up rarest first, and skips those only one paragraph holds
        index = textsim.JaccardIndex(self.threshold, textsim.shingle_counts(orders))
        exact: set[str] = set()
        dropped_exact = dropped_near = 0
        sources: list[Source] = []
        for source, paragraphs in zip(context.sources, parsed, strict=True):
            kept: list[tuple[int, int]] = []
            dropped = False
            for span, text_key, shingles in paragraphs:
                if text_key is not None:
                    if text_key in exact:
                        dropped_exact += 1
                        dropped = True
                        continue
                    exact.add(text_key)
                    if self.near and index.add_unless_near(shingles):
                        dropped_near += 1
                        dropped = True
                        continue
                kept.append(span)
            if not dropped:
                sources.append(source)
                continue
            text, edits = splice(source.text, kept, "\n\n")
            sources.append(source.with_text(text, edits=edits))
        run.note("dropped_exact", dropped_exact)
        run.note("dropped_near", dropped_near)
        run.note("comparisons", index.comparisons)
        if index.capped:
            run.note("capped", index.capped)
        return context.evolve(sources=tuple(sources))


class SeenPages(Component):
    """Drops pages this session already holds, or that repeat in the batch (URL or near-duplicate)."""

    name = "clean.seen"
    stage = "clean"

    threshold: float = param(0.8, gt=0, le=1, doc="similarity that makes a page one the session has")

    @hookimpl
    def compactor_clean(self, context: Context, run: Run) -> Context:
        session = run.settings.get("session") or {}
        store, session_id = session.get("store"), session.get("id")
        kept: list[Source] = []
        dropped: list[dict[str, Any]] = []
        urls: dict[str, str] = {}
        held: SessionPages | None = None  # read from the store once, when a page needs it
        for source in context.sources:
            sig = textsim.signature(source.text)
            twin = urls.get(source.uri or "") or next(
                (k.id for k in kept if textsim.similarity(sig, k.metadata["signature"]) >= self.threshold),
                None)
            reason = "repeated in this batch"
            if twin is None and store is not None and session_id:
                held = held if held is not None else SessionPages(store, session_id)
                twin = held.same_as(source.uri, sig, self.threshold)
                reason = "already in the session"
            if twin is not None:
                dropped.append({"url": source.uri, "source_id": source.id, "same_as": twin, "reason": reason})
                continue
            if source.uri:
                urls[source.uri] = source.id
            kept.append(replace(source, metadata=frozen_mapping({**source.metadata, "signature": sig})))
        run.note("dropped_pages", dropped)
        return context.evolve(sources=tuple(kept))


class SessionPages:
    """The pages a session holds, as `clean.seen` compares them: the store keeps each page's URL and
    signature, this judges sameness (the same URL, or a signature at least `threshold` similar among
    the candidates that share an LSH band with it)."""

    def __init__(self, store: ChunkStore, session: str) -> None:
        self.store = store
        self.session = session
        self.signatures = store.page_signatures(session)
        self.bands: dict[tuple[int, int], list[str]] = {}
        for sid, sig in self.signatures.items():  # oldest first, so the oldest twin is named
            for key in textsim.band_keys(sig):
                self.bands.setdefault(key, []).append(sid)

    def same_as(self, url: str | None, sig: tuple[int, ...], threshold: float) -> str | None:
        """The id of the session's page with this URL or a near-duplicate text, else None."""
        if url:
            found = self.store.page_with_url(self.session, url)
            if found is not None:
                return found
        for key in textsim.band_keys(sig):
            for sid in self.bands.get(key, ()):
                if textsim.similarity(sig, self.signatures[sid]) >= threshold:
                    return sid
        return None
