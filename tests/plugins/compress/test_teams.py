"""Teams of agents (planner, coder, tester, reviewer handing work to each other): detected as agent
work, never as a meeting, and one role's handoff (`roles.handoff`): what concerns that role, what
it needs first, its open tasks and its errors."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import compactor
from compactor.errors import InputError
from compactor.formats.messages import read_messages
from compactor.plugins.compress.eight_segment import history as hx
from compactor.plugins.compress.eight_segment import roles
from compactor.plugins.compress.eight_segment.kinds import AGENT_KINDS, detect_kind
from compactor.plugins.compress.eight_segment.roles import Handoff, handoff, read_team, role_of

from ...helpers import DATA, EVAL, run_cli
from .test_conversation_kinds import chat, meeting

TEAMS = ("team_en.json", "team_zh.json")


def _load(name: str) -> list[dict[str, Any]]:
    return list(json.loads((DATA / name).read_text(encoding="utf-8")))


def _history(messages: list[dict[str, Any]]) -> hx.History:
    return hx.History(read_messages(messages))


def _find(messages: list[dict[str, Any]], text: str) -> int:
    """The index of the one message holding `text`."""
    found = [i for i, m in enumerate(messages) if text in (m.get("content") or "")]
    assert len(found) == 1, (text, found)
    return found[0]


def _dropped(messages: list[dict[str, Any]]) -> list[int]:
    """What a compaction that keeps the system message and the last two turns drops."""
    return list(range(1, len(messages) - 2))


# -- the fixtures --------------------------------------------------------------------------------


@pytest.mark.parametrize("name", TEAMS)
def test_fixture_is_a_team_handing_work(name: str) -> None:
    messages = _load(name)
    assert 40 <= len(messages) <= 60
    agents = Counter(m["name"] for m in messages if m["role"] == "assistant")
    assert sorted(role_of(a) or "" for a in agents) == ["coder", "planner", "reviewer", "tester"]
    text = "\n".join(m["content"] for m in messages)
    assert text.count("```") >= 16  # code, diffs, commands
    assert "FAILED" in text and "AssertionError" in text  # a failing test, and its fix later
    assert "决定" in text or "Decision:" in text


# -- detection -----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", TEAMS)
def test_team_is_detected_as_a_coding_agent(name: str) -> None:
    messages = _load(name)
    assert detect_kind(_history(messages)) == "coding"
    budget = compactor.count_message_tokens(messages) // 3
    out = compactor.compact_messages(messages, budget)
    assert out.report["kind"] == "coding" and out.report["kind"] in AGENT_KINDS
    summary = out.summary or ""
    assert "## People" not in summary and "## 参与者" not in summary


def _rename(messages: list[dict[str, Any]], names: dict[str, str],
            role: str | None = None) -> list[dict[str, Any]]:
    out = []
    for m in messages:
        if m.get("name") in names:
            m = {**m, "name": names[m["name"]], **({"role": role} if role else {})}
        out.append(m)
    return out


@pytest.mark.parametrize("variant", ["synonyms", "as_users", "roles_as_role_field", "chinese_names"])
def test_team_variants_are_agent_work(variant: str) -> None:
    """Other spellings of the same team: synonyms and decorated names, agents that post as named
    users (group-chat frameworks), the role in the `role` field, Chinese role names."""
    messages = _load("team_en.json")
    if variant == "synonyms":
        messages = _rename(messages, {"planner": "ProductManager", "coder": "senior_python_developer",
                                      "tester": "QAEngineer", "reviewer": "code-critic"})
    elif variant == "as_users":
        messages = _rename(messages, {n: n for n in ("planner", "coder", "tester", "reviewer")}, role="user")
    elif variant == "roles_as_role_field":
        messages = [{"role": m["name"], "content": m["content"]} if m["role"] == "assistant" else m
                    for m in messages]
    else:
        messages = _rename(messages, {"planner": "方案规划师", "coder": "编码专家", "tester": "测试工程师",
                                      "reviewer": "代码审查员"})
    assert detect_kind(_history(messages)) == "coding"


def test_team_without_code_is_a_tool_agent() -> None:
    """Agent roles that keep handing work to each other are agent work, "tool" without code or files."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Write a launch post for the spring sale."}]
    for k in range(6):
        messages += [
            {"role": "assistant", "name": "planner",
             "content": f"Outline {k}: open with the discount, then the dates. "
                        f"@writer please draft part {k}."},
            {"role": "assistant", "name": "writer",
             "content": f"Draft {k} is ready: the sale runs for a week and everything is cheaper. "
                        f"Handing it to the critic."},
            {"role": "assistant", "name": "critic",
             "content": f"Part {k} reads well, but the opening is long. @writer shorten it, then back to "
                        "the planner."},
        ]
    assert detect_kind(_history(messages)) == "tool"


