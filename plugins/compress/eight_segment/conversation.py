"""compress.eight_segment: compact an agent's history into the 8 sections, by rules.

For each conversation source the component plans what stays verbatim (`compactor.formats.compaction`:
system messages, the first request when cheap, the last `keep_last` turns) and writes one summary of
everything between, with the sections Claude Code's summaries use (Primary Request and Intent; Key
Technical Concepts; Files and Code Sections; Errors and fixes; Problem Solving; All user messages;
Pending Tasks; Current Work), the optional ninth (Optional Next Step, quoting the latest instruction)
and the metadata block (original and compressed tokens and characters, ratio, quality score, role).

Primary Request and Intent opens with the request being worked on when it was summarised: the
person's latest turn, and the task statement, quoted in full when they fit in half the summary
(mandatory lines, never dropped). The other section budgets adapt to what the history holds: each
section asks for what its candidates cost, the allowance is water-filled by section weight, and what
a section leaves goes to the best items left anywhere. Every line cites its messages, and the
summary's first line says how to get the originals back (the `expand_tool` the caller offers, or
just the ids) and what a citation means: `m12` is message 12 of this history (chunk id
`<source>-0012`); a line carried from an earlier summary cites that summary's history under a
letter of its own (`a7`, `<earlier source>-0007`). `role:` (or the run option) writes the handoff
summary of one role (its own messages plus what people said). An optional LLM pass rewrites the
rule draft and is used only if it keeps the headings, fits and invents nothing.
"""

from __future__ import annotations

import dataclasses
import functools
import heapq
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

import regex

from compactor.components import Component, DataPath, param
from compactor.document import Chunk, Context, Message, Segment, Source, chunk_id, frozen_mapping
from compactor.formats.compaction import (
    MIN_SUMMARY_TOKENS,
    SUMMARY_MARK,
    Plan,
    conversation_plan,
    plan_compaction,
)
from compactor.formats.messages import (
    TOKENS_PER_MESSAGE,
    TOKENS_PER_REPLY,
    calls,
    message_tokens,
    speaker,
    units,
)
from compactor.formats.system_prompt import shorten_system
from compactor.hookspecs import hookimpl
from compactor.kit import loss_report
from compactor.llm.guard import Request, complete_guarded
from compactor.llm.templates import fill, template_for
from compactor.pipeline import Pipeline
from compactor.plugins.compress.eight_segment import chat_summary as chat
from compactor.plugins.compress.eight_segment import history as hx
from compactor.plugins.compress.eight_segment import roles
from compactor.plugins.compress.eight_segment.file_memory import recent_files, render_views
from compactor.plugins.compress.eight_segment.kinds import AGENT_KINDS, detect_kind, session_dates
from compactor.run import Run
from compactor.state import BudgetShare, CompactionPlan, ConversationOptions, ConversationPlan
from compactor.text.language import is_chinese
from compactor.text.terms import terms
from compactor.text.tokens import TokenCounter

SECTIONS: tuple[tuple[str, str, str], ...] = (
    ("primary", "Primary Request and Intent", "主要请求和意图"),
    ("concepts", "Key Technical Concepts", "关键技术概念"),
    ("files", "Files and Code Sections", "文件和代码段落"),
    ("errors", "Errors and fixes", "错误和修复"),
    ("problem", "Problem Solving", "问题解决"),
    ("users", "All user messages", "所有用户消息"),
    ("pending", "Pending Tasks", "待处理任务"),
    ("current", "Current Work", "当前工作"),
    ("next", "Optional Next Step", "可选的下一步"),
)
WEIGHTS: Mapping[str, float] = {"primary": 0.14, "concepts": 0.13, "files": 0.16, "errors": 0.12,
                                "problem": 0.10, "users": 0.15, "pending": 0.06, "current": 0.10,
                                "next": 0.04}
#: Earlier summaries' ids repeated in a marker (older ones stay reachable: each dropped summary is
#: stored with the rest and cites its own predecessors).
MAX_EARLIER = 3
#: Below this many summary tokens the marker is the short one.
TIGHT = 400
#: Chats and meetings: the share of the room the latest turns may take verbatim (the rest is chosen
#: by value per token, whole short turns included, wherever they are in the history).
PEOPLE_TAIL_SHARE = 0.2
#: About what a tight summary's marker line and metadata take (ids, counts, quality).
FRAME_TOKENS = 80
#: How much of a summary the start of a request too long to quote whole may take: an eighth, and
#: half when a target ratio asks to fill the room.
REQUEST_SHARE = 0.125
FILL_REQUEST_SHARE = 0.5
#: A target ratio's output fills at least this share of its budget (`fill: true`; a retry of
#: `validate.ratio` asks for its own `min_fill`), by keeping more of the latest turns verbatim: the
#: tail's share of the room is raised step by step.
DEFAULT_FILL = 0.9
FILL_TAIL_SHARES = (0.6, 0.7, 0.8, 0.9, 1.0)
#: The metadata's quality (validate.loss retention) reads every message of a history up to this many
#: characters (about 40k tokens), and an even sample of about `QUALITY_SAMPLE_CHARS` of a longer one.
QUALITY_EXACT_CHARS = 160_000
QUALITY_SAMPLE_CHARS = 60_000
#: The tool the marker tells the model to call with the ids (the `expand_tool` run option: the
#: name the caller offers it under, or None when it offers none and the ids are only listed).
EXPAND_TOOL = "expand_context"
_HEADING = regex.compile(r"^## (.+?)\s*$", regex.MULTILINE)
_TOOL_NAME = regex.compile(r"[A-Za-z_][\w.-]{0,63}")


@dataclass(slots=True)
class Draft:
    """A written summary: its text (marker, sections, metadata joined by blank lines), the sections,
    the messages its lines cite, and its quality score."""

    text: str
    sections: dict[str, str]
    cited: tuple[int, ...]
    quality: float
    method: str = "rules"
    marker: str = ""
    metadata: str = ""


