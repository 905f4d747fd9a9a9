"""`when:` conditions: a small, safe expression language (parsed with `ast`, never `eval`ed).

Grammar: literals (numbers, 'strings', true/false/null), names and dotted names
(`tokens`, `validate.loss.level`), comparisons (== != < <= > >= in, not in), `and`, `or`, `not`,
+ - * / and parentheses, lists of literals. Example: `tokens > 45000 * 0.8`.
A name whose value is missing at run time is null; comparing null with a number is false.
"""

from __future__ import annotations

import ast
import functools
import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from compactor.errors import ConditionError

_COMPARE: dict[type[ast.cmpop], Callable[[Any, Any], bool]] = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.In: lambda a, b: a in b,
    ast.NotIn: lambda a, b: a not in b,
}
_ARITH: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
}
#: Bounds: a condition is a short test, and `'x' * 3000000000` must not allocate 3 GB.
MAX_CONDITION_CHARS = 2_000
MAX_LITERAL_CHARS = 1_000
MAX_SEQUENCE = 10_000  # characters or items of any value a condition computes
MAX_NUMBER_DIGITS = 40
_CONSTANT_NAMES = {"true": True, "false": False, "null": None, "True": True, "False": False,
                   "None": None}


@dataclass(frozen=True, slots=True)
class Condition:
    """A parsed `when:` expression."""

    source: str
    tree: ast.Expression
    names: tuple[str, ...]

    def evaluate(self, lookup: Callable[[str], Any]) -> bool:
        """Truth value, with `lookup(dotted_name)` providing the values of names. A value too
        large to compute at run time makes the condition false, as a type mismatch does."""
        try:
            return bool(_eval(self.tree.body, lookup))
        except ConditionError:
            return False


def parse_condition(source: str) -> Condition:
    """Parse and check an expression; ConditionError says what is not allowed.

    Parts without names are evaluated here, so a literal or product too large fails `--check`."""
    if len(source) > MAX_CONDITION_CHARS:
        raise ConditionError(f"a condition may have at most {MAX_CONDITION_CHARS} characters, "
                             f"this one has {len(source)}")
    try:
        tree = ast.parse(source.strip(), mode="eval")
    except (SyntaxError, RecursionError, MemoryError) as exc:
        reason = exc.msg if isinstance(exc, SyntaxError) else "nested too deeply"
        raise ConditionError(f"cannot parse condition {source[:80]!r}: {reason}") from None
    names: list[str] = []
    _check(tree.body, names)
    if not names:
        _eval(tree.body, lambda _: None)
    else:
        _fold(tree.body)
    return Condition(source, tree, tuple(dict.fromkeys(names)))


def _fold(node: ast.expr) -> bool:
    """Evaluate every largest name-free part of a condition once (raising when it is too large);
    returns whether `node` itself is name-free. Each part is evaluated once, not once per
    enclosing part, so a long chain of constants costs linear time."""
    if isinstance(node, ast.Constant):
        return True
    if isinstance(node, ast.Name | ast.Attribute):
        return (_dotted(node) or "") in _CONSTANT_NAMES
    children = [c for c in ast.iter_child_nodes(node) if isinstance(c, ast.expr)]
    constant = [_fold(c) for c in children]
    if all(constant):
        return True
    for child, fixed in zip(children, constant, strict=True):
        if fixed and not isinstance(child, ast.Constant | ast.Name | ast.Attribute):
            _eval(child, lambda _: None)
    return False


def _dotted(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return f"{base}.{node.attr}" if base else None
    return None


def _check(node: ast.expr, names: list[str]) -> None:
    if isinstance(node, ast.Constant):
        if not isinstance(node.value, str | int | float | bool) and node.value is not None:
            raise ConditionError(f"literal {node.value!r} is not allowed")
        if isinstance(node.value, str) and len(node.value) > MAX_LITERAL_CHARS:
            raise ConditionError(f"a string in a condition may have at most {MAX_LITERAL_CHARS} "
                                 "characters")
        return
    if isinstance(node, ast.Name | ast.Attribute):
        dotted = _dotted(node)
        if dotted is None:
            raise ConditionError("only plain dotted names are allowed")
        if dotted not in _CONSTANT_NAMES:
            names.append(dotted)
        return
    children: list[ast.expr]
    if isinstance(node, ast.BoolOp):
        children = list(node.values)
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not | ast.USub | ast.UAdd):
        children = [node.operand]
    elif isinstance(node, ast.Compare) and all(type(op) in _COMPARE for op in node.ops):
        children = [node.left, *node.comparators]
    elif isinstance(node, ast.BinOp) and type(node.op) in _ARITH:
        children = [node.left, node.right]
    elif isinstance(node, ast.List | ast.Tuple):
        children = list(node.elts)
    else:
        raise ConditionError(f"{ast.unparse(node)!r} is not allowed in a condition")
    for child in children:
        _check(child, names)


def _eval(node: ast.expr, lookup: Callable[[str], Any]) -> Any:
    return _Evaluation(lookup).value(node)[0]