def _titled_meeting() -> list[dict[str, Any]]:
    """People with job titles (as in the AMI meetings) talking, no code, nobody handing work over."""
    speakers = ["Project Manager", "Marketing", "Industrial Designer", "User Interface"]
    lines = ["So the remote control should be simple, with big buttons for the elderly.",
             "Our survey says young people want something fancy and spongy.",
             "The case could be rubber, and we could use a kinetic battery.",
             "I think the menu should be on the screen, not on the remote itself."]
    return [{"role": "assistant" if i % 4 == 0 else "user", "name": speakers[i % 4],
             "content": f"{lines[i % 4]} Point {i} for the next meeting."} for i in range(40)]


def _planners_meeting() -> list[dict[str, Any]]:
    """Two role-like titles among people (a wedding planner and a coordinator): a meeting."""
    speakers = ["Wedding Planner", "Coordinator", "Bride", "Groom"]
    lines = ["The ceremony starts at four, and the photos are right after it.",
             "The caterer needs the final guest count by Friday.",
             "I would love peonies on every table, and candles too.",
             "My parents arrive on Thursday, so the rehearsal dinner works."]
    return [{"role": "user", "name": speakers[i % 4], "content": lines[i % 4]} for i in range(32)]


@pytest.mark.parametrize(("messages", "kind"), [
    (meeting(), "meeting"), (chat(60), "chat"), (_titled_meeting(), "meeting"),
    (_planners_meeting(), "meeting")],
    ids=["meeting", "chat", "titled_meeting", "planners_meeting"])
def test_meetings_and_chats_keep_their_kind(messages: list[dict[str, Any]], kind: str) -> None:
    assert detect_kind(_history(messages)) == kind
    budget = compactor.count_message_tokens(messages) // 3
    assert compactor.compact_messages(messages, budget).report["kind"] == kind


def _qmsum_and_vcsum() -> list[list[dict[str, Any]]]:
    """The dev meetings as the benchmarks make them (the chair as the named assistant), and with every
    speaker a named assistant."""
    found = []
    with (EVAL / "meeting-transcripts-qmsum" / "test.jsonl").open(encoding="utf-8") as lines:
        for line in lines:
            turns = [(u["speaker"], u["content"]) for u in json.loads(line)["meeting_transcripts"]
                     if u["content"].strip()]
            found.append(turns)
    with (EVAL / "vcsum-zh-meetings" / "meetings.jsonl").open(encoding="utf-8") as lines:
        for line in lines:
            record = json.loads(line)
            found.append([(f"speaker_{u['speaker']}", u["text"]) for s in record["segments"]
                          for u in s["utterances"] if u["text"].strip()])
    out = []
    for turns in found:
        chair = Counter(s for s, _ in turns).most_common(1)[0][0]
        out.append([{"role": "assistant" if s == chair else "user", "name": s, "content": t}
                    for s, t in turns])
        out.append([{"role": "assistant", "name": s, "content": t} for s, t in turns])
    return out


@pytest.mark.skipif(not all((EVAL / d).is_dir() for d in ("meeting-transcripts-qmsum", "vcsum-zh-meetings")),
                    reason="../shared/eval not present")