class EightSegment(Component):
    """Compacts agent histories into the 8 sections (+ Optional Next Step) and verbatim head/tail turns.

    Run options in `context.state` (`ConversationOptions`) (what `compact_messages` and the CLI pass)
    override the parameters: keep_last, role, summary_role, llm, kind, focus, keep_files, compress_system,
    expand_tool (the name the marker tells the model to call with the ids; None: the ids only).

    `kind` (auto: detected, `conversation_kinds.detect_kind`) picks the template: the eight sections
    for coding and tool-using agents, the people template (`chat_summary`) for chats and meetings.
    The scores and labels of earlier classify/score steps weigh what is kept (the analyzer chain);
    `share` of the budget is used, and `validate.ratio` may retry with another (`budget_share`).
    """

    name = "compress.eight_segment"
    stage = "compress"
    requires = ("chunks",)
    provides = ("segments", CompactionPlan, BudgetShare)

    keep_last: int = param(4, ge=0, doc="turns kept verbatim at the end")
    keep_first: bool = param(True, doc="keep the first request verbatim")
    role: str | None = param(None, doc="write the handoff summary of this speaker")
    summary_role: Literal["user", "system", "assistant"] = param("user", doc="the summary message's role")
    next_step: bool = param(True, doc="write the Optional Next Step")
    snippet_lines: int = param(12, ge=0, doc="lines of code a snippet keeps")
    llm: bool = param(False, doc="a guarded LLM rewrite of the rule summary")
    prompt: DataPath | None = param(None, doc="a prompt file in place of the built-in one")
    max_input_tokens: int = param(12000, doc="tokens the LLM reads at most")
    kind: Literal["auto", "coding", "tool", "chat", "meeting"] = param("auto", doc="the template")
    focus: str | None = param(None, doc="text whose matches rise in every section")
    share: float = param(1.0, gt=0, le=1, doc="the share of the budget used")
    keep_files: int = param(0, ge=0, doc="latest views of that many files kept verbatim")
    files_share: float = param(0.35, gt=0, lt=1, doc="the share of the summary the files may take")
    compress_system: bool = param(False, doc="send an excerpt of an oversized system prompt")
    expand_tool: str | None = param(EXPAND_TOOL, doc="the tool the marker names for the originals")

    def check(self) -> list[str]:
        tool = self.expand_tool
        if tool is not None and not _TOOL_NAME.fullmatch(tool):
            return ["expand_tool must be a tool name (letters, digits, _ . -) or null"]
        return []

    @hookimpl
    def compactor_compress(self, context: Context, run: Run) -> Context:
        options = dict(context.state.get(ConversationOptions, ConversationOptions()).values)
        # run options stand in for parameters, checked as a pipeline file's are; an empty
        # summary_role, kind or focus leaves the parameter as it is
        me = self.overridden({key: value for key, value in options.items()
                              if value or key not in ("summary_role", "kind", "focus")})
        given = context.state.get(BudgetShare)
        share = float(given.share if given is not None else self.share)
        budget = context.resolved_budget()
        options["budget_share"] = share  # applied in `compact`, to the room the system prompt leaves
        if given is not None and given.fill:  # a retry of validate.ratio: fill at least this share
            options["fill"] = float(given.fill)
        plans: dict[str, ConversationPlan] = {}
        segments: list[Segment] = []
        for source in context.sources:
            if source.kind != "conversation" or not source.messages:
                continue
            mine = [c for c in context.chunks if c.source_id == source.id]
            plan, parts = me.compact(source, budget, run, options, mine)
            plan = plan.evolve(budget_share=share)
            if not plan.unchanged and plan.summary:
                plan, parts = _quality_from_loss(context, mine, plan, parts, run.counter)
            plans[source.id] = plan
            segments.extend(parts)
        if not plans:
            run.warn("no conversation in the input: compress.eight_segment needs a message list")
        run.note("conversations", {sid: {k: getattr(plan, k) for k in ("original_tokens", "tokens", "quality",
                                                                "method", "unchanged", "kind")}
                                   for sid, plan in plans.items()})
        return context.evolve(segments=tuple(segments), state=context.state.with_(
            CompactionPlan(plans),
            given.evolve(share=share) if given is not None else BudgetShare(share)))

    # -- one conversation ----------------------------------------------------------------------

    def compact(self, source: Source, budget: int | None, run: Run, options: Mapping[str, Any],
                chunks: Sequence[Chunk] = ()) -> tuple[ConversationPlan, list[Segment]]:
        """The plan (with the summary) and the segments for one history (`chunks`: its message chunks,
        whose token counts are the messages' costs when `chunk.messages` made them)."""
        messages = list(source.messages)
        counter = run.counter
        summary_role = self.summary_role
        frame = {"expand_tool": self.expand_tool,
                 "original_chars": sum(message_chars(m) for m in messages)}
        by_message = [c.tokens for i, c in enumerate(chunks)
                      if c.units == (i, i + 1) and c.id == chunk_id(source.id, i)]
        costs = (by_message if len(by_message) == len(messages) == len(chunks)  # chunk.messages made them
                 else [message_tokens(m, counter) for m in messages])
        limit = budget if budget is not None else max(1, sum(costs) // 4)
        messages, costs, system = shorten_system(  # an oversized system prompt, excerpted for the requests
            messages, costs, limit, counter, enabled=self.compress_system, rank=_rank_system)
        share = float(options.get("budget_share", 1.0))
        if share < 1.0 and budget is not None:  # a share of what the system messages leave
            fixed = TOKENS_PER_REPLY + sum(c for m, c in zip(messages, costs, strict=True)
                                           if m.role in ("system", "developer"))
            limit = fixed + max(MIN_SUMMARY_TOKENS + 8, int((limit - fixed) * share))
            limit = min(limit, budget)
        settings: dict[str, Any] = {"keep_last": self.keep_last, "keep_first": self.keep_first,
                                    "summary_role_tokens": counter.count(summary_role)}
        kind: str = self.kind
        history: hx.History | None = None
        if TOKENS_PER_REPLY + sum(costs) > limit:  # it will be compacted: read it
            history = hx.History(messages)
            if kind == "auto":
                kind = detect_kind(history)
        people = kind not in AGENT_KINDS and kind != "auto"
        first: dict[str, Any] = {**settings, "tail_share": PEOPLE_TAIL_SHARE} if people else settings
        plan = plan_compaction(messages, costs, limit, **first)
        if history is not None and not people and not plan.unchanged:
            plan = _room_for_request(history, source, plan, costs, limit, settings, counter)
        saved = sum(before - after for before, after in (system.get("system_tokens") or {}).values())
        if saved:  # the original's size is what the history cost before its system prompt was cut
            plan = dataclasses.replace(plan, original_tokens=plan.original_tokens + saved)
        data = conversation_plan(plan, source_id=source.id, summary_role=summary_role, role=None,
                                 method="none", quality=1.0, tokens=plan.original_tokens - saved,
                                 summary=None, kind=kind, **system)
        role = self.role
        if role is not None:  # a role nobody is: an error naming the roles there, not an empty handoff
            roles.check_role(history or hx.History(messages), role)
        if plan.unchanged or history is None:
            return data, [_message_segment(source, i, m, costs[i]) for i, m in enumerate(messages)]
        history = _with_reduced(history, source, plan.dropped)
        weights = message_weights(chunks, len(messages))
        focus = frozenset(terms(self.focus or ""))
        keep_files = self.keep_files
        pinned: list[str] = []
        if keep_files and not people and plan.summary_tokens >= TIGHT:
            views = recent_files(history, plan.dropped, keep_files)
            pinned, pinned_cost = render_views(views, int(self.files_share * plan.summary_tokens), counter)
        if people:
            draft = self._write_people(history, source, plan, costs, counter, kind == "meeting", weights,
                                       focus, frame)
        elif pinned:  # the files first, the sections in what they leave
            heading = f"## {_title('files', _chinese(history))}\n"
            room = dataclasses.replace(plan, summary_tokens=plan.summary_tokens - pinned_cost
                                       - counter.count(heading) - 2)
            draft = _pin_files(self._draft(history, source, room, costs, counter, role, weights, focus,
                                           extra_tokens=pinned_cost + counter.count(heading) + 2,
                                           extra_chars=len(heading) + sum(len(b) + 1 for b in pinned),
                                           frame=frame), pinned, _chinese(history))
            if counter.count(draft.text) > plan.summary_tokens:  # never over: the sections alone
                pinned = []
                draft = self._draft(history, source, plan, costs, counter, role, weights, focus, frame=frame)
        else:
            draft = self._draft(history, source, plan, costs, counter, role, weights, focus, frame=frame)
        lost_latest = any("latest turn" in note for note in plan.notes)
        small = plan.summary_tokens < TIGHT or (lost_latest and plan.summary_tokens < 4 * TIGHT)
        if not people and not pinned and small:
            # a small room: a summary may hold less than the turns it replaces; keep the plan that
            # leaves more of the history's key signals readable
            verbatim = _room_for_request(history, source, plan_compaction(
                messages, costs, limit, tail_share=1.0, **settings), costs, limit, settings, counter)
            verbatim = dataclasses.replace(verbatim, original_tokens=verbatim.original_tokens + saved)
            if verbatim.tail != plan.tail:
                alternative = self._draft(history, source, verbatim, costs, counter, role, weights, focus,
                                          frame=frame)
                scope = [i for i in range(len(messages)) if i not in plan.head]
                if (_readable(history, scope, alternative, verbatim)  # a tie goes to the verbatim turns
                        >= _readable(history, scope, draft, plan)):
                    plan, draft = verbatim, alternative
                    data = conversation_plan(plan, data)
        want = _fill_share(options.get("fill"))
        if want and not people and not pinned:
            plan, draft = self._filled(history, source, plan, draft, costs, counter, limit, want, settings,
                                       saved, role, weights, focus, {**frame, "summary_role": summary_role})
            data = conversation_plan(plan, data)
        use_llm = self.llm
        if use_llm:
            kept = "\n".join(messages[i].content for i in (*plan.head, *plan.tail))
            refined = self._refine(draft, history, plan.dropped, plan.summary_tokens, run, kept)
            if refined is not None:
                draft = refined
        dropped = set(plan.dropped)
        total = (plan.original_tokens - saved - sum(costs[i] for i in plan.dropped)
                 + message_tokens(Message(role=summary_role, content=draft.text), counter))
        data = data.evolve(summary=draft.text, method=draft.method, quality=round(draft.quality, 3),
                           tokens=total, role=role or _main_role(history),
                           cited=[chunk_id(source.id, i) for i in draft.cited if i in dropped])
        for note in plan.notes:
            run.warn(note)
        parts = [_message_segment(source, i, messages[i], costs[i]) for i in plan.head]
        pieces = [("marker", "Marker", draft.marker)]
        pieces += [(key, TITLES.get(key, key), text) for key, text in draft.sections.items()]
        pieces.append(("metadata", "Compression Metadata", draft.metadata))
        cited = tuple(chunk_id(source.id, i) for i in draft.cited)
        for key, title, text in pieces:
            if text:  # joined by blank lines, the pieces are the summary message
                parts.append(Segment(id=f"{source.id}:{key}", text=text, title=title,
                                     chunk_ids=cited if key not in ("marker", "metadata") else (),
                                     tokens=counter.count(text),
                                     metadata=frozen_mapping({"section": key, "summary": True})))
        parts.extend(_message_segment(source, i, messages[i], costs[i]) for i in plan.tail)
        return data, parts

    def _filled(self, history: hx.History, source: Source, plan: Plan, draft: Draft, costs: Sequence[int],
                counter: TokenCounter, limit: int, want: float, settings: Mapping[str, Any], saved: int,
                role: str | None, weights: Mapping[int, float], focus: frozenset[str],
                frame: Mapping[str, Any]) -> tuple[Plan, Draft]:
        """A target ratio asks for an output of `want` x `limit` tokens or more: when the summary of
        everything between head and tail says all it has in less, more of the latest turns are kept
        verbatim (the tail may take a growing share of the room) until the output reaches it; the
        fullest plan within the limit wins when none does."""
        summary_role = str(frame.get("summary_role") or self.summary_role)

        def size(candidate: Plan, written: Draft) -> int:
            return (candidate.original_tokens - saved - sum(costs[i] for i in candidate.dropped)
                    + message_tokens(Message(role=summary_role, content=written.text), counter))

        best, best_size = (plan, draft), size(plan, draft)
        goal = want * limit
        if best_size >= goal:
            return best
        everything = {**settings, "keep_last": len(history.messages)}
        tried = {plan.tail}
        for share in FILL_TAIL_SHARES:
            candidate = plan_compaction(history.messages, costs, limit, tail_share=share, **everything)
            if candidate.unchanged or candidate.tail in tried:
                continue
            tried.add(candidate.tail)
            candidate = dataclasses.replace(candidate, original_tokens=candidate.original_tokens + saved)
            written = self._draft(history, source, candidate, costs, counter, role, weights, focus,
                                  frame=frame)
            got = size(candidate, written)
            if best_size < got <= limit:
                best, best_size = (candidate, written), got
            if best_size >= goal:
                break
        if best_size < goal:  # a message too long for the tail: the summary quotes more of the request
            candidate = best[0]
            written = self._draft(history, source, candidate, costs, counter, role, weights, focus,
                                  frame={**frame, "request_share": FILL_REQUEST_SHARE})
            got = size(candidate, written)
            if best_size < got <= limit:
                best = (candidate, written)
        return best

    def _draft(self, history: hx.History, source: Source, plan: Plan, costs: Sequence[int],
               counter: TokenCounter, role: str | None, weights: Mapping[int, float] | None = None,
               focus: frozenset[str] = frozenset(), extra_tokens: int = 0, extra_chars: int = 0,
               frame: Mapping[str, Any] | None = None) -> Draft:
        """`write` for a plan (`frame`: the expand tool and the original's characters, as `compact`
        reads them from the run options and the messages)."""
        frame = frame or {}
        kept = TOKENS_PER_REPLY + sum(costs[i] for i in (*plan.head, *plan.tail)) + extra_tokens
        kept_chars = sum(message_chars(history.messages[i]) for i in (*plan.head, *plan.tail)) + extra_chars
        return self.write(history, source, plan.head, plan.tail, plan.dropped, plan.summary_tokens, counter,
                          role=role, original_tokens=plan.original_tokens, kept_tokens=kept,
                          weights=weights, focus=focus, expand_tool=frame.get("expand_tool", EXPAND_TOOL),
                          original_chars=int(frame.get("original_chars", 0)), kept_chars=kept_chars,
                          request_share=float(frame.get("request_share", REQUEST_SHARE)))

    def _write_people(self, history: hx.History, source: Source, plan: Plan, costs: Sequence[int],
                      counter: TokenCounter, meeting: bool, weights: Mapping[int, float],
                      focus: frozenset[str], frame: Mapping[str, Any] | None = None) -> Draft:
        """The people template (`chat_summary`): who is who, then the pieces worth most per token."""
        zh = _chinese(history)
        frame = frame or {}
        tool = frame.get("expand_tool", EXPAND_TOOL)
        dropped, allowance = plan.dropped, plan.summary_tokens
        kept_tokens = TOKENS_PER_REPLY + sum(costs[i] for i in (*plan.head, *plan.tail))
        kept_chars = sum(message_chars(history.messages[i]) for i in (*plan.head, *plan.tail))
        original_chars = int(frame.get("original_chars", 0))
        dates = session_dates(history.messages)
        tight = allowance < TIGHT
        earlier = earlier_ids(history, dropped)
        marker = (short_marker(source.id, dropped, tool) if tight
                  else _marker(source.id, dropped, len(history.messages), earlier[-MAX_EARLIER:], zh, tool))
        people = chat.people_lines(history, plan.head, zh) if allowance >= 200 else []
        while people and counter.count("\n".join(people)) > 0.15 * allowance:
            people.pop()
        latest = chat.latest_session_line(dates, plan.tail, zh)
        if latest:
            people.append(latest)
        label = _main_role(history)
        quality = 1.0  # the metadata's figure is validate.loss's, put in by `_quality_from_loss`
        pieces = chat.pieces_of(history, dropped, counter, meeting, weights, focus, dates)
        pieces.extend(chat.carried_pieces(history, dropped, counter))
        fixed = counter.count(_frame(marker, "\n".join(people), _metadata(
            plan.original_tokens, 99999, 1.0, label, zh, tight, (original_chars, 9999999)), tight))
        headings = len({p.kind for p in pieces}) * (8 if zh else 6)  # at most one per section

        def fitted(room: int) -> tuple[str, dict[str, str], tuple[int, ...], str]:
            """The pieces chosen for `room`, rendered, the last ones dropped while over the allowance:
            (text, sections, cited messages, metadata)."""
            chosen = chat.choose(pieces, max(0, room))
            while True:
                sections, cited = chat.render(history, chosen, people, meeting, zh, dates)
                body = "\n\n".join(sections.values())
                meta = _metadata(plan.original_tokens, 0, quality, label, zh, tight, (original_chars, 0))
                framed = counter.count(_frame(marker, body, meta, tight))
                compressed = kept_tokens + framed + TOKENS_PER_MESSAGE + 1
                chars = kept_chars
                for _ in range(4):  # the figure is part of the text it counts: settle its digits
                    meta = _metadata(plan.original_tokens, compressed, quality, label, zh, tight,
                                     (original_chars, chars))
                    settled = kept_chars + len(_frame(marker, body, meta, tight))
                    if settled == chars:
                        break
                    chars = settled
                text = _frame(marker, body, meta, tight)
                over = counter.count(text) - allowance
                if over <= 0 or not chosen:
                    return text, sections, cited, meta
                while chosen and over > 0:  # the last chosen added least: drop from the end
                    over -= chosen.pop().tokens + 2

        room = allowance - fixed - headings
        text, sections, cited, meta = fitted(room)
        spare = allowance - counter.count(text)
        if not tight and spare >= max(8, allowance // 50):  # the estimates left room: use it
            fuller = fitted(room + spare - 2)
            if len(fuller[0]) > len(text) and counter.count(fuller[0]) <= allowance:
                text, sections, cited, meta = fuller
        if counter.count(text) > allowance:
            short = short_marker(source.id, dropped, tool)
            return Draft(short, {}, (), quality, marker=short, metadata="")
        first, last = (f"{marker} {meta}", "") if tight else (marker, meta)
        return Draft(text, sections, cited, quality, marker=first, metadata=last)

    def write(self, history: hx.History, source: Source, head: Sequence[int], tail: Sequence[int],
              dropped: Sequence[int], allowance: int, counter: TokenCounter, *, role: str | None = None,
              original_tokens: int = 0, kept_tokens: int = 0, weights: Mapping[int, float] | None = None,
              focus: frozenset[str] = frozenset(), expand_tool: str | None = EXPAND_TOOL,
              original_chars: int = 0, kept_chars: int = 0, request_share: float = REQUEST_SHARE) -> Draft:
        """The rule summary of the dropped messages within `allowance` tokens (never more);
        `request_share`: how much of it the start of a request too long to quote whole may take."""
        zh = _chinese(history)
        visible = [i for i in dropped if role is None or history.kinds[i] in ("user", "system")
                   or history.speakers[i] == role
                   or (history.kinds[i] == "output" and _answers_role(history, i, role))]
        given = roles.handoff(history, dropped, role) if role is not None else None
        if given is not None:  # what concerns the role, weighed by what it needs first
            visible = sorted({*visible, *given.visible})
            weights = {i: (weights or {}).get(i, 1.0) * given.weights.get(i, 1.0)
                       for i in {*(weights or {}), *given.weights}}
        kept_text = hx.verbatim_text(history, (*head, *tail))
        tight = allowance < TIGHT
        citations = hx.Citations(history, dropped, source.id, brief=tight)
        asked, first_kept = hx.requests(history, dropped, citations)
        requested, covered = request_items(asked, first_kept, allowance, counter, zh, request_share)
        quoted = {(r.index, r.carried) for r in asked if r.carried}
        pools = self._candidates(history, visible, head, tail, kept_text, citations, covered, quoted)
        if requested:
            pools["primary"] = requested + pools.get("primary", [])
        if given is not None:
            _add_handoff(history, given, pools, set(tail))
        pools = reweigh(pools, weights or {}, focus)
        earlier = earlier_ids(history, dropped)[-MAX_EARLIER:]  # reachable through the dropped summary anyway

        def marker_for(body: str) -> str:
            """The marker, defining the letters of earlier histories that `body` cites."""
            if tight:
                return short_marker(source.id, dropped, expand_tool)
            return _marker(source.id, dropped, len(history.messages), earlier, zh, expand_tool,
                           citations.defined(body))

        label = role or _main_role(history)
        # under a tight allowance the metadata joins the marker line, without what it can spare
        # (the ratio follows from the two counts; the role when it is the usual one)
        own_role = f", role {label}" if label != "assistant" else ""

        def metadata(compressed: int, chars: int, quality: float) -> str:
            """The metadata block, or under a tight allowance its short form for the marker line."""
            if tight:
                return f"({original_tokens}→{compressed} tokens, quality {quality:.2f}{own_role})"
            return _metadata(original_tokens, compressed, quality, label, zh, chars=(original_chars, chars))

        def render(chosen: dict[str, list[hx.Item]]) -> tuple[str, dict[str, str], tuple[int, ...],
                                                               float, str, int, str]:
            """The summary text, its sections, cited messages, quality, metadata line, tokens and
            marker."""
            sections = render_sections(chosen, zh)
            body = "\n\n".join(sections[k] for k, _, _ in SECTIONS if k in sections)
            marker = marker_for(body)
            cited = tuple(sorted({m for items in chosen.values() for it in items for m in it.messages}))
            quality = quality_score(history, dropped, body, kept_text)
            size = _frame_size(counter, marker, body, tight)  # the body is counted once per draft
            draft_tokens = size(metadata(allowance, original_chars, quality))
            compressed = kept_tokens + draft_tokens + TOKENS_PER_MESSAGE + 1

            def framed(chars: int) -> str:
                return _frame(marker, body, metadata(compressed, chars, quality), tight)

            chars = kept_chars + len(framed(kept_chars))
            for _ in range(3):  # the figure is part of the text it counts: settle its digits
                settled = kept_chars + len(framed(chars))
                if settled == chars:
                    break
                chars = settled
            meta = metadata(compressed, chars, quality)
            return _frame(marker, body, meta, tight), sections, cited, quality, meta, size(meta), marker

        meta_reserve = 14 + counter.count(own_role) if tight else 44
        # the room before the choice: the marker with every letter a candidate line may cite
        everything = "\n".join(it.text for items in pools.values() for it in items if not it.inline)
        room = max(0, allowance - counter.count(marker_for(everything)) - meta_reserve - 2)
        allocation = _Allocation(pools, counter, zh)
        chosen = allocation.choose(room)
        text, sections, cited, quality, meta, tokens, marker = render(chosen)
        spare = allowance - tokens
        if spare >= max(6, room // 50):  # the estimate left room worth another pick: use it
            more = allocation.choose(room + spare - 2)
            fuller = render(more)
            if fuller[5] <= allowance:
                chosen = more
                text, sections, cited, quality, meta, tokens, marker = fuller
        while tokens > allowance and _drop_weakest(chosen):
            text, sections, cited, quality, meta, tokens, marker = render(chosen)
        if tokens > allowance:  # only the mandatory lines are left, and too long: their short forms
            chosen = {key: [replace(it, text=it.short, short=None) if it.mandatory and it.short else it
                            for it in items] for key, items in chosen.items()}
            text, sections, cited, quality, meta, tokens, marker = render(chosen)
        first, last = (f"{marker} {meta}", "") if tight else (marker, meta)
        if tokens > allowance:  # the marker alone; the short one always fits
            short = short_marker(source.id, dropped, expand_tool)
            text = marker if counter.count(marker) <= allowance else short
            if counter.count(text) > allowance:
                cut = counter.encode(text)[:allowance]
                text = counter.encoding.decode_bytes(cut).decode("utf-8", "ignore")
            sections, cited, first, last = {}, (), text, ""
        return Draft(text, sections, cited, quality, marker=first, metadata=last)

    def _candidates(self, history: hx.History, visible: Sequence[int], head: Sequence[int],
                    tail: Sequence[int], kept_text: str, citations: hx.Citations | None = None,
                    covered: frozenset[int] = frozenset(),
                    quoted: frozenset[tuple[int, str]] | set[tuple[int, str]] = frozenset()
                    ) -> dict[str, list[hx.Item]]:
        """Candidate lines per section (`covered`: the user messages a request line quotes;
        `quoted`: the request lines of earlier summaries quoted again)."""
        later = list(tail)
        tools = hx.tool_items(history, visible)
        pools: dict[str, list[hx.Item]] = {
            "primary": hx.primary_items(history, visible, covered),
            "concepts": tools + hx.identifier_items(history, visible, kept_text),
            "files": hx.file_items(history, visible, self.snippet_lines),
            "errors": hx.error_items(history, visible, covered),
            "users": hx.user_items(history, visible, covered),
            "pending": hx.pending_items(history, visible, later, covered),
            "current": hx.current_items(history, visible, covered=covered),
        }
        used = {it.text for items in pools.values() for it in items}
        pools["problem"] = hx.action_items(history, visible) + hx.reasoning_items(history, visible, used)
        if self.next_step:
            pools["next"] = _next_step_items(history, visible, tail, covered)
        titles = {title: key for key, en, zh in SECTIONS for title in (en, zh)}
        titles.update({title: _FROM_PEOPLE[key] for key, en, zh in chat.PEOPLE_SECTIONS for title in (en, zh)
                       if key in _FROM_PEOPLE})  # an earlier compaction of a chat: its lines go on
        for key, items in hx.carried_items(history, visible, titles, citations, quoted).items():
            if key == "files":  # a file this range worked on has one line, with the earlier edits
                items = hx.merge_file_lines(pools["files"], items)
            elif key == "concepts":  # and a tool one count
                items = hx.merge_tool_counts(tools, items)
            pools.setdefault(key, []).extend(items)
        if "concepts" in pools:  # a value listed once (an earlier summary's and this range's alike)
            best: dict[str, hx.Item] = {}
            for it in pools["concepts"]:
                if it.inline:
                    value = hx.value_key(it.text)
                    if value not in best or it.priority > best[value].priority:
                        best[value] = it
            pools["concepts"] = [it for it in pools["concepts"]
                                 if not it.inline or best[hx.value_key(it.text)] is it]
        return {k: v for k, v in pools.items() if v}

    def _refine(self, draft: Draft, history: hx.History, dropped: Sequence[int], allowance: int,
                run: Run, kept_text: str = "") -> Draft | None:
        """Ask the LLM to rewrite the rule draft; keep it only if guarded checks pass."""
        if not draft.sections:
            return None
        zh = _chinese(history)
        originals = "\n\n".join(f"m{i} {history.speakers[i]}: {history.messages[i].content}" for i in dropped)
        tokens = run.counter.encode(originals)
        if len(tokens) > self.max_input_tokens:
            originals = run.counter.encoding.decode_bytes(tokens[: self.max_input_tokens]).decode(
                "utf-8", "ignore")
        marker, metadata = draft.marker, draft.metadata
        body = "\n\n".join(draft.sections.values())
        content = f"{body}\n\n---\n\n{originals}"
        prompt = fill(template_for(self.prompt, "conversation", "zh" if zh else "en"),
                      query="", budget=str(allowance), content=content)
        limit = allowance - run.counter.count(_join(marker, "", metadata)) - 4

        def keeps_sections(_: int, reply: str) -> list[str]:
            missing = [h for h in _HEADING.findall(body) if f"## {h}" not in reply]
            if missing:
                return [f"the rewrite lost section(s): {', '.join(missing)}"]
            if run.counter.count(_join(marker, reply, metadata)) > allowance:
                return ["the rewrite does not fit the summary allowance"]
            return []

        reply = complete_guarded([Request(prompt, f"{originals}\n{draft.text}", max(1, limit))], run,
                                 accept=keeps_sections)[0]
        if reply is None:
            return None
        text = _join(marker, reply.strip(), metadata)
        quality = quality_score(history, dropped, reply, kept_text)
        return Draft(text, {"llm": reply.strip()}, draft.cited, quality, method="llm", marker=marker,
                     metadata=metadata)


# -- the analyzer chain and the focus --------------------------------------------------------------

#: Where the people template's sections go in the eight (a history that was a chat and now acts).
_FROM_PEOPLE: Mapping[str, str] = {"facts": "problem", "events": "problem", "points": "problem",
                                   "decisions": "pending", "plans": "pending", "questions": "pending"}
#: Section titles of both templates by key.
TITLES: Mapping[str, str] = {**{key: en for key, en, _ in SECTIONS},
                             **{key: en for key, en, _ in chat.PEOPLE_SECTIONS}, "llm": "llm"}


def _pin_files(draft: Draft, blocks: Sequence[str], zh: bool) -> Draft:
    """The draft with the kept file views at the top of its Files and Code Sections."""
    sections: dict[str, str] = {}
    pinned = "\n".join(blocks)
    for key, _, _ in SECTIONS:
        if key == "files":
            existing = draft.sections.get("files")
            sections["files"] = (existing.replace("\n", f"\n{pinned}\n", 1) if existing
                                 else f"## {_title('files', zh)}\n{pinned}")
        elif key in draft.sections:
            sections[key] = draft.sections[key]
    if not draft.sections:  # only the marker fitted: the files still go
        sections = {"files": f"## {_title('files', zh)}\n{pinned}"}
    text = _join(draft.marker, "\n\n".join(sections.values()), draft.metadata)
    return dataclasses.replace(draft, text=text, sections=sections)


def message_weights(chunks: Sequence[Chunk], count: int) -> dict[int, float]:
    """What the pipeline's classify and score steps say each message is worth, as a multiplier around
    1 (empty when no step scored them): `combined` (every `score.*` step and third-party scorer,
    weighted as the pipeline says) from 0.25x to 1.75x, x1.2 for a message labelled actionable."""
    by_index = {c.units[0]: c for c in chunks if c.units is not None and c.units[1] == c.units[0] + 1}
    if len(by_index) != count:
        return {}
    weights: dict[int, float] = {}
    for i, chunk in by_index.items():
        combined = chunk.scores.get("combined")
        weight = 0.25 + 1.5 * min(1.0, max(0.0, float(combined))) if combined is not None else 1.0
        if chunk.labels.get("actionability") == "actionable":
            weight *= 1.2
        if weight != 1.0:
            weights[i] = weight
    return weights


def reweigh(pools: dict[str, list[hx.Item]], weights: Mapping[int, float],
            focus: frozenset[str]) -> dict[str, list[hx.Item]]:
    """Scale every candidate's priority by its messages' weight (the best of the ones it cites) and
    raise what matches the focus, in every section (so `/compact focus on ...` works everywhere)."""
    if not weights and not focus:
        return pools
    for items in pools.values():
        for item in items:
            if weights:
                item.priority *= max((weights.get(i, 1.0) for i in item.messages), default=1.0)
            if focus:
                words = set(terms(item.text))
                if words & focus:
                    item.priority *= 1.0 + 3.0 * len(words & focus) / len(focus)
    return pools


@functools.lru_cache(maxsize=1)
def _system_pipeline() -> Pipeline:
    """The shipped `system-prompt` pipeline, built once per process: qa's steps for a trusted plain
    text (no HTML extraction, so offsets stay the input's; no injection cuts; whole sentences only)."""
    return Pipeline.from_yaml("system-prompt")


def _rank_system(text: str, query: str | None, allowance: int) -> Context:
    """How an oversized system prompt's sentences are ranked for the opening requests (`Rank` of
    `formats.system_prompt`): a run of the shipped `system-prompt` pipeline on that text alone."""
    return _system_pipeline().run(Source.from_text(text), query=query, budget=allowance)


def _quality_from_loss(context: Context, chunks: Sequence[Chunk], plan: ConversationPlan,
                       parts: list[Segment], counter: TokenCounter) -> tuple[ConversationPlan, list[Segment]]:
    """Put `validate.loss`'s retention in the metadata block instead of the rule draft's own signal
    count: the same measure on the same chunks and on the segments as they go out, the figure
    included (it is a number the measure may find in a message, so it is settled in turn). Up to
    `QUALITY_EXACT_CHARS` every message is measured, so a `validate.loss` step after this one gives
    the same figure; a longer history is measured on an even sample of its messages (every k-th),
    so the figure costs a bounded time however long the history is."""
    total = sum(len(c.text) for c in chunks)
    step = 1 if total <= QUALITY_EXACT_CHARS else math.ceil(total / QUALITY_SAMPLE_CHARS)
    measured = context.evolve(chunks=tuple(c for n, c in enumerate(chunks) if n % step == 0))
    shown: float | None = None
    retention = float(loss_report(measured.evolve(segments=tuple(parts)))["retention"])
    for _ in range(3):
        figure = f"{retention:.2f}"
        if shown is not None and f"{shown:.2f}" == figure:
            break
        fixed = _with_quality(str(plan.summary), retention)
        if counter.count(fixed) > plan.summary_tokens:  # a figure one token longer: none fits
            break
        shown = retention
        plan = plan.evolve(quality=round(retention, 3), summary=fixed)
        parts = [dataclasses.replace(part, text=text, tokens=counter.count(text))
                 if part.metadata.get("section") in ("metadata", "marker")
                 and (text := _with_quality(part.text, retention)) != part.text else part for part in parts]
        if not any(figure in c.text for c in measured.chunks):  # no message holds it: the measure stands
            break
        retention = float(loss_report(measured.evolve(segments=tuple(parts)))["retention"])
    return plan, parts


_QUALITY = regex.compile(r"(quality(?: score)?|质量分数) \d\.\d\d")


def _with_quality(text: str, quality: float) -> str:
    """`text` with its last quality figure (the metadata's, after any quoted text) set to `quality`."""
    found = list(_QUALITY.finditer(text))
    if not found:
        return text
    last = found[-1]
    return f"{text[:last.start()]}{last.group(1)} {quality:.2f}{text[last.end():]}"


# -- section budgets -------------------------------------------------------------------------------


def _cost_texts(item: hx.Item, short: bool = False) -> str:
    text = item.short if short and item.short else item.text
    return f"{text}, " if item.inline else f"- {text}\n"


def allocate(pools: Mapping[str, list[hx.Item]], room: int, counter: TokenCounter,
             zh: bool = False, fair: float = 0.5) -> dict[str, list[hx.Item]]:
    """Pick items per section in two passes. First a fair share (`fair` of the room) is water-filled
    by section weight up to each section's demand, and each section fills its share best-first; then
    the rest of the room goes to the remaining items anywhere, by value per token (so a tight budget
    favours dense lines: identifiers, short quotes).

    A line's value is its own (section weight x priority) plus the values it shows that nothing
    chosen shows yet (the inline identifiers it contains), so a line that repeats listed values is
    worth only what it adds, and a listed value that a chosen line shows is dropped again (its room
    goes back to the pool). A short form is worth the share of the line's distinct words it keeps."""
    return _Allocation(pools, counter, zh).choose(room, fair)


class _Allocation:
    """What `allocate` needs to know of the candidates, counted once for any number of rooms: each
    one's cost (full and short), the values it shows, and how much of a line its short form keeps."""

    def __init__(self, pools: Mapping[str, list[hx.Item]], counter: TokenCounter, zh: bool) -> None:
        self.pools = pools
        self.heads = {k: counter.count(f"## {_title(k, zh)}\n") + 2 for k in pools}
        self.costs: dict[str, list[tuple[int, int]]] = {}
        for key, items in pools.items():
            # a listed value costs itself and a comma (its space joins the next value's first token)
            full = counter.count_many([f" {it.text}," if it.inline else _cost_texts(it) for it in items])
            short = counter.count_many([_cost_texts(it, True) if it.short else "" for it in items])
            self.costs[key] = [(f, s if it.short else f) for it, f, s in zip(items, full, short, strict=True)]
        # the values lines can show: every inline item, worth its section weight x priority
        self.worth: dict[str, float] = {}
        for key, items in pools.items():
            for it in items:
                if it.inline:
                    value = hx.value_key(it.text)
                    self.worth[value] = max(self.worth.get(value, 0.0), WEIGHTS.get(key, 0.1) * it.priority)
        single = {v for v in self.worth if hx.WORD_RUN.fullmatch(v)}  # found by word, the rest by search
        spans = [(v, frozenset(map(hx.value_key, hx.WORD_RUN.findall(v)))) for v in self.worth
                 if v not in single]
        self.shows: dict[tuple[str, int, bool], tuple[str, ...]] = {}  # sorted: the same sums everywhere
        self.said: dict[tuple[str, int, bool], int] = {}  # distinct words: what a short form keeps
        for key, items in pools.items():
            for j, it in enumerate(items):
                if it.inline:
                    self.shows[key, j, False] = self.shows[key, j, True] = (hx.value_key(it.text),)
                    continue
                for is_short in (False, True) if it.short else (False,):
                    text = (it.short if is_short else it.text) or ""
                    lowered = text.lower()
                    words = set(hx.WORD_RUN.findall(text))
                    keys = set(map(hx.value_key, words))
                    self.shows[key, j, is_short] = tuple(sorted((keys & single).union(
                        v for v, runs in spans if runs <= keys
                        and hx.contains_value(lowered if v.islower() else text, words, v))))
                    self.said[key, j, is_short] = max(1, sum(1 for w in keys if len(w) > 2 and not (
                        w[0] == "m" and w[1:].isdigit())))  # a citation `m12` is no word of the line
        self.order = {key: rank for rank, key in enumerate(pools)}
        self.own: dict[tuple[str, int, bool], float] = {}  # a line's own value, short or full
        for key, items in pools.items():
            for j, it in enumerate(items):
                for is_short in (False, True) if it.short else (False,):
                    self.own[key, j, is_short] = 0.0 if it.inline else WEIGHTS.get(key, 0.1) * it.priority * (
                        min(1.0, self.said[key, j, True] / self.said[key, j, False]) if is_short else 1.0)

    def gain(self, key: str, j: int, short: bool, covered: set[str], opened: set[str]) -> float:
        """Value per token of an option, given the values already shown and the sections begun."""
        worth = self.worth
        value = self.own[key, j, short] + sum(worth[v] for v in self.shows[key, j, short] if v not in covered)
        # a list of values shares its heading: its first value does not pay for it alone
        head = 0 if key in opened or self.pools[key][j].inline else self.heads[key]
        return value / max(1, self.costs[key][j][1 if short else 0] + head)

    def choose(self, room: int, fair: float = 0.5) -> dict[str, list[hx.Item]]:
        pools, costs, heads, shows = self.pools, self.costs, self.heads, self.shows
        picked: dict[tuple[str, int], bool] = {}  # (section, index) -> shortened
        opened: set[str] = set()
        spent = 0
        for key, items in pools.items():  # the mandatory lines first, whatever they cost
            for j, item in enumerate(items):
                if item.mandatory:
                    picked[key, j] = False
                    spent += costs[key][j][0] + (0 if key in opened else heads[key])
                    opened.add(key)
        demand = {k: (0 if k in opened else heads[k])
                  + sum(c[0] for j, c in enumerate(costs[k]) if (k, j) not in picked) for k in pools}
        share: dict[str, float] = {}
        active = [k for k in pools if demand[k] > 0]
        remaining = float(room - spent) * fair
        while active:
            weight = sum(WEIGHTS.get(k, 0.1) for k in active)
            offer = {k: remaining * WEIGHTS.get(k, 0.1) / weight for k in active}
            met = [k for k in active if demand[k] <= offer[k]]
            if not met:
                share.update(offer)
                break
            for k in met:
                share[k] = demand[k]
                remaining -= demand[k]
                active.remove(k)
        for key, items in pools.items():
            head = 0 if key in opened else heads[key]
            allowance = share.get(key, 0.0) - head
            used = 0
            for j in sorted(range(len(items)), key=lambda j: -items[j].priority):
                if (key, j) in picked:
                    continue
                full, short = costs[key][j]
                if used + full <= allowance:
                    picked[key, j] = False
                    used += full
                elif items[j].short and used + short <= allowance:
                    picked[key, j] = True
                    used += short
            if used:
                opened.add(key)
                spent += used + head
        budget_left = room - spent
        for _ in range(3):  # fill; drop listed values a chosen line shows; fill the freed room again
            covered = {v for (key, j), short in picked.items() for v in shows[key, j, short]}
            heap = [(-self.gain(key, j, short, covered, opened), self.order[key], j, short, key)
                    for key, items in pools.items() for j in range(len(items)) if (key, j) not in picked
                    for short in ((False, True) if items[j].short else (False,))]
            heapq.heapify(heap)
            while heap:
                _, rank, j, short, key = heapq.heappop(heap)
                if (key, j) in picked:
                    continue
                current = self.gain(key, j, short, covered, opened)
                if heap and current < -heap[0][0] - 1e-12:  # stale: back in line with its real gain
                    heapq.heappush(heap, (-current, rank, j, short, key))
                    continue
                if current <= 0:
                    break
                cost = costs[key][j][1 if short else 0] + (0 if key in opened else heads[key])
                if cost > budget_left:
                    continue
                picked[key, j] = short
                budget_left -= cost
                opened.add(key)
                covered.update(shows[key, j, short])
            lines = {v for (key, j), short in picked.items() if not pools[key][j].inline
                     for v in shows[key, j, short]}
            redundant = [(key, j) for (key, j) in picked if pools[key][j].inline
                         and hx.value_key(pools[key][j].text) in lines]
            if not redundant:
                break
            for key, j in redundant:
                del picked[key, j]
                budget_left += costs[key][j][0]
                if not any(k == key for k, _ in picked):
                    budget_left += heads[key]
                    opened.discard(key)
        chosen: dict[str, list[hx.Item]] = {}
        for (key, j), short in sorted(picked.items(), key=lambda pick: (self.order[pick[0][0]], pick[0][1])):
            item = pools[key][j]
            if short:  # a copy: the pools stay as they were for another allocation
                item = replace(item, text=item.short or item.text, short=None)
            chosen.setdefault(key, []).append(item)
        return chosen


def _drop_weakest(chosen: dict[str, list[hx.Item]]) -> bool:
    """Drop the chosen line worth least (never a mandatory one); False when none is left to drop."""
    optional = [(k, it) for k, items in chosen.items() for it in items if not it.mandatory]
    if not optional:
        return False
    key, item = min(optional, key=lambda pair: pair[1].priority * WEIGHTS.get(pair[0], 0.1))
    chosen[key].remove(item)
    if not chosen[key]:
        del chosen[key]
    return True


def _title(key: str, zh: bool) -> str:
    for k, en, cn in SECTIONS:
        if k == key:
            return cn if zh else en
    return key


def render_sections(chosen: Mapping[str, list[hx.Item]], zh: bool = False) -> dict[str, str]:
    """Each section as Markdown: its heading, then its lines in message order (inline items, such as
    identifiers, as one comma-separated line, most cross-referenced first)."""
    sections = {}
    for key, _, _ in SECTIONS:
        items = chosen.get(key)
        if not items:
            continue
        inline = [it for it in items if it.inline]
        listed = sorted((it for it in items if not it.inline), key=lambda it: it.order)
        lines = [f"- {it.text}" for it in listed]
        if inline:
            lines.insert(0, "- " + ", ".join(it.text for it in sorted(inline, key=lambda it: -it.priority)))
        sections[key] = f"## {_title(key, zh)}\n" + "\n".join(lines)
    return sections


# -- the frame: marker, metadata, quality ----------------------------------------------------------


def _id_list(source_id: str, dropped: Sequence[int], earlier: Sequence[str]) -> str:
    first, last = dropped[0], dropped[-1]
    ids = f"{chunk_id(source_id, first)}..{last:04d}" if last != first else chunk_id(source_id, first)
    return ", ".join(f'"{i}"' for i in (ids, *earlier))


def _marker(source_id: str, dropped: Sequence[int], total: int, earlier: Sequence[str], zh: bool,
            expand_tool: str | None = EXPAND_TOOL, letters: Sequence[tuple[str, str, int]] = ()) -> str:
    """The summary's first line: which messages it replaces, the ids that give them back (through
    `expand_tool`, or just listed when the caller offers no such tool), and what a citation means:
    `mN` is message N of this history (the first id listed), a letter of `letters` message N of an
    earlier history (an example names its source)."""
    first, last = dropped[0], dropped[-1]
    ids = _id_list(source_id, dropped, earlier)
    is_id = "即 id" if zh else "is id"
    if earlier:  # several sources listed: `mN` numbers the first one's messages
        names = "mN 即第一个 id 的后缀 -000N" if zh else "mN is the first id's suffix -000N"
    else:
        names = "mN 即 id 后缀 -000N" if zh else "mN is id suffix -000N"
    names = "; ".join([names, *(f'{letter}{n} {is_id} "{chunk_id(source, n)}"'
                                for letter, source, n in letters)])
    if zh:
        how = f"原文：{expand_tool}(ids=[{ids}])" if expand_tool else f"原文存于 ids [{ids}]"
        return f"{SUMMARY_MARK} 以下是 m{first}–m{last}（共 {total} 条）的摘要。{how}；{names}。"
    how = f"Originals: {expand_tool}(ids=[{ids}])" if expand_tool else f"Originals stored under ids [{ids}]"
    return f"{SUMMARY_MARK} Summary of m{first}–m{last} (of {total}). {how}; {names}."


def short_marker(source_id: str, dropped: Sequence[int], expand_tool: str | None = EXPAND_TOOL) -> str:
    """The smallest summary (within MIN_SUMMARY_TOKENS): which messages went, and their ids (`mN`
    numbers the listed source's messages; a tight summary's carried lines cite the earlier summary
    they come from, one of them, so no other letter needs a definition)."""
    ids = _id_list(source_id, dropped, ())
    how = f": {expand_tool}([{ids}])" if expand_tool else f"; originals stored under ids [{ids}]"
    return f"{SUMMARY_MARK} m{dropped[0]}–m{dropped[-1]} compacted{how}"


def earlier_ids(history: hx.History, dropped: Sequence[int]) -> list[str]:
    """The ids earlier summaries in the dropped range point to (the way back to the oldest
    messages), whatever tool their markers named, or none."""
    found: list[str] = []
    for i in dropped:
        if history.kinds[i] == "summary":
            found.extend(hx.marker_ids(history.messages[i].content))
    return list(dict.fromkeys(found))


def _metadata(original: int, compressed: int, quality: float, role: str, zh: bool,
              tight: bool = False, chars: tuple[int, int] | None = None) -> str:
    """The metadata block: tokens (and `chars`: characters) before and after, their ratio, the
    quality score (`validate.loss`'s retention) and the role; `tight`: its one-line form for the
    marker line of a summary under a tight allowance (tokens only)."""
    ratio = compressed / original if original else 0.0
    before, after = chars or (0, 0)
    if tight:  # one line after the marker, without the characters (every token counts there)
        return f"({original}→{compressed} tokens, ratio {ratio:.2f}, quality {quality:.2f}, role {role})"
    if zh:
        size = f"，{before}→{after} 字符" if chars else ""
        return (f"## 压缩元信息\n- 原始 {original} tokens → 压缩后 {compressed}（比例 {ratio:.2f}）{size}；"
                f"质量分数 {quality:.2f}；角色 {role}")
    size = f"; {before}→{after} chars" if chars else ""
    return (f"## Compression Metadata\n- Original {original} tokens → {compressed} "
            f"(ratio {ratio:.2f}){size}; quality score {quality:.2f}; role: {role}")


def _frame(marker: str, body: str, metadata: str, tight: bool) -> str:
    """Marker, sections, metadata block; under a tight allowance the metadata joins the marker line."""
    return _join(f"{marker} {metadata}", body, "") if tight else _join(marker, body, metadata)


def _frame_size(counter: TokenCounter, marker: str, body: str, tight: bool) -> Callable[[str], int]:
    """`metadata -> counter.count(_frame(marker, body, metadata, tight))`, counting the long part once:
    the metadata block comes after a blank line and starts with "## ", where no token of the
    tiktoken encodings (nor of the approximate one) spans, so the two counts add up exactly. Under a
    tight allowance the metadata shares the marker's line, and the (short) frame is counted whole."""
    if tight:
        return lambda metadata: counter.count(_frame(marker, body, metadata, tight))
    rest = counter.count(_join(marker, body, "") + "\n\n")
    return lambda metadata: rest + counter.count(metadata)


def _join(marker: str, body: str, metadata: str) -> str:
    return "\n\n".join(part for part in (marker, body, metadata) if part)


def _readable(history: hx.History, scope: Sequence[int], draft: Draft, plan: Plan) -> float:
    kept = "\n".join(history.messages[i].content for i in (*plan.head, *plan.tail))
    return quality_score(history, scope, draft.text, kept)


def quality_score(history: hx.History, dropped: Sequence[int], text: str, kept_text: str) -> float:
    """Share of the dropped part's key signals still readable after compaction: edited files, error
    lines, user messages (their opening words) and the most cross-referenced identifiers, weighted."""
    visible = (text + "\n" + kept_text).lower()
    signals: list[tuple[float, str]] = []
    dropped_set = set(dropped)
    for action in history.actions:
        if action.index in dropped_set:
            signals.extend((2.0, p.rsplit("/", 1)[-1]) for p in action.writes)
            if action.failed and action.error:
                signals.append((1.5, action.error[:40]))
    for i in history.user_turns(dropped):
        signals.append((2.0, " ".join(history.messages[i].content.split())[:30]))
    for _, token, _, _, _ in hx.identifier_scores(history, dropped)[:30]:
        signals.append((1.0, token))
    signals = [(w, s.lower()) for w, s in signals if s.strip()]
    if not signals:
        return 1.0
    total = sum(w for w, _ in signals)
    flat = ""  # the visible text on one line, built once and only when a signal is not found as is
    found = 0.0
    for weight, signal in signals:
        if signal not in visible:
            flat = flat or " ".join(visible.split())
            if " ".join(signal.split()) not in flat:
                continue
        found += weight
    return found / total


def request_items(asked: Sequence[hx.Request], first_kept: bool, allowance: int, counter: TokenCounter,
                  zh: bool = False, share: float = REQUEST_SHARE) -> tuple[list[hx.Item], frozenset[int]]:
    """The request lines that open Primary Request and Intent, and the user messages they quote.

    The current request (the person's latest turn, when it is summarised) is quoted in full
    whenever it takes at most half the summary's allowance, and the first request (the task
    statement, when it is summarised too) in full when it fits in what the current one leaves of
    that half: such a line is mandatory, never shortened and never dropped. A current request over
    its half is quoted from its start, as much as `share` of the allowance holds (an eighth; more
    when a target ratio asks to fill the room) (mandatory too, every summary saying what is being
    worked on, but under a tight allowance, where the values the next turns need come first); a
    first request over what is left is an ordinary candidate, its start as long. When
    the first request is kept verbatim before the summary, a line says so (not under a tight
    allowance)."""
    half = allowance // 2
    items: list[hx.Item] = []
    covered = {r.index for r in asked if not r.carried}  # user turns (a carried one: its summary)
    for rank, request in enumerate(asked):
        label = hx.REQUEST_LABELS[request.which][1 if zh else 0]
        opening = f"{label} ({request.cite}): "
        line = opening + hx.quoted(request.text)
        cost = counter.count(f"- {line}\n")
        order = -3 + rank  # the current request first
        if cost <= half:
            items.append(hx.Item(line, (request.index,), 4.0, order, mandatory=True,
                                 short=_request_lead(opening, request.text, half // 2, counter)))
            half -= cost
        elif request.which == "current":
            room = min(max(half, int(share * allowance)) if share > REQUEST_SHARE else half,
                       max(MIN_SUMMARY_TOKENS, int(allowance * share)))
            shortened = _request_lead(opening, request.text, room, counter)
            items.append(hx.Item(shortened, (request.index,), 4.0, order, mandatory=allowance >= TIGHT,
                                 short=_request_lead(opening, request.text, room // 2, counter)))
            half -= counter.count(f"- {shortened}\n")
        elif share > REQUEST_SHARE:  # a room to fill: as much of the task's start as `share` holds
            items.append(hx.Item(_request_lead(opening, request.text, int(share * allowance), counter),
                                 (request.index,), 3.0, order,
                                 short=_request_lead(opening, request.text, 160, counter)))
        else:
            items.append(hx.Item(line, (request.index,), 3.0, order,
                                 short=_request_lead(opening, request.text, 160, counter)))
    if first_kept and allowance >= TIGHT:  # a tight room is left to values (the request is above)
        kept = "原始请求原文保留在上方。" if zh else "The original request is kept verbatim above."
        items.append(hx.Item(kept, (), 0.2, -1, mandatory=True))
    return items, frozenset(covered)


def _request_lead(opening: str, text: str, tokens: int, counter: TokenCounter) -> str:
    """A request line quoting the start of `text`, within about `tokens` tokens (an ellipsis where
    it is cut)."""
    room = max(8, tokens - counter.count(f"- {opening}\"\"\n") - 2)
    flat = " ".join(text.split())
    ids = counter.encode(flat)
    if len(ids) <= room:
        return f'{opening}"{flat}"'
    cut = counter.encoding.decode_bytes(ids[:room]).decode("utf-8", "ignore")
    space = cut.rfind(" ")
    cut = cut[:space] if space > len(cut) // 2 else cut
    return f'{opening}"{cut.rstrip()} …"'


def _next_step_items(history: hx.History, dropped: Sequence[int], tail: Sequence[int],
                     covered: frozenset[int] = frozenset()) -> list[hx.Item]:
    """The latest user instruction quoted verbatim (when it is not kept verbatim in the tail, nor
    quoted by a request line: `covered`)."""
    users = history.user_turns(dropped)
    if not users or any(history.kinds[i] == "user" for i in tail) or users[-1] in covered:
        return []
    i = users[-1]
    text = history.messages[i].content.strip()
    return [hx.Item(f"Latest instruction ({history.label(i)}m{i}):\n{hx.quote(text)}", (i,), 2.2, i,
                    short=f"Latest instruction ({history.label(i)}m{i}): \"{hx.lead(text, 300)}\"")]


def _chinese(history: hx.History) -> bool:
    """Whether the people and agents of a history write Chinese (tool output does not count): the
    shared rule, `compactor.text.language.is_chinese`, over their prose."""
    parts: list[str] = []
    size = 0
    for i, kind in enumerate(history.kinds):
        if kind in ("user", "assistant"):
            parts.extend(found := hx.sentences_of(history.messages[i].content[:4000], 6))
            size += sum(len(p) for p in found)
            if size >= 20000:  # enough prose to tell
                break
    return is_chinese(parts)


def _room_for_request(history: hx.History, source: Source, plan: Plan, costs: Sequence[int], limit: int,
                      settings: Mapping[str, Any], counter: TokenCounter) -> Plan:
    """A plan whose summary can quote the request being worked on in full: when the person's latest
    request (or the one an earlier summary quoted), a turn after the opening one, is summarised and
    the summary's room is under twice its size (a request line takes at most half the summary),
    fewer of the latest turns are kept verbatim until it fits. A request over half of the whole room
    stays a candidate line; a task statement that is the only request does not displace the latest
    turns (the summary quotes it as far as it can)."""
    citations = hx.Citations(history, plan.dropped, source.id)
    asked, _ = hx.requests(history, plan.dropped, citations)
    current = next((r for r in asked if r.which == "current"), None)
    everything, _ = hx.requests(history, range(len(history.messages)), citations)
    if len(everything) < 2:  # the task statement is the only request: the latest turns come first
        return plan
    if current is None or not plan.tail or any(
            current.text in history.messages[i].content for i in (*plan.head, *plan.tail)):
        return plan  # none, or kept verbatim anyway (an earlier summary quoted the task in the head)
    line = counter.count(hx.quoted(current.text)) + 12  # with its label and citation
    need = max(2 * line, line + FRAME_TOKENS)  # half the summary, and the marker and metadata beside it
    tail_cost = sum(costs[i] for i in plan.tail)
    if plan.summary_tokens >= need or plan.summary_tokens + tail_cost < need:
        return plan
    kept = set(plan.tail)
    # a pending tool call stays whatever keep_last says: count the complete turns only
    turns = sum(1 for unit in units(history.messages) if unit.start in kept and unit.complete)
    for keep in range(turns - 1, -1, -1):
        candidate = plan_compaction(history.messages, costs, limit, **{**settings, "keep_last": keep})
        if candidate.summary_tokens >= need:
            return candidate
    return plan


def _fill_share(value: Any) -> float:
    """The share of the budget an output must fill: `True` is `DEFAULT_FILL`, a number itself."""
    if value is True:
        return DEFAULT_FILL
    if isinstance(value, int | float) and not isinstance(value, bool) and 0 < value <= 1:
        return float(value)
    return 0.0


def _add_handoff(history: hx.History, given: roles.Handoff, pools: dict[str, list[hx.Item]],
                 kept: set[int]) -> None:
    """Lead Pending Tasks with the tasks handed to the role and Errors and fixes with the failures
    that concern it, each with what diagnosed and fixed it; the lines the extractors found for the
    same messages rank higher."""
    pending = pools.setdefault("pending", [])
    for i in given.pending:
        if i in kept:
            continue
        task = given.tasks.get(i) or hx.lead(history.messages[i].content, 300)
        pending[:] = [it for it in pending if it.messages != (i,)]
        pools["current"] = [it for it in pools.get("current", []) if it.messages != (i,)]
        pending.append(hx.Item(f"{history.label(i)}{task} (m{i})", (i,), 5.0, i,
                               short=f"{history.label(i)}{hx.lead(task, 140)} (m{i})"))
    errors = pools.setdefault("errors", [])
    concern = set(given.errors)
    told: set[int] = set()
    for item in errors:
        if concern & set(item.messages):
            item.priority *= 1.5
    for first, fixes, said, fixed in roles.error_threads(history, given):
        cited = {first, *fixes}
        if any(set(it.messages) >= {first} and set(it.messages) & set(fixes) for it in errors):
            continue  # a command's failure and fix the extractor already tells
        parts = [f"{history.label(first)}{hx.lead(said, 200)} (m{first})"]
        parts += [f"{history.label(j)}{hx.lead(line, 160)} (m{j})"
                  for j, line in zip(fixes, fixed, strict=True)]
        text = "; fix: ".join([parts[0], "; ".join(parts[1:])]) if fixes else parts[0]
        short = f"{history.label(first)}{hx.lead(said, 100)} (m{first})" + (
            f"; fix: {history.label(fixes[-1])}{hx.lead(fixed[-1], 100)} (m{fixes[-1]})" if fixes else "")
        errors.append(hx.Item(text, tuple(sorted(cited)), 4.0, first, short=short))
        told.update(range(first, max(cited) + 1))
    # a line of Problem Solving that only retells a thread (the report, the diagnosis) gives way to it
    pools["problem"] = [it for it in pools.get("problem", []) if not set(it.messages) <= told]


def _answers_role(history: hx.History, i: int, role: str) -> bool:
    j = i - 1
    while j >= 0 and history.kinds[j] == "output":
        j -= 1
    return j >= 0 and history.speakers[j] == role


def _main_role(history: hx.History) -> str:
    speakers = [history.speakers[i] for i, k in enumerate(history.kinds) if k == "assistant"]
    names = sorted(set(speakers))
    if not names:
        return "assistant"
    return names[0] if len(names) == 1 else "all (" + ", ".join(names) + ")"


def _with_reduced(history: hx.History, source: Source, dropped: Sequence[int]) -> hx.History:
    """The history read with the dropped tool results reduced by `compress.structured` (its
    `source.metadata["structured"]`), so the summary draws on their rows that matter; the messages
    kept verbatim, and the originals stored for `expand`, stay as they came."""
    reduced = source.metadata.get("structured") or {}
    swap = {i: reduced[str(i)] for i in dropped if str(i) in reduced}
    if not swap:
        return history
    return hx.History([replace(m, content=swap[i]) if i in swap else m
                       for i, m in enumerate(history.messages)])


def message_chars(message: Message) -> int:
    """A message's characters as it is sent: its text and its tool calls' names and arguments."""
    return len(message.content) + sum(len(c.name) + len(c.arguments) for c in calls(message))


def _message_segment(source: Source, index: int, message: Message, cost: int) -> Segment:
    label = speaker(message)
    return Segment(id=chunk_id(source.id, index), text=f"**{label}:** {message.content}".rstrip(),
                   chunk_ids=(chunk_id(source.id, index),), title=label, source_id=None, tokens=cost,
                   metadata=frozen_mapping({"message": index, "verbatim": True}))
