"""What the summary of an agent history says: the request, the terms, ids that resolve, its metadata.

compress.eight_segment writes one summary for the turns it drops. Whatever the budget, it states the
request being worked on (verbatim when it fits), lists technical terms (not the capitals of prompt
templates, not bare numbers), cites every message so that one id gives it back (after a second
compaction too, whose summary carries lines of the first), names the expand tool the caller offers
(or none), and reports tokens, characters and `validate.loss`'s retention.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest

import compactor
from compactor.apps.common import pipeline_for
from compactor.document import Budget, Context
from compactor.formats.compaction import SUMMARY_MARK
from compactor.formats.messages import conversation_source, read_messages
from compactor.pipeline import Pipeline
from compactor.plugins.compress.eight_segment import history as hx
from compactor.plugins.compress.eight_segment.conversation import message_chars, short_marker
from compactor.state import CompactionPlan, ConversationOptions, LossReport, State
from compactor.text.tokens import get_counter

from ...helpers import EVAL
from .test_conversation import _call, assert_invariants

# -- histories -------------------------------------------------------------------------------------

SWE_SYSTEM = ("SETTING: You are an autonomous programmer, working in a command line with a file "
              "editor.\nCOMMANDS:\nopen <path> [<line>]: opens the file at the line\n"
              "```\nopen lib/colors.py\n```\nIMPORTANT TIPS: You MUST ONLY issue ONE command at a TIME. "
              "AVOID interactive commands. YOU CAN ENTER one command per turn. Think ABOUT ALL edge cases.")
SWE_TASK = ("We're currently solving the following issue within our repository. Here's the issue text:\n"
            "ISSUE:\nLogNorm fails with vmin=100 when the data holds 1E20: `ValueError: Invalid vmin or "
            "vmax` in `lib/colors.py`, line 1477 (release 3.5, reported in 2016 as 22218701).\n\n"
            "INSTRUCTIONS:\nNow, you're going to solve this issue on your own. Edit the file, then run "
            "the reproduction script.\n\n(Open file: n/a)\n(Current directory: /repo)\nbash-$")


def swe_history(steps: int = 12) -> list[dict[str, Any]]:
    """A SWE-agent-like run: a system prompt with a command example, the task statement as the
    first user message (its template ends like an observation), then commands and file views."""
    history: list[dict[str, Any]] = [{"role": "system", "content": SWE_SYSTEM},
                                     {"role": "user", "content": SWE_TASK}]
    for k in range(steps):
        start = 1400 + 10 * k
        history.append({"role": "assistant", "content": f"DISCUSSION\nBlock {k} of the norm code comes "
                                                         f"next.\n```\nopen lib/colors.py {start}\n```"})
        lines = "\n".join(f"{start + j}:    t_vmin_{k}_{j} = self._trf.transform(vmin)" for j in range(25))
        history.append({"role": "user", "content": "[File: /repo/lib/colors.py (2500 lines total)]\n"
                                                   f"{lines}\n(Open file: /repo/lib/colors.py)\n"
                                                   "(Current directory: /repo)\nbash-$"})
    return history


FIRST = "Hi, I need to move my Denver to Boston flight (reservation QX7P2L) to a later day."
LATEST = ("Change of plan: cancel reservation QX7P2L instead, refund it to the original card, and "
          "e-mail me the cancellation number. Keep the Boston hotel booking as it is.")


def _output(n: int, rows: int = 30) -> str:
    return json.dumps([{"flight_number": f"HAT{100 + n * rows + r:03d}", "date": "2024-05-24",
                        "status": "available", "seats": {"economy": r + 3, "business": r % 4}}
                       for r in range(rows)])


def support_history(after: int = 6, latest: str = LATEST) -> list[dict[str, Any]]:
    """A tool-using agent: a first request, some lookups, a new request from the person, and long
    tool results after it (too long to keep the request verbatim with them)."""
    history: list[dict[str, Any]] = [
        {"role": "system", "content": "You are an airline support agent."},
        {"role": "user", "content": FIRST},
        {"role": "assistant", "content": "", "tool_calls": [_call("c0", "get_reservation_details",
                                                                  reservation_id="QX7P2L")]},
        {"role": "tool", "tool_call_id": "c0", "content": json.dumps({"reservation_id": "QX7P2L",
                                                                      "user_id": "zoe_park_5521"})},
        {"role": "assistant", "content": "Your trip QX7P2L is on May 22. Which day would you like instead?"},
        {"role": "user", "content": latest},
    ]
    for n in range(after):
        history.append({"role": "assistant", "content": "", "tool_calls": [_call(
            f"s{n}", "search_direct_flight", origin="DEN", destination="BOS", date=f"2024-05-{24 + n}")]})
        history.append({"role": "tool", "tool_call_id": f"s{n}", "content": _output(n)})
    return history


# -- helpers ---------------------------------------------------------------------------------------


def run(history: list[dict[str, Any]], budget: int, pipeline: str | Pipeline = "conversation",
        **options: Any) -> tuple[str, dict[str, Any], Any]:
    """The shipped pipeline on `history` with run options (as `compact_messages` passes them):
    (summary, plan, the run's result)."""
    source = conversation_source(read_messages(history))
    context = Context(sources=(source,), budget=Budget(max_tokens=budget),
                      state=State([ConversationOptions({"keep_last": 4, **options})]))
    runner = pipeline if isinstance(pipeline, Pipeline) else pipeline_for(pipeline)
    result = runner.run(context, output_format="messages")
    found = result.state.get(CompactionPlan)
    assert found is not None
    plan = found.for_source(source.id)
    assert plan is not None
    return str(plan.summary or ""), plan.to_dict(), result


def bullets(summary: str, section: str) -> list[str]:
    return next((found for title, found in hx.summary_sections(summary) if title == section), [])


def flat(text: str) -> str:
    return " ".join(text.split())


def share(history: list[dict[str, Any]], part: float) -> int:
    total = compactor.count_message_tokens(history)
    system = compactor.count_message_tokens(history[:1]) if history[0]["role"] == "system" else 0
    return system + int(part * (total - system))


def eval_histories(folder: str) -> Iterator[list[dict[str, Any]]]:
    path = EVAL / folder / "conversations.jsonl"
    if not path.exists():
        pytest.skip(f"evaluation data not found: {path}")
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            yield json.loads(line)["messages"]


# -- a list of values carried from an earlier summary ----------------------------------------------

EARLIER = (f'{SUMMARY_MARK} Summary of m2–m9 (of 12). Originals: expand_context(ids=["0123456789abcdef-'
           '0002..0009"]); mN is id suffix -000N.\n\n## Key Technical Concepts\n'
           "- node.attrname, , is, self.handle(a, b), value_7\n\n## Compression Metadata\n"
           "- Original 900 tokens → 300 (ratio 0.33); quality score 0.90; role: assistant")


def test_a_carried_list_of_values_with_commas_and_gaps_compacts_again() -> None:
    """An earlier summary's concepts line whose values hold ", " (a call's arguments) or nothing
    used to split into an empty value, and the next compaction raised IndexError."""
    history: list[dict[str, Any]] = [{"role": "system", "content": "You are a coding agent."},
                                     {"role": "user", "content": "Fix the crash in pyreverse."},
                                     {"role": "user", "content": EARLIER}]
    for k in range(8):
        history.append({"role": "assistant",
                        "content": f"Looking at part {k}.\n```bash\ncat part_{k}.txt\n```"})
        history.append({"role": "user", "content": "<returncode>0</returncode>\n<output>\n"
                                                   + "the quick brown fox jumps over the lazy dog\n" * 30
                                                   + "</output>"})
    assert hx.History(read_messages(history)).kinds[2] == "summary"
    for budget in (400, 900):
        out = compactor.compact_messages(history, budget, keep_last=1)
        assert_invariants(history, out, budget)
        values = [v for line in bullets(out.summary or "", "Key Technical Concepts")
                  for v in hx.split_values(line)]
        assert "" not in values and "self.handle(a" not in values and "b)" not in values
    assert hx.split_values("a, , f(x, y), [1, 2], b") == ["a", "f(x, y)", "[1, 2]", "b"]
    assert not hx.contains_value("anything", {"anything"}, "")


def test_the_prose_between_two_code_spans_is_no_identifier() -> None:
    text = ("The `visit_assignattr` hook runs. A stray ` tick, is an argument to `node.infer()` here, so "
            "`self.handle(a, b)` might infer it as `Uninferable`. It seems `EarthLocation` (like "
            "`SkyCoord`) uses `Quantity`.")
    found = hx._identifiers(text, prose=True)
    assert "visit_assignattr" in found
    assert not [t for t in found if " " in t and not re.search(r"[()\[\]=<>._]", t)], found
    assert not [t for t in found if t[0] in ".,;:)"], found
    # a wrongly paired span still holding code is code
    assert "self.handle(a, b)" in hx._identifiers("call `self.handle(a, b)` now", prose=True)


def test_replaying_the_mini_swe_agent_runs_raises_nothing() -> None:
    rows = list(eval_histories("agent-trajectories-mini-swe-agent-swebench"))
    for messages in (rows[8], rows[12]):  # two runs whose replay raised IndexError
        for part in (0.3, 0.15):
            trigger = share(messages, part)
            auto = compactor.AutoCompactor(window=max(2 * trigger, 1000), trigger=trigger, record=False)
            for i, message in enumerate(messages):
                if message["role"] == "assistant" and i >= 2:
                    auto.maybe_compact(messages[:i])
            assert auto.compactions >= 2


# -- the request ----------------------------------------------------------------------------------


def test_a_task_statement_after_a_system_prompt_is_the_request_not_tool_output() -> None:
    history = hx.History(read_messages(swe_history(3)))
    assert history.kinds[:4] == ["system", "user", "assistant", "output"]


def test_the_task_statement_is_quoted_in_full_as_the_first_primary_line() -> None:
    history = swe_history()
    budget = share(history, 0.3)
    summary, plan, _ = run(history, budget, keep_first=False)  # the task goes with the dropped turns
    assert 1 in plan["dropped"]
    primary = bullets(summary, "Primary Request and Intent")
    assert primary[0].startswith('Current request (m1): "')
    assert flat(SWE_TASK) in flat(primary[0])  # every word, in order
    assert flat(summary).count("Now, you're going to solve this issue on your own") == 1  # quoted once
    assert not bullets(summary, "Optional Next Step")


def test_the_latest_request_is_quoted_then_the_first() -> None:
    history = support_history()
    budget = share(history, 0.3)
    summary, plan, _ = run(history, budget, keep_first=False)
    latest = history.index({"role": "user", "content": LATEST})
    assert {1, latest} <= set(plan["dropped"])
    primary = bullets(summary, "Primary Request and Intent")
    assert primary[0] == f'Current request (m{latest}): "{LATEST}"'
    assert primary[1] == f'First request (m1): "{FIRST}"'
    assert summary.count("cancellation number") == 1 and summary.count("to a later day") == 1
    # with the first request kept verbatim above, a line says so
    summary, plan, _ = run(history, budget)
    assert 1 in plan["head"]
    primary = bullets(summary, "Primary Request and Intent")
    assert primary[:2] == [f'Current request (m{latest}): "{LATEST}"',
                           "The original request is kept verbatim above."]


def test_the_request_is_mandatory_and_shortened_only_past_half_the_room() -> None:
    long = "Please cancel reservation QX7P2L and refund it. " + " ".join(
        f"Detail {n}: the passenger named in booking {n} keeps seat {n}A on every leg." for n in range(60))
    history = support_history(after=8, latest=long)
    latest = history.index({"role": "user", "content": long})
    for part in (0.12, 0.2, 0.3):
        budget = share(history, part)
        summary, plan, _ = run(history, budget)
        assert latest in plan["dropped"]
        assert compactor.count_message_tokens(history[:1]) < budget
        primary = bullets(summary, "Primary Request and Intent")
        assert primary[0].startswith(f'Current request (m{latest}): "Please cancel reservation QX7P2L')
        whole = get_counter().count(f"- Current request (m{latest}): " + hx.quoted(long) + "\n")
        if whole <= plan["summary_tokens"] // 2:
            assert flat(long) in flat(primary[0])
        else:
            assert primary[0].endswith(' …"') and flat(primary[0][:-3]).split('"', 1)[1] in flat(long)


def test_a_request_carried_by_an_earlier_summary_is_quoted_again(monkeypatch: pytest.MonkeyPatch) -> None:
    history = support_history(after=10)
    seen = _record_compactions(monkeypatch)
    trigger = compactor.count_message_tokens(history) // 3
    auto = compactor.AutoCompactor(window=4 * trigger, trigger=trigger, record=False, tiers=("summary",))
    out: list[Any] = []
    for i in range(2, len(history) + 1):
        if history[i - 1]["role"] != "tool":
            out = auto.maybe_compact(history[:i])
    assert auto.compactions >= 2
    summary = next(m["content"] for m in out if str(m.get("content")).startswith(SUMMARY_MARK))
    primary = bullets(summary, "Primary Request and Intent")
    found = re.match(r'Current request \(([a-z])(\d+)\): "(.*)"$', primary[0], re.S)
    assert found and found.group(3) == LATEST, primary
    assert found.group(1) != "m"  # the request is in the earlier summary's history, under its letter
    letters = hx.marker_letters(summary)
    cited = f"{letters[found.group(1)]}-{int(found.group(2)):04d}"
    assert LATEST in compactor.expand([cited], store=auto.store)[cited]
    assert seen[letters[found.group(1)]][int(found.group(2))]["content"] == LATEST


def test_a_request_newer_turns_replaced_goes_on_as_an_earlier_request() -> None:
    earlier = (f'{SUMMARY_MARK} Summary of m2–m9 (of 12). Originals: expand(ids=["0123456789abcdef-0002..'
               '0009"]); m2 is id "0123456789abcdef-0002".\n\n## Primary Request and Intent\n'
               f'- Current request (m5): "{LATEST}"\n- First request (m1): "{FIRST}"')
    history = hx.History(read_messages([
        {"role": "system", "content": "You are an airline support agent."},
        {"role": "user", "content": earlier},
        {"role": "assistant", "content": "Done: QX7P2L is cancelled."},
        {"role": "user", "content": "Thanks. Now book me a hotel in Boston for May 24."}]))
    citations = hx.Citations(history, [1, 2, 3], "fedcba9876543210")
    asked, _ = hx.requests(history, [1, 2, 3], citations)
    assert [(r.which, r.cite, r.text) for r in asked] == [
        ("current", "m3", "Thanks. Now book me a hotel in Boston for May 24."), ("first", "a1", FIRST)]
    carried = hx.carried_items(history, [1, 2, 3], {"Primary Request and Intent": "primary"}, citations,
                               {(r.index, r.carried) for r in asked if r.carried})
    assert [it.text for it in carried["primary"]] == [f'Earlier request (a5): "{LATEST}"']
    assert citations.defined("(a5)") == [("a", "0123456789abcdef", 5)]


# -- technical concepts ---------------------------------------------------------------------------


def test_capitals_of_prompt_templates_and_bare_numbers_are_no_terms() -> None:
    prose = ("You MUST ONLY issue ONE command at a TIME. AVOID interactive commands: YOU CAN ENTER one. "
             "Think ABOUT ALL cases. The crash is a SIGSEGV (ENOENT before it) under GPL code in FRANCE, "
             "set HTTP_PROXY on AMD64; issue 22218701 from 2016, line 1477, 3.5.1 released 2024-05-24.")
    history = hx.History(read_messages([
        {"role": "user", "content": prose + " Fly me from SEA, ONE way."},
        {"role": "assistant", "content": "", "tool_calls": [_call("a", "refund", amount=150,
                                                                  reservation_id="QX7P2L")]},
        {"role": "tool", "tool_call_id": "a",
         "content": json.dumps({"refund_id": "RF-2291", "total": 1786, "origin": "SEA"})}]))
    items = {it.text for it in hx.identifier_items(history, [0, 1, 2], "")}
    assert not items & {"MUST", "ONLY", "ONE", "TIME", "AVOID", "YOU", "CAN", "ENTER", "ABOUT", "ALL"}
    assert {"SIGSEGV", "ENOENT", "GPL", "FRANCE", "HTTP_PROXY", "AMD64", "2024-05-24"} <= items
    assert "SEA" in items  # an English word, but a value a tool returned: the airport
    assert {"amount=150", "total=1786", "QX7P2L", "RF-2291"} <= items
    assert not {"150", "1786", "22218701", "2016", "1477"} & items


@pytest.mark.parametrize("folder", ["agent-trajectories-swe-agent",
                                    "agent-trajectories-mini-swe-agent-swebench"])
def test_concepts_of_real_coding_runs_are_terms(folder: str) -> None:
    english = hx.english_words()
    bad: list[str] = []
    for messages in eval_histories(folder):
        for part in (0.1, 0.3):
            out = compactor.compact_messages(messages, share(messages, part))
            for line in bullets(out.summary or "", "Key Technical Concepts"):
                for value in hx.split_values(line):
                    term = value.split(" ×")[0]
                    if (term.isalpha() and term.isupper() and term.lower() in english) or re.fullmatch(
                            r"[+-]?\d[\d,]*(?:\.\d+)?%?", term):
                        bad.append(value)
    assert not bad, bad


# -- ids that resolve -------------------------------------------------------------------------------


def test_the_marker_names_the_expand_tool_the_caller_offers_or_none() -> None:
    history = swe_history()
    tight_budget = compactor.count_message_tokens(history[:2]) + 160
    for budget, tight in ((share(history, 0.3), False), (tight_budget, True)):
        named, _, _ = run(history, budget, expand_tool="expand")
        first = named.split("\n", 1)[0]
        assert ('expand(ids=["' if not tight else 'expand(["') in first and "expand_context" not in first
        bare, _, _ = run(history, budget, expand_tool=None)
        first = bare.split("\n", 1)[0]
        assert re.search(r"[Oo]riginals stored under ids \[\"", first)
        assert not re.search(r"\w\(\[|\w\(ids=", first)  # no call to make
        for summary in (named, bare):  # read back as a summary, whatever its marker says
            assert hx.is_summary(summary) and hx.marker_ids(summary)
    out = compactor.compact_messages(history, share(history, 0.3), expand_tool="expand")  # as MCP asks
    assert 'Originals: expand(ids=["' in (out.summary or "").split("\n", 1)[0]


def test_earlier_ids_are_found_whatever_tool_their_marker_named() -> None:
    ids = '["0123456789abcdef-0002..0009"]'
    rest = 'm2 is id "0123456789abcdef-0002".\n\n## Pending Tasks\n- run the tests (m4)'
    for earlier in (f"{SUMMARY_MARK} Summary of m2–m9 (of 12). Originals: expand(ids={ids}); {rest}",
                    f"{SUMMARY_MARK} Summary of m2–m9 (of 12). Originals stored under ids {ids}; {rest}",
                    f"{SUMMARY_MARK} m2–m9 compacted: expand_context({ids})"):
        history = [{"role": "system", "content": "You are a coding agent."},
                   {"role": "user", "content": "Fix the build."}, {"role": "user", "content": earlier},
                   *swe_history(8)[2:]]
        assert hx.History(read_messages(history)).kinds[2] == "summary"
        summary, _, _ = run(history, share(history, 0.5), expand_tool="expand")
        assert '"0123456789abcdef-0002..0009"' in summary.split("\n", 1)[0]
        if "Pending Tasks" in earlier and "run the tests" in summary:  # its citation, in this summary's terms
            line = next(b for b in bullets(summary, "Pending Tasks") if "run the tests" in b)
            letter = re.search(r"\(([a-z])4\)", line).group(1)
            assert hx.marker_letters(summary)[letter] == "0123456789abcdef"


def test_a_tight_summary_cites_a_carried_line_by_the_summary_that_holds_it() -> None:
    history = hx.History(read_messages([
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Fix the build."},
        {"role": "user", "content": f'{SUMMARY_MARK} m2–m9 compacted: expand(["0123456789abcdef-0002..0009"])'
                                    "\n\n## Pending Tasks\n- run the tests (m4)"},
        {"role": "assistant", "content": "Running them."}]))
    line = hx.carried_items(history, [2, 3], {"Pending Tasks": "pending"},
                            hx.Citations(history, [2, 3], "fedcba9876543210", brief=True))["pending"][0]
    assert line.text == "run the tests (m2)"  # m2 here: the earlier summary, which holds the line
    assert short_marker("fedcba9876543210", [2, 3], None) == (
        f'{SUMMARY_MARK} m2–m3 compacted; originals stored under ids ["fedcba9876543210-0002..0003"]')


def _record_compactions(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[dict[str, Any]]]:
    """Source id -> the history each compaction of an AutoCompactor was given."""
    import compactor.apps.auto as auto_module

    seen: dict[str, list[dict[str, Any]]] = {}
    original = auto_module.compact_messages

    def recording(messages: Any, budget: int, **kwargs: Any) -> Any:
        result = original(messages, budget, **kwargs)
        if result.summary is not None:  # a summary (not a cheaper tier: outputs cleared to stubs)
            seen[result.report["source_id"]] = [dict(m) for m in messages]
        return result

    monkeypatch.setattr(auto_module, "compact_messages", recording)
    return seen


def coding_run(turns: int = 16) -> list[dict[str, Any]]:
    """A coding agent editing a few files over many turns, with a failing and a passing test run."""
    history: list[dict[str, Any]] = [{"role": "system", "content": "You are a coding agent."},
                                     {"role": "user", "content": "Make the date parser accept offsets."}]
    for k in range(turns):
        path = f"src/app/part_{k % 5}.py"
        history.append({"role": "assistant", "content": f"Editing {path} for case {k}.", "tool_calls": [
            _call(f"e{k}", "str_replace_editor", command="str_replace", path=path, old_str=f"old_{k}",
                  new_str=f"def case_{k}(text):\n    return parse_offset(text, {k})")]})
        view = "\n".join(f"{j:4d}  value_{k}_{j} = table[{j}]" for j in range(40))
        history.append({"role": "tool", "tool_call_id": f"e{k}",
                        "content": f"The file {path} has been edited.\n{view}"})
        history.append({"role": "assistant", "content": f"Running the tests for case {k}.", "tool_calls": [
            _call(f"t{k}", "bash", command=f"pytest tests/test_case_{k}.py")]})
        failed = k % 3 == 0
        history.append({"role": "tool", "tool_call_id": f"t{k}", "content": (
            f"FAILED tests/test_case_{k}.py::test_offset\nValueError: bad offset in case {k}" if failed
            else "1 passed in 0.1s")})
    return history


def test_every_citation_of_a_second_summary_gives_back_its_message(monkeypatch: pytest.MonkeyPatch) -> None:
    history = coding_run()
    seen = _record_compactions(monkeypatch)
    trigger = compactor.count_message_tokens(history) // 3
    auto = compactor.AutoCompactor(window=4 * trigger, trigger=trigger, record=False, tiers=("summary",))
    out: list[Any] = []
    for i in range(3, len(history) + 1):
        if history[i - 1]["role"] == "assistant":
            out = auto.maybe_compact(history[:i])
    assert auto.compactions >= 2
    summary = next(m["content"] for m in out if str(m.get("content")).startswith(SUMMARY_MARK))
    body = summary.split("\n", 1)[1]  # the marker line names ranges, not messages
    letters = hx.marker_letters(summary)
    assert letters["m"] == auto.last.report["source_id"]
    assert len(set(letters.values())) == len(letters)  # one source per letter
    carried = [c for c in letters if c != "m"]
    assert carried, "the second summary carries lines of the first"
    checked = 0
    for line in body.split("\n- "):
        head = line.split("\n```", 1)[0]  # the line, not its code
        for match in re.finditer(r"(?<![\w./@#$-])([a-z])(\d+)(?![\w-]|\.\d)", head):
            if match.group(1) not in letters:
                continue
            source, number = letters[match.group(1)], int(match.group(2))
            chunk = f"{source}-{number:04d}"
            text = compactor.expand([chunk], store=auto.store)[chunk]
            original = seen[source][number]
            assert (original.get("content") or "")[:60] in text, (line, chunk)
            for path in re.findall(r"`([\w/.]+\.py)`: edited", head):  # a file line: the edit is there
                assert path in text, (line, chunk)
            checked += 1
    assert checked >= 10


# -- the metadata ---------------------------------------------------------------------------------


def test_the_metadata_reports_characters_beside_tokens() -> None:
    history = coding_run(8)
    budget = share(history, 0.3)
    out = compactor.compact_messages(history, budget)
    found = re.search(r"Original (\d+) tokens → (\d+) \(ratio [\d.]+\); (\d+)→(\d+) chars",
                      out.summary or "")
    assert found, out.summary
    parsed = read_messages(list(out))
    assert int(found.group(1)) == compactor.count_message_tokens(history)
    assert int(found.group(2)) == compactor.count_message_tokens(list(out))
    assert int(found.group(3)) == sum(message_chars(m) for m in read_messages(history))
    assert int(found.group(4)) == sum(message_chars(m) for m in parsed)


@pytest.mark.parametrize(("folder", "row"), [("agent-trajectories-swe-agent", 0),
                                             ("agent-trajectories-mini-swe-agent-swebench", 1)])
def test_the_quality_figure_is_validate_loss_retention(folder: str, row: int) -> None:
    pipeline = Pipeline.from_string(
        "version: 1\nname: checked\ntokenizer: cl100k_base\nsteps:\n  - use: compress.structured\n"
        "  - use: chunk.messages\n  - use: compress.eight_segment\n    with: {keep_last: 4}\n"
        "  - use: validate.loss\noutput: {format: messages}\n")
    messages = list(eval_histories(folder))[row]
    summary, plan, result = run(messages, share(messages, 0.3), pipeline)
    retention = float(result.state.get(LossReport).values["retention"])
    assert f"quality score {retention:.2f}" in summary
    assert abs(plan["quality"] - retention) < 1e-3  # the plan's figure has three decimals
