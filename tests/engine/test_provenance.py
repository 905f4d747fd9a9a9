"""Provenance: every kept span slices the caller's input at its offsets, through every clean step,
chunker and verbatim compressor; the JSON output and the Python API agree; hostile characters
(Unicode spaces, joiners, compatibility forms) and later rewriting steps do not break the offsets."""

from __future__ import annotations

import json
import unicodedata
from dataclasses import replace

import pytest
import regex
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from compactor import Component, ContextCompacter, Pipeline, Source, hookimpl, resolved_pipeline
from compactor.formats.records import parse_text
from compactor.plugins.clean import (
    _BLANK_LINES,
    _CONTROL,
    _LINE_ENDS,
    _SPACES,
    _TRAILING,
    _ZERO_WIDTH,
    normalize_edits,
    normalize_text,
)
from compactor.provenance import OffsetMap, Rewriter, kept_spans, regex_edit, source_map
from compactor.text.relevance import index_terms

CHUNKERS = ("chunk.sentences: {size: 24}", "chunk.sentences: {size: 40, pack: false}",
            "chunk.tokens: {size: 20, overlap: 6}", "chunk.paragraphs: {size: 30}")
COMPRESSORS = ("compress.select: {}", "compress.select: {redundancy: 0.0}",
               "compress.chunk_filtering: {share: 0.5}",
               "compress.fact_centric: {share: 0.4, min_tokens: 10}",
               "compress.map_reduce: {max_tokens: 60, safety_margin: 0.5}", "compress.topics: {}")


def _pipeline(chunker: str, compressor: str, fmt: str = "text") -> Pipeline:
    chunk_name, chunk_params = chunker.split(": ", 1)
    name, params = compressor.split(": ", 1)
    return Pipeline.from_string(
        "version: 1\nbudget: {max_tokens: 80}\nsteps:\n"
        "  - use: clean.normalize\n  - use: clean.dedupe\n    with: {min_chars: 12}\n"
        f"  - use: {chunk_name}\n    with: {chunk_params}\n"
        "  - use: score.relevance\n"
        f"  - use: {name}\n    with: {params}\n"
        f"output: {{format: {fmt}}}\n")


PIPELINES = {(c, k): _pipeline(c, k) for c in CHUNKERS for k in COMPRESSORS}

_WORDS = ["alpha", "Beta", "gamma's", "10⁶", "km²", "H₂O", "caf\u0065\u0301", "\ufb01ne", "3.14",
          "数据", "中国的首都", "北京", "😀", "👩\u200d💻", "Ｆｕｌｌ", "2024年", "résumé", "Paris"]
_GAPS = [" ", "  ", "\t", "\u00a0", " \u200b", "   \t ", "\u3000"]
_ENDS = [". ", "。", "! ", "？", ".\r\n", ".\n", ".\r\n\r\n", ".\n\n\n", ". \n \n"]


@st.composite
def documents(draw: st.DrawFn) -> str:
    """English, Chinese, emoji, CRLF, tabs, NBSP, zero-width and repeated spaces, and paragraphs
    repeated verbatim (so clean.dedupe drops some)."""
    paragraphs = []
    for _ in range(draw(st.integers(1, 6))):
        sentences = []
        for _ in range(draw(st.integers(1, 4))):
            words = draw(st.lists(st.sampled_from(_WORDS), min_size=2, max_size=12))
            gaps = draw(st.lists(st.sampled_from(_GAPS), min_size=len(words), max_size=len(words)))
            sentence = "".join(w + g for w, g in zip(words, gaps, strict=True)).rstrip(" ")
            sentences.append(sentence + draw(st.sampled_from(_ENDS)))
        paragraphs.append("".join(sentences))
    if len(paragraphs) > 1 and draw(st.booleans()):
        paragraphs.insert(draw(st.integers(0, len(paragraphs))), paragraphs[0])  # a duplicate
    separator = draw(st.sampled_from(["\n\n", "\r\n\r\n", "\n \n", "\n\n\n\t"]))
    lead = draw(st.sampled_from(["", "  ", "\ufeff", "\r\n"]))
    return lead + separator.join(paragraphs)


