"""Agent teams: which speakers are agent roles, who hands work to whom, and what a role needs at a handoff.

A team of agents (a planner, a coder, a tester, a reviewer, ...) shares one history: assistant
messages with a `name`, or speakers whose names are agent roles in English or Chinese ("coder",
"QAEngineer", "规划师", "代码审查员"), handing work to each other ("@coder", "handing off to the
tester", "交给测试员"). The role lexicon and what each role needs first are data
(`plugins/data/roles.yaml`); this module reads a `History` with it:

* `role_of` maps a speaker's name to its role profile ("senior_python_coder" -> "coder");
* `read_team` gives the history's team signals (role speakers, handoffs, turns that show work), from
  which `kinds.detect_kind` tells a team of agents from a meeting of people;
* `handoff` is what the summary writer needs to write one role's handoff: the dropped messages that
  concern the role, a priority multiplier per message, the role's open tasks and its errors and fixes.

Everything here is rules over the messages, computed once per history (`History.cache`).
"""

from __future__ import annotations

import functools
import importlib.resources
import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import regex
import yaml

from compactor.errors import InputError
from compactor.plugins.compress.eight_segment import history as hx
from compactor.text.terms import terms

__all__ = ["Handoff", "Profile", "Team", "check_role", "error_threads", "handoff", "present", "profiles",
           "read_team", "role_of"]

#: Speakers that name a message's role, not a participant. ("developer" is not one of them: a message
#: with that role is a system message, never a turn, while a speaker named "developer" is a coder.)
GENERIC_SPEAKERS = frozenset({"user", "assistant", "system", "tool", "function", "human", "ai", "model",
                              "ipython"})
#: A message whose kinds of content weigh at least this much for a role concerns it even when nobody
#: addressed it (a coder needs the plan, a tester the changed files).
NEEDED = 1.5
#: A message that mentions this many of the role's own identifiers (files, functions, tickets it
#: wrote about or was asked about) concerns it.
SCOPE_HITS = 2
#: Bounds of a handoff weight (a multiplier around 1 like the pipeline's scores).
MIN_WEIGHT, MAX_WEIGHT = 0.5, 4.0
#: A fix is looked for in this many messages after an error.
FIX_WINDOW = 15
#: Characters of a message read for its signals (the head of a long tool output says enough).
READ_CHARS = 6000


# -- the lexicon -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Profile:
    """One agent role of the lexicon: its names and what it needs first at a handoff."""

    name: str
    names: frozenset[str]  # English, normalised; also matched as a name's last words
    exact: frozenset[str]  # English, normalised; matched only as the whole name
    zh: tuple[str, ...]  # Chinese, matched anywhere in a name
    needs: Mapping[str, float]  # message kind -> multiplier
    topics: regex.Pattern[str] | None  # words that make a message more relevant to the role


@dataclass(frozen=True, slots=True)
class _Lexicon:
    profiles: Mapping[str, Profile]
    decorations: frozenset[str]
    signals: Mapping[str, regex.Pattern[str]]  # on lower-cased text
    address_en: tuple[str, ...]
    address_zh: tuple[str, ...]
    english: Mapping[str, str]  # normalised English alias -> profile
    heads: tuple[tuple[str, str], ...]  # (" alias", profile) for last-words matching, longest first
    chinese: tuple[tuple[str, str], ...]  # (alias, profile), longest first


def _words_pattern(words: Iterable[str]) -> regex.Pattern[str] | None:
    ordered = sorted({w for w in words if w}, key=len, reverse=True)
    if not ordered:
        return None
    return regex.compile("|".join(rf"\b{regex.escape(w)}\b" if w.isascii() else regex.escape(w)
                                  for w in ordered), regex.IGNORECASE)


@functools.cache
def _lexicon() -> _Lexicon:
    path = importlib.resources.files("compactor.plugins") / "data" / "roles.yaml"
    text = path.read_text(encoding="utf-8")
    data: Mapping[str, Any] = yaml.safe_load(text)
    decorations = frozenset(str(d).lower() for d in data.get("decorations") or ())
    found: dict[str, Profile] = {}
    english: dict[str, str] = {}
    heads: list[tuple[str, str]] = []
    chinese: list[tuple[str, str]] = []
    for name, spec in data["roles"].items():
        names = frozenset(_normal(str(n)) for n in spec.get("names") or ())
        exact = frozenset(_normal(str(n)) for n in spec.get("exact") or ())
        zh = tuple(str(n) for n in spec.get("zh") or ())
        topics = spec.get("topics") or {}
        needs = {str(k): float(v) for k, v in (spec.get("needs") or {}).items()}
        found[name] = Profile(name, names, exact, zh, needs,
                              _words_pattern([*(topics.get("en") or ()), *(topics.get("zh") or ())]))
        english.update(dict.fromkeys(names | exact | {_normal(name)}, name))
        heads.extend((" " + n, name) for n in names)
        chinese.extend((n, name) for n in zh)
    # matched on lower-cased text (faster than a case-insensitive pattern)
    signals = {key: regex.compile("|".join(p for p in (spec.get("en"), spec.get("zh")) if p), regex.MULTILINE)
               for key, spec in data["signals"].items()}
    return _Lexicon(found, decorations, signals, tuple(data["address"]["en"]), tuple(data["address"]["zh"]),
                    english, tuple(sorted(heads, key=lambda h: -len(h[0]))),
                    tuple(sorted(chinese, key=lambda c: -len(c[0]))))


