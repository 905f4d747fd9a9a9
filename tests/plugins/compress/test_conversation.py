"""Agent histories: readers, compress.eight_segment, compact_messages invariants, expand, the CLI."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import openai
import pytest

import compactor
from compactor.document import Context
from compactor.formats.compaction import BudgetError, pending_call
from compactor.formats.messages import conversation_source, read_messages, units
from compactor.formats.records import read_paths
from compactor.pipeline import Pipeline

from ... import openai_server as fake
from ...helpers import EVAL, REPO, run_cli
from ...openai_server import FakeOpenAI, Reply

openai_server = fake.openai_server
SECTION_NAMES = ("Primary Request and Intent", "Key Technical Concepts", "Files and Code Sections",
                 "Errors and fixes", "Problem Solving", "All user messages", "Pending Tasks", "Current Work")


def _eval(folder: str, count: int, min_chars: int = 0) -> list[dict[str, Any]]:
    path = EVAL / folder / "conversations.jsonl"
    if not path.exists():
        pytest.skip(f"evaluation data not found: {path}")
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return [r for r in rows if r.get("chars", 0) >= min_chars][:count]


def _call(call_id: str, name: str, **arguments: Any) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}


def _filler(n: int) -> str:
    return "\n".join(f"{i:4d}    value_{i} = compute_{i % 7}(data[{i}])  # step {i}" for i in range(n))


def coding_history() -> list[dict[str, Any]]:
    """A coding agent's run with a failing test, two edits of one file, a fix, plans and follow-ups."""
    history: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a careful coding agent."},
        {"role": "user",
         "content": "Fix the failing date parser in src/app/dates.py; keep the public API."},
        {"role": "assistant", "content": "Plan:\n- [ ] reproduce the failure\n- [ ] fix parse_date\n"
                                         "- [ ] add a regression test for offsets",
         "tool_calls": [_call("c1", "bash", command="pytest tests/test_dates.py")]},
        {"role": "tool", "tool_call_id": "c1", "content": (
            "Traceback (most recent call last):\n  File \"src/app/dates.py\", line 12, in parse_date\n"
            "ValueError: unconverted data remains: Z\nFAILED tests/test_dates.py::test_iso")},
        {"role": "assistant", "content": "The root cause is the trailing Z of ISO timestamps.",
         "tool_calls": [_call("c2", "str_replace_editor", command="str_replace", path="src/app/dates.py",
                              old_str="x", new_str="def parse_date(text):\n    return parse(text)  # v1")]},
        {"role": "tool", "tool_call_id": "c2", "content": "The file src/app/dates.py has been edited."},
        {"role": "assistant", "content": "A better version handles the offset too.",
         "tool_calls": [_call("c3", "str_replace_editor", command="str_replace", path="src/app/dates.py",
                              old_str="y", new_str="def parse_date(text):\n"
                                                   "    return iso(text.replace('Z', '+00:00'))  # v2")]},
        {"role": "tool", "tool_call_id": "c3", "content": "The file src/app/dates.py has been edited."},
        {"role": "assistant", "content": "",
         "tool_calls": [_call("c4", "bash", command="pytest tests/test_dates.py")]},
        {"role": "tool", "tool_call_id": "c4", "content": "3 passed in 0.21s"},
        {"role": "assistant", "content": "Done: I reproduced the failure and fixed parse_date."},
        {"role": "user", "content": "Good. Also make sure offsets like +05:30 survive a round trip."},
    ]
    for i in range(6):
        history.append({"role": "assistant", "content": f"Reading module {i}.",
                        "tool_calls": [_call(f"r{i}", "bash", command=f"cat src/app/module_{i}.py")]})
        history.append({"role": "tool", "tool_call_id": f"r{i}", "content": _filler(60)})
    history += [
        {"role": "user", "content": "Thanks. Next, run the full suite and report the slowest test."},
        {"role": "assistant", "content": "Running the whole suite now.",
         "tool_calls": [_call("c9", "bash", command="pytest -q --durations=1")]},
        {"role": "tool", "tool_call_id": "c9", "content": "120 passed in 9.8s\nslowest: test_bulk 4.1s"},
        {"role": "assistant", "content": "All 120 tests pass; the slowest is test_bulk (4.1s)."},
    ]
    return history


def _dump(message: dict[str, Any]) -> str:
    return json.dumps(message, sort_keys=True, ensure_ascii=False)


