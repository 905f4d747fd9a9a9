"""Tool outputs reduced by structure (`compactor.formats.structured`) beside two peers, same run.

Reads the tool results of the tau-bench and ToolBench trajectories in ../shared/eval and reports
cl100k tokens before and after for: the reducer (references: every other message of the history and
the tool calls' arguments, as `compress.structured` passes them), JSON minification (no whitespace),
and head-N-tokens truncation with N = the reducer's output size for that result (the same budget).
On tau-bench it also counts the gold actions' argument values found in the original tool results
that are still in each reduced text.

    python benchmarks/tool_output.py [--eval ../shared/eval]
"""

from __future__ import annotations

import argparse
import json
import pathlib
import time
from typing import Any

from compactor.formats.structured import References, reduce_text
from compactor.text.tokens import get_counter

EVAL = pathlib.Path(__file__).resolve().parents[2] / "shared" / "eval"
SETS = {"tau-bench": "agent-trajectories-tau-bench", "toolbench": "agent-trajectories-toolbench"}
_COMMON = ("yes", "no", "one_way", "round_trip", "economy", "business", "basic_economy")


def _text(message: dict[str, Any]) -> str:
    content = message.get("content") or ""
    content = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
    calls = message.get("tool_calls") or []
    return content + "".join(" " + str(c.get("function", {}).get("name", "")) + " " +
                             str(c.get("function", {}).get("arguments", "")) for c in calls)


def _values(obj: Any) -> list[str]:
    """Scalar argument values as conv_check.py counts them."""
    if isinstance(obj, dict):
        return [v for x in obj.values() for v in _values(x)]
    if isinstance(obj, list):
        return [v for x in obj for v in _values(x)]
    s = str(obj)
    return [s] if len(s) >= 3 and s not in _COMMON else []


def _minified(text: str) -> str:
    try:
        return json.dumps(json.loads(text), ensure_ascii=False, separators=(",", ":"))
    except ValueError:
        return text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--eval", type=pathlib.Path, default=EVAL)
    args = parser.parse_args()
    counter = get_counter("cl100k_base")
    for name, folder in SETS.items():
        path = args.eval / folder / "conversations.jsonl"
        totals = {"original": 0, "reducer": 0, "minified": 0, "head": 0}
        reduced_count = outputs = 0
        gold = {"original": 0, "reducer": 0, "minified": 0, "head": 0}
        listed = {"original": 0, "reducer": 0, "minified": 0, "head": 0}  # results with a list cut
        seconds = 0.0
        for line in path.open(encoding="utf-8"):
            record = json.loads(line)
            messages = [m for m in record["messages"] if m.get("role") != "system"]
            texts = [_text(m) for m in messages]
            wanted = sorted(set(_values([g["kwargs"] for g in record.get("gold_actions", [])])))
            for i, message in enumerate(messages):
                if message.get("role") not in ("tool", "function") or not texts[i]:
                    continue
                outputs += 1
                original = texts[i]
                start = time.perf_counter()
                refs = References(texts[:i] + texts[i + 1:])
                found = reduce_text(original, references=refs, ref=f"m{i}", size=counter.count)
                seconds += time.perf_counter() - start
                reduced = found.text if found is not None else original
                reduced_count += found is not None
                ids = counter.encode(original)
                n = counter.count(reduced)
                head = (counter.encoding.decode_bytes(ids[:n]).decode("utf-8", "ignore") if len(ids) > n
                        else original)
                outs = {"original": original, "reducer": reduced, "minified": _minified(original),
                        "head": head}
                for key, out in outs.items():
                    totals[key] += counter.count(out)
                    if found is not None and found.rows:
                        listed[key] += counter.count(out)
                present = [v for v in wanted if v in original]
                for key, out in outs.items():
                    gold[key] += sum(v in out for v in present)
        base = totals["original"]
        print(f"{name}: {outputs} tool results, {reduced_count} reduced, "
              f"{1000 * seconds:.0f} ms in the reducer")
        for key in ("original", "minified", "reducer", "head"):
            saved = 100 * (1 - totals[key] / base) if base else 0.0
            line = f"  {key:9s} {totals[key]:8d} tokens ({saved:5.1f}% saved)"
            if gold["original"]:
                line += f"; gold argument values in tool results kept {gold[key]}/{gold['original']}"
            print(line)
        if listed["original"]:
            print("  results with a long list only: " + ", ".join(
                f"{key} {listed[key]}" for key in ("original", "minified", "reducer", "head")) + " tokens")


if __name__ == "__main__":
    main()