def _loose(text: str) -> str:
    """Text as the clean steps leave it, spacing aside: to compare a base slice with output."""
    return " ".join(normalize_text(text).split())


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(documents(), st.sampled_from(sorted(PIPELINES)), st.sampled_from(["", "数据 Paris", "alpha 10⁶"]))
def test_every_kept_span_slices_the_input(text: str, key: tuple[str, str], query: str) -> None:
    context = PIPELINES[key].run(text, query=query or None)
    output = _loose(context.output or "")
    for span in kept_spans(context):
        assert span.offsets_into == "input"
        assert text[span.start:span.end] == span.text
        assert span.text.strip() == span.text or not span.text.strip()
        # what the span holds is what the output shows
        assert _loose(span.text) in output, (span, context.output)


@settings(max_examples=60, deadline=None)
@given(documents(), st.sampled_from(["NFC", "NFKC"]))
def test_offset_map_points_exact_pieces_at_the_same_characters(text: str, form: str) -> None:
    cleaned, edits = normalize_edits(text, form)  # type: ignore[arg-type]
    offsets = OffsetMap.identity(text)
    for done in edits:
        offsets = offsets.then(done)
    assert offsets.length == len(cleaned)
    for new_start, new_end, old_start, old_end, exact in offsets.pieces:
        if exact:
            assert text[old_start:old_end] == cleaned[new_start:new_end]
        else:  # a rewritten stretch: the same text once normalised
            assert unicodedata.normalize("NFKC", normalize_text(text[old_start:old_end], form)).split() == \
                unicodedata.normalize("NFKC", cleaned[new_start:new_end]).split() or \
                not cleaned[new_start:new_end].strip()
    # every word of the cleaned text maps to a slice of the input that cleans to it
    for word in regex.finditer(r"\S+", cleaned):
        start, end = offsets.span(word.start(), word.end())
        assert normalize_text(text[start:end], form) == word.group()


def test_composed_edits_follow_a_dropped_paragraph() -> None:
    text = "one  two\r\n\r\nDROPPED here\r\n\r\nthree\tfour"
    cleaned, edits = normalize_edits(text)
    offsets = OffsetMap.identity(text)
    for done in edits:
        offsets = offsets.then(done)
    # drop the middle paragraph
    first, third = cleaned.index("one"), cleaned.index("three")
    rewriter = Rewriter(cleaned)
    rewriter.keep(first, cleaned.index("\n"))
    rewriter.insert(third, "\n\n")
    rewriter.keep(third, len(cleaned))
    final, dropped = rewriter.result()
    assert final == "one two\n\nthree four"
    offsets = offsets.then(dropped)
    ranges = offsets.ranges(0, len(final))
    assert [text[a:b] for a, b in ranges] == ["one  two", "three\tfour"]
    assert offsets.span(final.index("three"), len(final)) == (text.index("three"), len(text))


def test_regex_edit_without_a_change_records_nothing() -> None:
    assert regex_edit("plain text", regex.compile(r"\t"), " ") == ("plain text", None)


@pytest.mark.parametrize("fmt", ["json"])
def test_json_and_python_api_agree_and_report_partial_chunks(fmt: str) -> None:
    text = ("The culture reached 10⁶ cells per ml.  The land\u00a0area is 438,491.51 km².\r\n\r\n"
            "Water is H₂O.\tIt is wet, and it is nice to drink on long summer afternoons with good "
            "friends who talk about everything and nothing at all for hours.")
    pipeline = Pipeline.from_string(
        "version: 1\nbudget: {max_tokens: 30}\nsteps:\n  - use: clean.normalize\n"
        "  - use: chunk.sentences\n    with: {size: 200}\n  - use: compress.select\n"
        f"output: {{format: {fmt}}}\n")
    context = pipeline.run(text)
    data = json.loads(context.output or "")
    spans = kept_spans(context)
    assert data["spans"] == [s.to_dict() for s in spans]
    assert spans and all(text[s.start:s.end] == s.text for s in spans)
    assert "10⁶" in spans[0].text and "\u00a0" in spans[0].text  # the source's own characters
    [chunk] = data["chunks"]
    assert chunk["partial"] and not chunk["kept"]  # the budget holds only part of the one chunk
    assert text[chunk["start"]:chunk["end"]] == text  # a chunk's offsets are the input's too


