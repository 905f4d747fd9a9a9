"""clean.normalize, clean.html, clean.dedupe, clean.seen: make each source's working text clean and unique,
and each page new to its session."""

from __future__ import annotations

import itertools
import re
import unicodedata
from collections.abc import Iterator
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Literal

import regex

from compactor.components import Component, param
from compactor.document import Context, Source, frozen_mapping
from compactor.hookspecs import hookimpl
from compactor.plugins.clean.html import extract_main_text
from compactor.provenance import Edits, OffsetMap, Rewriter, regex_edit, source_map, spans_edit, splice
from compactor.run import Run
from compactor.store import ChunkStore
from compactor.text import similarity as textsim

if TYPE_CHECKING:
    import numpy as np

_LINE_ENDS = regex.compile(r"\r\n?|\x85")
# zero-width joiners (U+200C, U+200D) stay: they join emoji and Indic and Persian letters
_ZERO_WIDTH_CHARS = "\u200b\u2060\ufeff\u00ad"
_ZERO_WIDTH = regex.compile(f"[{_ZERO_WIDTH_CHARS}]")
_CONTROL = regex.compile(r"[^\P{Cc}\n\t\f\v]")  # form feed and vertical tab are blanks
# the same characters in UTF-8: C0 controls but tab, newline, vertical tab and form feed, DEL, C1
_C0_BYTES = bytes([*range(0x09), *range(0x0D, 0x20), 0x7F])
_C1_BYTES = re.compile(rb"\xc2[\x80-\x9f]")
# ASCII blanks only: no-break and other Unicode spaces are the source's and stay as they are.
# Whitespace collapses in three steps, each on the last one's result: these patterns' matches become
# one space, nothing, two line breaks. `_runs` finds the same matches from `str.find` hits.
_SPACES = regex.compile(r"[ \t\f\v]{2,}|[\t\f\v]")
_TRAILING = regex.compile(r" +(?=\n)")
_BLANK_LINES = regex.compile(r"\n{3,}")
_BLANKS = " \t\f\v"
_BLANK_RUN = regex.compile(r"[ \t\f\v]+")
_SPACE_RUN = regex.compile(r" +")
_NEWLINE_RUN = regex.compile(r"\n+")
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
    every line), so each change is recorded where it happens. Lines are checked one by one, not the
    whole text first: one character that may compose (a Sinhala vowel sign) makes `is_normalized`
    normalise all it is given, and a line break ends every composition."""
    form = _UNICODE_FORMS.get(name)
    if form is None or text.isascii():
        return text, None
    lines = text.split("\n")
    normal = list(map(unicodedata.is_normalized, itertools.repeat(form), lines))
    if all(normal):
        return text, None
    rewriter = Rewriter(text)
    done = line_start = at = 0
    for i in _falses(normal):
        line_start += sum(map(len, lines[at:i])) + i - at
        at = i
        for match in _CLUSTER.finditer(text, line_start, line_start + len(lines[i])):
            cluster = match.group()
            new = unicodedata.normalize(form, cluster)
            if new != cluster:
                rewriter.keep(done, match.start())
                rewriter.replace(match.start(), match.end(), new)
                done = match.end()
    rewriter.keep(done, len(text))
    return rewriter.result()


def _falses(flags: list[bool]) -> Iterator[int]:
    """The indices of the False entries, found by `list.index` (in C)."""
    at = -1
    while True:
        try:
            at = flags.index(False, at + 1)
        except ValueError:
            return
        yield at


def normalize_edits(text: str, form: Form = "NFC", collapse_whitespace: bool = True,
                    ) -> tuple[str, list[Edits]]:
    """The normalised text and the edits of each step that changed it (see `normalize_text`).

    Each step runs on the last one's result, and finds what it changes without a regex scan of the
    whole text (which costs more than all the rest on real text, where most steps change nothing):
    `str.find` hits widened into runs (`_runs`), line by line checks (`_unicode_form`), a byte table
    (`_has_control`)."""
    edits: list[Edits] = []

    def step(done: tuple[str, Edits | None]) -> str:
        if done[1] is not None:
            edits.append(done[1])
        return done[0]

    text = step(spans_edit(text, _runs(text, ("\r", "\x85"), _LINE_ENDS, ""), "\n"))
    text = step(_unicode_form(text, form))
    text = step(spans_edit(text, _runs(text, tuple(_ZERO_WIDTH_CHARS), _ZERO_WIDTH, ""), ""))
    if _has_control(text):
        text = step(regex_edit(text, _CONTROL, ""))
    if collapse_whitespace:
        text = step(spans_edit(text, _runs(text, ("  ", "\t", "\f", "\v"), _BLANK_RUN, _BLANKS), " "))
        text = step(spans_edit(text, _runs(text, (" \n",), _SPACE_RUN, " "), ""))
        text = step(spans_edit(text, _runs(text, ("\n\n\n",), _NEWLINE_RUN, "\n"), "\n\n"))
        text = step(_stripped(text))
    return text, edits


def _has_control(text: str) -> bool:
    """Whether `_CONTROL` matches somewhere: C0 controls and DEL are single UTF-8 bytes, which a
    byte table deletes; C1 controls (U+0080-U+009F) are the bytes C2 80-C2 9F."""
    data = text.encode("utf-8", "surrogatepass")
    if len(data.translate(None, _C0_BYTES)) != len(data):
        return True
    return b"\xc2" in data and _C1_BYTES.search(data) is not None


def _runs(text: str, needles: tuple[str, ...], run: regex.Pattern[str], chars: str,
          ) -> list[tuple[int, int]]:
    """The matches of `run`, widened back over `chars`, at each of `needles`, in order: the maximal
    runs of `chars` that hold a needle, or (no `chars`) the match at each needle. Found with
    `str.find` and widened around each hit, instead of a regex scan of the whole text."""
    ahead = [text.find(needle) for needle in needles]
    spans: list[tuple[int, int]] = []
    while True:
        hit = min((at for at in ahead if at >= 0), default=-1)
        if hit < 0:
            return spans
        start = hit
        while start and text[start - 1] in chars:
            start -= 1
        match = run.match(text, hit)
        end = match.end() if match else hit + 1
        spans.append((start, end))
        ahead = [text.find(needle, end) if 0 <= at < end else at
                 for needle, at in zip(needles, ahead, strict=True)]


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
    Words, exact repeats and shingle counts are read for all paragraphs at once (`_ParagraphKeys`,
    `textsim.ShingleTable`); only paragraphs whose prefix holds a shared shingle reach the index.
    """

    name = "clean.dedupe"
    stage = "clean"

    threshold: float = param(0.75, gt=0, le=1, doc="Jaccard similarity of shingles that makes a repeat")
    min_chars: int = param(40, ge=0, unit="characters", doc="shorter paragraphs are never dropped")
    near: bool = param(True, doc="near-duplicates too, not only exact repeats")

    @hookimpl
    def compactor_clean(self, context: Context, run: Run) -> Context:
        keys = _ParagraphKeys()
        parsed = [keys.read(source.text, self.min_chars) for source in context.sources]
        index = textsim.JaccardIndex(self.threshold)
        near = self._near_repeats(index, keys) if self.near else set()
        seen: set[int] = set()
        dropped_exact = dropped_near = 0
        sources: list[Source] = []
        for source, paragraphs in zip(context.sources, parsed, strict=True):
            kept: list[tuple[int, int]] = []
            dropped = False
            for span, key in paragraphs:
                if key is not None:
                    if key in seen:
                        dropped_exact += 1
                        dropped = True
                        continue
                    seen.add(key)
                    if key in near:
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

    @staticmethod
    def _near_repeats(index: textsim.JaccardIndex, keys: _ParagraphKeys) -> set[int]:
        """The distinct paragraphs (by key) near an earlier one. Each goes to the index in turn; one
        whose prefix is all its own shingles (most real paragraphs) can neither match nor be
        matched, so it is skipped without building its set."""
        table = keys.table()
        lengths = [index.prefix_length(size, own)
                   for size, own in zip(table.sizes.tolist(), table.own.tolist(), strict=True)]
        asking = [key for key, length in enumerate(lengths) if length > 0]
        prefixes = table.prefixes(asking, [lengths[key] for key in asking])
        return {key for key, prefix in zip(asking, prefixes, strict=True)
                if index.add_unless_near(table.shingles(key), prefix)}


