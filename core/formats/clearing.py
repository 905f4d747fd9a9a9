"""The cheap tiers of history compaction: old tool outputs cleared into stubs, structured ones reduced.

Most of an agent's window is tool output the agent has already acted on. Before anything is
summarised, the outputs older than the last `keep` become one-line stubs that name the tool, the size
and the id that gives the original back (`expand`), plus the identifiers the output held (ids, codes,
dates: what a later call most often reuses). A stub depends only on the message it replaces, so once
written it never changes and the prompt prefix before the newest clearing stays cacheable. The
second tier reduces structured outputs (JSON, CSV, tables) by their structure
(`compactor.formats.structured`), again deterministically, with the original stored under the id
the reduction cites.

Which messages are tool output: `tool`/`function` results and content-block `tool_result`s; for
agents that act through text commands, a user-role message that answers an assistant message ending
in a command block (mini-swe-agent's `<returncode>`, SWE-agent's `[File: ...]`). A person's messages
and the first request are never cleared.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from compactor.document import Chunk, Message, Source, chunk_id
from compactor.formats.messages import (
    answers,
    calls,
    conversation_source,
    message_tokens,
    parse_message,
    to_dict,
)
from compactor.formats.structured import reduce_text
from compactor.text.tokens import TokenCounter

#: The first characters of every stub (a stub is never cleared again).
STUB_MARK = "[compactor: cleared"
#: The first characters of a reduced output.
REDUCED_MARK = "[compactor: reduced"
_MARKS = (STUB_MARK, REDUCED_MARK)
#: Output markers of text-command agents (their observations come back as user messages).
_OUTPUT_START = re.compile(
    r"^\s*(?:<returncode>|<output>|\[File: |\(Open file: |Observation\s*:|Traceback \(most recent|"
    r"diff --git |Your command ran successfully|Your proposed edit|Found \d+ matches|No matches found|"
    r"\$ |exit code\s*:?\s*-?\d|/bin/\w+: )", re.IGNORECASE)
_COMMAND_END = re.compile(r"(?:```[^\n`]*\n(?:[^\n]*\n){0,3}?[^\n]*```|<command>.*?</command>)\s*$",
                          re.DOTALL)
#: Identifier-shaped values an output holds: codes with a digit or an underscore, emails, dates.
_VALUE = re.compile(r"(?<![\w@.-])(?:[\w.+-]+@[\w-]+\.[\w.-]+|\d{4}-\d{2}-\d{2}|"
                    r"[A-Za-z][\w-]*\d[\w-]*|\d+[A-Za-z][\w-]*|[A-Za-z]+_[\w-]+)(?![\w@])")


@dataclass(frozen=True, slots=True)
class Tiered:
    """What a cheap tier did: the new message list, the originals it replaced (chunk id -> chunk and
    its source, to store for `expand`), and tokens before and after."""

    messages: list[Any]
    replaced: dict[int, str] = field(default_factory=dict)  # message index -> id of its original
    stored: list[tuple[Source, Chunk]] = field(default_factory=list)
    saved: int = 0


def is_tiered(message: Message) -> bool:
    """Whether a message is already a stub or a reduction (never touched again)."""
    return message.content.startswith(_MARKS)


def output_indices(messages: Sequence[Message]) -> list[int]:
    """Indices of the tool outputs of a history (see the module's docstring), oldest first."""
    found: list[int] = []
    first_user = next((i for i, m in enumerate(messages) if m.role == "user" and answers(m) is None), -1)
    for i, message in enumerate(messages):
        result = answers(message) is not None
        text_output = (message.role == "user" and i > first_user >= 0 and i > 0
                       and messages[i - 1].role == "assistant" and not calls(messages[i - 1])
                       and bool(_OUTPUT_START.match(message.content)
                                or _COMMAND_END.search(messages[i - 1].content)))
        if result or text_output:
            found.append(i)
    return found


def request_indices(messages: Sequence[Message]) -> tuple[int, ...]:
    """The first request and the latest message from the person (user turns that are not tool
    output): what a compaction must never clear."""
    outputs = set(output_indices(messages))
    people = [i for i, m in enumerate(messages) if m.role == "user" and i not in outputs
              and not m.content.startswith("[compactor")]  # a summary or a stub is no request
    return tuple(dict.fromkeys(people[:1] + people[-1:]))


_REF = re.compile(r'(?:ids=\[|id )"([^"]+)"')


def stub_ref(text: str) -> str | None:
    """The id a stub or a reduction cites for its original."""
    match = _REF.search(text.split("\n", 1)[0])
    return match.group(1) if match else None


def tool_name(messages: Sequence[Message], index: int) -> str:
    """The tool that produced output `index` (the call it answers), or "command" for text agents."""
    message = messages[index]
    if message.name:
        return message.name
    wanted = answers(message)
    for j in range(index - 1, max(-1, index - 64), -1):
        for call in calls(messages[j]):
            if wanted is None or call.id in wanted or wanted == (None,):
                return call.name
    return "tool" if wanted is not None else "command"


def original_of(message: Message) -> tuple[Source, Chunk]:
    """The message stored as its own source: its id depends only on the message, so the stub that
    cites it is the same whenever it is written."""
    source = conversation_source([message])
    start, end = source.unit_spans[0]
    chunk = Chunk(id=chunk_id(source.id, 0), source_id=source.id, index=0, start=start, end=end,
                  text=source.original[start:end], tokens=0, units=(0, 1))
    return source, chunk


def stub_text(messages: Sequence[Message], index: int, tokens: int, ref: str, expand_tool: str | None,
              values: int = 8) -> str:
    """The one line that replaces an output: tool, size, the id to expand, its identifiers."""
    name = tool_name(messages, index)
    found: list[str] = []
    if values:
        seen: set[str] = set()
        for match in _VALUE.finditer(messages[index].content[:20_000]):
            value = match.group(0).strip(".-")
            if 3 <= len(value) <= 40 and value.lower() not in seen:
                seen.add(value.lower())
                found.append(value)
                if len(found) >= values:
                    break
    how = f'{expand_tool}(ids=["{ref}"])' if expand_tool else f'id "{ref}"'
    held = f"; it held {', '.join(found)}" if found else ""
    return f"{STUB_MARK} {name} output, {tokens} tokens: {how}{held}]"


def _replace(item: Any, message: Message, text: str) -> dict[str, Any]:
    data = to_dict(message)
    content = data.get("content")
    if isinstance(content, list):  # content blocks: the result blocks' text becomes the stub
        blocks = [b for b in content if isinstance(b, dict) and b.get("type") == "tool_result"]
        if blocks:
            for n, block in enumerate(blocks):
                block["content"] = text if n == 0 else ""
            # what the person wrote beside the results (text, images) is theirs, never tool output
            data["content"] = blocks + [b for b in content if not (isinstance(b, dict)
                                                                   and b.get("type") == "tool_result")]
            return data
    data["content"] = text
    return data


def clear_outputs(items: Sequence[Any], messages: Sequence[Message], counter: TokenCounter, *,
                  keep: int = 3, exclude_tools: Iterable[str] = (), clear_at_least: int = 0,
                  expand_tool: str | None = "expand_context", protect: Iterable[int] = (),
                  values: int = 8, costs: Sequence[int] | None = None) -> Tiered | None:
    """Tier 0: every output but the last `keep` (and those of `exclude_tools`, and `protect`ed
    indices) as a stub; None when that saves fewer than `clear_at_least` tokens (a clearing breaks
    the provider's prompt cache from the first stub on, so it has to be worth it) or nothing.
    `costs`: each message's `message_tokens` when the caller has them (else counted here)."""
    excluded = set(exclude_tools)
    kept = set(protect)
    outputs = output_indices(messages)
    candidates = outputs[:-keep] if keep else outputs
    out = list(items)
    replaced: dict[int, str] = {}
    stored: list[tuple[Source, Chunk]] = []
    saved = 0
    for i in candidates:
        message = messages[i]
        if i in kept or is_tiered(message) or tool_name(messages, i) in excluded:
            continue
        cost = costs[i] if costs is not None else message_tokens(message, counter)
        source, chunk = original_of(message)
        stub = stub_text(messages, i, cost, chunk.id, expand_tool, values)
        replacement = _replace(items[i], message, stub)
        new_cost = message_tokens(parse_message(replacement, "stub"), counter)
        if new_cost >= cost:
            continue
        out[i] = replacement
        replaced[i] = chunk.id
        stored.append((source, chunk))
        saved += cost - new_cost
    if not replaced or saved < max(1, clear_at_least):
        return None
    return Tiered(out, replaced, stored, saved)


def reduce_outputs(items: Sequence[Any], messages: Sequence[Message], counter: TokenCounter, *,
                   references: Iterable[str] = (), min_tokens: int = 200,
                   expand_tool: str | None = "expand_context", protect: Iterable[int] = (),
                   costs: Sequence[int] | None = None) -> Tiered | None:
    """Tier 1: structured outputs (JSON, CSV, tables) of at least `min_tokens` reduced by their
    structure, keeping the rows that the rest of the history mentions; None when nothing shrank.
    `costs`: each message's `message_tokens` when the caller has them (else counted here)."""
    kept = set(protect)
    out = list(items)
    replaced: dict[int, str] = {}
    stored: list[tuple[Source, Chunk]] = []
    saved = 0
    refs = list(references)
    for i in output_indices(messages):
        message = messages[i]
        if i in kept or is_tiered(message):
            continue
        cost = costs[i] if costs is not None else message_tokens(message, counter)
        if cost < min_tokens:
            continue
        source, chunk = original_of(message)
        reduced = reduce_text(message.content, references=refs, ref=chunk.id)
        if reduced is None or reduced.text == message.content:
            continue
        how = f"{expand_tool}(ids=[\"{chunk.id}\"])" if expand_tool else f'id "{chunk.id}"'
        name = tool_name(messages, i)
        text = f"{REDUCED_MARK} {name} output, {cost} tokens; in full: {how}]\n{reduced.text}"
        replacement = _replace(items[i], message, text)
        new_cost = message_tokens(parse_message(replacement, "reduction"), counter)
        if new_cost >= cost:
            continue
        out[i] = replacement
        replaced[i] = chunk.id
        stored.append((source, chunk))
        saved += cost - new_cost
    if not replaced:
        return None
    return Tiered(out, replaced, stored, saved)

