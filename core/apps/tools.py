"""The expand tool every face offers: originals back by chunk id, its OpenAI tool definition, and
the answer to a model's call. Faces build on it; it builds only on the store."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from compactor.errors import InputError
from compactor.store import ChunkStore, open_store

EXPAND_TOOL_NAME = "expand_context"
#: An OpenAI tool definition the agent can call to read summarised messages in full.
EXPAND_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": EXPAND_TOOL_NAME,
        "description": ("Read the original text of earlier messages or search results that were "
                        "compacted. Pass the ids cited in the summary (e.g. \"3f2a9c0d1e2b4a56-0012\" "
                        "or a range \"3f2a9c0d1e2b4a56-0002..0057\")."),
        "parameters": {
            "type": "object",
            "properties": {"ids": {"type": "array", "items": {"type": "string"},
                                   "description": "chunk ids or id ranges from the summary"}},
            "required": ["ids"],
            "additionalProperties": False,
        },
    },
}


def expand_ids(ids: Iterable[str]) -> list[str]:
    """Chunk ids with ranges spelled out: `3f2a...-0002..0005` -> `...-0002`, ..., `...-0005`."""
    out: list[str] = []
    for item in ids:
        source, dash, rest = str(item).strip().rpartition("-")
        first, dots, last = rest.partition("..")
        if dash and dots and first.isdigit() and last.isdigit() and int(first) <= int(last):
            if int(last) - int(first) > 10_000:
                raise InputError(f"id range {item!r} is too long (more than 10000 ids)")
            out.extend(f"{source}-{n:04d}" for n in range(int(first), int(last) + 1))
        else:
            out.append(str(item).strip())
    return list(dict.fromkeys(out))


def expand(ids: Iterable[str], store: str | ChunkStore | None = None, *,
           session: Any = None) -> dict[str, str]:
    """The original text of chunks by id (ranges like `<source>-0002..0057` allowed), from a store (a
    path or a store object) or from what `session` carries: a `compact_messages` result, a
    `ContextCompacter` or a `ResearchSession` (anything with a `.store`)."""
    if store is None:
        store = getattr(session, "store", None)
        if store is None:
            raise InputError("expand needs a store (a path or a ChunkStore) or a session object "
                             "with one (a compact_messages result, a ContextCompacter)")
    target = open_store(store)
    wanted = expand_ids(ids)
    found = target.chunks(wanted)
    missing = [i for i in wanted if i not in found]
    if missing:
        raise InputError(f"chunk id(s) not in the store: {', '.join(missing[:10])}")
    return {i: found[i].text for i in wanted}


def tool_call_parts(call: Any) -> tuple[str | None, str | None, dict[str, Any]]:
    """(id, function name, arguments) of a tool call given as a dict or an SDK object. Raises
    InputError when the arguments are not a JSON object."""
    data = call.model_dump() if hasattr(call, "model_dump") else dict(call)
    function = data.get("function")
    if not isinstance(function, dict):
        function = {}
    raw = function.get("arguments")
    if isinstance(raw, dict):
        return data.get("id"), function.get("name"), raw
    try:
        args = json.loads(raw) if isinstance(raw, str) and raw.strip() else {}
    except json.JSONDecodeError as exc:
        raise InputError(f"arguments are not JSON: {exc.msg}") from None
    if not isinstance(args, dict):
        raise InputError(f"arguments must be a JSON object, not {type(args).__name__}")
    return data.get("id"), function.get("name"), args


def call_id_of(call: Any) -> str | None:
    """The id of a tool call given as a dict or an SDK object."""
    data = call.model_dump() if hasattr(call, "model_dump") else dict(call)
    return data.get("id")


def handle_expand_call(call: Any, store: str | ChunkStore | None = None, *, session: Any = None,
                       limit_chars: int = 200_000) -> dict[str, Any]:
    """Answer an `expand_context` tool call (a dict or the openai client's object) with the tool
    message to append: the originals by id, or an error the agent can read."""
    call_id = call_id_of(call)
    try:
        _, name, args = tool_call_parts(call)
        if name != EXPAND_TOOL_NAME:
            raise InputError(f"not an {EXPAND_TOOL_NAME} call: {name!r}")
        ids = args.get("ids")
        if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
            raise InputError("`ids` must be a list of strings")
        found = expand(ids, store, session=session)
        text = "\n\n".join(f"[{cid}]\n{body}" for cid, body in found.items())
        if len(text) > limit_chars:
            text = text[:limit_chars] + f"\n[truncated at {limit_chars} characters; ask for fewer ids]"
    except InputError as exc:
        text = f"error: {exc}"
    return {"role": "tool", "tool_call_id": call_id, "content": text}
