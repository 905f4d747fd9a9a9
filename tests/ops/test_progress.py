"""Progress of long work: a tqdm bar on a terminal (a real pseudo-terminal here), plain lines in a log,
nothing for quick runs, and rates that count only the documents a run computed."""

from __future__ import annotations

import io
import json
import os
import pty
import re
import subprocess
import sys
import threading
from pathlib import Path

from compactor.ops.batch import run_batch
from compactor.ops.progress import BatchProgress
from compactor.pipeline import read_pipeline_text

from ..helpers import REPO
from ..openai_server import FakeOpenAI, Reply
from ..openai_server import openai_server as openai_server

GENERIC = read_pipeline_text("generic")
TOPICS = ("orbit", "cameras", "fuel", "antenna", "solar panels", "thrusters", "radiation", "landing")


def _corpus(tmp_path: Path, count: int = 40) -> Path:
    path = tmp_path / "corpus.jsonl"
    with path.open("w", encoding="utf-8") as handle:
        for i in range(count):
            text = " ".join(f"Probe {i} report {n}: the {TOPICS[(i + n) % len(TOPICS)]} worked as planned "
                            f"on day {i * 7 + n}." for n in range(12))
            handle.write(json.dumps({"id": f"d{i}", "text": text, "budget": 60}) + "\n")
    return path


def _on_terminal(*args: str) -> tuple[int, str]:
    """compactor-run with stderr a pseudo-terminal (stdout discarded): its exit code and what the
    terminal received."""
    master, slave = pty.openpty()
    process = subprocess.Popen([sys.executable, "-m", "compactor.ops.cli", *args], cwd=REPO,
                               stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=slave)
    os.close(slave)
    received: list[bytes] = []

    def read() -> None:  # drained while the run goes on, so a full terminal buffer never blocks it
        while True:
            try:
                block = os.read(master, 65536)
            except OSError:  # the run closed its end
                return
            if not block:
                return
            received.append(block)

    reader = threading.Thread(target=read)
    reader.start()
    code = process.wait(timeout=120)
    reader.join(timeout=10)
    os.close(master)
    return code, b"".join(received).decode("utf-8", "replace")


def test_a_batch_on_a_terminal_shows_a_bar_with_the_total_rate_and_time_left(tmp_path: Path) -> None:
    code, shown = _on_terminal("generic", str(_corpus(tmp_path)), "--out", str(tmp_path / "out.jsonl"),
                               "--executor", "serial")
    assert code == 0, shown
    assert "\r" in shown  # redrawn in place
    assert re.search(r"\b40/40\b", shown) and "doc/s" in shown and "MB/s" in shown
    assert re.search(r"\d+/40 \[\d\d:\d\d<\d\d:\d\d", shown)  # elapsed<left: the ETA
    assert "compactor-run: 40 done in" in shown


def test_a_batch_logging_to_a_file_writes_plain_bounded_lines(tmp_path: Path) -> None:
    log = tmp_path / "stderr.log"
    with log.open("wb") as sink:
        done = subprocess.run([sys.executable, "-m", "compactor.ops.cli", "generic", str(_corpus(tmp_path)),
                               "--out", str(tmp_path / "out.jsonl"), "--executor", "serial"], cwd=REPO,
                              stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=sink, timeout=120)
    assert done.returncode == 0
    text = log.read_text(encoding="utf-8")
    assert "\r" not in text
    lines = text.splitlines()
    progress = [line for line in lines if " documents (" in line]
    assert 1 <= len(progress) <= 11  # every 10% (or 10 s) at most, not once per document
    assert "40/40 documents (100%)" in progress[-1] and "ETA" in progress[-1] and "docs/s" in progress[-1]
    assert lines[-1].startswith("compactor-run: 40 done in")


def test_no_progress_leaves_the_summary_only(tmp_path: Path) -> None:
    stream = io.StringIO()
    stats = run_batch(*GENERIC, _corpus(tmp_path, 12), tmp_path / "out.jsonl", executor="serial",
                      progress=stream, live=False)
    assert stats.done == 12
    assert stream.getvalue().splitlines() == [stream.getvalue().strip()]
    assert stream.getvalue().startswith("compactor-run: 12 done in")


def test_a_resumed_batch_rates_only_the_documents_it_computed(tmp_path: Path) -> None:
    corpus = _corpus(tmp_path)
    out = tmp_path / "out.jsonl"
    run_batch(*GENERIC, corpus, out, executor="serial")
    out.write_text("".join(out.read_text(encoding="utf-8").splitlines(keepends=True)[:30]), encoding="utf-8")
    stream = io.StringIO()
    stats = run_batch(*GENERIC, corpus, out, executor="serial", progress=stream)
    assert (stats.skipped, stats.done) == (30, 10)
    tail = sum(len(line) for line in corpus.read_bytes().splitlines(keepends=True)[30:])
    assert stats.bytes_done == tail and stats.bytes_in == corpus.stat().st_size
    summary = stream.getvalue().splitlines()[-1]
    assert summary.startswith("compactor-run: 10 done, 30 skipped (already in the output) in ")


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_skipped_documents_move_the_bar_but_not_its_rate() -> None:
    progress = BatchProgress(_Terminal(), total=1000)
    for _ in range(990):
        progress.skip()
    for _ in range(10):
        progress.done(2_000, ok=True)
    shown = progress.bar.format_dict
    assert shown["n"] == 1000 and shown["n"] - shown["initial"] == 10  # tqdm's rate: (n - initial) / t
    assert progress.bytes == 20_000 and progress.computed == 10 and progress.skipped == 990
    assert "1000/1000 documents (100%), 990 skipped" in progress.line()
    progress.close()


def test_a_long_single_run_on_a_terminal_shows_its_steps(tmp_path: Path, openai_server: FakeOpenAI) -> None:
    openai_server.respond = lambda request: Reply(content="ok", delay=2.2)  # a slow model: a long step
    pipeline = tmp_path / "slow.yaml"
    pipeline.write_text(f"""version: 1
name: slow
llm: {{model: m, base_url: "{openai_server.base_url}", api_key: sk-test}}
steps:
  - use: chunk.tokens
    with: {{size: 400, overlap: 40}}
  - use: compress.map_reduce
    with: {{max_tokens: 300, llm: true}}
""", encoding="utf-8")
    text = tmp_path / "long.txt"
    text.write_text("The Orion probe reached orbit in 2031. It carried four cameras. " * 45, encoding="utf-8")
    code, shown = _on_terminal(str(pipeline), str(text), "--query", "cameras")
    assert code == 0, shown
    assert "compactor-run: step 1/3" in shown and "compress.map_reduce" in shown and "\r" in shown


def test_a_quick_single_run_on_a_terminal_prints_no_progress(tmp_path: Path) -> None:
    text = tmp_path / "short.txt"
    text.write_text("The Orion probe reached orbit in 2031. It carried four cameras. " * 5, encoding="utf-8")
    code, shown = _on_terminal("generic", str(text), "--budget", "30")
    assert code == 0 and "step" not in shown and shown == ""