def test_html_offsets_index_the_extracted_text() -> None:
    page = ("<html><body><nav>Home | About</nav><article><h1>Water</h1><p>Water is H₂O and "
            "covers 71% of the surface.</p><p>Ice   floats on water.</p></article></body></html>")
    context = Pipeline.from_string(
        "version: 1\nsteps:\n  - use: clean.html\n  - use: clean.normalize\n"
        "  - use: chunk.sentences\n  - use: compress.select\n").run(
            Source.from_text(page, kind="web_page", uri="https://example.org/w"))
    [source] = context.sources
    base = source_map(source)
    assert base.base_kind == "extracted_text" and "<p>" not in base.base
    spans = kept_spans(context)
    assert spans and all(s.offsets_into == "extracted_text" and base.base[s.start:s.end] == s.text
                         for s in spans)


# Hostile text against provenance and fidelity, as minimal reproducers. A test marked xfail(strict=True)
# is a known defect: once fixed it turns into an XPASS failure, so the marker goes with the fix.


def _plain_normalize(text: str, form: str) -> str:
    """The old approach: whole-text Unicode form, then the same regex substitutions."""
    text = unicodedata.normalize(form, _LINE_ENDS.sub("\n", text))
    for pattern, new in ((_ZERO_WIDTH, ""), (_CONTROL, ""), (_SPACES, " "), (_TRAILING, ""),
                         (_BLANK_LINES, "\n\n")):
        text = pattern.sub(new, text)
    return text.strip()


_HOSTILE = [*"ab \t\n\r\x0c\x0b\x85\u00a0\u3000\u200b\u200d\ufeff\u00ad\u0301\u0308\u0327e"
                "\u1100\u1161\u11a8가\ufb01²₂\uff21\u2126\u212b\u0958\u0915\u093c\u0dd9\u0dcf"
                "\u09c7\u09be😀🏽\u2028", "\ud800", "\U0001F469"]


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(st.sampled_from(_HOSTILE), max_size=30).map("".join), st.sampled_from(["NFC", "NFKC"]))
def test_recorded_normalize_equals_the_plain_one_and_maps_every_word(text: str, form: str) -> None:
    cleaned, edits = normalize_edits(text, form)  # type: ignore[arg-type]
    assert cleaned == _plain_normalize(text, form)
    offsets = OffsetMap.identity(text)
    for done in edits:
        offsets = offsets.then(done)
    for word in regex.finditer(r"\S+", cleaned):
        start, end = offsets.span(word.start(), word.end())
        assert normalize_text(text[start:end], form) == word.group()


def test_default_normalize_keeps_compatibility_characters_and_unicode_spaces() -> None:
    text = "10⁶ km² H₂O ﬁ Ｆｕｌｌ，。 100\u00a0USD 全角\u3000空格"
    assert normalize_text(text) == text


def test_form_feed_vertical_tab_and_nel_keep_a_word_boundary() -> None:
    for sep in ("\x0c", "\x0b", "\x85"):
        assert normalize_text(f"end of page one{sep}Start of page two").split()[3:5] == ["one", "Start"]


def test_zero_width_joiner_inside_a_grapheme_is_kept() -> None:
    assert normalize_text("coder 👩\u200d💻 here") == "coder 👩\u200d💻 here"
    assert normalize_text("می\u200cخواهم") == "می\u200cخواهم"


@pytest.mark.xfail(strict=True, reason="clean.html's extractor collapses &nbsp; (and U+3000) to an ASCII "
                   "space in the extracted text, so the output's no-break space is not the page's")
