"""compactor-mcp end to end: the mcp SDK's own stdio client starts the server as a subprocess, lists
its tools, calls each one and checks schemas and results; bad arguments come back as tool errors and
the server keeps serving. Skipped without the `mcp` extra."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")

import queue
import threading
from collections.abc import Iterator

import anyio  # after the skip: anyio comes with mcp
import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client

from compactor import get_counter
from compactor.apps.compacter import STRATEGIES
from compactor.formats.compaction import KINDS
from compactor.pipeline import shipped_pipelines

TOOLS = {"compress", "compact_messages", "expand", "process_search_results", "get_checklist_context",
         "reconstruct_report_context"}
SCRIPT = Path(sys.executable).parent / "compactor-mcp"
NEEDLE = "The coolant pump failed at 03:14 because valve V-12 had been left closed after maintenance."
FILLER = [
    "The cafeteria menu changes every Tuesday and features a vegetarian option.",
    "Quarterly revenue grew slightly in the northern region thanks to new retail partners.",
    "The parking garage on level three will be repainted during the summer holidays.",
    "Our hiking club walked twelve kilometres along the river on Saturday morning.",
    "The library extended its opening hours for students preparing for examinations.",
    "A new espresso machine was installed in the second-floor kitchen last month.",
]


def run_client(scenario: Callable[[ClientSession], Awaitable[Any]], *, store: Path,
               errlog: Path | None = None, script: bool = False) -> Any:
    """Start compactor-mcp (the module, or the console script) on `store` and run `scenario` in one
    client session; the server's stderr goes to `errlog`."""
    command, args = ((str(SCRIPT), []) if script
                     else (sys.executable, ["-m", "compactor.integrations.mcp_server"]))
    params = StdioServerParameters(command=command, args=[*args, "--store", str(store)])

    async def main() -> Any:
        with open(errlog or store.with_suffix(".log"), "w", encoding="utf-8") as log:
            async with stdio_client(params, errlog=log) as streams, ClientSession(*streams) as client:
                await client.initialize()
                with anyio.fail_after(30):
                    return await scenario(client)

    return anyio.run(main)


def data(result: Any) -> dict[str, Any]:
    """A successful call's structured result (its figures); the text content is checked apart."""
    assert not result.is_error, result.content
    assert len(result.content) == 1 and result.content[0].type == "text"
    return dict(result.structured_content)


def error_text(result: Any) -> str:
    assert result.is_error, result
    assert result.structured_content is None
    return " ".join(c.text for c in result.content)


def test_tools_are_listed_with_input_and_output_schemas(tmp_path: Path) -> None:
    async def scenario(session: ClientSession) -> Any:
        return (await session.list_tools()).tools

    tools = {t.name: t for t in run_client(scenario, store=tmp_path / "s.sqlite")}
    assert set(tools) == TOOLS
    required = {"compress": ["text"], "compact_messages": ["messages", "budget"], "expand": ["ids"],
                "process_search_results": ["results", "session"], "get_checklist_context": ["session"],
                "reconstruct_report_context": ["session"]}
    for name, tool in tools.items():
        schema = tool.input_schema
        assert tool.description and len(tool.description) > 40, name
        assert schema["type"] == "object" and sorted(schema.get("required", [])) == sorted(required[name])
        assert all(p.get("description") for p in schema["properties"].values()), name
        assert tool.output_schema and tool.output_schema["type"] == "object", name
    props = {name: tool.input_schema["properties"] for name, tool in tools.items()}
    offered = props["compress"]["pipeline"]["anyOf"][0]["enum"]
    assert set(offered) < set(shipped_pipelines()) and {"qa", "generic"} <= set(offered)
    assert props["compress"]["text"] == {"description": props["compress"]["text"]["description"],
                                         "minLength": 1, "title": "Text", "type": "string"}
    assert props["compact_messages"]["budget"]["exclusiveMinimum"] == 0
    assert props["compact_messages"]["kind"]["anyOf"][0]["enum"] == ["auto", *KINDS]
    assert props["process_search_results"]["strategy"]["anyOf"][0]["enum"] == list(STRATEGIES)
    result_item = tools["process_search_results"].input_schema["$defs"]["SearchResult"]
    assert sorted(result_item["required"]) == ["content", "url"]
    outputs = tools["compact_messages"].output_schema["properties"]
    assert set(outputs) >= {"messages", "dropped_ids", "session"}


