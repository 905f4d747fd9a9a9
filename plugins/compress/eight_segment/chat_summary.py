"""The people template: chats and meetings summarised by what people said, chosen by value per token.

Agent histories are compacted into the eight sections; a chat between people (or with an
assistant) and a meeting are not agent work, and those sections fill with small talk there. This
template keeps:

* who is who (each speaker, their role, how much they said, where);
* facts and preferences per person, events with their dates (a session's date travels with its
  lines, and relative dates such as "yesterday" are resolved against it), plans and commitments,
  open questions;
* the rest of the room: key points, the sentences (whole turns when turns are short) that add the
  most information per token.

Selection is one greedy pass over candidate pieces (sentences, or whole short turns, which are then
verbatim): a piece's value is the weight of the content words it adds that nothing chosen so far
covers, words said in many messages weighing more (they are the conversation's topics), scaled by
the piece's kind (a stated fact, a date, a plan), by the pipeline's scores of its message (the
analyzer chain: `score.*` steps or a third-party scorer) and by the focus; divided by its tokens.
Every line cites its message ids (`m12`), so `expand` gives the originals back.
"""

from __future__ import annotations

import datetime as dt
import heapq
import itertools
import math
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import regex

from compactor.plugins.compress.eight_segment import history as hx
from compactor.plugins.compress.eight_segment.kinds import has_time_reference, resolve_relative
from compactor.text.terms import terms
from compactor.text.tokens import TokenCounter

#: (key, English title, Chinese title) in rendering order; which appear depends on the kind.
PEOPLE_SECTIONS: tuple[tuple[str, str, str], ...] = (
    ("people", "People", "参与者"),
    ("facts", "Facts and preferences", "事实与偏好"),
    ("events", "Events and dates", "事件与日期"),
    ("plans", "Plans and commitments", "计划与承诺"),
    ("decisions", "Decisions and action items", "决定与行动项"),
    ("questions", "Open questions", "未决问题"),
    ("points", "Key points", "要点"),
)
#: How much more a piece of each kind is worth than a plain sentence with the same new words.
KIND_BONUS: Mapping[str, float] = {"facts": 1.3, "events": 1.3, "plans": 1.3, "decisions": 1.3,
                                   "questions": 1.1, "points": 1.0}
#: A word said in more than this share of the messages is filler, not a topic.
COMMON = 0.15
#: In a chat, a sentence that states no fact, date, plan or question is worth less (small talk).
CHAT_POINTS = 0.8
#: Turns at most this many tokens are candidates as a whole (kept verbatim), not sentence by sentence.
SHORT_TURN = 48
_JOIN_COST = 2  # " … " between two pieces of one message on one line

_FIRST_PERSON = regex.compile(
    r"(?i)\bI(?:'m| am)\b|\bI (?:really |also |usually |always |never |still )?(?:like|love|loved|prefer|"
    r"hate|enjoy|work|worked|live|lived|own|grew up|used to|was born|study|studied|moved|have|had|got)\b|"
    r"\bmy (?:new |old |current |own )?(?:name|job|favou?rite|wife|husband|partner|son|daughter|kids?|"
    r"children|dog|cat|mom|mother|dad|father|sister|brother|birthday|hobby|address|email|phone|home|team|company)\b|"
    r"我(?:是|叫|喜欢|爱|讨厌|不喜欢|住在|有|一直|习惯|更喜欢)")
_PLAN = regex.compile(
    r"(?i)\b(?:will|'ll|going to|gonna|plan(?:ning)? to|intend|let's|let us|we should|I should|need to|"
    r"have to|promise|deadline|due|by (?:monday|tuesday|wednesday|thursday|friday|saturday|sunday|"
    r"tomorrow|next)|next (?:week|month|time|meeting)|action item|follow up|take care of)\b|"
    r"打算|计划|准备|将会|要去|下周|明天|负责|截止|跟进|会后")
_DECISION = regex.compile(
    r"(?i)\b(?:decided|decide|agreed|agree|decision|conclusion|we(?:'ll| will) go with|settled|"
    r"approved|final(?:ly)?|consensus|resolved)\b|决定|同意|结论|通过|确定")
