"""Checks that generated text invents nothing: numbers, dates, URLs, emails and names not in the source.

An LLM summary is only accepted when every hard fact it states can be found in what it was given. The
checks are rules, cheap and deterministic, tuned to avoid false alarms on faithful paraphrases:
"61,000" matches "61000", "3.50" matches "3.5", "45%" matches "45" or "0.45", "1.2 million" matches
"1,200,000", "March 14, 2026" matches "14 March 2026" or "2026-03-14", and a name is present when every
one of its words occurs in the source (case-insensitive). Sentence-initial capitalised words ("The",
"However") are not names. Chinese text: Arabic and simple Chinese numerals, 年/月/日 dates, quoted
terms (“…” 「…」 《…》) and Latin-script names inside Chinese sentences.

    >>> invented_facts("Revenue rose 12% to $4.1 million.", "Revenue grew by 12 percent to 4,100,000")
    []
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import regex

from compactor.text.language import CJK_CLASS as _CJK
from compactor.text.numbers import DATE as _DATE
from compactor.text.numbers import LIST_MARKER as _LIST_MARKER
from compactor.text.numbers import NUMBER as _NUMBER
from compactor.text.numbers import ZH_NUMERAL as _ZH_NUMERAL
from compactor.text.numbers import date_key as _date_key
from compactor.text.numbers import decimal_key as _decimal_key
from compactor.text.numbers import mask as _mask
from compactor.text.numbers import match_values as _number_values
from compactor.text.numbers import value_set
from compactor.text.numbers import zh_numeral_checked as _zh_numeral_checked

__all__ = ["Finding", "find_invented", "invented_facts"]

# -- patterns -------------------------------------------------------------------------------------

_CJK_CHAR = regex.compile(f"[{_CJK}]")
_URL = regex.compile(r"(?i)\b(?:https?://|www\.)[^\s<>\"'“”‘’（）()\[\]{}，。；！？、]+")
_EMAIL = regex.compile(r"(?i)\b[a-z0-9][a-z0-9._%+-]*@[a-z0-9-]+(?:\.[a-z0-9-]+)*\.[a-z]{2,}\b")
# Numbers not glued to Latin letters/digits: "61,000", "3.5", "45%", "14th"; not the "4" of "v4" or "x86".
_WORD = regex.compile(r"[A-Za-z][A-Za-z0-9]*(?:['’][A-Za-z]+)?(?:[-_][A-Za-z0-9]+)*")
_IDENTIFIER = regex.compile(r"(?<![\w.])[A-Za-z_][A-Za-z0-9]*_[A-Za-z0-9_]*(?![\w])")
_ALNUM = regex.compile(r"[a-z0-9]+")
_QUOTED = regex.compile(r"“([^”\n]{1,24})”|「([^」\n]{1,24})」|『([^』\n]{1,24})』|《([^》\n]{1,40})》"
                        r"|\"([^\"\n]{1,24})\"")
# Lower-case particles inside personal names ("Ludwig van Beethoven"); "of" would glue
# "John Smith of Acme" into one name.
_CONNECTORS = frozenset({"de", "van", "von", "der", "den", "la", "le", "du", "da", "di", "del", "bin"})
# Capitalised words that are not names even mid-sentence, and words that start sentences.
_ORDINARY_TEXT = """
a an the this that these those it its i we you he she they our your their my his her
in on at to for of by with from as into about over under after before during between
and or but nor so yet if then than when while where which who whom whose what why how
however therefore moreover furthermore meanwhile overall also although though because since
thus hence instead still yes no not all some many most more less few each every both either neither
there here today yesterday tomorrow first second third finally next last
mon monday tue tuesday wed wednesday thu thursday fri friday sat saturday sun sunday
january february march april may june july august september october november december
note summary source sources answer question key main
mr mrs ms dr prof st jr sr mt
"""
_ORDINARY = frozenset(_ORDINARY_TEXT.split())
_GAP = regex.compile(r"[ \t]")  # the one blank between the words of a name
_NUMBERED = regex.compile(r"\s\(?\d{1,2}[.)]$")
_NUMBERED_AT_START = regex.compile(r"(?:^|\s)\(?\d{1,2}[.)]$")
_MASKS = [(y, m, d) for y in (True, False) for m in (True, False) for d in (True, False)]
_INITIAL_AFTER = set(".!?:;\"“”'‘’([{<-–—*•#>|…。！？；：、，")


@dataclass(frozen=True, slots=True)
class Finding:
    """One item of the output that the source does not contain."""

    kind: str  # number | date | url | email | name | term
    text: str
    start: int


# -- public API -------------------------------------------------------------------------------------


def invented_facts(output: str, source: str) -> list[str]:
    """Numbers, dates, URLs, emails and names in `output` that are not in `source` (sorted, unique)."""
    return sorted({f.text for f in find_invented(output, source)})


def find_invented(output: str, source: str) -> list[Finding]:
    """Like `invented_facts`, with the kind and position of each finding, in output order."""
    facts = _SourceFacts(source)
    text = output
    findings: list[Finding] = []

    for match in _URL.finditer(text):
        url = _trim(match.group())
        if _norm_url(url) not in facts.urls and _norm_url(url) not in facts.lower:
            findings.append(Finding("url", url, match.start()))
    text = _mask(text, _URL)
    for match in _EMAIL.finditer(text):
        if match.group().lower() not in facts.emails:
            findings.append(Finding("email", match.group(), match.start()))
    text = _mask(text, _EMAIL)
    for match in _DATE.finditer(text):
        if not facts.has_date(_date_key(match)):
            findings.append(Finding("date", match.group().strip(), match.start()))
    text = _mask(text, _DATE)
    text = _mask(text, _LIST_MARKER)
    for match in _NUMBER.finditer(text):
        if not any(v in facts.numbers for v in _number_values(match)):
            findings.append(Finding("number", match.group().strip(), match.start()))
    for match in _ZH_NUMERAL.finditer(text):
        value = _zh_numeral_checked(match.group())
        if value is not None and _decimal_key(value) not in facts.numbers:
            findings.append(Finding("number", match.group(), match.start()))
    findings += _names(text, facts)
    findings.sort(key=lambda f: f.start)
    return findings


# -- the source side --------------------------------------------------------------------------------


class _SourceFacts:
    """Everything an output item may be matched against, normalised once per source."""

    def __init__(self, source: str) -> None:
        self.lower = source.lower()
        self.squashed = "".join(_ALNUM.findall(self.lower))
        self.urls = {_norm_url(_trim(m.group())) for m in _URL.finditer(source)}
        self.emails = {m.group().lower() for m in _EMAIL.finditer(source)}
        #: every (year, month, day) an output date may state: each source date with any parts left out
        self.dates = {tuple(part if keep else None for part, keep in zip(key, mask, strict=True))
                      for key in (_date_key(m) for m in _DATE.finditer(source))
                      for mask in _MASKS}
        #: every value a source number stands for, plus every digit run (ids, versions, dates) and
        #: every Chinese numeral: what an output number may be matched against
        self.numbers = value_set(source, lenient=True)
        self.words = set(_ALNUM.findall(self.lower))
        #: words the source writes in lower case somewhere, i.e. ordinary words, not names
        self.lower_words = set(regex.findall(r"(?<![A-Za-z])[a-z][a-z0-9]*(?![A-Za-z0-9])", source))
        self.text_norm = regex.sub(r"\s+", "", self.lower)
        self._identifiers: set[str] | None = None
        self._names: dict[str, bool] = {}
        self._terms: dict[str, bool] = {}

    def has_date(self, key: tuple[int | None, int | None, int | None]) -> bool:
        return key in self.dates

    def has_identifier(self, word: str) -> bool:
        """Whether `word` (lower case) stands alone in the source (not inside a longer word or after
        a dot); the source's standalone words are collected once, on the first question."""
        if self._identifiers is None:
            self._identifiers = set(regex.findall(r"(?<![\w.])\w+", self.lower))
        return word in self._identifiers

    def has_name(self, name: str) -> bool:
        found = self._names.get(name)
        if found is None:
            found = self._names[name] = self._has_name(name)
        return found

    def _has_name(self, name: str) -> bool:
        tokens = _ALNUM.findall(name.lower())
        if not tokens:
            return True
        if all(self._has_word(t) for t in tokens):
            return True
        squashed = "".join(tokens)
        return len(squashed) >= 5 and squashed in self.squashed  # "Open AI" vs "OpenAI"

    def _has_word(self, token: str) -> bool:
        if token in self.words:
            return True
        # plurals and possessives: "APIs" vs "API", "Alice's" is split into "alice" + "s"
        return token == "s" or (len(token) > 3 and token.endswith("s") and token[:-1] in self.words)

    def has_term(self, term: str) -> bool:
        found = self._terms.get(term)
        if found is None:
            found = self._terms[term] = regex.sub(r"\s+", "", term.lower()) in self.text_norm
        return found


