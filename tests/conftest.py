"""No test leaves a process behind.

Every process the suite starts carries an environment marker, `COMPACTOR_TEST_PROCESS=<session>:<n>`
while test n runs (`<session>` alone while session and module fixtures start theirs), and keeps it
in its children: pool workers, Dask nannies. After each test, processes with that test's marker
still running (after a grace period for ones that are exiting) are killed and the test errors: a
CLI left running by a failed test, or pool workers orphaned by a killed batch run. At the end of the
session the same holds for every marker of the session. The `processes` fixture gives tests the
same view (`tests/ops/test_processes.py`).

Linux only (it reads /proc); elsewhere the checks do nothing.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

MARK = "COMPACTOR_TEST_PROCESS"
SESSION = uuid.uuid4().hex[:12]
GRACE_SECONDS = 5.0
PROC = Path("/proc")
# multiprocessing's helpers live as long as the pytest process that started them
_HELPERS = ("multiprocessing.resource_tracker", "multiprocessing.forkserver")


@dataclass(frozen=True)
class Running:
    pid: int
    ppid: int
    cmdline: str

    def __str__(self) -> str:
        return f"pid {self.pid} (parent {self.ppid}): {self.cmdline[:200]}"


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except OSError:  # gone, or another user's
        return None


def marked(tag: str, *, exact: bool = True) -> list[Running]:
    """Running (not zombie) processes whose environment holds `MARK=tag` (`exact=False`: a marker
    starting with `tag`), other than this one and the multiprocessing helpers of this one."""
    if not PROC.is_dir():
        return []
    needle = f"\0{MARK}={tag}".encode() + (b"\0" if exact else b"")
    found = []
    for entry in PROC.iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        environ = _read(entry / "environ")
        if environ is None or needle not in b"\0" + environ + b"\0":
            continue
        stat = _read(entry / "stat")
        if stat is None:
            continue
        fields = stat.rsplit(b")", 1)[-1].split()
        if fields[0] in (b"Z", b"X"):
            continue
        cmdline = (_read(entry / "cmdline") or b"").replace(b"\0", b" ").decode("utf-8", "replace").strip()
        ppid = int(fields[1])
        if ppid == os.getpid() and any(helper in cmdline for helper in _HELPERS):
            continue
        found.append(Running(int(entry.name), ppid, cmdline))
    return found


def wait_gone(tag: str, seconds: float = GRACE_SECONDS, *, exact: bool = True) -> list[Running]:
    """The processes marked `tag` still running after up to `seconds`."""
    deadline = time.monotonic() + seconds
    while True:
        left = marked(tag, exact=exact)
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.05)


def kill(processes: list[Running]) -> None:
    for process in processes:
        with contextlib.suppress(OSError):
            os.kill(process.pid, signal.SIGKILL)


@dataclass
class Processes:
    """The `processes` fixture: this test's marker, and the processes that carry it."""

    tag: str

    def running(self) -> list[Running]:
        return marked(self.tag)

    def wait_gone(self, seconds: float = GRACE_SECONDS) -> list[Running]:
        return wait_gone(self.tag, seconds)


@pytest.fixture(scope="session", autouse=True)
def _no_process_left_by_the_session() -> Iterator[None]:
    previous = os.environ.get(MARK)
    os.environ[MARK] = SESSION
    yield
    left = wait_gone(SESSION, exact=False)
    kill(left)
    if previous is None:
        os.environ.pop(MARK, None)
    else:
        os.environ[MARK] = previous
    if left:
        pytest.fail("the test session left processes running (killed now):\n" +
                    "\n".join(map(str, left)), pytrace=False)


_count = 0


@pytest.fixture(autouse=True)
def processes(request: pytest.FixtureRequest) -> Iterator[Processes]:
    """Marks what this test starts; errors when any of it is still running after the test."""
    global _count
    _count += 1
    tag = f"{SESSION}:{_count}"
    os.environ[MARK] = tag
    yield Processes(tag)
    os.environ[MARK] = SESSION  # what module fixtures start next is the session's
    left = wait_gone(tag)
    kill(left)
    if left:
        pytest.fail(f"{request.node.nodeid} left processes running (killed now):\n" +
                    "\n".join(map(str, left)), pytrace=False)