_QUESTION = regex.compile(r"[?？]\s*$")
_DIGIT = regex.compile(r"\d")


@dataclass(slots=True)
class Piece:
    """A candidate: a sentence (or a whole short turn) of one message, its content words and cost."""

    index: int
    order: int
    text: str
    words: frozenset[str]
    tokens: int
    kind: str
    bonus: float
    whole: bool = False
    carried: bool = False  # a line of an earlier summary, rendered as it was
    line_cost: int = 7  # what opening its message's line costs (`- m12 Ana: ` and the break)


def kind_of(text: str, meeting: bool) -> str:
    """The section a sentence belongs to."""
    if _QUESTION.search(text):
        return "questions"
    if meeting and _DECISION.search(text):
        return "decisions"
    if _PLAN.search(text):
        return "decisions" if meeting else "plans"
    if not meeting and has_time_reference(text):
        return "events"
    if not meeting and _FIRST_PERSON.search(text):
        return "facts"
    return "points"


def pieces_of(history: hx.History, visible: Sequence[int], counter: TokenCounter, meeting: bool,
              weights: Mapping[int, float], focus: frozenset[str],
              dates: Sequence[dt.date | None] = ()) -> list[Piece]:
    """Candidates from the people's messages in `visible`: whole short turns, else their sentences
    (relative dates already resolved against the message's date, line prefixes counted)."""
    out: list[Piece] = []
    short: list[tuple[int, str]] = []
    split: list[tuple[int, int, str]] = []
    for i in visible:
        if history.kinds[i] not in ("user", "assistant"):
            continue
        content = " ".join(history.messages[i].content.split())
        if not content:
            continue
        if len(content) <= SHORT_TURN * 6:  # may be short enough to keep whole: count it
            short.append((i, content))
        else:
            split.extend((i, k, s) for k, s in enumerate(hx.sentences_of(content, 60)))
    for (i, content), cost in zip(short, counter.count_many([t for _, t in short]), strict=True):
        if cost <= SHORT_TURN:
            out.append(_piece(i, 0, content, cost, meeting, weights, focus, whole=True))
        else:
            split.extend((i, k, s) for k, s in enumerate(hx.sentences_of(content, 60)))
    costs = counter.count_many([s for _, _, s in split])
    out.extend(_piece(i, k, s, cost, meeting, weights, focus)
               for (i, k, s), cost in zip(split, costs, strict=True))
    indices = sorted({p.index for p in out})
    prefixes = dict(zip(indices, counter.count_many([_prefix(history, i, dates) for i in indices]),
                        strict=True))
    dated = [p for p in out if p.index < len(dates) and dates[p.index] is not None]
    resolved = [resolve_relative(p.text, dates[p.index]) for p in dated]
    changed = [(p, text) for p, text in zip(dated, resolved, strict=True) if text != p.text]
    for (piece, text), cost in zip(changed, counter.count_many([t for _, t in changed]), strict=True):
        piece.text, piece.tokens = text, cost
    for piece in out:
        piece.line_cost = prefixes[piece.index] + 1
    return out


def _prefix(history: hx.History, index: int, dates: Sequence[dt.date | None]) -> str:
    """A line's start: `- m12, 2023-05-08 Ana: `."""
    day = dates[index] if index < len(dates) else None
    stamp = f", {day.isoformat()}" if day else ""
    return f"- m{index}{stamp} {label_of(history.speakers[index])}: "


def label_of(name: str) -> str:
    """A speaker's name on one line (a name cannot open a line or a section of the summary)."""
    return " ".join(name.split())[:64] or "?"


def _piece(i: int, order: int, text: str, cost: int, meeting: bool, weights: Mapping[int, float],
           focus: frozenset[str], whole: bool = False) -> Piece:
    words = frozenset(terms(text))
    kind = kind_of(text, meeting)
    bonus = (KIND_BONUS[kind] if meeting or kind != "points" else CHAT_POINTS) * weights.get(i, 1.0)
    if focus and words & focus:
        bonus *= 1.0 + 3.0 * len(words & focus) / len(focus)
    return Piece(i, order, text, words, max(1, cost), kind, bonus, whole)


