"""Chat message lists as units of the document model: reading, pairing tool calls, counting tokens.

Three wire formats are read: OpenAI chat (`tool_calls` on assistant messages, `tool` results with
`tool_call_id`), OpenAI's legacy functions (`function_call`, `function` results) and content blocks
(`tool_use` blocks in assistant content, `tool_result` blocks in user content). Whatever the format,
`units` groups an assistant message with the results that answer its calls, so a compactor can keep
or drop a call and its results only together. A message keeps its original mapping in `raw`, and
`to_dict` gives that mapping back unchanged: a message kept verbatim is byte-identical on the wire.
Anthropic Messages lists are read as they are (content blocks); OpenAI Responses items go through
`compactor.formats.providers`, which makes chat-shaped stand-ins of them and writes results back.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from compactor.document import Chunk, Message, Source, chunk_id
from compactor.errors import InputError
from compactor.text.tokens import TokenCounter

#: OpenAI's accounting (the cookbook's `num_tokens_from_messages`): per message, per name, per reply.
TOKENS_PER_MESSAGE = 3
TOKENS_PER_NAME = 1
TOKENS_PER_REPLY = 3
RESULT_ROLES = frozenset({"tool", "function"})
#: What one image costs (OpenAI's low-detail price); high-detail images cost more, so budgets that
#: hold many large images are estimates.
IMAGE_TOKENS = 85
_IMAGE_BLOCKS = frozenset({"image_url", "image", "input_image"})


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One call an assistant message makes: its id (None for legacy function calls), name, arguments."""

    id: str | None
    name: str
    arguments: str
    #: "field" for `tool_calls` / `function_call`, "block" for a `tool_use` content block.
    source: str = "field"

    def parsed(self) -> Any:
        """The arguments as JSON data when they are JSON, else the raw text."""
        try:
            return json.loads(self.arguments)
        except (TypeError, ValueError):
            return self.arguments


@dataclass(frozen=True, slots=True)
class Unit:
    """Messages `[start, end)` that must stay together; `complete` is False for a call without all its
    results or a result without its call (such units are never sent back verbatim)."""

    start: int
    end: int
    complete: bool = True

    def __len__(self) -> int:
        return self.end - self.start


# -- reading ---------------------------------------------------------------------------------------


def as_mapping(item: Any, where: str) -> Mapping[str, Any]:
    """A message as a mapping: dicts as they are, `Message` via its raw form, SDK objects via
    `model_dump()` (the openai client's pydantic messages)."""
    if isinstance(item, Message):
        return to_dict(item)
    if isinstance(item, Mapping):
        return item
    dump = getattr(item, "model_dump", None)
    if callable(dump):
        data = dump(exclude_none=True)
        if isinstance(data, Mapping):
            return data
    raise InputError(f"{where}: a message must be a mapping with a `role`, not {type(item).__name__}")


def parse_message(record: Any, where: str) -> Message:
    """One message from its wire form; `where` names it in errors (file:line or list position)."""
    if not isinstance(record, Mapping) or not isinstance(record.get("role"), str):
        raise InputError(f"{where}: a message needs a string `role`")
    content = record.get("content")
    if isinstance(content, list):
        text = "\n".join(t for t in (block_text(b) for b in content) if t)
    elif content is None:
        text = ""
    elif isinstance(content, str):
        text = content
    else:
        raise InputError(f"{where}: message `content` must be text, null or a list of blocks")
    tool_calls = record.get("tool_calls") or ()
    if not isinstance(tool_calls, list | tuple):
        raise InputError(f"{where}: `tool_calls` must be a list")
    name = record.get("name")
    return Message(role=record["role"], content=text, name=name if isinstance(name, str) else None,
                   tool_calls=tuple(tool_calls), tool_call_id=record.get("tool_call_id"), raw=record)