def test_html_no_break_space_survives_extraction() -> None:
    page = ("<html><body><article><p>The area is 100&nbsp;km² and the rest of this paragraph is long "
            "enough to be the page's main content, really it is.</p></article></body></html>")
    context = resolved_pipeline("generic").run([Source.from_text(page, kind="web_page", uri="u")])
    assert "100\u00a0km²" in (context.output or "")


def test_session_fact_spans_slice_the_search_result() -> None:
    content = ("Paris  is  the  capital  of  France  and  its  largest  city.  "
               "Bakeries  sell  fresh  bread  every  morning  in  the  old  town.")
    compacter = ContextCompacter("fact_centric", query="capital of France")
    compacter.process_search_results([("https://example.org/p", content)])
    facts = compacter.get_checklist_context()
    assert isinstance(facts, list) and facts and all(f.span for f in facts)
    for fact in facts:  # the span locates the fact in the caller's content (spacing is cleaned)
        assert fact.span is not None
        assert " ".join(content[fact.span[1]:fact.span[2]].split()) == fact.text


def test_a_chunk_marked_kept_has_its_text_in_the_spans() -> None:
    a = Source.from_text("Paris is the capital of France and its largest city by population. "
                         + "Unrelated filler about weather in spring and tourists on river banks. " * 3,
                         uri="https://a.example/1")
    b = Source.from_text("Paris, the capital of France, is also its largest city by population! "
                         + "Bakeries sell fresh bread every morning across the old town district. " * 3,
                         uri="https://b.example/2")
    context = resolved_pipeline("deep-search").run([a, b], query="capital of France largest city",
                                                   output_format="json")
    data = json.loads(context.output or "")
    for chunk in data["chunks"]:
        if chunk["kept"]:
            assert any(s["source_id"] == chunk["source_id"] and s["start"] < chunk["end"]
                       and s["end"] > chunk["start"] for s in data["spans"]), chunk["id"]


def test_transcript_json_offsets_say_they_index_the_rendered_segments() -> None:
    raw = ("1\n00:00:01,000 --> 00:00:04,000\nHello  there, this is   the first line.\n\n"
           "2\n00:00:05,000 --> 00:00:08,000\nSecond line here.\n")
    sources = parse_text(raw, "t.srt", ".srt")
    context = resolved_pipeline("transcripts").run(sources, query="first line", output_format="json")
    data = json.loads(context.output or "")
    # the organiser lays segments out (times, speakers): no verbatim stretch of the file to claim;
    # chunk offsets index the segments as compactor rendered them, and the JSON says so
    [source] = data["sources"]
    assert source["offsets_into"] == "text" and "Hello" in source["base_text"]
    for chunk in data["chunks"]:
        assert source["base_text"][chunk["start"]:chunk["end"]].strip()


class _Redact(Component):
    """Redacts a password (rewrites the text without recording edits, as any plain cleaner would)."""

    name = "clean.redact_test"
    stage = "clean"

    @hookimpl
    def compactor_clean(self, context, run):  # type: ignore[no-untyped-def]
        return context.evolve(sources=tuple(replace(s, text=s.text.replace("hunter2", "*******"))
                                            for s in context.sources))


class _RedactPlugin:
    @hookimpl
    def compactor_register_components(self, register):  # type: ignore[no-untyped-def]
        register(_Redact)


def test_spans_never_show_text_a_later_cleaner_replaced() -> None:
    pipeline = Pipeline.from_string(
        "version: 1\nsteps:\n  - use: clean.normalize\n  - use: clean.redact_test\n"
        "  - use: chunk.sentences\n  - use: compress.select\n", plugins=[_RedactPlugin()])
    data = json.loads(pipeline.run("My  password is hunter2 and my name is Bob.",
                                   output_format="json").output or "")
    assert all("hunter2" not in s["text"] for s in data["spans"])


def test_kangxi_radicals_inside_chinese_words_match() -> None:
    assert "人口" in index_terms("该市⼈口增长")
