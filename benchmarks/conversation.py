"""Benchmark history compaction: `compactor.compact_messages` against two baselines on agent runs.

What is measured
    Each history is compacted to a budget of 10 % and 20 % of its tokens. Tokens follow OpenAI's
    per-message accounting (`compactor.count_message_tokens`, cl100k); the system prompt (a
    constant that every method keeps verbatim) is added on top of the share, so the budget is
    `system + 3 + max(64, share x rest)` (64: room for at least a one-line summary). Every output
    is checked: at most the budget, no tool result
    without its call, no call without its results.

    Two protocols:

    * ``cut`` (the target): compaction happens mid-run, just before the agent must act on what it
      learnt. tau-bench: the history up to (not including) the first assistant message that calls a
      gold action's tool (the whole run if it never does). SWE-agent / mini-swe-agent: the history
      up to (not including) the final submit turn, whose output is the patch itself.
    * ``full``: the whole recorded run, for reference. Here the last message of a mini-swe-agent run
      *is* the final diff, so keeping the last messages is enough to name the patch files.

    Histories whose cut part has fewer than 1,000 non-system tokens are left out (tau-bench runs in
    which the agent acts after two or three messages): a 10 % budget of them is smaller than one
    message, and no agent compacts them.

    Measures:

    * tau-bench ``args``: of the gold actions' argument values (strings of 3+ characters and
      numbers >= 10: reservation ids, flight numbers, dates, payment ids, amounts) that occur in the
      history but not in the system prompt, the share still present in the compacted messages
      (content and tool-call arguments; numbers as whole numbers).
    * SWE ``files``: of the files in the final patch (mini-swe-agent: `submission_patch`; SWE-agent:
      the `diff --git` headers in its history, when there are any) that the history names, the share
      the compacted messages still name (by file name, at a word boundary).
    * ``instr``: the mean share of each real user message's distinct content words (4+ letters)
      still present (tool output sent with role `user` is not a user message).
    * CPU time per conversation (``time.process_time``; median and p95, ms; the methods take turns,
      order rotated per call), and one 50k-token history compacted rule-only (median of 5 runs,
      compactor's caches emptied before each, see ``measure.py``).

    Methods (all see the same messages and budget):

    * ``compactor``  `compact_messages(messages, budget, keep_last=4)`, rules only;
    * ``last``       LangChain `trim_messages`-style: the system message, then the most recent
      messages that fit, starting on a user message (`strategy="last", include_system=True,
      start_on="human"`);
    * ``headtail``   the system message, the leading messages that fit in half the rest, and the
      most recent messages that fit in what is left (never starting on a tool result).

Targets: ``args`` and ``files`` at 10 % (cut) at least 20 points above the better baseline; the
50k-token history in under 300 ms.

Run: ``python benchmarks/conversation.py`` (``--limit N`` conversations per set, ``--quick``).
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from evaldata import eval_dir, read_jsonl
from measure import cold, interleaved, print_environment

import compactor
from compactor.messages import message_tokens, read_messages, units
from compactor.tokens import get_counter

COUNTER = get_counter("cl100k_base")
#: Histories (after the cut) with fewer non-system tokens are left out: nobody compacts them, and a
#: 10% budget of them is smaller than one message.
MIN_HISTORY = 1000
Method = Callable[[list[dict[str, Any]], int], list[dict[str, Any]]]
_OBSERVATION = re.compile(r"^\s*(<returncode>|<output>|\[File: |Observation:|OBSERVATION)|"
                          r"\(Open file: [^\n]*\)\s*\n\(Current directory:|bash-\$\s*$", re.M)
_WORD = re.compile(r"[A-Za-z][A-Za-z_]{3,}")


def history_tokens(messages: Sequence[dict[str, Any]]) -> int:
    """Tokens of the messages other than the system prompt."""
    return sum(c for m, c in zip(messages, costs(messages), strict=True) if m.get("role") != "system")


def costs(messages: Sequence[dict[str, Any]]) -> list[int]:
    return [message_tokens(m, COUNTER) for m in read_messages(list(messages))]


def budget_for(messages: list[dict[str, Any]], share: float) -> int:
    per = costs(messages)
    system = sum(c for m, c in zip(messages, per, strict=True) if m.get("role") == "system")
    return system + 3 + max(64, int(share * (sum(per) - system)))


# -- methods ---------------------------------------------------------------------------------------


def ours(messages: list[dict[str, Any]], budget: int) -> list[dict[str, Any]]:
    return list(compactor.compact_messages(messages, budget, keep_last=4))


def _starts(messages: list[dict[str, Any]]) -> set[int]:
    """Indices where a complete unit starts (a place a kept suffix may begin)."""
    return {u.start for u in units(read_messages(messages)) if u.complete}


def last_fit(messages: list[dict[str, Any]], budget: int) -> list[dict[str, Any]]:
    per = costs(messages)
    system = [i for i, m in enumerate(messages) if m.get("role") == "system"]
    used = 3 + sum(per[i] for i in system)
    kept: list[int] = []
    for i in range(len(messages) - 1, -1, -1):
        if i in system:
            continue
        if used + per[i] > budget:
            break
        kept.insert(0, i)
        used += per[i]
    starts = _starts(messages)
    while kept and not (messages[kept[0]].get("role") == "user" and kept[0] in starts):
        kept.pop(0)
    return [messages[i] for i in system + kept]


def head_tail(messages: list[dict[str, Any]], budget: int) -> list[dict[str, Any]]:
    per = costs(messages)
    starts = _starts(messages)
    system = [i for i, m in enumerate(messages) if m.get("role") == "system"]
    used = 3 + sum(per[i] for i in system)
    half = used + (budget - used) // 2
    head: list[int] = []
    tiles = [u for u in units(read_messages(messages)) if u.start not in system]
    for unit in tiles:
        cost = sum(per[unit.start:unit.end])
        if not unit.complete or used + cost > half:
            break
        head.extend(range(unit.start, unit.end))
        used += cost
    tail: list[int] = []
    for unit in reversed(tiles):
        cost = sum(per[unit.start:unit.end])
        if unit.start in head or not unit.complete or used + cost > budget:
            break
        tail[:0] = range(unit.start, unit.end)
        used += cost
    del starts
    return [messages[i] for i in system + head + tail]


METHODS: dict[str, Method] = {"compactor": ours, "last": last_fit, "headtail": head_tail}


# -- checks and measures ---------------------------------------------------------------------------


def check(out: list[dict[str, Any]], budget: int) -> None:
    tokens = compactor.count_message_tokens(out)
    assert tokens <= budget, f"over budget: {tokens} > {budget}"
    assert all(u.complete for u in units(read_messages(out))), "orphan tool call or result"


def visible(messages: list[dict[str, Any]]) -> str:
    parts = []
    for message in read_messages(messages):
        parts.append(message.content)
        for call in message.tool_calls:
            function = call.get("function") or {}
            parts.append(f"{function.get('name', '')} {function.get('arguments', '')}")
        legacy = message.raw.get("function_call") if message.raw else None
        if isinstance(legacy, dict):
            parts.append(f"{legacy.get('name', '')} {legacy.get('arguments', '')}")
    return "\n".join(parts)


def present(value: str, text: str) -> bool:
    if value.replace(".", "", 1).isdigit():
        return re.search(rf"(?<![\d.]){re.escape(value)}(?![\d])", text) is not None
    return value in text


def gold_values(actions: list[dict[str, Any]]) -> set[str]:
    found: set[str] = set()

    def walk(item: Any) -> None:
        if isinstance(item, dict):
            for value in item.values():
                walk(value)
        elif isinstance(item, list):
            for value in item:
                walk(value)
        elif isinstance(item, bool) or item is None:
            return
        elif isinstance(item, int | float):
            if abs(item) >= 10:
                found.add(str(int(item)) if float(item).is_integer() else str(item))
        elif isinstance(item, str) and len(item) >= 3:
            found.add(item)

    for action in actions:
        walk(action.get("kwargs", {}))
    return found


def user_messages(messages: list[dict[str, Any]]) -> list[str]:
    out = []
    for message in read_messages(messages):
        real = not _OBSERVATION.search(message.content[:4000])
        if message.role == "user" and real and message.content.strip():
            out.append(message.content)
    return out


def instruction_share(originals: list[str], text: str) -> float | None:
    lowered = text.lower()
    shares = []
    for original in originals:
        words = {w.lower() for w in _WORD.findall(original)}
        if words:
            shares.append(sum(w in lowered for w in words) / len(words))
    return statistics.mean(shares) if shares else None


def file_present(path: str, text: str) -> bool:
    name = path.rsplit("/", 1)[-1]
    return re.search(rf"(?<![\w-]){re.escape(name)}(?![\w])", text) is not None


# -- data ------------------------------------------------------------------------------------------


def tau_cases(limit: int | None) -> list[dict[str, Any]]:
    cases = []
    for row in read_jsonl(eval_dir() / "agent-trajectories-tau-bench" / "conversations.jsonl"):
        messages = row["messages"]
        names = {a["name"] for a in row["gold_actions"]}
        cut = next((i for i, m in enumerate(messages) if m.get("role") == "assistant" and any(
            (c.get("function") or {}).get("name") in names for c in m.get("tool_calls") or [])),
            len(messages))
        if history_tokens(messages[:cut]) < MIN_HISTORY:
            continue
        cases.append({"id": row["id"], "full": messages, "cut": messages[:cut],
                      "values": gold_values(row["gold_actions"])})
        if limit and len(cases) >= limit:
            break
    return cases


_SUBMIT = re.compile(r"COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT|^\s*submit\b", re.M)


def swe_cases(limit: int | None) -> list[dict[str, Any]]:
    cases = []
    for folder in ("agent-trajectories-mini-swe-agent-swebench", "agent-trajectories-swe-agent"):
        for taken, row in enumerate(read_jsonl(eval_dir() / folder / "conversations.jsonl"), 1):
            messages = row["messages"]
            patch = row.get("submission_patch") or "\n".join(
                m.get("content") or "" for m in messages if "diff --git" in (m.get("content") or ""))
            files = sorted({line.split(" b/", 1)[-1] for line in patch.splitlines()
                            if line.startswith("diff --git")})
            submit = max((i for i, m in enumerate(messages) if m.get("role") == "assistant"
                          and _SUBMIT.search(_text(m))), default=len(messages))
            cases.append({"id": row["id"], "set": "mini" if "mini" in folder else "swe-agent",
                          "full": messages, "cut": messages[:submit], "files": files})
            if limit and taken >= limit:
                break
    return cases


def _text(message: dict[str, Any]) -> str:
    parts = [message.get("content") or ""]
    for call in message.get("tool_calls") or []:
        parts.append(json.dumps(call.get("function") or {}))
    return "\n".join(p if isinstance(p, str) else json.dumps(p) for p in parts)


# -- running ---------------------------------------------------------------------------------------


_TURN = [0]


def run_case(messages: list[dict[str, Any]], share: float) -> dict[str, tuple[list[dict[str, Any]], float]]:
    budget = budget_for(messages, share)
    results = {}
    names = list(METHODS)
    _TURN[0] += 1
    shift = _TURN[0] % len(names)
    for name in names[shift:] + names[:shift]:
        method = METHODS[name]
        start = time.process_time()
        out = method(messages, budget) if compactor.count_message_tokens(messages) > budget else messages
        seconds = time.process_time() - start
        check(out, budget)
        results[name] = (out, seconds)
    return results


def table(title: str, rows: dict[str, dict[str, list[float]]], measures: Sequence[str]) -> None:
    print(f"\n{title}")
    print(f"{'method':<11}" + "".join(f"{m:>16}" for m in measures))
    for name in METHODS:
        cells = []
        for measure in measures:
            values = rows[name].get(measure, [])
            cells.append(f"{100 * statistics.mean(values):>15.1f}%" if values else f"{'-':>16}")
        print(f"{name:<11}" + "".join(cells))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--limit", type=int, help="conversations per set")
    parser.add_argument("--quick", action="store_true", help="20 tau-bench and 5 per SWE set")
    args = parser.parse_args(argv)
    print_environment()
    limit = 20 if args.quick else args.limit
    tau = tau_cases(limit)
    swe = swe_cases(5 if args.quick else args.limit)
    verdicts: list[tuple[str, bool, str]] = []
    times: list[float] = []
    for protocol in ("cut", "full"):
        for share in (0.10, 0.20):
            rows: dict[str, dict[str, list[float]]] = {name: {} for name in METHODS}
            for case in tau:
                messages = case[protocol]
                history = visible([m for m in messages if m.get("role") != "system"])
                system = visible([m for m in messages if m.get("role") == "system"])
                values = [v for v in case["values"] if present(v, history) and not present(v, system)]
                originals = user_messages(messages)
                for name, (out, seconds) in run_case(messages, share).items():
                    text = visible(out)
                    if values:
                        rows[name].setdefault("tau args", []).append(
                            sum(present(v, text) for v in values) / len(values))
                    share_ = instruction_share(originals, text)
                    if share_ is not None:
                        rows[name].setdefault("tau instr", []).append(share_)
                    if name == "compactor":
                        times.append(seconds)
            for case in swe:
                messages = case[protocol]
                history = visible(messages)
                files = [f for f in case["files"] if file_present(f, history)]
                originals = user_messages(messages)
                for name, (out, seconds) in run_case(messages, share).items():
                    text = visible(out)
                    if files:
                        rows[name].setdefault("swe files", []).append(
                            sum(file_present(f, text) for f in files) / len(files))
                    share_ = instruction_share(originals, text)
                    if share_ is not None:
                        rows[name].setdefault("swe instr", []).append(share_)
                    if name == "compactor":
                        times.append(seconds)
            table(f"{protocol} histories, budget {int(share * 100)}% "
                  f"({len(tau)} tau-bench, {len(swe)} SWE runs)", rows,
                  ("tau args", "tau instr", "swe files", "swe instr"))
            if protocol == "cut" and share == 0.10:
                for measure in ("tau args", "swe files"):
                    ours_ = statistics.mean(rows["compactor"][measure])
                    best = max(statistics.mean(rows[n][measure]) for n in METHODS if n != "compactor")
                    verdicts.append((f"{measure} at 10% (cut): compactor {100 * ours_:.1f} vs best baseline "
                                     f"{100 * best:.1f} (+{100 * (ours_ - best):.1f} points, target +20)",
                                     ours_ - best >= 0.20, ""))
    times_ms = sorted(1000 * t for t in times)
    print(f"\ncompactor CPU time per conversation: median {statistics.median(times_ms):.1f} ms, "
          f"p95 {times_ms[int(0.95 * (len(times_ms) - 1))]:.1f} ms over {len(times_ms)} runs")
    big = fifty_k()
    tokens = compactor.count_message_tokens(big)
    small = [{"role": "system", "content": "You are a careful coding agent."},
             {"role": "user", "content": "Fix the failing test in the parser module, please. " * 12},
             {"role": "assistant", "content": "I read the parser and found an off-by-one error. " * 12},
             {"role": "user", "content": "Thanks. Now run the whole test suite."},
             {"role": "assistant", "content": "All tests pass."}]

    def warm() -> None:  # setup a long-lived process pays once, on unrelated messages
        compactor.compact_messages(small, compactor.count_message_tokens(small) // 2)

    results: list[Any] = []
    runs = interleaved({"compactor": lambda: compactor.compact_messages(big, 8000)}, 5,
                       before=cold((), warm), on_result=lambda _name, out: results.append(out))
    check(list(results[-1]), 8000)
    median = statistics.median(runs["compactor"]) * 1000
    verdicts.append((f"{tokens}-token history to 8000 tokens: median {median:.0f} ms (target 300 ms)",
                     median < 300, ""))
    print()
    for text, ok, _ in verdicts:
        print(f"{'PASS' if ok else 'FAIL'}  {text}")
    return 0


def fifty_k() -> list[dict[str, Any]]:
    """One long coding-agent history of at least 50k tokens (runs of mini-swe-agent appended)."""
    rows = list(read_jsonl(eval_dir() / "agent-trajectories-mini-swe-agent-swebench" / "conversations.jsonl"))
    rows.sort(key=lambda r: -r["chars"])
    history = list(rows[0]["messages"])
    for row in rows[1:]:
        if compactor.count_message_tokens(history) >= 50_000:
            break
        history.extend(m for m in row["messages"][1:])
    return history


if __name__ == "__main__":
    raise SystemExit(main())
