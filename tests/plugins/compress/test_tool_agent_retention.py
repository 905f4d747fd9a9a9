"""Tool-using agents: the values a later call needs survive a tight compaction.

A customer-service agent looks a user up, reads a reservation, searches flights and is about to
change the booking when the history is compacted to a tenth of its tokens. The next call needs the
user id, the reservation id, the flight the user picked, its date and the payment method, which the
history holds only in user turns, tool-call arguments and JSON tool output, among many prices,
times, addresses and other flights.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

import compactor
from compactor.formats.messages import read_messages
from compactor.plugins.compress.eight_segment import history as hx
from compactor.plugins.compress.eight_segment.conversation import allocate, render_sections
from compactor.text.tokens import get_counter

from .test_conversation import _call, assert_invariants

POLICY = "You are an airline agent. Follow the policy: confirm every change before you make it."


def _flights(origin: str, destination: str, date: str, first: int) -> list[dict[str, Any]]:
    return [{"flight_number": f"HAT{first + k:03d}", "origin": origin, "destination": destination,
             "scheduled_departure_time_est": f"{6 + k:02d}:00:00",
             "scheduled_arrival_time_est": f"{9 + k:02d}:30:00", "status": "available",
             "available_seats": {"basic_economy": 3 + k, "economy": 10 + k, "business": 4 + k},
             "prices": {"basic_economy": 60 + 7 * k, "economy": 140 + 11 * k, "business": 400 + 13 * k},
             "date": date} for k in range(8)]


def tau_like_history() -> list[dict[str, Any]]:
    """A tau-bench-like run, stopped just before the agent changes the reservation."""
    profile = {"name": {"first_name": "Zoe", "last_name": "Park"},
               "address": {"address1": "12 Elm Road", "city": "Denver", "zip": "80202"},
               "email": "zoe.park@example.com", "dob": "1988-03-14",
               "payment_methods": {"gift_card_5512093": {"source": "gift_card", "amount": 35,
                                                         "id": "gift_card_5512093"},
                                   "credit_card_8830017": {"source": "credit_card", "brand": "visa",
                                                           "last_four": "4417", "id": "credit_card_8830017"}},
               "saved_passengers": [{"first_name": "Liam", "last_name": "Ortiz", "dob": "1990-07-02"}],
               "membership": "silver", "reservations": ["QX7P2L", "M3KD9Z", "T8WN4R"]}
    reservation = {"reservation_id": "QX7P2L", "user_id": "zoe_park_5521", "origin": "DEN",
                   "destination": "BOS", "flight_type": "one_way", "cabin": "economy",
                   "flights": [{"origin": "DEN", "destination": "BOS", "flight_number": "HAT118",
                                "date": "2024-05-22", "price": 152}],
                   "passengers": [{"first_name": "Zoe", "last_name": "Park", "dob": "1988-03-14"}],
                   "payment_history": [{"payment_id": "credit_card_8830017", "amount": 152}],
                   "created_at": "2024-05-01T10:12:44", "total_baggages": 1, "nonfree_baggages": 0,
                   "insurance": "no"}
    history: list[dict[str, Any]] = [
        {"role": "system", "content": POLICY},
        {"role": "user", "content": "Hi, I need to move my Denver to Boston flight to a later day."},
        {"role": "assistant", "content": "I can help with that. What is your user id?"},
        {"role": "user", "content": "It's zoe_park_5521."},
        {"role": "assistant", "content": "", "tool_calls": [_call("c1", "get_user_details",
                                                                  user_id="zoe_park_5521")]},
        {"role": "tool", "tool_call_id": "c1", "content": json.dumps(profile)},
        {"role": "assistant", "content": "I see three reservations: QX7P2L, M3KD9Z and T8WN4R. "
                                         "Which one is the Denver to Boston trip?"},
        {"role": "user", "content": "The first one, QX7P2L."},
        {"role": "assistant", "content": "", "tool_calls": [_call("c2", "get_reservation_details",
                                                                  reservation_id="QX7P2L")]},
        {"role": "tool", "tool_call_id": "c2", "content": json.dumps(reservation)},
        {"role": "assistant", "content": "Your trip QX7P2L is flight HAT118 on May 22 in economy. "
                                         "Which day would you like instead?"},
        {"role": "user", "content": "May 24 please, in the morning if possible."},
    ]
    for n, date in enumerate(("2024-05-24", "2024-05-25")):
        history += [
            {"role": "assistant", "content": "", "tool_calls": [_call(f"s{n}", "search_direct_flight",
                                                                      origin="DEN", destination="BOS",
                                                                      date=date)]},
            {"role": "tool", "tool_call_id": f"s{n}",
             "content": json.dumps(_flights("DEN", "BOS", date, 200 + 20 * n))},
        ]
    history += [
        {"role": "assistant", "content": "On May 24 the morning flights are HAT200 at 06:00 and HAT201 "
                                         "at 07:00, both $140-$151 in economy. Which one would you like?"},
        {"role": "user", "content": "HAT201 works. Pay any difference with the card I paid with."},
        {"role": "assistant", "content": "The fare difference is small. Shall I go ahead with the change?"},
        {"role": "user", "content": "Yes, go ahead."},
    ]
    return history


NEEDED = ("zoe_park_5521", "QX7P2L", "HAT201", "2024-05-24", "credit_card_8830017")


def _visible(out: list[dict[str, Any]]) -> str:
    parts = []
    for message in out:
        parts.append(str(message.get("content") or ""))
        parts.extend(str(call["function"]["arguments"]) for call in message.get("tool_calls") or ())
    return "\n".join(parts)


@pytest.mark.parametrize("share", [0.07, 0.1])
def test_values_the_next_call_needs_survive_a_tenth_of_the_tokens(share: float) -> None:
    history = tau_like_history()
    total = compactor.count_message_tokens(history)
    system = compactor.count_message_tokens(history[:1])
    budget = system + int(share * (total - system))
    out = compactor.compact_messages(history, budget)
    assert_invariants(history, out, budget)
    assert out.summary is not None and len(out) < len(history)
    kept = _visible(list(out))
    missing = [value for value in NEEDED if value not in kept]
    assert not missing, f"lost {missing} in:\n{out.summary}"
    # the room went to them, not to what only a search result said (other flights' times and prices)
    assert "HAT207" not in kept and "06:00:00" not in kept
    for line in (out.summary or "").splitlines()[1:]:
        if line.startswith("- ") and not line.startswith("- The original request"):
            assert re.search(r"\(m\d+\)|^- [^(]*,", line), f"line without its message: {line!r}"


def test_identifier_ranking_follows_the_evidence() -> None:
    history = hx.History(read_messages(tau_like_history()))
    ranked = {display: priority for _, display, priority, _, _ in
              hx.identifier_scores(history, range(1, len(history.messages)))}
    # a person said it and the agent passed it to a tool: above anything a tool only returned
    assert ranked["zoe_park_5521"] > ranked["gift_card_5512093"] > ranked["12 Elm Road"]
    assert ranked["QX7P2L"] > ranked["M3KD9Z"]
    # a member of a collection (the user's reservations) is a handle, a record's attribute is not
    assert ranked["T8WN4R"] > ranked["2024-05-01T10:12:44"]
    # bare numbers and plain words say little without their label
    assert ranked["HAT201"] > ranked.get("152", 0.0)
    assert ranked.get("silver", 0.0) < ranked["QX7P2L"] / 3


def test_values_are_told_apart_by_case_and_by_whole_words() -> None:
    history = hx.History(read_messages([
        {"role": "user", "content": "Book a flight to MIA for Mia Chen, and one to SEA."},
        {"role": "assistant", "content": "", "tool_calls": [_call("a", "book", destination="MIA",
                                                                  passenger="Mia", leg="SEA")]},
        {"role": "tool", "tool_call_id": "a", "content": '{"reservation_id": "K2P9QA"}'},
    ]))
    kept = "Fly me to Seattle, to the MIA airport."
    items = {it.text for it in hx.identifier_items(history, [0, 1, 2], kept)}
    assert "SEA" in items  # `Seattle` does not hold the code SEA
    assert "Mia" in items and "MIA" not in items  # the airport is kept verbatim, the person is not


def test_a_line_that_shows_listed_values_replaces_them() -> None:
    counter = get_counter()
    value = hx.Item("QX7P2L", (3,), 3.0, 3, inline=True)
    other = hx.Item("HAT201", (9,), 2.5, 9, inline=True)
    line = hx.Item("update_reservation(reservation_id=QX7P2L, flight=HAT118) (m12)", (12,), 2.4, 12,
                   short="update_reservation (m12)")
    pools = {"concepts": [value, other], "problem": [line]}
    roomy = allocate(pools, 200, counter)
    shown = render_sections(roomy)
    body = "\n".join(shown.values())
    assert body.count("QX7P2L") == 1  # listed once: in the line that shows it
    assert "HAT201" in shown["concepts"]
    tight = allocate(pools, 18, counter)  # room for the two values, not for the line
    assert [it.text for it in tight.get("concepts", [])] == ["QX7P2L", "HAT201"]
    assert "problem" not in tight
    assert line.text.startswith("update_reservation(") and line.short  # the pools are left as they were


def test_the_tight_marker_line_keeps_tokens_and_quality() -> None:
    history = tau_like_history()
    out = compactor.compact_messages(history, 330)
    first = (out.summary or "").splitlines()[0]
    assert first.startswith("[compactor]") and "expand_context(" in first
    assert re.search(r"\(\d+→\d+ tokens, quality \d\.\d\d\)$", first), first
    assert compactor.count_message_tokens(list(out)) <= 330