def assert_invariants(original: list[dict[str, Any]], out: list[dict[str, Any]], budget: int) -> None:
    """Within budget, no orphan call or result, head and tail byte-identical to the originals; a tool
    call still waiting for its results at the end of the original stays last, whole, when it fits."""
    assert compactor.count_message_tokens(out) <= budget
    tiles = units(read_messages(out))
    waiting = pending_call(read_messages(original))
    if waiting is not None and tiles and not tiles[-1].complete:
        assert [_dump(m) for m in out[-len(waiting):]] == [_dump(m) for m in original[waiting.start:]]
        tiles = tiles[:-1]
    assert all(u.complete for u in tiles), "orphan tool call or result"
    summaries = [i for i, m in enumerate(out) if str(m.get("content") or "").startswith("[compactor]")]
    if not summaries:
        assert [_dump(m) for m in out] == [_dump(m) for m in original]
        return
    [at] = summaries
    head, tail = out[:at], out[at + 1:]
    assert [_dump(m) for m in head] == [_dump(m) for m in original[:len(head)]]
    assert [_dump(m) for m in tail] == [_dump(m) for m in original[len(original) - len(tail):]]
    if original[0]["role"] == "system":
        assert _dump(out[0]) == _dump(original[0])


# -- readers ---------------------------------------------------------------------------------------


def test_three_wire_formats_pair_calls_with_results() -> None:
    openai_style = [{"role": "user", "content": "go"},
                    {"role": "assistant", "content": None, "tool_calls": [_call("a", "f"), _call("b", "g")]},
                    {"role": "tool", "tool_call_id": "b", "content": "B"},
                    {"role": "tool", "tool_call_id": "a", "content": "A"},
                    {"role": "assistant", "content": "done"}]
    assert [(u.start, u.end, u.complete) for u in units(read_messages(openai_style))] == [
        (0, 1, True), (1, 4, True), (4, 5, True)]
    legacy = [{"role": "assistant", "content": "", "function_call": {"name": "f", "arguments": "{}"}},
              {"role": "function", "name": "f", "content": "{}"}, {"role": "user", "content": "ok"}]
    assert [(u.start, u.end) for u in units(read_messages(legacy))] == [(0, 2), (2, 3)]
    blocks = [{"role": "assistant", "content": [{"type": "text", "text": "look"},
                                                {"type": "tool_use", "id": "t1", "name": "ls", "input": {}}]},
              {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "a.py"}]}]
    parsed = read_messages(blocks)
    assert [(u.start, u.end, u.complete) for u in units(parsed)] == [(0, 2, True)]
    assert parsed[1].content == "a.py"
    orphan = [{"role": "tool", "tool_call_id": "zz", "content": "?"},
              {"role": "assistant", "content": "", "tool_calls": [_call("q", "f")]},
              {"role": "user", "content": "interrupting"}]
    assert [u.complete for u in units(read_messages(orphan))] == [False, False, True]
    idless = [{"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function":
                                                                   {"name": "f", "arguments": "{}"}}]},
              {"role": "tool", "content": "result without an id"}]
    assert [(u.start, u.end, u.complete) for u in units(read_messages(idless))] == [(0, 2, True)]


def test_readers_from_python_objects_json_and_jsonl(tmp_path: Path) -> None:
    sdk = openai.types.chat.ChatCompletionMessage(role="assistant", content="hi from the SDK")
    parsed = read_messages([{"role": "user", "content": "hi"}, sdk])
    assert parsed[1].content == "hi from the SDK"
    assert read_messages(json.dumps({"messages": [{"role": "user", "content": "x"}]}))[0].content == "x"
    jsonl = '{"role": "user", "content": "a"}\n{"role": "assistant", "content": "b"}\n'
    assert len(read_messages(jsonl)) == 2
    with pytest.raises(compactor.InputError, match="message 1: a message needs a string `role`"):
        read_messages([{"role": "user", "content": "ok"}, {"content": "no role"}])
    batch = tmp_path / "runs.jsonl"
    records = [{"id": f"run{i}", "messages": [{"role": "user", "content": f"q{i}"}]} for i in range(3)]
    batch.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    sources = read_paths([str(batch)])
    assert [s.uri for s in sources] == ["run0", "run1", "run2"]
    assert all(s.kind == "conversation" for s in sources)