def test_compress_keeps_the_needle_within_budget(tmp_path: Path) -> None:
    text = " ".join([*FILLER * 3, NEEDLE, *FILLER * 3])
    counter = get_counter()
    assert counter.count(text) > 400

    async def scenario(session: ClientSession) -> Any:
        query = "why did the coolant pump fail"
        return [data(await session.call_tool("compress", args)) for args in (
            {"text": text, "query": query, "budget": 60},  # qa: query-aware
            {"text": text, "query": query, "budget": 60, "pipeline": "topics"},
            {"text": text, "budget": 60})]  # generic: reading order

    results = run_client(scenario, store=tmp_path / "s.sqlite")
    assert [o["pipeline"] for o in results] == ["qa", "topics", "generic"]
    for out in results:
        assert out["tokens"] == counter.count(out["text"]) <= 60
    assert NEEDLE in results[0]["text"] and len(results[0]["text"]) < len(text) / 4
    assert NEEDLE in results[1]["text"]
    assert results[2]["text"].startswith(FILLER[0]) and NEEDLE not in results[2]["text"]


def history() -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are a maintenance assistant."},
                                      {"role": "user", "content": "Help me find why the plant stopped."}]
    for i in range(16):
        messages.append({"role": "assistant", "content": f"Step {i}: I checked subsystem {i}. "
                                                          + FILLER[i % len(FILLER)] * 3})
        messages.append({"role": "user", "content": f"Noted step {i}; " + (NEEDLE if i == 5 else "go on.")})
    return messages


def test_compact_messages_ids_expand_in_a_later_server(tmp_path: Path) -> None:
    store = tmp_path / "store.sqlite"
    messages = history()
    counter = get_counter()

    async def compact(session: ClientSession) -> Any:
        return data(await session.call_tool("compact_messages",
                                            {"messages": messages, "budget": 400, "session": "plant-7"}))

    short = run_client(compact, store=store)
    assert short["session"] == "plant-7" and short["kind"]
    assert short["input_tokens"] > 1000 >= 400 >= short["output_tokens"]
    assert short["messages"][0] == messages[0] and short["messages"][-1] == messages[-1]
    assert short["summary"] and any(short["summary"] in str(m["content"]) for m in short["messages"])
    assert NEEDLE in short["summary"]
    # the summary tells the model to call the tool as this server offers it
    assert 'expand(ids=["' in short["summary"] or 'expand(["' in short["summary"]
    assert "expand_context" not in json.dumps(short["messages"])
    assert len(short["dropped_ids"]) > 10
    sent = sum(counter.count(str(m["content"])) for m in short["messages"])
    assert sent <= short["output_tokens"]

    # a new server process on the same store (the console script when installed) expands the ids
    async def expand(session: ClientSession) -> Any:
        whole = data(await session.call_tool("expand", {"ids": short["dropped_ids"], "session": "plant-7"}))
        first, last = short["dropped_ids"][0], short["dropped_ids"][-1]
        span = f"{first}..{last.rpartition('-')[2]}"
        ranged = data(await session.call_tool("expand", {"ids": [span]}))
        return whole, ranged

    whole, ranged = run_client(expand, store=store, script=SCRIPT.is_file())
    assert list(whole["texts"]) == short["dropped_ids"] and whole["omitted"] == []
    assert ranged["texts"] == whole["texts"]
    # each id gives back its own message: the history's message n is chunk n
    for cid, body in whole["texts"].items():
        message = messages[int(cid.rpartition("-")[2])]
        assert body == f"{message['role']}: {message['content']}"
    assert sum(NEEDLE in body for body in whole["texts"].values()) == 1


