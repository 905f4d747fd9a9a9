"""What kind of history this is, and when each message was said.

`detect_kind` tells apart the four histories compactor compacts differently: a coding agent (it reads
and edits files through tools or shell commands), a tool-using agent (structured calls, no files), a
chat (a person with an assistant or with one other person) and a meeting (three or more people
talking). The signals are the ones `History` already read (actions, their files, tool outputs,
speakers), so detection costs nothing extra. A team of agents (a planner, a coder, a tester, a
reviewer handing work to each other) is agent work even when its turns carry no tool output: its
speakers are agent roles (`roles.role_of`) or named agents handing work over, and its turns show
work (code, files, tests, tickets); it is "coding" when they show code or files, else "tool".

`session_dates` gives each message its date: a date field on the message (`date`, `timestamp`,
`created_at`, `session_date`, ...; ISO text, epoch seconds or text such as "1:56 pm on 8 May, 2023"),
or a short marker message ("Session 3 - 8 May 2023"), carried forward to the messages that follow.
`resolve_relative` turns "yesterday", "last week", "3 days ago", "上周" into absolute dates from it.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Literal

import regex

from compactor.formats.compaction import KINDS, SUMMARY_MARK
from compactor.plugins.compress.eight_segment import history as hx
from compactor.plugins.compress.eight_segment import roles
from compactor.text.numbers import DATE, YEAR, date_key

Kind = Literal["coding", "tool", "chat", "meeting"]
__all__ = ["AGENT_KINDS", "KINDS", "detect_kind", "has_time_reference", "parse_date", "resolve_relative",
           "session_dates"]
#: Kinds summarised with the eight sections (agent work); the others use the people template.
AGENT_KINDS = frozenset({"coding", "tool"})
#: A team of agents: the share of its turns that show work (code, files, tests, tickets, code symbols,
#: tool use), with agent-role speakers; less suffices when they also hand work to each other. Meetings
#: and podcasts, even about software, show at most 0.12 (the QMSum, VCSum and Changelog transcripts).
TEAM_WORK = 0.3
TEAM_WORK_HANDED = 0.15
#: Messages that hand work to another role (or @-mention another participant) a team shows at least.
TEAM_HANDOFFS = 2
#: Agent roles that keep handing work to each other are a team even when their turns show no code,
#: files or tests (a planner, a writer and a critic): at least this many handoffs and this share of
#: the turns.
TEAM_ONLY_HANDOFFS = 3
TEAM_HANDOFF_SHARE = 0.15
_DATE_KEYS = ("date", "session_date", "date_time", "datetime", "timestamp", "created_at", "created", "time",
              "sent_at")


def detect_kind(history: hx.History) -> Kind:
    """coding, tool, chat or meeting, from what the messages do and who speaks."""
    actions = history.actions
    files = sum(1 for a in actions if a.writes or a.reads)
    textual = sum(1 for a in actions if a.call is None)
    structured = sum(1 for a in actions if a.call is not None)
    outputs = sum(1 for k in history.kinds if k == "output")
    edits = sum(1 for a in actions if a.call is None and a.name == "edit")  # SEARCH/REPLACE blocks
    if edits or (files >= 2 and outputs) or (textual >= 2 and outputs >= 2):  # snippets alone: a chat
        return "coding"
    team = _team_kind(history)
    if structured or outputs:
        return team or "tool"
    if team is not None:
        return team
    people = {history.speakers[i] for i, k in enumerate(history.kinds) if k in ("user", "assistant")}
    return "meeting" if len(people) >= 3 else "chat"


def _team_kind(history: hx.History) -> Kind | None:
    """"coding" or "tool" for a team of agents, None for anything else.

    A team: two or more speakers that are agent roles (planner, coder, tester, reviewer, in English
    or Chinese, with their synonyms) whose turns mostly show work (code, files, tests, tickets), or
    hand work to each other and show some, or keep handing work to each other; or two or more named
    assistants that hand work to each other and show work. People in a meeting, with job titles or
    not, talk: few of their turns show code, files or tests, and they rarely hand work over by name
    ("@coder", "over to the tester", "交给测试员")."""
    team = roles.read_team(history, min_work=TEAM_WORK)
    share = team.work / max(1, team.turns)
    handed = team.handoffs >= TEAM_HANDOFFS
    roles_team = len(team.roles) >= 2 and (
        share >= TEAM_WORK or (handed and share >= TEAM_WORK_HANDED)
        or team.handoffs >= max(TEAM_ONLY_HANDOFFS, TEAM_HANDOFF_SHARE * team.turns))
    agents_team = len(team.agents) >= 2 and handed and share >= TEAM_WORK
    if not (roles_team or agents_team):
        return None
    return "coding" if team.code >= 2 else "tool"


# -- dates -----------------------------------------------------------------------------------------

_KEPT_FROM = regex.compile(
    r"(?:kept verbatim below \(from m\d+\) are from |起的消息日期：)(\d{4}-\d{2}-\d{2})")
#: A session marker opens with one of these words ("Session 3 - 8 May 2023", "Date: 2023-05-08").
_MARKER = regex.compile(r"(?i)(?:session|date|day|conversation|chat|meeting)\b|会话|日期|会议|对话|第")


def parse_date(value: object) -> dt.date | None:
    """A date from a message field or a marker text: ISO, `2023/05/08`, `8 May 2023`, `May 8, 2023`,
    `2023年5月8日`, or epoch seconds / milliseconds."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int | float):
        try:  # the division too: an int beyond a float's range overflows there
            seconds = value / 1000 if value > 1e11 else value
            return dt.datetime.fromtimestamp(seconds, tz=dt.timezone.utc).date()
        except (OverflowError, OSError, ValueError):
            return None
    if not isinstance(value, str):
        return None
    for match in DATE.finditer(value[:200]):  # the one date grammar (`compactor.text.numbers`)
        year, month, day = date_key(match)
        if year is None or month is None or day is None:
            continue
        try:
            return dt.date(year, month, day)
        except ValueError:
            continue
    return None