def profiles() -> Mapping[str, Profile]:
    """The role profiles of the lexicon, by name (planner, coder, tester, reviewer)."""
    return _lexicon().profiles


_CAMEL = regex.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_NAME_TOKEN = regex.compile(r"\p{Han}+|[A-Za-z]+|\d+")


def _tokens(name: str) -> list[str]:
    return [t.lower() for t in _NAME_TOKEN.findall(_CAMEL.sub(" ", name))]


def _normal(name: str) -> str:
    """A name as lower-case words: `QAEngineer`, `qa_engineer` and `QA engineer` are `qa engineer`."""
    return " ".join(t for t in _tokens(name) if not regex.match(r"\p{Han}", t))


@functools.lru_cache(maxsize=4096)
def role_of(name: str | None) -> str | None:
    """The role profile a speaker's name (or a role name someone asks for) stands for, or None:
    `coder`, `senior_python_coder`, `DevAgent` and `编码员` are "coder"; `Alice` and `user` are None."""
    if not name or name.lower() in GENERIC_SPEAKERS:
        return None
    lexicon = _lexicon()
    tokens = _tokens(name)
    latin = [t for t in tokens if not regex.match(r"\p{Han}", t)]
    raw = " ".join(latin)
    stripped = " ".join(t for t in latin if t not in lexicon.decorations and not t.isdigit())
    for form in (raw, stripped):
        if form and form in lexicon.english:
            return lexicon.english[form]
    for form in (raw, stripped):
        for head, role in lexicon.heads:  # "python coder", "code reviewer": the last words name the role
            if form.endswith(head):
                return role
    han = "".join(t for t in tokens if regex.match(r"\p{Han}", t))
    for alias, role in lexicon.chinese:
        if alias in han:
            return role
    return None


# -- who addresses whom ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Address:
    patterns: tuple[tuple[regex.Pattern[str], bool], ...]  # (pattern, whether it hands work over)
    heads: frozenset[str]  # the last word of each English alias: the patterns run only on texts that
    chinese: tuple[str, ...]  # hold one of these words or one of the Chinese aliases
    party: Mapping[str, str]  # alias (lower case, words split by spaces) -> party
    longer: Mapping[str, tuple[str, ...]]  # alias -> the longer names that contain it


def _alias_pattern(aliases: Iterable[str]) -> tuple[str, str]:
    """(English, Chinese) alternations of the aliases, longest first; English words may be joined by
    spaces, underscores or hyphens ("code reviewer", "code_reviewer")."""
    ordered = sorted(set(aliases), key=len, reverse=True)
    english = "|".join(r"[\s_-]+".join(regex.escape(w) for w in a.split()) for a in ordered if a.isascii())
    chinese = "|".join(regex.escape(a) for a in ordered if not a.isascii())
    return english, chinese


@functools.lru_cache(maxsize=256)
def _address(aliases: tuple[tuple[str, str], ...], names: tuple[str, ...] = ()) -> _Address:
    """Address patterns for these (alias, party) pairs: the lexicon's patterns with the alternation of
    the aliases where they say ROLE. `names`: every other name (of the lexicon and the speakers), so
    that an alias inside a longer name is not taken for it ("工程师" in "测试工程师")."""
    lexicon = _lexicon()
    party = {" ".join(alias.lower().split()): who for alias, who in aliases}
    english, chinese = _alias_pattern(party)
    patterns = []
    for group, templates in ((english, lexicon.address_en), (chinese, lexicon.address_zh)):
        if not group:
            continue
        for n, template in enumerate(templates):
            pattern = template.replace("ROLE", f"(?P<role>{group})")
            # the first two of each language hand work over (@role, "hand it to the role", "交给")
            patterns.append((regex.compile(pattern, regex.IGNORECASE | regex.MULTILINE), n < 2))
    heads = frozenset(_WORD.findall(a)[-1] for a in party if a.isascii() and _WORD.search(a))
    chinese_names = tuple(a for a in party if not a.isascii())
    every = {" ".join(n.lower().replace("_", " ").replace("-", " ").split()) for n in (*names, *party)}
    longer = {a: tuple(b for b in every if a != b and a in b) for a in party}
    return _Address(tuple(patterns), heads, chinese_names, party, {a: b for a, b in longer.items() if b})


@functools.cache
def _lexicon_address() -> _Address:
    """Address patterns for every role of the lexicon (for telling a team apart)."""
    return _address(_lexicon_aliases())