PAGES = [
    {"url": "https://plant.example/incident", "title": "Incident report",
     "content": "<html><body><h1>Incident report</h1><p>" + NEEDLE + "</p><p>The shift supervisor "
                "restarted the pump at 04:02 once valve V-12 was opened.</p><p>"
                + " ".join(FILLER[:3]) + "</p></body></html>"},
    {"url": "https://plant.example/news", "title": "Site news", "content": " ".join(FILLER)},
]
MORE = [{"url": "https://plant.example/valves", "content": "Valve V-12 isolates the coolant loop. Operators "
         "must open valve V-12 before starting the coolant pump, according to procedure P-7."}]


def test_search_session_round_trip(tmp_path: Path) -> None:
    async def scenario(session: ClientSession) -> Any:
        query = "why did the coolant pump fail"
        first = data(await session.call_tool("process_search_results",
                                             {"results": PAGES, "session": "r1", "query": query}))
        again = {"results": [*MORE, PAGES[1]], "session": "r1", "query": query}
        second = data(await session.call_tool("process_search_results", again))
        checklist = data(await session.call_tool("get_checklist_context", {"session": "r1"}))
        fact = next(f for f in checklist["facts"] if "03:14" in f["text"])
        report = data(await session.call_tool("reconstruct_report_context",
                                               {"session": "r1", "items": [fact["id"]], "budget": 200}))
        everything = data(await session.call_tool("reconstruct_report_context", {"session": "r1"}))
        chunks = data(await session.call_tool("expand", {"ids": fact["chunk_ids"], "session": "r1"}))
        b = data(await session.call_tool("process_search_results", {"results": PAGES, "session": "r2",
                                                                    "strategy": "chunk_filtering",
                                                                    "query": query}))
        b_list = data(await session.call_tool("get_checklist_context", {"session": "r2"}))
        return first, second, checklist, fact, report, everything, chunks, b, b_list

    first, second, checklist, fact, report, everything, chunks, b, b_list = run_client(
        scenario, store=tmp_path / "s.sqlite")
    assert (first["batch"], first["new_pages"], first["strategy"]) == (1, 2, "fact_centric")
    assert (second["batch"], second["results"], second["new_pages"]) == (2, 2, 1)  # the news page again
    assert checklist["strategy"] == "fact_centric" and len(checklist["facts"]) >= 2
    assert fact["source_url"] == PAGES[0]["url"] and fact["text"] in checklist["text"]
    assert any("V-12 isolates" in f["text"] or "procedure P-7" in f["text"] for f in checklist["facts"])
    assert NEEDLE in report["text"] and "<https://plant.example/incident>" in report["text"]
    assert report["tokens"] == get_counter().count(report["text"]) <= 200
    assert "procedure P-7" not in report["text"] and "procedure P-7" in everything["text"]
    assert any(NEEDLE in body for body in chunks["texts"].values())
    assert b["strategy"] == "chunk_filtering" and b_list["facts"] == [] and NEEDLE in b_list["text"]


BAD_CALLS: list[tuple[str, dict[str, Any], str]] = [
    ("compress", {"query": "x"}, "text"),
    ("compress", {"text": "Some words here.", "budget": -5}, "greater than 0"),
    ("compress", {"text": "Some words here.", "pipeline": "no-such-pipeline"}, "pipeline"),
    ("compress", {"text": "Plain text, not subtitles.", "pipeline": "transcripts"}, "Input should be"),
    ("compact_messages", {"messages": "not a list", "budget": 100}, "messages"),
    ("compact_messages", {"messages": [{"role": "user", "content": "hi"}], "budget": 0}, "greater than 0"),
    ("expand", {"ids": ["0123456789abcdef-0001"]}, "not in the store"),
    ("expand", {"ids": []}, "ids"),
    ("expand", {"ids": ["0123456789abcdef-0001"], "session": "nobody"}, "unknown session"),
    ("process_search_results", {"results": [{"url": "u"}], "session": "s"}, "content"),
    ("process_search_results", {"results": [{"url": "u", "content": "c"}], "session": "s",
                                "strategy": "magic"}, "strategy"),
    ("get_checklist_context", {"session": "never-made"}, "unknown session"),
    ("reconstruct_report_context", {"session": "never-made"}, "unknown session"),
    ("no_such_tool", {}, "no_such_tool"),
]