class _Evaluation:
    """One evaluation, tracking the size of every value it computes.

    A value's size counts nested items and string characters, so a repeated list of lists is as
    large as its expansion: comparing `[[[1]*99]*99]*99` with an equal copy walks all 99^3 items,
    although the repetition itself only copies 99 references. Bounding sizes bounds the work."""

    def __init__(self, lookup: Callable[[str], Any]) -> None:
        self.lookup = lookup

    def value(self, node: ast.expr) -> tuple[Any, int]:
        """The value of `node` and its size (nested items and characters)."""
        if isinstance(node, ast.Constant):
            return node.value, _size(node.value)
        if isinstance(node, ast.Name | ast.Attribute):
            dotted = _dotted(node) or ""
            if dotted in _CONSTANT_NAMES:
                return _CONSTANT_NAMES[dotted], 1
            found = self.lookup(dotted)
            return found, _size(found)
        if isinstance(node, ast.BoolOp):
            values = (self.value(v)[0] for v in node.values)
            return (all(values) if isinstance(node.op, ast.And) else any(values)), 1
        if isinstance(node, ast.UnaryOp):
            operand, size = self.value(node.operand)
            if isinstance(node.op, ast.Not):
                return not operand, 1
            return _safe(lambda: -operand if isinstance(node.op, ast.USub) else +operand), size
        if isinstance(node, ast.Compare):
            return self._compare(node), 1
        if isinstance(node, ast.BinOp):
            left, right = self.value(node.left), self.value(node.right)
            size = _bounded(node, left, right)
            return _safe(lambda: _ARITH[type(node.op)](left[0], right[0])), size
        if isinstance(node, ast.List | ast.Tuple):
            items = [self.value(e) for e in node.elts]
            size = 1 + sum(s for _, s in items)
            if size > MAX_SEQUENCE:
                raise _too_large(node, MAX_SEQUENCE)
            return [v for v, _ in items], size
        raise ConditionError(f"unexpected {ast.unparse(node)!r}")  # unreachable after _check

    def _compare(self, node: ast.Compare) -> bool:
        left = self.value(node.left)[0]
        for op, right_node in zip(node.ops, node.comparators, strict=True):
            right = self.value(right_node)[0]
            compare = _COMPARE[type(op)]
            if not _safe(functools.partial(compare, left, right)):
                return False
            left = right
        return True


def _size(value: Any, cap: int = MAX_SEQUENCE) -> int:
    """Nested items plus string characters of `value`, counted up to a little past `cap` (a
    looked-up value may be large; walking it all to learn that would cost as much as using it)."""
    if isinstance(value, str):
        return max(len(value), 1)
    if not isinstance(value, list | tuple):
        return 1
    total = 1
    for item in value:
        total += _size(item, cap - total) if isinstance(item, str | list | tuple) else 1
        if total > cap:
            break
    return total


def _digits(value: Any) -> int:
    """About the decimal digits of an int (0 for anything else)."""
    if isinstance(value, bool) or not isinstance(value, int):
        return 0
    return value.bit_length() * 3 // 10


def _too_large(node: ast.expr, limit: int) -> ConditionError:
    return ConditionError(f"{ast.unparse(node)[:60]!r} gives a value too large for a condition "
                          f"(more than {limit:,} characters, items or digits)")


def _bounded(node: ast.BinOp, left: tuple[Any, int], right: tuple[Any, int]) -> int:
    """The size of the operation's result, refusing, before computing it, a result too large or
    a repetition of a list that holds lists (its size hides in shared references)."""
    (a, a_size), (b, b_size) = left, right
    if isinstance(node.op, ast.Mult):
        if isinstance(b, str | list | tuple) and isinstance(a, int):
            (a, a_size), (b, b_size) = right, left
        if isinstance(a, str | list | tuple) and isinstance(b, int):
            if isinstance(a, list | tuple) and b > 1 and any(isinstance(x, list | tuple) for x in a):
                raise ConditionError(f"{ast.unparse(node)[:60]!r} repeats a list of lists; a "
                                     "condition may only repeat strings and lists of plain values")
            size = (a_size - 1) * max(b, 0) + 1 if isinstance(a, list | tuple) else a_size * max(b, 0)
            if size > MAX_SEQUENCE:
                raise _too_large(node, MAX_SEQUENCE)
            return max(size, 1)
        if isinstance(a, int) and isinstance(b, int) and _digits(a) + _digits(b) > MAX_NUMBER_DIGITS * 2:
            raise _too_large(node, MAX_NUMBER_DIGITS * 2)
        return 1
    if isinstance(node.op, ast.Add) and isinstance(a, str | list | tuple):
        size = a_size + b_size
        if size > MAX_SEQUENCE:
            raise _too_large(node, MAX_SEQUENCE)
        return size
    return 1


def _safe(compute: Callable[[], Any]) -> Any:
    """Type mismatches (null > 3, 'a' * 'b') evaluate to null instead of raising."""
    try:
        return compute()
    except (TypeError, ZeroDivisionError):
        return None


def namespace_lookup(values: Mapping[str, Any]) -> Callable[[str], Any]:
    """A lookup over flat names plus nested component reports (`validate.loss.level`)."""

    def lookup(dotted: str) -> Any:
        if dotted in values:
            return values[dotted]
        parts = dotted.split(".")
        for cut in range(len(parts) - 1, 0, -1):
            head = ".".join(parts[:cut])
            if head in values:
                value: Any = values[head]
                for part in parts[cut:]:
                    value = value.get(part) if isinstance(value, Mapping) else None
                return value
        return None

    return lookup
