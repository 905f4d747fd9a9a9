"""Shared test helpers: paths, the evaluation data, running the CLI as a user does."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent  # shared data and cases stay here, whatever a test's folder
REPO = TESTS.parent
DATA = TESTS / "data"
CASES = TESTS / "cases"
EVAL = Path(os.environ.get("COMPACTOR_EVAL_DIR", REPO.parent / "shared" / "eval"))


def run_cli(*args: str, stdin: bytes | None = None, env: dict[str, str] | None = None,
            cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run `compactor-run` in a fresh interpreter, exactly as a user would."""
    full_env = {**os.environ, **(env or {})}
    done = subprocess.run(
        [sys.executable, "-m", "compactor.ops.cli", *args],
        input=stdin if stdin is not None else b"",
        capture_output=True, env=full_env, cwd=cwd or REPO, timeout=120,
    )
    return subprocess.CompletedProcess(done.args, done.returncode,
                                       done.stdout.decode("utf-8", "replace"),
                                       done.stderr.decode("utf-8", "replace"))


def write_dist(root: Path, dist: str, module: str, source: str, entry: str | None = None,
               version: str = "1.0") -> None:
    """A throwaway installed distribution: a module plus a `*.dist-info` with entry points."""
    (root / f"{module}.py").write_text(source, encoding="utf-8")
    info = root / f"{dist.replace('-', '_')}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n",
                                   encoding="utf-8")
    (info / "entry_points.txt").write_text(f"[compactor]\n{entry or module} = {module}\n",
                                           encoding="utf-8")


def lead(text: str, budget: int) -> str:
    """The leading sentences of `text` within `budget` cl100k tokens: an honest, if plain, summary
    (what a scripted model answers a map or reduce prompt with)."""
    from compactor.text.sentences import split_sentences
    from compactor.text.tokens import get_counter

    counter = get_counter()
    out: list[str] = []
    for start, end in split_sentences(text):
        sentence = text[start:end].strip()
        if sentence and counter.count(" ".join([*out, sentence])) > budget:
            break
        if sentence:
            out.append(sentence)
    return " ".join(out)


def asked(prompt: str) -> tuple[str, int, bool]:
    """What a shipped English map or reduce prompt asks: (the text it hands over, the budget it asks
    for, whether it merges extracts)."""
    import re

    budget = int(re.search(r"at most (\d+) tokens", prompt).group(1))  # type: ignore[union-attr]
    if "Extracts:\n" in prompt:
        return prompt.split("Extracts:\n", 1)[1].strip(), budget, True
    return prompt.split("Text: '", 1)[1].rsplit("'", 1)[0], budget, False
