"""Structured tool output reduced by structure (compactor.formats.structured, compress.structured)."""

from __future__ import annotations

import functools
import json

import compactor
from compactor.formats.structured import detect
from compactor.formats.structured import reduce_text as reduce_default

#: The lists of these tests are short: cut them whatever their size (the default leaves lists under
#: 1500 characters whole, see test_short_lists_stay_whole).
reduce_text = functools.partial(reduce_default, min_list_chars=0)

RECORDS = [{"id": f"R-{100 + i}", "status": "open" if i % 2 else "closed", "amount": 10 * i,
            "owner": {"name": f"user{i}", "team": "core"}} for i in range(30)]


def _json_items(text: str) -> list:
    return json.loads(text)


def test_json_array_of_records_keeps_schema_counts_and_referenced_rows():
    text = json.dumps(RECORDS, indent=2)
    out = reduce_text(text, references=["please refund R-117 today"], ref="src-0003")
    assert out is not None and out.kind == "json" and out.rows == 30 and out.kept == 3
    items = _json_items(out.text)  # still JSON
    assert items[0].startswith("30 rows; fields id:str, status:str=closed|open, amount:int, owner:{")
    kept = [i for i in items if isinstance(i, dict)]
    assert [r["id"] for r in kept] == ["R-100", "R-117", "R-129"]
    assert kept[1] == RECORDS[17]  # verbatim, nested object included
    assert "[... 16 more rows: expand src-0003]" in items and "[... 11 more rows: expand src-0003]" in items
    assert len(out.text) < len(text) / 5


def test_values_are_copied_never_invented():
    text = json.dumps(RECORDS)
    out = reduce_text(text, references=["R-105"])
    assert out is not None
    for item in _json_items(out.text):
        if isinstance(item, dict):
            assert item in RECORDS


def test_nested_list_inside_object_and_json_inside_json_string():
    inner = json.dumps([{"code": f"C{i:03d}", "kind": "a"} for i in range(20)])
    text = json.dumps({"error": "", "response": inner, "meta": {"pages": [{"n": i} for i in range(10)]}})
    out = reduce_text(text, references=["C007"])
    assert out is not None
    data = json.loads(out.text)
    assert data["error"] == "" and set(data) == {"error", "response", "meta"}
    response = json.loads(data["response"])
    assert {"code": "C007", "kind": "a"} in response and {"code": "C005", "kind": "a"} not in response
    assert response[0].startswith("20 rows")
    assert data["meta"]["pages"][0] == "10 rows; fields n:int"


def test_jsonl_keeps_lines_verbatim():
    lines = [json.dumps({"ts": i, "level": "INFO", "msg": f"event {i}"}) for i in range(40)]
    out = reduce_text("\n".join(lines), references=["what happened at event 23"])
    assert detect("\n".join(lines)) == "jsonl"
    assert out is not None and out.kind == "jsonl"
    kept = out.text.splitlines()
    assert lines[0] in kept and lines[23] in kept and lines[39] in kept and lines[5] not in kept
    assert kept[-1].startswith("[40 JSON lines; fields ts:int, level:str=INFO, msg:str]")


def test_csv_keeps_header_and_rows():
    rows = ["sku,name,qty"] + [f"SKU{i:04d},widget {i},{i % 3}" for i in range(50)]
    text = "\n".join(rows)
    assert detect(text) == "csv"
    out = reduce_text(text, references=["SKU0042"])
    assert out is not None and out.kind == "csv"
    kept = out.text.splitlines()
    assert kept[0] == "sku,name,qty" and "SKU0042,widget 42,0" in kept and "SKU0010,widget 10,1" not in kept
    assert "qty:int=0|1|2" in kept[-1] and "[50 rows;" in kept[-1]


def test_markdown_table_inside_prose_chinese():
    body = "\n".join(f"| 用户{i} | {'北京' if i % 2 else '上海'} | {i * 7} |" for i in range(20))
    text = f"查询结果：\n| 姓名 | 城市 | 积分 |\n|---|---|---|\n{body}\n共 20 条。"
    assert detect(text) == "markdown"
    out = reduce_text(text, references=["用户13 的积分是多少"])
    assert out is not None
    assert out.text.startswith("查询结果：\n| 姓名 | 城市 | 积分 |\n|---|---|---|\n| 用户0 |")
    assert "| 用户13 | 北京 | 91 |" in out.text and "| 用户5 |" not in out.text
    assert out.text.endswith("共 20 条。") and "城市:str=上海|北京" in out.text


def test_json_after_prose_prefix():
    text = "Search results for your query:\n" + json.dumps(RECORDS)
    assert detect(text) == "json"
    out = reduce_text(text, references=["R-120"])
    assert out is not None and out.text.startswith("Search results for your query:\n[\"30 rows")
    assert "R-120" in out.text and "R-121" not in out.text


def test_malformed_json_left_as_prose():
    text = json.dumps(RECORDS)[:-40]  # cut off: not JSON
    assert reduce_text(text, references=["R-101"]) is None
    prose = "The meeting notes. " * 50
    assert detect(prose) is None and reduce_text(prose) is None
    lines = "\n".join(f"On day {i} of the trip, we walked along the river." for i in range(30))
    assert detect(lines) is None and reduce_text(lines) is None  # one comma a line is not a table


def test_hostile_nesting_left_alone():
    deep = "[" * 100_000 + "]" * 100_000
    assert reduce_text(deep) is None
    assert reduce_text("note: " + deep) is None
    assert detect(deep) is None