def test_bad_arguments_are_tool_errors_and_the_server_keeps_serving(tmp_path: Path) -> None:
    log = tmp_path / "server.log"

    async def scenario(session: ClientSession) -> Any:
        out = []
        for name, args, _ in BAD_CALLS:
            out.append(error_text(await session.call_tool(name, args)))
            good = data(await session.call_tool("compress", {"text": NEEDLE, "budget": 100}))
            assert good["text"] == NEEDLE
        data(await session.call_tool("process_search_results", {"results": PAGES, "session": "s"}))
        out.append(error_text(await session.call_tool("reconstruct_report_context",
                                                      {"session": "s", "items": ["f-000000000000"]})))
        out.append(error_text(await session.call_tool("process_search_results", {
            "results": MORE, "session": "s", "strategy": "summarization"})))
        out.append(error_text(await session.call_tool("expand", {"ids": ["0123456789abcdef-0001"],
                                                                 "session": "s"})))
        data(await session.call_tool("compact_messages", {"messages": history(), "budget": 300,
                                                          "session": "chat"}))
        out.append(error_text(await session.call_tool("get_checklist_context", {"session": "chat"})))
        return out

    errors = run_client(scenario, store=tmp_path / "s.sqlite", errlog=log)
    for (name, _, expected), text in zip(BAD_CALLS, errors, strict=False):
        assert expected in text, (name, text)
    assert "unknown fact id" in errors[-4]
    assert "built with strategy 'fact_centric'" in errors[-3]
    assert "not in session 's'" in errors[-2]
    assert "session 'chat' has no search results" in errors[-1]
    assert "Traceback" not in log.read_text()  # anticipated failures, none of them a crash


def test_a_store_that_cannot_be_used_exits_with_a_message(tmp_path: Path) -> None:
    bad = tmp_path / "not-a-store.sqlite"
    bad.write_text("this is not SQLite " * 100)
    done = subprocess.run([sys.executable, "-m", "compactor.integrations.mcp_server", "--store", str(bad)],
                          capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith("compactor-mcp: ") and "Traceback" not in done.stderr


def test_import_compactor_does_not_import_mcp() -> None:
    code = ("import sys, compactor\n"
            "compactor.compress('One sentence. Another one.', budget=50)\n"
            "compactor.compact_messages([{'role': 'user', 'content': 'hi'}], 100)\n"
            "import compactor.integrations\n"
            "print(sorted(m for m in sys.modules if m == 'mcp' or m.startswith('mcp.')))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          check=True)
    assert done.stdout.strip() == "[]"


def test_the_default_store_is_compactor_store_else_a_file_in_the_folder(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from compactor.integrations.mcp_server import default_store_path

    monkeypatch.delenv("COMPACTOR_STORE", raising=False)
    assert default_store_path(str(tmp_path)) == str(tmp_path / "compactor-mcp.sqlite")
    monkeypatch.setenv("COMPACTOR_STORE", str(tmp_path / "mine.sqlite"))
    assert default_store_path(str(tmp_path)) == str(tmp_path / "mine.sqlite")


# compactor-mcp over raw stdio answers every line: a line that is not one JSON-RPC message (garbage,
# a lone surrogate escape, nesting deeper than the parser goes, a batch array, a message of the wrong
# shape) gets a -32700 or -32600 error, with the line's id when it can be read, and the server keeps
# answering afterwards. The real server process, raw bytes on its stdin, a timeout on every read.


INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "raw", "version": "1"}}}


