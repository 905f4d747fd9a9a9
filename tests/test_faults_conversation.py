"""Faults of the conversation compactor: a role handoff asked for a role the history does not have."""

from __future__ import annotations

import json
import re

import pytest

import compactor
from compactor.errors import InputError

from .helpers import REPO, run_cli

TEAM = REPO / "tests" / "data" / "team_en.json"


# -- role= a role the history does not have -------------------------------------------------------------


def test_an_unknown_role_is_an_input_error_naming_the_roles_present() -> None:
    team = json.loads(TEAM.read_text(encoding="utf-8"))
    budget = int(0.35 * compactor.count_message_tokens(team))
    with pytest.raises(InputError, match="role 'illustrator' matches nobody") as raised:
        compactor.compact_messages(team, budget, role="illustrator")
    assert "the roles present: Dana, coder, planner, reviewer, tester" in str(raised.value)
    with pytest.raises(InputError, match="matches nobody"):  # a history that fits is no exception
        compactor.compact_messages(team, 10 * budget, role="illustrator")
    # a role known by a synonym, by its speaker's name or by the generic speaker still writes a handoff
    for role in ("reviewer", "qa", "Dana"):
        out = compactor.compact_messages(team, budget, role=role)
        assert f"role: {role}" in (out.summary or "")
    plain = [{"role": "user", "content": "Explain the export bug. " * 60},
             {"role": "assistant", "content": "The export drops the last row. " * 60},
             {"role": "user", "content": "And the fix?"}]
    assert compactor.compact_messages(plain, 200, role="assistant").summary
    with pytest.raises(InputError, match="the roles present: assistant, user"):
        compactor.compact_messages(plain, 200, role="tester")


def test_a_role_addressed_before_it_speaks_is_known() -> None:
    history = [{"role": "system", "content": "A team ships a CSV exporter."},
               {"role": "user", "content": "Build the exporter for report.csv."}]
    for i in range(12):
        said = f"Wrote writer_{i} in src/export.py; it streams rows in batches of {i + 1}k."
        history.append({"role": "assistant", "name": "coder", "content": said})
    history.append({"role": "assistant", "name": "coder", "content": "@tester please test src/export.py."})
    out = compactor.compact_messages(history, 300, keep_last=1, role="tester", kind="coding")
    assert re.search(r"role:? tester\b", out.summary or "")


def test_the_command_line_exits_2_on_an_unknown_role() -> None:
    result = run_cli("conversation", str(TEAM), "--budget", "800", "--role", "illustrator")
    assert result.returncode == 2 and result.stdout == ""
    assert "role 'illustrator' matches nobody" in result.stderr
    assert "Dana, coder, planner, reviewer, tester" in result.stderr
