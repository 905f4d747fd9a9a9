"""Benchmark the speed of history compaction: a 200k-token history to 8000 tokens, against counting it.

The time target: `compactor.compact_messages(history, 8000)` on a history of at least 200k
tokens takes at most 3x the CPU time of `compactor.count_message_tokens(history)`, both measured cold
(every compactor functools cache cleared before each call, then an untimed warm-up on five unrelated
messages: `measure.cold`), CPU time (`time.process_time`), medians of 5 runs, the two run interleaved
(`measure.interleaved`, the order rotated every round). The histories:

* ``swe`` (the target): mini-swe-agent runs (``agent-trajectories-mini-swe-agent-swebench``) appended,
  longest first, each without its system prompt, until the history holds 200k tokens, as
  ``benchmarks/conversation.py``'s `long_history` builds it;
* ``tau``: tau-bench airline conversations (``agent-trajectories-tau-bench``) appended the same way: a
  tool-calling agent with many small JSON results;
* ``chat``: QMSum meetings (``meeting-transcripts-qmsum``) appended, one message per turn (the chair as
  a named assistant, everyone else a named user): many short turns between people.

Run: ``python benchmarks/conversation_speed.py`` (``--only swe,tau``, ``--runs N``, ``--tokens N``,
``--profile NAME``: a cProfile of one cold compaction of that history instead of the timing;
``--dump PATH``: the outputs on tau-bench and SWE histories at 10 % and 20 % and on the long
histories, as JSONL, to diff two checkouts: a speed-up must not change them).
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import re
import statistics
import sys
import unicodedata
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from conversation import long_history, warm
from evaldata import eval_dir, read_jsonl
from measure import clear_caches, cold, interleaved, print_environment

import compactor

TARGET_RATIO = 3.0
BUDGET = 8000
# -- histories -------------------------------------------------------------------------------------


def appended(conversations: Sequence[list[dict[str, Any]]], tokens: int) -> list[dict[str, Any]]:
    """The first conversation whole, then the others without their system messages, until `tokens`."""
    history = list(conversations[0])
    for messages in conversations[1:]:
        if compactor.count_message_tokens(history) >= tokens:
            break
        history.extend(m for m in messages if m.get("role") != "system")
    return history


def swe_history(tokens: int) -> list[dict[str, Any]]:
    """mini-swe-agent runs, longest first (`benchmarks/conversation.py`'s `long_history`)."""
    return long_history(tokens)


def tau_history(tokens: int) -> list[dict[str, Any]]:
    """tau-bench airline conversations in file order: tool calls with many small JSON results."""
    rows = read_jsonl(eval_dir() / "agent-trajectories-tau-bench" / "conversations.jsonl")
    return appended([row["messages"] for row in rows], tokens)


_DISFLUENCY = re.compile(r"\{[a-z_]+\}")


def _name(speaker: str) -> str:
    plain = "".join(c for c in unicodedata.normalize("NFKD", speaker) if not unicodedata.combining(c))
    return re.sub(r"[^A-Za-z0-9_-]+", "_", plain).strip("_")[:64] or "speaker"


def meetings() -> list[list[dict[str, Any]]]:
    """QMSum meetings as message lists: one message per turn, the chair as the named assistant."""
    found = []
    for meeting in read_jsonl(eval_dir() / "meeting-transcripts-qmsum" / "test.jsonl"):
        turns = [(u["speaker"], " ".join(_DISFLUENCY.sub(" ", u["content"]).split()))
                 for u in meeting["meeting_transcripts"]]
        turns = [t for t in turns if t[1]]
        chair = Counter(s for s, _ in turns).most_common(1)[0][0]
        found.append([{"role": "assistant" if s == chair else "user", "name": _name(s), "content": text}
                      for s, text in turns])
    return found


def chat_history(tokens: int) -> list[dict[str, Any]]:
    """QMSum meetings appended: many short turns between people."""
    return appended(meetings(), tokens)


HISTORIES: dict[str, Callable[[int], list[dict[str, Any]]]] = {
    "swe": swe_history, "tau": tau_history, "chat": chat_history}


# -- measuring -------------------------------------------------------------------------------------


def time_one(name: str, history: list[dict[str, Any]], runs: int) -> bool:
    tokens = compactor.count_message_tokens(history)
    times = interleaved({"compact": lambda: compactor.compact_messages(history, BUDGET),
                         "count": lambda: compactor.count_message_tokens(history)}, runs,
                        before=cold((), warm))
    out = compactor.compact_messages(history, BUDGET)
    assert compactor.count_message_tokens(out) <= BUDGET, "the compacted history is over budget"
    compact_ms = 1000 * statistics.median(times["compact"])
    count_ms = 1000 * statistics.median(times["count"])
    ratio = compact_ms / count_ms
    ok = ratio <= TARGET_RATIO
    print(f"{name:<5} {tokens:>8,} {len(history):>6} {count_ms:>9.0f} {compact_ms:>11.0f} {ratio:>6.2f}x "
          f"{TARGET_RATIO:>5.0f}x  {'PASS' if ok else 'FAIL'}  (kind {out.report.get('kind')})", flush=True)
    return ok


def profile(history: list[dict[str, Any]], rows: int = 45) -> None:
    """cProfile of one cold compaction (caches cleared, warm-up untimed)."""
    clear_caches()
    warm()
    profiler = cProfile.Profile()
    profiler.enable()
    compactor.compact_messages(history, BUDGET)
    profiler.disable()
    stats = pstats.Stats(profiler)
    stats.sort_stats("cumulative").print_stats(rows)
    stats.sort_stats("tottime").print_stats(rows)


def dump(path: str) -> None:
    """Write every output of the behaviour check to `path` (JSONL, one line per history and share), so
    two checkouts can be diffed: tau-bench and SWE histories and 8 QMSum meetings at 10 % and 20 % of their
    tokens (the system prompt on top), and the three long histories at 8000 tokens."""
    import json

    cases: list[tuple[str, list[dict[str, Any]]]] = []
    for row in read_jsonl(eval_dir() / "agent-trajectories-tau-bench" / "conversations.jsonl"):
        cases.append((row["id"], row["messages"]))
    for folder in ("agent-trajectories-mini-swe-agent-swebench", "agent-trajectories-swe-agent"):
        for row in read_jsonl(eval_dir() / folder / "conversations.jsonl"):
            cases.append((f"{folder}/{row['id']}", row["messages"]))
    cases.extend((f"qmsum/{n}", meeting) for n, meeting in enumerate(meetings()[:8]))
    with open(path, "w", encoding="utf-8") as handle:
        for name, messages in cases:
            total = compactor.count_message_tokens(messages)
            prompt = [m for m in messages if m.get("role") == "system"]
            system = compactor.count_message_tokens(prompt) if prompt else 0
            for share in (0.1, 0.2):  # the system prompt on top of the share (conversation.py's budget_for)
                budget = system + max(64, int(share * (total - system)))
                try:
                    out = compactor.compact_messages(messages, budget)
                except compactor.BudgetError as exc:
                    record: dict[str, Any] = {"error": str(exc)}
                else:
                    report = {k: v for k, v in out.report.items() if k != "steps"}
                    record = {"messages": list(out), "report": report}
                handle.write(json.dumps({"case": name, "share": share, **record}, ensure_ascii=False,
                                        sort_keys=True, default=str) + "\n")
        for name, build in HISTORIES.items():
            out = compactor.compact_messages(build(200_000), BUDGET)
            report = {k: v for k, v in out.report.items() if k != "steps"}
            handle.write(json.dumps({"case": f"long-{name}", "messages": list(out), "report": report},
                                    ensure_ascii=False, sort_keys=True, default=str) + "\n")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--only", default=",".join(HISTORIES), help="histories: swe, tau, chat")
    parser.add_argument("--runs", type=int, default=5, help="timed runs of each (medians)")
    parser.add_argument("--tokens", type=int, default=200_000, help="size of each history")
    parser.add_argument("--profile", choices=list(HISTORIES), help="profile one compaction instead")
    parser.add_argument("--dump", metavar="PATH", help="write the behaviour check's outputs to PATH")
    args = parser.parse_args(argv)
    if args.dump:
        dump(args.dump)
        return 0
    if args.profile:
        profile(HISTORIES[args.profile](args.tokens))
        return 0
    print_environment()
    names = [n.strip() for n in args.only.split(",") if n.strip()]
    print(f"\n{args.tokens:,}-token histories to {BUDGET} tokens; CPU medians of {args.runs} interleaved "
          "runs, cold caches\n")
    print(f"{'set':<5} {'tokens':>8} {'msgs':>6} {'count ms':>9} {'compact ms':>11} {'ratio':>7} "
          f"{'target':>6}")
    verdicts = [time_one(name, HISTORIES[name](args.tokens), args.runs) for name in names]
    return 0 if all(verdicts) else 1


if __name__ == "__main__":
    raise SystemExit(main())