class _ParagraphKeys:
    """Paragraphs with the same words (`textsim.words`) share a key: the index of the first of them,
    in text order across sources. Words are read in bulk as values (`textsim.word_values`) and
    paragraphs grouped by a fingerprint of them; paragraphs whose fingerprints agree have their
    words compared, so a key is never shared by different words."""

    def __init__(self) -> None:
        self._firsts: list[tuple[str, tuple[int, int]]] = []  # each key's paragraph: text, span
        self._buckets: dict[int, list[int]] = {}  # fingerprint -> keys with it
        self._words: dict[int, list[str]] = {}  # words of keys compared so far
        self._values: list[np.ndarray] = []  # word values and counts of each key's paragraph
        self._counts: list[np.ndarray] = []

    def read(self, text: str, min_chars: int) -> list[tuple[tuple[int, int], int | None]]:
        """The paragraphs of `text` with their keys (None: shorter than `min_chars`, or no words)."""
        spans = paragraph_spans(text)
        long = [span for span in spans if len(text[span[0]:span[1]].strip()) >= min_chars]
        values, counts = textsim.word_values(text, long)
        keyed: dict[tuple[int, int], int] = {}
        new = []  # whether each long paragraph is the first with its words
        for span, fingerprint, count in zip(long, textsim.fingerprints(values, counts), counts.tolist(),
                                            strict=True):
            known = len(self._firsts)
            if count:
                keyed[span] = self._key(text, span, fingerprint)
            new.append(len(self._firsts) > known)
        if any(new):
            import numpy as np

            fresh = np.array(new, bool)
            self._values.append(values[np.repeat(fresh, counts)])
            self._counts.append(counts[fresh])
        return [(span, keyed.get(span)) for span in spans]

    def _key(self, text: str, span: tuple[int, int], fingerprint: int) -> int:
        bucket = self._buckets.setdefault(fingerprint, [])
        if bucket:
            words = textsim.words(text[span[0]:span[1]])
            for key in bucket:
                if self._words_of(key) == words:
                    return key
        bucket.append(len(self._firsts))
        self._firsts.append((text, span))
        return len(self._firsts) - 1

    def _words_of(self, key: int) -> list[str]:
        words = self._words.get(key)
        if words is None:
            text, (start, end) = self._firsts[key]
            words = self._words[key] = textsim.words(text[start:end])
        return words

    def table(self) -> textsim.ShingleTable:
        """The shingles of each key's paragraph, keys in order."""
        import numpy as np

        if not self._values:
            return textsim.ShingleTable(np.zeros(0, np.uint64), np.zeros(0, np.int64))
        return textsim.ShingleTable(np.concatenate(self._values), np.concatenate(self._counts))


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