def test_chunk_messages_gives_one_chunk_per_message_costed_like_a_request() -> None:
    history = coding_history()
    source = conversation_source(read_messages(history))
    pipeline = Pipeline.from_string("version: 1\nsteps:\n  - use: chunk.messages\n")
    context = pipeline.run(Context(sources=(source,)), output_format="text")
    assert [c.id for c in context.chunks] == [f"{source.id}-{i:04d}" for i in range(len(history))]
    assert [c.units for c in context.chunks] == [(i, i + 1) for i in range(len(history))]
    expected = [compactor.count_message_tokens([m]) - 3 for m in history]
    assert [c.tokens for c in context.chunks] == expected
    assert context.chunks[3].text.startswith("tool: Traceback")
    plain = pipeline.run("First paragraph.\n\nSecond paragraph.", output_format="text")
    assert len(plain.chunks) == 1 and plain.chunks[0].text.endswith("Second paragraph.")


# -- the eight sections ----------------------------------------------------------------------------


def test_eight_sections_by_rules_on_a_coding_run() -> None:
    history = coding_history()
    budget = int(compactor.count_message_tokens(history) * 0.6)
    out = compactor.compact_messages(history, budget, keep_last=2)
    assert_invariants(history, out, budget)
    summary = out.summary or ""
    for name in ("Files and Code Sections", "Errors and fixes", "All user messages", "Pending Tasks",
                 "Current Work", "Compression Metadata"):
        assert f"## {name}" in summary, name
    files = _section(summary, "Files and Code Sections")
    assert "`src/app/dates.py`: edited m4, m6" in files
    assert "# v2" in files and "# v1" not in files  # the latest version of the snippet only
    errors = _section(summary, "Errors and fixes")
    assert "ValueError: unconverted data remains: Z" in errors
    assert "fix: edited `src/app/dates.py` (m4)" in errors and "re-run passed (m9)" in errors
    users = _section(summary, "All user messages")
    assert "(m11) Good. Also make sure offsets like +05:30 survive a round trip." in users
    # the request being worked on stays verbatim with the turns after it (keep_last is a floor)
    request = "Thanks. Next, run the full suite and report the slowest test."
    latest = history.index({"role": "user", "content": request})
    assert out[-(len(history) - latest):] == history[latest:]
    pending = _section(summary, "Pending Tasks")
    assert "add a regression test for offsets" in pending
    assert "reproduce the failure" not in pending and "fix parse_date" not in pending  # reported done
    assert "role: assistant" in _section(summary, "Compression Metadata")
    assert out[1] == history[1]  # the first request stays verbatim, right after the system message


def _section(summary: str, name: str) -> str:
    match = re.search(rf"^## {re.escape(name)}\n(.*?)(?=^## |\Z)", summary, re.M | re.S)
    assert match, f"no section {name!r} in:\n{summary}"
    return match.group(1)


def test_sections_adapt_to_the_budget_and_never_exceed_it() -> None:
    history = coding_history()
    total = compactor.count_message_tokens(history)
    sizes = []
    for share in (0.15, 0.3, 0.6):
        budget = int(total * share)
        out = compactor.compact_messages(history, budget, keep_last=2)
        assert_invariants(history, out, budget)
        sizes.append(len(out.summary or ""))
    assert sizes[0] < sizes[2]  # more room, more said


def test_chinese_history_gets_chinese_sections() -> None:
    history = [{"role": "system", "content": "你是一个编程助手。"},
               {"role": "user", "content": "请修复 src/解析.py 里的日期解析错误，并保持接口不变。"}]
    for i in range(8):
        history += [{"role": "assistant", "content": f"我先查看第 {i} 个模块，原因可能在时区处理。",
                     "tool_calls": [_call(f"z{i}", "bash", command=f"cat src/mod_{i}.py")]},
                    {"role": "tool", "tool_call_id": f"z{i}", "content": _filler(40)}]
    history += [{"role": "user", "content": "另外，还需要补充一个关于 +08:00 时区的测试。"},
                {"role": "assistant", "content": "好的，接下来我会补充这个测试。"}]
    budget = int(compactor.count_message_tokens(history) * 0.35)
    out = compactor.compact_messages(history, budget, keep_last=1)
    assert_invariants(history, out, budget)
    summary = out.summary or ""
    assert "## 主要请求和意图" in summary and "## 压缩元信息" in summary
    assert "请修复 src/解析.py" in summary or out[1] == history[1]
    assert out[-2:] == history[-2:]  # the latest request, verbatim, with the reply after it


