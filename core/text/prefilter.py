"""Skip regex scans that cannot match: required literals of a pattern table, found in one pass.

A table of patterns (classify.rules has 26) is usually scanned once per pattern per text, and most
scans find nothing. Most patterns name the words they look for: every match of
``\\b(?:api|apis|endpoint)\\b`` contains "api" or "endpoint", every match of ``\\b\\w+Error\\b``
contains "error". `required_literals` reads such a set from a pattern's source (a small parser for
the plain regex subset: literals, groups, alternation, classes, quantifiers, anchors; anything else
gives no set, so that pattern always runs). `Prefilter` finds the literals of a whole table in one
pass over the text (one trie-shaped alternation, stdlib `re`, on the lower-cased text) and names
the patterns that may match; only those need their own scan. Skipping is exact: a pattern whose
literals are all absent has no match, so counts and matches stay what a full scan gives.

Case-insensitive patterns are compared on ``text.lower()``. Only ASCII and Han literal characters
are used there, where `regex`'s case-insensitive matching and `str.lower` agree except for three
characters (U+0130 "İ" matches "i", U+0131 "ı" matches "I", U+017F "ſ" matches "s"); a text
holding any of them runs every pattern.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

import regex

Literals = frozenset[str]
_CAP = 256  # the most strings an exact set may hold before it is dropped
_LOWER_UNSAFE = ("\u0130", "\u0131", "\u017f")
_HAN = regex.compile(r"\p{Han}")
_CLASS_ESCAPES = set("dDsSwWhHvV")
_ZERO_WIDTH_ESCAPES = set("bBAZzG")
_CONTROL_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "f": "\f", "v": "\v", "a": "\a"}
# flags that change what a literal in the source matches: the parser does not model them
_UNMODELLED = regex.VERBOSE | regex.FULLCASE | regex.LOCALE | regex.VERSION1
_QUANT = re.compile(r"\{(\d*)(?:(,)(\d*))?\}")


class _Unsupported(Exception):
    """Syntax outside the analysed subset."""


def _cross(a: Literals | None, b: Literals | None) -> Literals | None:
    if a is None or b is None or len(a) * len(b) > _CAP:
        return None
    return frozenset(x + y for x in a for y in b)


def _best(candidates: Iterable[Literals | None]) -> Literals | None:
    """The most selective usable set: longest shortest string, then fewest strings."""
    usable = [c for c in candidates if c and "" not in c]
    if not usable:
        return None
    return max(usable, key=lambda c: (min(map(len, c)), -len(c)))


class _Parser:
    """Recursive descent over a pattern's source; each node gives (exact, required):
    `exact` holds every string the node can match (None when unknown or too many), `required`
    strings one of which every match contains (None when unknown)."""

    def __init__(self, pattern: str) -> None:
        self.p = pattern
        self.i = 0

    def parse(self) -> tuple[Literals | None, Literals | None]:
        node = self.alternation()
        if self.i != len(self.p):
            raise _Unsupported("unbalanced ')'")
        return node

    def alternation(self) -> tuple[Literals | None, Literals | None]:
        branches = [self.sequence()]
        while self.i < len(self.p) and self.p[self.i] == "|":
            self.i += 1
            branches.append(self.sequence())
        if len(branches) == 1:
            return branches[0]
        exact: Literals | None = frozenset()
        required: Literals | None = frozenset()
        for ex, req in branches:
            exact = exact | ex if exact is not None and ex is not None else None
            best = _best([ex, req])
            required = required | best if required is not None and best is not None else None
        if exact is not None and len(exact) > _CAP:
            exact = None
        return exact, required

    def sequence(self) -> tuple[Literals | None, Literals | None]:
        candidates: list[Literals | None] = []
        run: Literals | None = frozenset({""})
        whole: Literals | None = frozenset({""})
        while self.i < len(self.p) and self.p[self.i] not in "|)":
            ex, req = self.quantified()
            whole = _cross(whole, ex)
            if ex is None:
                candidates += [run, req]
                run = frozenset({""})
                continue
            joined = _cross(run, ex)
            if joined is None:  # too many combinations: keep the pieces
                candidates.append(run)
                joined = ex
            run = joined
        candidates.append(run)
        return whole, _best(candidates)

    def quantified(self) -> tuple[Literals | None, Literals | None]:
        ex, req = self.atom()
        p = self.p
        if self.i >= len(p):
            return ex, req
        c = p[self.i]
        low: int
        high: int | None
        if c in "?*+":
            self.i += 1
            low, high = {"?": (0, 1), "*": (0, None), "+": (1, None)}[c]
        elif c == "{" and (m := _QUANT.match(p, self.i)) and (m.group(1) or m.group(2)):
            self.i = m.end()
            low = int(m.group(1) or 0)
            high = low if not m.group(2) else (int(m.group(3)) if m.group(3) else None)
        else:
            return ex, req
        if self.i < len(p) and p[self.i] in "?+":  # lazy or possessive
            self.i += 1
        if self.i < len(p) and (p[self.i] in "*+?" or (p[self.i] == "{" and _QUANT.match(p, self.i))):
            raise _Unsupported("nested quantifier")
        best = _best([ex, req])
        if high == 0:
            return frozenset({""}), None
        if low == 0:
            return (ex | {""} if ex is not None and high == 1 else None), None
        exact = None
        if ex is not None and high == low and low <= 4:
            exact = ex
            for _ in range(low - 1):
                exact = _cross(exact, ex)
        return exact, best

    def atom(self) -> tuple[Literals | None, Literals | None]:
        c = self.p[self.i]
        self.i += 1
        if c == "(":
            return self.group()
        if c == "[":
            return self.char_class(), None
        if c == "\\":
            return self.escape()
        if c in "^$":
            return frozenset({""}), None
        if c == ".":
            return None, None
        if c in "*+?{":  # "{" that is no quantifier: a literal, or fuzzy constraints
            raise _Unsupported(f"{c} without an atom")
        return frozenset({c}), None

    def group(self) -> tuple[Literals | None, Literals | None]:
        p = self.p
        zero_width = False
        if p.startswith("?", self.i):
            rest = p[self.i + 1:]
            if rest.startswith(":") or rest.startswith(">") or rest.startswith("|"):
                self.i += 2
            elif rest.startswith(("=", "!")):
                self.i += 2
                zero_width = True
            elif rest.startswith(("<=", "<!")):
                self.i += 3
                zero_width = True
            elif m := re.match(r"P?<[A-Za-z_]\w*>", rest):
                self.i += 1 + m.end()
            elif rest.startswith("#"):
                end = p.find(")", self.i)
                if end < 0:
                    raise _Unsupported("open comment")
                self.i = end + 1
                return frozenset({""}), None
            else:  # inline flags, conditionals, recursion, back references
                raise _Unsupported(f"group (?{rest[:1]}")
        node = self.alternation()
        if self.i >= len(p) or p[self.i] != ")":
            raise _Unsupported("unclosed group")
        self.i += 1
        return (frozenset({""}), None) if zero_width else node

    def escape(self) -> tuple[Literals | None, Literals | None]:
        if self.i >= len(self.p):
            raise _Unsupported("trailing backslash")
        c = self.p[self.i]
        self.i += 1
        if c in _ZERO_WIDTH_ESCAPES:
            return frozenset({""}), None
        if c in _CLASS_ESCAPES:
            return None, None
        if c in "pP":
            self.property()
            return None, None
        if c in _CONTROL_ESCAPES:
            return frozenset({_CONTROL_ESCAPES[c]}), None
        if c.isalnum() or c == "_":  # \L, \1, \x, \N, \g, ...
            raise _Unsupported(f"escape \\{c}")
        return frozenset({c}), None

    def property(self) -> None:
        """Skip the name of a \\p or \\P property class (one letter or {...})."""
        if self.p.startswith("{", self.i):
            end = self.p.find("}", self.i)
            if end < 0:
                raise _Unsupported("open property name")
            self.i = end + 1
        elif self.i < len(self.p):
            self.i += 1
        else:
            raise _Unsupported("trailing \\p")

    def char_class(self) -> Literals | None:
        p = self.p
        chars: set[str] = set()
        known = True
        if p.startswith("^", self.i):
            known = False
            self.i += 1
        first = True
        while True:
            if self.i >= len(p):
                raise _Unsupported("unclosed class")
            c = p[self.i]
            self.i += 1
            if c == "]" and not first:
                break
            first = False
            if c == "[":
                raise _Unsupported("nested set or POSIX class")
            if c == "\\":
                if self.i >= len(p):
                    raise _Unsupported("trailing backslash")
                c = p[self.i]
                self.i += 1
                if c in _CLASS_ESCAPES:
                    known = False
                    continue
                if c in "pP":
                    self.property()
                    known = False
                    continue
                if c in _CONTROL_ESCAPES:
                    c = _CONTROL_ESCAPES[c]
                elif c.isalnum() or c == "_":
                    raise _Unsupported(f"escape \\{c} in a class")
            if p.startswith("-", self.i) and self.i + 1 < len(p) and p[self.i + 1] != "]":
                end = p[self.i + 1]
                if end in "\\[":
                    raise _Unsupported("escaped range end")
                self.i += 2
                if ord(end) - ord(c) > 16:
                    known = False
                    continue
                chars.update(chr(o) for o in range(ord(c), ord(end) + 1))
                continue
            chars.add(c)
        return frozenset(chars) if known and chars else None


def required_literals(pattern: str, ignorecase: bool = False) -> Literals | None:
    """Strings one of which every match of `pattern` contains (lower-cased when `ignorecase`), or
    None when there is no such set or the pattern uses syntax outside the analysed subset."""
    try:
        exact, required = _Parser(pattern).parse()
    except (_Unsupported, IndexError, ValueError):
        return None
    found = _best([exact, required])
    if found is None:
        return None
    if ignorecase:
        if not all(ch.isascii() or _HAN.match(ch) for s in found for ch in s):
            return None  # other scripts' case rules are not modelled
        found = frozenset(s.lower() for s in found)
    # a string containing another one adds nothing
    return frozenset(s for s in found if not any(o != s and o in s for o in found))


def _trie_pattern(words: Iterable[str]) -> str:
    root: dict[str, dict] = {}
    for word in words:
        node = root
        for ch in word:
            node = node.setdefault(ch, {})
        node[""] = {}

    def emit(node: dict[str, dict]) -> str:
        branches = [re.escape(ch) + emit(child) for ch, child in sorted(node.items()) if ch]
        if not branches:
            return ""
        body = branches[0] if len(branches) == 1 else "(?:" + "|".join(branches) + ")"
        if "" in node:  # a word ends here: the longer ones are optional (greedy: longest first)
            return body + "?" if len(branches) == 1 and len(branches[0]) == 1 else f"(?:{body})?"
        return body

    return emit(root)


class _LiteralScan:
    """All literals of a set present in a text: at each position the longest literal starting
    there, plus the literals that are its prefixes."""

    def __init__(self, literals: dict[str, set[int]]) -> None:
        self.regex = re.compile(_trie_pattern(literals))
        self.ids = {
            word: frozenset().union(*(ids for other, ids in literals.items() if word.startswith(other)))
            for word in literals
        }

    def find(self, text: str) -> set[int]:
        hits = set()
        search = self.regex.search
        match = search(text)
        while match:  # overlapping: the next search starts one past the last match's start
            hits.add(match.group())
            match = search(text, match.start() + 1)
        return set().union(*map(self.ids.__getitem__, hits))


class Prefilter:
    """Which items of a table can match a text: the ones whose required literals occur in it, and
    the ones without a literal set (always). Items are compiled patterns or plain strings (found
    case-sensitively, as `str.count` does)."""

    def __init__(self, items: Sequence[regex.Pattern[str] | str]) -> None:
        # scanned in the lower-cased text: the literals of case-insensitive patterns, and the
        # case-sensitive ones that lower-casing leaves alone (found there wherever the text has
        # them); the others in the text itself. Literals with Han only where the text has Han.
        groups: dict[tuple[bool, bool], dict[str, set[int]]] = {
            (lower, han): {} for lower in (True, False) for han in (False, True)}
        always: set[int] = set()
        for index, item in enumerate(items):
            if isinstance(item, str):
                literals: Literals | None = frozenset({item}) if item else None
                folded = False
            elif item.flags & _UNMODELLED:
                literals = None
            else:
                folded = bool(item.flags & regex.IGNORECASE)
                literals = required_literals(item.pattern, folded)
            if literals is None:
                always.add(index)
                continue
            for literal in literals:
                group = groups[folded or literal.lower() == literal, _HAN.search(literal) is not None]
                group.setdefault(literal, set()).add(index)
        self.size = len(items)
        self.always = frozenset(always)
        self._scans = [(lower, han, _LiteralScan(literals))
                       for (lower, han), literals in groups.items() if literals]

    def possible(self, text: str, han: bool | None = None) -> set[int] | frozenset[int]:
        """Indexes of the items that may match `text` (every index when unsure). `han`: whether
        the text has a Han character, when the caller knows."""
        if text.isascii():
            han = False
        elif any(ch in text for ch in _LOWER_UNSAFE):
            return frozenset(range(self.size))
        found = set(self.always)
        lower = None
        for lowered, needs_han, scan in self._scans:
            if needs_han:
                if han is None:
                    han = _HAN.search(text) is not None
                if not han:
                    continue
            if lowered and lower is None:
                lower = text.lower()
            found |= scan.find(lower if lowered and lower is not None else text)
        return found
