"""Provider formats: Anthropic Messages and OpenAI Responses histories compacted in their own shape."""

from __future__ import annotations

import copy
import itertools
import json
from typing import Any

import pytest

import compactor
from compactor.apps.auto import AutoCompactor
from compactor.formats.messages import message_tokens, read_messages
from compactor.formats.providers import to_chat, tool_in, wire_of
from compactor.text.tokens import get_counter

COUNTER = get_counter("cl100k_base")


def _order(i: int) -> str:
    return json.dumps({"order_id": f"#W{1000 + i}", "status": "delivered" if i % 3 else "pending",
                       "items": [{"name": f"item-{i}-{k}", "price": 10 + k} for k in range(12)]})


def anthropic_history(turns: int) -> list[dict[str, Any]]:
    history: list[dict[str, Any]] = [
        {"role": "user", "content": "Please check all my orders and refund order #W1003."}]
    for i in range(turns):
        history += [
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": f"Order {i} next.", "signature": f"sig{i}"},
                {"type": "text", "text": f"Looking up order #W{1000 + i}."},
                {"type": "tool_use", "id": f"toolu_{i}", "name": "get_order",
                 "input": {"order_id": f"#W{1000 + i}"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"toolu_{i}",
                                          "content": _order(i), "is_error": False}]},
            {"role": "assistant", "content": f"Order #W{1000 + i} is {'delivered' if i % 3 else 'pending'}."},
            {"role": "user", "content": [{"type": "text", "text": "Next one, please."}]}]
    return history


def responses_history(turns: int) -> list[dict[str, Any]]:
    history: list[dict[str, Any]] = [
        {"role": "developer", "content": "You are a support agent for an online shop."},
        {"type": "compaction", "id": "cmp_1", "encrypted_content": "gAAAAB" + "Qk9PTQ" * 60},
        {"role": "user", "content": "Please check all my orders and refund order #W1003."}]
    for i in range(turns):
        history += [
            {"type": "reasoning", "id": f"rs_{i}", "encrypted_content": "enc" + "A" * 40,
             "summary": [{"type": "summary_text", "text": f"Look up order {i}."}]},
            {"type": "function_call", "id": f"fc_{i}", "call_id": f"call_{i}", "name": "get_order",
             "arguments": json.dumps({"order_id": f"#W{1000 + i}"})},
            {"type": "function_call_output", "call_id": f"call_{i}", "output": _order(i)},
            {"type": "message", "role": "assistant", "id": f"msg_{i}", "status": "completed",
             "content": [{"type": "output_text", "text": f"Order #W{1000 + i} is checked.",
                          "annotations": []}]},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Next one."}]}]
        if i == turns // 2:
            history.append({"type": "web_search_call", "id": "ws_1", "status": "completed",
                            "action": {"type": "search", "query": "refund policy"}})
    return history


def anthropic_valid(messages: list[dict[str, Any]]) -> None:
    """The Messages API's rules: user first, roles alternating, tool results first in their turn and
    each answering a tool_use of the assistant turn just before, every tool_use answered next."""
    assert messages[0]["role"] == "user"
    for before, after in itertools.pairwise(messages):
        assert before["role"] != after["role"], (before, after)
    for n, message in enumerate(messages):
        assert message["role"] in ("user", "assistant")
        blocks = message["content"] if isinstance(message["content"], list) else []
        results = [b["tool_use_id"] for b in blocks if b.get("type") == "tool_result"]
        if results:
            assert all(b.get("type") == "tool_result" for b in blocks[:len(results)])
            previous = messages[n - 1]["content"]
            assert set(results) <= {b["id"] for b in previous if b.get("type") == "tool_use"}
        if message["role"] == "assistant" and n + 1 < len(messages):
            uses = {b["id"] for b in blocks if b.get("type") == "tool_use"}
            following = messages[n + 1]["content"]
            answered = {b["tool_use_id"] for b in following if isinstance(following, list)
                        and b.get("type") == "tool_result"} if isinstance(following, list) else set()
            assert uses <= answered


def responses_valid(items: list[dict[str, Any]]) -> None:
    """Every output answers an earlier call, every call but a trailing one is answered, and each
    reasoning item is followed by the model output it belongs to."""
    calls: set[str] = set()
    answered: set[str] = set()
    for n, item in enumerate(items):
        kind = item.get("type")
        if kind == "function_call":
            calls.add(item["call_id"])
        elif kind == "function_call_output":
            assert item["call_id"] in calls
            answered.add(item["call_id"])
        elif kind == "reasoning":
            assert n + 1 < len(items)
            assert items[n + 1].get("type") in ("function_call", "message", "reasoning")
    assert calls == answered


def test_detection_reads_the_items() -> None:
    assert wire_of([{"role": "user", "content": "hi"}]) == "chat"
    assert wire_of(anthropic_history(1)) == "anthropic"
    assert wire_of(responses_history(1)) == "responses"
    assert wire_of([{"role": "user", "content": [{"type": "input_text", "text": "hi"}]}]) == "responses"
    assert wire_of([{"role": "system", "content": "s"}, {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "a", "content": "x"}]}]) == "chat"  # content blocks in chat
    assert wire_of([{"role": "user", "content": [{"type": "image", "source": {"type": "base64"}}]}]) \
        == "anthropic"
    with pytest.raises(compactor.InputError, match="format must be one of"):
        compactor.compact_messages([{"role": "user", "content": "hi"}], 100, format="gemini")