def test_multi_role_lines_say_who_and_role_filter_writes_a_handoff() -> None:
    history = [{"role": "system", "content": "A team of agents builds a CSV exporter."},
               {"role": "user", "content": "Build an exporter for report.csv with UTF-8 headers."}]
    for i in range(8):
        history += [
            {"role": "assistant", "name": "planner", "content": f"Step {i}: the exporter must stream rows "
                                                                 f"because files reach 2GB (plan v{i})."},
            {"role": "assistant", "name": "coder", "content": f"I implemented writer_{i} in src/export.py "
                                                               "because the planner asked for streaming.",
             "tool_calls": [_call(f"w{i}", "write_file", path="src/export.py",
                                  content=f"def writer_{i}(): ...")]},
            {"role": "tool", "tool_call_id": f"w{i}", "content": "written"},
            {"role": "assistant", "name": "tester",
             "content": f"Test run {i} found that header_{i} is missing because the BOM is dropped.",
             "tool_calls": [_call(f"t{i}", "bash", command="pytest tests/test_export.py")]},
            {"role": "tool", "tool_call_id": f"t{i}", "content": f"AssertionError: header_{i} missing"},
        ]
    history.append({"role": "user", "content": "Hand over to the reviewer."})
    budget = int(compactor.count_message_tokens(history) * 0.6)
    out = compactor.compact_messages(history, budget, keep_last=1)
    assert_invariants(history, out, budget)
    summary = out.summary or ""
    assert "[coder]" in summary and "[tester]" in summary and "[planner]" in summary
    handoff = compactor.compact_messages(history, budget, keep_last=1, role="tester")
    text = handoff.summary or ""
    assert "role: tester" in text
    # the tester's own runs lead; the coder's changes it has to test are there too, the plans are not
    assert "[tester]" in text and text != summary
    assert text.count("[tester]") > max(text.count("[coder]"), text.count("[planner]"))
    assert "AssertionError: header_" in text


# -- compact_messages: invariants on real agent runs -----------------------------------------------


def _real_runs() -> list[tuple[str, list[dict[str, Any]]]]:
    runs = []
    for row in _eval("agent-trajectories-tau-bench", 3, min_chars=15000):
        runs.append((row["id"], row["messages"]))
    for row in _eval("agent-trajectories-mini-swe-agent-swebench", 2):
        runs.append((row["id"], row["messages"]))
    for row in _eval("agent-trajectories-swe-agent", 11):
        if any(m.get("tool_calls") for m in row["messages"]):  # OpenAI tool calls without result ids
            runs.append((row["id"], row["messages"]))
            break
    for row in _eval("agent-trajectories-toolbench", 2, min_chars=3000):
        runs.append((row["id"], row["messages"]))  # legacy function_call / function
    for row in _eval("chat-aider-examples", 6):
        if row["chars"] > 8000:
            runs.append((row["id"], row["messages"]))
            break
    return runs


@pytest.mark.parametrize("share", [0.1, 0.3])
def test_invariants_hold_on_real_agent_runs(share: float) -> None:
    for name, history in _real_runs():
        total = compactor.count_message_tokens(history)
        system = sum(compactor.count_message_tokens([m]) - 3 for m in history if m["role"] == "system")
        budget = system + 3 + max(120, int(share * (total - system)))
        out = compactor.compact_messages(history, budget)
        assert_invariants(history, out, budget)
        if out.summary is not None:
            ids = re.search(r'expand_context\((?:ids=)?\["([^"]+)"\]\)', out.summary).group(1)
            originals = compactor.expand([ids], session=out)
            assert len(originals) == len(out.dropped_ids), name
            for cid in out.dropped_ids[:5]:
                index = int(cid.rsplit("-", 1)[1])
                content = read_messages([history[index]])[0].content
                assert content.strip()[:200] in originals[cid], (name, cid)


def test_history_that_fits_comes_back_unchanged() -> None:
    history = coding_history()
    out = compactor.compact_messages(history, 100_000)
    assert out == history and out.summary is None and out.dropped_ids == []


def test_never_fails_for_length_however_large() -> None:
    big = [{"role": "system", "content": "Agent."}, {"role": "user", "content": "Index the repository."}]
    for i in range(150):
        big += [{"role": "assistant", "content": f"Reading part {i}.",
                 "tool_calls": [_call(f"p{i}", "bash", command=f"cat part_{i}.txt")]},
                {"role": "tool", "tool_call_id": f"p{i}", "content": _filler(200)}]
    big.append({"role": "assistant", "content": "", "tool_calls": [_call("last", "bash", command="cat all")]})
    big.append({"role": "tool", "tool_call_id": "last", "content": _filler(2500)})  # > the whole budget
    big.append({"role": "assistant", "content": "", "tool_calls": [_call("open", "bash", command="ls")]})
    assert compactor.count_message_tokens(big) > 500_000
    for budget in (400, 3000):
        out = compactor.compact_messages(big, budget, keep_last=4)
        assert_invariants(big, out, budget)
        assert out[-1]["role"] != "tool" or out[-2].get("tool_calls")
    with pytest.raises(BudgetError, match="use a budget of at least"):
        compactor.compact_messages([{"role": "system", "content": _filler(100)}, *big[1:]], 200,
                                   compress_system=False)


