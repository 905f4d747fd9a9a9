"""Benchmark `compact_messages(..., compress_system=True)` on the tau-bench airline runs.

What is measured
    Each whole run (system policy included) is compacted to 50 %, 20 % and 10 % of its tokens
    (OpenAI's per-message accounting, `compactor.count_message_tokens`). Before: the default, which
    raises `BudgetError` when the ~1,250-token policy leaves no room; after: `compress_system=True`.

    * ``errors``: histories that raised `BudgetError` (nothing could be sent);
    * ``args``: the share of the gold actions' argument values still present in the output, as
      ../shared/bench/conv_check.py computes them (scalar values of 3+ characters but a few enum
      words, found as substrings of the messages' content and tool calls), the system message
      included; a history that raised counts as keeping none. ``args (both ran)`` limits it to the
      histories that the default could compact;
    * ``over`` / ``orphans`` / ``first``: outputs over the budget, with a call or result left
      alone, not opening with the system message (each should be 0);
    * ``policy``: for runs whose gold actions name one policy section (book -> "Book flight",
      update_* -> "Modify flight", cancel -> "Cancel flight", send_certificate -> "Refund"), the
      share of that section's characters kept in the shortened system message;
    * CPU time per history (`time.process_time`, median ms), the two settings interleaved, compactor's
      caches emptied before each (then an untimed warm-up on a tiny history, as a long-lived process
      has its pipelines loaded).

PASS when the setting leaves no error, nothing over budget, no orphan and the system message first.

Run: ``python benchmarks/compress_system.py`` (``--limit N`` runs, ``--ratios 0.5 0.2 0.1``).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from conversation import cc_text as text_of  # conv_check.py's text of a message
from evaldata import eval_dir, read_jsonl
from measure import clear_caches, print_environment

import compactor
from compactor.formats.messages import read_messages, units

MIN_BUDGET = 128  # as conv_check.py: below this no compaction is a realistic workload
ENUMS = ("yes", "no", "one_way", "round_trip", "economy", "business", "basic_economy")
SECTIONS = {"book_reservation": "## Book flight", "cancel_reservation": "## Cancel flight",
            "update_reservation_flights": "## Modify flight",
            "update_reservation_baggages": "## Modify flight",
            "update_reservation_passengers": "## Modify flight", "send_certificate": "## Refund"}


def values(obj: Any) -> list[str]:
    """conv_check.py's gold argument values."""
    if isinstance(obj, dict):
        return [v for x in obj.values() for v in values(x)]
    if isinstance(obj, list):
        return [v for x in obj for v in values(x)]
    text = str(obj)
    return [text] if len(text) >= 3 and text not in ENUMS else []


def section_share(policy: str, heading: str, spans: list[list[int]]) -> float:
    start = policy.index(heading) + len(heading)
    end = policy.find("\n## ", start)
    end = end if end > 0 else len(policy)
    wanted = {i for i in range(start, end) if not policy[i].isspace()}
    kept = {i for a, b in spans for i in range(max(a, start), min(b, end)) if not policy[i].isspace()}
    return len(kept) / len(wanted) if wanted else 1.0


WARM_RULES = ("Be brief.", "Answer in English.", "Cite the source of every claim.",
              "Never guess a date.", "Ask before you act on a reservation.", "Refunds take a week.",
              "Pets fly in the hold.", "Lounges open at six.", "Meals are ordered two days ahead.")
WARM = [{"role": "system", "content": " ".join(WARM_RULES * 3)},
        {"role": "user", "content": "When did the pump restart?"},
        {"role": "assistant", "content": "At noon, after the valve was replaced."},
        {"role": "user", "content": "Thanks."}]


