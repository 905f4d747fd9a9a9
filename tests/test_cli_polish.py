"""What a user notices at the command line: versions, help, usage errors with exit 2 and one
clear message (never `<string>:` or `internal error`), file modes, budgets too small, input a
pipeline cannot use."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

import compactor

from .helpers import REPO, run_cli

TEXT = "Paris is the capital of France. It has many museums.\n\nThe Louvre is the largest one.\n"
PAGE = REPO / "examples" / "page.html"


def _one_clear_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    assert "<string>" not in stderr and "internal error" not in stderr and "Traceback" not in stderr
    return lines[0]


def test_version_and_help_list_the_shipped_pipelines() -> None:
    result = run_cli("--version")
    assert result.returncode == 0 and compactor.__version__ in result.stdout
    result = run_cli("--help")
    assert result.returncode == 0
    help_text = " ".join(result.stdout.split())
    for name in ("generic", "qa", "deep-search", "conversation", "transcripts", "topics"):
        assert name in help_text


@pytest.mark.parametrize(("args", "needle"), [
    (("generic", "{text}", "--budget", "0"), "--budget must be a positive"),
    (("generic", "{text}", "-o", "/nonexistent/dir/out.txt"), "does not exist"),
    (("generic", "{text}", "--report", "/nonexistent/dir/r.json"), "does not exist"),
    (("qa", "{text}", "--budget", "1"), "too small for any output"),
    (("topics", "{text}", "--budget", "5"), "too small"),
    (("transcripts", "{page}"), "needs transcript segments"),
    (("transcripts", "{text}"), "needs transcript segments"),
])
def test_usage_errors_exit_2_with_one_clear_message(tmp_path: Path, args: tuple[str, ...],
                                                      needle: str) -> None:
    text = tmp_path / "notes.txt"
    text.write_text(TEXT, encoding="utf-8")
    result = run_cli(*(a.format(text=text, page=PAGE) for a in args))
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert needle in _one_clear_line(result.stderr)
    assert result.stdout == ""


def test_small_budgets_that_can_hold_output_still_work(tmp_path: Path) -> None:
    text = tmp_path / "notes.txt"
    text.write_text(TEXT, encoding="utf-8")
    result = run_cli("topics", str(text), "--budget", "50")
    assert result.returncode == 0, result.stderr
    assert "[^1]" in result.stdout and ("Louvre" in result.stdout or "Paris" in result.stdout)


def test_written_files_keep_the_target_mode_or_take_the_umask(tmp_path: Path) -> None:
    text = tmp_path / "notes.txt"
    text.write_text(TEXT, encoding="utf-8")
    out = tmp_path / "out.txt"
    result = run_cli("generic", str(text), "-o", str(out))
    assert result.returncode == 0, result.stderr
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(out.stat().st_mode) == 0o666 & ~umask
    out.chmod(0o640)
    report = tmp_path / "report.json"
    report.write_text("{}", encoding="utf-8")
    report.chmod(0o644)
    result = run_cli("generic", str(text), "-o", str(out), "--report", str(report))
    assert result.returncode == 0, result.stderr
    assert stat.S_IMODE(out.stat().st_mode) == 0o640
    assert stat.S_IMODE(report.stat().st_mode) == 0o644
    assert "Paris" in out.read_text(encoding="utf-8")



def test_cli_help_and_version_answer_without_loading_the_pipelines() -> None:
    code = ("import sys\nfrom compactor.ops.cli_parser import run\n"
            "try:\n    run(['--version'])\nexcept SystemExit:\n    pass\n"
            "print('compactor.pipeline' in sys.modules, 'compactor.apps.compacter' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip().endswith("False False"), done.stdout
    assert "compactor-run" in done.stdout
