"""The contract between framework and plugins: typed state, the component protocol, observer hooks."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Generator
from typing import Any

import pytest

from compactor.apps.compacter import pipeline_with_strategy
from compactor.components import Component, validate_component_class
from compactor.document import Context, Source
from compactor.errors import ConfigError, StageError
from compactor.hookspecs import hookimpl
from compactor.ops.monitor import RunRecorder
from compactor.pipeline import Pipeline
from compactor.plugins.chunk import SentenceChunker, TokenChunker
from compactor.state import (
    BudgetShare,
    CompactionPlan,
    ConversationPlan,
    Knowledge,
    LossReport,
    RenderInfo,
    RunInputs,
    State,
    StateItem,
    thaw,
)
from compactor.store import MemoryStore

TEXT = ("The payment service crashed at 09:14 because the database pool ran out of connections. "
        "Engineers raised the pool size from 20 to 50 and the error rate fell to 0.1 percent. "
        "The weather was pleasant that day and lunch was served at noon. ") * 4


# -- typed state, frozen all the way down -------------------------------------------------------

def test_state_is_frozen_all_the_way_down() -> None:
    plan = CompactionPlan({"s1": ConversationPlan(head=[0, 1], dropped={2, 3},  # type: ignore[arg-type]
                                                  system={0: "short"}, notes=["a note"])})
    context = Context().with_state(plan, RunInputs(10))
    held = context.state.get(CompactionPlan)
    found = held.for_source("s1") if held is not None else None
    assert found is not None and found.head == (0, 1) and held is not None
    with pytest.raises(AttributeError):
        found.head.append(9)  # type: ignore[attr-defined]
    with pytest.raises(TypeError):
        found.system[0] = "changed"  # type: ignore[index]
    with pytest.raises(TypeError):
        held.plans["s2"] = ConversationPlan()  # type: ignore[index]
    with pytest.raises(AttributeError):
        found.dropped.add(4)  # type: ignore[attr-defined]
    with pytest.raises(dataclasses.FrozenInstanceError):
        found.summary = "rewritten"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        held.plans = {}  # type: ignore[misc]
    with pytest.raises(AttributeError):
        context.state._items = {}  # type: ignore[misc]
    with pytest.raises(TypeError):
        context.state[Knowledge] = Knowledge()  # type: ignore[index]
    assert context.input_tokens == 10 and Context().input_tokens == 0
    assert held.for_source("s2") is None
    assert thaw(found.system) == {0: "short"} and found.notes == ("a note",)


def test_state_holds_one_item_per_type_and_names_what_is_missing() -> None:
    state = State([BudgetShare(0.5)]).with_(BudgetShare(0.8), Knowledge(summary="s"))
    assert state.get(BudgetShare) == BudgetShare(0.8) and len(state) == 2
    assert state.get(LossReport) is None and state.get(LossReport, "none") == "none"
    with pytest.raises(KeyError, match="no LossReport"):
        state.require(LossReport)
    with pytest.raises(TypeError):
        State([{"summary": "s"}])  # type: ignore[list-item]


def _messages() -> Source:
    from compactor.formats.messages import conversation_source, read_messages

    turns = []
    for n in range(12):
        turns.append({"role": "user", "content": f"Step {n}: please fix the failing test in module_{n}.py "
                                                 f"and rerun pytest; the error was KeyError 'id{n}'."})
        turns.append({"role": "assistant", "content": f"I edited module_{n}.py, the KeyError came from a "
                                                      f"missing default; pytest passes now ({n} tests)."})
    return conversation_source(read_messages(turns))


def test_a_real_compaction_plan_is_frozen_and_found_by_type() -> None:
    pipeline = Pipeline.from_yaml("conversation")
    assert pipeline.spec.provides(CompactionPlan)
    result = pipeline.run(_messages(), budget=200, output_format="messages")
    found = result.state.get(CompactionPlan)
    assert found is not None and len(found.plans) == 1
    plan = next(iter(found.plans.values()))
    assert isinstance(plan, ConversationPlan) and isinstance(plan.dropped, tuple) and plan.dropped
    with pytest.raises(AttributeError):
        plan.dropped.append(0)  # type: ignore[attr-defined]
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.summary = "rewritten"  # type: ignore[misc]
    assert result.state.get(RunInputs).input_tokens > 200
    assert result.state.get(RenderInfo).budgeted is False  # a message list is priced per message


def test_compact_messages_needs_a_step_that_provides_a_plan() -> None:
    from compactor.apps.conversation import compact_messages

    turns = [{"role": "user", "content": "hello " * 50}, {"role": "assistant", "content": "hi " * 50}]
    with pytest.raises(ConfigError, match="provides CompactionPlan"):
        compact_messages(turns, 20, pipeline=Pipeline.from_yaml("generic"))


def test_a_loss_validator_provides_a_loss_report() -> None:
    pipeline = Pipeline.from_yaml("qa")
    assert pipeline.spec.provides(LossReport) and not pipeline.spec.provides(Knowledge)
    result = pipeline.run(TEXT, query="why did the payment service crash", budget=60)
    loss = result.state.get(LossReport)
    assert loss is not None and loss.component == "validate.loss"
    details = [r.details["validate.loss"] for r in result.reports if "validate.loss" in r.details][-1]
    assert loss.level == details["level"] and loss.retention == pytest.approx(details["retention"])
    assert json.dumps(thaw(loss.values), default=str)


def test_strategies_provide_knowledge_and_switch_without_rewriting_the_file() -> None:
    base = Pipeline.from_yaml("deep-search")
    [(step, _)] = base.spec.providers(Knowledge)
    switched = pipeline_with_strategy("deep-search", "summarization")
    [(new_step, new_info)] = switched.spec.providers(Knowledge)
    assert new_info.name == "compress.summarization" and new_step.index == step.index
    assert switched.spec.file == base.spec.file  # positions still name the shipped file
    others = [(s.index, s.label, [(i.name, dict(p)) for i, p in s.components])
              for s in switched.spec.steps if s is not new_step]
    assert others == [(s.index, s.label, [(i.name, dict(p)) for i, p in s.components])
                      for s in base.spec.steps if s is not step]
    result = switched.run(TEXT, query="payment crash")
    knowledge = result.state.get(Knowledge)
    assert knowledge is not None and knowledge.strategy == "summarization" and knowledge.summary


# -- requires / provides checked when the pipeline loads -----------------------------------------

class NeedsLoss(Component):
    """Reads the loss report (a test component)."""

    name = "test.needs_loss"
    stage = "validate"
    requires = ("segments", LossReport)

    @hookimpl
    def compactor_validate(self, context: Context, run: Any) -> dict[str, Any]:
        return {"retention_seen": context.state.require(LossReport).retention}


class TestComponents:
    @hookimpl
    def compactor_register_components(self, register: Any) -> None:
        register(NeedsLoss)


STEPS = """version: 1
steps:
  - use: chunk.sentences
  - use: compress.select
{steps}
"""


def test_required_state_must_be_provided_by_an_earlier_step() -> None:
    bad = STEPS.format(steps="  - use: test.needs_loss\n  - use: validate.loss")
    with pytest.raises(ConfigError) as info:
        Pipeline.from_string(bad, file="p.yaml", plugins=[TestComponents()])
    assert "p.yaml:5" in str(info.value)
    assert "test.needs_loss requires LossReport, which no earlier step provides" in str(info.value)
    good = STEPS.format(steps="  - use: validate.loss\n  - use: test.needs_loss")
    result = Pipeline.from_string(good, plugins=[TestComponents()]).run(TEXT, budget=50)
    seen = [r.details["test.needs_loss"] for r in result.reports if "test.needs_loss" in r.details]
    assert seen == [{"retention_seen": result.state.get(LossReport).retention}]


def test_requires_and_provides_hold_context_parts_or_state_types() -> None:
    class Wrong(NeedsLoss):
        """Declares a dict as what it provides."""

        name = "test.wrong"
        provides = ({"loss": 1},)  # type: ignore[assignment]

    why = validate_component_class(Wrong)
    assert why is not None and "state types" in why
    assert validate_component_class(NeedsLoss) is None


def test_a_retry_may_only_set_the_budget_share() -> None:
    class Asker(Component):
        """Asks for a retry with an unknown key."""

        name = "test.asker"
        stage = "validate"

        @hookimpl
        def compactor_validate(self, context: Context, run: Any) -> dict[str, Any]:
            return {"retry": {"summary": "x"}}

    class Offer:
        @hookimpl
        def compactor_register_components(self, register: Any) -> None:
            register(Asker)

    pipeline = Pipeline.from_string(STEPS.format(steps="  - use: test.asker"), plugins=[Offer()])
    with pytest.raises(StageError, match="a retry may set budget_share, ratio_attempts"):
        pipeline.run(TEXT, budget=50)


# -- the component protocol in one place ---------------------------------------------------------

def test_component_declares_every_attribute_the_framework_reads() -> None:
    for attribute in ("name", "stage", "version", "requires", "provides", "budgeted"):
        assert attribute in Component.__annotations__, attribute
    for method in ("parameters", "check_params", "param_problems"):
        assert (getattr(Component, method).__doc__ or "").strip(), method
    assert Component.check_params({}) == [] and Component.budgeted is True


def test_parameters_are_checked_the_same_from_python_and_yaml() -> None:
    with pytest.raises(ConfigError) as from_python:
        TokenChunker(size=2, overlap=50)
    with pytest.raises(ConfigError) as from_yaml:
        Pipeline.from_string("steps:\n  - use: chunk.tokens\n    with: {size: 2, overlap: 50}\n"
                             "  - use: compress.select\n", file="p.yaml")
    message = "chunk.tokens: size must be at least 8 tokens"
    assert message in str(from_python.value) and message in str(from_yaml.value)
    with pytest.raises(ConfigError, match=r"chunk\.sentences expects int, got str 'big'"):
        SentenceChunker(size="big")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="overlap must be at least 0"):
        TokenChunker(size=100, overlap=100)
    assert TokenChunker(size=100, overlap=10).overlap == 10


def test_a_subclass_is_checked_against_its_own_parameters() -> None:
    class Wide(TokenChunker):
        """A chunker with a parameter of its own."""

        name = "test.wide"

        def __init__(self, *, size: int = 512, overlap: int = 64, wide: bool = True) -> None:
            super().__init__(size=size, overlap=overlap)
            self.wide = wide

    assert Wide(wide=False).wide is False
    with pytest.raises(ConfigError, match="size must be at least 8"):
        Wide(size=1)


# -- a step calls only its own components ---------------------------------------------------------

class Rogue:
    """A plugin object that is no step's component but implements stage hooks."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    @hookimpl
    def compactor_compress(self, context: Context, run: Any) -> Context:
        self.calls.append("compress")
        return context.evolve(segments=())

    @hookimpl
    def compactor_fallback(self, context: Context, run: Any) -> Context:
        self.calls.append("fallback")
        return context.evolve(segments=())

    @hookimpl
    def compactor_score(self, context: Context, run: Any) -> None:
        self.calls.append("score")

    @hookimpl
    def compactor_render(self, context: Context, run: Any) -> str:
        self.calls.append("render")
        return "ROGUE"