@pytest.mark.parametrize("history", [anthropic_history(2), responses_history(2)],
                         ids=["anthropic", "responses"])
def test_a_small_history_comes_back_unchanged(history: list[dict[str, Any]]) -> None:
    before = copy.deepcopy(history)
    auto = AutoCompactor(100_000)
    out = auto.maybe_compact(history)
    assert out == before and all(a is b for a, b in zip(out, history, strict=True))
    direct = compactor.compact_messages(history, 100_000)
    assert json.dumps(list(direct)) == json.dumps(before)
    assert history == before


def test_a_long_anthropic_history_compacts_valid_and_in_its_own_shape() -> None:
    history = anthropic_history(100)  # past the trigger even with every old output cleared
    before = copy.deepcopy(history)
    auto = AutoCompactor(12_000, trigger=6_000, format="anthropic")
    assert auto.tokens(history) > 6_000
    out = auto.maybe_compact(history, extra_tokens=300)
    assert out.report["format"] == "anthropic"
    assert auto.tokens(out, extra_tokens=300) <= auto.trigger_tokens
    anthropic_valid(out)
    summary = [b for m in out if isinstance(m["content"], list) for b in m["content"]
               if b.get("type") == "text" and b["text"].startswith("[compactor]")]
    assert len(summary) == 1 and out.summary is not None and summary[0]["text"] == out.summary
    assert out[0]["role"] == "user" and out[0]["content"][0]["text"].startswith("Please check all my orders")
    # the turns after the summary's are the last ones of the history, byte for byte
    assert out[-4:] == history[-4:] and json.dumps(out[-4:]) == json.dumps(history[-4:])
    assert history == before
    ids = out.dropped_ids
    assert ids and "get_order" in json.dumps(auto.expand(ids[:3]))


def test_an_anthropic_tool_result_cleared_keeps_its_block() -> None:
    history = anthropic_history(8)
    out = compactor.compact_messages(history, 1_000, tiers=("clear",), keep_tool_results=2)
    assert out.report["format"] == "anthropic" and out.report["tiers"]["clear"]["used"]
    stubs = [b for m in out if isinstance(m["content"], list) for b in m["content"]
             if b.get("type") == "tool_result" and str(b["content"]).startswith("[compactor: cleared")]
    assert [b["tool_use_id"] for b in stubs] == [f"toolu_{i}" for i in range(6)]
    assert "expand_context(ids=" in stubs[0]["content"] and "get_order output" in stubs[0]["content"]
    anthropic_valid(out)
    assert len(out) == len(history)


def test_what_the_person_wrote_beside_a_cleared_result_stays() -> None:
    """A user turn may carry text after its tool results: clearing the results keeps that text."""
    history = anthropic_history(8)
    turn = next(m for m in history if isinstance(m["content"], list)
                and m["content"][0].get("type") == "tool_result")
    turn["content"].append({"type": "text", "text": "Also, my address changed to 12 Elm Street."})
    out = compactor.compact_messages(history, 1_000, tiers=("clear",), keep_tool_results=2)
    assert out.report["tiers"]["clear"]["used"]
    cleared = next(m for m in out if isinstance(m["content"], list)
                   and str(m["content"][0].get("content", "")).startswith("[compactor: cleared")
                   and len(m["content"]) == 2)
    assert cleared["content"][1] == {"type": "text", "text": "Also, my address changed to 12 Elm Street."}
    anthropic_valid(out)