def read_messages(data: str | bytes | Iterable[Any], name: str = "<messages>") -> list[Message]:
    """Messages from JSON text (a list, `{"messages": [...]}` or JSONL) or from Python objects."""
    if isinstance(data, bytes):
        data = data.decode("utf-8-sig")
    if isinstance(data, str):
        data = _json_messages(data, name)
    elif isinstance(data, Mapping) and isinstance(data.get("messages"), list):
        data = data["messages"]
    messages = [parse_message(as_mapping(item, f"{name}: message {i}"), f"{name}: message {i}")
                for i, item in enumerate(data)]
    if not messages:
        raise InputError(f"{name}: the message list is empty")
    return messages


def _json_messages(text: str, name: str) -> list[Any]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        data = []
        for number, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    data.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    raise InputError(f"{name}:{number}:{exc.colno}: invalid JSON: {exc.msg}") from None
    if isinstance(data, Mapping) and isinstance(data.get("messages"), list):
        data = data["messages"]
    if not isinstance(data, list):
        raise InputError(f"{name}: expected a JSON list of messages or {{\"messages\": [...]}}")
    return data


def block_text(block: Any) -> str:
    """The readable text of one content block (text, tool_use, tool_result, or a plain string)."""
    if isinstance(block, str):
        return block
    if not isinstance(block, Mapping):
        return ""
    kind = block.get("type")
    if kind == "tool_use":
        return f"[tool_use {block.get('name')}] {json.dumps(block.get('input'), ensure_ascii=False)}"
    if kind == "tool_result":
        inner = block.get("content")
        if isinstance(inner, str):
            return inner
        return "\n".join(t for t in (block_text(b) for b in inner or []) if t)
    text = block.get("text")
    return text if isinstance(text, str) else ""


def to_dict(message: Message) -> dict[str, Any]:
    """The message's wire form: a deep copy of what was read, or one built from the fields."""
    if message.raw:
        return copy.deepcopy(dict(message.raw))
    data: dict[str, Any] = {"role": message.role, "content": message.content}
    if message.name:
        data["name"] = message.name
    if message.tool_calls:
        data["tool_calls"] = copy.deepcopy(list(message.tool_calls))
    if message.tool_call_id:
        data["tool_call_id"] = message.tool_call_id
    return data


# -- calls and results -----------------------------------------------------------------------------


def calls(message: Message) -> tuple[ToolCall, ...]:
    """The tool calls a message makes, in any of the three formats."""
    found: list[ToolCall] = []
    for call in message.tool_calls:
        if isinstance(call, Mapping):
            function = call.get("function")
            if not isinstance(function, Mapping):
                function = {}
            found.append(ToolCall(_str(call.get("id")), str(function.get("name") or call.get("name") or "?"),
                                  _arguments(function.get("arguments", call.get("arguments")))))
    legacy = message.raw.get("function_call") if message.raw else None
    if isinstance(legacy, Mapping):
        found.append(ToolCall(None, str(legacy.get("name") or "?"), _arguments(legacy.get("arguments"))))
    content = message.raw.get("content") if message.raw else None
    if isinstance(content, list):
        for block in content:
            if isinstance(block, Mapping) and block.get("type") == "tool_use":
                found.append(ToolCall(_str(block.get("id")), str(block.get("name") or "?"),
                                      _arguments(block.get("input")), source="block"))
    return tuple(found)


def answers(message: Message) -> tuple[str | None, ...] | None:
    """The call ids a result message answers (None inside for an id-less result), or None when the
    message is not a tool result at all."""
    if message.role in RESULT_ROLES:
        return (_str(message.tool_call_id),)
    content = message.raw.get("content") if message.raw else None
    if isinstance(content, list):
        ids = tuple(_str(b.get("tool_use_id")) for b in content
                    if isinstance(b, Mapping) and b.get("type") == "tool_result")
        if ids:
            return ids
    return None


def units(messages: Sequence[Message]) -> list[Unit]:
    """Tile the messages into units: a message alone, or a call with every result that answers it.

    Results pair by id; id-less results (legacy `function` messages, logs that dropped the ids)
    answer the oldest open call. A call whose results are missing or interrupted by another message,
    and a result with no call, form incomplete units.
    """
    found: list[Unit] = []
    i, n = 0, len(messages)
    while i < n:
        message = messages[i]
        made = calls(message) if answers(message) is None else ()
        if not made:
            found.append(Unit(i, i + 1, answers(message) is None))
            i += 1
            continue
        open_ids = [c.id for c in made]
        j = i + 1
        while j < n and open_ids:
            answered = answers(messages[j])
            if answered is None:
                break
            if not _close(open_ids, answered):
                break
            j += 1
        found.append(Unit(i, j, not open_ids))
        i = j
    return found


