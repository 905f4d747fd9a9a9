"""Sentence splitting for English, Chinese and mixed text, as character spans that tile the input.

English uses the Punkt decision rules (Kiss & Strunk 2006) exactly as nltk's
``PunktSentenceTokenizer`` applies them, but re-implemented so that only candidate
boundaries (``.?!`` followed by whitespace or closing punctuation) cost Python work: nltk
itself runs at ~2.5 MB/s, this at >20 MB/s. Parameters (abbreviations, sentence
starters, orthographic context) ship in ``data/punkt_en.json`` so nothing is downloaded.
``split_sentences(..., exact=True)`` runs nltk's own implementation with the same
parameters, as a reference for tests and audits.

Chinese uses punctuation rules (。！？；… and ASCII !?; before CJK), keeping closing
quotes/brackets with their sentence. Spans always tile the text: whitespace after a
sentence belongs to it, so ``"".join(text[s:e] for s, e in spans) == text``.

``detect_lang`` and ``Lang`` live in :mod:`compactor.text.language`; they stay importable from here.
"""

from __future__ import annotations

import json
import operator
import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache
from itertools import pairwise
from pathlib import Path
from typing import Any

import regex

from compactor.text.language import CJK_CLASS as _CJK_CLASS
from compactor.text.language import Lang, detect_lang, has_cjk

__all__ = ["Lang", "detect_lang", "split_sentences"]

_PARAMS_PATH = Path(__file__).with_name("data") / "punkt_en.json"

# --------------------------------------------------------------------------------------------
# Punkt parameters
# --------------------------------------------------------------------------------------------

# Orthographic context flags, same bit layout as nltk.tokenize.punkt.
_ORTHO_BEG_UC = 1 << 1
_ORTHO_MID_UC = 1 << 2
_ORTHO_UNK_UC = 1 << 3
_ORTHO_BEG_LC = 1 << 4
_ORTHO_MID_LC = 1 << 5
_ORTHO_UNK_LC = 1 << 6
_ORTHO_UC = _ORTHO_BEG_UC | _ORTHO_MID_UC | _ORTHO_UNK_UC
_ORTHO_LC = _ORTHO_BEG_LC | _ORTHO_MID_LC | _ORTHO_UNK_LC


@dataclass(frozen=True)
class _PunktModel:
    """Punkt parameters as plain containers: fast lookups, no nltk import needed."""

    abbrev_types: frozenset[str]
    collocations: frozenset[tuple[str, str]]
    sent_starters: frozenset[str]
    ortho_context: dict[str, int]
    colloc_firsts: frozenset[str]


@lru_cache(maxsize=1)
def _model() -> _PunktModel:
    """Load the shipped parameters once (lazily, so importing the module stays cheap)."""
    raw: dict[str, Any] = json.loads(_PARAMS_PATH.read_text(encoding="utf-8"))
    collocations = frozenset((a, b) for a, b in raw["collocations"])
    return _PunktModel(
        abbrev_types=frozenset(raw["abbrev_types"]),
        collocations=collocations,
        sent_starters=frozenset(raw["sent_starters"]),
        ortho_context={k: int(v) for k, v in raw["ortho_context"].items()},
        colloc_firsts=frozenset(a for a, _ in collocations),
    )


@lru_cache(maxsize=1)
def _nltk_tokenizer() -> Any:
    """nltk's reference PunktSentenceTokenizer with our parameters (never downloads data)."""
    from collections import defaultdict

    from nltk.tokenize.punkt import PunktParameters, PunktSentenceTokenizer

    model = _model()
    params = PunktParameters()
    params.abbrev_types = set(model.abbrev_types)
    params.collocations = set(model.collocations)
    params.sent_starters = set(model.sent_starters)
    params.ortho_context = defaultdict(int, model.ortho_context)
    return PunktSentenceTokenizer(params)


# --------------------------------------------------------------------------------------------
# Fast Punkt: nltk's regexes and decision rules, applied only at candidate boundaries
# --------------------------------------------------------------------------------------------