@functools.cache
def _lexicon_aliases() -> tuple[tuple[str, str], ...]:
    pairs: dict[str, str] = {}
    for profile in profiles().values():
        for alias in (*profile.names, *profile.exact, *profile.zh, profile.name):
            pairs.setdefault(alias.lower(), profile.name)
    return tuple(sorted(pairs.items()))


def _covered(lowered: str, start: int, alias: str, longer: Sequence[str]) -> bool:
    """Whether the alias found at `start` of the lower-cased text is part of a longer name there."""
    for other in longer:
        offset = other.find(alias)
        begin = start - offset
        if begin >= 0 and lowered[begin:begin + len(other)].replace("_", " ").replace("-", " ") == other:
            return True
    return False


@dataclass(frozen=True, slots=True)
class _Mention:
    party: str
    handing: bool  # a handoff form (@role, "hand it to", "交给"), not only a vocative or a mention
    line: str  # the line (or sentence) that addresses the party


def _addressed(text: str, address: _Address) -> list[_Mention]:
    """Who the text addresses, by the address patterns (only when it names one of the aliases)."""
    lowered = text.lower()
    chinese = not text.isascii() and any(a in text for a in address.chinese)
    if not (chinese or address.heads.intersection(_WORD.findall(lowered))):
        return []
    found: list[_Mention] = []
    for pattern, handing in address.patterns:
        for match in pattern.finditer(text):
            alias = " ".join(match.group("role").lower().replace("_", " ").replace("-", " ").split())
            who = address.party.get(alias)
            if who is None or _covered(lowered, match.start("role"), alias, address.longer.get(alias, ())):
                continue
            found.append(_Mention(who, handing, _line_at(text, match.start("role"))))
    return found


def _line_at(text: str, at: int) -> str:
    """The line around a position, or its sentence when the line is a long paragraph."""
    start = text.rfind("\n", 0, at) + 1
    end = text.find("\n", at)
    line = text[start:end if end >= 0 else len(text)]
    if len(line.strip()) <= 300:
        return line.strip()
    offset = at - start
    cuts = [0, *(m.end() for m in _SENTENCE_END.finditer(line)), len(line)]
    for begin, finish in itertools.pairwise(cuts):
        if begin <= offset < finish:
            return line[begin:finish].strip()[:300]
    return line.strip()[:300]


_WORD = regex.compile(r"[a-z0-9]+")
_AT = regex.compile(r"(?<![\w.])@([\w\p{Han}.-]*[\w\p{Han}])")
#: Where a sentence ends: English punctuation before a space, Chinese punctuation anywhere.
_SENTENCE_END = regex.compile(r"(?<=[.!?;])\s+|(?<=[。！？；])\s*")


# -- reading a history once ------------------------------------------------------------------------

_TICKET = regex.compile(r"\b[A-Z][A-Z0-9]{1,9}-\d+\b|(?<![\w&])#\d{2,6}\b|\bPR ?#?\d+\b")
_BACKTICK = regex.compile(r"`([^`\n]{2,60})`")
_CODE = regex.compile(r"```|^(?:\+\+\+|---) [ab]/|^@@ |<<<<<<< SEARCH|"
                      r"^\s*(?:def|class|function|func|fn)\s+\w+\s*\(", regex.MULTILINE)
_CODE_HINTS = ("```", "+++ ", "@@ ", "<<<<<<<", "def ", "class ", "function ", "func ", "fn ")
#: Code written or changed: a diff, a SEARCH/REPLACE block, a definition, or a code block in a
#: programming language (a block of shell commands, output or plain text changes nothing).
_WRITTEN = regex.compile(r"^(?:\+\+\+|---) [ab]/|^@@ |<<<<<<< SEARCH|"
                         r"^\s*(?:def|class|function|func|fn|struct|impl|interface)\s+\w+|"
                         r"```(?!(?:bash|sh|shell|console|zsh|text|txt|output|log|plain|none)?\s*\n)[\w+#.-]+\s*\n",
                         regex.MULTILINE | regex.IGNORECASE)
_TEST_RESULT = regex.compile(
    r"\b\d+ (?:passed|failed)\b|\btests? (?:pass|fail)(?:ed|es|ing|s)?\b|\b(?:pytest|unittest|jest|npm test|"
    r"go test|cargo test|mvn test)\b|\b[A-Z]\w*(?:Error|Exception)\b|Traceback|测试(?:通过|失败)|用例",
    regex.IGNORECASE)
_TEST_HINTS = ("pass", "fail", "test", "Test", "Error", "Exception", "Traceback", "测试", "用例")
_FAILURE = regex.compile(
    r"\bFAILED\b|\b\d+ failed\b|\bfail(?:s|ed|ing|ure)\b|\bbroken\b|\bcrash(?:es|ed)?\b|"
    r"Traceback|\bbugs?\b|\b(?:is|are|was|in the) wrong\b|"
    r"\b(?:does not|doesn't|did not|didn't) work\b|报错|失败|异常|错误|崩溃|有问题|不对|不正确")