def test_dev_meetings_are_never_teams() -> None:
    for messages in _qmsum_and_vcsum():
        history = _history(messages)
        assert detect_kind(history) in ("meeting", "chat")
        team = read_team(history)
        assert len(team.roles) <= 1 and team.work < 0.2 * team.turns


@pytest.mark.parametrize(("name", "role"), [
    ("coder", "coder"), ("Coder", "coder"), ("senior_python_coder", "coder"), ("DevAgent", "coder"),
    ("developer", "coder"), ("编码员", "coder"), ("编码专家", "coder"), ("资深编码员A", "coder"),
    ("QAEngineer", "tester"), ("tester-2", "tester"), ("tester10", "tester"), ("测试员", "tester"),
    ("测试工程师", "tester"),
    ("code_reviewer", "reviewer"), ("critic", "reviewer"), ("审查员", "reviewer"), ("代码审查员", "reviewer"),
    ("planner", "planner"), ("ProductManager", "planner"), ("规划师", "planner"), ("方案规划师", "planner"),
    ("Alice", None), ("user", None), ("assistant", None), ("Marketing", None), ("Industrial Designer", None),
    ("Sound Engineer", None), ("PhD C", None), ("Bride", None)])
def test_role_of(name: str, role: str | None) -> None:
    assert role_of(name) == role


# -- one role's handoff ----------------------------------------------------------------------------


def _handoffs(name: str) -> tuple[list[dict[str, Any]], hx.History, dict[str, Handoff]]:
    messages = _load(name)
    history = _history(messages)
    dropped = _dropped(messages)
    return messages, history, {r: handoff(history, dropped, r)
                               for r in ("planner", "coder", "tester", "reviewer")}


def _assert_contract(result: Handoff, dropped: list[int]) -> None:
    assert result.visible == sorted(set(result.visible)) and set(result.visible) <= set(dropped)
    assert set(result.weights) == set(result.visible) == set(result.reasons)
    assert all(roles.MIN_WEIGHT <= w <= roles.MAX_WEIGHT for w in result.weights.values())
    assert set(result.pending) <= set(result.visible) and set(result.errors) <= set(result.visible)
    assert set(result.tasks) == set(result.pending)


@pytest.mark.parametrize("name", TEAMS)
def test_handoffs_differ_by_role(name: str) -> None:
    messages, _, results = _handoffs(name)
    for result in results.values():
        _assert_contract(result, _dropped(messages))
    assert {r: results[r].profile for r in results} == {r: r for r in results}
    for a, b in (("coder", "tester"), ("coder", "reviewer"), ("tester", "reviewer")):
        assert results[a].visible != results[b].visible, (a, b)
        assert results[a].weights != results[b].weights, (a, b)
    coder, tester, reviewer = results["coder"], results["tester"], results["reviewer"]
    plan = 2  # the planner's plan: steps for every role
    en = name == "team_en.json"
    handed_to_tester = _find(messages, "@tester handing off" if en else "交给测试员：")
    fix = _find(messages, "Fixed format_timestamp()" if en else "已修复 services/order_service.py")
    decision = _find(messages, "Decision: we use zoneinfo" if en else "决定：游标采用")
    # a coder needs the plan and the failures first; a tester the changed code and what to test;
    # a reviewer the diffs and the decisions
    failure_report = _find(messages, "@coder two failures" if en else "@编码员 list_orders()")
    assert coder.weights[failure_report] > tester.weights.get(failure_report, 0)
    assert coder.weights[plan] >= 3.0 and "task" in coder.reasons[plan]
    assert tester.weights[handed_to_tester] > coder.weights[handed_to_tester]
    assert "task" in tester.reasons[handed_to_tester]
    assert tester.weights[fix] > coder.weights[fix] and reviewer.weights[fix] > coder.weights[fix]
    assert reviewer.weights[decision] > tester.weights.get(decision, 0)
    top = sorted(coder.weights, key=lambda i: -coder.weights[i])[:8]
    assert failure_report in top and plan in top
    # the people's messages concern every role
    people = [i for i, m in enumerate(messages) if m["role"] == "user"]
    for result in results.values():
        assert set(people) & set(_dropped(messages)) <= set(result.visible)


