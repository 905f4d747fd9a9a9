"""Provider wire formats: OpenAI Chat Completions, Anthropic Messages and OpenAI Responses histories.

The compaction works on chat-shaped messages (`compactor.formats.messages`). Anthropic's messages
are read as they are (content blocks `tool_use` / `tool_result` pair up there); a Responses `input`
list is not made of messages, so each item becomes a stand-in chat message that carries the items it
stands for (`MARK`): a run of model output (reasoning, assistant text, calls) is one assistant
message with its calls, each call output one tool message, every other message itself. Items the
compaction must not touch (a provider's own compaction item, item types it does not know) are set
aside with their place and put back there afterwards, counted in the budget as they are.

`Translation.back` writes a compacted chat list in the provider's shape again: kept items come
back as they were read, the summary is a user turn of that format, and an Anthropic list keeps the
Messages API's rules (first turn user, roles alternate, tool results first in their turn).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, cast

from compactor.errors import InputError
from compactor.formats.messages import as_mapping, block_text
from compactor.text.tokens import TokenCounter

Wire = Literal["chat", "anthropic", "responses"]
WIRES: tuple[Wire, ...] = ("chat", "anthropic", "responses")
#: The key of a stand-in chat message that holds what it stands for (never sent anywhere).
MARK = "_compactor_wire"
#: Content blocks only the Anthropic Messages API has.
_ANTHROPIC_BLOCKS = frozenset({"tool_use", "tool_result", "thinking", "redacted_thinking", "document",
                               "server_tool_use", "web_search_tool_result", "search_result"})
#: Content parts only the Responses API has.
_RESPONSES_PARTS = frozenset({"input_text", "output_text", "input_image", "input_file", "refusal",
                              "input_audio"})
#: Chat Completions fields and parts no other format has.
_CHAT_FIELDS = ("tool_calls", "tool_call_id", "function_call")
_CHAT_PARTS = frozenset({"image_url", "input_audio_chat"})
_ROLES = frozenset({"user", "assistant", "system", "developer", "tool", "function"})
#: Characters per token for opaque (often base64) payloads: a deliberate over-estimate of their cost.
OPAQUE_CHARS_PER_TOKEN = 3


def check_wire(value: Any) -> Wire:
    """`format=` as given by a caller, checked."""
    if value not in WIRES:
        raise InputError(f"format must be one of {', '.join(WIRES)}, not {value!r}")
    return cast(Wire, value)


def wire_of(items: Iterable[Any]) -> Wire:
    """The format a history is written in, from its items: any Responses item or part makes it
    "responses", any Anthropic-only content block "anthropic"; plain `{"role", "content": str}`
    lists (which both chat APIs accept) and anything with Chat Completions fields are "chat"."""
    chat = anthropic = False
    for item in items:
        data = _mapping(item)
        if data is None:
            continue
        if isinstance(data.get("type"), str) or "role" not in data:
            return "responses"  # chat and Anthropic messages have no `type`, and all have a role
        parts = _parts(data.get("content"))
        if parts & _RESPONSES_PARTS:
            return "responses"
        chat = chat or (any(key in data for key in _CHAT_FIELDS) or bool(parts & _CHAT_PARTS)
                        or data.get("role") in ("system", "developer", "tool", "function"))
        anthropic = anthropic or bool(parts & _ANTHROPIC_BLOCKS) or _anthropic_image(data.get("content"))
    return "anthropic" if anthropic and not chat else "chat"


def _mapping(item: Any) -> Mapping[str, Any] | None:
    try:
        return as_mapping(item, "item")
    except InputError:
        return None


def _parts(content: Any) -> set[str]:
    if not isinstance(content, list):
        return set()
    return {str(b["type"]) for b in content if isinstance(b, Mapping) and isinstance(b.get("type"), str)}


def _anthropic_image(content: Any) -> bool:
    """An `image` block with a `source` (Anthropic's shape; OpenAI's images are `image_url`)."""
    return isinstance(content, list) and any(
        isinstance(b, Mapping) and b.get("type") == "image" and "source" in b for b in content)


# -- reading a history as chat messages ------------------------------------------------------------


@dataclass(slots=True)
class Translation:
    """A history as chat-shaped messages, and what is needed to write a compaction of it back."""

    wire: Wire
    #: The chat-shaped messages the compaction reads (for "chat" and "anthropic": the items).
    messages: list[Any]
    #: Items passed through untouched: (their index in the input, the item).
    opaque: list[tuple[int, Any]] = field(default_factory=list)
    #: What the opaque items cost (an over-estimate for encrypted payloads).
    opaque_tokens: int = 0

    def back(self, out: Sequence[Any], *, summary: str | None = None,
             added: Iterable[str] = ()) -> list[Any]:
        """A compacted chat list (the compaction of `messages`) in the history's own format.
        `summary` and `added` (pin texts) name the messages the compaction wrote."""
        if self.wire == "chat":
            return list(out)
        new = {summary, *added} - {None}
        if self.wire == "anthropic":
            return anthropic_turns(out, new)
        return self._responses(out, new)

    def _responses(self, out: Sequence[Any], new: set[Any]) -> list[Any]:
        items: list[Any] = []
        origins: list[int | None] = []
        for message in out:
            data = _mapping(message) or {}
            mark = data.get(MARK)
            if isinstance(mark, Mapping):
                for at, item in _stood_for(mark, data):
                    items.append(item)
                    origins.append(at)
            else:
                items.append(responses_message(str(data.get("role") or "user"), _text_of(data)))
                origins.append(None)
        for at, item in self.opaque:  # back at their place: before the first kept item that followed
            position = next((n for n, o in enumerate(origins) if o is not None and o > at), len(items))
            items.insert(position, item)
            origins.insert(position, at)
        return items


def to_chat(items: Sequence[Any], wire: Wire, counter: TokenCounter) -> Translation:
    """The history in `wire` as chat-shaped messages the compaction reads."""
    if wire != "responses":
        return Translation(wire, list(items))
    translation = Translation(wire, [])
    run: list[tuple[int, Mapping[str, Any]]] = []  # the model's output items being gathered

    def close_run() -> None:
        if run:
            translation.messages.append(_assistant_stand_in(run))
            run.clear()

    for at, item in enumerate(items):
        data = _mapping(item)
        if data is None:
            raise InputError(f"input item {at}: an item must be a mapping, not {type(item).__name__}")
        kind = data.get("type")
        role = data.get("role")
        if kind == "reasoning" or (_is_message(data) and role == "assistant") or _is_call(data):
            run.append((at, data))
        elif _is_message(data) and role in _ROLES:
            close_run()
            translation.messages.append(_message_stand_in(at, data))
        elif _is_output(data):
            close_run()
            translation.messages.append(_output_stand_in(at, data))
        else:  # a provider's compaction item, an item reference, a type unknown here
            translation.opaque.append((at, item))
            translation.opaque_tokens += opaque_tokens(data, counter)
    close_run()
    return translation


def _is_message(data: Mapping[str, Any]) -> bool:
    kind = data.get("type")
    return (kind == "message" or kind is None) and isinstance(data.get("role"), str)


def _is_call(data: Mapping[str, Any]) -> bool:
    kind = data.get("type")
    return isinstance(kind, str) and kind.endswith("_call") and isinstance(data.get("call_id"), str)


def _is_output(data: Mapping[str, Any]) -> bool:
    kind = data.get("type")
    return isinstance(kind, str) and kind.endswith("_call_output") and isinstance(data.get("call_id"), str)


def _assistant_stand_in(run: Sequence[tuple[int, Mapping[str, Any]]]) -> dict[str, Any]:
    """One assistant message for a run of model output: its text, its reasoning summaries as
    `thinking` blocks (counted, not summarised) and its calls."""
    blocks: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []
    for _, data in run:
        if data.get("type") == "reasoning":
            thought = "\n".join(block_text(part) for part in data.get("summary") or [] if block_text(part))
            if thought:
                blocks.append({"type": "thinking", "thinking": thought})
        elif _is_call(data):
            arguments = data.get("arguments", data.get("input", data.get("action")))
            calls.append({"id": data["call_id"], "type": "function",
                          "function": {"name": str(data.get("name") or data.get("type")),
                                       "arguments": arguments if isinstance(arguments, str)
                                       else json.dumps(arguments, ensure_ascii=False)}})
        else:
            blocks.extend(_text_blocks(data.get("content")))
    message: dict[str, Any] = {"role": "assistant", "content": blocks or None}
    if calls:
        message["tool_calls"] = calls
    message[MARK] = {"at": [at for at, _ in run], "items": [d for _, d in run], "content": blocks or None}
    return message


def _message_stand_in(at: int, data: Mapping[str, Any]) -> dict[str, Any]:
    content = data.get("content")
    text: Any = content if isinstance(content, str) else _text_blocks(content)
    return {"role": data["role"], "content": text, MARK: {"at": [at], "items": [data], "content": text}}


def _output_stand_in(at: int, data: Mapping[str, Any]) -> dict[str, Any]:
    output = data.get("output")
    text: Any = output if isinstance(output, str) else (
        _text_blocks(output) if isinstance(output, list) else json.dumps(output, ensure_ascii=False))
    return {"role": "tool", "tool_call_id": data["call_id"], "content": text,
            MARK: {"at": [at], "items": [data], "content": text}}


def _text_blocks(content: Any) -> list[dict[str, Any]]:
    """Responses content parts as chat parts: text of any kind, images kept as image parts (an
    image's cost is counted as one)."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    blocks: list[dict[str, Any]] = []
    for part in content or []:
        if not isinstance(part, Mapping):
            continue
        kind = part.get("type")
        text = part.get("text", part.get("refusal"))
        if isinstance(text, str):
            blocks.append({"type": "text", "text": text})
        elif kind in ("input_image", "image_url", "image"):
            blocks.append({"type": "input_image"})
        elif kind == "input_file":
            blocks.append({"type": "text", "text": f"[file {part.get('filename') or part.get('file_id')}]"})
    return blocks


def _text_of(data: Mapping[str, Any]) -> str:
    content = data.get("content")
    if isinstance(content, str):
        return content
    return "\n".join(t for t in (block_text(b) for b in content or []) if t)


def _stood_for(mark: Mapping[str, Any], data: Mapping[str, Any]) -> list[tuple[int, Any]]:
    """The items a stand-in was made of; when the compaction rewrote its text (a tool output
    cleared into a stub, a system message sent as an excerpt), the item with that text."""
    pairs = list(zip(mark["at"], mark["items"], strict=True))
    if data.get("content") == mark.get("content") or len(pairs) != 1:
        return pairs
    at, item = pairs[0]
    text = _text_of(data)
    changed = copy.deepcopy(dict(item))
    if _is_output(item):
        changed["output"] = text
    elif isinstance(item.get("content"), str):
        changed["content"] = text
    else:
        kind = "output_text" if item.get("role") == "assistant" else "input_text"
        changed["content"] = [{"type": kind, "text": text}]
    return [(at, changed)]


def responses_message(role: str, text: str) -> dict[str, Any]:
    """A message item the compaction writes (the summary, a pin) in the Responses shape."""
    kind = "output_text" if role == "assistant" else "input_text"
    role = role if role in ("user", "assistant", "system", "developer") else "user"
    return {"type": "message", "role": role, "content": [{"type": kind, "text": text}]}


def opaque_tokens(data: Mapping[str, Any], counter: TokenCounter) -> int:
    """What an item passed through costs: its text fields counted, long opaque strings (encrypted
    content, base64) estimated by length, on the high side."""
    total = 0
    for value in _strings(data):
        total += (len(value) // OPAQUE_CHARS_PER_TOKEN + 1 if len(value) > 200 and " " not in value[:200]
                  else counter.count(value))
    return total + 3


def _strings(value: Any) -> Iterable[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _strings(item)


def tool_in(tool: Mapping[str, Any], wire: Wire) -> dict[str, Any]:
    """A Chat Completions function tool (such as `compactor.EXPAND_TOOL`) as `wire` declares tools:
    Anthropic's `{name, description, input_schema}`, Responses' flat `{type: function, name, ...}`."""
    function = tool.get("function") if isinstance(tool.get("function"), Mapping) else tool
    assert isinstance(function, Mapping)
    if wire == "chat":
        return copy.deepcopy(dict(tool))
    schema = copy.deepcopy(function.get("parameters") or {"type": "object", "properties": {}})
    name, description = function["name"], function.get("description", "")
    if wire == "anthropic":
        return {"name": name, "description": description, "input_schema": schema}
    return {"type": "function", "name": name, "description": description, "parameters": schema}


# -- Anthropic Messages ----------------------------------------------------------------------------


def anthropic_turns(out: Sequence[Any], new: set[Any]) -> list[Any]:
    """A compacted list as valid Anthropic messages: what the compaction wrote (`new`: the summary,
    pins) as user text blocks, and turns of the same role merged into one (the summary joins the
    turn next to it), tool results first in their turn. Kept turns that need no merge are the
    dicts as read."""
    turns: list[Any] = []
    for message in out:
        data = _mapping(message)
        if data is not None and isinstance(data.get("content"), str) and data.get("content") in new:
            message = {"role": "user", "content": [{"type": "text", "text": data["content"]}]}
            data = message
        if turns and data is not None and _role(turns[-1]) == data.get("role"):
            turns[-1] = _merged(turns[-1], data)
        else:
            turns.append(message)
    if turns and _role(turns[0]) == "assistant":  # the API wants a user turn first
        turns.insert(0, {"role": "user", "content": [{"type": "text", "text": "[compactor] (continued)"}]})
    return turns


def _role(message: Any) -> Any:
    data = _mapping(message)
    return data.get("role") if data is not None else None


def _merged(first: Any, second: Mapping[str, Any]) -> dict[str, Any]:
    """Two turns of one role as one: their blocks in order, tool results moved first."""
    head = _mapping(first) or {}
    blocks = [*_blocks(head.get("content")), *_blocks(second.get("content"))]
    results = [b for b in blocks if isinstance(b, Mapping) and b.get("type") == "tool_result"]
    rest = [b for b in blocks if not (isinstance(b, Mapping) and b.get("type") == "tool_result")]
    merged = {key: value for key, value in head.items() if key != "content"}
    merged["content"] = [*results, *rest]
    return merged


def _blocks(content: Any) -> list[Any]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    return copy.deepcopy(list(content or []))