def test_compacting_a_compacted_history_stays_valid() -> None:
    history = coding_history()
    budget = int(compactor.count_message_tokens(history) * 0.5)
    once = compactor.compact_messages(history, budget, keep_last=3)
    grown = [*once, {"role": "user", "content": "One more thing: document parse_date in README.md."},
             {"role": "assistant", "content": "Documented parse_date in README.md."}]
    smaller = int(compactor.count_message_tokens(grown) * 0.8)
    twice = compactor.compact_messages(grown, smaller, keep_last=1)
    assert_invariants(grown, twice, smaller)
    summary = twice.summary or ""
    assert summary.count("[compactor]") == 1  # the first summary is carried, not quoted
    first_ids = re.search(r'ids=\["([^"]+)"\]', once.summary or "").group(1)
    assert first_ids in summary  # the way back to the oldest messages survives
    assert "`src/app/dates.py`" in summary
    assert compactor.expand([first_ids], session=once)  # and still expands


# -- expand: the API, the OpenAI tool, a store on disk --------------------------------------------


def test_expand_tool_round_trip_through_the_openai_client(openai_server: FakeOpenAI) -> None:
    history = coding_history()
    out = compactor.compact_messages(history, int(compactor.count_message_tokens(history) * 0.5))
    wanted = out.dropped_ids[1]
    body = {"id": "c", "object": "chat.completion", "created": 0, "model": "m", "choices": [{
        "index": 0, "finish_reason": "tool_calls", "message": {
            "role": "assistant", "content": None, "tool_calls": [{
                "id": "call_1", "type": "function",
                "function": {"name": "expand_context", "arguments": json.dumps({"ids": [wanted]})}}]}}]}
    openai_server.queue(Reply(body=json.dumps(body)))
    client = openai.OpenAI(base_url=openai_server.base_url, api_key="sk-test", max_retries=0)
    reply = client.chat.completions.create(model="m", messages=list(out), tools=[compactor.EXPAND_TOOL])
    sent = openai_server.requests[0].json
    assert sent["tools"] == [compactor.EXPAND_TOOL] and sent["messages"] == list(out)
    answer = compactor.handle_expand_call(reply.choices[0].message.tool_calls[0], session=out)
    assert answer["role"] == "tool" and answer["tool_call_id"] == "call_1"
    index = int(wanted.rsplit("-", 1)[1])
    assert answer["content"].startswith(f"[{wanted}]\n{history[index]['role']}: ")
    assert history[index]["content"].splitlines()[0] in answer["content"]
    bad = compactor.handle_expand_call({"id": "x", "function": {"name": "expand_context",
                                                                "arguments": '{"ids": ["nope-0001"]}'}},
                                       session=out)
    assert bad["content"].startswith("error: chunk id(s) not in the store: nope-0001")


def test_sqlite_store_serves_ids_to_another_process(tmp_path: Path) -> None:
    history = coding_history()
    store = tmp_path / "history.sqlite"
    out = compactor.compact_messages(history, int(compactor.count_message_tokens(history) * 0.5),
                                     store=str(store), session="agent-7")
    traceback_id = f"{out.report['source_id']}-0003"
    assert traceback_id in out.dropped_ids
    done = run_cli("--expand", traceback_id, "--store", str(store))
    assert done.returncode == 0, done.stderr
    assert "ValueError: unconverted data remains: Z" in done.stdout
    missing = run_cli("--expand", "0000000000000000-0001", "--store", str(store))
    assert missing.returncode == 2 and "not in the store" in missing.stderr


# -- the guarded LLM pass --------------------------------------------------------------------------


def _settings(server: FakeOpenAI) -> dict[str, Any]:
    return {"model": "m", "base_url": server.base_url, "api_key": "sk-test", "max_retries": 0}


def _draft_of(prompt: str) -> str:
    """The rule draft inside the rewrite prompt (its sections come before the `---` line)."""
    start = re.search(r"^## ", prompt, re.M).start()
    return prompt[start:prompt.index("\n\n---\n\n", start)]


