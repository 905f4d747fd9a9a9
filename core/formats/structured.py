"""Structured text (JSON, JSON Lines, CSV, Markdown tables) reduced by its structure, not as prose.

A tool result that lists 40 flights is mostly repetition: the same keys, a few distinct values of a
status or cabin field, and one or two rows the conversation goes on to use. `reduce_text` keeps the
shape (fields with their types, the row count, the values of low-cardinality fields), the rows that
matter (those holding a value the query or another message mentions, plus the first and the last),
verbatim, and one marker per gap (`[... 37 more rows: expand <id>]`) so the rest can be read back.

Pure and deterministic: no I/O, no model; values are copied, never made up. JSON stays valid JSON
(gaps are string items), so readers that parse tool output still can. Text that does not parse is
left as it is.
"""

from __future__ import annotations

import ast
import csv
import io
import json
import re
from collections.abc import Callable, Iterable, Sequence, Sized
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Literal

Kind = Literal["json", "jsonl", "csv", "markdown"]
__all__ = ["Kind", "Reduced", "References", "detect", "reduce_text"]

#: Words of a reference text: ids, codes, numbers, dates, emails (`HAT110`, `2024-05-24`, `a@b.c`).
_WORD = re.compile(r"[\w][\w.@:/+-]*\w|\w")
_SEP = (",", ":")
_MAX_PARSE = 2_000_000  # characters: larger documents are left alone (parsing them costs more)


class References:
    """What the rest of the conversation mentions: a row holding one of these values is kept."""

    def __init__(self, texts: Iterable[str] = ()) -> None:
        joined = "\n".join(t for t in texts if t)
        self.text = joined.lower()
        self.words = {w.lower() for w in _WORD.findall(joined)}

    def mentions(self, value: str) -> bool:
        """Whether `value` is mentioned as a whole word (multi-word values: as a phrase)."""
        key = value.strip().lower()
        if len(key) < 3:
            return False
        if key in self.words:
            return True
        return (" " in key or not _WORD.fullmatch(key)) and len(key) <= 200 and key in self.text


@dataclass(frozen=True, slots=True)
class Reduced:
    """A reduced text, what it was, and how many rows it had and kept (the largest table)."""

    text: str
    kind: Kind
    rows: int
    kept: int


# -- detection -------------------------------------------------------------------------------------

class _Lossy(ValueError):
    """JSON that re-serialising would change: a duplicate key, or a number a float cannot hold."""


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    value = dict(pairs)
    if len(value) != len(pairs):  # json.loads keeps the last: the others would vanish unmarked
        raise _Lossy("duplicate key")
    return value


def _float(text: str) -> float:
    value = float(text)
    if Decimal(text) != Decimal(repr(value)):  # 0.1000000000000000055, 1e400: digits would change
        raise _Lossy(f"number {text} does not survive as a float")
    return value


#: The decoder for everything reduced: it refuses what its output could not copy faithfully (a
#: ValueError, so such text is left as it is).
_DECODER = json.JSONDecoder(object_pairs_hook=_pairs, parse_float=_float)


def _loads(text: str) -> Any:
    return _DECODER.decode(text)


