"""Provider wire formats: OpenAI Chat Completions, Anthropic Messages and OpenAI Responses histories.

The compaction works on chat-shaped messages (`compactor.formats.messages`), so each provider
history is read as stand-in chat messages that carry what they stand for (`MARK`), and the same
conversation reads the same in every format (the same outputs cleared, the same summary). An
Anthropic assistant turn is one assistant message (its `tool_use` blocks as calls), a user turn one
tool message per `tool_result` block plus a user message for the rest. In a Responses `input` list a
run of model output (reasoning, assistant text, calls) is one assistant message with its calls,
each call output one tool message, every other message itself. Items the compaction must not touch
(a provider's own compaction item, item types it does not know) are set aside with their place and
put back there afterwards, counted in the budget as they are.

`Translation.back` writes a compacted chat list in the provider's shape again: kept items come
back as they were read (a turn partly kept or with a result cleared keeps its other blocks and their
keys: `cache_control`, `is_error`, a thinking block's `signature`), the summary is a user turn of that
format, and an Anthropic list keeps the Messages API's rules (first turn user, roles alternate, tool
results first in their turn).
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
    #: The chat-shaped messages the compaction reads (for "chat": the items).
    messages: list[Any]
    #: Items passed through untouched: (their index in the input, the item).
    opaque: list[tuple[int, Any]] = field(default_factory=list)
    #: What the opaque items cost (an over-estimate for encrypted payloads).
    opaque_tokens: int = 0
    #: The history as read (a stand-in's `MARK` names its items by their index here).
    items: list[Any] = field(default_factory=list)

    def back(self, out: Sequence[Any], *, summary: str | None = None,
             added: Iterable[str] = ()) -> list[Any]:
        """A compacted chat list (the compaction of `messages`) in the history's own format.
        `summary` and `added` (pin texts) name the messages the compaction wrote."""
        if self.wire == "chat":
            return list(out)
        if self.wire == "anthropic":
            return self._anthropic(out)
        return self._responses(out)

    def _responses(self, out: Sequence[Any]) -> list[Any]:
        items: list[Any] = []
        origins: list[int | None] = []
        for message in out:
            data = _mapping(message) or {}
            mark = data.get(MARK)
            if isinstance(mark, Mapping):
                for at, item in _stood_for(mark, data, self.items):
                    items.append(item)
                    origins.append(at)
            else:
                items.append(responses_message(str(data.get("role") or "user"), _text_of(data)))
                origins.append(None)
        for at, item in self.opaque:  # back at their place: before the first kept item that followed
            position = next((n for n, o in enumerate(origins) if o is not None and o > at), len(items))
            items.insert(position, copy.deepcopy(item))
            origins.insert(position, at)
        return items

    def _anthropic(self, out: Sequence[Any]) -> list[Any]:
        """Stand-ins of one turn back as that turn (as read when all of it is there unchanged),
        what the compaction wrote as user text turns, then the Messages API's rules."""
        turns: list[tuple[Any, int | None]] = []  # (the turn, its index in the input; None: written)
        group: list[Mapping[str, Any]] = []

        def close_group() -> None:
            if group:
                at = int(group[0][MARK]["at"][0])
                turns.append((_anthropic_turn(self.items[at], group), at))
                group.clear()

        for message in out:
            data = _mapping(message) or {}
            mark = data.get(MARK)
            if isinstance(mark, Mapping):
                if group and group[0][MARK]["at"] != mark["at"]:
                    close_group()
                group.append(data)
                continue
            close_group()
            text = _text_of(data)
            if text:
                role = "assistant" if data.get("role") == "assistant" else "user"
                turns.append(({"role": role, "content": [{"type": "text", "text": text}]}, None))
        close_group()
        return anthropic_turns(turns)


