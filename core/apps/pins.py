"""Pins: what must reach the model verbatim after every compaction (instructions, a plan, a file).

Agents forget their instructions when a compaction summarises them away; the usual fix is to read
them again after compacting (a project's instruction file, the plan, the files being edited). A pin
is a message (a dict, sent as it is), a text (sent as a user message) or a file path
(`pathlib.Path`, read again at every compaction, so an edited plan goes out as it is now). Pins go
right after the system message(s) and are counted in the budget.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import PurePath
from typing import Any

from compactor.document import Message
from compactor.errors import CompactorError, InputError
from compactor.formats.messages import message_tokens, read_messages, to_dict
from compactor.text.tokens import TokenCounter

#: A pinned file larger than this is refused (a pin is read at every compaction).
MAX_PIN_BYTES = 1_000_000

Pin = tuple[dict[str, Any], int, str]  # the message, its tokens, a label for errors and reports


def read_pins(pins: Any, history: Sequence[Message], counter: TokenCounter) -> list[Pin]:
    """Each pin as a message with its cost; files are read now."""
    if pins is None:
        return []
    if isinstance(pins, str | PurePath | Mapping) or not isinstance(pins, Sequence | set | frozenset):
        pins = [pins]
    found: list[Pin] = []
    for n, pin in enumerate(pins):
        if isinstance(pin, PurePath | os.PathLike):
            path = os.fspath(pin)
            try:
                with open(path, "rb") as handle:
                    data = handle.read(MAX_PIN_BYTES + 1)
            except OSError as exc:
                raise InputError(f"pin {path}: cannot be read ({exc.strerror or exc})") from exc
            if len(data) > MAX_PIN_BYTES:
                raise InputError(f"pin {path}: over {MAX_PIN_BYTES} bytes")
            text = data.decode("utf-8", "replace")
            message: dict[str, Any] = {"role": "user", "content": f"[pinned file {path}]\n{text}"}
            label = str(path)
        elif isinstance(pin, str):
            message, label = {"role": "user", "content": pin}, f"pin[{n}] {pin[:40]!r}"
        elif isinstance(pin, Mapping):
            parsed = read_messages([dict(pin)], name=f"pin[{n}]")[0]
            message, label = to_dict(parsed), f"pin[{n}] ({parsed.role} message)"
        else:
            raise InputError(f"pin[{n}] must be a message dict, a text or a pathlib.Path, "
                             f"not {type(pin).__name__}")
        cost = message_tokens(read_messages([message])[0], counter)
        found.append((message, cost, label))
    return found


def with_pins(messages: list[dict[str, Any]], pins: Sequence[Pin]) -> list[dict[str, Any]]:
    """`messages` with the pins after the leading system message(s), each pin once (a pinned message
    already in the list is not added again)."""
    if not pins:
        return messages
    at = 0
    while at < len(messages) and messages[at].get("role") in ("system", "developer"):
        at += 1
    extra = [pin for pin, _, _ in pins if pin not in messages]
    return [*messages[:at], *extra, *messages[at:]]


def pin_slots(slots: Sequence[int | str], compacted: Sequence[Mapping[str, Any]], texts: Sequence[Any],
              pin: str = "pin") -> list[int | str]:
    """`slots` (what each message of `compacted` stands for, pins left out) with `pin` where the
    compaction put its pins: after the leading system message(s), each one of `texts` (the report's
    `pin_texts`), as `with_pins` places them. An adapter maps a compaction back to its own objects
    with it. Raises `CompactorError` when the extra messages are not those pins."""
    extra = len(compacted) - len(slots)
    if extra == 0:
        return list(slots)
    leading = 0
    while leading < len(compacted) and _is_system(compacted[leading]):
        leading += 1
    for at in range(min(leading, len(slots)) + 1) if extra > 0 else ():
        found = compacted[at:at + extra]
        if all(m.get("content") in texts for m in found) and (
                at + extra == len(compacted) or not _is_system(compacted[at + extra])):
            return [*slots[:at], *[pin] * extra, *slots[at:]]
    raise CompactorError(f"the compaction has {len(compacted)} messages for {len(slots)} kept ones "
                         f"and {len(texts)} pin(s): it does not line up with the messages it was given")


def _is_system(message: Mapping[str, Any]) -> bool:
    return message.get("role") in ("system", "developer")
