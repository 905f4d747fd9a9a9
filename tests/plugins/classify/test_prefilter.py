"""classify.rules with the literal prefilter: the labels of a scan with every pattern, on real text and
on custom tables; the prefilter never skips a pattern that matches."""

from __future__ import annotations

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
from compactor.plugins.classify import classify_text, load_tables
from compactor.plugins.clean import normalize_text
from compactor.text.prefilter import _LOWER_UNSAFE, Prefilter, required_literals
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
    (r"café", True, None),  # case rules beyond ASCII and Han: not modelled
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