# Same patterns as nltk.tokenize.punkt.PunktLanguageVars (nltk >= 3.9.2 variant, which also
# treats curly quotes and guillemets as non-word characters).
_NON_WORD = r"(?:[)\";}\]\*:@\'\({\[\u2018\u2019\u201c\u201d\xab\xbb?!])"
_MULTI_CHAR = r"(?:\-{2,}|\.{2,}|(?:\.\s){2,}\.)"
_WORD_START = r"[^\(\"\`{\[:;&\#\*@\)}\]\-,]"
_WORD_RE = re.compile(
    rf"""(
        {_MULTI_CHAR}
        |
        (?={_WORD_START})\S+?
        (?=\s|$|{_NON_WORD}|{_MULTI_CHAR}|,(?=$|\s|{_NON_WORD}|{_MULTI_CHAR}))
        |
        \S
    )""",
    re.UNICODE | re.VERBOSE,
)
_PERIOD_CONTEXT_RE = re.compile(
    rf"[.?!](?=(?P<after_tok>{_NON_WORD}|\s+(?P<next_tok>\S+)))", re.UNICODE
)
_REALIGN_RE = re.compile(r"[\"')\]}\u2018\u2019\u201c\u201d\xab\xbb]+?(?:\s+|(?=--)|$)", re.M)
_NUMERIC_RE = re.compile(r"-?[\.,]?\d[\d,\.-]*\.?")
_INITIAL_RE = re.compile(r"[^\W\d]\.$", re.UNICODE)
_ELLIPSIS_RE = re.compile(r"\.\.+$")
_PUNCTUATION = frozenset(";:,.!?")
_ASCII_WS = " \t\n\r\x0b\x0c"  # nltk looks back for the previous word with string.whitespace
_CJK_CHAR_RE = regex.compile(rf"[{_CJK_CLASS}\u3000-\u303f\uff00-\uffef]")
_CJK_CHAR_REV_RE = regex.compile(rf"[{_CJK_CLASS}\u3000-\u303f\uff00-\uffef]", regex.REVERSE)


def _tok_type(tok: str) -> str:
    """Punkt's case-normalised type; numbers collapse to ##number##."""
    return "##number##" if _NUMERIC_RE.fullmatch(tok) else tok.lower()


def _ortho_heuristic(tok: str, typ: str, ortho: dict[str, int]) -> bool | None:
    """Punkt 4.1.1: True = starts a sentence, False = does not, None = unknown."""
    if tok in _PUNCTUATION:
        return False
    ctx = ortho.get(typ, 0)
    if tok[0].isupper() and ctx & _ORTHO_LC and not ctx & _ORTHO_MID_UC:
        return True
    if tok[0].islower() and (ctx & _ORTHO_UC or not ctx & _ORTHO_BEG_LC):
        return False
    return None


def _contains_sentbreak(context: str, model: _PunktModel) -> bool:
    """nltk's ``text_contains_sentbreak``: first + second annotation pass over a short context."""
    if "\n" in context:
        toks = [t for line in context.split("\n") for t in _WORD_RE.findall(line)]
    else:
        toks = _WORD_RE.findall(context)
    n = len(toks)
    if n < 2:
        return False
    abbrevs = model.abbrev_types
    # First pass (type based): per token (type, sentbreak, abbr, ellipsis).
    first: list[tuple[str, bool, bool, bool]] = []
    for tok in toks:
        typ = _tok_type(tok)
        if tok in ".?!":
            first.append((typ, True, False, False))
        elif _ELLIPSIS_RE.match(tok):
            first.append((typ, False, False, True))
        elif tok[-1] == "." and not tok.endswith(".."):
            low = tok[:-1].lower()
            is_abbr = low in abbrevs or low.split("-")[-1] in abbrevs
            first.append((typ, not is_abbr, is_abbr, False))
        else:
            first.append((typ, False, False, False))
    # Second pass (token context) on every token but the last; any break there counts.
    for i in range(n - 1):
        tok = toks[i]
        typ1, sb, abbr, ellipsis = first[i]
        if tok[-1] != ".":
            if sb:
                return True
            continue
        if _second_pass(tok, typ1, abbr, ellipsis, toks[i + 1], first[i + 1], model, sb):
            return True
    return False