@pytest.mark.parametrize("name", TEAMS)
def test_the_error_and_its_fix_concern_the_coder(name: str) -> None:
    messages, _, results = _handoffs(name)
    en = name == "team_en.json"
    run = _find(messages, "Results: 2 failed" if en else "结果：1 failed")
    report = _find(messages, "@coder two failures" if en else "@编码员 list_orders()")
    fix = _find(messages, "Fixed format_timestamp()" if en else "已修复 services/order_service.py")
    coder = results["coder"]
    assert {run, report, fix} <= set(coder.errors)
    assert "error" in coder.reasons[report] and "fix" not in coder.reasons[report]
    assert coder.weights[report] == roles.MAX_WEIGHT or coder.weights[report] > 3.0
    assert results["reviewer"].errors == [] and results["planner"].errors == []


@pytest.mark.parametrize("name", TEAMS)
def test_pending_tasks_are_found_for_their_assignee(name: str) -> None:
    messages, history, results = _handoffs(name)
    en = name == "team_en.json"
    regression = _find(messages, "regression test for the DST fall-back" if en else "上线前请补一个回归用例")
    security = _find(messages, "SEC-77)" if en else "SEC-21）")
    assert results["tester"].pending == [regression]
    assert ("fall-back" if en else "回归用例") in results["tester"].tasks[regression]
    assert results["reviewer"].pending == [security]
    assert results["coder"].pending == [] and results["planner"].pending == []
    # a done report that names the task closes it
    said = ("Added test_dst_fall_back for the DST fall-back on 2024-11-03 in tests/test_dates.py: 13 passed."
            if en else "已添加跨 status 翻页的回归用例到 tests/test_orders.py，10 passed。")
    done = {"role": "assistant", "name": "tester" if en else "测试员", "content": said}
    closed = handoff(_history([*messages, done]), _dropped(messages), "tester")
    assert closed.pending == []
    # only the dropped messages are reported: a task in the kept turns is for the writer to read there
    assert handoff(history, list(range(1, regression)), "tester").pending == []


def test_roles_match_by_synonym_and_across_languages() -> None:
    en = _load("team_en.json")
    history = _history(en)
    dropped = _dropped(en)
    developer = handoff(history, dropped, "developer")
    assert developer.profile == "coder" and developer.speakers == {"coder"}
    assert developer.visible == handoff(history, dropped, "coder").visible
    assert handoff(history, dropped, "编码员").speakers == {"coder"}
    zh = _load("team_zh.json")
    assert handoff(_history(zh), _dropped(zh), "tester").speakers == {"测试员"}


def test_unknown_roles_are_matched_as_speakers() -> None:
    messages = [
        {"role": "system", "content": "A team localises the docs."},
        {"role": "user", "content": "Translate README.md and the install guide into French."},
        {"role": "assistant", "name": "editor", "content": "@translator please translate README.md first."},
        {"role": "assistant", "name": "translator", "content": "Done: README.fr.md is translated."},
        {"role": "assistant", "name": "editor",
         "content": "Thanks. @translator now docs/install.md, please."},
        {"role": "assistant", "name": "editor", "content": "Meanwhile I fix the links in docs/index.md."},
        {"role": "assistant", "name": "translator", "content": "Starting on docs/install.md."},
    ]
    history = _history(messages)
    result = handoff(history, range(1, 7), "translator")
    _assert_contract(result, list(range(1, 7)))
    assert result.profile is None and result.speakers == {"translator"}
    assert result.visible == [1, 2, 3, 4, 6] and "people" in result.reasons[1]
    assert result.pending == [4] and "docs/install.md" in result.tasks[4]
    assert result.weights[4] > result.weights[6]  # a task handed over ranks above its own chatter
    absent = handoff(history, range(1, 7), "illustrator")  # nobody of that name: the people's messages
    assert absent.speakers == frozenset() and absent.visible == [1] and absent.pending == []


