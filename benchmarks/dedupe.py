"""Benchmark `clean.dedupe` on templated text, where near-duplicate search used to be quadratic.

Inputs (generated, deterministic)
    * ``paragraphs``  5000 paragraphs in one text (about 350 KB), from two sentence templates whose
      slots (names, cities, states, numbers) take a few values each. Every word bigram is shared
      by hundreds of paragraphs, so every pair looks like a candidate; pairs that differ in one slot
      are just under the threshold (short template) or just over it (long template).
    * ``files``       a folder of 5000 small files (``compactor-run generic DIR``): a boilerplate
      paragraph with two slots varied (one or two slots apart: around the threshold) and a line of
      its own from another template.
    * ``paragraphs-zh`` 3000 templated Chinese paragraphs (every character a word; numbers in
      Chinese numerals, see `_zh_number`).

What is measured
    1. The ``clean.dedupe`` step alone, CPU seconds (``time.process_time``), median of ``--repeat``
       interleaved runs of two contestants on the same sources: ``exact`` (the index without
       bounds, as before the fix: every candidate of the prefix filter compared) and ``bounded``
       (the shipped defaults). Beside each: Jaccard comparisons, paragraphs dropped (exact / near)
       and lookups that hit a bound.
    2. The whole ``compactor-run generic`` on the paragraphs file and on the folder, in a fresh
       interpreter each run: CPU seconds of the child (user + system, ``RUSAGE_CHILDREN``), median
       of ``--repeat``, interleaved, for ``exact`` (the index's bounds lifted in that interpreter)
       and ``bounded``. The target is under 5 s.

Usage::

    python benchmarks/dedupe.py [--count 5000] [--repeat 3] [--skip-cli]
"""

from __future__ import annotations

import argparse
import random
import resource
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from measure import cpu_time, median, print_environment

from compactor.document import Context, Source
from compactor.formats.records import read_paths
from compactor.plugins.clean import DedupeCleaner, normalize_text
from compactor.run import Run, StepRecord
from compactor.text import similarity as textsim
from compactor.text.tokens import get_counter

NAMES = ["Alice", "Bob", "Carol", "Dave", "Erin", "Frank", "Grace", "Heidi", "Ivan", "Judy", "Mallory",
         "Olivia"]
CITIES = ["Paris", "Berlin", "Madrid", "Rome", "Vienna", "Prague", "Oslo", "Lisbon"]
STATES = ["open", "closed", "pending", "late", "new", "stale"]
ZH_NAMES = ["张伟", "王芳", "李娜", "刘洋", "陈静", "杨帆", "赵磊", "黄丽"]
ZH_CITIES = ["北京", "上海", "广州", "深圳", "成都", "杭州", "武汉", "西安"]


def templated_paragraphs(count: int = 5000, seed: int = 1) -> list[str]:
    """Paragraphs of two templates with a few values per slot (see the module docstring)."""
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        if rng.random() < 0.8:  # 14 words: one slot apart is Jaccard 11/15, under 0.75
            out.append(f"Ticket {rng.randint(1, 60)} from {rng.choice(NAMES)} in {rng.choice(CITIES)} is "
                       f"{rng.choice(STATES)} and waits {rng.randint(1, 9)} days for review.")
        else:  # 24 words: one slot apart is over 0.75, two slots apart under
            out.append(f"The weekly report for {rng.choice(CITIES)} says that {rng.choice(NAMES)} closed "
                       f"{rng.randint(1, 40)} tickets and that the queue is {rng.choice(STATES)} again "
                       f"after {rng.randint(1, 9)} days of work.")
    return out


def templated_files(folder: Path, count: int = 5000, seed: int = 2) -> Path:
    """`count` small text files in `folder`: varied boilerplate plus a line of their own."""
    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(count):
        head = (f"This report was exported by {rng.choice(NAMES)} on day {rng.randint(1, 28)} from the "
                f"{rng.choice(CITIES)} office. It is regenerated every night, and edits made by hand are "
                "lost at the next run.")
        line = (f"{rng.choice(NAMES)} in {rng.choice(CITIES)} scored {rng.randint(1, 60)} points on day "
                f"{rng.randint(1, 28)} of round {rng.randint(1, 9)}.")
        (folder / f"record-{i:05d}.txt").write_text(f"{head}\n\n{line}\n", encoding="utf-8")
    return folder


def _zh_number(n: int) -> str:
    """1-99 in Chinese numerals: Arabic digits would join the next Han characters into one word."""
    digits = "零一二三四五六七八九"
    tens, ones = divmod(n, 10)
    return (("" if tens < 2 else digits[tens]) + "十" if tens else "") + (digits[ones] if ones else "")


def templated_chinese(count: int = 3000, seed: int = 3) -> list[str]:
    """Chinese paragraphs of one template (every character is a word)."""
    rng = random.Random(seed)
    return [f"{rng.choice(ZH_NAMES)}在{rng.choice(ZH_CITIES)}的第{_zh_number(rng.randint(1, 30))}号仓库清点了"
            f"{_zh_number(rng.randint(1, 60))}箱货物，其中{_zh_number(rng.randint(1, 9))}箱需要退回，"
            "结果将在下周一的例会上通报。"  # 40 characters and more (clean.dedupe's min_chars)
            for _ in range(count)]


