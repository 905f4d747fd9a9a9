"""`-o`, `--report`, `--metrics-file` and `--out` write into what the user named without replacing it:
a FIFO stays a FIFO (and is read by whoever opened it), /dev/null stays the device, hard links stay
linked, and a folder is refused with exit 2."""

from __future__ import annotations

import json
import os
import stat
import threading
from pathlib import Path

from compactor.ops.cli import write_atomic

from ..helpers import run_cli

TEXT = b"The Orion service handled 1200 requests per hour. The Kestrel cache kept a hit rate of 93%."


def _reader(fifo: Path, into: list[bytes]) -> threading.Thread:
    """A thread that opens the FIFO for reading (unblocking the writer) and keeps what it reads."""
    def read() -> None:
        with fifo.open("rb") as handle:
            into.append(handle.read())

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    return thread


def test_output_and_report_into_fifos_are_read_and_stay_fifos(tmp_path: Path) -> None:
    out, report = tmp_path / "out.fifo", tmp_path / "report.fifo"
    os.mkfifo(out)
    os.mkfifo(report)
    got_out: list[bytes] = []
    got_report: list[bytes] = []
    threads = [_reader(out, got_out), _reader(report, got_report)]
    result = run_cli("generic", "-", "--budget", "50", "-o", str(out), "--report", str(report), stdin=TEXT)
    for thread in threads:
        thread.join(timeout=10)
    assert result.returncode == 0, result.stderr
    assert b"Orion" in got_out[0]
    assert json.loads(got_report[0])["steps"]
    assert stat.S_ISFIFO(out.stat().st_mode) and stat.S_ISFIFO(report.stat().st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.fifo", "report.fifo"]  # no temp files


def test_dev_null_takes_the_output_and_stays_a_device() -> None:
    before = os.stat("/dev/null")
    result = run_cli("generic", "-", "--budget", "50", "-o", "/dev/null", "--report", "/dev/null",
                     stdin=TEXT)
    assert result.returncode == 0, result.stderr
    after = os.stat("/dev/null")
    assert stat.S_ISCHR(after.st_mode) and after.st_ino == before.st_ino and after.st_rdev == before.st_rdev
    assert result.stdout == ""  # the output went to the device, not to stdout


def test_a_hard_linked_output_stays_linked(tmp_path: Path) -> None:
    first, second = tmp_path / "summary.txt", tmp_path / "linked.txt"
    first.write_text("old text\n", encoding="utf-8")
    os.link(first, second)
    inode = first.stat().st_ino
    result = run_cli("generic", "-", "--budget", "50", "-o", str(first), stdin=TEXT)
    assert result.returncode == 0, result.stderr
    assert first.stat().st_ino == second.stat().st_ino == inode and first.stat().st_nlink == 2
    assert "Orion" in second.read_text(encoding="utf-8")
    assert first.read_bytes() == second.read_bytes()


def test_a_single_regular_file_is_still_replaced_atomically(tmp_path: Path) -> None:
    target = tmp_path / "summary.txt"
    target.write_text("old\n", encoding="utf-8")
    target.chmod(0o640)
    inode = target.stat().st_ino
    write_atomic(target, "new\n")
    assert target.read_text(encoding="utf-8") == "new\n"
    assert target.stat().st_ino != inode  # renamed over, not rewritten in place
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    assert [p.name for p in tmp_path.iterdir()] == ["summary.txt"]


def test_a_folder_is_refused_with_exit_2_naming_it(tmp_path: Path) -> None:
    folder = tmp_path / "results"
    folder.mkdir()
    for option in ("-o", "--report", "--metrics-file"):
        result = run_cli("generic", "-", "--budget", "50", option, str(folder), stdin=TEXT)
        assert result.returncode == 2, (option, result.stderr)
        assert str(folder) in result.stderr and "folder" in result.stderr
    assert list(folder.iterdir()) == []


def test_batch_out_into_dev_null_and_a_hard_link(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(json.dumps({"id": 1, "text": TEXT.decode()}) + "\n", encoding="utf-8")
    result = run_cli("generic", str(corpus), "--out", "/dev/null", "--executor", "serial", "--quiet")
    assert result.returncode == 0, result.stderr
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
    out, other = tmp_path / "out.jsonl", tmp_path / "other.jsonl"
    out.touch()
    os.link(out, other)
    result = run_cli("generic", str(corpus), "--out", str(out), "--executor", "serial", "--quiet")
    assert result.returncode == 0, result.stderr
    assert out.stat().st_ino == other.stat().st_ino and json.loads(other.read_text())["id"] == 1


def test_batch_out_into_a_fifo(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"id": i, "text": TEXT.decode()}) + "\n" for i in range(3)),
                      encoding="utf-8")
    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    got: list[bytes] = []
    thread = _reader(fifo, got)
    result = run_cli("generic", str(corpus), "--out", str(fifo), "--executor", "serial", "--quiet")
    thread.join(timeout=10)
    assert result.returncode == 0, result.stderr
    assert [json.loads(line)["id"] for line in got[0].splitlines()] == [0, 1, 2]
    assert stat.S_ISFIFO(fifo.stat().st_mode)
