"""Where the benchmarks find ../shared/eval, and how they read its JSONL files."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent


def eval_dir() -> Path:
    """The shared evaluation data folder (`$COMPACTOR_EVAL_DIR`, else ../shared/eval)."""
    env = os.environ.get("COMPACTOR_EVAL_DIR")
    return Path(env) if env else REPO_ROOT.parent / "shared" / "eval"


def read_jsonl(path: Path) -> Iterator[dict[str, Any]]:
    """The records of a JSONL file, skipping blank lines."""
    with path.open(encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                yield json.loads(line)