def _second_pass(
    tok: str,
    typ1: str,
    abbr: bool,
    ellipsis: bool,
    tok2: str,
    first2: tuple[str, bool, bool, bool],
    model: _PunktModel,
    sentbreak: bool,
) -> bool:
    """Punkt section 4 for a period-final token: returns its final sentbreak flag."""
    typ = typ1[:-1] if len(typ1) > 1 and typ1[-1] == "." else typ1
    typ2 = first2[0]
    next_typ = typ2[:-1] if first2[1] and len(typ2) > 1 and typ2[-1] == "." else typ2
    if (typ, next_typ) in model.collocations:
        return False
    is_initial = _INITIAL_RE.match(tok) is not None
    if (abbr or ellipsis) and not is_initial:
        if _ortho_heuristic(tok2, next_typ, model.ortho_context) is True:
            return True
        if tok2[0].isupper() and next_typ in model.sent_starters:
            return True
    if is_initial or typ == "##number##":
        starter = _ortho_heuristic(tok2, next_typ, model.ortho_context)
        if starter is False:
            return False
        if (
            starter is None
            and is_initial
            and tok2[0].isupper()
            and not model.ortho_context.get(next_typ, 0) & _ORTHO_LC
        ):
            return False
    return sentbreak


_DOT_CONTEXT_RE = re.compile(rf"\.(?=(?P<after_tok>{_NON_WORD}|\s+(?P<next_tok>\S+)))")
_Q_CONTEXT_RE = re.compile(rf"\?(?=(?P<after_tok>{_NON_WORD}|\s+(?P<next_tok>\S+)))")
_E_CONTEXT_RE = re.compile(rf"!(?=(?P<after_tok>{_NON_WORD}|\s+(?P<next_tok>\S+)))")
_REALIGN_FIRST = frozenset("\"')]}\u2018\u2019\u201c\u201d\xab\xbb")


_match_start = operator.methodcaller("start")


def _candidate_matches(text: str) -> list[re.Match[str]]:
    """All ``_PERIOD_CONTEXT_RE`` matches in order; a literal "." pattern scans ~2x faster."""
    found = list(_DOT_CONTEXT_RE.finditer(text))
    found_other = False
    for pattern in (_Q_CONTEXT_RE, _E_CONTEXT_RE):
        more = list(pattern.finditer(text))
        if more:
            found += more
            found_other = True
    if found_other:
        found.sort(key=_match_start)
    return found


def _word_start(text: str, lo: int, hi: int, prev_start: int) -> int:
    """Start of the word before ``hi``: after the last string.whitespace char in text[lo:hi].

    Mirrors nltk's look-back, including its quirk that whitespace at ``lo`` itself is
    ignored (the previous word then extends back to ``prev_start``).
    """
    ws = text.rfind(" ", lo, hi)
    seg = ws + 1 if ws >= 0 else lo
    if not text[seg:hi].isprintable():  # \n \t \r \v \f are not printable
        for ch in "\n\t\r\x0b\x0c":
            j = text.rfind(ch, seg, hi)
            if j > ws:
                ws = j
                seg = j + 1
    return ws + 1 if ws > lo else prev_start


def _context(text: str, word_start: int, match: re.Match[str], cjk: bool) -> str:
    """Previous word + punctuation + what follows (other punctuation, or space + next token)."""
    end = match.end("after_tok")
    if cjk and match.start("next_tok") >= 0:
        hit = _CJK_CHAR_RE.search(text, match.start("next_tok") + 1, end)
        if hit is not None:
            end = hit.start()
    return text[word_start:end]