def test_an_anthropic_loop_stays_valid_compaction_after_compaction() -> None:
    auto = AutoCompactor(10_000, trigger=5_000)
    messages: list[dict[str, Any]] = anthropic_history(1)
    for i in range(1, 40):
        messages = auto.maybe_compact([*messages, *anthropic_history(i + 1)[-4:]], format="anthropic")
        assert auto.tokens(messages) <= auto.trigger_tokens
        anthropic_valid(messages)
    assert auto.compactions >= 2


def test_a_long_responses_history_compacts_with_its_items_in_place() -> None:
    history = responses_history(100)
    before = copy.deepcopy(history)
    auto = AutoCompactor(12_000, trigger=6_000)
    out = auto.maybe_compact(history, extra_tokens=200, format="responses")
    assert out.report["format"] == "responses" and out.report["opaque_tokens"] > 0
    assert auto.tokens(out, extra_tokens=200) <= auto.trigger_tokens
    responses_valid(out)
    assert history == before
    # the developer message, the provider's compaction item and the first request lead, as they were
    assert out[:3] == history[:3]
    summary = out[3]
    assert summary["type"] == "message" and summary["role"] == "user"
    assert summary["content"][0]["type"] == "input_text" and summary["content"][0]["text"] == out.summary
    # an unknown item is never summarised away: it stays, after the summary that took its neighbours
    searches = [n for n, item in enumerate(out) if item.get("type") == "web_search_call"]
    assert len(searches) == 1 and out[searches[0]] == history[history.index(out[searches[0]])]
    assert searches[0] > 3
    # what follows the summary is the end of the history, item for item
    tail = out[-5:]
    assert tail == history[-5:]
    for item in out:
        if item.get("type") in ("reasoning", "function_call", "compaction", "web_search_call"):
            assert item in history  # kept items are copies of what was read, byte for byte


def test_a_responses_output_cleared_keeps_its_call_id() -> None:
    history = responses_history(8)
    out = compactor.compact_messages(history, 1_000, tiers=("clear",), keep_tool_results=2)
    stubs = [item for item in out if item.get("type") == "function_call_output"
             and item["output"].startswith("[compactor: cleared")]
    assert [s["call_id"] for s in stubs] == [f"call_{i}" for i in range(6)]
    assert len(out) == len(history) and [i.get("type") for i in out] == [i.get("type") for i in history]
    responses_valid(out)


def test_a_responses_loop_keeps_its_compaction_item_through_compactions() -> None:
    auto = AutoCompactor(10_000, trigger=5_000, format="responses")
    items = responses_history(1)
    for i in range(1, 40):
        items = auto.maybe_compact([*items, *responses_history(i + 1)[-5:]])
        assert auto.tokens(items) <= auto.trigger_tokens
        responses_valid(items)
        assert sum(1 for item in items if item.get("type") == "compaction") == 1
    assert auto.compactions >= 2


def test_tokens_count_what_each_format_carries() -> None:
    plain = {"role": "assistant", "content": [{"type": "text", "text": "Done."}]}
    thinking = {"role": "assistant", "content": [{"type": "thinking", "thinking": "word " * 100},
                                                 {"type": "text", "text": "Done."}]}
    costs = [message_tokens(m, COUNTER) for m in read_messages([plain, thinking])]
    assert costs[1] >= costs[0] + 100
    translation = to_chat(responses_history(1), "responses", COUNTER)
    assert [item["type"] for _, item in translation.opaque] == ["compaction", "web_search_call"]
    assert translation.opaque_tokens >= 366 // 3  # the encrypted payload, estimated on the high side
    roles = [m["role"] for m in translation.messages]
    assert roles == ["developer", "user", "assistant", "tool", "assistant", "user"]


@pytest.mark.parametrize("make", [anthropic_history, responses_history], ids=["anthropic", "responses"])
def test_compact_messages_summarises_in_the_history_s_own_format(make: Any) -> None:
    history = make(60)
    out = compactor.compact_messages(history, 2_500, keep_last=2, tiers=("summary",))
    wire = wire_of(history)
    assert out.report["format"] == wire and out.summary and out.dropped_ids
    if wire == "anthropic":
        anthropic_valid(out)
        assert out[-1] == history[-1]
    else:
        responses_valid(out)
        assert wire_of(out) == "responses" and out[-2:] == history[-2:]
        assert [i for i in out if i.get("type") in ("compaction", "web_search_call")] == \
            [i for i in history if i.get("type") in ("compaction", "web_search_call")]
    assert out.report["output_tokens"] <= 2_500
    assert compactor.expand(out.dropped_ids[:1], out.store)