class _Unbounded(textsim.JaccardIndex):
    """The index as it was before the bounds: every candidate compared."""

    def __init__(self, threshold: float, frequency: Any = None) -> None:
        super().__init__(threshold, frequency, max_postings=None, max_checks=None)


def dedupe_once(sources: tuple[Source, ...], exact: bool) -> dict[str, Any]:
    """One run of the step; returns its report details."""
    run = Run(get_counter("cl100k_base"))
    run.step = StepRecord(0, "clean.dedupe", "clean")
    shipped = textsim.JaccardIndex
    if exact:
        textsim.JaccardIndex = _Unbounded  # type: ignore[misc]
    try:
        DedupeCleaner().compactor_clean(Context(sources=sources), run)
    finally:
        textsim.JaccardIndex = shipped  # type: ignore[misc]
    return dict(run.step.details)


def step_table(cases: dict[str, tuple[Source, ...]], repeat: int) -> None:
    print(f"\n1. clean.dedupe alone: CPU seconds, median of {repeat} interleaved runs")
    print(f"{'input':<15}{'sources':>8}{'KB':>7}  {'contestant':<9}{'CPU s':>8}{'comparisons':>13}"
          f"{'exact':>7}{'near':>6}{'capped':>8}")
    for name, sources in cases.items():
        size = sum(len(s.text.encode("utf-8")) for s in sources) // 1000
        times: dict[str, list[float]] = {"exact": [], "bounded": []}
        notes: dict[str, dict[str, Any]] = {}
        for round_index in range(repeat):
            order = ["exact", "bounded"] if round_index % 2 == 0 else ["bounded", "exact"]
            for contestant in order:
                seconds, details = cpu_time(
                    lambda c=contestant, s=sources: dedupe_once(s, c == "exact"))
                times[contestant].append(seconds)
                notes[contestant] = details
        for contestant in ("exact", "bounded"):
            d = notes[contestant]
            print(f"{name:<15}{len(sources):>8}{size:>7}  {contestant:<9}{median(times[contestant]):>8.2f}"
                  f"{d['comparisons']:>13,}{d['dropped_exact']:>7}{d['dropped_near']:>6}"
                  f"{d.get('capped', 0):>8}")


_CLI = """
import sys
from compactor.text import similarity as textsim
if sys.argv.pop(1) == "exact":
    shipped = textsim.JaccardIndex
    class Unbounded(shipped):
        def __init__(self, threshold, frequency=None):
            super().__init__(threshold, frequency, max_postings=None, max_checks=None)
    textsim.JaccardIndex = Unbounded
from compactor.ops.cli import main
sys.argv[0] = "compactor-run"
main()
"""


def cli_cpu(contestant: str, *args: str) -> float:
    """CPU seconds (user + system) of one `compactor-run` in a fresh interpreter."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run([sys.executable, "-c", _CLI, contestant, *args], capture_output=True, check=False)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"compactor-run {' '.join(args)} failed: {done.stderr.decode()[-400:]}")
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def cli_table(cases: dict[str, Path], repeat: int) -> None:
    print(f"\n2. compactor-run generic INPUT (whole run, fresh interpreter): CPU seconds, median of {repeat}")
    print(f"{'input':<15}{'exact':>9}{'bounded':>9}   target")
    for name, path in cases.items():
        times: dict[str, list[float]] = {"exact": [], "bounded": []}
        for round_index in range(repeat):
            order = ["exact", "bounded"] if round_index % 2 == 0 else ["bounded", "exact"]
            for contestant in order:
                times[contestant].append(cli_cpu(contestant, "generic", str(path)))
        bounded = median(times["bounded"])
        print(f"{name:<15}{median(times['exact']):>9.2f}{bounded:>9.2f}   under 5 s: "
              f"{'yes' if bounded < 5 else 'NO'}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--count", type=int, default=5000, help="paragraphs and files (default 5000)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--skip-cli", action="store_true", help="only the step, not compactor-run")
    args = parser.parse_args(argv)
    print_environment()
    with tempfile.TemporaryDirectory() as tmp:
        paragraphs = Path(tmp) / "paragraphs.txt"
        paragraphs.write_text("\n\n".join(templated_paragraphs(args.count)) + "\n", encoding="utf-8")
        folder = templated_files(Path(tmp) / "files", args.count)
        chinese = "\n\n".join(templated_chinese(args.count * 3 // 5))
        read: Callable[[Path], tuple[Source, ...]] = lambda path: tuple(  # noqa: E731
            s.with_text(normalize_text(s.text)) for s in read_paths([str(path)]))
        step_table({"paragraphs": read(paragraphs), "files": read(folder),
                    "paragraphs-zh": (Source.from_text(normalize_text(chinese)),)}, args.repeat)
        if not args.skip_cli:
            cli_table({"paragraphs": paragraphs, "files": folder}, args.repeat)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
