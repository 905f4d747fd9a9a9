"""Progress on stderr for long work, drawn by tqdm on a terminal and as plain lines anywhere else.

A single run shows its pipeline steps once it has taken `START_AFTER` seconds, so quick runs print
nothing. A batch shows documents done of the corpus's total, the rate in documents/s and MB/s and the
time left. The rates count only the documents this run computed: the ones a resumed run skips
(already in `--out`) move the count on but take no time, so counting them would inflate the rate.
On a terminal the line is redrawn in place; in a log file or CI a plain line is written at most
every `PLAIN_EVERY` seconds or `PLAIN_SHARE` of the total, never a carriage return.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any, TextIO

NO_PROGRESS_ENV = "COMPACTOR_NO_PROGRESS"
START_AFTER = 2.0  # seconds a single run takes before it shows progress
PLAIN_EVERY = 10.0  # seconds between two plain lines at most
PLAIN_SHARE = 0.10  # or this share of the total, whichever comes first
TICK = 0.5  # how often a long step's elapsed time is redrawn


def wanted(stream: TextIO, quiet: bool = False, no_progress: bool = False) -> bool:
    """Whether progress goes to `stream`: not with --quiet, --no-progress or COMPACTOR_NO_PROGRESS set
    (to anything but empty or 0)."""
    off = os.environ.get(NO_PROGRESS_ENV, "").strip() not in ("", "0")
    return not (quiet or no_progress or off)


def is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a closed or unusual stream
        return False


def _tqdm() -> Any:
    """tqdm's class, imported when progress is first shown (it has no type stubs)."""
    from tqdm import tqdm  # type: ignore[import-untyped, unused-ignore]

    return tqdm


def _bar(stream: TextIO, **kwargs: Any) -> Any:
    """A tqdm bar as wide as the terminal, or 80x24 when it has no size (a bare pseudo-terminal, whose
    size tqdm reads as -1 rows and then draws nothing); without tqdm's monitor thread (it only retunes
    `miniters`; a thread left running after a run in an embedding process is worse)."""
    tqdm = _tqdm()
    tqdm.monitor_interval = 0
    try:
        sized = os.get_terminal_size(stream.fileno()).columns > 0
    except (AttributeError, OSError, ValueError):
        sized = False
    width: dict[str, Any] = {"dynamic_ncols": True} if sized else {"ncols": 80, "nrows": 24}
    return tqdm(file=stream, **width, **kwargs)


def _clock(seconds: float) -> str:
    return str(_tqdm().format_interval(seconds))


class StepProgress:
    """`Pipeline.run(progress=...)`: which step of how many, after `delay` seconds. A thread redraws
    the elapsed time while one long step (an LLM call) runs; `close` stops it."""

    def __init__(self, stream: TextIO, *, delay: float = START_AFTER, every: float = PLAIN_EVERY,
                 terminal: bool | None = None) -> None:
        self.stream = stream
        self.delay = delay
        self.every = every
        self.terminal = is_terminal(stream) if terminal is None else terminal
        self.started = time.monotonic()
        self.position, self.total, self.label = 0, 0, ""
        self.last_line = float("-inf")
        self.shown = False
        self.bar: Any = None
        if self.terminal:  # made now so its clock starts with the run; tqdm draws nothing before `delay`
            self.bar = _bar(stream, total=None, desc="compactor-run", unit="step", leave=False, delay=delay,
                            bar_format="{desc}: step {n_fmt}/{total_fmt} |{bar}| {elapsed}{postfix}")
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.ticker = threading.Thread(target=self._tick, name="compactor-progress", daemon=True)
        self.ticker.start()

    def __call__(self, position: int, total: int, label: str) -> None:
        with self.lock:
            self.position, self.total, self.label = position, total, label
            self._draw()

    def _tick(self) -> None:
        while not self.stop.wait(TICK):
            with self.lock:
                self._draw()

    def _draw(self) -> None:
        elapsed = time.monotonic() - self.started
        if elapsed < self.delay or not self.total:
            return
        if self.bar is not None:
            self.bar.total = self.total
            self.bar.n = self.position
            self.bar.set_postfix_str(self.label, refresh=False)
            self.bar.refresh()
            # drawn outside `update`: tell tqdm, so `close` clears the line it is on
            self.bar.last_print_n, self.bar.last_print_t = self.bar.n, self.bar._time()
            self.shown = True
        elif time.monotonic() - self.last_line >= self.every:
            self.last_line = time.monotonic()
            self.stream.write(f"compactor-run: step {min(self.position + 1, self.total)}/{self.total} "
                              f"{self.label} ({_clock(elapsed)} elapsed)\n")
            self.stream.flush()
            self.shown = True

    def write(self, line: str) -> None:
        """A line (a warning) above the bar, which is cleared first and drawn again after."""
        with self.lock:
            if self.bar is not None and self.shown:
                _tqdm().write(line, file=self.stream)
            else:
                self.stream.write(line + "\n")
                self.stream.flush()

    def close(self) -> None:
        self.stop.set()
        self.ticker.join()
        with self.lock:
            if self.bar is not None:
                self.bar.close()
            elif self.shown:
                self.stream.write(f"compactor-run: done in {_clock(time.monotonic() - self.started)}\n")
                self.stream.flush()