def test_the_expand_tool_is_declared_in_each_format() -> None:
    assert tool_in(compactor.EXPAND_TOOL, "chat") == compactor.EXPAND_TOOL
    anthropic = tool_in(compactor.EXPAND_TOOL, "anthropic")
    assert anthropic["name"] == "expand_context" and anthropic["input_schema"]["required"] == ["ids"]
    responses = tool_in(compactor.EXPAND_TOOL, "responses")
    assert responses["type"] == "function" and responses["parameters"] == anthropic["input_schema"]
    assert set(responses) == {"type", "name", "description", "parameters"}


# -- what each API's histories carry -----------------------------------------------------------------


def _result_turns(out: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {b["tool_use_id"]: b for m in out if isinstance(m["content"], list) for b in m["content"]
            if b.get("type") == "tool_result"}


def test_anthropic_block_keys_stay_on_kept_and_cleared_blocks() -> None:
    """cache_control and is_error stay where they were; a cleared result keeps its keys, a list of
    text and image blocks in a result is counted with its image and cleared to a stub."""
    history = anthropic_history(8)
    results = [m for m in history
               if isinstance(m["content"], list) and m["content"][0]["type"] == "tool_result"]
    results[0]["content"][0]["cache_control"] = {"type": "ephemeral"}
    results[1]["content"][0]["is_error"] = True
    png = {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo" * 10}
    results[2]["content"][0]["content"] = [{"type": "text", "text": _order(2)},
                                           {"type": "image", "source": png}]
    history[-1]["content"][0]["cache_control"] = {"type": "ephemeral"}
    before = copy.deepcopy(history)
    auto = AutoCompactor(10**6)
    plain = copy.deepcopy(history)
    plain[history.index(results[2])]["content"][0]["content"] = _order(2)
    assert auto.tokens(history, format="anthropic") >= auto.tokens(plain, format="anthropic") + 85
    out = compactor.compact_messages(history, 1_000, tiers=("clear",), keep_tool_results=2)
    assert history == before
    blocks = _result_turns(out)
    assert blocks["toolu_0"]["cache_control"] == {"type": "ephemeral"}
    assert blocks["toolu_1"]["is_error"] is True
    assert all(str(blocks[f"toolu_{i}"]["content"]).startswith("[compactor: cleared") for i in range(6))
    assert set(blocks["toolu_0"]) == set(results[0]["content"][0])
    assert out[-1] == history[-1] and out[-1]["content"][0]["cache_control"] == {"type": "ephemeral"}
    anthropic_valid(out)


def test_thinking_turns_with_tool_use_stay_as_signed() -> None:
    """Anthropic rejects a thinking block that changed: every assistant turn kept is the turn as
    read, its thinking, signature and tool_use in their order."""
    history = anthropic_history(60)
    for tiers in (("clear",), ("clear", "reduce", "summary")):
        out = compactor.compact_messages(history, 2_500, tiers=tiers, keep_tool_results=2)
        anthropic_valid(out)
        signed = [m for m in out if m["role"] == "assistant" and isinstance(m["content"], list)
                  and m["content"][0]["type"] == "thinking"]
        assert signed and all(m in history for m in signed)


def test_server_tool_and_document_blocks_are_counted_and_kept() -> None:
    """Blocks with no text of their own still cost what they carry: a document, a web search's
    results; kept, they come back as they were."""
    policy = "The refund policy allows returns within 30 days. " * 400
    document = {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": policy},
                "title": "policy.txt", "cache_control": {"type": "ephemeral"}}
    search = [{"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search",
               "input": {"query": "refund policy"}},
              {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1",
               "content": [{"type": "web_search_result", "url": "https://example.com/refunds",
                            "title": "Refunds",
                            "encrypted_content": "EqgfCioIARgBIiQ3YTAwMjY1" * 300, "page_age": "2 days"}]},
              {"type": "text", "text": "Returns are accepted within 30 days."}]
    question = {"type": "text", "text": "Can I return order #W1003?"}
    history = [{"role": "user", "content": [document, question]},
               {"role": "assistant", "content": search},
               *anthropic_history(30)[1:]]
    auto = AutoCompactor(10**6, format="anthropic")
    alone = auto.tokens(history[2:])
    assert auto.tokens(history[:1]) > 3_000  # the document's 20,000 characters
    assert auto.tokens(history[1:2]) > 2_000  # the encrypted results, estimated on the high side
    assert auto.tokens(history) > alone + 5_000
    out = compactor.compact_messages(history, 12_000, tiers=("summary",), format="anthropic")
    anthropic_valid(out)
    assert out[0]["content"][0] == document  # the request the person sent, verbatim
    searched = [m for m in out if m["role"] == "assistant" and isinstance(m["content"], list)
                and m["content"][0]["type"] == "server_tool_use"]
    assert searched in ([], [history[1]])  # summarised, or kept as it was
    assert auto.tokens(out) <= 12_000


def test_an_anthropic_list_that_is_not_one_is_refused() -> None:
    system = [{"role": "system", "content": "You are terse."}, *anthropic_history(1)]
    with pytest.raises(compactor.InputError, match="top-level `system`"):
        compactor.compact_messages(system, 500, format="anthropic")
    with pytest.raises(compactor.InputError, match='format="responses"'):
        compactor.compact_messages(responses_history(2), 500, format="anthropic")
    with pytest.raises(compactor.InputError, match='format="chat"'):
        compactor.compact_messages([{"role": "user", "content": "hi"},
                                    {"role": "tool", "tool_call_id": "a", "content": "x"}],
                                   500, format="anthropic")
    with pytest.raises(compactor.InputError, match='format="anthropic"'):
        AutoCompactor(500, format="responses").maybe_compact(anthropic_history(2))
    with pytest.raises(compactor.InputError, match='format="chat"'):
        compactor.compact_messages([{"role": "user", "content": "hi"}, {"role": "assistant", "content": None,
                                    "tool_calls": [{"id": "c", "type": "function",
                                                    "function": {"name": "f", "arguments": "{}"}}]}],
                                   500, format="responses")


def test_consecutive_turns_of_one_role_come_back_as_they_came() -> None:
    """The API reads neighbouring turns of one role as one turn: kept, they stay two turns; the
    summary still joins the turn next to it."""
    history = anthropic_history(40)
    history.insert(1, {"role": "user", "content": "My email is mia@example.com."})
    history.insert(len(history), {"role": "user", "content": [{"type": "text", "text": "And #W1039 too."}]})
    out = compactor.compact_messages(history, 3_000, keep_last=3, tiers=("summary",), format="anthropic")
    assert out[-2:] == history[-2:] and out[0]["role"] == "user"
    assert sum(1 for m in out for b in (m["content"] if isinstance(m["content"], list) else [])
               if b.get("text") == out.summary) == 1


def _responses_tools() -> list[dict[str, Any]]:
    """Every kind of Responses item a loop's input may hold."""
    shot = {"type": "computer_screenshot", "image_url": "data:image/png;base64," + "iVBORw0KGgo" * 200}
    return [
        {"type": "message", "role": "user",
         "content": [{"type": "input_text", "text": "Book order #W1003."}]},
        {"type": "reasoning", "id": "rs_a", "summary": [], "encrypted_content": "gAAAA" * 40},
        {"type": "web_search_call", "id": "ws_a", "status": "completed",
         "action": {"type": "search", "query": "q"}},
        {"type": "message", "role": "assistant", "id": "msg_a", "status": "completed",
         "content": [{"type": "output_text", "text": "Searching.", "annotations": []}]},
        {"type": "file_search_call", "id": "fs_a", "status": "completed", "queries": ["refund"],
         "results": [{"file_id": "file_1", "text": "Refunds take 5 days. " * 50}]},
        {"type": "computer_call", "id": "cu_a", "call_id": "call_cu", "status": "completed",
         "action": {"type": "screenshot"}, "pending_safety_checks": []},
        {"type": "computer_call_output", "id": "cuo_a", "call_id": "call_cu", "output": shot},
        {"type": "custom_tool_call", "id": "ct_a", "call_id": "call_ct", "name": "apply_patch",
         "input": "*** Begin Patch\n" + "+line\n" * 200},
        {"type": "custom_tool_call_output", "call_id": "call_ct", "output": "patched " * 300},
        {"type": "local_shell_call", "id": "ls_a", "call_id": "call_ls", "status": "completed",
         "action": {"type": "exec", "command": ["ls", "-la"], "env": {}}},
        {"type": "local_shell_call_output", "id": "call_ls", "output": "total 0\n" * 200},
        {"type": "mcp_call", "id": "mcp_a", "server_label": "shop", "name": "get_order",
         "arguments": "{\"id\":\"#W1003\"}", "output": "{\"status\":\"delivered\"}"},
        {"type": "item_reference", "id": "msg_old"},
        {"type": "function_call", "id": "fc_z", "call_id": "call_z", "name": "get_order",
         "status": "completed",
         "arguments": "{\"order_id\":\"#W1003\"}"},
        {"type": "function_call_output", "id": "fco_z", "call_id": "call_z", "status": "completed",
         "output": _order(3)},
    ]


def responses_pairs_valid(items: list[dict[str, Any]]) -> None:
    """Each *_call_output after the call with its call_id; a local shell output after its call."""
    seen: set[str] = set()
    for item in items:
        kind = str(item.get("type"))
        if kind.endswith("_call") and "call_id" in item:
            seen.add(item["call_id"])
        elif kind == "local_shell_call_output":
            assert item["id"] in seen
        elif kind.endswith("_call_output"):
            assert item["call_id"] in seen, item


def test_every_responses_item_kind_survives_clearing_and_summary() -> None:
    history = [*_responses_tools() * 1]
    for i in range(12):  # more outputs after, so the ones above are old enough to clear
        history += [{"type": "function_call", "call_id": f"call_{i}", "name": "get_order",
                     "arguments": json.dumps({"order_id": f"#W{1000 + i}"})},
                    {"type": "function_call_output", "call_id": f"call_{i}", "output": _order(i)}]
    before = copy.deepcopy(history)
    assert wire_of(history) == "responses"
    cleared = compactor.compact_messages(history, 1_000, tiers=("clear",), keep_tool_results=2)
    assert history == before
    responses_pairs_valid(cleared)
    assert [i.get("type") for i in cleared] == [i.get("type") for i in history]
    shot = next(i for i in cleared if i["type"] == "computer_call_output")
    assert shot == history[6]  # an image output has no text to stand for it: it stays as it was
    custom = next(i for i in cleared if i["type"] == "custom_tool_call_output")
    assert custom["output"].startswith("[compactor: cleared") and custom["call_id"] == "call_ct"
    for kind in ("web_search_call", "file_search_call", "mcp_call", "item_reference", "reasoning"):
        assert [i for i in cleared if i["type"] == kind] == [i for i in history if i["type"] == kind]
    short = compactor.compact_messages(history, 2_500, tiers=("summary",), keep_last=2)
    responses_pairs_valid(short)
    responses_valid([i for i in short if i.get("type") != "reasoning" or i in history])


def _chat_pair() -> list[dict[str, Any]]:
    return [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]


@pytest.mark.parametrize("make", [lambda: anthropic_history(3), lambda: responses_history(3), _chat_pair,
                                  _responses_tools],
                         ids=["anthropic", "responses", "chat", "responses-kinds"])
def test_a_small_history_round_trips_byte_for_byte(make: Any) -> None:
    history = make()
    text = json.dumps(history)
    out = compactor.compact_messages(history, 10**6)
    assert json.dumps(list(out)) == text and json.dumps(history) == text
    assert list(out) == history
    auto = AutoCompactor(10**6)
    assert all(a is b for a, b in zip(auto.maybe_compact(history), history, strict=True))


def test_the_cheap_tiers_leave_a_history_under_its_budget_alone() -> None:
    history = anthropic_history(3)
    out = compactor.compact_messages(history, 10**6, tiers=compactor.TIERS)
    assert list(out) == history


def test_detection_of_ambiguous_lists() -> None:
    # only text: every format reads it, the chat path gives it back in the same shape
    assert wire_of([{"role": "user", "content": [{"type": "text", "text": "hi"}]},
                    {"role": "assistant", "content": "yo"}]) == "chat"
    assert wire_of([{"role": "user", "content": "hi"}, {"type": "function_call_output", "call_id": "c",
                                                          "output": "x"}]) == "responses"
    thinking = {"type": "thinking", "thinking": "t", "signature": "s"}
    assert wire_of([{"role": "assistant", "content": [thinking]}]) == "anthropic"
    document = {"type": "document", "source": {"type": "text", "data": "d"}}
    assert wire_of([{"role": "user", "content": [document]}]) == "anthropic"