def session_dates(messages: Sequence[object]) -> list[dt.date | None]:
    """Each message's date: its own date field, else the last date a field or a short marker message
    set (a session's date applies to the messages after it)."""
    current: dt.date | None = None
    out: list[dt.date | None] = []
    for message in messages:
        raw: Mapping[str, object] = getattr(message, "raw", None) or {}
        found = next((d for d in (parse_date(raw.get(k)) for k in _DATE_KEYS if k in raw) if d), None)
        content = getattr(message, "content", "") or ""
        if found is None and content.startswith(SUMMARY_MARK):  # an earlier compaction: the date of
            latest = _KEPT_FROM.search(content)                    # the turns it kept verbatim after it
            found = parse_date(latest.group(1)) if latest else None
        elif found is None and len(content) <= 120 and _MARKER.match(content.strip(" [(#*-")):
            found = parse_date(content)
        if found is not None:
            current = found
        out.append(current)
    return out


_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_RELATIVE = regex.compile(
    r"(?i)\b(?:(?P<before>the day before yesterday)|(?P<after>the day after tomorrow)|"
    r"(?P<yesterday>yesterday)|(?P<today>today|tonight|this morning|this evening)|"
    r"(?P<tomorrow>tomorrow)|(?P<dir>last|next|this) (?P<unit>week|month|year|weekend|"
    r"monday|tuesday|wednesday|thursday|friday|saturday|sunday)|"
    r"(?P<n>\d+|a|an|one|two|three|four|five|six|seven|eight|nine|ten) (?P<nunit>day|week|month|year)s? "
    r"(?P<way>ago|from now)|in (?P<in>\d+|a|an|one|two|three|four|five|six|seven|eight|nine|ten) "
    r"(?P<inunit>day|week|month|year)s?)\b|"
    r"(?P<zhweek>(?:上|下|这|本)(?:个)?(?:周|星期)[一二三四五六日天])|"
    r"(?P<zh>大前天|大后天|前天|昨天|今天|明天|后天|上周|上个?星期|下周|下个?星期|本周|这周|上个月|下个月|去年|今年|明年)")
_NUMBERS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
            "eight": 8, "nine": 9, "ten": 10}
_ZH_DAYS = {"大前天": -3, "前天": -2, "昨天": -1, "今天": 0, "明天": 1, "后天": 2, "大后天": 3}
_ZH_WEEKDAYS = "一二三四五六日"


def _week_of(day: dt.date) -> str:
    return f"week of {(day - dt.timedelta(days=day.weekday())).isoformat()}"


def _shift_month(day: dt.date, months: int) -> str:
    index = day.year * 12 + day.month - 1 + months
    return f"{index // 12:04d}-{index % 12 + 1:02d}"


