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
    """Evaluate every name-free part of a condition once (raising when it is too large); returns
    whether `node` itself is name-free."""
    if isinstance(node, ast.Constant):
        return True
    if isinstance(node, ast.Name | ast.Attribute):
        return (_dotted(node) or "") in _CONSTANT_NAMES
    children = [c for c in ast.iter_child_nodes(node) if isinstance(c, ast.expr)]
    constant = all([_fold(c) for c in children])
    if constant and isinstance(node, ast.BinOp):
        _eval(node, lambda _: None)
    return constant


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
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name | ast.Attribute):
        dotted = _dotted(node) or ""
        return _CONSTANT_NAMES[dotted] if dotted in _CONSTANT_NAMES else lookup(dotted)
    if isinstance(node, ast.BoolOp):
        values = (_eval(v, lookup) for v in node.values)
        return all(values) if isinstance(node.op, ast.And) else any(values)
    if isinstance(node, ast.UnaryOp):
        value = _eval(node.operand, lookup)
        if isinstance(node.op, ast.Not):
            return not value
        return _safe(lambda: -value if isinstance(node.op, ast.USub) else +value)
    if isinstance(node, ast.Compare):
        left = _eval(node.left, lookup)
        for op, right_node in zip(node.ops, node.comparators, strict=True):
            right = _eval(right_node, lookup)
            compare = _COMPARE[type(op)]
            if not _safe(functools.partial(compare, left, right)):
                return False
            left = right
        return True
    if isinstance(node, ast.BinOp):
        left, right = _eval(node.left, lookup), _eval(node.right, lookup)
        _bounded(node, left, right)
        return _safe(lambda: _ARITH[type(node.op)](left, right))
    if isinstance(node, ast.List | ast.Tuple):
        return [_eval(e, lookup) for e in node.elts]
    raise ConditionError(f"unexpected {ast.unparse(node)!r}")  # unreachable after _check


def _size(value: Any) -> int:
    if isinstance(value, str | list | tuple):
        return len(value)
    if isinstance(value, bool) or not isinstance(value, int):
        return 0
    return value.bit_length() * 3 // 10  # about its decimal digits


def _bounded(node: ast.BinOp, left: Any, right: Any) -> None:
    """Refuse an operation whose result would be too large, before computing it."""
    big = (MAX_SEQUENCE, MAX_SEQUENCE)
    if isinstance(node.op, ast.Mult):
        sizes = [_size(left), _size(right)]
        if isinstance(left, str | list | tuple) and isinstance(right, int):
            result = len(left) * max(right, 0)
        elif isinstance(right, str | list | tuple) and isinstance(left, int):
            result = len(right) * max(left, 0)
        elif isinstance(left, int) and isinstance(right, int):
            result = sum(sizes)
            big = (MAX_NUMBER_DIGITS * 2, MAX_NUMBER_DIGITS * 2)
        else:
            return
    elif isinstance(node.op, ast.Add):
        result = _size(left) + _size(right)
    else:
        return
    if result > big[0]:
        raise ConditionError(f"{ast.unparse(node)[:60]!r} gives a value too large for a condition "
                             f"(more than {big[1]:,} characters, items or digits)")


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