def test_llm_rewrite_is_used_only_when_faithful(openai_server: FakeOpenAI) -> None:
    history = coding_history()
    budget = int(compactor.count_message_tokens(history) * 0.6)
    openai_server.respond = lambda request: Reply(content=_draft_of(request.prompt))
    good = compactor.compact_messages(history, budget, keep_last=2, llm=_settings(openai_server))
    assert good.report["method"] == "llm"
    assert_invariants(history, good, budget)
    openai_server.respond = lambda request: Reply(content=_draft_of(request.prompt)
                                                  + "\n- The fix saved $987 per month.")
    invented = compactor.compact_messages(history, budget, keep_last=2, llm=_settings(openai_server))
    assert invented.report["method"] == "rules" and "987" not in (invented.summary or "")
    step = next(s for s in invented.report["steps"] if s["step"] == "compress.eight_segment")
    assert "987" in " ".join(step["details"]["llm_rejected"])
    openai_server.respond = lambda request: Reply(content="A short prose summary without sections.")
    lost = compactor.compact_messages(history, budget, keep_last=2, llm=_settings(openai_server))
    assert lost.report["method"] == "rules"
    openai_server.respond = lambda request: Reply(status=500, content=None)
    failing = compactor.compact_messages(history, budget, keep_last=2, llm=_settings(openai_server))
    assert failing.report["method"] == "rules" and failing.summary


# -- the CLI ---------------------------------------------------------------------------------------


def test_cli_compacts_a_history_to_json_messages_or_markdown(tmp_path: Path) -> None:
    [row] = _eval("agent-trajectories-tau-bench", 1, min_chars=15000)
    path = tmp_path / "history.json"
    path.write_text(json.dumps(row["messages"]), encoding="utf-8")
    report = tmp_path / "report.json"
    done = run_cli("pipelines/conversation.yaml", str(path), "--budget", "2500", "--report", str(report))
    assert done.returncode == 0, done.stderr
    steps = [s["step"] for s in json.loads(report.read_text(encoding="utf-8"))["steps"]]
    assert steps == ["compress.structured", "chunk.messages", "compress.eight_segment", "render.messages"]
    out = json.loads(done.stdout)
    assert_invariants(row["messages"], out, 2500)
    assert any(str(m.get("content")).startswith("[compactor]") for m in out)
    markdown = run_cli("conversation", str(path), "--budget", "2500", "--format", "markdown",
                       "--keep-last", "1", "--role", "assistant")
    assert markdown.returncode == 0, markdown.stderr
    assert "## All user messages" in markdown.stdout and "role: assistant" in markdown.stdout
    wrong = run_cli("generic", str(path), "--keep-last", "2")
    assert wrong.returncode == 2 and "conversation pipelines" in wrong.stderr
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps([{"role": "user", "content": "hi"}, {"content": "no role"}]),
                      encoding="utf-8")
    bad = run_cli("conversation", str(broken), "--budget", "100")
    # the item's line and its index (item 1 starts on line 1 of this one-line list)
    assert bad.returncode == 2 and "broken.json:1: [1]: a message needs a string `role`" in bad.stderr


# -- topic switching --------------------------------------------------------------------

PAGE_A = ("Battery pack prices fell to $139 per kWh in 2023, according to BloombergNEF. "
          "Lithium iron phosphate cells were cheaper than nickel cells. Prices fell 14% from 2022.")
PAGE_B = ("Sodium-ion cells entered mass production in 2023. CATL said its sodium-ion cells reach "
          "160 Wh/kg. Analysts expect pack prices near $113 per kWh by 2025.")
PAGE_C = ("Europe had about 630,000 public charging points at the end of 2023. "
          "Ionity operates high-power chargers along motorways in 24 countries.")


def _search(call_id: str, query: str, pages: list[tuple[str, str]]) -> list[dict[str, Any]]:
    results = {"results": [{"url": url, "title": url.rsplit("/", 1)[-1], "content": text}
                           for url, text in pages]}
    return [{"role": "assistant", "content": "",
             "tool_calls": [_call(call_id, "tavily_search", query=query)]},
            {"role": "tool", "tool_call_id": call_id, "content": json.dumps(results)}]