_ERROR_NAME = regex.compile(r"\b[A-Z]\w*(?:Error|Exception)\b")
#: A failed run pasted in a code block (code that merely names an exception is no failure).
_RUN_FAILURE = regex.compile(r"\bFAILED\b|\b\d+ failed\b|Traceback \(most recent call last\)|"
                             r"^(?:E\s+)?[A-Z]\w*(?:Error|Exception): ", regex.MULTILINE)
_FENCED = regex.compile(r"```[^\n]*\n.*?(?:```|\Z)", regex.DOTALL)
_CHANGE = regex.compile(
    r"\b(?:implemented|changed|modified|added|updated|refactored|edited|wrote|created|rewrote|renamed|"
    r"removed|patched|committed|pushed)\b|实现了|修改了|新增|更新了|重构|编写了|提交了|改动",
    regex.IGNORECASE)
_URL_BEFORE = regex.compile(r"://\S*$")
#: Code symbols in prose: snake_case names and calls (CamelCase is as often a product or a person).
_SYMBOL = regex.compile(r"\b[a-z][a-z0-9]*(?:_[a-z0-9]+)+\b|\b[A-Za-z_]\w*\(\)|"
                        r"\b[A-Za-z_]\w*\.[A-Za-z_]\w*\(")
_CAMEL_CASE = regex.compile(r"\b[A-Z][a-z0-9]+[A-Z][A-Za-z0-9]*\b|\b[a-z]+[A-Z][A-Za-z0-9]*\b")


def _has(pattern: regex.Pattern[str], text: str, hints: Iterable[str]) -> bool:
    """`pattern.search(text)`, run only when the text holds one of the literals every match holds."""
    return any(h in text for h in hints) and pattern.search(text) is not None


def _shows_work(text: str, acts: Sequence[hx.Action]) -> tuple[bool, bool, bool]:
    """(work, code, edits) of a turn: whether it shows agent work (code, files, tests, tickets,
    symbols, tool use), code or files, and code or diffs of its own (or file writes)."""
    edits = any(a.writes for a in acts) or _has(_WRITTEN, text, _CODE_HINTS)
    code = edits or any(a.reads for a in acts) or _has(_CODE, text, _CODE_HINTS) or any(
        not _URL_BEFORE.search(text[max(0, at - 12):at]) for at, _ in hx.find_paths(text))
    work = code or bool(acts) or "`" in text or _has(_TEST_RESULT, text, _TEST_HINTS) or _has(
        _TICKET, text, ("-", "#", "PR")) or _has(_SYMBOL, text, ("_", "("))
    return work, code, edits


@dataclass(slots=True)
class _Facts:
    """What one message shows, for every role alike."""

    #: spec, decision, review, test, status, blocker, change, failure
    kinds: set[str] = field(default_factory=set)
    idents: frozenset[str] = frozenset()  # its files, symbols, tickets and `quoted` names
    files: frozenset[str] = frozenset()
    done: bool = False  # it reports something done
    fix: bool = False  # it diagnoses or fixes something
    request: bool = False  # it asks for something
    edits: bool = False  # code or a diff written, or files: the message's identifiers are its author's


@dataclass(frozen=True, slots=True)
class Team:
    """The team signals of a history (`read_team`)."""

    parties: Mapping[str, str]  # speaker -> party: its role profile, else its own name
    roles: Mapping[str, str]  # speaker -> role profile, for the speakers that are agent roles
    agents: frozenset[str]  # named assistant speakers (not the generic "assistant")
    handoffs: int  # turns that hand work to another role or @-mention another participant
    work: int  # people's and agents' turns that show work (code, files, tests, tickets, tool use)
    code: int  # of those, turns with code, diffs, file paths or file actions
    turns: int  # people's and agents' turns


def _speakers(history: hx.History) -> list[str]:
    return sorted({history.speakers[i] for i, k in enumerate(history.kinds) if k in ("user", "assistant")})


def _parties(history: hx.History) -> dict[str, str]:
    """Each named speaker's party: its role profile, else its own name."""
    key = ("roles.parties",)
    if key not in history.cache:
        history.cache[key] = {s: role_of(s) or s for s in _speakers(history)
                              if s.lower() not in GENERIC_SPEAKERS}
    return cast("dict[str, str]", history.cache[key])


def _idents(text: str) -> tuple[frozenset[str], frozenset[str]]:
    """(identifiers, file paths) of a text: files, symbols, tickets and `quoted` names."""
    files = {p for at, p in hx.find_paths(text) if not _URL_BEFORE.search(text[max(0, at - 12):at])}
    found = set(files)
    if any(h in text for h in ("_", "(")):
        found.update(m.group(0).rstrip("(") for m in _SYMBOL.finditer(text))
    found.update(m.group(0) for m in _CAMEL_CASE.finditer(text))
    if any(h in text for h in ("-", "#", "PR")):
        found.update(m.group(0) for m in _TICKET.finditer(text))
    if "`" in text:
        found.update(m.group(1) for m in _BACKTICK.finditer(text) if len(m.group(1).split()) <= 3)
    return frozenset(f.rstrip("()") for f in found if len(f) >= 3), frozenset(files)