def choose(pieces: Sequence[Piece], room: int, recent: float = 0.15) -> list[Piece]:
    """Greedy weighted coverage under `room` tokens: repeatedly take the piece whose not-yet-covered
    content words weigh most per token (lazy evaluation: a piece's gain only falls as others are
    chosen). Words said in more messages weigh more: they are what the conversation is about."""
    if room <= 0 or not pieces:
        return []
    df: Counter[str] = Counter()
    seen: dict[str, int] = {}
    last = max(p.index for p in pieces) or 1
    for piece in pieces:
        for word in piece.words:
            if seen.get(word) != piece.index:
                df[word] += 1
                seen[word] = piece.index
    cap = COMMON * len({p.index for p in pieces})
    weight = {w: (1.0 + 0.5 * math.log(c) if c <= cap else 0.5) * (3.0 if _DIGIT.search(w) else 1.0)
              for w, c in df.items()}
    covered: set[str] = set()
    lines: set[int] = set()
    heap: list[tuple[float, int]] = []
    for n, piece in enumerate(pieces):
        gain = _gain(piece, weight, covered, lines, last, recent)
        if gain > 0:
            heap.append((-gain, n))
    heapq.heapify(heap)
    chosen: list[Piece] = []
    spent = 0
    while heap:
        _negative, n = heapq.heappop(heap)
        piece = pieces[n]
        gain = _gain(piece, weight, covered, lines, last, recent)
        if gain <= 0:
            continue
        if heap and gain < -heap[0][0] - 1e-12:
            heapq.heappush(heap, (-gain, n))
            continue
        cost = _cost(piece, lines)
        if spent + cost > room:
            continue
        chosen.append(piece)
        spent += cost
        covered |= piece.words
        lines.add(piece.index)
    return chosen


def _cost(piece: Piece, lines: set[int]) -> int:
    """What adding a piece costs: its tokens, and its message's line prefix unless that line is open."""
    return piece.tokens + (_JOIN_COST if piece.index in lines else piece.line_cost)


def _gain(piece: Piece, weight: Mapping[str, float], covered: set[str], lines: set[int], last: int,
          recent: float) -> float:
    new = sum(weight[w] for w in piece.words if w not in covered)
    if new <= 0:
        return 0.0
    return new * piece.bonus * (1.0 + recent * piece.index / last) / _cost(piece, lines)


#: Sections of an earlier summary that are not carried: they are rewritten for the new history.
_NOT_CARRIED = frozenset({"People", "参与者", "Compression Metadata", "压缩元信息"})
#: Sections of the agent template (an earlier compaction of another kind) and where they go here.
_FROM_AGENT = {"Pending Tasks": "plans", "待处理任务": "plans", "Optional Next Step": "plans",
               "可选的下一步": "plans"}
_CITED_ANY = regex.compile(r"^m\d+ \(was [^)]*\) ")  # a carried line's citation: no content
_CITED = regex.compile(r"^m(\d+)(?: \(was [^)]*\))?((?:, \d{4}-\d{2}-\d{2})?) ")


def carried_pieces(history: hx.History, dropped: Sequence[int], counter: TokenCounter) -> list[Piece]:
    """The lines of earlier summaries in the dropped range (of either template), as candidates (a
    compaction of a compacted chat keeps what the first one kept). A line cites the earlier summary
    it is read from, `m3 (was m26, 2023-05-20)`: `m3` in this history holds it verbatim."""
    titles = {title: key for key, en, cn in PEOPLE_SECTIONS for title in (en, cn) if key != "people"}
    found: list[tuple[int, int, str, str]] = []
    for i in dropped:
        if history.kinds[i] != "summary":
            continue
        for title, bullets in hx.summary_sections(history.messages[i].content):
            if title in _NOT_CARRIED:
                continue
            key = titles.get(title) or _FROM_AGENT.get(title, "points")
            for order, bullet in enumerate(bullets):
                if len(bullet) < 3 or "kept verbatim" in bullet:
                    continue
                cited = _CITED.match(bullet)
                if cited:
                    was = cited.group(0).split(" (was ", 1)
                    old = was[1].rsplit(")", 1)[0] if len(was) > 1 else f"m{cited.group(1)}{cited.group(2)}"
                    bullet = f"m{i} (was {old}) " + bullet[cited.end():]
                found.append((i, order, key, bullet))
    costs = counter.count_many([text for _, _, _, text in found])
    return [Piece(i, order, text, frozenset(terms(_CITED_ANY.sub("", text))), max(1, cost), key,
                  KIND_BONUS.get(key, 1.0), carried=True)
            for (i, order, key, text), cost in zip(found, costs, strict=True)]