def warm_up() -> None:
    """Untimed: load what a long-lived process has loaded (encodings, pipelines)."""
    compactor.compact_messages(WARM, 150, compress_system=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--limit", type=int, help="tau-bench runs (default: all 100)")
    parser.add_argument("--ratios", type=float, nargs="+", default=[0.5, 0.2, 0.1])
    args = parser.parse_args()
    print_environment()
    rows = list(read_jsonl(eval_dir() / "agent-trajectories-tau-bench" / "conversations.jsonl"))[:args.limit]
    print(f"{len(rows)} tau-bench airline runs; budget = ratio x the whole run's tokens, system included\n")
    print("| ratio | setting | errors | args (all) | args (both ran) | over | orphans | first | policy "
          "| ms (median) |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    failures: list[float | None] = []
    for ratio in args.ratios:
        stats: dict[str, dict[str, Any]] = {
            k: {"errors": 0, "kept": 0, "kept_both": 0, "over": 0, "orphans": 0, "first": 0, "policy": [],
                "ms": []} for k in ("before", "after")}
        total = total_both = ceiling = skipped = 0
        for n, row in enumerate(rows):
            messages = row["messages"]
            gold = sorted(set(values([g["kwargs"] for g in row["gold_actions"]])))
            budget = int(ratio * compactor.count_message_tokens(messages))
            if budget < MIN_BUDGET:
                skipped += 1
                continue
            full = "\n".join(text_of(m) for m in messages)
            ceiling += sum(v in full for v in gold)
            total += len(gold)  # runs without gold values count for the errors only
            outs: dict[str, Any] = {}
            order = ("before", "after") if n % 2 == 0 else ("after", "before")
            for key in order:
                clear_caches()
                warm_up()
                started = time.process_time()
                try:
                    outs[key] = compactor.compact_messages(messages, budget,
                                                           compress_system=key == "after")
                except compactor.BudgetError:
                    outs[key] = None
                stats[key]["ms"].append(1000 * (time.process_time() - started))
            for key, out in outs.items():
                s = stats[key]
                if out is None:
                    s["errors"] += 1
                    continue
                blob = "\n".join(text_of(m) for m in out)
                kept = sum(v in blob for v in gold)
                s["kept"] += kept
                if outs["before"] is not None:
                    s["kept_both"] += kept
                s["over"] += compactor.count_message_tokens(out) > budget
                s["orphans"] += not all(u.complete for u in units(read_messages(list(out))))
                s["first"] += out[0].get("role") != "system"
                names = [g["name"] for g in row["gold_actions"] if g["name"] in SECTIONS]
                if "system_spans" in out.report and names:
                    spans = out.report["system_spans"][0]
                    s["policy"].append(section_share(messages[0]["content"], SECTIONS[names[0]], spans))
            if outs["before"] is not None:
                total_both += len(gold)
        for key in ("before", "after"):
            s = stats[key]
            policy = (f"{100 * statistics.mean(s['policy']):.1f}% (n={len(s['policy'])})" if s["policy"]
                      else "-")
            both = f"{100 * s['kept_both'] / total_both:.1f}%" if total_both else "-"
            print(f"| {ratio:.0%} | {key} | {s['errors']} | {100 * s['kept'] / total:.1f}% | {both} | "
                  f"{s['over']} | {s['orphans']} | {s['first']} | {policy} "
                  f"| {statistics.median(s['ms']):.0f} |")
        clean = stats["after"]
        verdict = all(clean[k] == 0 for k in ("errors", "over", "orphans", "first"))
        failures.append(None if verdict else ratio)
        runs = len(rows) - skipped
        print(f"| {ratio:.0%} | ceiling (whole run) | of {runs} runs | {100 * ceiling / total:.1f}% "
              f"| of {total} values; {total_both} where both ran | | | | | |")
    bad = [f"{r:.0%}" for r in failures if r is not None]
    print(("\nFAIL: compress_system=True left an error, an overrun, an orphan or a misplaced system "
           "message at " + ", ".join(bad)) if bad else "\nPASS: compress_system=True: no error, no "
          "overrun, no orphan, the system message first, at every ratio")


if __name__ == "__main__":
    main()