def to_chat(items: Sequence[Any], wire: Wire, counter: TokenCounter) -> Translation:
    """The history in `wire` as chat-shaped messages the compaction reads."""
    if wire == "chat":
        return Translation(wire, list(items), items=list(items))
    if wire == "anthropic":
        return _anthropic_to_chat(items)
    translation = Translation(wire, [], items=list(items))
    run: list[tuple[int, Mapping[str, Any]]] = []  # the model's output items being gathered

    def close_run() -> None:
        if run:
            translation.messages.append(_assistant_stand_in(run))
            run.clear()

    for at, item in enumerate(items):
        data = _mapping(item)
        if data is None:
            raise InputError(f"input item {at}: an item must be a mapping, not {type(item).__name__}")
        _check_responses_item(at, data)
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


def _check_responses_item(at: int, data: Mapping[str, Any]) -> None:
    """A Responses item, not a message of another format read as one by mistake."""
    if "role" not in data or data.get("type") not in (None, "message"):
        return
    role = data.get("role")
    parts = _parts(data.get("content"))
    other = ("anthropic", sorted(parts & _ANTHROPIC_BLOCKS)) if parts & _ANTHROPIC_BLOCKS else (
        ("chat", [key for key in _CHAT_FIELDS if key in data] or [f"role {role}"])
        if any(key in data for key in _CHAT_FIELDS) or role in ("tool", "function") else None)
    if other is not None:
        raise InputError(f"input item {at}: {', '.join(other[1])} is not in a Responses input list; "
                         f"this history reads as format=\"{other[0]}\" (pass that, or leave format out)")


def _is_message(data: Mapping[str, Any]) -> bool:
    kind = data.get("type")
    return (kind == "message" or kind is None) and isinstance(data.get("role"), str)


def _is_call(data: Mapping[str, Any]) -> bool:
    kind = data.get("type")
    return isinstance(kind, str) and kind.endswith("_call") and isinstance(data.get("call_id"), str)


def _is_output(data: Mapping[str, Any]) -> bool:
    kind = data.get("type")
    return isinstance(kind, str) and kind.endswith("_call_output") and isinstance(_call_of(data), str)


def _call_of(data: Mapping[str, Any]) -> Any:
    """The call an output answers (a local shell call's output names it by `id`)."""
    return data.get("call_id", data.get("id") if data.get("type") == "local_shell_call_output" else None)


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
    message[MARK] = {"at": [at for at, _ in run], "content": blocks or None}
    return message


def _message_stand_in(at: int, data: Mapping[str, Any]) -> dict[str, Any]:
    content = data.get("content")
    text: Any = content if isinstance(content, str) else _text_blocks(content)
    return {"role": data["role"], "content": text, MARK: {"at": [at], "content": text}}


def _output_stand_in(at: int, data: Mapping[str, Any]) -> dict[str, Any]:
    output = data.get("output")
    text: Any = output if isinstance(output, str) else (
        _text_blocks(output) if isinstance(output, list) else _object_blocks(output))
    return {"role": "tool", "tool_call_id": _call_of(data), "content": text,
            MARK: {"at": [at], "content": text}}


def _object_blocks(output: Any) -> list[dict[str, Any]]:
    """An output that is an object (a computer call's screenshot): an image costs what an image
    costs, anything else its JSON text."""
    if isinstance(output, Mapping) and ("image_url" in output or "file_id" in output):
        return [{"type": "input_image"}]
    return [{"type": "text", "text": json.dumps(output, ensure_ascii=False)}]


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


def _stood_for(mark: Mapping[str, Any], data: Mapping[str, Any],
               items: Sequence[Any]) -> list[tuple[int, Any]]:
    """Copies of the items a stand-in was made of; when the compaction rewrote its text (a tool
    output cleared into a stub, a system message sent as an excerpt), the item with that text. An
    output whose shape allows no text (a computer call's screenshot) stays as it was."""
    pairs = [(at, _copy(items[at])) for at in mark["at"]]
    if data.get("content") == mark.get("content") or len(pairs) != 1:
        return pairs
    at, changed = pairs[0]
    item = changed
    text = _text_of(data)
    if _is_output(item):
        if isinstance(item.get("output"), Mapping):
            return pairs
        changed["output"] = text
    elif isinstance(item.get("content"), str):
        changed["content"] = text
    else:
        kind = "output_text" if item.get("role") == "assistant" else "input_text"
        changed["content"] = [{"type": kind, "text": text}]
    return [(at, changed)]


