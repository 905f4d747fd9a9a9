"""clean.normalize, clean.html, clean.dedupe: make each source's working text clean and unique."""

from __future__ import annotations

import unicodedata
from typing import Literal

import regex

from compactor import textsim
from compactor.components import Component
from compactor.document import Context, Source
from compactor.hookspecs import hookimpl
from compactor.plugins.html_extract import extract_main_text
from compactor.run import Run

_ZERO_WIDTH = regex.compile(r"[\u200b\u200c\u200d\u2060\ufeff\u00ad]")
_CONTROL = regex.compile(r"[^\P{Cc}\n\t]")
_SPACES = regex.compile(r"[^\S\n]+")
_TRAILING = regex.compile(r"[ \t]+\n")
_BLANK_LINES = regex.compile(r"\n{3,}")
_LOOKS_HTML = regex.compile(r"<(?:html|body|div|p|article|head|span|table|br)\b", regex.IGNORECASE)


def normalize_text(text: str, form: str = "NFKC", collapse_whitespace: bool = True) -> str:
    """Unicode normal form, no control or zero-width characters, tidy whitespace."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    if form != "none":
        text = unicodedata.normalize(form, text)
    text = _ZERO_WIDTH.sub("", text)
    text = _CONTROL.sub("", text)
    if collapse_whitespace:
        text = _SPACES.sub(" ", text.replace("\t", " "))
        text = _TRAILING.sub("\n", text)
        text = _BLANK_LINES.sub("\n\n", text)
        text = text.strip()
    return text


class NormalizeCleaner(Component):
    """Unicode normalisation (NFKC by default), control and zero-width characters, whitespace."""

    name = "clean.normalize"
    stage = "clean"

    def __init__(self, *, form: Literal["NFKC", "NFC", "none"] = "NFKC",
                 collapse_whitespace: bool = True) -> None:
        self.form = form
        self.collapse_whitespace = collapse_whitespace

    @hookimpl
    def compactor_clean(self, context: Context, run: Run) -> Context:
        sources = []
        for source in context.sources:
            text = normalize_text(source.text, self.form, self.collapse_whitespace)
            sources.append(source if text == source.text else source.with_text(text))
        return context.evolve(sources=tuple(sources))


class HtmlCleaner(Component):
    """HTML to main text: drops scripts, navigation, footers, forms and boilerplate blocks, keeps
    headings, paragraphs, lists and tables, and picks the main content by text density.

    Sources that are not HTML pass through unchanged.
    """

    name = "clean.html"
    stage = "clean"

    def __init__(self, *, include_tables: bool = True) -> None:
        self.include_tables = include_tables

    @hookimpl
    def compactor_clean(self, context: Context, run: Run) -> Context:
        sources = []
        converted = empty = 0
        for source in context.sources:
            if not (source.kind == "web_page" or _LOOKS_HTML.search(source.text[:4096])):
                sources.append(source)
                continue
            if not _LOOKS_HTML.search(source.text):
                sources.append(source)  # a web page delivered as plain text
                continue
            extracted = extract_main_text(source.text, include_tables=self.include_tables)
            converted += 1
            if not extracted.text.strip():
                empty += 1
                run.warn(f"no main text found in {source.uri or source.id}")
            sources.append(source.with_text(extracted.text,
                                            title=source.title or extracted.title))
        run.note("pages", converted)
        if empty:
            run.note("empty_pages", empty)
        return context.evolve(sources=tuple(sources))


_PARAGRAPHS = regex.compile(r"\n\s*\n")
class DedupeCleaner(Component):
    """Drops exact and near-duplicate paragraphs within and across sources (first one wins).

    Near duplicates: MinHash over word bigrams (CJK characters count as words) with LSH, confirmed
    by the Jaccard similarity of the shingle sets reaching `threshold`.
    """

    name = "clean.dedupe"
    stage = "clean"

    def __init__(self, *, threshold: float = 0.75, min_chars: int = 40,
                 near: bool = True) -> None:
        self.threshold = threshold
        self.min_chars = min_chars
        self.near = near

    @staticmethod
    def check_params(params: dict[str, object]) -> list[str]:
        threshold = params["threshold"]
        return [] if isinstance(threshold, float) and 0 < threshold <= 1 else [
            "threshold must be in (0, 1]"]

    @hookimpl
    def compactor_clean(self, context: Context, run: Run) -> Context:
        # first pass: each paragraph's words and shingles; no key marks a paragraph kept as is
        parsed: list[list[tuple[str, str | None, set[int]]]] = []
        first: dict[str, set[int]] = {}  # shingles of the first paragraph with each text
        for source in context.sources:
            paragraphs: list[tuple[str, str | None, set[int]]] = []
            for paragraph in _PARAGRAPHS.split(source.text):
                words = textsim.words(paragraph)
                if len(paragraph.strip()) < self.min_chars or not words:
                    paragraphs.append((paragraph, None, set()))
                    continue
                key = " ".join(words)
                shingles = first.get(key)
                if shingles is None:
                    shingles = first[key] = textsim.shingles(words) if self.near else set()
                paragraphs.append((paragraph, key, shingles))
            parsed.append(paragraphs)
        # the index looks shingles up rarest first, and skips those only one paragraph holds
        index = textsim.JaccardIndex(self.threshold, textsim.shingle_counts(first.values()))
        exact: set[str] = set()
        dropped_exact = dropped_near = 0
        sources: list[Source] = []
        for source, paragraphs in zip(context.sources, parsed, strict=True):
            kept: list[str] = []
            for paragraph, key, shingles in paragraphs:
                if key is None:
                    kept.append(paragraph)
                    continue
                if key in exact:
                    dropped_exact += 1
                    continue
                exact.add(key)
                if self.near and index.add_unless_near(shingles):
                    dropped_near += 1
                    continue
                kept.append(paragraph)
            text = "\n\n".join(p.strip("\n") for p in kept if p.strip())
            sources.append(source if text == source.text else source.with_text(text))
        run.note("dropped_exact", dropped_exact)
        run.note("dropped_near", dropped_near)
        run.note("comparisons", index.comparisons)
        return context.evolve(sources=tuple(sources))
