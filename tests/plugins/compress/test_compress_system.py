"""compress_system=True: a system prompt larger than the budget is excerpted for the requests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import compactor
from compactor.formats.compaction import BudgetError
from compactor.formats.messages import read_messages, units
from compactor.formats.system_prompt import GAP, render, stable_query
from compactor.pipeline import Pipeline

from ...helpers import run_cli

RELEVANT = ("Refunds for a flight the airline cancelled go back to the original payment method "
            "within 7 business days.")
UNRELATED = "Pets under 8 kg may travel in the cabin in an approved soft carrier under the seat."
TOPICS = {
    "Pets": [UNRELATED, "Service animals travel free of charge with documentation from a doctor.",
             "A passenger may bring at most one pet carrier; kennels go in the hold.",
             "Snakes, spiders and rodents are never accepted, in the cabin or the hold."],
    "Seat selection": ["Exit row seats require the passenger to be at least 15 years old.",
                       "Seat changes after check-in are free when the fare class is the same.",
                       "Families with children under 12 are seated together at no extra charge.",
                       "Extra legroom seats cost 35 dollars per segment and are not transferable."],
    "Lounges": ["Gold members may bring one guest to the lounge on international trips.",
                "Lounge passes are sold at the door for 59 dollars per person and visit.",
                "Showers in the lounge must be booked at the front desk on arrival.",
                "Children under two enter the lounge free with a paying adult."],
    "Refunds": ["To process a refund, first obtain the user id and the reservation id.", RELEVANT,
                "Refunds of a voluntary cancellation are issued as a travel certificate only.",
                "A refund request must be filed within 30 days of the cancelled flight date."],
    "Meals": ["Special meals must be ordered at least 48 hours before departure.",
              "Vegetarian, kosher and gluten-free meals are available on long-haul trips.",
              "Alcohol is served only to passengers aged 21 or over on departures from the US.",
              "Snacks in economy are complimentary; hot dishes are sold on board."],
    "Baggage": ["Each passenger may check two bags of at most 23 kg each in economy.",
                "Oversized sports equipment such as skis costs 75 dollars each way.",
                "Lithium batteries above 160 Wh are forbidden in checked luggage.",
                "Lost luggage claims need the tag number and a list of contents."],
    "Loyalty": ["Silver status needs 25,000 qualifying miles in a calendar year.",
                "Gold status doubles the award miles earned on every paid ticket.",
                "Miles expire after 18 months without any account activity.",
                "Award tickets can be booked for family members in the same household."],
    "Unaccompanied minors": ["Children aged 5 to 14 travelling alone need the escort service.",
                             "The escort fee is 150 dollars per direction and covers siblings.",
                             "A guardian must show photo identification at the arrival gate.",
                             "Minors cannot be booked alone on the last departure of the day."],
    "Medical assistance": ["Wheelchair assistance is requested at least 48 hours ahead.",
                           "Portable oxygen concentrators must be approved by the medical desk.",
                           "Pregnant passengers after week 36 need a doctor's certificate.",
                           "Stretcher transport takes nine seats and is quoted on request."],
    "Name changes": ["Spelling corrections of up to three letters are free of charge.",
                     "A ticket cannot be transferred to another person under any condition.",
                     "Legal name changes need a marriage certificate or a court order.",
                     "The passport name and the ticket name must match exactly at check-in."],
}


def policy() -> str:
    """An airline policy of ~1,000 tokens: sections of distinct rules, one section on refunds."""
    parts = ["# Airline Agent Policy", "You help users with flight reservations. Always confirm "
             "an action with the user before you take it."]
    for topic, rules in TOPICS.items():
        parts.append(f"## {topic}")
        parts.extend(f"- {rule}" for rule in rules)
    return "\n\n".join(parts)


def call(call_id: str, name: str, **arguments: Any) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}


def history(turns: int = 6) -> list[dict[str, Any]]:
    """A tau-bench-like run: the policy, a refund request, tool calls with results, replies."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": policy()},
        {"role": "user", "content": "Hi! The airline cancelled my flight and I want a refund for "
                                    "reservation ZQ81PX, please."},
    ]
    for n in range(turns):
        messages += [
            {"role": "assistant", "content": None,
             "tool_calls": [call(f"call_{n}", "get_reservation_details", reservation_id="ZQ81PX")]},
            {"role": "tool", "tool_call_id": f"call_{n}", "content": json.dumps(
                {"reservation_id": "ZQ81PX", "user_id": "mia_li_3668", "flights": [
                    {"flight_number": f"HAT{100 + n}", "date": "2024-05-20", "status": "cancelled"}],
                 "payment_history": [{"payment_id": "credit_card_4421486", "amount": 245 + n}]})},
            {"role": "assistant", "content": f"Flight HAT{100 + n} on 2024-05-20 was cancelled; "
                                             "shall I refund it to your card?"},
            {"role": "user", "content": f"Yes, and please check flight HAT{101 + n} as well."},
        ]
    return messages


