#!/usr/bin/env python
"""qa_check.py on two halves of dev: items of even index (the half tuned on) and of odd index (held out).

    python benchmarks/qa_split.py [--sets hotpot,musique,nq,cmrc] [--half even|odd|both]
                                  [--baselines bm25_sent,bm25_para,minilm_sent] [--cache FILE]

Why: a method tuned on the items it is judged on does not hold; the held-out half says whether a
change generalises. Items, budgets and the metric are those of ../shared/bench (qa_baselines.py);
the baselines are re-run on the same halves (their per-item hits are cached in --cache, MiniLM
takes a few minutes the first time) so each half is compared with its own best baseline.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.join(os.path.dirname(os.path.dirname(HERE)), "shared", "bench")


def _qb() -> Any:
    """The shared harness (items, budgets, metric)."""
    sys.path.insert(0, BENCH)
    import qa_baselines  # type: ignore[import-not-found]

    return qa_baselines


Hits = dict[str, list[int]]


def _hits_compactor(qb: Any, items: list[dict[str, Any]], pipeline: str) -> tuple[Hits, int, float]:
    """Per budget, 1/0 per item; also the count over budget and the seconds spent."""
    import compactor

    out: dict[str, list[int]] = {}
    over, spent = 0, 0.0
    for bname, bval in qb.BUDGETS:
        row = []
        for it in items:
            ctx = qb.full_context(it["passages"])
            b = qb.budget_for(bname, bval, qb.ntok(ctx))
            t0 = time.perf_counter()
            text = str(compactor.compress(ctx, query=it["question"], budget=b, pipeline=pipeline))
            spent += time.perf_counter() - t0
            if qb.ntok(text) > b:
                over += 1
                text = qb.truncate_tokens(text, b)
            row.append(int(qb.has_answer(text, it["answers"], it["lang"])))
        out[bname] = row
    return out, over, spent


def _hits_baseline(qb: Any, name: str, items: list[dict[str, Any]]) -> dict[str, list[int]]:
    """Per budget, 1/0 per item for one baseline method of the harness."""
    spec = qb.METHODS[name]
    if spec["setup"]:
        spec["setup"]()
    out: dict[str, list[int]] = {}
    for bname, bval in qb.BUDGETS:
        row = []
        for it in items:
            b = qb.budget_for(bname, bval, qb.ntok(qb.full_context(it["passages"])))
            text = spec["fn"](it["question"], it["passages"], b, it["lang"])
            row.append(int(qb.has_answer(text, it["answers"], it["lang"])))
        out[bname] = row
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pipeline", default="qa")
    ap.add_argument("--limit", type=int, default=300)
    ap.add_argument("--sets", default="hotpot,musique,nq,cmrc")
    ap.add_argument("--half", default="both", choices=("even", "odd", "both"))
    ap.add_argument("--baselines", default="bm25_sent,bm25_para,minilm_sent")
    cache = os.path.join(tempfile.gettempdir(), "compactor_qa_split_baselines.json")
    ap.add_argument("--cache", default=cache)
    ap.add_argument("--save", default="", help="write compactor's per-item hits here (to diff two runs)")
    a = ap.parse_args()
    qb = _qb()
    cache: dict[str, Any] = {}
    if os.path.exists(a.cache):
        with open(a.cache, encoding="utf-8") as f:
            cache = json.load(f)
    halves = ("even", "odd") if a.half == "both" else (a.half,)
    rows: dict[str, list[tuple[str, float, float, str, int]]] = {h: [] for h in halves}
    over_all, spent_all, calls = 0, 0.0, 0
    saved: dict[str, Any] = {}
    for s in a.sets.split(","):
        items = qb.load_set("dev", s, a.limit)
        for m in a.baselines.split(","):
            key = f"{s}|{m}|{a.limit}"
            if m and key not in cache:
                cache[key] = _hits_baseline(qb, m, items)
                with open(a.cache, "w", encoding="utf-8") as f:
                    json.dump(cache, f)
        picked = [i for i in range(len(items)) if a.half == "both" or i % 2 == (a.half == "odd")]
        mine, over, spent = _hits_compactor(qb, [items[i] for i in picked], a.pipeline)
        saved[s] = {"items": picked, "hits": mine}
        over_all, spent_all, calls = over_all + over, spent_all + spent, calls + 3 * len(picked)
        for h in halves:
            idx = [k for k, i in enumerate(picked) if i % 2 == (h == "odd")]
            for bname, _ in qb.BUDGETS:
                n = len(idx)
                me = 100 * sum(mine[bname][k] for k in idx) / n
                best_m, best = "-", -1.0
                for m in filter(None, a.baselines.split(",")):
                    hits = cache[f"{s}|{m}|{a.limit}"][bname]
                    v = 100 * sum(hits[picked[k]] for k in idx) / n
                    if v > best:
                        best_m, best = m, v
                rows[h].append((f"{s}|{bname}", me, best, best_m, n))
    for h in halves:
        print(f"-- {h} half --")
        print(f"{'cell':12s} {'compactor':>9s} {'best baseline':>22s}   n")
        for cell, me, best, bm, n in rows[h]:
            flag = "  <-- behind" if me < best else ""
            print(f"{cell:12s} {me:9.1f} {best:9.1f} {bm:>12s} {n:4d}{flag}")
        level = sum(me >= best for _, me, best, _, _ in rows[h])
        mean = sum(me - best for _, me, best, _, _ in rows[h]) / max(1, len(rows[h]))
        print(f"{h}: ahead or level in {level}/{len(rows[h])} cells, mean {mean:+.1f} over the best baseline")
    if a.save:
        with open(a.save, "w", encoding="utf-8") as f:
            json.dump(saved, f)
    print(f"over budget {over_all}x; {1000 * spent_all / max(1, calls):.1f} ms per call")


if __name__ == "__main__":
    main()
