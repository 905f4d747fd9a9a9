"""The hooks a compactor plugin can implement, one per pipeline stage.

Every stage hook is called with keyword arguments `context` (the immutable `Context` so far) and `run`
(the `Run` journal: token counter, step details, warnings). A pipeline step calls its stage hook on
only the components that step names, so an implementation never sees other steps' calls.

How results combine, by stage:
- clean, chunk, compress, fallback, render: one component per step, first non-None result wins.
- classify, score, validate: every component named by the step contributes; the pipeline merges.

A stage hook implemented by a plugin object that is not one of the step's components is never
called. Observers (timing, tracing, monitoring) wrap the run-level hooks instead:
`compactor_run` sees a whole run and `compactor_step` every step, one wrapper hookimpl each::

    class Timer:
        @hookimpl(wrapper=True)
        def compactor_run(self, pipeline, run):
            started = time.perf_counter()
            context = yield          # the final Context; raises what the run raised
            print(pipeline.spec.name, time.perf_counter() - started)
            return context
"""

from __future__ import annotations

import typing
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Literal

import pluggy

if TYPE_CHECKING:
    from compactor.components import Component, ScoreSet
    from compactor.config import StepSpec
    from compactor.document import Context
    from compactor.pipeline import Pipeline
    from compactor.run import Run

PROJECT = "compactor"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@hookspec
def compactor_register_components(register: Callable[[type[Component]], None]) -> None:
    """Offer component classes: call `register(ComponentClass)` once per class.

    Called once per plugin manager, after every plugin module is loaded. The host validates each
    class (name, stage, parameters, stage hook) and remembers which distribution offered it.
    """


@hookspec(firstresult=True)
def compactor_clean(context: Context, run: Run) -> Context | None:
    """Return the context with cleaned `sources` (new `text`, same ids). Stops at first result."""


@hookspec(firstresult=True)
def compactor_chunk(context: Context, run: Run) -> Context | None:
    """Return the context with `chunks` cut from every source's `text`, each with its exact
    token count and character offsets. Stops at first non-None result."""


@hookspec
def compactor_classify(context: Context, run: Run) -> Mapping[str, Mapping[str, Any]] | None:
    """Return labels per chunk id (e.g. `{"type": "error_information", "confidence": 0.8}`).

    Every component of the step contributes; labels are merged into `Chunk.labels`.
    """


@hookspec
def compactor_score(context: Context, run: Run) -> ScoreSet | None:
    """Return a `ScoreSet`: a score in [0, 1] per chunk id and the features behind it.

    Every component of the step contributes; the step combines them with its `weights`.
    """


@hookspec(firstresult=True)
def compactor_compress(context: Context, run: Run) -> Context | None:
    """Return the context with the kept content as `segments` (and `facts`), within the budget.

    Everything kept must carry the chunk ids it derives from. Stops at first non-None result.
    """


@hookspec
def compactor_validate(context: Context, run: Run) -> Mapping[str, Any] | None:
    """Return a report (e.g. `{"level": "minimal", "retention": 0.93, "passed": True}`).

    Every component of the step contributes; reports are visible to later `when:` conditions as
    `<component name>.<key>`. A component that declares `provides = (LossReport,)` has its report
    put in `context.state` as a `compactor.state.LossReport`. A report with
    `retry: {"budget_share": ..., "ratio_attempts": [...]}` asks the pipeline to run the last
    compress step again with that `compactor.state.BudgetShare` in the state; the pipeline allows
    a bounded number of retries per run.
    """


@hookspec(firstresult=True)
def compactor_fallback(context: Context, run: Run) -> Context | None:
    """Return an improved context, or None to decline (the rule output is kept)."""


@hookspec(firstresult=True)
def compactor_render(context: Context, run: Run) -> str | None:
    """Return the final text for the model, within the context's budget."""


@hookspec(firstresult=True)
def compactor_run(pipeline: Pipeline, run: Run) -> Context | None:
    """A whole run of `pipeline`, for observers: implement it as `@hookimpl(wrapper=True)`, and
    `yield` gives the final `Context` (or raises what the run raised; `run.failed_step` names the
    step that failed). The pipeline itself runs the steps; a plain (non-wrapper) implementation
    is not expected."""


@hookspec(firstresult=True)
def compactor_step(step: StepSpec, context: Context, run: Run) -> Context | None:
    """One step of a run (not called for steps whose `when:` is false), for observers: implement
    it as `@hookimpl(wrapper=True)`; `yield` gives the step's resulting `Context`. `run.step` is
    the step's record (tokens in and out, time, details), filled in by the built-in observer."""


#: The pipeline stages, in pipeline order: the one declaration of them. A component's `stage` is one
#: of these, and its stage hook is `compactor_<stage>` (defined above, one per stage).
Stage = Literal["clean", "chunk", "classify", "score", "compress", "validate", "fallback", "render"]
STAGE_HOOKS: dict[str, str] = {stage: f"compactor_{stage}" for stage in typing.get_args(Stage)}
