"""Inputs are bounded: stdin, files and endless devices are read up to COMPACTOR_MAX_INPUT_BYTES (one
InputError naming the input past it, exit 2), and a pathological single "word" of megabytes is
token-counted in linear time, close to tiktoken's exact count."""

from __future__ import annotations

import base64
import contextlib
import os
import random
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from compactor.errors import InputError
from compactor.formats.records import INPUT_LIMIT_ENV, MAX_INPUT_BYTES, read_paths
from compactor.text.tokens import get_counter

from .helpers import REPO, run_cli

LIMIT = {INPUT_LIMIT_ENV: "1000000"}


def test_an_endless_device_is_refused_at_the_limit() -> None:
    started = time.perf_counter()
    done = run_cli("generic", "/dev/zero", "--budget", "100", env=LIMIT)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == ("compactor-run: error: /dev/zero: the input is larger than 1,000,000 "
                                   f"bytes, the most compactor reads at once (set {INPUT_LIMIT_ENV} "
                                   "to change it)")
    assert time.perf_counter() - started < 20


def test_an_endless_stdin_pipe_is_refused_at_the_limit() -> None:
    process = subprocess.Popen([sys.executable, "-m", "compactor.ops.cli", "generic", "-", "--budget", "100"],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               env={**os.environ, **LIMIT}, cwd=REPO)
    assert process.stdin is not None and process.stderr is not None

    def feed() -> None:  # a generator that never ends: only the reader stopping ends it
        line = b"The pump failed because the valve was closed. " * 100 + b"\n"
        try:
            while True:
                process.stdin.write(line)  # type: ignore[union-attr]
        except (BrokenPipeError, ValueError, OSError):
            pass

    writer = threading.Thread(target=feed, daemon=True)
    writer.start()
    try:
        code = process.wait(timeout=60)
    finally:
        process.kill()
        writer.join(timeout=10)
        with contextlib.suppress(BrokenPipeError):
            process.stdin.close()
    stderr = process.stderr.read().decode()
    process.stderr.close()
    assert process.stdout is not None
    process.stdout.close()
    assert code == 2, stderr
    assert "<stdin>: the input is larger than 1,000,000 bytes" in stderr


def test_the_limit_counts_all_inputs_together(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first, second = tmp_path / "a.txt", tmp_path / "b.txt"
    first.write_text("First file sentence. " * 30_000, encoding="utf-8")  # 630,000 bytes
    second.write_text("Second file sentence. " * 30_000, encoding="utf-8")
    monkeypatch.setenv(INPUT_LIMIT_ENV, "1_000_000")
    assert len(read_paths([first])) == 1
    with pytest.raises(InputError, match=f"^{second}: the input is larger than 1,000,000 bytes"):
        read_paths([first, second])
    with pytest.raises(InputError, match=f"^{second}: the input is larger"):
        read_paths([tmp_path])
    monkeypatch.delenv(INPUT_LIMIT_ENV)
    assert MAX_INPUT_BYTES == 256 * 1024 * 1024
    assert len(read_paths([first, second])) == 2


@pytest.mark.parametrize("value", ["lots", "0", "-5"])
def test_a_bad_limit_is_an_input_error(tmp_path: Path, value: str) -> None:
    page = tmp_path / "p.txt"
    page.write_text("A short page of text.", encoding="utf-8")
    done = run_cli("generic", str(page), env={INPUT_LIMIT_ENV: value})
    assert done.returncode == 2
    assert f"{INPUT_LIMIT_ENV}='{value}': expected a positive whole number of bytes" in done.stderr


# -- one enormous token ----------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["letters", "base64", "spaces"])
def test_two_megabytes_of_one_token_count_in_linear_time(kind: str) -> None:
    counter = get_counter()
    text = {"letters": "a" * 2_000_000, "spaces": " " * 2_000_000,
            "base64": base64.b64encode(random.Random(7).randbytes(1_500_000)).decode()}[kind]
    counter.count("warm up")
    started = time.perf_counter()
    count = counter.count(text)
    elapsed = time.perf_counter() - started
    assert count > 0
    assert elapsed < 1.5, f"{elapsed:.2f} s"  # was 6 s for letters (quadratic: 67 s for 20 MB)


@pytest.mark.parametrize(("text", "tolerance"), [
    ("a" * 100_000, 0.005),
    (base64.b64encode(random.Random(8).randbytes(75_000)).decode(), 0.005),
    (("https://example.org/" + "x" * 30 + "?q=") * 2_000, 0.005),
    ("short words here " * 5_000 + "z" * 50_000 + " tail", 0.005),
    ("." * 100_000, 0.1),  # long punctuation and space tokens: over-counted, never under
])
def test_long_runs_count_close_to_tiktoken(text: str, tolerance: float) -> None:
    counter = get_counter()
    exact = len(counter.encoding.encode_ordinary(text))
    count = counter.count(text)
    assert exact <= count <= exact * (1 + tolerance), (exact, count)
    assert counter.encoding.decode_bytes(counter.encode(text)).decode("utf-8") == text
    assert counter.count_many([text, text]) == [count, count]


def test_ordinary_text_is_counted_exactly() -> None:
    counter = get_counter()
    text = "Electric cars cost 30000 dollars in 2024. 深圳的电动公交车数量达到一万六千辆。 " * 500
    assert counter.count(text) == len(counter.encoding.encode_ordinary(text))