def _json_at(text: str) -> tuple[int, int, Any] | None:
    """(start, end, value) of a JSON object or array that makes up the text, possibly after a prose
    prefix ("Result: {...}") and before a short suffix."""
    if len(text) > _MAX_PARSE:
        return None
    decoder = _DECODER
    tries = 0
    for match in re.finditer(r"[\[{]", text):
        start = match.start()
        if start and text[start - 1] not in " \t\n:=>(\ufeff" and start > 0:
            continue
        tries += 1
        if tries > 6:
            break
        try:
            value, end = decoder.raw_decode(text, start)
        except ValueError:
            continue
        rest = text[end:].strip()
        if isinstance(value, dict | list) and len(rest) <= max(80, (end - start) // 10):
            return start, end, value
    return None


def _jsonl(text: str) -> list[Any] | None:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    if len(lines) < 3:
        return None
    rows = []
    for line in lines:
        stripped = line.strip()
        if stripped[:1] not in "[{":
            return None
        try:
            rows.append(_loads(stripped))
        except ValueError:
            return None
    return rows


def _csv(text: str) -> tuple[list[str], list[list[str]], str] | None:
    """(lines, parsed rows, delimiter) when every line is one row of the same width (2+ columns)."""
    lines = [line for line in text.strip().splitlines() if line.strip()]
    if len(lines) < 4 or any(line.lstrip().startswith("|") for line in lines[:2]):
        return None
    for delimiter in (",", "\t", ";"):
        if lines[0].count(delimiter) < 1:
            continue
        rows = list(csv.reader(io.StringIO("\n".join(lines)), delimiter=delimiter))
        width = len(rows[0])
        header = all(0 < len(c.strip()) <= 40 and len(c.split()) <= 4 for c in rows[0])  # names, not prose
        if header and len(rows) == len(lines) and width >= 2 and all(len(r) == width for r in rows):
            return lines, rows, delimiter
    return None


_MD_ROW = re.compile(r"^\s*\|.*\|\s*$")
_MD_RULE = re.compile(r"^\s*\|?\s*:?-{3,}:?\s*(?:\|\s*:?-{3,}:?\s*)*\|?\s*$")


def _markdown_tables(text: str) -> list[tuple[int, int]]:
    """(first line, end line) of each Markdown table: a header row, a rule, then rows."""
    lines = text.split("\n")
    found = []
    i = 0
    while i + 1 < len(lines):
        if _MD_ROW.match(lines[i]) and _MD_RULE.match(lines[i + 1]):
            j = i + 2
            while j < len(lines) and _MD_ROW.match(lines[j]):
                j += 1
            found.append((i, j))
            i = j
        else:
            i += 1
    return found


def detect(text: str) -> Kind | None:
    """Which structured format `text` holds (JSON possibly after a prose prefix), or None."""
    try:
        return _detect(text)
    except RecursionError:
        return None


def _detect(text: str) -> Kind | None:
    if _jsonl(text) is not None and _json_at(text.strip()) is None:
        return "jsonl"
    if _json_at(text) is not None or _python_literal(text) is not None:
        return "json"
    if _markdown_tables(text):
        return "markdown"
    if _csv(text) is not None:
        return "csv"
    return None


def _python_literal(text: str) -> Any:
    """A dict or list written as a Python literal (`{'id': 'x'}`, as some tools return), or None."""
    stripped = text.strip()
    if not stripped or stripped[0] not in "[{" or len(stripped) > 200_000:
        return None
    try:
        tree = ast.parse(stripped, mode="eval")
        if not _faithful(tree, stripped):
            return None
        value = ast.literal_eval(tree)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None
    return value if isinstance(value, dict | list) and _jsonable(value) else None


def _faithful(tree: ast.AST, source: str) -> bool:
    """Whether the literal's value holds all it says: no repeated key (the last would win
    unmarked), no number a float cannot hold (its digits would change), keys JSON keeps apart."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            keys = [str(k.value) for k in node.keys if isinstance(k, ast.Constant)]
            if len(set(keys)) != len(keys):
                return False
        elif isinstance(node, ast.Constant) and isinstance(node.value, float):
            written = (ast.get_source_segment(source, node) or "").replace("_", "")
            try:
                _float(written)
            except (ValueError, ArithmeticError):
                return False
    return True


def _jsonable(value: Any) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError, RecursionError):
        return False
    return True


# -- reduction -------------------------------------------------------------------------------------

@dataclass(slots=True)
class _Settings:
    refs: References
    ref: str | None
    max_rows: int
    min_list_chars: int
    head: int
    tail: int
    max_kept: int
    distinct: int
    minify: bool = True
    rows: int = 0
    kept: int = 0

    def long(self, items: Sized, chars: Callable[[], int]) -> bool:
        """Whether a list is worth cutting: more than `max_rows` items and `min_list_chars` long."""
        return len(items) > self.max_rows and chars() >= self.min_list_chars

    def gap(self, count: int, noun: str = "rows") -> str:
        where = f": expand {self.ref}" if self.ref else ""
        return f"[... {count} more {noun}{where}]"


def _dump(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=_SEP)


def _leaves(value: Any, limit: int = 200) -> list[tuple[str, str]]:
    """(key, text) of the scalar leaves of a value (strings and numbers; not booleans or null); the
    key is the name of the field holding it ("" in a list)."""
    out: list[tuple[str, str]] = []
    stack: list[tuple[str, Any]] = [("", value)]
    while stack and len(out) < limit:
        key, item = stack.pop()
        if isinstance(item, dict):
            stack.extend(reversed([(str(k), v) for k, v in item.items()]))
        elif isinstance(item, list):
            stack.extend(reversed([(key, v) for v in item]))
        elif isinstance(item, str):
            out.append((key, item))
        elif isinstance(item, int | float) and not isinstance(item, bool):
            out.append((key, _dump(item)))
    return out


def _scalars(value: Any, limit: int = 200) -> list[str]:
    return [text for _, text in _leaves(value, limit)]


#: A field naming a thing (`flight_number`, `user_id`, `sku`): its values are references even when
#: many rows share one (two connecting flights with the same first leg).
_ID_FIELD = re.compile(r"(?:^|_)(?:ids?|numbers?|no|codes?|keys?|refs?|references?|uuid|sku|names?)$|^(?:"
                       r"id|name|编号|名称|姓名)$|号$", re.IGNORECASE)


def _type(value: Any, depth: int = 0) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "str"
    if isinstance(value, list):
        inner = sorted({_type(v, depth + 1) for v in value[:50]})
        return f"list[{'|'.join(inner)}]" if inner else "list"
    if isinstance(value, dict):
        if depth >= 1 or len(value) > 12:
            return "obj"
        return "{" + ",".join(f"{k}:{_type(v, depth + 1)}" for k, v in value.items()) + "}"
    return type(value).__name__


def _schema(rows: Sequence[Any], distinct: int) -> tuple[str, set[str]]:
    """`field:type` of each field of the records (the union, in first-seen order), the values of
    low-cardinality fields, and those values (a mention of them selects no row)."""
    fields: dict[str, set[str]] = {}
    values: dict[str, list[Any]] = {}
    for row in rows:
        if not isinstance(row, dict):
            continue
        for key, value in row.items():
            fields.setdefault(key, set()).add(_type(value))
            values.setdefault(key, []).append(value)
    parts = []
    common: set[str] = set()
    for key, types in fields.items():
        part = f"{key}:{'|'.join(sorted(types))}"
        seen = values[key]
        scalars = [v for v in seen if isinstance(v, str | int | float | bool) or v is None]
        if len(scalars) == len(seen) and len(seen) >= 3:
            uniques = sorted({v if isinstance(v, str) else _dump(v) for v in scalars})
            if len(uniques) <= distinct and len(uniques) < len(seen):
                part += "=" + "|".join(uniques)
                if not _ID_FIELD.search(str(key)):
                    common.update(u.lower() for u in uniques)
        parts.append(part)
    return ", ".join(parts), common


def _pick(items: Sequence[Any], settings: _Settings, common: set[str]) -> list[int]:
    """Indexes of the items kept: the first `head`, the last `tail`, and those holding a value the
    references mention (values shared by many rows do not count), at most `max_kept` in all."""
    n = len(items)
    keep = set(range(min(settings.head, n))) | set(range(max(0, n - settings.tail), n))
    for i, item in enumerate(items):
        if len(keep) >= settings.max_kept:
            break
        if i in keep:
            continue
        if any(v.lower() not in common and settings.refs.mentions(v) for v in _scalars(item)):
            keep.add(i)
    return sorted(keep)


def _reduce_json(value: Any, settings: _Settings, depth: int = 0) -> Any:
    """The value with long lists (and long maps of records) cut to their kept items and gap markers."""
    if depth > 40:
        return value
    if isinstance(value, list):
        if not settings.long(value, lambda: len(_dump(value))):
            return [_reduce_json(v, settings, depth + 1) for v in value]
        records = [v for v in value if isinstance(v, dict)]
        schema, common = _schema(records, settings.distinct) if len(records) == len(value) else ("", set())
        if not records:  # lists of scalars or of lists: a distinct value of many is no reference
            counts: dict[str, int] = {}
            for item in value:
                for v in {text for key, text in _leaves(item) if not _ID_FIELD.search(key)}:
                    counts[v.lower()] = counts.get(v.lower(), 0) + 1
            common = {v for v, c in counts.items() if c > max(2, len(value) // 3)}
        kept = _pick(value, settings, common)
        settings.rows = max(settings.rows, len(value))
        settings.kept += len(kept)
        out: list[Any] = [f"{len(value)} rows" + (f"; fields {schema}" if schema else "")]
        last = -1
        for i in kept:
            if i - last > 1:
                out.append(settings.gap(i - last - 1))
            out.append(value[i])  # verbatim
            last = i
        if len(value) - 1 > last:
            out.append(settings.gap(len(value) - 1 - last))
        return out
    if isinstance(value, dict):
        all_records = all(isinstance(v, dict) for v in value.values())
        if all_records and settings.long(value, lambda: len(_dump(value))):
            keys = list(value)
            _, common = _schema(list(value.values()), settings.distinct)
            kept = _pick([{"": k, **value[k]} for k in keys], settings, common)
            settings.rows = max(settings.rows, len(keys))
            settings.kept += len(kept)
            reduced: dict[str, Any] = {}
            last = -1
            for i in kept:
                if i - last > 1:
                    reduced[settings.gap(i - last - 1, "entries")] = None
                reduced[keys[i]] = value[keys[i]]
                last = i
            if len(keys) - 1 > last:
                reduced[settings.gap(len(keys) - 1 - last, "entries")] = None
            return reduced
        return {k: _reduce_json(v, settings, depth + 1) for k, v in value.items()}
    if isinstance(value, str) and len(value) > 200 and value.lstrip()[:1] in "[{":
        inner = _parse_embedded(value)  # a tool's JSON inside a JSON string ({"response": "[...]"})
        if inner is not None:
            reduced_inner = _reduce_json(inner, settings, depth + 1)
            if reduced_inner != inner:
                return _dump(reduced_inner)
    return value


def _parse_embedded(text: str) -> Any:
    try:
        value = _loads(text)
    except _Lossy:
        return None
    except ValueError:
        value = _python_literal(text)
    return value if isinstance(value, dict | list) else None


def _rows_block(header: Sequence[str], lines: Sequence[str], parsed: Sequence[Any], settings: _Settings,
                common: set[str], note: str) -> list[str]:
    kept = _pick(parsed, settings, common)
    settings.rows = max(settings.rows, len(lines))
    settings.kept += len(kept)
    out = [*header]
    last = -1
    for i in kept:
        if i - last > 1:
            out.append(settings.gap(i - last - 1))
        out.append(lines[i])
        last = i
    if len(lines) - 1 > last:
        out.append(settings.gap(len(lines) - 1 - last))
    out.append(note)
    return out


def _table_note(columns: Sequence[str], rows: Sequence[Sequence[str]],
                settings: _Settings) -> tuple[str, set[str]]:
    records = [dict(zip(columns, r, strict=False)) for r in rows]
    schema, common = _schema([{k: _cell(v) for k, v in r.items()} for r in records], settings.distinct)
    return f"[{len(rows)} rows; fields {schema}]", common


def _cell(text: str) -> Any:
    stripped = text.strip()
    if re.fullmatch(r"-?\d{1,15}", stripped):
        return int(stripped)
    if re.fullmatch(r"-?\d+\.\d+", stripped):
        return float(stripped)
    return stripped


def _markdown_cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def reduce_text(text: str, *, references: References | Iterable[str] = (), ref: str | None = None,
                max_rows: int = 6, min_list_chars: int = 1500, head: int = 1, tail: int = 1,
                max_kept: int = 12, distinct: int = 5,
                min_chars: int = 400, size: Callable[[str], int] = len,
                minify: bool = True) -> Reduced | None:
    """`text` reduced by its structure, or None when it is not structured, shorter than `min_chars`,
    or the reduction would not make it smaller by `size` (characters unless given, e.g. tokens).

    A list longer than `max_rows` items and `min_list_chars` characters (a short list costs less than
    what cutting it risks) keeps its first `head` and last `tail` items and the items holding
    a value the `references` mention (up to `max_kept`); each gap becomes a marker citing `ref`. A
    list of records starts with one line of its fields (`name:type`, and `=a|b` for a field with at
    most `distinct` values). Nested values are reduced the same way, JSON inside JSON strings too.
    JSON with no long list comes back minified, unless `minify` is False (then None).
    """
    if len(text) < min_chars or len(text) > _MAX_PARSE:
        return None
    refs = references if isinstance(references, References) else References(references)
    settings = _Settings(refs, ref, max_rows, min_list_chars, head, tail, max(max_kept, head + tail),
                         distinct, minify)
    try:
        result = _reduce(text, settings)
    except RecursionError:  # nested deeper than Python parses: left as it is
        return None
    if result is None or (settings.kept >= settings.rows if settings.rows else not minify):
        return None
    if size(result[0]) >= size(text):
        return None
    return Reduced(result[0], result[1], settings.rows, settings.kept)


def _reduce(text: str, settings: _Settings) -> tuple[str, Kind] | None:
    rows = _jsonl(text)
    if rows is not None and settings.long(rows, lambda: len(text)):
        lines = [line for line in text.strip().splitlines() if line.strip()]
        records = [r for r in rows if isinstance(r, dict)]
        schema, common = _schema(records, settings.distinct) if len(records) == len(rows) else ("", set())
        note = f"[{len(rows)} JSON lines" + (f"; fields {schema}]" if schema else "]")
        return "\n".join(_rows_block([], lines, rows, settings, common, note)), "jsonl"
    found = _json_at(text)
    if found is not None:
        start, end, value = found
        reduced = _reduce_json(value, settings)  # no long list: minified only
        if not settings.rows and not settings.minify:
            return None
        return text[:start] + _dump(reduced) + text[end:], "json"
    literal = _python_literal(text)
    if literal is not None:
        reduced = _reduce_json(literal, settings)
        return _dump(reduced), "json"
    tables = _markdown_tables(text)
    if tables:
        lines = text.split("\n")
        out: list[str] = []
        done = 0
        for first, stop in tables:
            out.extend(lines[done:first])
            body = lines[first + 2:stop]
            size = sum(len(line) + 1 for line in body)
            if not settings.long(body, lambda: size):  # noqa: B023 (called at once)
                out.extend(lines[first:stop])
            else:
                columns = _markdown_cells(lines[first])
                cells = [_markdown_cells(line) for line in body]
                note, common = _table_note(columns, cells, settings)
                out.extend(_rows_block(lines[first:first + 2], body, cells, settings, common, note))
            done = stop
        out.extend(lines[done:])
        return ("\n".join(out), "markdown") if settings.rows else None
    table = _csv(text)
    if table is not None and settings.long(table[0][1:], lambda: len(text)):
        lines, parsed, _ = table
        note, common = _table_note(parsed[0], parsed[1:], settings)
        return "\n".join(_rows_block(lines[:1], lines[1:], parsed[1:], settings, common, note)), "csv"
    return None