# -- dates, urls ----------------------------------------------------------------------------------


def _trim(url: str) -> str:
    return url.rstrip(".,;:!?)]}>'\"")


def _norm_url(url: str) -> str:
    url = regex.sub(r"(?i)^https?://", "", url).lower()
    return url.removeprefix("www.").rstrip("/")


# -- names ----------------------------------------------------------------------------------------


def _names(text: str, facts: _SourceFacts) -> list[Finding]:
    """Capitalised names, acronyms, CamelCase/snake_case identifiers, Latin names in Chinese text,
    and quoted Chinese terms, that the source lacks."""
    findings: list[Finding] = []
    for match in _IDENTIFIER.finditer(text):
        if not facts.has_identifier(match.group().lower()):
            findings.append(Finding("name", match.group(), match.start()))
    text = _mask(text, _IDENTIFIER)
    if _CJK_CHAR.search(text):
        for match in _QUOTED.finditer(text):
            term = next(g for g in match.groups() if g is not None).strip()
            if term and _CJK_CHAR.search(match.group()) and not facts.has_term(term):
                findings.append(Finding("term", term, match.start()))
    for line_start, line in _lines(text):
        if line.lstrip().startswith("#"):
            continue  # Markdown headings are title-cased by convention, not names
        for start, words, zh in _runs(line):
            name = _name_of(words, line, zh, facts)
            if name is not None and not facts.has_name(name):
                findings.append(Finding("name", name, line_start + start))
    return findings