def _copy(item: Any) -> dict[str, Any]:
    """An item as read, as a dict of its own (an SDK object as its data)."""
    return copy.deepcopy(dict(_mapping(item) or {}))


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

def _anthropic_to_chat(items: Sequence[Any]) -> Translation:
    """Anthropic turns as stand-ins: an assistant turn one assistant message whose `tool_use`
    blocks are its calls, a user turn one tool message per `tool_result` block, then one user
    message for its other blocks."""
    translation = Translation("anthropic", [], items=list(items))
    for at, item in enumerate(items):  # a Responses list is named as one, whatever its first item
        data = _mapping(item)
        if data is not None and (isinstance(data.get("type"), str) or "role" not in data):
            _anthropic_turn_data(at, item)
    for at, item in enumerate(items):
        data = _anthropic_turn_data(at, item)
        role, content = data["role"], data.get("content")
        if not isinstance(content, list):
            text = content if isinstance(content, str) else ""
            translation.messages.append({"role": role, "content": text,
                                         MARK: {"at": [at], "blocks": None, "content": text}})
        elif role == "assistant":
            translation.messages.append(_anthropic_assistant(at, content))
        else:
            translation.messages.extend(_anthropic_user(at, content))
    return translation


def _anthropic_turn_data(at: int, item: Any) -> Mapping[str, Any]:
    """One turn, checked: the Messages API knows two roles and no Responses items."""
    data = _mapping(item)
    if data is None:
        raise InputError(f"message {at}: a message must be a mapping, not {type(item).__name__}")
    role = data.get("role")
    responses = _parts(data.get("content")) & _RESPONSES_PARTS
    if isinstance(data.get("type"), str) or "role" not in data or responses:
        raise InputError(f"message {at}: a Responses {data.get('type') or 'message'} item is no Anthropic "
                         "message; this history reads as format=\"responses\" (pass that, or leave format "
                         "out)")
    if role in ("system", "developer"):
        raise InputError(f"message {at}: role {role!r} inside an Anthropic messages list; the Messages API "
                         "takes the system prompt as the request's top-level `system`, not as a message "
                         "(pass it there, or this list with format=\"chat\")")
    if role not in ("user", "assistant"):
        hint = " (a chat tool message: pass format=\"chat\")" if role in ("tool", "function") else ""
        raise InputError(f"message {at}: an Anthropic message's role is user or assistant, not {role!r}"
                         + hint)
    content = data.get("content")
    if not isinstance(content, str | list):
        raise InputError(f"message {at}: `content` must be text or a list of content blocks")
    if isinstance(content, list) and any(not isinstance(b, Mapping) or not isinstance(b.get("type"), str)
                                         for b in content):
        raise InputError(f"message {at}: every content block must be a mapping with a `type`")
    return data


def _anthropic_assistant(at: int, content: list[Any]) -> dict[str, Any]:
    blocks: list[Any] = []
    calls: list[dict[str, Any]] = []
    for block in content:
        if block["type"] == "tool_use":
            calls.append({"id": block.get("id"), "type": "function",
                          "function": {"name": str(block.get("name") or "?"),
                                       "arguments": _json_text(block.get("input"))}})
        else:
            blocks.append(_readable(block))
    message: dict[str, Any] = {"role": "assistant", "content": blocks or None}
    if calls:
        message["tool_calls"] = calls
    message[MARK] = {"at": [at], "blocks": list(range(len(content))), "content": blocks or None}
    return message