# -- role= in a compaction ---------------------------------------------------------------------------


def _section(summary: str, key: str, zh: bool) -> str:
    """One section of a summary, heading to the next heading ('' when absent)."""
    from compactor.plugins.compress.eight_segment.conversation import SECTIONS

    title = next(z if zh else e for k, e, z in SECTIONS if k == key)
    start = summary.find(f"## {title}\n")
    if start < 0:
        return ""
    end = summary.find("\n## ", start + 1)
    return summary[start:end if end >= 0 else len(summary)]


_ZH_ROLES = {"coder": "编码员", "tester": "测试员", "reviewer": "审查员"}


def _role_outputs(name: str) -> tuple[list[dict[str, Any]], int, dict[str, compactor.CompactedMessages]]:
    messages = _load(name)
    budget = int(0.35 * compactor.count_message_tokens(messages))
    names = {"coder": "coder", "tester": "tester", "reviewer": "reviewer"}
    if name == "team_zh.json":  # the roles asked by their Chinese names
        names = _ZH_ROLES
    return messages, budget, {key: compactor.compact_messages(messages, budget, role=role, keep_last=2)
                              for key, role in names.items()}


@pytest.mark.parametrize("name", TEAMS)
def test_role_handoffs_at_35_percent_keep_what_each_role_needs(name: str) -> None:
    messages, budget, outputs = _role_outputs(name)
    en = name == "team_en.json"
    summaries: dict[str, str] = {}
    for key, out in outputs.items():
        assert compactor.count_message_tokens(list(out)) <= budget
        assert out.report["kind"] in AGENT_KINDS  # the agent template, never the people one
        summary = next(m["content"] for m in out if m["content"].startswith("[compactor]"))
        for section in ("primary", "concepts", "files", "problem"):
            assert _section(summary, section, not en), (key, section)
        assert (f"role: {key}" if en else f"角色 {_ZH_ROLES[key]}") in summary
        summaries[key] = summary
        text = "\n".join(m["content"] for m in out)
        idents = (("CSV-142", "src/export/dates.py") if en
                  else ("ORD-311", "ORD-312", "services/order_service.py"))
        for ident in idents:
            assert ident in text, (key, ident)
    assert len(set(summaries.values())) == 3  # one handoff per role
    # the coder: the failure it fixed, with the fix it made
    fix = _find(messages, "Fixed format_timestamp()" if en else "已修复 services/order_service.py")
    errors = _section(summaries["coder"], "errors", not en)
    assert ("test_dst_gap" if en else "test_same_timestamp_pages") in errors and f"(m{fix})" in errors
    # the tester: the regression test still to write, among its pending tasks
    regression = _find(messages, "regression test for the DST fall-back" if en else "上线前请补一个回归用例")
    pending = _section(summaries["tester"], "pending", not en)
    assert ("DST fall-back" if en else "回归用例") in pending and f"(m{regression})" in pending
    # the reviewer: the security review it was asked for
    security = _find(messages, "SEC-77)" if en else "SEC-21）")
    pending = _section(summaries["reviewer"], "pending", not en)
    assert ("SEC-77" if en else "SEC-21") in pending and f"(m{security})" in pending
    assert ("SEC-77" if en else "SEC-21") not in _section(summaries["tester"], "pending", not en)


def test_role_handoff_from_the_command_line(tmp_path: Path) -> None:
    path = tmp_path / "team.json"
    path.write_text(json.dumps(_load("team_en.json")), encoding="utf-8")
    result = run_cli("conversation", str(path), "--budget", "800", "--keep-last", "2", "--role", "reviewer")
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    summary = next(m["content"] for m in out if m["content"].startswith("[compactor]"))
    assert "SEC-77" in _section(summary, "pending", False) and "role: reviewer" in summary


# -- role= a role the history does not have -------------------------------------------------------------

TEAM = DATA / "team_en.json"


def test_an_unknown_role_is_an_input_error_naming_the_roles_present() -> None:
    team = _load("team_en.json")
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