def _facts(history: hx.History, i: int) -> _Facts:
    """What message `i` shows (read once per history)."""
    key = ("roles.facts", i)
    if key in history.cache:
        return cast("_Facts", history.cache[key])
    facts = _Facts()
    history.cache[key] = facts
    kind = history.kinds[i]
    if kind in ("system", "summary"):
        return facts
    signals = _lexicon().signals
    text = history.messages[i].content[:READ_CHARS]
    acts = history.by_message.get(i, [])
    arguments = " ".join(a.text for a in acts)
    facts.idents, facts.files = _idents(f"{text}\n{arguments}" if arguments else text)
    writes = [p for a in acts for p in a.writes]
    if writes:
        facts.files = facts.files | frozenset(writes)
        facts.idents = facts.idents | frozenset(writes)
    if kind == "output":
        answered = _answered(history).get(i)
        if (answered is not None and answered.failed) or hx.error_summary(text):
            facts.kinds.add("failure")
        if _has(_TEST_RESULT, text, _TEST_HINTS):
            facts.kinds.add("test")
        return facts
    lowered = text.lower()
    for name in ("spec", "decision", "review", "test", "status", "blocker"):
        if signals[name].search(lowered):
            facts.kinds.add(name)
    _, _, facts.edits = _shows_work(text, acts)
    if facts.edits or (facts.files and _CHANGE.search(text)):
        facts.kinds.add("change")
    prose = _FENCED.sub(" ", text) if "```" in text else text
    if (_FAILURE.search(prose) or _has(_ERROR_NAME, prose, ("Error", "Exception"))
            or _has(_RUN_FAILURE, text, ("FAILED", "failed", "Traceback", "Error", "Exception"))
            or any(a.failed for a in acts)):
        facts.kinds.add("failure")
    prose = prose.lower()
    if signals["done"].search(prose):  # a sentence that says done and not "not done"
        sentences = [s for s in _SENTENCE_END.split(prose) if s.strip()]
        facts.done = any(signals["done"].search(s) and not signals["not_done"].search(s) for s in sentences)
    facts.fix = bool(writes) or bool(signals["fix"].search(lowered))
    facts.request = bool(signals["request"].search(lowered))
    return facts


def _answered(history: hx.History) -> dict[int, hx.Action]:
    """Tool result message -> the action it answers."""
    key = ("roles.answered",)
    if key not in history.cache:
        history.cache[key] = {a.result: a for a in history.actions if a.result is not None}
    return cast("dict[int, hx.Action]", history.cache[key])


def read_team(history: hx.History, min_work: float = 0.0) -> Team:
    """The team signals of a history: its role speakers, named agents, handoffs and work turns.

    Cheap when there is no team: the turns are read only when two speakers are agent roles or two
    named assistants speak; handoffs are counted when two speakers are agent roles, or else when at
    least `min_work` of the turns show work (otherwise `handoffs` is 0), and the address patterns run
    only on turns that name a role."""
    key = ("roles.team", min_work)
    if key in history.cache:
        return cast("Team", history.cache[key])
    parties = _parties(history)
    roles = {s: p for s, p in parties.items() if p in profiles()}
    agents = frozenset(history.speakers[i] for i, k in enumerate(history.kinds)
                       if k == "assistant" and history.messages[i].name
                       and history.speakers[i].lower() not in GENERIC_SPEAKERS)
    turns = [i for i, k in enumerate(history.kinds) if k in ("user", "assistant")]
    handoffs = work = code = 0
    if len(roles) >= 2 or len(agents) >= 2:
        for i in turns:
            shows, has_code, _ = _shows_work(history.messages[i].content[:READ_CHARS],
                                             history.by_message.get(i, ()))
            work += shows
            code += has_code
    if len(roles) >= 2 or (len(agents) >= 2 and work and work >= min_work * len(turns)):
        address = _lexicon_address()
        named = {" ".join(_tokens(s)) for s in parties} | {s.lower() for s in parties}
        for i in turns:
            text = history.messages[i].content[:READ_CHARS]
            own = parties.get(history.speakers[i])
            at = "@" in text and any(
                m.group(1).lower() in named or " ".join(_tokens(m.group(1))) in named or role_of(m.group(1))
                for m in _AT.finditer(text) if parties.get(m.group(1)) != own and m.group(1) != own)
            if at or any(m.party != own for m in _addressed(text, address)):
                handoffs += 1
    team = Team(parties, roles, agents, handoffs, work, code, len(turns))
    history.cache[key] = team
    return team