def test_topic_switch_archives_results_and_prunes_the_topic(tmp_path: Path) -> None:
    system = {"role": "system", "content": "You are a research agent."}
    instruction = {"role": "user", "content": "Research EV battery prices and charging networks."}
    session = compactor.ResearchSession([system, instruction], topic="battery prices", session="r1",
                                        store=str(tmp_path / "research.sqlite"), query="EV battery prices")
    session.add(*_search("s1", "EV battery pack prices", [("https://ex.com/bnef", PAGE_A),
                                                          ("https://ex.com/sodium", PAGE_B)]))
    session.add({"role": "assistant", "content": "",
                 "tool_calls": [_call("k1", "think_tool", reflection="Prices are covered; charging next.")]},
                {"role": "tool", "tool_call_id": "k1", "content": "Reflection recorded."},
                {"role": "user", "content": "For charging, focus on Europe."},
                {"role": "assistant", "content": "Switching topic.",
                 "tool_calls": [_call("t1", "change_research_topic", new_topic="charging networks",
                                      reason="prices covered",
                                      search_result_of_current_topic="Packs fell to $139 per kWh in 2023.")]})
    reply = session.handle_tool_call(session.messages[-1]["tool_calls"][0])
    assert reply["tool_call_id"] == "t1" and "Archived topic 'battery prices'" in reply["content"]
    europe = {"role": "user", "content": "For charging, focus on Europe."}
    assert session.messages[:3] == [system, instruction, europe]
    assert session.messages[3]["tool_calls"][0]["function"]["name"] == "change_research_topic"
    assert session.messages[4] is reply and len(session.messages) == 5
    assert all(u.complete for u in units(read_messages(session.messages)))
    [entry] = session.search_results
    assert entry["topic"] == "battery prices" and session.topic == "charging networks"
    assert entry["useful_webpages"] == ["https://ex.com/bnef", "https://ex.com/sodium"]
    assert "$139 per kWh" in entry["compressed_content"] and entry["fact_ids"]
    assert entry["agent_summary"] == "Packs fell to $139 per kWh in 2023."
    originals = compactor.expand(entry["dropped_ids"], session=session)
    assert any("tavily_search" in text for text in originals.values())
    assert any("Reflection recorded." in text for text in originals.values())

    session.add(*_search("s2", "Europe charging points", [("https://ex.com/charging", PAGE_C)]))
    session.add({"role": "assistant", "content": "",
                 "tool_calls": [_call("t2", "change_research_topic", new_topic="grid impact")]})
    session.handle_tool_call(session.messages[-1]["tool_calls"][0])
    names = [c["function"]["name"] for m in session.messages for c in m.get("tool_calls") or []]
    assert names == ["change_research_topic"]  # only the latest state survives
    assert "battery prices (2 pages); charging networks (1 pages)" in session.messages[-1]["content"]
    done = session.handle_tool_call({"id": "e1", "function": {"name": "end_of_research", "arguments": "{}"}})
    assert json.loads(done["content"]) == {"topics": [{"topic": "battery prices", "pages": 2},
                                                      {"topic": "charging networks", "pages": 1}]}
    assert [t["function"]["name"] for t in session.tools()] == [
        "change_research_topic", "end_of_research", "expand_context"]
    bad = session.handle_tool_call({"id": "x", "function": {"name": "change_research_topic",
                                                            "arguments": '{"new_topic": ""}'}})
    assert bad["content"].startswith("error: change_research_topic needs a non-empty `new_topic`")


# -- edge cases found in review --------------------------------------------------------------------


def test_a_clean_step_cannot_change_what_is_counted_or_stored() -> None:
    history = coding_history()
    history[3] = {**history[3], "content": history[3]["content"] + "\u00a0\ufb01nal"}  # NFKC would change it
    pipeline = Pipeline.from_string("version: 1\nname: c\nsteps:\n  - use: clean.normalize\n"
                                    "  - use: chunk.messages\n  - use: compress.eight_segment\n"
                                    "output: {format: messages}\n")
    for budget in (300, 1500):
        out = compactor.compact_messages(history, budget, pipeline=pipeline)
        assert_invariants(history, out, budget)
        assert out.report["original_tokens"] == compactor.count_message_tokens(history)
        originals = compactor.expand(out.dropped_ids, session=out)
        assert len(originals) == len(out.dropped_ids)
        assert set(out.report["cited"]) <= set(out.dropped_ids)  # never a verbatim message


def test_tokens_count_calls_next_to_list_content_and_images() -> None:
    arguments = json.dumps({"text": "word " * 2000})
    mixed = {"role": "assistant", "content": [{"type": "text", "text": "see"}],
             "tool_calls": [{"id": "a", "type": "function",
                             "function": {"name": "f", "arguments": arguments}}]}
    assert compactor.count_message_tokens([mixed]) > 2000
    image = {"role": "user", "content": [{"type": "text", "text": "what is this?"},
                                         {"type": "image_url", "image_url": {"url": "data:image/png;base64,"
                                                                             + "A" * 200_000}}]}
    assert 85 < compactor.count_message_tokens([image]) < 120


