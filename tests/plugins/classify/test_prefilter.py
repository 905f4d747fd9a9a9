"""classify.rules with the literal prefilter: the labels of a scan with every pattern, on real text and
on custom tables; the prefilter never skips a pattern that matches."""

from __future__ import annotations

import contextlib
import functools
import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import regex
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from compactor import Pipeline
from compactor.plugins.classify import classify_text, classify_texts, load_tables
from compactor.plugins.clean import normalize_text
from compactor.text import prefilter
from compactor.text.prefilter import (
    _LOWER_UNSAFE,
    _WHITESPACE,
    LINE_START,
    SEPARATOR,
    Prefilter,
    Scanner,
    anchors,
    required_literals,
    seal,
)
from compactor.text.sentences import detect_lang

from ...helpers import EVAL, REPO

TABLE = REPO / "plugins" / "data" / "classify.yaml"


# --- the algorithm before the prefilter, kept as the reference ------------------------------------

@functools.cache
def reference_tables(path: Path) -> dict[str, Any]:
    data = yaml.safe_load(path.read_text(encoding="utf-8"))

    def compile_(pattern: str, english: bool) -> regex.Pattern[str]:
        return regex.compile(pattern, regex.IGNORECASE | regex.MULTILINE if english else regex.MULTILINE)

    def literal(p: str) -> bool:
        return regex.escape(p, literal_spaces=True) == p

    return {
        "min_score": float(data.get("min_score", 1.0)),
        "types": {name: [(compile_(p, lang == "en"), float(w)) for lang in ("en", "zh")
                         for p, w in (spec.get(lang) or {}).items() if lang == "en" or not literal(p)]
                  for name, spec in data["types"].items()},
        "literals": {name: [(p, float(w)) for p, w in (spec.get("zh") or {}).items() if literal(p)]
                     for name, spec in data["types"].items()},
        "levels": {name: compile_(f"{s['en']}|{s['zh']}", True)
                   for name, s in data["technical_level"].items()},
        "action": {name: compile_(f"{s['en']}|{s['zh']}", True)
                   for name, s in data["actionability"].items()},
    }


def reference_classify(text: str, tokens: int, tables: Mapping[str, Any]) -> dict[str, Any]:
    per_100 = 100.0 / max(tokens, 20)
    scores: dict[str, float] = {}
    keywords: dict[str, list[str]] = {}
    han = regex.search(r"\p{Han}", text) is not None
    for name, patterns in tables["types"].items():
        total, found = 0.0, []
        if han:
            for literal, weight in tables["literals"][name]:
                hits = text.count(literal)
                if hits:
                    total += weight * hits
                    found.append(literal)
        for pattern, weight in patterns:
            matches = pattern.findall(text)
            if matches:
                total += weight * len(matches)
                found.extend(m if isinstance(m, str) else m[0] for m in matches[:3])
        if total:
            scores[name] = total * per_100
            keywords[name] = sorted({k.strip().lower() for k in found if len(k.strip()) > 1})[:8]
    best = max(scores, key=lambda k: scores[k]) if scores else "general"
    if best != "general" and scores[best] < tables["min_score"]:
        best = "general"
    ranked = sorted(scores.values(), reverse=True)
    if best == "general":
        confidence = 0.5
    else:
        margin = (ranked[0] - (ranked[1] if len(ranked) > 1 else 0.0)) / ranked[0]
        confidence = round(0.4 + 0.3 * margin + 0.3 * min(1.0, ranked[0] / 20), 3)
    level_hits = {name: len(p.findall(text)) for name, p in tables["levels"].items()}
    level = ("advanced" if level_hits.get("advanced", 0) >= 1
             else "intermediate" if level_hits.get("intermediate", 0) >= 1 else "basic")
    action = {name: len(p.findall(text)) for name, p in tables["action"].items()}
    if action.get("actionable", 0) > action.get("historical", 0):
        actionability = "actionable"
    elif action.get("historical", 0):
        actionability = "historical"
    else:
        actionability = "informational"
    return {"type": best, "confidence": confidence, "keywords": keywords.get(best, []),
            "type_scores": {k: round(v, 3) for k, v in sorted(scores.items())},
            "technical_level": level, "actionability": actionability, "language": detect_lang(text)}


# --- real text ----------------------------------------------------------------------------------

