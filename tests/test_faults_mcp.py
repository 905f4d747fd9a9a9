"""compactor-mcp over raw stdio answers every line: a line that is not one JSON-RPC message (garbage,
a lone surrogate escape, nesting deeper than the parser goes, a batch array, a message of the wrong
shape) gets a -32700 or -32600 error, with the line's id when it can be read, and the server keeps
answering afterwards. The real server process, raw bytes on its stdin, a timeout on every read."""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")

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