# -- one role's handoff ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Handoff:
    """What one role needs from the dropped part of a history (`handoff`).

    Every list holds message indices of `dropped`, ascending; `weights` has one entry per visible
    message."""

    role: str  # the role as asked
    profile: str | None  # its profile in the lexicon ("coder"), None for a role the lexicon lacks
    speakers: frozenset[str]  # the history's speakers that are this role (may be empty: not spoken yet)
    visible: list[int]  # the dropped messages that concern the role
    weights: dict[int, float]  # priority multiplier per visible message (1 is neutral, 0.5 to 4)
    pending: list[int]  # messages that hand the role a task no later message reports done
    errors: list[int]  # errors and failures that concern the role, and the messages that fixed them
    tasks: dict[int, str] = field(default_factory=dict)  # pending message -> the line that hands the task
    reasons: dict[int, tuple[str, ...]] = field(default_factory=dict)  # visible message -> why it concerns it


def handoff(history: hx.History, dropped: Sequence[int], role: str) -> Handoff:
    """The handoff of the dropped messages to `role`, by rules.

    The role is matched to a profile of the role lexicon (`plugins/data/roles.yaml`: English and
    Chinese names and synonyms, "coder" = "developer" = "编码员") and to the history's speakers of
    that profile; a role the lexicon lacks ("translator", "Alice") is matched as a speaker name, its
    own messages and the messages that address it.

    `visible`: the dropped messages that concern the role: its own messages and their tool results,
    messages that address it or hand it a task ("@coder", "over to the tester", "交给测试员", a plan
    line "2. coder: ..."), errors and failures in what it owns and their fixes, the people's messages
    (speakers that are not agents), system messages and earlier summaries, messages whose kind of
    content the role needs first (the profile's `needs` of at least `NEEDED`: the plan for a coder,
    the changes for a tester, the diffs and decisions for a reviewer, the status and blockers for a
    planner), and messages about the files, functions and tickets the role itself works on.

    `weights`: a multiplier per visible message: the best of the profile's `needs` over the
    message's kinds of content (spec, change, failure, test, decision, review, status, blocker), times
    a bonus for its own messages, for messages addressed to it, for its open tasks and its errors, for
    the profile's topic words and for the role's own identifiers (its files, functions, tickets).

    `pending`: messages that hand the role a task that no later message of the role (anywhere in the
    history, the kept turns too) reports done. The role's done reports ("fixed", "12 passed",
    "approved", "已完成") close the open tasks they name (files, functions, tickets, or most of the
    task's words), else the latest open task before them. `tasks` gives each pending task's line.

    `errors`: failures that concern the role (its own runs and their results, failures reported to
    it, failures that name the files or functions it wrote), earlier reports of the same failure, and
    the later messages that diagnosed and fixed each.

    `reasons` says why each visible message is there: "own", "result", "addressed", "task",
    "error", "fix", "people", "context", "needs:<kind>", "scope".

    How a summary writer uses it: the section extractors read only `visible`; every candidate line's
    priority is multiplied by the best `weights` of the messages it cites (on top of the pipeline's
    own message weights); Pending Tasks leads with `pending` (`tasks[i]` is each one's text) and
    Errors and fixes with the lines that cite `errors`; the metadata names `role`. Every index is a
    message of `history` in `dropped`, so it can be cited as `m{i}`. The function changes nothing
    but `history.cache`, where it keeps what it read of each message for the next call.
    """
    dropped = sorted(set(dropped))
    dropped_set = set(dropped)
    parties = _parties(history)
    profile, speakers, own, addressed = _matched(history, role)
    results = {a.result for a in history.actions if a.index in own and a.result is not None}
    tasks = {i: found for i, found in addressed.items()
             if _facts(history, i).request or any(m.handing for m in found)}
    scope = frozenset(x for i in own | set(addressed) for x in _facts(history, i).idents)
    owned = frozenset(x for i in own if _facts(history, i).edits for x in _facts(history, i).idents)
    pending, task_lines = _pending(history, dropped, tasks, own)
    errors = _errors(history, dropped, own | results, set(addressed), owned)
    needs = profiles()[profile].needs if profile else {}
    topics = profiles()[profile].topics if profile else None
    reasons: dict[int, list[str]] = {}

    def because(i: int, why: str) -> None:
        if i in dropped_set:
            reasons.setdefault(i, []).append(why)

    for i in dropped:
        kind = history.kinds[i]
        if kind in ("system", "summary"):
            because(i, "context")
        elif kind == "user" and parties.get(history.speakers[i]) not in profiles() and i not in own:
            because(i, "people")
    for i in sorted(own):
        because(i, "own")
    for i in sorted(results):
        because(i, "result")
    for i in addressed:
        because(i, "task" if i in tasks else "addressed")
    for i in errors:
        because(i, "error" if "failure" in _facts(history, i).kinds else "fix")
    for i in dropped:
        if history.kinds[i] not in ("user", "assistant"):
            continue
        facts = _facts(history, i)
        needed = sorted((k for k in facts.kinds if needs.get(k, 1.0) >= NEEDED), key=lambda k: (-needs[k], k))
        if needed:
            because(i, "needs:" + needed[0])
        if len(facts.idents & scope) >= SCOPE_HITS:
            because(i, "scope")
    for i in list(reasons):  # the tool results of a visible message's calls go with it
        for action in history.by_message.get(i, ()):
            if action.result is not None and action.result not in reasons:
                because(action.result, "result")
    visible = sorted(reasons)
    pending_set, error_set = set(pending), set(errors)
    weights: dict[int, float] = {}
    for i in visible:
        facts = _facts(history, i)
        kinds = facts.kinds | ({"task"} if i in tasks else set())
        weight = max((needs.get(k, 1.0) for k in kinds), default=0.9)
        if i in own:
            weight *= 1.25
        elif "people" in reasons[i]:  # what the people asked for
            weight *= 1.2
        if i in addressed:
            weight *= 1.5
        if i in pending_set:
            weight *= 1.3
        if i in error_set:
            weight *= 1.3
        if topics is not None and history.kinds[i] != "output":
            said = history.messages[i].content[:READ_CHARS]
            weight *= 1.0 + 0.08 * min(len({m.group(0).lower() for m in topics.finditer(said)}), 3)
        weight *= 1.0 + 0.1 * min(len(facts.idents & scope), 3)
        weights[i] = round(min(MAX_WEIGHT, max(MIN_WEIGHT, weight)), 3)
    return Handoff(role=role, profile=profile, speakers=speakers, visible=visible, weights=weights,
                   pending=pending, errors=errors, tasks=task_lines,
                   reasons={i: tuple(dict.fromkeys(reasons[i])) for i in visible})