class RawClient:
    """The server process with lines in and parsed lines out, each read bounded by a timeout."""

    def __init__(self, store: Path) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "compactor.integrations.mcp_server", "--store", str(store)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        assert self.process.stdin is not None and self.process.stdout is not None
        self.stdin = self.process.stdin
        self.lines: queue.Queue[bytes] = queue.Queue()
        threading.Thread(target=self._read, args=(self.process.stdout,), daemon=True).start()

    def _read(self, stdout: Any) -> None:
        for line in stdout:
            self.lines.put(line)
        self.lines.put(b"")

    def send(self, line: bytes) -> None:
        self.stdin.write(line + b"\n")
        self.stdin.flush()

    def receive(self, timeout: float = 10.0) -> dict[str, Any]:
        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            pytest.fail(f"no reply within {timeout} s: the server left a line unanswered")
        assert line, "the server closed its output"
        return dict(json.loads(line))

    def close(self) -> None:
        self.stdin.close()
        self.process.wait(timeout=20)
        assert self.process.stdout is not None
        self.process.stdout.close()


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RawClient]:
    raw = RawClient(tmp_path_factory.mktemp("mcp") / "s.sqlite")
    raw.send(json.dumps(INIT).encode())
    assert raw.receive(60)["id"] == 1  # the first start imports everything: a generous timeout
    raw.send(b'{"jsonrpc": "2.0", "method": "notifications/initialized"}')
    yield raw
    raw.close()


DEEP = b'{"jsonrpc": "2.0", "id": 9, "method": "ping", "params": ' + b'{"a": ' * 50_000 + b"1" \
    + b"}" * 50_000 + b"}"


@pytest.mark.parametrize(("line", "code", "request_id"), [
    (b"garbage", -32700, None),
    (b"", -32700, None),
    (b"{\"jsonrpc\": \"2.0\", \"id\": 3, \"method\": \"ping\", \"params\": {\"x\": \"\\ud800\"}}", -32700, 3),
    (b"{\"jsonrpc\": \"2.0\", \"id\": \"s\", \"method\": \"tools/call\", "
     b"\"params\": {\"name\": \"compress\", \"arguments\": {\"text\": \"a\\udfffb\", \"budget\": 50}}}",
     -32700, "s"),
    (DEEP, -32700, None),
    (b"[" * 100_000 + b"]" * 100_000, -32700, None),
    (b'{"jsonrpc": "2.0", "id": 5, "method": 7}', -32600, 5),
    (b'{"jsonrpc": "2.0", "method": 7}', -32600, None),
    (b'{"hello": "world"}', -32600, None),
    (b"42", -32600, None),
    (b"[]", -32600, None),
])
def test_every_unreadable_line_is_answered(client: RawClient, line: bytes, code: int,
                                           request_id: Any) -> None:
    client.send(line)
    reply = client.receive()
    assert reply["jsonrpc"] == "2.0" and reply["id"] == request_id
    assert reply["error"]["code"] == code and reply["error"]["message"]
    client.send(b'{"jsonrpc": "2.0", "id": 100, "method": "ping"}')
    assert client.receive() == {"jsonrpc": "2.0", "id": 100, "result": {}}  # still serving


def test_a_batch_gets_one_error_per_request(client: RawClient) -> None:
    client.send(b'[{"jsonrpc": "2.0", "id": 21, "method": "ping"}, '
                b'{"jsonrpc": "2.0", "method": "notifications/x"}, '
                b'{"jsonrpc": "2.0", "id": 22, "method": "ping"}]')
    replies = [client.receive(), client.receive()]
    assert [r["id"] for r in replies] == [21, 22]
    assert all(r["error"]["code"] == -32600 and "batch" in r["error"]["message"] for r in replies)


def test_invalid_utf8_is_read_as_replacement_characters(client: RawClient) -> None:
    client.send(b'{"jsonrpc": "2.0", "id": 31, "method": "ping", "params": {"x": "\xed\xa0\x80\xff"}}')
    assert client.receive() == {"jsonrpc": "2.0", "id": 31, "result": {}}


def test_a_tool_call_still_works_after_garbage(client: RawClient) -> None:
    client.send(b"\x00\x01 not json at all")
    assert client.receive()["error"]["code"] == -32700
    call = {"jsonrpc": "2.0", "id": 41, "method": "tools/call",
            "params": {"name": "compress",
                       "arguments": {"text": "One sentence here. Another one.", "budget": 50}}}
    client.send(json.dumps(call).encode())
    reply = client.receive(30)
    assert reply["id"] == 41 and reply["result"]["isError"] is False