def budget_for(messages: list[dict[str, Any]]) -> int:
    """Below the system message's own cost: the case that raised BudgetError."""
    return int(0.8 * compactor.count_message_tokens(messages[:1]))


def assert_valid(out: list[dict[str, Any]], budget: int) -> None:
    assert compactor.count_message_tokens(out) <= budget
    assert all(u.complete for u in units(read_messages(out))), "orphan tool call or result"
    assert out[0]["role"] == "system"
    assert out[0]["content"].startswith("[compactor] System prompt shortened")


def test_without_the_option_a_large_system_prompt_is_excerpted_with_a_warning() -> None:
    messages = history()
    budget = budget_for(messages)
    with pytest.raises(BudgetError):  # the caller said no excerpt: nothing fits
        compactor.compact_messages(messages, budget, compress_system=False)
    with pytest.warns(UserWarning, match="compress_system") as caught:
        out = compactor.compact_messages(messages, budget)
    assert len(caught) == 1
    assert_valid(out, budget)
    assert out.report["system_tokens"][0][0] > budget and out.report["warnings"]


def test_with_it_the_history_fits_with_the_system_message_first() -> None:
    messages = history()
    budget = budget_for(messages)
    out = compactor.compact_messages(messages, budget, compress_system=True)
    assert_valid(out, budget)
    system_cost = compactor.count_message_tokens(out[:1])
    assert system_cost <= budget // 2 + 3  # its share; the rest holds the summary and the last turns
    assert out[-1] == messages[-1]  # the latest turn is still verbatim
    assert out.summary is not None and "ZQ81PX" in "\n".join(str(m.get("content")) for m in out)
    assert out.report["system_tokens"][0][0] > budget  # what it cost before


def test_the_rules_about_the_request_stay_and_unrelated_ones_go() -> None:
    messages = history()
    out = compactor.compact_messages(messages, budget_for(messages), compress_system=True)
    text = out[0]["content"]
    assert RELEVANT in text
    assert "## Refunds" in text  # the kept rule's heading came with it
    assert UNRELATED not in text


def test_the_excerpt_is_whole_sentences_of_the_original_in_their_order() -> None:
    messages = history()
    original = messages[0]["content"]
    out = compactor.compact_messages(messages, budget_for(messages), compress_system=True)
    marker, body = out[0]["content"].split("\n", 1)
    spans = out.report["system_spans"][0]
    assert spans == sorted(spans) and render(original, [tuple(s) for s in spans]) == body
    for start, end in spans:  # each kept stretch starts and ends at a sentence boundary
        assert original[start:end].strip()
        assert start == 0 or original[start - 1].isspace()
        assert end == len(original) or original[end].isspace() or original[end - 1].isspace()
    for piece in body.split(GAP):
        assert piece in original
    assert 'expand_context(ids=["' in marker


def test_expand_gives_back_the_original_system_text() -> None:
    messages = history()
    out = compactor.compact_messages(messages, budget_for(messages), compress_system=True)
    cited = out[0]["content"].split('ids=["', 1)[1].split('"', 1)[0]
    assert cited in out.report["system_ids"]
    found = compactor.expand([cited], session=out)
    assert found[cited] == messages[0]["content"]  # the text itself, not a rendering of the message


def test_compacting_again_keeps_the_system_message_byte_identical() -> None:
    messages = history()
    budget = budget_for(messages)
    first = compactor.compact_messages(messages, budget, compress_system=True)
    more = [
        *first,
        {"role": "assistant", "content": None, "tool_calls": [call("call_x", "cancel_reservation",
                                                                   reservation_id="ZQ81PX")]},
        {"role": "tool", "tool_call_id": "call_x", "content": '{"status": "cancelled"}'},
        {"role": "assistant", "content": "Done: ZQ81PX is cancelled and refunded."},
        {"role": "user", "content": "Great, thanks. Can I also pick a window seat on my next trip?"},
    ]
    second = compactor.compact_messages(more, budget, compress_system=True)
    assert_valid(second, budget)
    assert json.dumps(second[0]) == json.dumps(first[0])
    assert "system" not in second.report  # within its share now: not compressed again
    # an agent that compacts its full history every turn gets the same excerpt too
    longer = messages + more[len(first):]
    again = compactor.compact_messages(longer, budget, compress_system=True)
    assert json.dumps(again[0]) == json.dumps(first[0])