def _anthropic_user(at: int, content: list[Any]) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    for n, block in enumerate(content):
        if block["type"] == "tool_result":
            inner = block.get("content")
            text: Any = inner if isinstance(inner, str) else [_readable(b) for b in inner or []
                                                              if isinstance(b, Mapping)]
            messages.append({"role": "tool", "tool_call_id": block.get("tool_use_id"), "content": text,
                             MARK: {"at": [at], "blocks": [n], "content": text}})
    rest = [n for n, block in enumerate(content) if block["type"] != "tool_result"]
    if rest or not messages:
        blocks = [_readable(content[n]) for n in rest]
        messages.append({"role": "user", "content": blocks,
                         MARK: {"at": [at], "blocks": rest, "content": blocks}})
    return messages


def _readable(block: Mapping[str, Any]) -> Any:
    """A content block as the compaction reads it: text and thinking as they are (without their
    `cache_control`), an image as one image, anything else (documents, server tool blocks, search
    results) as it is, its cost counted from its strings."""
    if block["type"] == "text":
        return {"type": "text", "text": block.get("text") or ""}
    return {"type": "image"} if block["type"] == "image" else block


def _json_text(value: Any) -> str:
    """A tool_use block's input as a call's arguments (compact JSON, as OpenAI's models write it)."""
    return json.dumps(value if value is not None else {}, ensure_ascii=False, separators=(",", ":"))


def _anthropic_turn(item: Any, stand_ins: Sequence[Mapping[str, Any]]) -> Any:
    """One turn from the stand-ins of it the compaction kept: a copy of the turn as read when all of
    it is there unchanged, else the turn with the blocks kept (each as read, a rewritten tool
    result's text in its `content`, its other keys kept)."""
    data = _copy(item)
    content = data.get("content")
    if not isinstance(content, list):
        changed = stand_ins[0]
        if changed.get("content") != changed[MARK]["content"]:
            data["content"] = _text_of(changed)
        return data
    kept: dict[float, Any] = {}
    for stand_in in stand_ins:
        mark = stand_in[MARK]
        same = stand_in.get("content") == mark["content"]
        for n in mark["blocks"]:
            kept[n] = content[n]
        if same:
            continue
        text = _text_of(stand_in)
        if stand_in.get("role") == "tool":
            kept[mark["blocks"][0]] = {**content[mark["blocks"][0]], "content": text}
        else:  # a text rewritten (never the compaction's way with a turn, but kept readable)
            texts = [n for n in mark["blocks"] if content[n].get("type") == "text"]
            for n in texts:
                del kept[n]
            kept[texts[0] if texts else mark["blocks"][0] - 0.5] = {"type": "text", "text": text}
    if len(kept) == len(content) and all(kept[n] is content[n] for n in range(len(content))):
        return data
    data["content"] = [kept[n] for n in sorted(kept)]
    return data


def anthropic_turns(turns: Sequence[tuple[Any, int | None]]) -> list[Any]:
    """Turns (each with its index in the input, None for what the compaction wrote) as a valid
    Anthropic list: turns of one role next to each other merged into one (the summary joins the
    turn next to it), tool results first in their turn, a user turn first. Two turns of one role
    that were neighbours in the input stay as they came (the API reads them as one turn)."""
    out: list[Any] = []
    origins: list[int | None] = []
    for turn, at in turns:
        data = _mapping(turn) or {}
        if out and _role(out[-1]) == data.get("role") and not (
                at is not None and origins[-1] is not None and at == origins[-1] + 1):
            out[-1] = _merged(out[-1], data)
            origins[-1] = at if at is not None else origins[-1]
        else:
            out.append(turn)
            origins.append(at)
    if out and _role(out[0]) == "assistant":  # the API wants a user turn first
        out.insert(0, {"role": "user", "content": [{"type": "text", "text": "[compactor] (continued)"}]})
    return out


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