def _matched(history: hx.History, role: str) -> tuple[str | None, frozenset[str], set[int],
                                                     dict[int, list[_Mention]]]:
    """How `role` is found in a history: (its lexicon profile, its speakers, their turns, the other
    turns that address it and how)."""
    parties = _parties(history)
    profile = role_of(role)
    target = profile or _speaker_party(parties, role) or role
    speakers = frozenset(s for s, p in parties.items() if p == target)
    address = _address(_target_aliases(target, profile, speakers, role),
                       tuple(sorted({*(a for a, _ in _lexicon_aliases()), *parties})))
    own = {i for i in range(len(history.messages))
           if history.speakers[i] in speakers and history.kinds[i] in ("user", "assistant")}
    addressed: dict[int, list[_Mention]] = {}
    for i in range(len(history.messages)):
        if history.kinds[i] in ("user", "assistant") and i not in own:
            found = _addressed(history.messages[i].content[:READ_CHARS], address)
            if found:
                addressed[i] = found
    return profile, speakers, own, addressed


def present(history: hx.History) -> list[str]:
    """The speakers of a history's turns, as `role=` finds them ("assistant" too), each with its role
    profile when the name is not the profile itself ("senior_python_coder (coder)")."""
    parties = _parties(history)
    return [speaker if parties.get(speaker, speaker) == speaker else f"{speaker} ({parties[speaker]})"
            for speaker in _speakers(history)]


def check_role(history: hx.History, role: object) -> None:
    """Refuse a handoff to a role the history does not know: nobody speaks as it and no turn
    addresses it, so its summary would hold the metadata and little else. A role addressed before
    it first speaks ("@tester, over to you") is known."""
    if not isinstance(role, str) or not role.strip():
        raise InputError(f"role must be a speaker's name or role, not {role!r}")
    if role in _speakers(history):  # a speaker's own name, "assistant" as well
        return
    _, speakers, _, addressed = _matched(history, role)
    if speakers or addressed:
        return
    names = present(history)
    found = f"the roles present: {', '.join(names)}" if names else "the history has no turns of anybody"
    raise InputError(f"role {role!r} matches nobody in the history (no turn of it, none addressed to it); "
                     f"{found}")


def error_threads(history: hx.History, given: Handoff) -> list[tuple[int, list[int], str, list[str]]]:
    """The handoff's errors as threads, for the summary's Errors and fixes: (the failure's message,
    the messages that diagnosed or fixed it, the failure's key sentence, each fix's key sentence).
    An earlier report of the same failure (the run before the report) joins the next thread."""
    threads: list[tuple[int, list[int], str, list[str]]] = []
    for i in given.errors:
        facts = _facts(history, i)
        failure = "failure" in facts.kinds and not (facts.fix and "change" in facts.kinds)
        if failure and threads and not threads[-1][1] and i - threads[-1][0] <= 2:
            first, _, said, _ = threads[-1]  # a run and its report: one failure, both sentences
            more = _key_sentence(history, i, _FAILED_TEST, _FAILURE, _RUN_FAILURE)
            threads[-1] = (first, [], f"{said}; {more}" if more not in said else said, [])
        elif failure:
            threads.append((i, [], _key_sentence(history, i, _FAILED_TEST, _RUN_FAILURE, _FAILURE), []))
        elif threads:
            threads[-1][1].append(i)
            threads[-1][3].append(_key_sentence(history, i, _FIX_WORDS))
    return threads


#: What a message that fixes something says about it.
_FIX_WORDS = regex.compile(r"(?:fix(?:ed|es)?|root cause|the cause|resolved|normali[sz]ed|changed|added)|"
                           r"修复|根因|原因|改为|改成", regex.IGNORECASE)