def _close(open_ids: list[str | None], answered: Sequence[str | None]) -> bool:
    """Remove the calls a result answers from `open_ids`; False (and `open_ids` untouched) when it
    answers an id that is not open."""
    remaining = list(open_ids)
    if not _close_all(remaining, answered):
        return False
    open_ids[:] = remaining
    return True


def _close_all(open_ids: list[str | None], answered: Sequence[str | None]) -> bool:
    for call_id in answered:
        if call_id is not None and call_id in open_ids:
            open_ids.remove(call_id)
        elif call_id is None and open_ids:
            open_ids.pop(0)  # an id-less result answers the oldest open call
        elif None in open_ids:
            open_ids.remove(None)  # a result with an id for a legacy, id-less call
        else:
            return False
    return True


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _arguments(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)


# -- people and tokens -----------------------------------------------------------------------------


def speaker(message: Message) -> str:
    """Who said it: the `name` when given (multi-role histories), else the role."""
    return message.name or message.role


def wire_text(message: Message) -> str:
    """Everything in a message that costs text tokens besides the fixed overhead: the content (whose
    `tool_use` blocks are already in it) and the `tool_calls` / `function_call` fields."""
    parts = [message.content]
    parts.extend(f"{c.name}{c.arguments}" for c in calls(message) if c.source == "field")
    return "".join(parts)


def image_count(message: Message) -> int:
    """Image blocks in a message's content (they cost tokens that are not text)."""
    content = message.raw.get("content") if message.raw else None
    if not isinstance(content, list):
        return 0
    return sum(1 for b in content if isinstance(b, Mapping) and b.get("type") in _IMAGE_BLOCKS)


def hidden_tokens(message: Message, counter: TokenCounter) -> int:
    """Tokens of blocks the message's text leaves out but a request still carries: `thinking`
    blocks (Anthropic's, and the reasoning summaries of Responses items) cost their text, a
    `redacted_thinking` block its encrypted payload (estimated by length), any other block (a
    document, a server tool's call or results) the strings it carries."""
    content = message.raw.get("content") if message.raw else None
    if not isinstance(content, list):
        return 0
    total = 0
    for block in content:
        if not isinstance(block, Mapping):
            continue
        kind = block.get("type")
        if kind == "thinking" and isinstance(block.get("thinking"), str):
            total += counter.count(block["thinking"])
        elif kind == "redacted_thinking" and isinstance(block.get("data"), str):
            total += len(block["data"]) // 4 + 1
        elif kind not in _READ_BLOCKS:  # a document, a server tool's call or results: what it carries
            total += _carried_tokens(block, counter)
    return total


#: Blocks whose cost the message's text and image count already hold.
_READ_BLOCKS = frozenset({"text", "input_text", "output_text", "tool_use", "tool_result", "thinking",
                          "redacted_thinking", *_IMAGE_BLOCKS})


def _carried_tokens(value: Any, counter: TokenCounter) -> int:
    """The strings a block carries: text counted, long opaque strings (base64, encrypted content)
    estimated by length on the high side."""
    if isinstance(value, str):
        return len(value) // 3 + 1 if len(value) > 200 and " " not in value[:200] else counter.count(value)
    if isinstance(value, Mapping):
        return sum(_carried_tokens(item, counter) for item in value.values())
    if isinstance(value, list | tuple):
        return sum(_carried_tokens(item, counter) for item in value)
    return 0


def message_tokens(message: Message, counter: TokenCounter) -> int:
    """Tokens one message costs in a chat request (OpenAI's per-message accounting)."""
    return _message_cost(message, counter, counter.count)