def _lines(text: str) -> Iterable[tuple[int, str]]:
    offset = 0
    for line in text.splitlines(keepends=True):
        yield offset, line
        offset += len(line)


def _runs(line: str) -> Iterable[tuple[int, list[tuple[int, str]], bool]]:
    """Groups of adjacent name-like words (one space apart, "of"/"de"/... allowed inside)."""
    words = [(m.start(), m.group()) for m in _WORD.finditer(line)]
    run: list[tuple[int, str]] = []
    run_zh = False

    def flush() -> Iterable[tuple[int, list[tuple[int, str]], bool]]:
        while run and run[-1][1].lower() in _CONNECTORS:
            run.pop()
        if run:
            yield run[0][0], list(run), run_zh
        run.clear()

    for start, word in words:
        zh = _beside_cjk(line, start, start + len(word))
        likely = zh or _name_like(word)
        connector = word.lower() in _CONNECTORS and bool(run)
        joined = bool(run) and _GAP.fullmatch(line[run[-1][0] + len(run[-1][1]):start]) is not None
        if run and not joined:
            yield from flush()
        if likely or (connector and joined):
            if not run:
                run_zh = zh
            run_zh = run_zh or zh
            run.append((start, word))
        elif run:
            yield from flush()
    yield from flush()


def _beside_cjk(line: str, start: int, end: int) -> bool:
    """Whether a Latin word sits in Chinese text (the nearest non-space neighbour is CJK).

    Scans only the blanks between the word and its neighbours, never the rest of the line: a
    slice of the line per word made a long line quadratic (a 400k-word reply took a minute)."""
    i = _before(line, start)
    if i >= 0 and _CJK_CHAR.match(line[i]):
        return True
    j = _after(line, end)
    return j < len(line) and _CJK_CHAR.match(line[j]) is not None


def _before(line: str, start: int) -> int:
    """Index of the last non-blank character before `start` (-1 when there is none)."""
    i = start - 1
    while i >= 0 and line[i].isspace():
        i -= 1
    return i


def _after(line: str, end: int) -> int:
    """Index of the first non-blank character at or after `end` (len(line) when there is none)."""
    j = end
    while j < len(line) and line[j].isspace():
        j += 1
    return j


def _name_like(word: str) -> bool:
    letters = [c for c in word if c.isalpha()]
    if not letters:
        return False
    return word[0].isupper() or any(c.isupper() for c in word[1:])  # Title, ACRONYM, camelCase, iPhone


def _is_special(word: str) -> bool:
    """Acronyms and CamelCase: names wherever they stand ("NASA", "OpenAI", "TokenCounter")."""
    letters = "".join(c for c in word if c.isalpha())
    if len(letters) >= 2 and letters.isupper():
        return True
    return any(c.isupper() for c in word[1:]) and any(c.islower() for c in word)


def _initial(line: str, start: int) -> bool:
    """Whether a word starts a sentence or clause (so its capital says nothing)."""
    last = _before(line, start)
    if last < 0:
        return True
    # a list number ("1.", "(2)") before the word; six characters hold the longest one
    numbered = _NUMBERED_AT_START if last <= 5 else _NUMBERED
    if numbered.search(line[max(0, last - 5):last + 1]):
        return True
    return line[last] in _INITIAL_AFTER


def _name_of(words: list[tuple[int, str]], line: str, zh: bool, facts: _SourceFacts) -> str | None:
    """The name a run of words stands for, after dropping ordinary sentence-initial words."""
    if zh:
        kept = [w for _, w in words if len(w) > 1 or w.isupper()]
        return " ".join(kept) if kept and any(w.lower() not in _ORDINARY for w in kept) else None
    items = list(words)
    initial = _initial(line, items[0][0])
    while items and items[0][1].lower() in _ORDINARY and not _is_special(items[0][1]):
        items.pop(0)
        initial = True
    while items and items[0][1].lower() in _CONNECTORS:
        items.pop(0)
    if not items:
        return None
    first = items[0][1]
    if initial and not _is_special(first):
        if len(items) == 1:
            return None  # "However", "Revenue", "Alice" at a sentence start: cannot tell, keep quiet
        rest = " ".join(w for _, w in items[1:])
        if first.lower() in facts.lower_words or facts.has_name(rest):
            items.pop(0)  # an ordinary word ("Revenue Growth"), or "Per Ludwig van Beethoven"
    if len(items) == 1 and len(items[0][1]) == 1:
        return None  # "I", "A"
    if len(items) == 1 and items[0][1].lower() in _ORDINARY:
        return None
    return " ".join(w for _, w in items)