def test_parallel_calls_get_their_own_results() -> None:
    history = [{"role": "system", "content": "sys"}, {"role": "user", "content": "fix it"},
               {"role": "assistant", "content": "", "tool_calls": [
                   _call("c1", "bash", command="pytest tests/test_a.py"),
                   _call("c2", "bash", command="ls src")]},
               {"role": "tool", "tool_call_id": "c2", "content": "a.py b.py"},
               {"role": "tool", "tool_call_id": "c1", "content": "Traceback (most recent call last):\n"
                                                                "ValueError: bad date"}]
    from compactor.plugins.compress.eight_segment.history import History

    actions = {a.text: a for a in History(read_messages(history)).actions}
    assert actions["bash(command=pytest tests/test_a.py)"].failed
    assert actions["bash(command=pytest tests/test_a.py)"].error == "ValueError: bad date"
    assert not actions["bash(command=ls src)"].failed
    history += [{"role": "user", "content": "more words " * 40},
                {"role": "assistant", "content": "ok " * 40}] * 4
    budget = compactor.count_message_tokens(history) // 2
    out = compactor.compact_messages(history, budget, keep_last=1)
    assert_invariants(history, out, budget)
    errors = _section(out.summary or "", "Errors and fixes")
    assert "ValueError: bad date" in errors and "ls src" not in errors


def test_kept_messages_are_the_input_objects_values_untouched() -> None:
    import datetime

    history = coding_history()
    history[0] = {**history[0], "meta": {1: "int key"}, "ts": datetime.datetime(2024, 1, 1)}
    history[-1] = {**history[-1], "tool_calls": ()}
    out = compactor.compact_messages(history, int(compactor.count_message_tokens(history) * 0.5), keep_last=1)
    assert out[0] == history[0] and out[-1] == history[-1]
    assert out[-1]["tool_calls"] == () and out[0]["meta"] == {1: "int key"}
    with pytest.raises(compactor.InputError, match="summary_role must be one of"):
        compactor.compact_messages(history, 500, summary_role="tool")


def test_the_latest_turn_stays_when_it_fits_and_tight_llm_rewrites_are_checked(
        openai_server: FakeOpenAI) -> None:
    history = [{"role": "system", "content": "sys"}, {"role": "user", "content": "do it"}]
    for k in range(10):
        history += [{"role": "assistant", "content": f"step {k}",
                     "tool_calls": [_call(f"c{k}", "bash", command="ls")]},
                    {"role": "tool", "tool_call_id": f"c{k}", "content": "out " * 200}]
    out = compactor.compact_messages(history, 600)
    assert_invariants(history, out, 600)
    assert out[-1] == history[-1] and out[-2] == history[-2]
    openai_server.respond = lambda request: Reply(content="The agent listed files.")
    tight = compactor.compact_messages(coding_history(), 250, llm=_settings(openai_server))
    assert tight.report["method"] == "rules"


def test_research_session_answers_malformed_calls_with_errors() -> None:
    session = compactor.ResearchSession([{"role": "user", "content": "research"}])
    for arguments in ("null", "[1]", "{not json"):
        reply = session.handle_tool_call({"id": "t", "function": {"name": "change_research_topic",
                                                                  "arguments": arguments}})
        assert reply["content"].startswith("error: arguments")
    ok = session.handle_tool_call({"id": "u", "function": {"name": "change_research_topic",
                                                           "arguments": {"new_topic": "B"}}})
    assert ok["content"].startswith("Current research topic: B.")
    null = {"id": "x", "function": {"name": "expand_context", "arguments": "null"}}
    assert compactor.handle_expand_call(null, session=session)["content"].startswith("error: arguments")


def test_the_summary_is_the_same_in_every_process() -> None:
    import subprocess
    import sys

    script = ("import json, compactor\nfrom tests.plugins.compress.test_conversation import coding_history\n"
              "h = coding_history()\nprint(compactor.compact_messages(h, 600, keep_last=2).summary)")
    outputs = set()
    for seed in ("1", "2", "3"):
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO,
                              env={**os.environ, "PYTHONHASHSEED": seed}, timeout=120)
        assert done.returncode == 0, done.stderr
        outputs.add(done.stdout)
    assert len(outputs) == 1