def _resolve(match: regex.Match[str], day: dt.date) -> str | None:
    g = match.groupdict()
    if g["before"]:
        return (day - dt.timedelta(days=2)).isoformat()
    if g["after"]:
        return (day + dt.timedelta(days=2)).isoformat()
    if g["yesterday"]:
        return (day - dt.timedelta(days=1)).isoformat()
    if g["today"]:
        return day.isoformat()
    if g["tomorrow"]:
        return (day + dt.timedelta(days=1)).isoformat()
    if g["zhweek"]:
        word = g["zhweek"]
        target = _ZH_WEEKDAYS.index("日" if word[-1] == "天" else word[-1])
        monday = day - dt.timedelta(days=day.weekday())
        shift = -7 if word[0] == "上" else 7 if word[0] == "下" else 0
        return (monday + dt.timedelta(days=shift + target)).isoformat()
    if g["zh"]:
        word = g["zh"]
        if word in _ZH_DAYS:
            return (day + dt.timedelta(days=_ZH_DAYS[word])).isoformat()
        if word.startswith(("上周", "上个星期", "上星期")):
            return _week_of(day - dt.timedelta(days=7))
        if word.startswith(("下周", "下个星期", "下星期")):
            return _week_of(day + dt.timedelta(days=7))
        if word in ("本周", "这周"):
            return _week_of(day)
        return {"上个月": _shift_month(day, -1), "下个月": _shift_month(day, 1), "去年": str(day.year - 1),
                "今年": str(day.year), "明年": str(day.year + 1)}.get(word)
    if g["dir"]:
        step = {"last": -1, "next": 1, "this": 0}[g["dir"].lower()]
        unit = g["unit"].lower()
        if unit in ("week", "weekend"):
            return _week_of(day + dt.timedelta(days=7 * step))
        if unit == "month":
            return _shift_month(day, step)
        if unit == "year":
            return str(day.year + step)
        target = _WEEKDAYS.index(unit)
        if step < 0:  # the latest such day before this one
            return (day - dt.timedelta(days=(day.weekday() - target) % 7 or 7)).isoformat()
        ahead = (target - day.weekday()) % 7  # "this Tuesday": the coming one (today if it is Tuesday)
        return (day + dt.timedelta(days=(ahead or 7) if step > 0 else ahead)).isoformat()
    count_text, unit, sign = ((g["n"], g["nunit"], -1 if g["way"].lower() == "ago" else 1) if g["n"]
                              else (g["in"], g["inunit"], 1) if g["in"] else (None, None, 0))
    if count_text is None or unit is None:
        return None
    count = int(count_text) if count_text.isdigit() else _NUMBERS[count_text.lower()]
    unit = unit.lower()
    if unit == "day":
        return (day + dt.timedelta(days=sign * count)).isoformat()
    if unit == "week":
        return (day + dt.timedelta(days=7 * sign * count)).isoformat()
    if unit == "month":
        return _shift_month(day, sign * count)
    return str(day.year + sign * count)


def resolve_relative(text: str, day: dt.date | None) -> str:
    """`text` with each relative date followed by its absolute date in brackets ("yesterday
    [2023-05-07]"), when the message's date is known; unchanged otherwise."""
    if day is None:
        return text
    out: list[str] = []
    last = 0
    for match in _RELATIVE.finditer(text):
        try:
            resolved = _resolve(match, day)
        except (OverflowError, ValueError):  # past the calendar's ends: leave the words as they are
            resolved = None
        if resolved is None:
            continue
        out.append(text[last:match.end()])
        out.append(f" [{resolved}]")
        last = match.end()
    if not out:
        return text
    out.append(text[last:])
    return "".join(out)


def has_time_reference(text: str) -> bool:
    """Whether a sentence dates something (a date, a weekday, a month or a relative date)."""
    relative = any(not m.group("today") and m.group("zh") not in ("今天",)  # "today" dates nothing
                   for m in _RELATIVE.finditer(text))
    return bool(relative or DATE.search(text) or YEAR.search(text) or _WEEKDAY_OR_MONTH.search(text))


_WEEKDAY_OR_MONTH = regex.compile(
    r"(?i)\b(?:monday|tuesday|wednesday|thursday|friday|saturday|sunday|january|february|march|april|"
    r"june|july|august|september|october|november|december|tonight|weekend)\b|周[一二三四五六日天]|星期")