def _message_cost(message: Message, counter: TokenCounter, count: Callable[[str], int]) -> int:
    """`message_tokens` with the text counts taken from `count` (a cache of them, or the counter's)."""
    tokens = (TOKENS_PER_MESSAGE + count(wire_text(message)) + count(message.role)
              + IMAGE_TOKENS * image_count(message) + hidden_tokens(message, counter))
    if message.name:
        tokens += TOKENS_PER_NAME + count(message.name)
    return tokens


def message_costs(messages: Iterable[Message], counter: TokenCounter) -> list[int]:
    """`message_tokens` of each message, each distinct text encoded once: the roles and names, and a
    content that comes back (the same tool output twice) are counted once per call. A caller keeps
    the list so that nothing counts the same history again (`conversation_source`'s `costs`)."""
    known: dict[str, int] = {}

    def count(text: str) -> int:
        found = known.get(text)
        if found is None:
            found = known[text] = counter.count(text)
        return found

    return [_message_cost(m, counter, count) for m in messages]


def messages_tokens(messages: Iterable[Message], counter: TokenCounter) -> int:
    """Tokens a whole message list costs, including the reply priming."""
    return TOKENS_PER_REPLY + sum(message_costs(messages, counter))


# -- as a document ---------------------------------------------------------------------------------


def render_message(message: Message) -> str:
    """A message as one readable block: `role (name): content` and a line per tool call."""
    who = f"{message.role} ({message.name})" if message.name else message.role
    lines = [f"{who}: {message.content}"]
    lines.extend(f"[tool_call {c.name}] {c.arguments}" for c in calls(message) if c.source == "field")
    return "\n".join(lines)


def conversation_source(messages: Sequence[Message], name: str | None = None,
                        metadata: Mapping[str, Any] | None = None,
                        costs: Sequence[int] | None = None) -> Source:
    """One source per conversation. Its text lists the messages as blocks; `unit_spans` holds each
    message's `(start, end)` in that text, so message `i` becomes chunk `i` (`chunk.messages`).
    `costs`: the messages' `message_costs` when the caller has them, so the source comes counted
    (`conversation_counts` takes them as they are) rather than encoding every message again."""
    spans: list[tuple[int, int]] = []
    parts: list[str] = []
    offset = 0
    for message in messages:
        block = render_message(message)
        spans.append((offset, offset + len(block)))
        parts.append(block)
        offset += len(block) + 2
    source = Source.from_text("\n\n".join(parts), kind="conversation", uri=name, metadata=metadata,
                              messages=messages, unit_spans=spans)
    if costs is None:
        return source
    if len(costs) != len(messages):
        raise ValueError(f"{len(costs)} message costs for {len(messages)} messages")
    return replace(source, tokens=TOKENS_PER_REPLY + sum(costs), message_tokens=tuple(costs))


def conversation_counts(source: Source, counter: TokenCounter) -> Source:
    """A conversation source with its token count: what its messages cost in a chat request, the
    per-message costs kept (`message_tokens`) for the message chunker. Any other
    source (or one already counted) comes back as it is, for the pipeline's plain count."""
    if source.tokens is not None or source.kind != "conversation" or not source.messages \
            or not source.unit_spans:
        return source
    costs = message_costs(source.messages, counter)
    return replace(source, tokens=TOKENS_PER_REPLY + sum(costs), message_tokens=tuple(costs))


def message_chunks(source: Source, counter: TokenCounter) -> list[Chunk]:
    """One chunk per message of a conversation source (`chunk i` is message `i`, its text the
    message's block in the source's original text, its tokens the message's request cost)."""
    spans = source.unit_spans
    if len(spans) != len(source.messages):
        raise InputError(f"{source.uri or source.id}: not a conversation source made by "
                         "conversation_source (its message spans are missing)")
    known = source.message_tokens
    costs = known if known is not None and len(known) == len(spans) else tuple(
        message_costs(source.messages, counter))
    return [Chunk(id=chunk_id(source.id, i), source_id=source.id, index=i, start=start, end=end,
                  text=source.original[start:end], tokens=cost, units=(i, i + 1))
            for i, ((start, end), cost) in enumerate(zip(spans, costs, strict=True))]
