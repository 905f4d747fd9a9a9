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

Many texts at once (`Scanner`, for the chunks of a document): a call per pattern per text costs
more than the scan, so the texts are joined by SEPARATOR and each pattern runs over the joined
text, rewritten (`seal`) so that nothing in it can read past a text's end. The analysis (`analyse`)
also says how every match starts (`anchors`: its first strings, a word start, a line start) and
what each top-level branch requires; one pass per letter case finds those literals in the joined
text, and a pattern is tried only at its anchors in the texts that hold what it requires. The
hits are exactly what a scan of each text alone finds (property-tested on random patterns).
"""

from __future__ import annotations

import functools
import importlib
import re
from bisect import bisect_right
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from itertools import accumulate, chain
from typing import Any, NamedTuple

import regex

Literals = frozenset[str]
# an anchor string that starts with it starts where a word starts (after `\b`); one that also
# ends with it is a whole word
WORD_START = "\x00"
# one that starts with this, then a character: that character where a line starts
LINE_START = "\x01"
_MARKS = frozenset((WORD_START, LINE_START))  # a pattern that names them is not analysed
_ASCII_WORD = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")
# (strings, line): a match starts with one of the strings, or (when `line`) at a line start
Anchor = tuple[Literals, bool]
_CAP = 256  # the most strings an exact set may hold before it is dropped
_LOWER_UNSAFE = ("\u0130", "\u0131", "\u017f")
_HAN = regex.compile(r"\p{Han}")
_CLASS_ESCAPES = set("dDsSwWhHvV")
_ZERO_WIDTH_ESCAPES = set("bBAZzG")
_CONTROL_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "f": "\f", "v": "\v", "a": "\a"}
# flags that change what a literal in the source matches: the parser does not model them
_UNMODELLED = regex.VERBOSE | regex.FULLCASE | regex.LOCALE | regex.VERSION1
_ESCAPE_LENGTH = {"x": 2, "u": 4, "U": 8}  # \x, \u and \U escapes: their number of hex digits
_HEX = set("0123456789abcdefABCDEF")
_QUANT = re.compile(r"\{(\d*)(?:(,)(\d*))?\}")


class _Unsupported(Exception):
    """Syntax outside the analysed subset."""


def _fuzzy(pattern: str, at: int) -> bool:
    """Whether the "{" at `at` may open fuzzy constraints ("{e<=1}"). A "{" that opens neither
    those nor a quantifier ("{2}", "{,3}") is a literal to `regex`."""
    if (m := _QUANT.match(pattern, at)) and (m.group(1) or m.group(2)):
        return False
    end = pattern.find("}", at)
    return end > at and any(ch in "eisd<>=+" for ch in pattern[at + 1:end])


def _cross(a: Literals | None, b: Literals | None) -> Literals | None:
    if a is None or b is None or len(a) * len(b) > _CAP:
        return None
    return frozenset(x + y for x in a for y in b)


def _best(candidates: Iterable[Literals | None]) -> Literals | None:
    """The most selective usable set: longest shortest string, then fewest strings."""
    usable = [c for c in candidates if c and "" not in c]
    if not usable:
        return None
    return max(usable, key=lambda c: (_shortest(c), -len(c)))


@functools.lru_cache(maxsize=4096)
def _shortest(strings: Literals) -> int:
    return min(map(len, strings))


class _Node(NamedTuple):
    """What the analysis knows of a piece of a pattern."""

    exact: Literals | None  # every string it can match (None: unknown or too many)
    required: Literals | None  # strings one of which every match contains
    first: Anchor | None = None  # how every non-empty match starts
    nullable: bool = False  # it can match the empty string
    empty_line: bool = False  # an empty match is only possible at a line start (`^`)
    all_of: tuple[Literals, ...] = ()  # sets each of which every match holds a string of
    word_start: bool = False  # every non-empty match starts where `\b` holds
    nonword: bool = False  # every non-empty match ends with a character that is no word character
    opens_nonword: bool = False  # every non-empty match starts with one
    chars: Literals | None = None  # the characters a non-empty match can start with (None: unknown)


# an assertion: matches only the empty string, anywhere, at line starts (`^`, `\A`) or at a word
# boundary (`\b`)
_ZERO = _Node(frozenset({""}), None, (frozenset(), False), True, nonword=True, opens_nonword=True,
              chars=frozenset())
_LINE = _ZERO._replace(empty_line=True)
_BOUNDARY = _ZERO._replace(word_start=True)
# every character `regex`'s \s matches (`str.isspace` holds for each, and for a few more)
_WHITESPACE = frozenset(chr(c) for c in range(0x3001) if chr(c).isspace() and regex.match(r"\s", chr(c)))
_SPACE = _Node(None, None, nonword=True, opens_nonword=True, chars=_WHITESPACE)  # \s
_NONWORD = _Node(None, None, nonword=True, opens_nonword=True)  # \W


def _union(a: Anchor | None, b: Anchor | None) -> Anchor | None:
    if a is None or b is None or len(a[0]) + len(b[0]) > _CAP:
        return None
    return a[0] | b[0], a[1] or b[1]


def _anchor(nodes: Sequence[_Node], i: int = 0) -> Anchor | None:
    """How every non-empty match of the sequence `nodes[i:]` starts."""
    if i >= len(nodes):
        return None
    node = nodes[i]
    if node.exact == {""}:  # an assertion: the match starts where what follows starts
        rest = _anchor(nodes, i + 1)
        if rest is not None and node.word_start:  # `\b`: a word character there starts a word
            return frozenset(WORD_START + s if s[0] in _ASCII_WORD else s for s in rest[0]), rest[1]
        if rest is not None or not node.empty_line:
            return rest
        chars = _chars(nodes[i + 1:])
        if chars:  # a line start, then one of these characters
            return frozenset(LINE_START + c for c in chars), False
        return frozenset(), True
    if node.exact is not None:  # a run of exact pieces: its strings, or (where all were empty) what follows
        prefixes, j = node.exact, i + 1
        while j < len(nodes) and (crossed := _cross(prefixes, nodes[j].exact)) is not None:
            prefixes, j = crossed, j + 1
        strings = frozenset(p for p in prefixes if p)
        if node.word_start and "" not in node.exact:  # every match starts where `\b` holds
            strings = frozenset(WORD_START + s if s[0] in _ASCII_WORD else s for s in strings)
        last = max((k for k in range(i, j) if nodes[k].exact != {""}), default=i)
        if (j < len(nodes) and _ends_word(nodes, last, j)) or (j == len(nodes) and \
                any(n.word_start for n in nodes[last + 1:j])):  # a whole word: marked at both ends
            strings = frozenset(s + WORD_START if s[-1] in _ASCII_WORD else s for s in strings)
        if "" not in prefixes:
            return strings, False
        if any(n.empty_line for n in nodes[i:j]):
            return strings, True
        return _union((strings, False), _anchor(nodes, j))
    if node.first is None or not node.nullable:
        return node.first
    return _union(node.first, (frozenset(), True) if node.empty_line else _anchor(nodes, i + 1))


def _either(branches: list[_Node]) -> _Node:
    """The node of an alternation of `branches`."""
    if len(branches) == 1:
        return branches[0]
    exact: Literals | None = frozenset()
    required: Literals | None = frozenset()
    first: Anchor | None = (frozenset(), False)
    for branch in branches:
        ex, req = branch.exact, branch.required
        exact = exact | ex if exact is not None and ex is not None else None
        best = _best([ex, req])
        required = required | best if required is not None and best is not None else None
        first = _union(first, branch.first)
    if exact is not None and len(exact) > _CAP:
        exact = None
    nullable = [b for b in branches if b.nullable]
    empty_line = bool(nullable) and all(b.empty_line for b in nullable)
    chars: Literals | None = frozenset()
    rare: set[str] | None = set()  # each branch's rarest set: one of them every match holds too
    for branch in branches:
        chars = None if chars is None or branch.chars is None else chars | branch.chars
        own = [c for c in (*branch.all_of, branch.exact) if c and "" not in c]
        rare = None if rare is None or not own else rare | min(own, key=_rarity)
    all_of = (frozenset(rare),) if rare else (required,) if required else ()
    return _Node(exact, required, first, bool(nullable), empty_line, all_of,
                 all(b.word_start for b in branches), all(b.nonword for b in branches),
                 all(b.opens_nonword for b in branches), chars)


_GROUP_PLAIN = re.compile(r"[^\\\[()]+")
_PLAIN_RUN = re.compile(r"[^\\\[({.^$\x00]+")
_SPECIAL_CHARS = frozenset("\\^$.|?*+()[]{}")
_QUANTIFIER_CHARS = frozenset("?*+{")
_GROUPS: dict[tuple[str, bool], _Node] = {}  # a group's source (and break context): its node


def _group_ends(pattern: str) -> dict[int, int]:
    """Where each group of `pattern` ends (after its ")"), by where it starts."""
    ends: dict[int, int] = {}
    opened: list[int] = []
    i = 0
    in_class = False
    while i < len(pattern):
        if not in_class and (plain := _GROUP_PLAIN.match(pattern, i)):
            i = plain.end()
            continue
        c = pattern[i]
        if c == "\\":
            i += 2
            continue
        if in_class:
            in_class = c != "]"
        elif c == "[":
            in_class = True
            i += 1
            if pattern.startswith("^", i):
                i += 1
            if pattern.startswith("]", i):  # a "]" first is a member
                i += 1
            continue
        elif c == "(":
            opened.append(i)
        elif c == ")" and opened:
            ends[opened.pop()] = i + 1
        i += 1
    return ends


def _nonword_char(c: str) -> bool:
    """An ASCII character that is no word character (to `regex`'s `\\w` too)."""
    return c.isascii() and c not in _ASCII_WORD


def _nonword(nodes: Sequence[_Node]) -> bool:
    """Whether every non-empty match of the sequence `nodes` ends with a non-word character."""
    for node in reversed(nodes):
        if not node.nonword:
            return False
        if not node.nullable:
            return True
    return False


def _chars(nodes: Sequence[_Node]) -> Literals | None:
    """The characters a non-empty match of the sequence `nodes` can start with (None: unknown)."""
    found: set[str] = set()
    for node in nodes:
        chars = node.chars if node.chars is not None or node.exact is None else \
            frozenset(s[0] for s in node.exact if s)
        if chars is None:
            return None
        found |= chars
        if not node.nullable:
            break
    return frozenset(found)


def _opens_nonword(nodes: Sequence[_Node]) -> bool:
    """Whether every non-empty match of the sequence `nodes` starts with a non-word character."""
    for node in nodes:
        if not node.opens_nonword:
            return False
        if not node.nullable:
            return True
    return False


def _ends_word(nodes: Sequence[_Node], last: int, j: int) -> bool:
    """Whether, after a literal that ends with a word character and whose last character node
    `last` matched, a word ends: a `\\b` follows before `nodes[j]`, or what follows from there starts
    with a non-word character (or nothing; then the text or the piece around ends, unknown)."""
    if any(n.word_start for n in nodes[last + 1:j]):
        return True
    for node in nodes[j:]:
        if node.word_start:
            return True
        if not node.opens_nonword:
            return False
        if not node.nullable:
            return True
    return False


def _mark(strings: Literals | None, after_break: bool) -> Literals | None:
    """`strings`, those that start a word marked so (WORD_START) when they follow a word break."""
    if not after_break or not strings:
        return strings
    return frozenset(WORD_START + s if s[:1] in _ASCII_WORD else s for s in strings)


def _word_start(nodes: Sequence[_Node]) -> bool:
    """Whether every non-empty match of the sequence `nodes` starts where `\\b` holds."""
    for node in nodes:
        if node.word_start:
            return True
        if node.exact != {""}:  # a piece that consumes (or may): what it starts with is not known
            return False
    return False


class _Parser:
    """Recursive descent over a pattern's source; each node gives (exact, required, first):
    `exact` holds every string the node can match (None when unknown or too many), `required`
    strings one of which every match contains (None when unknown), `first` the strings one of
    which every non-empty match starts with, or a line start (None when unknown)."""

    def __init__(self, pattern: str) -> None:
        self.p = pattern
        self.i = 0
        self.ends = _group_ends(pattern)

    def parse(self) -> _Node:
        return _either(self.branches())

    def branches(self) -> list[_Node]:
        """The top-level branches of the whole pattern."""
        branches = self.alternatives()
        if self.i != len(self.p):
            raise _Unsupported("unbalanced ')'")
        return branches

    def alternatives(self, after_break: bool = False) -> list[_Node]:
        branches = [self.sequence(after_break)]
        while self.i < len(self.p) and self.p[self.i] == "|":
            self.i += 1
            branches.append(self.sequence(after_break))
        return branches

    def alternation(self, after_break: bool = False) -> _Node:
        return _either(self.alternatives(after_break))
    def sequence(self, after_break: bool = False) -> _Node:
        """`after_break`: a word character where the sequence starts starts a word."""
        candidates: list[Literals | None] = []
        run: Literals | None = frozenset({""})
        whole: Literals | None = frozenset({""})
        nodes: list[_Node] = []
        all_of: list[Literals | None] = []
        # `after_break`: where the current run starts, a word character starts a word (`_mark`);
        # `here`: the same where the next piece starts
        here = after_break
        while self.i < len(self.p) and self.p[self.i] not in "|)":
            node = self.quantified(here)
            nodes.append(node)
            ex, req = node.exact, node.required
            whole = _cross(whole, ex)
            if ex is None:
                candidates += [run, req]
                all_of += [_mark(run, after_break), *(node.all_of or (req,))]
                if here and not node.nullable and node.first and node.first[0] and not node.first[1]:
                    all_of.append(_mark(node.first[0], True))  # its match starts a word with one
                run = frozenset({""})
                after_break = here = node.nonword and (here or not node.nullable)
                continue
            if ex == {""}:  # an assertion: `\b` or `^` make it a break
                here = here or node.word_start or node.empty_line
                if run == {""}:
                    after_break = here
            else:
                here = all(_nonword_char(s[-1]) for s in ex if s) and ("" not in ex or here)
            joined = _cross(run, ex)
            if joined is None:  # too many combinations: keep the pieces
                candidates.append(run)
                all_of.append(_mark(run, after_break))
                after_break = False
                joined = ex
            run = joined
        candidates.append(run)
        all_of.append(_mark(run, after_break))
        nullable = all(n.nullable for n in nodes)
        return _Node(whole, _best(candidates), _anchor(nodes), nullable,
                     nullable and any(n.empty_line for n in nodes),
                     tuple(c for c in all_of if c and "" not in c), _word_start(nodes), _nonword(nodes),
                     _opens_nonword(nodes), _chars(nodes))

    def quantified(self, after_break: bool = False) -> _Node:
        end = self._atom_end()
        # a later repetition does not start after the break
        node = self.atom(after_break and not self._repeats(end), end)
        ex, req = node.exact, node.required
        p = self.p
        if self.i >= len(p):
            return node
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
            return node
        if self.i < len(p) and p[self.i] in "?+":  # lazy or possessive
            self.i += 1
        if self.i < len(p) and (p[self.i] in "*+?" or (p[self.i] == "{" and _QUANT.match(p, self.i))):
            raise _Unsupported("nested quantifier")
        best = _best([ex, req])
        if high == 0:
            return _ZERO
        if low == 0:
            return _Node(ex | {""} if ex is not None and high == 1 else None, None, node.first, True,
                         nonword=node.nonword, opens_nonword=node.opens_nonword, chars=node.chars)
        exact = None
        if ex is not None and high == low and low <= 4:
            exact = ex
            for _ in range(low - 1):
                exact = _cross(exact, ex)
        return _Node(exact, best, node.first, node.nullable, node.empty_line, node.all_of, node.word_start,
                     node.nonword, node.opens_nonword, node.chars)

    def _atom_end(self) -> int:
        """Where the atom starting here ends (a group: after its ")"; else an estimate that is
        right for the quantifier test)."""
        return self.ends.get(self.i, self.i + 1)

    def _repeats(self, at: int) -> bool:
        """Whether a quantifier at `at` may repeat what precedes it."""
        p = self.p
        if at >= len(p):
            return False
        if p[at] in "*+":
            return True
        m = _QUANT.match(p, at)
        return bool(m and (m.group(1) or m.group(2)) and (m.group(2) or int(m.group(1) or 0) > 1))

    def atom(self, after_break: bool = False, end: int = -1) -> _Node:
        c = self.p[self.i]
        self.i += 1
        if c == "(":  # the same group recurs in many patterns (a table's shared vocabulary)
            key = (self.p[self.i - 1:end], after_break)
            node = _GROUPS.get(key)
            if node is not None:
                self.i = end
                return node
            node = self.group(after_break)
            if self.i == end:
                if len(_GROUPS) > 4096:
                    _GROUPS.clear()
                _GROUPS[key] = node
            return node
        if c == "[":
            chars, nonword, starts = self.char_class()
            return _Node(chars, None, (chars, False) if chars else None, nonword=nonword,
                         opens_nonword=nonword, chars=starts)
        if c == "\\":
            return self.escape()
        if c == "^":
            return _LINE
        if c == "$":
            return _ZERO
        if c == ".":
            return _Node(None, None)
        if c in "*+?" or (c == "{" and _fuzzy(self.p, self.i - 1)):
            raise _Unsupported(f"{c} without an atom")
        if c in _MARKS:
            raise _Unsupported("a mark character")
        if c not in "{}":  # plain characters up to one a quantifier applies to: one piece
            p, start = self.p, self.i - 1
            while (self.i + 1 < len(p) and p[self.i] not in _SPECIAL_CHARS
                   and p[self.i + 1] not in _QUANTIFIER_CHARS):
                if p[self.i] in _MARKS:
                    raise _Unsupported("a mark character")
                self.i += 1
            if self.i > start + 1:
                text = p[start:self.i]
                return _Node(frozenset({text}), None, (frozenset({text}), False),
                             nonword=_nonword_char(text[-1]), opens_nonword=_nonword_char(c),
                             chars=frozenset({c}))
        # "{" that is no quantifier: a literal
        return _Node(frozenset({c}), None, (frozenset({c}), False), nonword=_nonword_char(c),
                     opens_nonword=_nonword_char(c), chars=frozenset({c}))

    def group(self, after_break: bool = False) -> _Node:
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
                return _ZERO
            else:  # inline flags, conditionals, recursion, back references
                raise _Unsupported(f"group (?{rest[:1]}")
        node = self.alternation(after_break and not zero_width)
        if self.i >= len(p) or p[self.i] != ")":
            raise _Unsupported("unclosed group")
        self.i += 1
        return _ZERO if zero_width else node

    def escape(self) -> _Node:
        if self.i >= len(self.p):
            raise _Unsupported("trailing backslash")
        c = self.p[self.i]
        self.i += 1
        if c in _ZERO_WIDTH_ESCAPES:
            return _LINE if c == "A" else _BOUNDARY if c == "b" else _ZERO
        if c in _CLASS_ESCAPES:
            return _SPACE if c == "s" else _NONWORD if c == "W" else _Node(None, None)
        if c in "pP":
            self.property()
            return _Node(None, None)
        if c in _CONTROL_ESCAPES:
            c = _CONTROL_ESCAPES[c]
        elif c in _ESCAPE_LENGTH:
            c = self.code(c)
        elif c.isalnum() or c == "_":  # \L, \1, \N, \g, ...
            raise _Unsupported(f"escape \\{c}")
        if c in _MARKS:
            raise _Unsupported("a mark character")
        return _Node(frozenset({c}), None, (frozenset({c}), False), nonword=_nonword_char(c),
                     opens_nonword=_nonword_char(c), chars=frozenset({c}))

    def code(self, kind: str) -> str:
        """The character of a \\x, \\u or \\U escape whose hex digits start here."""
        digits = self.p[self.i:self.i + _ESCAPE_LENGTH[kind]]
        if len(digits) != _ESCAPE_LENGTH[kind] or not set(digits) <= _HEX:
            raise _Unsupported(f"escape \\{kind}")
        self.i += len(digits)
        return chr(int(digits, 16))

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

    def char_class(self) -> tuple[Literals | None, bool, Literals | None]:
        """(the characters of a class, when few and known; whether none is a word character; its
        characters with \\s counted, when known)."""
        p = self.p
        chars: set[str] = set()
        known = True
        nonword = True
        space = False
        unknown = False  # a member (a class escape, a property, a long range) is not listed
        if p.startswith("^", self.i):
            known = nonword = False
            unknown = True
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
                    nonword = nonword and c in "sW"
                    space = space or c == "s"
                    unknown = unknown or c != "s"
                    continue
                if c in "pP":
                    self.property()
                    known = nonword = False
                    unknown = True
                    continue
                if c in _CONTROL_ESCAPES:
                    c = _CONTROL_ESCAPES[c]
                elif c in _ESCAPE_LENGTH:
                    c = self.code(c)
                elif c.isalnum() or c == "_":
                    raise _Unsupported(f"escape \\{c} in a class")
            if p.startswith("-", self.i) and self.i + 1 < len(p) and p[self.i + 1] != "]":
                end = p[self.i + 1]
                if end in "\\[":
                    raise _Unsupported("escaped range end")
                self.i += 2
                span = [chr(o) for o in range(ord(c), ord(end) + 1)]
                nonword = nonword and all(map(_nonword_char, span))
                if len(span) > 17:
                    known = False
                    unknown = True
                    continue
                chars.update(span)
                continue
            chars.add(c)
            nonword = nonword and _nonword_char(c)
        if chars & _MARKS:
            raise _Unsupported("a mark character")
        starts = None if unknown else frozenset(chars) | (_WHITESPACE if space else frozenset())
        return frozenset(chars) if known and chars else None, nonword, starts


def required_literals(pattern: str, ignorecase: bool = False) -> Literals | None:
    """Strings one of which every match of `pattern` contains (lower-cased when `ignorecase`), or
    None when there is no such set or the pattern uses syntax outside the analysed subset."""
    found = analyse(pattern, ignorecase)
    return None if found is None else found.required


@functools.lru_cache(maxsize=4096)
def _foldable(ch: str) -> bool:
    return ch.isascii() or ch in _WHITESPACE or _HAN.match(ch) is not None


def _fold(strings: Literals, ignorecase: bool, prefixes: bool = False) -> Literals | None:
    """`strings` lower-cased when `ignorecase`. Case rules are modelled for ASCII and Han only: a
    string with other characters is cut to its longest part without them (its longest prefix
    without them, for `prefixes`), which every match holds (or starts with) as well; None when
    nothing is left of one."""
    if not ignorecase:
        return strings
    folded = set()
    for s in strings:
        if not all(map(_foldable, s)):
            parts = regex.split(r"[^\x00-\x7f\p{Han}]+", s)
            s = parts[0] if prefixes else max(parts, key=len)
            if not s:
                return None
        folded.add(s.lower())
    return frozenset(folded)


# how often a character occurs in lower-cased text (English letter frequencies; rarer punctuation),
# for guessing how often a literal does: it only steers which literals a scan looks for
_FREQUENCY = {**dict(zip("etaoinshrdlcumwfgypbvkjxqz", (
    .12, .09, .08, .075, .07, .067, .063, .06, .06, .043, .04, .028, .028, .024, .024, .022, .02, .02,
    .019, .015, .01, .008, .0015, .0015, .001, .0007), strict=True)),
    " ": .15, ".": .01, ",": .01, "\n": .005, "'": .003, '"': .003, "-": .003, ":": .002, "(": .002,
    ")": .002, ";": .001, "?": .001, "!": .001, "/": .001, **dict.fromkeys("0123456789", .003)}
_RARE = 3e-4  # a literal set this rare (summed over its strings) is worth choosing texts by


def _rarity(literals: Iterable[str]) -> float:
    """A guess at how often one of the literals occurs at an offset (smaller: rarer). A literal
    that starts a word (WORD_START) is rarer than the same letters anywhere, a whole word more."""
    return sum(map(_rarity_of, literals))


@functools.lru_cache(maxsize=8192)
def _rarity_of(s: str) -> float:
    plain = s.strip(WORD_START).lstrip(LINE_START)
    if plain in _COMMON:
        return .01
    guess = .3 ** (len(s) - len(plain) - (s[:1] == LINE_START))
    for ch in plain:
        guess *= _char_frequency(ch)
    return guess


@functools.lru_cache(maxsize=4096)
def _char_frequency(ch: str) -> float:
    return _FREQUENCY.get(ch.lower(), .002 if _HAN.match(ch) else 1e-4)


_SETS = 4  # the rarest sets of a branch that are kept: a gate uses three at most


class Analysis(NamedTuple):
    """What every match of a pattern holds, for skipping the texts and offsets where it cannot match
    (strings lower-cased for a case-insensitive pattern)."""

    anchor: Anchor | None  # how every match starts (`anchors`; WORD_START marks words)
    required: Literals | None  # `required_literals`
    # per top-level branch, the sets one string of each of which its every match holds, strongest
    # first, and the branch's own anchor strings (None: some branch has no set)
    branches: tuple[tuple[tuple[Literals, ...], Literals], ...] | None


@functools.lru_cache(maxsize=4096)
def _minimal(strings: Literals, prefixes: bool = False) -> Literals:
    """`strings` without those holding (or, for `prefixes`, starting with) another one."""
    if prefixes:  # in sorted order a string's prefix comes first, and all between start with it
        kept: list[str] = []
        for s in sorted(strings):
            if not kept or not s.startswith(kept[-1]):
                kept.append(s)
        return frozenset(kept)
    by_length = sorted(strings, key=len)
    kept = []
    for s in by_length:
        if not any(o in s for o in kept):
            kept.append(s)
    return frozenset(kept)


def analyse(pattern: str, ignorecase: bool = False) -> Analysis | None:
    """The `Analysis` of `pattern`, or None when it uses syntax outside the analysed subset."""
    try:
        branches = _Parser(pattern).branches()
    except (_Unsupported, IndexError, ValueError):
        return None
    node = _either(branches)
    required = _best([node.exact, node.required])
    if required is not None:
        required = _fold(required, ignorecase)
    conjunctions: list[tuple[tuple[Literals, ...], Literals]] | None = []
    for branch in branches:
        sets = {f for part in (*branch.all_of, branch.exact)
                if part and "" not in part and (f := _fold(part, ignorecase)) is not None}
        if not sets or conjunctions is None:
            conjunctions = None
            continue
        own = _first(branch, ignorecase)
        plain: dict[Literals, Literals] = {}  # of equal sets, the one marked most (found where words start)
        for c in sets:
            key = frozenset(x.strip(WORD_START) for x in c)
            if key not in plain or _marks(c) > _marks(plain[key]):
                plain[key] = c
        ranked = sorted(plain.values(), key=lambda c: (_rarity(c), len(c), sorted(c)))[:_SETS]
        conjunctions.append((tuple(map(_minimal, ranked)), own[0] if own else frozenset()))
    # a pattern that can match the empty string matches where no anchor is
    return Analysis(None if node.nullable else _first(node, ignorecase),
                    None if required is None else _minimal(required),
                    None if conjunctions is None else tuple(conjunctions))


def _marks(strings: Literals) -> int:
    return sum(x.count(WORD_START) for x in strings)


def _first(node: _Node, ignorecase: bool) -> Anchor | None:
    if node.first is None or not (node.first[0] or node.first[1]):
        return None
    strings = _fold(node.first[0], ignorecase, prefixes=True)
    return None if strings is None else (_minimal(strings, prefixes=True), node.first[1])


def anchors(pattern: str, ignorecase: bool = False) -> Anchor | None:
    """(strings, line): every non-empty match of `pattern` starts with one of the strings
    (lower-cased when `ignorecase`) or, when `line`, at a line start; None when unknown. A string
    that starts with another one adds nothing and is left out."""
    found = analyse(pattern, ignorecase)
    return None if found is None else found.anchor


# -- sealing: a pattern that cannot read across a separator -----------------------------------------

SEPARATOR = "\x00"
# flags under which a sealed pattern finds, in texts joined by SEPARATOR, what it finds in each
_SEALABLE = regex.IGNORECASE | regex.MULTILINE | regex.DOTALL | regex.UNICODE | regex.ASCII | regex.VERSION0


@functools.lru_cache(maxsize=1024)
def _accepts_separator(atom: str, flags: int) -> bool:
    """Whether the one-character pattern `atom` matches SEPARATOR."""
    return regex.fullmatch(atom, SEPARATOR, flags) is not None


class _Sealer:
    """Rewrites a pattern so that no part of it matches SEPARATOR and `^`, `$`, `\\A` and `\\Z` hold
    beside one as at a text's ends: then, in texts joined by SEPARATOR, the pattern finds within
    each text exactly what it finds in that text alone (nothing it reads can reach past the text,
    and its tests of the text's ends see what they would see there). Raises _Unsupported."""

    def __init__(self, pattern: str, flags: int) -> None:
        self.p = pattern
        self.flags = flags
        self.i = 0

    def rewrite(self) -> str:
        out = []
        p = self.p
        while self.i < len(p):
            plain = _PLAIN_RUN.match(p, self.i)  # characters that stay as they are
            if plain:
                out.append(plain.group())
                self.i = plain.end()
                continue
            c = p[self.i]
            self.i += 1
            if c == "\\":
                out.append(self.escape())
            elif c == "[":
                out.append(self.char_class())
            elif c == "(":
                out.append(self.group())
            elif c == "{" and _fuzzy(p, self.i - 1):
                raise _Unsupported("fuzzy constraints")
            elif c == ".":
                out.append("[^\\x00]" if self.flags & regex.DOTALL else "[^\\n\\x00]")
            elif c == "^":
                out.append("(?:^|(?<=\\x00))")
            elif c == "$":
                out.append("(?:$|(?=\\x00))" if self.flags & regex.MULTILINE else "(?:$|(?=\\n?\\x00))")
            elif c == SEPARATOR:
                raise _Unsupported("the separator in the pattern")
            else:
                out.append(c)
        return "".join(out)

    def group(self) -> str:
        p = self.p
        if not p.startswith("?", self.i):
            return "("
        rest = p[self.i + 1:]
        if m := re.match(r":|>|\||=|!|<=|<!|P?<[A-Za-z_]\w*>", rest):
            self.i += 1 + m.end()
            return "(?" + m.group()
        raise _Unsupported(f"group (?{rest[:1]}")  # inline flags, comments, conditionals, references

    def escape(self) -> str:
        p = self.p
        if self.i >= len(p):
            raise _Unsupported("trailing backslash")
        c = p[self.i]
        self.i += 1
        if c == "A":
            return "(?:\\A|(?<=\\x00))"
        if c == "Z":
            return "(?:\\Z|(?=\\x00))"
        if c in "bBdswDSW":
            atom = "\\" + c
        elif c in "pP":
            end = self.i + 1
            if p.startswith("{", self.i):
                end = p.find("}", self.i) + 1
                if end <= 0:
                    raise _Unsupported("open property name")
            atom = "\\" + c + p[self.i:end]
            self.i = end
        elif c in _ESCAPE_LENGTH:
            digits = p[self.i:self.i + _ESCAPE_LENGTH[c]]
            if len(digits) != _ESCAPE_LENGTH[c] or not set(digits) <= _HEX:
                raise _Unsupported(f"escape \\{c}")
            self.i += len(digits)
            atom = "\\" + c + digits
        elif c in _CONTROL_ESCAPES or not (c.isalnum() or c == "_"):
            atom = "\\" + c
        else:  # \G, \K, \X, \N, \L, \g, \1, \0, \m, ...
            raise _Unsupported(f"escape \\{c}")
        if c in "bB" or not _accepts_separator(atom, self.flags):
            return atom
        if c in "DSWP":  # the negated class, without the separator
            return f"[^{atom.swapcase() if c != 'P' else atom.replace(chr(92) + 'P', chr(92) + 'p', 1)}\\x00]"
        return f"(?:(?!\\x00){atom})"

    def char_class(self) -> str:
        p = self.p
        start = self.i - 1
        if p.startswith("^", self.i):
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
            if c == SEPARATOR:
                raise _Unsupported("the separator in the pattern")
            if c == "\\":
                if self.i >= len(p):
                    raise _Unsupported("trailing backslash")
                c = p[self.i]
                self.i += 1
                if c in "pPN" and p.startswith("{", self.i):
                    end = p.find("}", self.i)
                    if end < 0:
                        raise _Unsupported("open name")
                    self.i = end + 1
                elif c in "pP":
                    self.i += 1
        atom = p[start:self.i]
        if not _accepts_separator(atom, self.flags):
            return atom
        if atom.startswith("[^"):
            return atom[:-1] + "\\x00]"
        return f"(?:(?!\\x00){atom})"


def seal(pattern: regex.Pattern[str]) -> regex.Pattern[str] | None:
    """`pattern` rewritten (see `_Sealer`) so that, run over texts joined by SEPARATOR, it finds
    within each text what it finds in that text alone; None when the pattern uses syntax or flags
    outside the analysed subset (verbose, fuzzy, inline flags, back references, ...)."""
    source = _sealed_source(pattern)
    return None if source is None else _compile_sealed(source, pattern.flags)


def _sealed_source(pattern: regex.Pattern[str]) -> str | None:
    if pattern.flags & ~_SEALABLE:
        return None
    try:
        return _Sealer(pattern.pattern, pattern.flags).rewrite()
    except _Unsupported:
        return None


def _compile_sealed(source: str, flags: int) -> regex.Pattern[str] | None:
    try:
        return regex.compile(source, flags)
    except regex.error:
        return None


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


# -- many texts in one pass -------------------------------------------------------------------------

try:  # pyahocorasick, when installed: every occurrence of a table's literals in one pass over a text
    ahocorasick: Any = importlib.import_module("ahocorasick")
except ImportError:  # the stdlib trie below finds the same occurrences, a little slower
    ahocorasick = None

_NEWLINE = re.compile("\n")
_LETTERS = re.compile("[a-z]+")
_WORD_PREFIX = re.compile(r"[a-z]+(?: [a-z]*)*")
# bytes: lower-case ASCII letters stay, anything else becomes a space
_WORD_BYTES = bytes(b if 97 <= b <= 122 else 32 for b in range(256))
# words too common to look for where a pattern starts (it is tried at each) or to choose texts by
_COMMON = frozenset("""
a about after all also an and any are as at be been before but by can could did do does each
for from had has have he her his how i if in into is it its just me more most my no not now of
on one only or other our out over she should so some such than that the their them then there
these they this those to up us was we were what when which who will with would you your
""".split())  # noqa: SIM905

# where a literal is looked for: in the text, in its lower-cased form, or (a word that must start
# where a word starts) in the lower-cased form's word skeleton
TEXT, LOWER, WORD = 0, 1, 2


class Joined:
    """Texts joined by SEPARATOR: a sealed pattern scans them all in one call, and an offset in the
    joined text names its text by bisection over the starts."""

    __slots__ = ("_base", "_han", "_heads", "_lines", "_lower", "_starts", "_words", "lengths", "starts",
                 "text", "texts")

    def __init__(self, texts: Sequence[str]) -> None:
        self.texts = texts
        self.text = SEPARATOR.join(texts)
        self.lengths = [len(t) for t in texts]
        self.starts = list(accumulate((n + 1 for n in self.lengths[:-1]), initial=0)) if texts else []
        self._lower: str | bool | None = False  # False: not computed yet
        self._words: str | None = None
        self._lines: list[int] | None = None
        self._han: list[int] | None = None
        self._heads: dict[str, dict[str, list[int]]] = {}
        self._starts: Any = None
        # texts joined before that differ from these in a few (their indices): what to derive from
        self._base: tuple[Joined, list[int]] | None = None

    @property
    def sealed(self) -> bool:
        """Whether no text holds the separator (else offsets in the joined text are ambiguous)."""
        return self.text.count(SEPARATOR) == max(len(self.starts) - 1, 0)

    def lower(self) -> str | None:
        """The lower-cased text, or None when `str.lower` would disagree there with `regex`'s
        case-insensitive matching or move offsets ("İ", "ı", "ſ")."""
        if self._lower is False:
            text = self.text
            base, changed = self._base if self._base is not None else (self, [])
            base_lower = base.lower() if base is not self else None
            if base_lower is not None:  # the earlier texts' lower-cased form, the changed ones anew
                unsafe = any(not t.isascii() and any(ch in t for ch in _LOWER_UNSAFE)
                             for t in (self.texts[i] for i in changed))
                self._lower = None if unsafe else _splice(base, base_lower, changed, self.texts)
            else:
                unsafe = not text.isascii() and any(ch in text for ch in _LOWER_UNSAFE)
                self._lower = None if unsafe else text.lower()
            self._base = None
        return self._lower if isinstance(self._lower, str) else None

    def words(self) -> str | None:
        """A space, the lower-cased text with every character but an ASCII letter made a space
        (offsets unchanged but for the space before), a space: " " + a word finds that word where a
        run of letters starts (so where a word starts), and " " + a word + " " a whole run of
        letters (what `[a-z]+` finds in the lower-cased text)."""
        if self._words is None:
            lower = self.lower()
            if lower is None:
                return None
            self._words = " " + lower.encode("ascii", "replace").translate(_WORD_BYTES).decode("ascii") + " "
        return self._words

    def line_starts(self) -> list[int]:
        """The offsets where a line starts: every text's start and every offset after a newline."""
        if self._lines is None:
            after = [m.end() for m in _NEWLINE.finditer(self.text)]
            self._lines = sorted({*self.starts, *after})
        return self._lines

    def line_heads(self, lowered: bool) -> dict[str, list[int]]:
        """The line starts by the character there (lower-cased, for `lowered`)."""
        key = "lower" if lowered else "text"
        if key not in self._heads:
            read = (self.lower() if lowered else None) or self.text
            heads: dict[str, list[int]] = {}
            for at in self.line_starts():
                heads.setdefault(read[at:at + 1], []).append(at)
            self._heads[key] = heads
        return self._heads[key]

    def han(self) -> list[int]:
        """The indices of the texts that hold a Han character."""
        if self._han is None:
            text = self.text
            if text.isascii() or _HAN.search(text) is None:
                self._han = []
            else:
                self._han = [i for i, t in enumerate(self.texts) if not t.isascii() and _HAN.search(t)]
        return self._han

    @classmethod
    def of(cls, texts: Sequence[str]) -> Joined:
        """The texts joined, the last one built again when it is the same text: steps that scan
        the same chunks one after another (classify.rules, classify.injection) share what it
        derives (lower-cased text, word skeleton, line starts)."""
        joined = cls(texts)
        last = _LAST.joined
        if last is not None and len(last.lengths) == len(joined.lengths):
            if last.text == joined.text and last.lengths == joined.lengths:
                return last
            changed = [i for i, (a, b) in enumerate(zip(last.texts, texts, strict=True))
                       if a is not b and a != b]
            if len(changed) * 8 < len(texts):  # a few differ (the skeletons of a few): derive from it
                joined._base = (last, changed)
        _LAST.joined = joined
        return joined

    def index(self, offset: int) -> int:
        """The index of the text holding `offset` of the joined text."""
        return bisect_right(self.starts, offset) - 1

    def text_of(self, offsets: Any) -> Any:
        """The index of the text holding each offset (a numpy array of them)."""
        np = _numpy()
        if self._starts is None:
            self._starts = np.asarray(self.starts)
        return np.searchsorted(self._starts, offsets, side="right") - 1

    def mask(self, offsets: Sequence[int]) -> int:
        """The texts holding these offsets, as a bit mask (bit i: text i)."""
        if len(offsets) < 32:
            bits = 0
            for at in offsets:
                bits |= 1 << (bisect_right(self.starts, at) - 1)
            return bits
        np = _numpy()
        flags = np.zeros(len(self.starts), dtype=bool)
        flags[self.text_of(np.asarray(offsets))] = True
        return int.from_bytes(np.packbits(flags, bitorder="little").tobytes(), "little")


class _Last:
    """The texts joined last (`Joined.of`), emptied like a functools cache (`cache_clear`)."""

    def __init__(self) -> None:
        self.joined: Joined | None = None

    def cache_clear(self) -> None:
        self.joined = None

    def cache_info(self) -> str:
        return f"texts joined last: {0 if self.joined is None else len(self.joined.lengths)}"


_LAST = _Last()


def _splice(base: Joined, base_lower: str, changed: list[int], texts: Sequence[str]) -> str:
    """The lower-cased form of `texts` joined, from that of `base` (the same texts but `changed`)."""
    parts = []
    at = 0
    for i in changed:
        start = base.starts[i]
        parts += [base_lower[at:start], texts[i].lower()]
        at = start + base.lengths[i]
    parts.append(base_lower[at:])
    return "".join(parts)


def _numpy() -> Any:
    """numpy, imported when first needed (large offset lists only): importing it costs more than a
    small call does."""
    import numpy

    return numpy


def _indices(mask: int, size: int) -> list[int]:
    """The set bits of `mask`, in order."""
    if mask.bit_count() < 64:
        found = []
        while mask:
            low = mask & -mask
            found.append(low.bit_length() - 1)
            mask ^= low
        return found
    np = _numpy()
    bits = np.unpackbits(np.frombuffer(mask.to_bytes((size + 7) // 8, "little"), np.uint8), bitorder="little")
    return np.flatnonzero(bits[:size]).tolist()


class _Finder:
    """Every occurrence, overlapping ones too, of a set of literals in a text: a few literals one
    `str.find` scan each, more in one pass (pyahocorasick's automaton, else a stdlib trie)."""

    def __init__(self, literals: Iterable[str], space: int) -> None:
        self.space = space
        self.words = sorted(set(literals))
        keys = [" " + w if space == WORD else w for w in self.words]
        self.automaton: Any = None
        self.regex: re.Pattern[str] | None = None
        self.keys = list(zip(keys, ((space, w) for w in self.words), strict=True))
        if len(keys) <= _FEW:
            return
        if ahocorasick is not None:
            self.automaton = ahocorasick.Automaton()
            for key, word in zip(keys, self.words, strict=True):
                self.automaton.add_word(key, ((space, word), len(key) - 1))
            self.automaton.make_automaton()
        else:
            self.regex = re.compile(_trie_pattern(keys))
            pairs = list(zip(keys, self.words, strict=True))
            self.prefixes = {k: [(space, w) for k2, w in pairs if k.startswith(k2)] for k in keys}

    def find(self, text: str, found: dict[tuple[int, str], list[int]], offset: int = 0) -> None:
        """Append to `found[(space, literal)]` the start (plus `offset`) of each occurrence of each
        literal in `text`, in order (for WORD, `text` is `Joined.words()`: the start of the word)."""
        if self.automaton is not None:
            for end, (key, back) in self.automaton.iter(text):
                found[key].append(end - back + offset)
            return
        if self.regex is None:
            for literal, key in self.keys:
                at = text.find(literal)
                while at >= 0:
                    found[key].append(at + offset)
                    at = text.find(literal, at + 1)
            return
        search = self.regex.search
        match = search(text)
        while match:  # the longest literal at each start, and the literals that are its prefixes
            start = match.start()
            for key in self.prefixes[match.group()]:
                found[key].append(start + offset)
            match = search(text, start + 1)


_FEW = 16  # literals up to this many: a `str.find` scan each beats one pass for all


def _caseless(literal: str) -> bool:
    """Whether `literal` is found at the same offsets in a text and in its lower-cased form."""
    return all(ch.lower() == ch == ch.upper() for ch in literal)


Key = tuple[int, str]  # (space, literal)
Gate = tuple[tuple[frozenset[Key], ...], ...]  # any of these conjunctions: a key of each set


class _Plan(NamedTuple):
    """How a table item is run over joined texts."""

    kind: str  # "string", "anchored", "gated", "whole" or "each" (one text at a time)
    item: Any  # the plain string or the pattern
    sealed: str | None  # the sealed pattern's source (compiled when first needed)
    lowered: bool  # its literals are looked for in the lower-cased text
    gate: Gate | None  # a text is scanned only if it holds what one conjunction names
    anchor: frozenset[Key] = frozenset()  # "anchored": a match starts with one of these,
    line: bool = False  # or at a line start
    words: frozenset[Key] = frozenset()  # anchors that start a word: not right after a word character
    heads: frozenset[str] = frozenset()  # or a line start followed by one of these
    cued: bool = False  # the gate is one to hold to, not a filter of what cannot match anyway


# (text index, start, end, match) with offsets in the text; the match is None for plain strings
Hit = tuple[int, int, int, Any]


def _implied(strings: Literals, anchors: Sequence[str]) -> bool:
    """Whether every anchor holds one of `strings` (marks aside)."""
    plain = {x.strip(WORD_START) for x in strings}
    return all(a in plain or any(x in a for x in plain) for a in anchors)


def _gate(branches: tuple[tuple[tuple[Literals, ...], Literals], ...] | None, space: int,
          strong: bool) -> Gate | None:
    """A text may hold a match only if it holds, for one top-level branch, a string of each of the
    branch's sets: per branch its three rarest sets that are rare (`strong`: None when a branch
    has none), or else its rarest set."""
    if not branches:
        return None
    conjunctions = []
    for sets, own in branches:
        plain = [s.strip(WORD_START) for s in own]
        chosen = [c for c in sets if _rarity(c) <= _RARE][:3]
        if not chosen:
            if strong:
                return None
            chosen = list(sets[:1])
        # a set every anchor of the branch holds a string of says no more than the anchors: it is
        # looked for where they are
        conjunctions.append(tuple(_keys(own, space, gate=True).keys if plain and _implied(c, plain)
                                  else _keys(c, space, gate=True).keys for c in chosen))
    return tuple(conjunctions)


class _Where(NamedTuple):
    """Where the literals of a set are looked for."""

    keys: frozenset[Key]
    checked: frozenset[Key]  # keys whose offsets must start a word
    heads: frozenset[str]  # line-start anchors: the characters that start them


def _word_prefix(text: str) -> str:
    """The words (ASCII letters, spaces between) `text` starts with, lower-cased."""
    m = _WORD_PREFIX.match(text.lower())
    return m.group() if m else ""


def _keys(strings: Iterable[str], space: int, gate: bool = False) -> _Where:
    """Where to look for literals: one that starts a word (WORD_START) by its first words in the
    word skeleton (with the space after a whole word), or (too short) in `space` and checked; a
    character where a line starts (LINE_START) after a newline or a separator; anything else in
    `space` (LOWER for a caseless string: one pass serves both cases). For a gate, which needs only
    the texts holding a literal, an ASCII non-word character then a word is that word, and a
    character where a line starts that character."""
    keys: set[Key] = set()
    checked: set[Key] = set()
    heads: set[str] = set()
    for s in strings:
        if s.startswith(LINE_START):  # a gate: the character; an anchor: the line starts it starts
            if gate:
                keys.add((LOWER if space == LOWER or _caseless(s[1:]) else TEXT, s[1:]))
            else:
                heads.add(s[1:])
            continue
        plain = s.strip(WORD_START)
        if s.startswith(WORD_START):
            word = _word_prefix(plain)
            whole = word == plain.lower() and len(s) > 1 and s.endswith(WORD_START)
        else:  # for a gate: the word after a non-word character
            word = _word_prefix(plain[1:]) if gate and _nonword_char(plain[:1]) else ""
            whole = False
        if len(word) >= 2:
            keys.add((WORD, word + " " * whole))
            continue
        key = (LOWER if _caseless(plain) else space, plain)
        keys.add(key)
        if s.startswith(WORD_START) and not gate:
            checked.add(key)
    return _Where(frozenset(keys), frozenset(checked), frozenset(heads))


class Scanner:
    """A table of patterns and plain strings run over many texts at once: `run` gives, per item,
    what a scan of each text alone gives, in text order (plain strings: their non-overlapping
    occurrences, as `str.count` counts them; patterns: their `finditer` matches).

    The texts are joined by SEPARATOR and each pattern is sealed (`seal`), so it cannot read from
    one text into the next. One pass over the joined text (per letter case, and one over its word
    skeleton) finds every literal the table needs (`analyse`): a pattern runs only over the texts
    that hold what one of its top-level branches requires, and a pattern whose every match starts
    with one of its anchors (or at a line start) is tried only there (`match` at those offsets, in
    order, from the end of the last match, up to its text's end: what `finditer` finds, since it can
    find nothing elsewhere). A pattern whose anchors are common words runs over its texts whole; one
    without literals over the whole joined text; one outside the analysed subset on each text alone.
    An item given cue words (`words`) runs on the texts holding them; when those are many, it is
    analysed then (once) and tried at its anchors in them."""

    def __init__(self, items: Sequence[regex.Pattern[str] | str],
                 words: Mapping[int, Sequence[Iterable[str]]] | None = None) -> None:
        """`words`: for some items (by index), sets of words a text must hold one of each of to be
        scanned by them at all (an ASCII lower-case word as a whole run of letters of the lower-cased
        text, anything else as it is): they run on those texts alone, whatever else they match."""
        self.items = list(items)
        cues = words or {}
        self.plans = [self._plan(item) if i not in cues else self._gated(item, cues[i])  # type: ignore[arg-type]
                      for i, item in enumerate(self.items)]
        groups: dict[tuple[int, bool], set[str]] = {}
        for plan in self.plans:
            keys = {*plan.anchor, *(k for c in plan.gate or () for part in c for k in part)}
            for space, literal in keys:
                groups.setdefault((space, _HAN.search(literal) is not None), set()).add(literal)
        self._finders = [(han, _Finder(words, space)) for (space, han), words in groups.items()]
        # cue-gated items that let many texts through, analysed when first needed: their anchors
        # and finders for them (None: no anchors worth it)
        self._anchoring: dict[int, tuple[_Plan, dict[tuple[int, bool], _Finder]] | None] = {}
        self._compiled: dict[int, regex.Pattern[str] | None] = {}  # sealed patterns, compiled when needed

    @staticmethod
    def _gated(item: regex.Pattern[str], sets: Sequence[Iterable[str]]) -> _Plan:
        """The plan of an item that runs only on the texts holding a word of each set (an ASCII word
        that is not lower-case letters is never one)."""
        gate = (tuple(frozenset((WORD, w + " ") if w.isascii() else (LOWER if _caseless(w) else TEXT, w)
                                for w in words if not w.isascii() or (w.isalpha() and w.islower()))
                      for words in sets),)
        sealed = _sealed_source(item)
        return _Plan("each" if sealed is None else "gated", item, sealed, True, gate, cued=True)

    @staticmethod
    def _plan(item: regex.Pattern[str] | str) -> _Plan:
        """How to run `item`, worked out once per pattern (like its compilation) and kept."""
        key = item if isinstance(item, str) else (item.pattern, item.flags)
        plan = _PLANS.get(key)
        if plan is None or plan.item is not item:
            plan = Scanner._new_plan(item) if plan is None else plan._replace(item=item)
            if len(_PLANS) > 4096:
                _PLANS.clear()
            _PLANS[key] = plan
        return plan

    @staticmethod
    def _new_plan(item: regex.Pattern[str] | str) -> _Plan:
        if isinstance(item, str):
            key = frozenset({(LOWER if _caseless(item) else TEXT, item)})
            return _Plan("string", item, None, False, ((key,),) if item else None)
        folded = bool(item.flags & regex.IGNORECASE)
        found = None if item.flags & _UNMODELLED else analyse(item.pattern, folded)
        if found is None:
            return _Plan("each", item, None, folded, None)
        space = LOWER if folded else TEXT
        sealed = _sealed_source(item)
        strong = _gate(found.branches, space, strong=True)
        if sealed is None or found.anchor is None:
            gate = strong or _gate(found.branches, space, strong=False)
            kind = "each" if sealed is None else "gated" if gate is not None else "whole"
            return _Plan(kind, item, sealed, folded, gate)
        strings, line = found.anchor
        if strong is not None and any(s.strip(WORD_START) in _COMMON for s in strings):
            return _Plan("gated", item, sealed, folded, strong)  # its anchors are too common to look for
        where = _keys(strings, space)
        anchor = where.keys
        if strong is not None and len(strong) == 1 and all(set(part) <= anchor for part in strong[0]):
            strong = None  # the anchors say as much
        return _Plan("anchored", item, sealed, folded or any(k[0] == WORD for k in anchor), strong,
                     anchor, line, words=where.checked, heads=where.heads)

    def run(self, texts: Sequence[str], joined: Joined | None = None) -> list[list[Hit]]:
        """Per item, its hits in `texts` (`joined`: the same texts joined, when the caller has them)."""
        if joined is None:
            joined = Joined.of(texts)
        if not joined.sealed:  # a text holds the separator: each text alone
            return [_each(plan, texts, range(len(texts))) for plan in self.plans]
        lower = joined.lower()
        found: dict[Key, list[int]] = defaultdict(list)
        for han, finder in self._finders:
            space = finder.space
            if space == WORD:
                text = joined.words()
                if text is not None:
                    finder.find(text, found)
                continue
            text = lower if space == LOWER and lower is not None else joined.text
            if not han:
                finder.find(text, found)
                continue
            which = joined.han()
            if sum(joined.lengths[i] for i in which) * 2 > len(text):
                finder.find(text, found)
                continue
            for i in which:
                start = joined.starts[i]
                finder.find(text[start:start + joined.lengths[i]], found, start)
        masks: dict[Key, int] = {}
        out = []
        for index, plan in enumerate(self.plans):
            if plan.cued and plan.kind == "gated" and lower is not None:
                out.append(self._cued_hits(index, plan, texts, joined, found, masks))
                continue
            pattern = self._sealed(index) if plan.kind != "string" else None
            if plan.lowered and lower is None:  # literals unknown: scan all, or the cue gate's texts
                if plan.cued:
                    which = _cued(plan, texts)
                    out.append(_each(plan, texts, which) if plan.kind == "each" else _hits(
                        plan._replace(kind="gated", gate=None), pattern, texts, joined, found, masks, which))
                    continue
                if plan.kind != "each":
                    plan = plan._replace(kind="whole", gate=None)
            out.append(_hits(plan, pattern, texts, joined, found, masks))
        return out

    def _sealed(self, index: int) -> regex.Pattern[str] | None:
        """Item `index`'s sealed pattern, compiled the first time a scan needs it."""
        if index not in self._compiled:
            plan = self.plans[index]
            sealed = plan.sealed
            self._compiled[index] = None if sealed is None else _compile_sealed(sealed, plan.item.flags)
        return self._compiled[index]

    def _cued_hits(self, index: int, plan: _Plan, texts: Sequence[str], joined: Joined,
                   found: dict[Key, list[int]], masks: dict[Key, int]) -> list[Hit]:
        """A cue-gated item's hits: over its texts whole, or (many texts) tried at its anchors there."""
        which = _gate_texts(plan.gate, joined, found, masks)  # type: ignore[arg-type]
        pattern = self._sealed(index)
        if len(which) < _ANCHOR_TEXTS:
            return _hits(plan, pattern, texts, joined, found, masks, which) if which else []
        if index not in self._anchoring:
            anchored = self._plan(self.items[index])
            self._anchoring[index] = None
            if anchored.kind == "anchored" and anchored.sealed == plan.sealed:
                groups: dict[tuple[int, bool], set[str]] = {}
                for space, literal in anchored.anchor:
                    groups.setdefault((space, _HAN.search(literal) is not None), set()).add(literal)
                finders = {key: _Finder(words, key[0]) for key, words in groups.items()}
                self._anchoring[index] = (anchored, finders)
        lazy = self._anchoring[index]
        if lazy is None or pattern is None:
            return _hits(plan, pattern, texts, joined, found, masks, which)
        anchored, finders = lazy
        local: dict[Key, list[int]] = defaultdict(list)
        for finder in finders.values():
            _find_in(finder, joined, which, local)
        hits = _anchored(anchored, pattern, joined, local, which)
        return _hits(plan, pattern, texts, joined, found, masks, which) if hits is None else hits


_PLANS: dict[Any, _Plan] = {}  # by pattern (source and flags) or plain string: its plan

_ANCHOR_TEXTS = 16  # a cue gate letting this many texts through: the item is tried at its anchors


def _find_in(finder: _Finder, joined: Joined, which: Sequence[int], found: dict[Key, list[int]]) -> None:
    """`finder`'s literals in the texts `which` only: their stretches of the text it reads (the
    word skeleton, the lower-cased text or the text), joined into one, in one pass."""
    space = finder.space
    read = joined.words() if space == WORD else joined.lower() if space == LOWER else joined.text
    if read is None:
        read = joined.text
    extra = 2 if space == WORD else 0  # the word skeleton's spaces around each stretch
    parts = []
    maps = []  # (where a stretch starts in the joined stretches, where in `read`)
    at = 0
    for start, end in _regions(joined, which):
        parts.append(read[start:end + extra])
        maps.append((at, start))
        at += end + extra - start + 1
    local: dict[Key, list[int]] = defaultdict(list)
    finder.find(SEPARATOR.join(parts), local)
    firsts = [m[0] for m in maps]
    for key, offsets in local.items():
        for offset in offsets:
            part = bisect_right(firsts, offset) - 1
            found[key].append(offset - maps[part][0] + maps[part][1])


def _gate_texts(gate: Gate, joined: Joined, found: dict[Key, list[int]], masks: dict[Key, int]) -> list[int]:
    """The texts a gate lets through, in order."""
    which = 0
    for conjunction in gate:
        texts_in = -1
        for keys in conjunction:
            any_of = 0
            for key in keys:
                if key not in masks:
                    masks[key] = joined.mask(found.get(key) or ())
                any_of |= masks[key]
            texts_in &= any_of
            if not texts_in:
                break
        which |= texts_in
    return _indices(which, len(joined.starts)) if which else []


def _cued(plan: _Plan, texts: Sequence[str]) -> list[int]:
    """The texts that hold a word of each set of a word gate, text by text."""
    which = []
    for i, text in enumerate(texts):
        letters = set(_LETTERS.findall(text.lower()))
        if all(any(word[:-1] in letters if space == WORD else word in text for space, word in keys)
               for keys in plan.gate[0]):  # type: ignore[index]
            which.append(i)
    return which


def _hits(plan: _Plan, pattern: regex.Pattern[str] | None, texts: Sequence[str], joined: Joined,
          found: dict[Key, list[int]], masks: dict[Key, int], which: list[int] | None = None) -> list[Hit]:
    """An item's hits (`pattern`: its sealed pattern, None when it has none)."""
    if plan.kind == "string":
        return _strings(joined, found.get(next(iter(plan.gate[0][0]))) or [], len(plan.item)) \
            if plan.gate else []
    gate = which
    if gate is None and plan.gate is not None:
        gate = _gate_texts(plan.gate, joined, found, masks)
        if not gate:
            return []
    if plan.kind == "each" or pattern is None:
        return _each(plan, texts, range(len(texts)) if gate is None else gate)
    if plan.kind == "anchored":
        hits = _anchored(plan, pattern, joined, found, gate)
        if hits is not None:
            return hits
    if gate is None:
        return _located(joined, pattern.finditer(joined.text))
    return _located(joined, (m for start, end in _regions(joined, gate)
                             for m in pattern.finditer(joined.text, start, end)))


def _each(plan: _Plan, texts: Sequence[str], which: Iterable[int]) -> list[Hit]:
    """The hits of one item, text by text."""
    if plan.kind == "string":
        hits: list[Hit] = []
        for i in which:
            at = texts[i].find(plan.item) if plan.item else -1
            while at >= 0:
                hits.append((i, at, at + len(plan.item), None))
                at = texts[i].find(plan.item, at + len(plan.item))
        return hits
    return [(i, m.start(), m.end(), m) for i in which for m in plan.item.finditer(texts[i])]


def _regions(joined: Joined, which: Sequence[int]) -> Iterator[tuple[int, int]]:
    """(start, end) in the joined text of runs of consecutive texts among `which` (sorted)."""
    starts, lengths = joined.starts, joined.lengths
    run_start = run_end = -1
    previous = -2
    for i in which:
        if i != previous + 1 and run_start >= 0:
            yield run_start, run_end
            run_start = -1
        if run_start < 0:
            run_start = starts[i]
        run_end = starts[i] + lengths[i]
        previous = i
    if run_start >= 0:
        yield run_start, run_end


def _located(joined: Joined, matches: Iterable[Any]) -> list[Hit]:
    starts = joined.starts
    hits = []
    for m in matches:
        i = bisect_right(starts, m.start()) - 1
        hits.append((i, m.start() - starts[i], m.end() - starts[i], m))
    return hits


def _strings(joined: Joined, offsets: Sequence[int], size: int) -> list[Hit]:
    """Non-overlapping occurrences (as `str.count` counts them) from every occurrence's offset."""
    starts = joined.starts
    hits = []
    last = -1
    for at in offsets:
        if at >= last:
            i = bisect_right(starts, at) - 1
            hits.append((i, at - starts[i], at - starts[i] + size, None))
            last = at + size
    return hits


def _anchored(plan: _Plan, pattern: regex.Pattern[str], joined: Joined, found: dict[Key, list[int]],
              gate: Sequence[int] | None) -> list[Hit] | None:
    """`finditer`'s matches, tried only at the offsets where a match can start (and, with a gate,
    only in those texts); None when the pattern matched the empty string (where `finditer`'s rules
    for empty matches apply). Each try ends at its text's end: the pattern cannot read past it, and
    `regex` may look ahead for a literal the pattern needs as far as the string goes."""
    text = joined.text
    lists = [found[key] if key not in plan.words else
             [at for at in found[key] if not at or text[at - 1] not in _ASCII_WORD]
             for key in plan.anchor if key in found]
    if plan.line:
        lists.append(joined.line_starts())
    elif plan.heads:
        heads = joined.line_heads(plan.lowered)
        lists.extend(heads[c] for c in plan.heads if c in heads)
    if not lists:
        return []
    offsets = lists[0] if len(lists) == 1 else sorted(chain.from_iterable(lists))
    if gate is not None and len(offsets) > 64:  # only the offsets in the gate's texts
        np = _numpy()
        allowed = np.zeros(len(joined.starts), dtype=bool)
        allowed[gate] = True
        where = np.asarray(offsets)
        offsets = where[allowed[joined.text_of(where)]].tolist()
    starts, lengths = joined.starts, joined.lengths
    firsts = starts if gate is None else [starts[i] for i in gate]
    i = start = 0
    end = -1
    match = pattern.match
    hits: list[Hit] = []
    last = previous = -1
    for at in offsets:
        if at < last or at == previous:
            continue
        previous = at
        if at > end:  # the next text (of the gate) that may hold `at`
            k = bisect_right(firsts, at) - 1
            if k < 0:
                continue
            i = k if gate is None else gate[k]
            start, end = starts[i], starts[i] + lengths[i]
        if at < start or at > end:
            continue
        m = match(text, at, end)
        if m is not None:
            if m.end() == at:
                return None
            hits.append((i, at - start, m.end() - start, m))
            last = m.end()
    return hits