# -- what a host sees: titles, annotations, descriptions, schemas, the text a model reads -------------

#: (readOnlyHint, idempotentHint) per tool: the store-writing tools are not read-only, and a batch of
#: search results added twice is a second batch
HINTS = {"compress": (True, True), "compact_messages": (False, True), "expand": (True, True),
         "process_search_results": (False, False), "get_checklist_context": (True, True),
         "reconstruct_report_context": (True, True)}
HTML_PAGE = ("<!DOCTYPE html><html><head><title>Plant log</title><style>p {color: red}</style></head>"
             "<body><nav><a href='/'>Home</a> <a href='/news'>News</a></nav><h1>Plant log</h1><p>"
             + NEEDLE + "</p><p>" + " ".join(FILLER) + "</p><script>var tracked = true;</script>"
             "</body></html>")
PUMP = "why did the coolant pump fail"


async def host_session(session: ClientSession) -> dict[str, Any]:
    """What a host does: list the tools, then call each as its schema invites (defaults spelled
    out, every offered pipeline on a text and a page). One server process for the tests below."""
    tools = {t.name: t for t in (await session.list_tools()).tools}

    def defaults(name: str) -> dict[str, Any]:
        props = tools[name].input_schema["properties"]
        return {k: p["default"] for k, p in props.items() if "default" in p}

    out: dict[str, Any] = {"tools": tools, "defaults": defaults("compress")}
    out["needle"] = await session.call_tool("compress", {**defaults("compress"), "text": NEEDLE})
    out["compress"] = await session.call_tool("compress", {
        "text": " ".join([*FILLER * 3, NEEDLE, *FILLER * 3]), "query": PUMP, "budget": 60})
    short = out["compact"] = await session.call_tool("compact_messages", {
        **defaults("compact_messages"), "messages": history(), "budget": 400, "session": "s"})
    out["expand"] = await session.call_tool("expand", {**defaults("expand"),
                                                       "ids": data(short)["dropped_ids"][:2]})
    out["batch"] = await session.call_tool("process_search_results",
                                           {"results": PAGES, "session": "r", "query": PUMP})
    out["checklist"] = await session.call_tool("get_checklist_context", {"session": "r"})
    out["report"] = await session.call_tool("reconstruct_report_context", {"session": "r"})
    offered = tools["compress"].input_schema["properties"]["pipeline"]["anyOf"][0]["enum"]
    out["pipelines"] = {}
    for name in offered:
        for kind, text in (("text", " ".join([*FILLER, NEEDLE])), ("html", HTML_PAGE)):
            for query in (None, PUMP):
                args = {"text": text, "pipeline": name, "budget": 200, "query": query}
                out["pipelines"][name, kind, query] = await session.call_tool("compress", args)
    return out


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return dict(run_client(host_session, store=tmp_path_factory.mktemp("mcp-host") / "s.sqlite"))


def test_every_tool_has_a_title_and_honest_annotations(host: dict[str, Any]) -> None:
    listed = host["tools"]
    assert set(listed) == set(HINTS)
    for name, tool in listed.items():
        hints = tool.annotations
        assert tool.title and hints.title == tool.title, name
        assert (hints.read_only_hint, hints.idempotent_hint) == HINTS[name], name
        assert hints.destructive_hint is False and hints.open_world_hint is False, name
    assert len({t.title for t in listed.values()}) == len(listed)


def _descriptions(schema: Any) -> Iterator[str]:
    if isinstance(schema, dict):
        for key, value in schema.items():
            if key == "description" and isinstance(value, str):
                yield value
            else:
                yield from _descriptions(value)
    elif isinstance(schema, list):
        for value in schema:
            yield from _descriptions(value)


def test_descriptions_have_no_docstring_indentation(host: dict[str, Any]) -> None:
    for name, tool in host["tools"].items():
        texts = [tool.description, *_descriptions(tool.input_schema), *_descriptions(tool.output_schema)]
        for text in texts:
            assert text.strip(), name
            for line in text.split("\n"):
                assert line and line == line.strip(), (name, line)
                assert "  " not in line, (name, line)
    assert "\n" not in host["tools"]["compress"].description  # one paragraph, one line