def _key_sentence(history: hx.History, i: int, *patterns: regex.Pattern[str]) -> str:
    """The first sentence or line of message `i` (code included) that the first pattern finds (then
    the next pattern), else the message's lead."""
    text = history.messages[i].content[:READ_CHARS]
    pieces = [p.strip() for line in text.splitlines() for p in _SENTENCE_END.split(line) if p.strip()]
    for pattern in patterns:
        for piece in pieces:
            if not piece.startswith("```") and pattern.search(piece):
                return hx.lead(" ".join(piece.split()), 220)
    return hx.lead(" ".join(text.split()), 160)


#: A failing test or an exception named in a run's output: what identifies the failure best.
_FAILED_TEST = regex.compile(r"\bFAILED\s+\S+|^(?:E\s+)?[A-Z]\w*(?:Error|Exception): ", regex.MULTILINE)


def _target_aliases(target: str, profile: str | None, speakers: Iterable[str],
                    role: str) -> tuple[tuple[str, str], ...]:
    """The names the role is addressed by: its profile's names, its speakers' names, the name asked."""
    names: set[str] = {role, _normal(role), *speakers, *(_normal(s) for s in speakers)}
    if profile is not None:
        found = profiles()[profile]
        names |= {*found.names, *found.exact, *found.zh, profile}
    return tuple(sorted((name.lower(), target) for name in names if len(name.strip()) >= 2))


def _speaker_party(parties: Mapping[str, str], role: str) -> str | None:
    """The party of the speaker named `role` (case, spaces and underscores aside)."""
    wanted = _normal(role) or role.strip().lower()
    for speaker, party in parties.items():
        if speaker.lower() == role.strip().lower() or (_normal(speaker) or speaker.lower()) == wanted:
            return party
    return None


def _pending(history: hx.History, dropped: Sequence[int], tasks: Mapping[int, list[_Mention]],
             own: set[int]) -> tuple[list[int], dict[int, str]]:
    """The dropped messages whose task for the role no later message of the role reports done.

    The role's done reports ("fixed", "12 passed", "approved", "已完成") are read in order: one closes
    the open tasks it names (their files, functions or tickets, or most of their words), else the
    latest open task before it (the task it answers)."""
    lines = {i: "\n".join(dict.fromkeys(m.line for m in tasks[i])) for i in tasks}
    words = {i: _words(text) for i, text in lines.items()}
    idents = {i: _idents(text)[0] for i, text in lines.items()}
    reports = {j for j in own if _facts(history, j).done}
    open_tasks: list[int] = []
    for k in sorted(set(tasks) | reports):
        if k in tasks:
            open_tasks.append(k)
            continue
        said = _words(history.messages[k].content[:READ_CHARS])
        shown = _facts(history, k).idents
        named = [i for i in open_tasks
                 if idents[i] & shown or len(words[i] & said) >= max(2, 0.4 * len(words[i]))]
        for i in named or open_tasks[-1:]:
            open_tasks.remove(i)
    dropped_set = set(dropped)
    pending = [i for i in open_tasks if i in dropped_set]
    return pending, {i: hx.lead(lines[i], 300) for i in pending}


def _words(text: str) -> frozenset[str]:
    """Content terms, snake_case names split into their words ("test_header_order": test, header, order)."""
    return frozenset(terms(text.replace("_", " ")))


def _errors(history: hx.History, dropped: Sequence[int], own: set[int], addressed: set[int],
            owned: frozenset[str]) -> list[int]:
    """Failures that concern the role (its own runs and reports, failures reported to it, failures
    that name what it wrote: `owned`), the earlier reports of the same failure, and the messages that
    diagnosed and fixed each."""
    found: set[int] = set()
    n = len(history.messages)
    answered = _answered(history)
    for e in dropped:
        facts = _facts(history, e)
        if "failure" not in facts.kinds:
            continue
        context = set(facts.idents)
        action = answered.get(e)  # a tool result: the call it answers is part of the error
        if action is not None:
            context |= {*action.writes, *action.reads, *_facts(history, action.index).idents}
        run_by_role = action is not None and action.index in own
        if not (e in own or e in addressed or run_by_role or context & owned):
            continue
        found.add(e)
        for d in range(max(0, e - FIX_WINDOW), e):  # the same failure reported before (the test run)
            if "failure" in _facts(history, d).kinds and _facts(history, d).idents & facts.idents:
                found.add(d)
        words = _words(history.messages[e].content[:2000])
        for j in range(e + 1, min(n, e + 1 + FIX_WINDOW)):
            later = _facts(history, j)
            if history.kinds[j] not in ("user", "assistant") or not later.fix:
                continue
            related = bool(later.idents & context) or j in own or len(
                words & _words(history.messages[j].content[:2000])) >= 3
            if not related or ("failure" in later.kinds and not later.done):
                continue
            found.add(j)  # a diagnosis ("the root cause: ...") is kept, and the search goes on to the fix
            if later.done or "change" in later.kinds:
                break
    dropped_set = set(dropped)
    return sorted(i for i in found if i in dropped_set)