def people_lines(history: hx.History, head: Sequence[int], zh: bool, limit: int = 12) -> list[str]:
    """Who is who: each speaker with their role, turn count and first/last message."""
    turns: dict[str, list[int]] = defaultdict(list)
    roles: dict[str, str] = {}
    for i, kind in enumerate(history.kinds):
        if kind in ("user", "assistant"):
            name = label_of(history.speakers[i])
            turns[name].append(i)
            roles.setdefault(name, history.messages[i].role)
    ranked = sorted(turns, key=lambda name: (-len(turns[name]), turns[name][0]))
    lines = []
    for name in ranked[:limit]:
        where = turns[name]
        role = roles[name]
        label = name if role == name else f"{name} ({role})"
        if zh:
            lines.append(f"{label}：{len(where)} 条，m{where[0]}–m{where[-1]}")
        else:
            lines.append(f"{label}: {len(where)} message{'s' if len(where) != 1 else ''}, "
                         f"m{where[0]}–m{where[-1]}")
    if len(ranked) > limit:
        lines.append(f"+{len(ranked) - limit} more speakers" if not zh else f"另有 {len(ranked) - limit} 人")
    return lines


def render(history: hx.History, chosen: Sequence[Piece], people: Sequence[str], meeting: bool, zh: bool,
           dates: Sequence[dt.date | None]) -> tuple[dict[str, str], tuple[int, ...]]:
    """The sections as Markdown (lines in message order, one line per message and section, with its
    date when known) and the messages they cite."""
    by_section: dict[str, dict[int, list[Piece]]] = defaultdict(lambda: defaultdict(list))
    for piece in chosen:
        by_section[piece.kind][piece.index].append(piece)
    sections: dict[str, str] = {}
    titles = {key: (cn if zh else en) for key, en, cn in PEOPLE_SECTIONS}
    if people:
        sections["people"] = f"## {titles['people']}\n" + "\n".join(f"- {line}" for line in people)
    cited: set[int] = set()
    for key, _, _ in PEOPLE_SECTIONS:
        if key == "people" or key not in by_section:
            continue
        lines: list[str] = []
        for index in sorted(by_section[key]):
            if any(p.carried for p in by_section[key][index]):
                lines.extend(f"- {p.text}" for p in sorted(by_section[key][index], key=lambda p: p.order))
                cited.add(index)
                continue
            parts = sorted(by_section[key][index], key=lambda p: p.order)
            flat = " ".join(history.messages[index].content.split())
            text = parts[0].text
            for before, piece in itertools.pairwise(parts):  # " " only where the message says so
                adjacent = piece.order == before.order + 1 and f"{before.text} {piece.text}" in flat
                text += (" " if adjacent else " … ") + piece.text
            lines.append(_prefix(history, index, dates) + text)
            cited.add(index)
        sections[key] = f"## {titles[key]}\n" + "\n".join(lines)
    return sections, tuple(sorted(cited))


def latest_session_line(dates: Sequence[dt.date | None], tail: Sequence[int], zh: bool) -> str | None:
    """The date of the turns kept verbatim after the summary (they do not say it themselves)."""
    if not tail or not dates:
        return None
    day = dates[tail[0]] if tail[0] < len(dates) else None
    if day is None:
        return None
    if zh:
        return f"以下保留原文的 m{tail[0]} 起的消息日期：{day.isoformat()}"
    return f"The messages kept verbatim below (from m{tail[0]}) are from {day.isoformat()}."