def _jsonl(path: Path) -> Iterator[dict[str, Any]]:
    with path.open(encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                yield json.loads(line)


def eval_documents(per_set: int = 12) -> list[str]:
    """English articles, Chinese passages and meetings, coding-agent histories (code, tracebacks)."""
    docs: list[str] = []
    sets = {
        "summarization-frank-cnndm-xsum/summ.jsonl": lambda r: [r["document"]],
        "cmrc2018-zh-dev/qa.jsonl": lambda r: [c["text"] for c in r["contexts"]],
        "vcsum-zh-meetings/meetings.jsonl": lambda r: [
            "\n".join(u["text"] for u in r["segments"][0]["utterances"][:40])],
        "agent-trajectories-mini-swe-agent-swebench/conversations.jsonl": lambda r: [
            m["content"] for m in r["messages"][:30] if isinstance(m.get("content"), str)],
        "chat-aider-examples/conversations.jsonl": lambda r: [
            m["content"] for m in r["messages"] if isinstance(m.get("content"), str)],
    }
    for name, texts in sets.items():
        for i, record in enumerate(_jsonl(EVAL / name)):
            if i >= per_set:
                break
            docs.extend(texts(record))
    return docs


@pytest.mark.skipif(not (EVAL / "cmrc2018-zh-dev").is_dir(), reason="../shared/eval not present")
def test_labels_equal_the_full_scan_on_real_text() -> None:
    docs = eval_documents()
    pipeline = Pipeline.from_string("version: 1\nsteps:\n  - use: chunk.sentences\n    with: {size: 48}\n")
    chunks = [*pipeline.run([normalize_text(d) for d in docs]).chunks,
              *pipeline.run(docs[::7]).chunks]  # some raw text too (indentation, fences)
    assert len(chunks) > 600
    langs = {detect_lang(c.text) for c in chunks}
    assert {"en", "zh"} <= langs
    reference = reference_tables(TABLE)
    tables = load_tables()
    types = set()
    for chunk in chunks:
        expected = reference_classify(chunk.text, chunk.tokens, reference)
        assert classify_text(chunk.text, chunk.tokens, tables) == expected, chunk.text
        types.add(expected["type"])
    assert len(types) >= 5  # the comparison covered most types, not just "general"
    # all at once (one scan of the joined texts), and in runs of a few
    expected_all = [classify_text(c.text, c.tokens, tables) for c in chunks]
    assert classify_texts([c.text for c in chunks], [c.tokens for c in chunks], tables) == expected_all
    for at in range(0, len(chunks), 37):
        part = chunks[at:at + 37]
        labels = classify_texts([c.text for c in part], [c.tokens for c in part], tables)
        assert labels == expected_all[at:at + 37]


CUSTOM = r"""
min_score: 0.5
types:
  billing:
    en: {'\b(?:invoice|refund)s?\b': 2, '(\d+)\s*(?:USD|EUR)': 1.5, '(?<=total: )\d+': 1,
         '\p{Lu}{3}-\d+': 1, '(?i:VAT)\b': 1, '^\s*\$': 1}
    zh: {'发票': 2, '退款': 2, '金额[:：]\d+': 1.5, '吗？': 1}
  travel:
    en: {'\b(fl(igh)t|hotel)(s)?\b': 2, 'check[- ]?in': 1, '[^\W\d]+port\b': 1, 'a{,2}b': 0.1}
    zh: {'航班': 2, '酒店': 2}
technical_level:
  advanced: {en: '\b(?:ledger|reconcil\w+)\b', zh: '对账|账本'}
  intermediate: {en: '\bbalance\b', zh: '余额'}
actionability:
  actionable: {en: '\b(?:pay|book|cancel)\b', zh: '支付|预订|取消'}
  historical: {en: '\b(?:paid|booked)\b', zh: '已支付|已预订'}
"""

CUSTOM_TEXTS = [
    "Please pay invoice INV-2041: total: 120 USD, VAT included. Refunds take 5 days.",
    "Your flight to the airport is booked; hotel check-in at 3pm. Flights were paid.",
    "  $ 40 balance left after the ledger reconciliation of invoices and refunds.",
    "请支付发票，金额：300，退款需要对账吗？已预订的酒店和航班可以取消。",
    "Passport, transport and support: aab aaab b. İNVOİCE ſtatus for the İnvoice.",
    "Invoice\ninvoice\nINVOICE 12 EUR 13 eur; check in, checkin, CHECK-IN",
    "",
]


def test_custom_tables_keep_their_labels(tmp_path: Path) -> None:
    path = tmp_path / "billing.yaml"
    path.write_text(CUSTOM, encoding="utf-8")
    reference = reference_tables(path)
    tables = load_tables(str(path))
    for text in CUSTOM_TEXTS:
        expected = reference_classify(text, 30, reference)
        assert classify_text(text, 30, tables) == expected, text
    assert classify_text(CUSTOM_TEXTS[0], 30, tables)["type"] == "billing"
    assert classify_text(CUSTOM_TEXTS[1], 30, tables)["type"] == "travel"
    # all at once, as the step labels its chunks
    assert classify_texts(CUSTOM_TEXTS, [30] * len(CUSTOM_TEXTS), tables) == \
        [classify_text(text, 30, tables) for text in CUSTOM_TEXTS]


def test_the_pipeline_step_takes_a_custom_table(tmp_path: Path) -> None:
    path = tmp_path / "billing.yaml"
    path.write_text(CUSTOM, encoding="utf-8")
    pipeline = Pipeline.from_string(
        "version: 1\nsteps:\n  - use: chunk.sentences\n    with: {size: 40}\n"
        "  - use: classify.rules\n    with: {patterns: billing.yaml}\n", folder=tmp_path)
    context = pipeline.run(CUSTOM_TEXTS[0])
    assert {c.labels["type"] for c in context.chunks} == {"billing"}


# --- the prefilter ------------------------------------------------------------------------------

@pytest.mark.parametrize(("pattern", "ignorecase", "expected"), [
    (r"\b(?:api|apis|endpoint)s?\b", True, {"api", "endpoint"}),
    (r"\b\w+(?:Error|Exception)\b", True, {"error", "exception"}),
    (r"\bexit (?:code|status) [1-3]", True, {f"exit {w} {d}" for w in ("code", "status") for d in "123"}),
    (r"optimi[sz]ation|\bGET\s+/", True, {"optimisation", "optimization", "get"}),
    (r"\b(?:must|shall)\s+(?:be|return)\b", True, {"must", "shall"}),
    (r"^\s*[-*]\s*\[[ xX]\]", True, {"[ ]", "[x]"}),
    (r"(?:ab)+c?", False, {"ab"}),
    (r"吗？|能不能", False, {"吗？", "能不能"}),
    (r"Ab|aB", False, {"Ab", "aB"}),
    (r"```|^\s{4}\S", True, None),  # one branch needs no literal
    (r"colou?r?", True, {"colo"}),
    (r"\p{Lu}+X", True, {"x"}),  # the class is unknown, the literal after it is not
    (r"(?i)abc", False, None),  # inline flags: not modelled
    (r"(?:ab){e<=1}", False, None),  # fuzzy matching: not modelled
    (r"(a)\1", False, None),  # back reference
    (r"café", True, {"caf"}),  # case rules beyond ASCII and Han are not modelled: the rest is used
    (r"naïve|über", True, {"na", "ber"}),
    (r"éé|ab", True, None),  # nothing left of "éé"
    (r"x*", False, None),
])
def test_required_literals(pattern: str, ignorecase: bool, expected: set[str] | None) -> None:
    found = required_literals(pattern, ignorecase)
    assert (None if found is None else set(found)) == expected


ATOMS = ["a", "b", "c", "ab", "S", "I", "İ", "ı", "ſ", "é", " ", "x", r"\b", "^", "$", ".", r"\w", r"\s",
         r"\d", "[ab]", "[a-c]", "[^a]", r"\?", r"\(", "-", r"\-", "(?=a)", "(?!b)", "(?<=a)"]
QUANTIFIERS = ["", "", "", "?", "*", "+", "{2}", "{1,3}", "{,2}", "{2,}", "??", "+?", "*+"]


@st.composite
def patterns(draw: st.DrawFn, depth: int = 0) -> str:
    parts = []
    for _ in range(draw(st.integers(1, 4))):
        if depth < 2 and draw(st.booleans()) and draw(st.booleans()):
            inner = "|".join(draw(st.lists(patterns(depth + 1), min_size=1, max_size=3)))
            atom = draw(st.sampled_from(["(?:{})", "({})", "(?>{})"])).format(inner)
        else:
            atom = draw(st.sampled_from(ATOMS))
        zero_width = atom in (r"\b", "^", "$") or atom.startswith("(?=") or atom.startswith("(?<")
        parts.append(atom + ("" if zero_width or atom.startswith("(?!") else
                             draw(st.sampled_from(QUANTIFIERS))))
    return "".join(parts)


@settings(max_examples=400, deadline=None)
@given(patterns(), st.booleans(),
       st.lists(st.text(alphabet="aAbBcCsSiIxX ?()-é\nİıſ12", max_size=14), min_size=1, max_size=8))
def test_prefilter_never_skips_a_pattern_that_matches(pattern: str, ignorecase: bool,
                                                      texts: list[str]) -> None:
    try:
        compiled = regex.compile(pattern, regex.IGNORECASE | regex.MULTILINE if ignorecase else 0)
    except regex.error:
        return
    prefilter = Prefilter([compiled, "ab", "A"])
    for text in texts:
        possible = prefilter.possible(text)
        if compiled.search(text):
            assert 0 in possible, (pattern, text)
        unsafe = any(c in text for c in _LOWER_UNSAFE)
        # plain strings: found case-sensitively ("ab" is looked for in the lower-cased text)
        assert ("ab" in text) <= (1 in possible) <= ("ab" in text.lower() or unsafe)
        assert (2 in possible) == ("A" in text) or unsafe


def test_prefilter_keeps_patterns_matched_by_case_folding_beyond_ascii() -> None:
    for letter in "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ":
        pattern = regex.compile(rf"\b{letter}x", regex.IGNORECASE)
        prefilter = Prefilter([pattern])
        for other in "İıſKÅµ":
            text = f"an {other}x here"
            if pattern.search(text):
                assert 0 in prefilter.possible(text), (letter, other)


def test_lower_case_matches_regex_case_folding_for_ascii_and_han() -> None:
    """Prefilter literals are ASCII or Han; `text.lower()` must keep every character that `regex`
    matches to such a literal ignoring case, except the two listed as unsafe."""
    get_all_cases = getattr(getattr(regex, "_regex", None), "get_all_cases", None)
    if get_all_cases is None:
        pytest.skip("regex internals changed")
    flags = regex.IGNORECASE | regex.UNICODE
    han = regex.compile(r"\p{Han}")
    literal_chars = [chr(c) for c in range(128)]
    literal_chars += [chr(c) for c in range(0x3400, 0x2A6E0) if han.match(chr(c))]
    for ch in literal_chars:
        for other in map(chr, get_all_cases(flags, ord(ch))):
            assert other.lower() == ch.lower() or other in _LOWER_UNSAFE, (ch, other)


# --- many texts in one pass -------------------------------------------------------------------------

SCAN_ATOMS = [*ATOMS, r"\W", r"\S", r"\D", "[^a]", r"[^\n]", r"\A", r"\Z", "\n", r"\n", r"\p{Han}", "中",
              "(?<!a)", "(?<=\\s)", "(?=\\s)", "(?!b)", r"[\s-]", "{", "}", "a{x}"]


@st.composite
def scan_patterns(draw: st.DrawFn, depth: int = 0) -> str:
    parts = []
    for _ in range(draw(st.integers(1, 4))):
        if depth < 2 and draw(st.booleans()) and draw(st.booleans()):
            inner = "|".join(draw(st.lists(scan_patterns(depth + 1), min_size=1, max_size=3)))
            atom = draw(st.sampled_from(["(?:{})", "({})", "(?>{})"])).format(inner)
        else:
            atom = draw(st.sampled_from(SCAN_ATOMS))
        zero_width = atom in (r"\b", "^", "$", r"\A", r"\Z") or atom.startswith(("(?=", "(?<", "(?!"))
        parts.append(atom + ("" if zero_width else draw(st.sampled_from(QUANTIFIERS))))
    return "".join(parts)


def each_alone(item: regex.Pattern[str] | str, texts: list[str]) -> list[tuple[int, int, int, Any]]:
    """What a scan of each text alone finds: `finditer` (groups too), or `str.count`'s occurrences."""
    found: list[tuple[int, int, int, Any]] = []
    for i, text in enumerate(texts):
        if isinstance(item, str):
            at = text.find(item) if item else -1
            while at >= 0:
                found.append((i, at, at + len(item), None))
                at = text.find(item, at + len(item))
        else:
            found += [(i, m.start(), m.end(), m.groups()) for m in item.finditer(text)]
    return found


def scanned(hits: list[tuple[int, int, int, Any]]) -> list[tuple[int, int, int, Any]]:
    return [(i, a, b, None if m is None else m.groups()) for i, a, b, m in hits]


@contextlib.contextmanager
def literal_finder(kind: str) -> Iterator[bool]:
    """Scanners built inside find literals with `str.find` scans ("find"), pyahocorasick's automaton
    ("automaton") or the stdlib trie ("trie"); yields False when that one is not installed."""
    saved = prefilter._FEW, prefilter.ahocorasick
    try:
        prefilter._FEW = 1 << 30 if kind == "find" else 0
        if kind == "trie":
            prefilter.ahocorasick = None
        yield kind != "automaton" or prefilter.ahocorasick is not None
    finally:
        prefilter._FEW, prefilter.ahocorasick = saved


FINDERS = ["find", "automaton", "trie"]


@settings(max_examples=300, deadline=None)
@given(scan_patterns(), st.sampled_from([0, regex.IGNORECASE, regex.MULTILINE,
                                         regex.IGNORECASE | regex.MULTILINE, regex.DOTALL]),
       st.lists(st.text(alphabet="aAbBcCsSiIxX ?()-é\n\tİıſ12中_", max_size=14), min_size=1, max_size=8))
def test_the_scanner_finds_what_each_text_alone_finds(pattern: str, flags: int, texts: list[str]) -> None:
    try:
        compiled = regex.compile(pattern, flags)
    except regex.error:
        return
    items: list[regex.Pattern[str] | str] = [compiled, "ab", "A", "中"]
    scanners = []
    for kind in FINDERS:
        with literal_finder(kind) as available:
            if available:
                scanners += [Scanner(items), Scanner(items, {0: [{"ab", "b"}, {"x", "中"}]})]
    for scanner in scanners:
        found = scanner.run(texts)
        for item, hits in zip(items[1:], found[1:], strict=True):
            assert scanned(hits) == each_alone(item, texts), (item, texts)
        if scanner.plans[0].cued:  # only the texts holding "ab" or "b" as a word, and "x" or "中"
            words = [set(regex.findall("[a-z]+", t.lower())) for t in texts]
            held = [i for i, w in enumerate(words) if w & {"ab", "b"} and ("x" in w or "中" in texts[i])]
            expected = [hit for hit in each_alone(compiled, texts) if hit[0] in held]
        else:
            expected = each_alone(compiled, texts)
        assert scanned(found[0]) == expected, (pattern, flags, texts)


@pytest.mark.parametrize("kind", FINDERS)
def test_the_scanner_keeps_texts_apart_with_each_literal_finder(kind: str) -> None:
    texts = ["Error: x", "    code", "y\n    indented", "a\x00b", "İnvoice ready", "last week was",
             "中文的错误"]
    patterns = [regex.compile(p, regex.IGNORECASE | regex.MULTILINE) for p in
                (r"^\s{4}\S", r"\b\w+(?:Error|Exception)\b", r"x$|^y", r"[^:]+$", r"\b(?:was|last week)\b",
                 r"(?<=\s)\w", r"错误|invoice", r"\W\S")]
    with literal_finder(kind) as available:
        if not available:
            pytest.skip("pyahocorasick is not installed")
        scanner = Scanner(patterns)
    for chosen in (texts, texts[:3], [t for t in texts if "\x00" not in t], texts[4:]):
        for pattern, hits in zip(patterns, scanner.run(chosen), strict=True):
            assert scanned(hits) == each_alone(pattern, chosen), (pattern.pattern, chosen)


@pytest.mark.parametrize(("pattern", "text"), [
    (r"^x", "ax\nx"), (r"x$", "x\nx"), (r".+", "ab\ncd"), (r"[^a]+", "bb"), (r"\W+", "a  b"),
    (r"\S+\s*", "ab "), (r"\D+", "ab1"), (r"\P{Han}+", "ab中"), (r"\Ax|x\Z", "xax"),
])
def test_a_sealed_pattern_finds_what_the_pattern_finds(pattern: str, text: str) -> None:
    compiled = regex.compile(pattern, regex.MULTILINE)
    sealed = seal(compiled)
    assert sealed is not None
    joined = SEPARATOR.join([text, text])
    halves = [m.span() for m in sealed.finditer(joined) if m.start() < len(text) + 1]
    assert halves == [m.span() for m in compiled.finditer(text)]
    assert not any(SEPARATOR in m.group() for m in sealed.finditer(joined))


@pytest.mark.parametrize("pattern", [r"(?x) a", r"(a)\1", r"(?:ab){e<=1}", "a\x00b", r"(?i)a"])
def test_patterns_outside_the_subset_are_not_sealed(pattern: str) -> None:
    assert seal(regex.compile(pattern)) is None


@pytest.mark.parametrize(("pattern", "expected"), [
    (r"\b(?:api|spec)s?\b", ({"\x00api\x00", "\x00apis\x00", "\x00spec\x00", "\x00specs\x00"}, False)),
    (r"\bfoo|bar", ({"\x00foo", "bar"}, False)),
    (r"```|^\s{4}\S", ({"```", *(LINE_START + c for c in _WHITESPACE)}, False)),  # line start, then a space
    (r"(?:^|\n)\s*x", ({"\n"}, True)),
    (r"\w+\(", None),
])
def test_anchors(pattern: str, expected: tuple[set[str], bool] | None) -> None:
    found = anchors(pattern, ignorecase=True)
    assert (None if found is None else (set(found[0]), found[1])) == expected