def _punkt_starts_fast(text: str, cjk: bool = False) -> list[int]:
    """Start offsets (> 0) of the sentences nltk's Punkt would return, after realignment.

    Same steps as nltk's ``span_tokenize``: candidates, previous word (a candidate whose
    word overlaps the next one is dropped), decision, realignment; but plain "word." and
    "?"/"!" candidates are decided without tokenising (their outcome is fixed by the rules).
    With ``cjk`` the previous/next words also stop at CJK characters, so an English
    abbreviation glued to Chinese text ("他是Dr. Smith") is still recognised.
    """
    model = _model()
    abbrevs = model.abbrev_types
    colloc_firsts = model.colloc_firsts
    ends: list[int] = []  # end of each sentence (just after its punctuation)
    nexts: list[int] = []  # where the following sentence starts
    prev_start = prev_stop = 0
    prev: re.Match[str] | None = None
    for match in [*_candidate_matches(text), None]:
        if match is not None:
            ms = match.start()
            word_start = _word_start(text, prev_stop, ms, prev_start)
            if cjk and word_start < ms and not text[word_start:ms].isascii():
                hit = _CJK_CHAR_REV_RE.search(text, word_start, ms)
                if hit is not None:
                    word_start = hit.end()
            if prev is None or prev_stop > word_start:
                prev, prev_start, prev_stop = match, word_start, ms
                continue
        if prev is None:
            break
        # Decide at ``prev`` (its word does not overlap the current candidate's).
        if text[prev_stop] != ".":
            brk = True  # "?"/"!" is always its own sentbreak token, with a token after it
        else:
            word = text[prev_start:prev_stop]
            low = word.lower()
            if len(word) > 1 and word.isalpha() and low not in abbrevs and low not in colloc_firsts:
                brk = True  # plain word + ".": not an abbreviation, initial or number
            else:
                brk = _contains_sentbreak(_context(text, prev_start, prev, cjk), model)
        if brk:
            ends.append(prev.end())
            nxt = prev.start("next_tok")
            nexts.append(nxt if nxt >= 0 else prev.end())
        if match is None:
            break
        prev, prev_start, prev_stop = match, word_start, ms
    # nltk's _realign_boundaries: closing quotes/brackets right after a break join the
    # previous sentence; the next sentence then starts after them (and their whitespace).
    n_slices = len(nexts)
    stops = [*ends[1:], len(text.rstrip())]
    starts: list[int] = []
    realign = 0
    start = 0
    for i in range(n_slices):
        s2, e2 = nexts[i], stops[i]
        if s2 < e2 and text[s2] in _REALIGN_FIRST:
            m = _REALIGN_RE.match(text, s2, e2)
            if m is not None:
                if start + realign > 0:
                    starts.append(start + realign)
                realign = m.end() - s2
                start = s2
                continue
        if start + realign < ends[i]:
            starts.append(start + realign)
        realign = 0
        start = s2
    if start + realign < len(text.rstrip()) and start + realign > 0:
        starts.append(start + realign)
    return [s for s in starts if s > 0]


def _punkt_starts_nltk(text: str) -> list[int]:
    """Reference: nltk's own PunktSentenceTokenizer with the shipped parameters."""
    return [s for s, _ in _nltk_tokenizer().span_tokenize(text) if s > 0]


# --------------------------------------------------------------------------------------------
# Chinese rules and hard breaks
# --------------------------------------------------------------------------------------------

_ZH_CLOSERS = "」』”’）》〉】〕〗〙〛)\\]"  # regex class body
_ZH_END_RE = regex.compile(
    rf"""
    (?:
        [。｡！？；…‼⁇⁈⁉]+[!?;.。！？；…]*        # CJK terminators (and runs: ！？ ……)
      | [!?;]+(?=[\s"'{_ZH_CLOSERS}]*[{_CJK_CLASS}])    # ASCII !?; before CJK
      | \.{{3,}}(?=[\s"'{_ZH_CLOSERS}]*[{_CJK_CLASS}])  # ASCII ellipsis before CJK
    )
    (?P<close>[{_ZH_CLOSERS}"']*)
    \s*
    """,
    regex.VERBOSE,
)
#: Code point ranges holding every character of `CJK_CLASS` (a test checks it).
_CJK_BLOCKS = ((0x1100, 0x11FF), (0x2E80, 0xD7FF), (0xF900, 0xFFEF), (0x16FE0, 0x10FFFF))
_ZH_TERMINATORS = "。｡！？；…‼⁇⁈⁉"  # what the first branch of `_ZH_END_RE` starts with
#: Backwards from a CJK character: the ASCII !?;. run (group "run") before the spaces, quotes and
#: closers in front of it, the only place the ASCII branches of `_ZH_END_RE` can start.
_ASCII_END_BEFORE = regex.compile(rf"""(?P<run>[!?;.]+)[\s"'{_ZH_CLOSERS}]*""", regex.REVERSE)
_SPARSE_MIN = 4_096  # characters from which English text looks for Chinese sentence ends by hints
_BLANK_LINE_RE = re.compile(r"\n[^\S\n]*\n\s*")
_NEWLINE_RE = re.compile(r"\n\s*")


