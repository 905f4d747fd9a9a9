"""Typed data across layers: the compaction plan is one frozen dataclass from the compressor to the
report, `State.get` gives the type it is asked for, and context parts are a closed vocabulary."""

from __future__ import annotations

import dataclasses
import typing

import pytest

import compactor
from compactor.document import CONTEXT_PARTS, Context, ContextPart, Message
from compactor.formats.compaction import Plan, assemble, conversation_plan
from compactor.formats.system_prompt import system_records
from compactor.registry import build_registry
from compactor.state import CompactionPlan, ConversationPlan, Knowledge, LossReport, State
from compactor.text.tokens import get_counter


def _history(turns: int = 14) -> list[dict[str, str]]:
    out = [{"role": "system", "content": "You are a careful coding agent working in the repository."},
           {"role": "user", "content": "Fix the failing test in the parser and keep the public API."}]
    for n in range(turns):
        out.append({"role": "assistant", "content": f"I read parser_{n}.py; the KeyError came from a missing "
                                                    f"default in load_{n}, so I added one and ran pytest."})
        out.append({"role": "user", "content": f"Good. Now check module_{n} for the same bug, please."})
    return out


def test_a_real_plan_is_a_conversation_plan_and_the_report_is_its_json_form() -> None:
    history = _history()
    result = compactor.compact_messages(history, 300)
    report = dict(result.report)
    plan = ConversationPlan.from_dict({k: v for k, v in report.items() if k in {
        f.name for f in dataclasses.fields(ConversationPlan)}})
    assert plan.dropped and plan.summary and plan.summary.startswith("[compactor]")
    assert plan.to_dict() == {k: report[k] for k in plan.to_dict()}
    # the report's keys start with the plan's, in the order reports have always had
    assert list(report)[:len(plan.to_dict())] == list(plan.to_dict())
    assert list(plan.to_dict())[:7] == ["head", "tail", "dropped", "summary_tokens", "original_tokens",
                                        "unchanged", "notes"]
    assert "system" not in report and isinstance(report["cited"], list)
    assert report["output_tokens"] == plan.tokens == compactor.count_message_tokens(list(result))


def test_the_plan_assembles_the_messages_it_describes() -> None:
    messages = [Message(role="system", content="S"), Message(role="user", content="a"),
                Message(role="assistant", content="b"), Message(role="user", content="c")]
    layout = Plan(head=(0,), tail=(3,), dropped=(1, 2), summary_tokens=50, original_tokens=40)
    plan = conversation_plan(layout, source_id="s", system={0: "short S"}, summary="[compactor] sum")
    assert isinstance(plan, ConversationPlan) and plan.head == (0,) and plan.dropped == (1, 2)
    out = assemble(messages, plan, plan.summary, "user")
    assert [m["content"] for m in out] == ["short S", "[compactor] sum", "c"]
    again = conversation_plan(dataclasses.replace(layout, tail=(2, 3), dropped=(1,)), plan)
    assert again.tail == (2, 3) and again.summary == "[compactor] sum" and again.system == {0: "short S"}


def test_system_records_read_the_typed_plan() -> None:
    counter = get_counter("cl100k_base")
    messages = [Message(role="system", content="The whole policy text."), Message(role="user", content="hi")]
    assert system_records(messages, ConversationPlan(), counter) == []
    (source, chunk), = system_records(messages, ConversationPlan(system={0: "excerpt"}), counter)
    assert chunk.text == "The whole policy text." and chunk.source_id == source.id


def test_a_plan_round_trips_through_its_json_form_and_refuses_unknown_keys() -> None:
    plan = ConversationPlan(head=(0,), system={0: "x"}, system_spans={0: ((1, 5),)},
                            system_tokens={0: (9, 4)}, system_ids=("abc-0000",), cited=(), budget_share=0.5)
    data = plan.to_dict()
    assert data["system"] == {0: "x"} and data["system_spans"] == {0: [[1, 5]]} and data["cited"] == []
    read = ConversationPlan.from_dict({**data, "system": {"0": "x"}, "system_spans": {"0": [[1, 5]]},
                                       "system_tokens": {"0": [9, 4]}})  # as JSON gives it back
    assert read == plan
    with pytest.raises(TypeError, match=r"unknown conversation plan field.*: heads"):
        ConversationPlan.from_dict({"heads": [0]})
    bare = ConversationPlan().to_dict()
    assert not {"system", "system_query", "cited", "budget_share"} & set(bare)


def test_a_compaction_plan_holds_only_conversation_plans() -> None:
    with pytest.raises(TypeError, match=r"not a ConversationPlan .*from_dict"):
        CompactionPlan({"s1": {"head": [0]}})  # type: ignore[dict-item]
    held = CompactionPlan({"s1": ConversationPlan(tokens=7)})
    found = held.for_source("s1")
    assert found is not None and found.tokens == 7 and held.for_source("s2") is None


def test_state_get_gives_the_item_the_default_or_none() -> None:
    knowledge = Knowledge(strategy="fact_centric", summary="kept")
    state = State([knowledge])
    assert state.get(Knowledge) is knowledge
    assert state.get(LossReport) is None
    fallback = LossReport("validate.loss", "minimal")
    assert state.get(LossReport, fallback) is fallback
    assert Context(state=state).state.get(Knowledge, Knowledge()).summary == "kept"


def test_context_parts_are_a_closed_vocabulary_every_built_in_uses() -> None:
    assert set(typing.get_args(ContextPart)) == set(CONTEXT_PARTS)
    named: set[str] = set()
    for info in build_registry().components.values():
        named.update(r for r in (*info.cls.requires, *info.cls.provides) if isinstance(r, str))
    assert named and named <= set(CONTEXT_PARTS)