def test_a_step_never_calls_a_rogue_plugin_object() -> None:
    text = ("steps:\n  - use: chunk.sentences\n  - use: score.density\n  - use: compress.select\n"
            "  - use: llm.fallback\n")
    rogue = Rogue()
    with_rogue = Pipeline.from_string(text, plugins=[rogue]).run(TEXT, budget=50)
    plain = Pipeline.from_string(text).run(TEXT, budget=50)
    assert rogue.calls == []
    assert with_rogue.output == plain.output and with_rogue.output and "ROGUE" not in with_rogue.output
    assert any(r.stage == "fallback" and r.details.get("declined") for r in with_rogue.reports)


# -- observers: one hookimpl sees a whole run ------------------------------------------------------

class Observer:
    def __init__(self) -> None:
        self.runs: list[tuple[str, Any]] = []
        self.steps: list[tuple[str, int, int]] = []

    @hookimpl(wrapper=True)
    def compactor_run(self, pipeline: Pipeline, run: Any) -> Generator[None, Any, Any]:
        try:
            context = yield
        except Exception as exc:
            self.runs.append(("failed", (type(exc).__name__, run.failed_step)))
            raise
        self.runs.append(("done", context.output_tokens))
        return context

    @hookimpl(wrapper=True)
    def compactor_step(self, step: Any, context: Context, run: Any) -> Generator[None, Any, Any]:
        result = yield
        self.steps.append((step.label, run.step.tokens_in, run.step.tokens_out))
        return result