def _zh_end_matches(text: str, sparse: bool) -> Iterator[regex.Match[str]]:
    """`_ZH_END_RE.finditer(text)`. With `sparse` (text that is mostly not Chinese) the pattern is
    tried only where `_zh_end_hints` says a match can start, left to right past the last match as
    finditer goes: the same matches, without running the slow pattern over the whole text."""
    if not sparse:
        yield from _ZH_END_RE.finditer(text)
        return
    last = 0
    for start in _zh_end_hints(text):
        if start < last:
            continue
        match = _ZH_END_RE.match(text, start)
        if match is not None:
            last = match.end()
            yield match


def _zh_end_hints(text: str) -> list[int]:
    """Sorted offsets that include every start of a `_ZH_END_RE` match: the CJK terminators, and
    the ASCII !?;. runs that reach a CJK character over spaces, quotes and closers. One array pass
    finds the characters from the CJK blocks; in mostly English text they are few."""
    import numpy as np

    points = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    high = np.flatnonzero(points >= _CJK_BLOCKS[0][0])
    values = points[high]
    hints = {at for at in high.tolist() if text[at] in _ZH_TERMINATORS}
    inside = np.zeros(len(high), dtype=bool)
    for lo, hi in _CJK_BLOCKS:
        inside |= (values >= lo) & (values <= hi)
    blocks = high[inside]
    first = np.ones(len(blocks), dtype=bool)  # the first character of each CJK stretch
    first[1:] = blocks[1:] != blocks[:-1] + 1
    for at in blocks[first].tolist():
        found = _ASCII_END_BEFORE.match(text, 0, at)
        if found is not None:
            hints.update(range(found.start("run"), found.end("run")))
    return sorted(hints)


def _zh_starts(text: str, sparse: bool = False) -> list[int]:
    """Ends of Chinese sentences (including closers and whitespace) as next-sentence starts;
    `sparse` says the text is mostly not Chinese (a faster search, the same result)."""
    starts: list[int] = []
    prev = 0
    for m in _zh_end_matches(text, sparse):
        end = m.end()
        close = m.group("close")
        if close and ('"' in close or "'" in close):
            # ASCII quotes are ambiguous: only close one that is open in this sentence.
            cut = m.start("close")
            for k, ch in enumerate(close):
                if ch in "\"'" and text.count(ch, prev, m.start()) % 2 == 0:
                    break
                cut = m.start("close") + k + 1
            if cut < m.start("close") + len(close):
                end = cut
                while end < len(text) and text[end].isspace():
                    end += 1
        starts.append(end)
        prev = end
    return starts


def _tile(text: str, starts: list[int]) -> list[tuple[int, int]]:
    """Turn sentence start offsets into spans that exactly tile the text."""
    n = len(text)
    cuts = sorted(set(starts))
    while cuts and cuts[-1] >= n:
        cuts.pop()
    bounds = [0, *(cuts[1:] if cuts and cuts[0] <= 0 else cuts), n]
    return list(pairwise(bounds))


def split_sentences(
    text: str, lang: Lang | None = None, *, exact: bool = False
) -> list[tuple[int, int]]:
    """Split ``text`` into sentence spans ``(start, end)`` that tile it exactly.

    ``lang`` defaults to :func:`detect_lang`. English (also inside "mixed" text) follows
    Punkt; Chinese terminators always apply when CJK text is present. A blank line always
    ends a sentence; in "zh"/"mixed" a single newline does too (hard-wrapped English
    paragraphs would otherwise shatter).
    ``exact=True`` runs nltk's Punkt implementation instead of the fast re-implementation
    (same parameters, same decisions on ordinary text; ~10x slower).
    """
    if not text:
        return []
    if lang is None:
        lang = detect_lang(text)
    elif lang not in ("en", "zh", "mixed"):
        raise ValueError(f"lang must be 'en', 'zh', 'mixed' or None, not {lang!r}")
    cjk = has_cjk(text)
    starts: list[int] = []
    if lang != "zh":
        starts += _punkt_starts_nltk(text) if exact else _punkt_starts_fast(text, cjk)
    if cjk:  # 。！？ end sentences even in mostly-English text
        starts += _zh_starts(text, sparse=lang == "en" and len(text) >= _SPARSE_MIN)
    if lang == "en":
        starts += [m.end() for m in _BLANK_LINE_RE.finditer(text)]
    else:
        starts += [m.end() for m in _NEWLINE_RE.finditer(text)]
    return _tile(text, starts)
