"""Load test of `compactor-proxy` on 127.0.0.1: what the proxy costs under the trigger, and whether it
loses streams under concurrency.

The targets:

* (a) the proxy's added CPU per request under the trigger is at most 5 ms: the proxy's process CPU
  time (user + system, all threads, from /proc) over a batch of requests divided by the batch's size,
  median of the batches, with the request a typical agent turn (a system prompt, 12 tool calls with
  their JSON results, three tool schemas: about 2k tokens) sent one at a time over a keep-alive
  connection; the latency of the same request sent directly to the upstream and through the proxy
  is shown beside it;
* (b) 50 concurrent streamed requests through the proxy, none lost: a stream counts as complete when
  it answered 200 and its events add up to the whole reply and end with `[DONE]`.

The upstream is `tests/upstream_server.py` (an OpenAI-compatible fake) in its own process, and the
proxy runs as `python -m compactor.integrations.proxy` in another, so the client's and the upstream's
CPU are not counted as the proxy's. Run: ``python benchmarks/proxy.py`` (``--batches N``,
``--batch N``, ``--streams N``); exit 1 when a target is missed. Linux only (/proc). About 30 s.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parent.parent
CPU_TARGET_MS = 5.0
STREAMS_TARGET = 50
TEXT = "The order #W1003 was refunded to the original payment method on 12 May."


def agent_turn() -> dict[str, Any]:
    """A typical agent request well under the trigger."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a support agent for an online shop. Be precise and brief."},
        {"role": "user", "content": "Check my recent orders and refund #W1003 if it was damaged."}]
    for i in range(12):
        call = {"id": f"call_{i}", "type": "function",
                "function": {"name": "get_order", "arguments": json.dumps({"order_id": f"#W{1000 + i}"})}}
        result = {"order_id": f"#W{1000 + i}", "status": "delivered" if i % 3 else "pending",
                  "items": [{"sku": f"SKU-{i}-{k}", "qty": k + 1, "price": 9.5 + k} for k in range(3)],
                  "shipping": {"carrier": "DHL", "tracking": f"JD0146000{i:04d}"}}
        messages += [{"role": "assistant", "content": None, "tool_calls": [call]},
                     {"role": "tool", "tool_call_id": f"call_{i}", "content": json.dumps(result)}]
    tools = [{"type": "function", "function": {
        "name": name, "description": f"{name.replace('_', ' ')} by id",
        "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}},
                       "required": ["order_id"]}}} for name in ("get_order", "refund_order", "cancel_order")]
    return {"model": "gpt-4.1-mini", "messages": messages, "tools": tools}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (all its threads, finished ones too)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait_up(url: str, process: subprocess.Popen[bytes], seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"{process.args!r} exited with {process.returncode}")
        try:
            httpx.get(url, timeout=1.0)
            return
        except httpx.HTTPError:
            time.sleep(0.1)
    raise SystemExit(f"{url} did not answer in {seconds:.0f} s")


def timed_batch(client: httpx.Client, url: str, body: bytes, count: int) -> list[float]:
    """Send `body` `count` times one after another; each request's seconds."""
    times = []
    for _ in range(count):
        started = time.perf_counter()
        reply = client.post(url, content=body, headers={"content-type": "application/json",
                                                        "authorization": "Bearer sk-bench"})
        reply.raise_for_status()
        times.append(time.perf_counter() - started)
    return times


async def one_stream(client: httpx.AsyncClient, url: str, body: bytes) -> bool:
    """Whether one streamed request came back whole."""
    text: list[str] = []
    done = False
    headers = {"content-type": "application/json"}
    async with client.stream("POST", url, content=body, headers=headers) as reply:
        if reply.status_code != 200:
            return False
        async for line in reply.aiter_lines():
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                done = True
                continue
            choices = json.loads(data).get("choices") or [{}]
            text.append((choices[0].get("delta") or {}).get("content") or "")
    return done and "".join(text) == TEXT


async def streams(url: str, body: bytes, count: int) -> tuple[int, float]:
    """`count` streamed requests at once: how many came back whole, and the seconds it took."""
    limits = httpx.Limits(max_connections=count * 2, max_keepalive_connections=count * 2)
    async with httpx.AsyncClient(timeout=60.0, limits=limits) as client:
        started = time.perf_counter()
        results = await asyncio.gather(*(one_stream(client, url, body) for _ in range(count)),
                                       return_exceptions=True)
        seconds = time.perf_counter() - started
    return sum(1 for r in results if r is True), seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, default=5, help="batches of sequential requests (median)")
    parser.add_argument("--batch", type=int, default=200, help="requests per batch")
    parser.add_argument("--streams", type=int, default=STREAMS_TARGET, help="concurrent streamed requests")
    args = parser.parse_args(argv)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    upstream = subprocess.Popen([sys.executable, str(REPO / "tests" / "upstream_server.py"), str(free_port()),
                                 "0.02", TEXT], stdout=subprocess.PIPE, env=env)
    proxy: subprocess.Popen[bytes] | None = None
    try:
        assert upstream.stdout is not None
        base = upstream.stdout.readline().decode().strip()
        wait_up(base + "/health", upstream)
        port = free_port()
        proxy = subprocess.Popen([sys.executable, "-m", "compactor.integrations.proxy", "--upstream",
                                  base + "/v1", "--port", str(port), "--window", "128000",
                                  "--log-level", "warning"], env=env)
        root = f"http://127.0.0.1:{port}"
        wait_up(root + "/health", proxy)
        body = json.dumps(agent_turn()).encode()
        direct, through = base + "/v1/chat/completions", root + "/v1/chat/completions"
        per_request: list[float] = []
        latency: dict[str, list[float]] = {"direct": [], "proxy": []}
        with httpx.Client(timeout=30.0) as client:
            timed_batch(client, through, body, 50)  # warm-up: imports, tokenizer, the conversation
            for _ in range(args.batches):
                latency["direct"] += timed_batch(client, direct, body, args.batch // 4)
                before = cpu_seconds(proxy.pid)
                latency["proxy"] += timed_batch(client, through, body, args.batch)
                per_request.append((cpu_seconds(proxy.pid) - before) / args.batch * 1000)
        cpu_ms = statistics.median(per_request)
        stream_body = json.dumps({**agent_turn(), "stream": True}).encode()
        complete, seconds = asyncio.run(streams(through, stream_body, args.streams))
    finally:
        for process in (proxy, upstream):
            if process is not None:
                process.terminate()
                process.wait(10)
    ms = {name: statistics.median(values) * 1000 for name, values in latency.items()}
    rows = [("proxy CPU per request, ms (median of batches)", f"{cpu_ms:.2f}", f"<= {CPU_TARGET_MS:.0f}"),
            ("latency per request, ms: direct / via proxy", f"{ms['direct']:.2f} / {ms['proxy']:.2f}", ""),
            (f"concurrent streams complete ({seconds:.2f} s)", f"{complete}/{args.streams}",
             f"{args.streams}/{args.streams}")]
    width = max(len(r[0]) for r in rows)
    print(f"{'measure':<{width}}  {'value':>16}  target")
    for name, value, target in rows:
        print(f"{name:<{width}}  {value:>16}  {target}")
    print(f"batches: {', '.join(f'{v:.2f}' for v in per_request)} ms; {args.batch} requests each; "
          f"request body {len(body)} bytes")
    missed = cpu_ms > CPU_TARGET_MS or complete < args.streams
    if missed:
        print("target missed")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
