"""The `when:` expression language."""

from __future__ import annotations

import pytest

from compactor.conditions import namespace_lookup, parse_condition
from compactor.errors import ConditionError


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("tokens > 45000 * 0.8", True),
        ("tokens > 45000", False),
        ("validate.loss.level == 'severe'", True),
        ("validate.loss.level in ['moderate', 'severe'] and not query", True),
        ("missing.value > 3", False),
        ("missing.value == null", True),
        ("(tokens - 36000) / 2 >= 1 or false", True),
        ("query == 'x'", False),
    ],
)
def test_evaluates(source: str, expected: bool) -> None:
    lookup = namespace_lookup({"tokens": 40000, "query": None,
                               "validate.loss": {"level": "severe"}})
    assert parse_condition(source).evaluate(lookup) is expected


@pytest.mark.parametrize("source", ["__import__('os').system('x')", "tokens.__class__()",
                                    "[x for x in y]", "lambda: 1", "a if b else c", "f(1)",
                                    "tokens[0]", "tokens >"])
def test_rejects_anything_outside_the_grammar(source: str) -> None:
    with pytest.raises(ConditionError):
        parse_condition(source)


def test_collects_names() -> None:
    assert parse_condition("tokens > budget and validate.loss.level == 'x'").names == (
        "tokens", "budget", "validate.loss.level")
