"""compactor-mcp over streamable HTTP: the real server process listening on 127.0.0.1, the mcp SDK's
own streamable HTTP client; and the command line's refusals (exit 2 with one clear line)."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")

import anyio  # after the skip: anyio comes with mcp
import httpx
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from compactor import get_counter

SERVER = [sys.executable, "-m", "compactor.integrations.mcp_server"]
NEEDLE = "The coolant pump failed at 03:14 because valve V-12 had been left closed after maintenance."
FILLER = "The cafeteria menu changes every Tuesday and features a vegetarian option. " * 12


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class HttpServer:
    """`compactor-mcp --transport streamable-http` as a process: its first stderr line names the URL."""

    def __init__(self, store: Path, port: int) -> None:
        self.process = subprocess.Popen(
            [*SERVER, "--transport", "streamable-http", "--host", "127.0.0.1", "--port", str(port),
             "--store", str(store)], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE, text=True)
        self.lines: list[str] = []
        ready = threading.Event()

        def read() -> None:
            assert self.process.stderr is not None
            for line in self.process.stderr:
                self.lines.append(line)
                ready.set()
            ready.set()

        threading.Thread(target=read, daemon=True).start()
        if not ready.wait(60) or not self.lines:
            self.process.kill()
            pytest.fail(f"the server did not start: {self.lines}")
        self.url = self.lines[0].rpartition(" at ")[2].strip()

    def stop(self, sig: int = signal.SIGTERM) -> int:
        if self.process.poll() is None:
            self.process.send_signal(sig)
        code = self.process.wait(timeout=20)
        assert self.process.stderr is not None
        self.process.stderr.close()
        return code


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HttpServer]:
    running = HttpServer(tmp_path_factory.mktemp("mcp-http") / "s.sqlite", free_port())
    yield running
    running.stop(signal.SIGKILL)


def call(url: str, scenario: Any) -> Any:
    async def main() -> Any:
        async with streamable_http_client(url) as streams, ClientSession(*streams) as session:
            await session.initialize()
            with anyio.fail_after(30):
                return await scenario(session)

    return anyio.run(main)


def test_the_sdk_client_lists_and_calls_tools_over_http(server: HttpServer) -> None:
    assert server.url.startswith("http://127.0.0.1:") and server.url.endswith("/mcp")
    text = FILLER + NEEDLE + " " + FILLER

    async def scenario(session: ClientSession) -> Any:
        tools = {t.name: t for t in (await session.list_tools()).tools}
        short = await session.call_tool("compress", {"text": text, "query": "why did the pump fail",
                                                     "budget": 40})
        history = [{"role": "user" if i % 2 else "assistant",
                    "content": f"Step {i}: checked subsystem {i}. " + (NEEDLE if i == 7 else FILLER)}
                   for i in range(30)]
        compact = await session.call_tool("compact_messages", {"messages": history, "budget": 400,
                                                               "session": "http"})
        return tools, short, compact

    tools, short, compact = call(server.url, scenario)
    assert tools["compress"].title and tools["compress"].annotations.read_only_hint is True
    assert not short.is_error and short.content[0].text == short.structured_content["text"]
    assert NEEDLE in short.content[0].text
    assert get_counter().count(short.content[0].text) == short.structured_content["tokens"] <= 40
    ids = compact.structured_content["dropped_ids"]
    assert not compact.is_error and len(ids) > 5

    async def later(session: ClientSession) -> Any:  # another HTTP session: the same store
        return await session.call_tool("expand", {"ids": ids, "session": "http"})

    back = call(server.url, later)
    assert list(back.structured_content["texts"]) == ids
    assert sum(NEEDLE in body for body in back.structured_content["texts"].values()) == 1


def test_a_foreign_host_header_is_refused(server: HttpServer) -> None:
    """DNS rebinding: a page on another site must not reach a server on the loopback address."""
    body = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    headers = {"Host": "evil.example", "Accept": "application/json, text/event-stream"}
    answer = httpx.post(server.url, json=body, headers=headers, timeout=10)
    assert answer.status_code == 421


def test_sigterm_stops_the_server_cleanly(tmp_path: Path) -> None:
    running = HttpServer(tmp_path / "s.sqlite", 0)  # port 0: any free port, named in the first line
    port = int(running.url.rpartition(":")[2].split("/")[0])
    assert port > 0
    with socket.create_connection(("127.0.0.1", port), timeout=5):
        pass
    assert running.stop() == 0
    assert "Traceback" not in "".join(running.lines)


@pytest.mark.parametrize(("args", "message"), [
    (["--transport", "carrier-pigeon"], "invalid choice: 'carrier-pigeon'"),
    (["--port", "8080"], "--host and --port apply to --transport streamable-http"),
    (["--host", "127.0.0.1"], "--host and --port apply to --transport streamable-http"),
    (["--transport", "streamable-http", "--port", "70000"], "a port is 0 to 65535"),
    (["--transport", "streamable-http", "--port", "eighty"], "not a port number: 'eighty'"),
])
def test_bad_flags_exit_2_with_one_clear_line(args: list[str], message: str, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    from compactor.integrations.mcp_server import main

    with pytest.raises(SystemExit) as stopped:
        main(["--store", str(tmp_path / "s.sqlite"), *args])
    out = capsys.readouterr()
    assert stopped.value.code == 2 and out.out == ""
    last = out.err.splitlines()[-1]  # argparse's usage, then one line saying what is wrong
    assert last.startswith("compactor-mcp: error: ") and message in last
    assert not (tmp_path / "s.sqlite").exists()  # refused before anything was opened


def test_the_console_script_exits_2_on_a_bad_flag() -> None:
    done = subprocess.run([*SERVER, "--transport", "carrier-pigeon"], capture_output=True, text=True,
                          timeout=60, stdin=subprocess.DEVNULL)
    assert done.returncode == 2 and done.stdout == "" and "Traceback" not in done.stderr
    last = done.stderr.splitlines()[-1]
    assert last.startswith("compactor-mcp: error: argument --transport: invalid choice")


def test_a_port_in_use_or_an_unknown_host_exits_2(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    from compactor.integrations.mcp_server import main

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code = main(["--transport", "streamable-http", "--port", str(port),
                     "--store", str(tmp_path / "s.db")])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith(f"compactor-mcp: cannot listen on 127.0.0.1 port {port}: ")
    assert "in use" in err
    code = main(["--transport", "streamable-http", "--host", "no-such-host.invalid", "--port", "0",
                 "--store", str(tmp_path / "s.db")])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("compactor-mcp: cannot listen on no-such-host.invalid port 0: ")