def test_a_system_message_within_its_share_is_left_alone() -> None:
    messages = history(turns=12)
    system_cost = compactor.count_message_tokens(messages[:1])
    budget = 2 * system_cost + 200  # the history does not fit, the system message is under half
    out = compactor.compact_messages(messages, budget, compress_system=True)
    assert out[0] == messages[0]
    assert "system" not in out.report and out.summary is not None
    fits = compactor.compact_messages(messages[:3], 10 * system_cost, compress_system=True)
    assert list(fits) == messages[:3]  # a history that fits is sent back as it is


def test_the_query_is_the_opening_request_only() -> None:
    messages = read_messages(history())
    query = stable_query(messages)
    assert query is not None and "ZQ81PX" in query and "HAT101" not in query
    assert stable_query(read_messages(history(turns=1))) == query


def test_chinese_policy_gets_a_chinese_marker() -> None:
    rules = {"退款": "航空公司取消的航班，退款在七个工作日内退回原支付方式。",
             "宠物": "八公斤以下的宠物可以装在软包里带进客舱。",
             "座位": "紧急出口座位的乘客必须年满十五岁。",
             "餐食": "特殊餐食须在起飞前四十八小时预订。"}
    parts = ["# 航空客服规则"]
    for n in range(8):
        for topic, rule in rules.items():
            parts.append(f"## {topic}（{n + 1}）")
            parts.extend(f"- 第{k + 1}条：{rule}" for k in range(3))
    request = "航空公司取消了我的航班，我要退款，订单 ZQ81PX。"
    messages: list[dict[str, Any]] = [{"role": "system", "content": "\n\n".join(parts)},
                                      {"role": "user", "content": request}]
    for n in range(6):
        messages += [{"role": "assistant", "content": f"好的，正在查询航班 HAT{100 + n} 的退款情况。"},
                     {"role": "user", "content": f"谢谢，也请查一下航班 HAT{101 + n}。"}]
    budget = budget_for(messages)
    with pytest.raises(BudgetError):
        compactor.compact_messages(messages, budget, compress_system=False)
    out = compactor.compact_messages(messages, budget, compress_system=True)
    assert compactor.count_message_tokens(out) <= budget
    assert out[0]["content"].startswith("[compactor] 系统提示已按本对话的请求节选")
    assert "退款在七个工作日内退回原支付方式" in out[0]["content"]


def test_the_component_parameter_turns_it_on_in_a_pipeline(tmp_path: Path) -> None:
    yaml = ("version: 1\nname: conv-system\ntokenizer: cl100k_base\nsteps:\n  - use: chunk.messages\n"
            "  - use: compress.eight_segment\n    with: {compress_system: true}\n"
            "output: {format: messages}\n")
    pipeline = Pipeline.from_string(yaml)
    messages = history()
    budget = budget_for(messages)
    out = compactor.compact_messages(messages, budget, pipeline=pipeline)
    assert_valid(out, budget)


def test_cli_flag(tmp_path: Path) -> None:
    messages = history()
    budget = budget_for(messages)
    path = tmp_path / "history.json"
    path.write_text(json.dumps(messages), encoding="utf-8")
    done = run_cli("conversation", str(path), "--budget", str(budget), "--compress-system")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert_valid(out, budget)
    assert RELEVANT in out[0]["content"]
    store = tmp_path / "store.sqlite"
    stored = run_cli("conversation", str(path), "--budget", str(budget), "--compress-system",
                     "--store", str(store))
    assert stored.returncode == 0, stored.stderr
    cited = json.loads(stored.stdout)[0]["content"].split('ids=["', 1)[1].split('"', 1)[0]
    expanded = run_cli("--expand", cited, "--store", str(store))
    assert expanded.returncode == 0 and messages[0]["content"] in expanded.stdout
    refused = run_cli("conversation", str(path), "--budget", str(budget))
    assert refused.returncode != 0 and "system message" in refused.stderr
    wrong = run_cli("generic", str(path), "--budget", str(budget), "--compress-system")
    assert wrong.returncode != 0 and "--compress-system" in wrong.stderr
