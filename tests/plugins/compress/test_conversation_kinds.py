"""Kind-aware compaction: detection, the people template, dates, value per token, focus,
the analyzer chain (scores, validate.ratio, quality from validate.loss) and keep_files."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
from typing import Any

import pytest

import compactor
from compactor import Component, Pipeline, ScoreSet, hookimpl
from compactor.errors import InputError
from compactor.formats.messages import read_messages
from compactor.plugins.compress.eight_segment import history as hx
from compactor.plugins.compress.eight_segment.kinds import (
    detect_kind,
    parse_date,
    resolve_relative,
    session_dates,
)

_NOUNS = ("weather", "coffee", "traffic", "music", "garden", "movie", "lunch", "train", "podcast", "rain",
          "bakery", "park", "neighbour", "concert", "market", "library", "bicycle", "museum", "sunset", "tea")
_ADJECTIVES = ("lovely", "strange", "noisy", "quiet", "great", "odd", "busy", "calm", "funny", "nice")
_SMALL_TALK = ("Haha, the {n} was {a} again today, as usual.", "Oh nice, I heard the {n} is {a} lately.",
               "Right? The {n} felt {a} this afternoon.", "True, the {n} has been {a} for a while now.")


def small_talk(i: int) -> str:
    """Varied filler, as in real chats (no sentence repeats word for word)."""
    noun, adjective = _NOUNS[(i * 7) % len(_NOUNS)], _ADJECTIVES[(i * 3) % len(_ADJECTIVES)]
    return _SMALL_TALK[i % 4].format(n=noun, a=adjective)


def chat(turns: int = 60, *, facts: dict[int, str] | None = None,
         dated: bool = False) -> list[dict[str, Any]]:
    """A long chat of small talk with dense facts at chosen turns."""
    facts = facts or {}
    out: list[dict[str, Any]] = []
    for i in range(turns):
        role = "user" if i % 2 == 0 else "assistant"
        message: dict[str, Any] = {"role": role, "content": facts.get(i, small_talk(i))}
        if dated and i % 20 == 0:
            message["date"] = f"2023-05-{8 + i // 20:02d}"
        out.append(message)
    return out


def tool_history() -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"role": "system", "content": "You are an airline agent."},
                                 {"role": "user", "content": "I want to change my reservation please."}]
    for k in range(8):
        call_id = f"call_{k}"
        out.append({"role": "assistant", "content": None, "tool_calls": [
            {"id": call_id, "type": "function",
             "function": {"name": "get_reservation_details",
                          "arguments": json.dumps({"reservation_id": f"RES{k:03d}X"})}}]})
        out.append({"role": "tool", "tool_call_id": call_id,
                    "content": json.dumps({"reservation_id": f"RES{k:03d}X", "origin": "JFK",
                                           "destination": "SFO", "flights": [f"HAT{100 + k}"]})})
        out.append({"role": "assistant", "content": f"Reservation RES{k:03d}X flies JFK to SFO."})
        out.append({"role": "user", "content": "OK, and the next one?"})
    return out


def coding_history(extra_turns: int = 12) -> list[dict[str, Any]]:
    source = "\n".join(f"def handler_{n}(event):\n    return process(event, level={n})" for n in range(12))
    out: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent. Reply with one ```bash block per turn."},
        {"role": "user", "content": "Fix the crash in src/app/handlers.py when the level is negative."},
        {"role": "assistant", "content": "Let me read the file.\n```bash\ncat src/app/handlers.py\n```"},
        {"role": "user", "content": f"<returncode>0</returncode>\n<output>\n{source}\n</output>"},
    ]
    for n in range(extra_turns):
        command = f"python -m pytest tests/test_handlers.py -k case{n}"
        text = f"Running the tests again, attempt {n}.\n```bash\n{command}\n```"
        out.append({"role": "assistant", "content": text})
        out.append({"role": "user", "content": "<returncode>0</returncode>\n<output>\n" + (
            f"tests/test_handlers.py::test_case{n} PASSED\n" * 30) + "</output>"})
    return out


def meeting() -> list[dict[str, Any]]:
    speakers = ["Chair", "Alice", "Bob", "Carol"]
    out = []
    for i in range(48):
        who = speakers[i % 4]
        out.append({"role": "assistant" if who == "Chair" else "user", "name": who,
                    "content": f"Point {i}: the budget for workstream {i % 6} should stay within plan, "
                               f"and we reviewed the timeline for the release number {i}."})
    return out


# -- detection --------------------------------------------------------------------------------------


@pytest.mark.parametrize(("messages", "kind"), [
    (chat(10), "chat"), (meeting(), "meeting"), (tool_history(), "tool"), (coding_history(), "coding")])
def test_detect_kind(messages: list[dict[str, Any]], kind: str) -> None:
    assert detect_kind(hx.History(read_messages(messages))) == kind


def test_kind_is_reported_and_can_be_forced() -> None:
    history = chat(60)
    budget = compactor.count_message_tokens(history) // 5
    assert compactor.compact_messages(history, budget).report["kind"] == "chat"
    forced = compactor.compact_messages(history, budget, kind="coding")
    assert forced.report["kind"] == "coding"
    assert "## Primary Request and Intent" in (forced.summary or "") or "## All user messages" in (
        forced.summary or "")
    with pytest.raises(InputError, match="kind must be one of"):
        compactor.compact_messages(history, budget, kind="poem")


# -- the people template -----------------------------------------------------------------------------


def test_chat_template_keeps_facts_dates_plans_and_cites_messages() -> None:
    facts = {10: "I'm Sam, a nurse in Boston, and I love hiking with my dog Max.",
             24: "Yesterday I went to Walden Pond with my sister Ana.",
             30: "I will fly to Bergen with Ana next month, on June 12.",
             36: "Can you recommend a quiet hotel in Bergen near the harbour?"}
    history = chat(150, facts=facts, dated=True)
    budget = compactor.count_message_tokens(history) // 4
    out = compactor.compact_messages(history, budget)
    summary = out.summary or ""
    assert out.report["kind"] == "chat"
    assert "## People" in summary and "## Facts and preferences" in summary
    assert "m10" in summary and "nurse in Boston" in summary
    # session dates: m24 is in the session of 2023-05-09 (set at m20); "yesterday" resolved from it
    assert "m24, 2023-05-09 user: Yesterday [2023-05-08] I went" in summary
    assert "next month [2023-06]" in summary and "## Plans and commitments" in summary
    assert "## Primary Request and Intent" not in summary
    assert compactor.count_message_tokens(out) <= budget


def test_value_per_token_beats_head_and_tail_on_dense_middle_turns() -> None:
    facts = {i: f"My locker code for gym number {i} is {4000 + 7 * i} and the key tag says Z{i}Q."
             for i in range(20, 40, 4)}
    history = chat(120, facts=facts)
    budget = compactor.count_message_tokens(history) // 5
    out = compactor.compact_messages(history, budget)
    text = "\n".join(m["content"] or "" for m in out)
    kept = sum(str(4000 + 7 * i) in text for i in facts)
    assert kept == len(facts), out.summary
    verbatim_turns = sum(f"m{i} " in text for i in facts)  # short turns are kept whole, with their id
    assert verbatim_turns == len(facts)


def test_session_date_travels_with_the_kept_tail() -> None:
    history = chat(60, dated=True)
    out = compactor.compact_messages(history, compactor.count_message_tokens(history) // 4, keep_last=2)
    assert "kept verbatim below (from m58) are from 2023-05-10" in (out.summary or "")


def test_meeting_template_names_the_participants() -> None:
    history = meeting()
    out = compactor.compact_messages(history, compactor.count_message_tokens(history) // 3)
    summary = out.summary or ""
    assert out.report["kind"] == "meeting"
    assert "## People" in summary
    for who in ("Chair", "Alice", "Bob", "Carol"):
        assert f"- {who}" in summary
    assert "## Key points" in summary or "## Decisions and action items" in summary


def test_compacting_a_compacted_chat_keeps_the_first_summary_lines() -> None:
    facts = {12: "My passport number is K7731920 and it expires in 2031."}
    history = chat(60, facts=facts)
    budget = compactor.count_message_tokens(history) // 3
    first = list(compactor.compact_messages(history, budget))
    longer = first + chat(40)
    second = compactor.compact_messages(longer, budget)
    assert "K7731920" in (second.summary or "")


# -- dates ------------------------------------------------------------------------------------------


def test_dates_parse_and_resolve() -> None:
    assert parse_date("1:56 pm on 8 May, 2023") == dt.date(2023, 5, 8)
    assert parse_date("May 8, 2023") == dt.date(2023, 5, 8)
    assert parse_date("2023年5月8日") == dt.date(2023, 5, 8)
    assert parse_date(1683504000) == dt.date(2023, 5, 8)
    assert parse_date("no date here") is None
    day = dt.date(2023, 5, 10)  # a Wednesday
    assert resolve_relative("I saw her yesterday.", day) == "I saw her yesterday [2023-05-09]."
    assert "last Friday [2023-05-05]" in resolve_relative("We met last Friday.", day)
    assert "3 days ago [2023-05-07]" in resolve_relative("It broke 3 days ago.", day)
    assert "last year [2022]" in resolve_relative("Since last year.", day)
    assert "昨天 [2023-05-09]" in resolve_relative("我昨天去了北京。", day)
    assert "上周 [week of 2023-05-01]" in resolve_relative("上周很忙。", day)
    assert resolve_relative("yesterday", None) == "yesterday"
    messages = read_messages([{"role": "system", "content": "Session 2 - 8 May 2023"},
                              {"role": "user", "content": "hi"},
                              {"role": "user", "content": "later", "timestamp": "2023-06-01T10:00:00Z"}])
    assert session_dates(messages) == [dt.date(2023, 5, 8), dt.date(2023, 5, 8), dt.date(2023, 6, 1)]


# -- focus -------------------------------------------------------------------------------------------


def test_focus_raises_matching_lines_in_the_people_template() -> None:
    facts = {i: f"Item {i}: the invoice for project {chr(65 + i % 26)}{i} was sent on time and paid."
             for i in range(4, 156, 2)}
    history = chat(160, facts=facts)
    budget = compactor.count_message_tokens(history) // 10
    plain = compactor.compact_messages(history, budget)
    focused = compactor.compact_messages(history, budget, focus="the invoice of project C80")
    assert "project C80" in (focused.summary or "")
    assert "project C80" not in (plain.summary or "")


def test_focus_raises_matching_lines_in_the_agent_template() -> None:
    history = tool_history()
    history.insert(12, {"role": "user", "content": "Also note the refund for order 123 must go to the "
                                                   "original card ending 4242."})
    budget = 260
    focused = compactor.compact_messages(history, budget, focus="refund for order 123")
    assert "order 123" in (focused.summary or "")


# -- the analyzer chain --------------------------------------------------------------------------------


class PreferM30(Component):
    """A third-party scorer: message 30 matters, the rest hardly."""

    name = "test.prefer_m30"
    stage = "score"

    @hookimpl
    def compactor_score(self, context, run):  # type: ignore[no-untyped-def]
        return ScoreSet(self.name, {c.id: 1.0 if c.index == 30 else 0.0 for c in context.chunks})


class _Plugin:
    @hookimpl
    def compactor_register_components(self, register):  # type: ignore[no-untyped-def]
        register(PreferM30)


def test_a_third_party_scorer_changes_what_is_kept() -> None:
    facts = {i: f"Note {i}: the parcel with tracking code TRK{1000 + i} left depot D{i} this morning."
             for i in range(2, 58)}
    history = chat(60, facts=facts)
    budget = compactor.count_message_tokens(history) // 10
    plain = compactor.compact_messages(history, budget)
    scored = Pipeline.from_string("version: 1\nname: scored\nsteps:\n  - use: chunk.messages\n"
                                  "  - use: test.prefer_m30\n  - use: compress.eight_segment\n"
                                  "output: {format: messages}\n", plugins=[_Plugin()])
    chosen = compactor.compact_messages(history, budget, pipeline=scored)
    assert "TRK1030" in (chosen.summary or "")
    assert "TRK1030" not in (plain.summary or "")


def test_quality_in_the_metadata_is_validate_loss_retention() -> None:
    history = tool_history()
    pipeline = Pipeline.from_string("version: 1\nname: q\nsteps:\n  - use: chunk.messages\n"
                                    "  - use: compress.eight_segment\n  - use: validate.loss\n"
                                    "output: {format: messages}\n")
    out = compactor.compact_messages(history, 300, pipeline=pipeline)
    loss = next(s for s in out.report["steps"] if s["step"] == "validate.loss")["details"]
    retention = float(loss.get("retention", loss.get("validate.loss", {}).get("retention", -1)))
    assert abs(out.report["quality"] - retention) <= 0.02
    assert f"quality score {out.report['quality']:.2f}" in (out.summary or "") or (
        f"quality {out.report['quality']:.2f}" in (out.summary or ""))


def test_validate_ratio_retries_with_a_larger_share() -> None:
    history = chat(60, facts={i: f"Fact {i}: code Q{i * 37} belongs to vault V{i}." for i in range(1, 59, 2)})
    pipeline = Pipeline.from_string(
        "version: 1\nname: r\nsteps:\n  - use: chunk.messages\n  - use: compress.eight_segment\n"
        "    with: {share: 0.3}\n  - use: validate.loss\n  - use: validate.ratio\n"
        "    with: {max_attempts: 2, step: 0.3, expand_on: [severe, moderate, acceptable, minimal]}\n"
        "output: {format: messages}\n")
    budget = compactor.count_message_tokens(history) // 3
    out = compactor.compact_messages(history, budget, pipeline=pipeline)
    ratio = [s for s in out.report["steps"] if s["step"] == "validate.ratio"]
    attempts = ratio[-1]["details"].get("attempts") or ratio[-1]["details"].get("validate.ratio", {}).get(
        "attempts")
    assert attempts and len(attempts) >= 2
    assert attempts[-1]["share"] > attempts[0]["share"]
    assert out.report["budget_share"] > 0.3
    assert compactor.count_message_tokens(out) <= budget


# -- keep_files ----------------------------------------------------------------------------------------


def test_keep_files_keeps_the_latest_view_verbatim() -> None:
    history = coding_history()
    budget = compactor.count_message_tokens(history) // 3
    plain = compactor.compact_messages(history, budget)
    kept = compactor.compact_messages(history, budget, keep_files=1)
    assert kept.report["kind"] == "coding"
    assert "return process(event, level=7)" in (kept.summary or "")
    assert "return process(event, level=7)" not in (plain.summary or "")
    assert "`src/app/handlers.py` as last shown (m3)" in (kept.summary or "")
    assert compactor.count_message_tokens(kept) <= budget
    with pytest.raises(InputError, match="keep_files"):
        compactor.compact_messages(history, budget, keep_files=-1)


def test_cli_kind_focus_and_keep_files(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "chat.json"
    history = chat(160, facts={80: "Please handle the refund for order 123 before the audit."})
    path.write_text(json.dumps(history), encoding="utf-8")
    budget = str(compactor.count_message_tokens(history) // 6)
    run = [sys.executable, "-m", "compactor.ops.cli", "conversation", str(path), "--budget", budget]
    done = subprocess.run([*run, "--kind", "meeting", "--focus", "refund order 123"],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    messages = json.loads(done.stdout)
    summary = next(m["content"] for m in messages if m["content"].startswith("[compactor]"))
    assert "order 123" in summary and "## People" in summary
    bad = subprocess.run([*run, "--keep-files", "-1"], capture_output=True, text=True, check=False)
    assert bad.returncode != 0 and "--keep-files" in bad.stderr


def test_chinese_chat_gets_the_people_template_with_resolved_dates() -> None:
    fill = ["哈哈，今天天气真不错。", "是啊，下午喝了一杯咖啡。", "对，最近工作有点忙。",
            "嗯嗯，周末好好休息一下吧。"]
    facts = {10: "我是李雷，在上海做护士，我喜欢带着我的狗去爬山。", 24: "昨天我和妹妹去了西湖。",
             30: "我打算下个月和妹妹去成都玩两周，6月12日出发。"}
    history = []
    for i in range(120):
        message: dict[str, Any] = {"role": "user" if i % 2 == 0 else "assistant",
                                   "content": facts.get(i, f"{fill[i % 4]}第{i}句。")}
        if i % 40 == 0:
            message["date"] = f"2023-05-{8 + i // 40:02d}"
        history.append(message)
    budget = compactor.count_message_tokens(history) // 4
    out = compactor.compact_messages(history, budget)
    summary = out.summary or ""
    assert out.report["kind"] == "chat"
    assert "## 参与者" in summary and "## 事实与偏好" in summary and "## 计划与承诺" in summary
    assert "m24, 2023-05-08 user: 昨天 [2023-05-07]我和妹妹去了西湖。" in summary
    assert "下个月 [2023-06]" in summary and "在上海做护士" in summary
    assert compactor.count_message_tokens(out) <= budget
