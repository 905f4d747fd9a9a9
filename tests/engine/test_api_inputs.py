"""The Python API checks its arguments as the CLI does: one clear InputError, never a silent
default or a bare TypeError."""

from __future__ import annotations

from typing import Any

import pytest

import compactor
from compactor import InputError

TEXT = "Paris is the capital of France. 北京是中国的首都。 " * 30


@pytest.mark.parametrize(("call", "message"), [
    ({"text": None}, "got None"),
    ({"text": b"Paris is the capital"}, "decode it first"),
    ({"text": 42}, "got int 42"),
    ({"text": [TEXT, b"bytes"]}, "decode it first"),
    ({"text": TEXT, "budget": 300.0}, "whole number of tokens"),
    ({"text": TEXT, "budget": "300"}, "got str '300'"),
    ({"text": TEXT, "budget": True}, "whole number of tokens"),
    ({"text": TEXT, "budget": -5}, "greater than 0"),
    ({"text": TEXT, "query": 7}, "query must be text"),
])
def test_bad_arguments_raise_one_clear_input_error(call: dict[str, Any], message: str) -> None:
    text = call.pop("text")
    with pytest.raises(InputError, match=message) as caught:
        compactor.compress(text, **call)
    assert "\n" not in str(caught.value)


def test_an_int_budget_is_the_budget_not_the_pipeline_default() -> None:
    out = compactor.compress(TEXT, budget=50)
    assert compactor.get_counter("cl100k_base").count(out) <= 50
    assert compactor.compress(TEXT, budget=compactor.Budget(max_tokens=40)) != out
