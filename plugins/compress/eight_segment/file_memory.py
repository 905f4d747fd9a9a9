"""The files a coding agent worked on last, kept verbatim so it need not read them again.

A coding agent's history is mostly file views and command output; after a compaction the agent
usually re-reads the files it was editing, paying for them twice. `keep_files=N` keeps the latest
view of the N files it read or edited most recently (what the last read showed, then the edits made
after it), up to a share of the summary's room; a view too long for what is left keeps its first
lines and says where the rest is.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import regex

from compactor.plugins.compress.eight_segment import history as hx
from compactor.text.tokens import TokenCounter

#: Commands whose output is (part of) a file's content, not a search over files.
_VIEW = regex.compile(r"^\s*(?:cat|nl|head|tail|less|more|open|view|sed\s+-n|bat)\b")
_BACKTICKS = regex.compile(r"`{3,}")
_VIEW_TOOL = regex.compile(r"(?i)read|view|open|cat|show|get_file|file_content")


@dataclass(frozen=True, slots=True)
class FileView:
    """The latest content of one file as the history shows it."""

    path: str
    read_at: int | None  # the message holding the latest view (a tool output)
    content: str
    edits: tuple[tuple[int, str], ...]  # (message, new text) of edits after that view
    last: int  # the last message that touched the file


def recent_files(history: hx.History, scope: Sequence[int], count: int) -> list[FileView]:
    """The `count` files read or edited most recently within `scope`, latest first."""
    if count <= 0:
        return []
    inside = set(scope)
    views: dict[str, tuple[int, str]] = {}
    edits: dict[str, list[tuple[int, str]]] = {}
    last: dict[str, int] = {}
    for action in history.actions:
        if action.index not in inside:
            continue
        viewing = (action.call is None and _VIEW.match(action.text)) or (
            action.call is not None and _VIEW_TOOL.search(action.name) and not action.writes)
        for path in action.reads:
            last[path] = max(last.get(path, -1), action.index)
            if viewing and action.result is not None and action.result in inside and not action.failed:
                views[path] = (action.result, history.messages[action.result].content)
                edits.pop(path, None)  # the view shows the file after earlier edits
        for path in action.writes:
            last[path] = max(last.get(path, -1), action.index)
            snippet = action.snippets.get(path)  # else the command says what changed
            edits.setdefault(path, []).append((action.index, snippet or f"`{action.text}`"))
    ranked = sorted(last, key=lambda p: -last[p])[:count]
    out = []
    for path in ranked:
        read_at, content = views.get(path, (None, ""))
        if read_at is None and not edits.get(path):
            continue
        out.append(FileView(path, read_at, content, tuple(edits.get(path, ())), last[path]))
    return out


def render_views(views: Sequence[FileView], room: int, counter: TokenCounter) -> tuple[list[str], int]:
    """Markdown blocks of the views within `room` tokens (latest file first; a view that does not fit
    keeps its first lines), and their cost."""
    blocks: list[str] = []
    spent = 0
    for view in views:
        parts = []
        if view.read_at is not None:
            parts.append((f"`{view.path}` as last shown (m{view.read_at}):", view.content))
        for index, text in view.edits:
            parts.append((f"then edited (m{index}):", text))
        lines_out: list[str] = []
        for title, text in parts:
            if text.startswith("`") and text.endswith("`") and "\n" not in text:  # a command, on one line
                line = f"{title} {text}"
                cost = counter.count(line) + 1
                if spent + cost > room:
                    break
                lines_out.append(line)
                spent += cost
                continue
            body = text.strip("\n")
            fence = "`" * max(3, 1 + max((len(run) for run in _BACKTICKS.findall(body)), default=0))
            block = f"{title}\n{fence}\n{body}\n{fence}"
            cost = counter.count(_indent(block)) + 1
            if spent + cost > room:
                shorter = _cut(title, body, fence, room - spent - 1, counter)
                if shorter is None:
                    break
                block = shorter
                cost = counter.count(_indent(block)) + 1
            lines_out.append(block)
            spent += cost
        if lines_out:
            blocks.append("- " + _indent("\n".join(lines_out)))
        if spent >= room:
            break
    spent = counter.count("\n".join(blocks)) + 1 if blocks else 0
    while blocks and spent > room:  # the estimate was short: the latest-worked file wins
        blocks.pop()
        spent = counter.count("\n".join(blocks)) + 1 if blocks else 0
    return blocks, spent


def _indent(text: str) -> str:
    """A block as it sits inside a list item."""
    return text.replace("\n", "\n  ")


def _cut(title: str, body: str, fence: str, room: int, counter: TokenCounter) -> str | None:
    """The first lines of a view that fit in `room` tokens, with a note of how many were left out."""
    lines = body.splitlines()
    low, high = 0, len(lines)
    best: str | None = None
    while low < high:  # the most leading lines that fit
        mid = (low + high + 1) // 2
        shown = "\n".join(lines[:mid])
        block = f"{title}\n{fence}\n{shown}\n{fence}\n({len(lines) - mid} more lines: expand the message)"
        if counter.count(_indent(block)) <= room:
            best, low = block, mid
        else:
            high = mid - 1
    return best if low >= 3 else None