def test_small_or_short_lists_left_alone():
    text = json.dumps(RECORDS[:4])
    out = reduce_text(text, min_chars=0)  # short lists: every row stays, only whitespace goes
    assert out is not None and out.rows == 0 and json.loads(out.text) == RECORDS[:4]
    assert len(out.text) < len(text)
    assert reduce_text(json.dumps(RECORDS[:4], separators=(",", ":")), min_chars=0) is None


def test_short_lists_stay_whole():
    wallet = {f"gift_card_{i}": {"source": "gift_card", "amount": 10 * i, "id": f"gift_card_{i}"}
              for i in range(7)}
    text = json.dumps({"user": "mia", "payment_methods": wallet}, indent=1)
    out = reduce_default(text)  # 7 entries, but a few hundred characters: only minified
    assert out is not None and out.rows == 0 and json.loads(out.text) == json.loads(text)
    cut = reduce_text(text)
    assert cut is not None and cut.rows == 7 and "gift_card_3" not in cut.text


def test_deterministic():
    text = json.dumps(RECORDS)
    assert reduce_text(text, references=["R-110"]) == reduce_text(text, references=["R-110"])


def _history() -> list[dict]:
    flights = [{"flight_number": f"HAT{200 + i}", "status": "available", "price": 100 + 11 * i,
                "origin": "JFK", "destination": "SEA", "date": "2024-05-20"} for i in range(25)]
    messages = [
        {"role": "system", "content": "You are an airline agent."},
        {"role": "user", "content": "Book me the cheapest morning flight from JFK to SEA on 2024-05-20."},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function", "function": {
            "name": "search_direct_flight",
            "arguments": json.dumps({"origin": "JFK", "destination": "SEA", "date": "2024-05-20"})}}]},
        {"role": "tool", "tool_call_id": "c1", "content": json.dumps(flights)},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "c2", "type": "function", "function": {
            "name": "book_reservation", "arguments": json.dumps({"flight_number": "HAT213"})}}]},
        {"role": "tool", "tool_call_id": "c2", "content": "booked"},
    ]
    for i in range(6):
        messages += [{"role": "user", "content": f"Question {i} about baggage allowance and seat maps?"},
                     {"role": "assistant", "content": f"Answer {i}: two checked bags are included."}]
    return messages


def test_history_summary_reads_reduced_output_and_expand_gives_original():
    messages = _history()
    out = compactor.compact_messages(messages, 300, keep_last=2)
    step = next(s for s in out.report["steps"] if s["step"] == "compress.structured")
    assert step["details"]["reduced"] == {"messages": 1, "documents": 0}
    tool_id = f"{out.report['source_id']}-0003"
    assert tool_id in out.dropped_ids
    original = compactor.expand([tool_id], session=out)[tool_id]
    assert messages[3]["content"] in original  # the whole list, not the reduced one
    assert sum(len(m.get("content") or "") for m in out) < sum(len(m.get("content") or "") for m in messages)


def test_kept_tool_messages_stay_verbatim():
    messages = _history()
    out = compactor.compact_messages(messages, 5000, keep_last=2)  # fits: nothing reduced in the output
    assert out == messages or [m.get("content") for m in out] == [m.get("content") for m in messages]


def test_qa_pipeline_reads_a_json_document_by_structure():
    orders = [{"order_id": f"ORD-{5000 + i}", "status": "delivered" if i % 4 else "returned",
               "customer": f"customer {i}", "total": 20 + i} for i in range(80)]
    text = "Export of the orders table:\n" + json.dumps(orders, indent=2)
    out = compactor.compress(text, query="What is the status of ORD-5042?", budget=200, pipeline="qa")
    assert '"order_id":"ORD-5042"' in out or '"order_id": "ORD-5042"' in out
    assert "80 rows" in out


def test_json_that_reserialising_would_change_is_left_alone():
    # a duplicate key (json keeps the last one) or a number a float cannot hold would come back
    # different, unmarked: such text is not reduced (and not minified) at all
    rows = [{"id": f"R-{i}", "note": "x" * 40, "amount": 1.5} for i in range(50)]
    lossy = {
        "duplicate key": json.dumps(rows).replace('{"id": "R-0",', '{"id": "R-0", "id": "R-99",'),
        "long decimal": json.dumps(rows).replace('"amount": 1.5}', '"amount": 12345678901234567.89}', 1),
        "overflow": json.dumps(rows).replace('"amount": 1.5}', '"amount": 1e400}', 1),
        "object": '{"a": 1, "a": 2, "pad": "' + "x" * 500 + '"}',
        "python literal": repr({"a": 1, "b": [{"k": i, "v": "w" * 40} for i in range(50)]}).replace(
            "'a': 1,", "'a': 1, 'a': 2,"),
        "python float": repr([{"k": i, "v": "w" * 40} for i in range(50)]).replace(
            "'k': 3,", "'k': 0.1000000000000000055511151231257827,"),
    }
    for name, text in lossy.items():
        assert reduce_text(text) is None, name
    # numbers written differently but holding the same value still reduce
    same = json.dumps(rows).replace('"amount": 1.5}', '"amount": 1.50e0}')
    out = reduce_text(same)
    assert out is not None and json.loads(out.text)[1]["amount"] == 1.5


def test_json_after_a_byte_order_mark():
    text = "\ufeff" + json.dumps(RECORDS)
    out = reduce_text(text, references=["R-117"])
    assert out is not None and out.kind == "json" and out.kept == 3
    assert json.loads(out.text.lstrip("\ufeff"))[3] == RECORDS[17]