def test_one_run_hookimpl_sees_a_whole_run_and_one_step_hookimpl_every_step() -> None:
    observer = Observer()
    pipeline = Pipeline.from_yaml("qa", plugins=[observer])
    result = pipeline.run(TEXT, query="payment crash", budget=60)
    assert observer.runs == [("done", result.output_tokens)]
    reported = [(r.step, r.tokens_in, r.tokens_out) for r in result.reports if not r.skipped]
    assert observer.steps == reported and len(reported) == len(pipeline.spec.steps) + 1
    with pytest.raises(Exception, match="empty"):
        pipeline.run("   ")
    assert observer.runs[-1] == ("failed", ("InputError", None))


def test_steps_are_measured_alike_with_and_without_step_observers() -> None:
    def figures(plugins: list[Any]) -> list[tuple[str, str, int, int, bool]]:
        result = Pipeline.from_yaml("qa", plugins=plugins).run(TEXT, query="payment crash", budget=60)
        return [(r.step, r.stage, r.tokens_in, r.tokens_out, r.skipped) for r in result.reports]

    plain, observed = figures([]), figures([Observer()])
    assert plain == observed and all(r[2] > 0 for r in plain)


def test_the_monitor_is_an_ordinary_plugin(tmp_path: Any) -> None:
    store = MemoryStore()
    pipeline = Pipeline.from_yaml("qa", plugins=[RunRecorder(store, "qa-as-plugin")])
    pipeline.run(TEXT, query="payment crash", budget=60)
    [record] = store.runs("qa-as-plugin")
    assert record["success"] and record["loss_level"] in ("minimal", "acceptable", "moderate", "severe")
    assert record["tokens_in"] > record["tokens_out"] > 0


def test_a_failing_step_is_named_to_run_observers() -> None:
    class Boom(Component):
        """Fails."""

        name = "test.boom"
        stage = "compress"

        @hookimpl
        def compactor_compress(self, context: Context, run: Any) -> Context:
            raise RuntimeError("boom")

    class Offer:
        @hookimpl
        def compactor_register_components(self, register: Any) -> None:
            register(Boom)

    observer = Observer()
    text = "steps:\n  - use: chunk.sentences\n  - id: exploding\n    use: test.boom\n"
    with pytest.raises(StageError, match="boom"):
        Pipeline.from_string(text, plugins=[Offer(), observer]).run(TEXT)
    assert observer.runs == [("failed", ("StageError", "exploding"))]


def test_state_items_are_dataclasses_with_frozen_fields() -> None:
    for kind in (RunInputs, RenderInfo, BudgetShare, Knowledge, LossReport, CompactionPlan):
        assert issubclass(kind, StateItem) and dataclasses.is_dataclass(kind)
        item = kind()
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(item, dataclasses.fields(kind)[0].name, None)