def count_records(path: Path) -> int | None:
    """The number of lines of a corpus file (a record per line; blank lines are rare), read in blocks;
    None for stdin, a FIFO or a device, which cannot be read twice."""
    if str(path) == "-" or not path.is_file():
        return None
    lines, last = 0, b"\n"
    try:
        with path.open("rb") as handle:
            while block := handle.read(1 << 20):
                lines += block.count(b"\n")
                last = block[-1:]
    except OSError:
        return None
    return lines + (last != b"\n")


class BatchProgress:
    """Documents of a batch: `skip` for those already in --out, `done` for those computed now."""

    def __init__(self, stream: TextIO, total: int | None, *, live: bool = True, every: float = PLAIN_EVERY,
                 share: float = PLAIN_SHARE, terminal: bool | None = None) -> None:
        self.stream = stream
        self.live = live  # False: the summary line only
        self.total = total
        self.every = every
        self.share = share
        self.terminal = is_terminal(stream) if terminal is None else terminal
        self.started = time.monotonic()
        self.skipped = 0
        self.computed = 0
        self.failed = 0
        self.bytes = 0
        self.last_line = time.monotonic()
        self.last_share = 0
        self.bar: Any = None
        if self.terminal and live:
            # smoothing 0: tqdm's rate is (n - initial) / elapsed, and skipped documents go to `initial`
            self.bar = _bar(stream, total=total, desc="compactor-run", unit="doc", smoothing=0,
                            mininterval=0.25)

    @property
    def seconds(self) -> float:
        return max(time.monotonic() - self.started, 1e-9)

    def skip(self) -> None:
        """One document already written by an earlier run: counted, but not into the rates."""
        self.skipped += 1
        if self.bar is not None:
            self.bar.initial += 1
            self.bar.update(1)
        else:
            self._plain()

    def done(self, size: int, ok: bool) -> None:
        """One document computed by this run, `size` bytes of the corpus."""
        self.computed += 1
        self.bytes += size
        self.failed += not ok
        if self.bar is not None:
            self.bar.set_postfix_str(self._postfix(), refresh=False)
            self.bar.update(1)
        else:
            self._plain()

    def _postfix(self) -> str:
        failed = f", {self.failed} failed" if self.failed else ""
        return f"{self.bytes / 1e6 / self.seconds:.2f} MB/s{failed}"

    def rate(self) -> float:
        """Documents per second computed by this run."""
        return self.computed / self.seconds

    def line(self) -> str:
        """The plain progress line: position, rates of this run's work, time left."""
        position = self.computed + self.skipped
        rate = self.rate()
        if self.total:
            left = max(self.total - position, 0)
            eta = _clock(left / rate) if rate > 0 else "?"
            head = f"{position}/{self.total} documents ({100 * position / self.total:.0f}%)"
            tail = f", ETA {eta}"
        else:
            head, tail = f"{position} documents", ""
        skipped = f", {self.skipped} skipped" if self.skipped else ""
        return (f"compactor-run: {head}{skipped}, {rate:.1f} docs/s, {self._postfix()}, "
                f"{_clock(self.seconds)} elapsed{tail}")

    def _plain(self) -> None:
        if not self.live:
            return
        now = time.monotonic()
        position = self.computed + self.skipped
        share = int(position / self.total / self.share) if self.total else 0
        if now - self.last_line >= self.every or share > self.last_share:
            self.last_line, self.last_share = now, share
            self.stream.write(self.line() + "\n")
            self.stream.flush()

    def close(self, interrupted: bool = False, summary: bool = True) -> None:
        """The bar left at its last state, then a summary line (not after a failure, whose error
        is the last word)."""
        if self.bar is not None:
            if not interrupted and self.bar.n < (self.bar.total or 0):
                self.bar.total = self.bar.n  # blank lines were counted in the total
            self.bar.set_postfix_str(self._postfix(), refresh=False)
            self.bar.close()
        if not summary:
            return
        failed = f" ({self.failed} failed)" if self.failed else ""
        skipped = f", {self.skipped} skipped (already in the output)" if self.skipped else ""
        self.stream.write(f"compactor-run: {self.computed} done{failed}{skipped} in {_clock(self.seconds)}, "
                          f"{self.rate():.1f} docs/s, {self.bytes / 1e6 / self.seconds:.2f} MB/s\n")
        self.stream.flush()