def test_every_default_is_valid_under_its_own_schema(host: dict[str, Any]) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    checked = 0
    for tool in host["tools"].values():
        schema = tool.input_schema
        for sub in schema["properties"].values():
            if "default" in sub:
                jsonschema.Draft202012Validator({**sub, "$defs": schema.get("$defs", {})}).validate(
                    sub["default"])
                checked += 1
    assert checked >= 12
    pipeline = host["tools"]["compress"].input_schema["properties"]["pipeline"]
    with pytest.raises(jsonschema.ValidationError):  # the schema still says what is not a choice
        jsonschema.Draft202012Validator(pipeline).validate("conversation")


def test_calls_with_every_default_spelled_out_succeed(host: dict[str, Any]) -> None:
    assert host["defaults"] == {"query": None, "budget": None, "pipeline": None}
    assert data(host["needle"])["pipeline"] == "generic" and host["needle"].content[0].text == NEEDLE
    assert data(host["compact"])["session"] == "s" and len(data(host["expand"])["texts"]) == 2


def test_the_model_reads_the_compressed_text_and_programs_the_figures(host: dict[str, Any]) -> None:
    counter = get_counter()
    result = host["compress"]
    figures = data(result)
    read = result.content[0].text
    assert read == figures["text"] and NEEDLE in read
    assert counter.count(read) <= figures["tokens"] + 2 <= 62  # not the figures' JSON around it
    assert counter.count(json.dumps(figures, indent=2)) > counter.count(read) + 40
    text = " ".join([*FILLER * 3, NEEDLE, *FILLER * 3])
    assert figures["input_tokens"] == counter.count(text) and figures["pipeline"] == "qa"
    assert figures["ratio"] == round(figures["tokens"] / figures["input_tokens"], 4) < 0.25
    assert figures["budget"] == 60 and figures["warnings"] == []


def test_each_offered_pipeline_compresses_text_and_html(host: dict[str, Any]) -> None:
    results = host["pipelines"]
    offered = {name for name, _, _ in results}
    assert {"qa", "generic"} <= offered and len(results) == 4 * len(offered)
    for key, result in results.items():
        read = result.content[0].text
        assert not result.is_error and read.strip(), key
        assert "<" not in read and "var tracked" not in read, key  # the page was read, not passed on
        assert data(result)["pipeline"] == key[0]
    for name in offered:  # the needle survives every pipeline when the query asks for it
        assert "valve V-12" in results[name, "html", PUMP].content[0].text, name


def test_the_pipelines_not_offered_fail_or_pass_html_through(host: dict[str, Any]) -> None:
    import compactor
    from compactor.errors import CompactorError

    offered = {name for name, _, _ in host["pipelines"]}
    left_out = [n for n in shipped_pipelines() if n not in offered]
    assert {"conversation", "transcripts", "system-prompt"} <= set(left_out)
    for name in left_out:
        try:
            outputs = [compactor.compress(text, pipeline=name) for text in (NEEDLE, HTML_PAGE)]
        except CompactorError:
            continue
        assert any("<" in out or not out.strip() for out in outputs), name


def test_the_other_tools_answer_in_text_a_model_can_read(host: dict[str, Any]) -> None:
    short, back = host["compact"], host["expand"]
    assert json.loads(short.content[0].text) == data(short)["messages"]
    first, second = data(short)["dropped_ids"][:2]
    assert back.content[0].text == (f"[{first}]\n{data(back)['texts'][first]}\n\n"
                                    f"[{second}]\n{data(back)['texts'][second]}")
    batch, checklist, report = host["batch"], host["checklist"], host["report"]
    assert batch.content[0].text.startswith("Batch 1 of session 'r' (fact_centric): 2 results, 2 new pages")
    assert checklist.content[0].text == data(checklist)["text"] and "03:14" in checklist.content[0].text
    assert data(checklist)["tokens"] == get_counter().count(data(checklist)["text"])
    assert report.content[0].text == data(report)["text"] and NEEDLE in report.content[0].text
