"""Running a resolved pipeline: one plugin manager per pipeline, one subset caller per component.

A run goes through two observer hooks (`compactor_run` around the whole run, `compactor_step`
around each step); a step calls its stage hook on its own components only, never on other plugin
objects registered in the same manager.
"""

from __future__ import annotations

import functools
import gc
import importlib.resources
import os
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any

from compactor.components import Component, ScoreSet
from compactor.conditions import namespace_lookup
from compactor.config import PipelineSpec, StepSpec, load_spec
from compactor.document import Budget, Chunk, Context, Source, StepReport, frozen_mapping
from compactor.errors import BudgetError, CompactorError, ConfigError, InputError, Problem, StageError
from compactor.formats.messages import conversation_counts
from compactor.hookspecs import STAGE_HOOKS, hookimpl
from compactor.llm.client import DEFAULT_BASE_URL, same_endpoint
from compactor.observe import StepObserver, with_counts
from compactor.registry import Registry, build_registry
from compactor.run import Run, StepRecord
from compactor.state import BudgetShare, LossReport, RenderInfo, RunInputs
from compactor.text.tokens import TokenCounter, get_counter
from compactor.yamlmarks import MAX_FILE_CHARS

Progress = Callable[[int, int, str], None]
#: Upper bound on validator-requested re-compressions in one run, whatever validators ask.
MAX_RETRIES = 5
SHIPPED_PACKAGE = "compactor.pipelines"


def shipped_pipelines() -> list[str]:
    """Names of the pipelines that ship inside the package."""
    folder = importlib.resources.files(SHIPPED_PACKAGE)
    return sorted(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".yaml"))


SHIPPED_SUFFIX = " (shipped)"


def pipeline_folder(file: str) -> Path:
    """Where a pipeline's relative data paths resolve: its file's folder (the package's pipelines
    for a shipped one), else the current directory."""
    if file.endswith(SHIPPED_SUFFIX):
        return Path(str(importlib.resources.files(SHIPPED_PACKAGE)))
    path = Path(file)
    return path.parent if path.is_file() else Path.cwd()


def read_pipeline_text(name_or_path: str | os.PathLike[str]) -> tuple[str, str]:
    """(text, file label) of a pipeline file path, or of a shipped pipeline by name."""
    path = Path(name_or_path)
    if path.is_file():
        if path.stat().st_size > MAX_FILE_CHARS * 4:
            raise ConfigError(Problem(f"the file has {path.stat().st_size:,} bytes; a pipeline file "
                                      f"may have at most {MAX_FILE_CHARS:,} characters", str(path)))
        try:
            return path.read_text(encoding="utf-8"), str(name_or_path)
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(Problem(f"cannot read pipeline file: {exc}", str(name_or_path))) from None
    name = str(name_or_path)
    if os.sep not in name and "/" not in name:
        stem = name[:-5] if name.endswith(".yaml") else name
        resource = importlib.resources.files(SHIPPED_PACKAGE).joinpath(f"{stem}.yaml")
        if resource.is_file():
            return resource.read_text(encoding="utf-8"), f"{stem}.yaml{SHIPPED_SUFFIX}"
    raise ConfigError(Problem(f"no such pipeline file. Shipped pipelines: "
                              f"{', '.join(shipped_pipelines())}", name))


_GC_LOCK = threading.Lock()
_GC_STATE = {"runs": 0, "was_enabled": False}  # runs in progress in this process, and the GC before them


def _gc_pause() -> None:
    """The first run in progress turns the cyclic GC off; runs in other threads share the pause."""
    with _GC_LOCK:
        if _GC_STATE["runs"] == 0:
            _GC_STATE["was_enabled"] = gc.isenabled()
            gc.disable()
        _GC_STATE["runs"] += 1


def _gc_resume() -> None:
    """The last run to finish turns the GC back on, if it was on before the first began."""
    with _GC_LOCK:
        _GC_STATE["runs"] -= 1
        if _GC_STATE["runs"] == 0 and _GC_STATE["was_enabled"]:
            gc.enable()


def resolved_pipeline(name_or_path: str | os.PathLike[str], *, plugins: Iterable[Any] = ()) -> Pipeline:
    """The pipeline for a name or file, loaded once and reused while the file's text, the plugins
    and the environment (`${VAR}` and the COMPACTOR_* switches) are the same.

    The cache holds whole resolved pipelines (registry, validated spec, component instances), which
    runs never change, keyed by content rather than by path, so an edited file is reloaded.
    Unhashable plugin objects bypass the cache.
    """
    text, file = read_pipeline_text(name_or_path)
    plugin_key = tuple(plugins)
    try:
        hash(plugin_key)
    except TypeError:
        return Pipeline.from_string(text, file=file, plugins=plugin_key)
    return _cached_pipeline(text, file, plugin_key, tuple(sorted(os.environ.items())))


@functools.lru_cache(maxsize=32)
def _cached_pipeline(text: str, file: str, plugins: tuple[Any, ...],
                     environment: tuple[tuple[str, str], ...]) -> Pipeline:
    return Pipeline.from_string(text, file=file, plugins=plugins, env=dict(environment))


#: What `warm_up` runs through each pipeline: a few English and Chinese sentences, so the language
#: paths of both load (sentence splitters, stemmers, word tables).
WARM_UP_TEXT = ("The migration failed at 02:14 because the disk was full. The team restored the backup, "
                "and the service was back by 03:00.\n\n迁移在凌晨两点失败，因为磁盘已满。团队恢复了备份。")
WARM_UP_QUERY = "Why did the migration fail?"


def warm_up(pipelines: Iterable[str | os.PathLike[str]] = ("qa", "generic"), *,
            plugins: Iterable[Any] = ()) -> None:
    """Load now what the first call in a process would load on its way, so a server's first request
    costs what every later one does: the token encoding (cl100k, about 140 ms), each pipeline by
    name or file as `compress` resolves it (its components' modules and tables), and what their
    steps load on first use, by running a few sentences through each (a message list through a
    conversation pipeline, subtitles through a transcript one). A pipeline with a step that may
    call a model (`llm: true`, a fallback step) is resolved but not run. Call it once at start-up,
    before taking requests; later calls cost next to nothing."""
    get_counter().count(WARM_UP_TEXT)
    plugin_objects = tuple(plugins)
    for name in pipelines:
        pipeline = resolved_pipeline(name, plugins=plugin_objects)
        if not _may_call_a_model(pipeline.spec):
            pipeline.run(_warm_up_input(pipeline.spec), query=WARM_UP_QUERY)


def _may_call_a_model(spec: PipelineSpec) -> bool:
    return any(step.stage == "fallback" or params.get("llm") is True
               for step in spec.steps for _, params in step.components)


def _warm_up_input(spec: PipelineSpec) -> str | Source:
    """The warm-up text, or a message list or subtitles when the pipeline's steps read those."""
    names = {info.name for step in spec.steps for info, _ in step.components}
    if "chunk.messages" in names or spec.output.get("format") == "messages":
        from compactor.document import Message
        from compactor.formats.messages import conversation_source

        first, second = WARM_UP_TEXT.split("\n\n")
        turns = [Message("user", WARM_UP_QUERY), Message("assistant", first), Message("user", second)]
        return conversation_source(turns * 8)  # long enough for a ratio budget to hold a summary
    if names & {"chunk.segments", "organize.hierarchical"}:
        from compactor.document import TranscriptSegment
        from compactor.formats.transcripts import transcript_source

        lines = WARM_UP_TEXT.replace("\n\n", " ").split(". ")
        return transcript_source([TranscriptSegment(i, 2.0 * i, 2.0 * i + 2, line)
                                  for i, line in enumerate(lines)], "warm-up")
    return WARM_UP_TEXT


def _kind(value: Any) -> str:
    return "None" if value is None else f"{type(value).__name__} {value!r}"[:80]


def _source(item: Any) -> Source:
    if isinstance(item, Source):
        return item
    hint = " (decode it first, e.g. data.decode('utf-8'))" if isinstance(item, bytes | bytearray) else ""
    raise InputError(f"every input must be text (str) or a Source, got {_kind(item)}{hint}")


def _check_arguments(inputs: Any, query: Any, budget: Any) -> None:
    """What the CLI checks, checked for Python callers too, in one sentence each."""
    if inputs is None or isinstance(inputs, bytes | bytearray | int | float | Mapping):
        hint = (" (decode it first, e.g. data.decode('utf-8'))"
                if isinstance(inputs, bytes | bytearray) else "")
        raise InputError("the input must be text (str), a Source, a list of them or a Context, "
                         f"got {_kind(inputs)}{hint}")
    if not isinstance(inputs, str | Source | Context) and not hasattr(inputs, "__iter__"):
        raise InputError("the input must be text (str), a Source, a list of them or a Context, "
                         f"got {_kind(inputs)}")
    if query is not None and not isinstance(query, str):
        raise InputError(f"query must be text (str) or None, got {_kind(query)}")
    if isinstance(budget, Budget):
        if budget.max_tokens is not None and (isinstance(budget.max_tokens, bool) or not isinstance(
                budget.max_tokens, int) or budget.max_tokens <= 0):
            raise InputError(f"Budget.max_tokens must be a whole number of tokens > 0, got "
                             f"{_kind(budget.max_tokens)}")
        if budget.ratio is not None and not (isinstance(budget.ratio, int | float)
                                             and 0 < budget.ratio <= 1):
            raise InputError(f"Budget.ratio must be in (0, 1], got {_kind(budget.ratio)}")
        return
    if budget is None:
        return
    if isinstance(budget, bool) or not isinstance(budget, int):
        raise InputError(f"budget must be a whole number of tokens (int) or a Budget, got "
                         f"{_kind(budget)}")
    if budget <= 0:
        raise InputError(f"budget must be greater than 0 tokens, got {budget}")


def merged_llm(spec: Mapping[str, Any], override: Mapping[str, Any] | None) -> dict[str, Any]:
    """The pipeline's `llm:` section with a run's overrides (None values ignored). A key belongs to
    its endpoint: an override that sends the calls to another server without naming a key does not
    inherit the pipeline file's key."""
    given = {k: v for k, v in (override or {}).items() if v is not None}
    merged = {**spec, **given}
    before = spec.get("base_url") or os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL
    moved = given.get("base_url") and not same_endpoint(str(given["base_url"]), str(before))
    if moved and "api_key" not in given:
        merged.pop("api_key", None)
    return merged


class Pipeline:
    """A validated pipeline bound to its own plugin manager, ready to run many times."""

    def __init__(self, spec: PipelineSpec, registry: Registry) -> None:
        self.spec = spec
        self.registry = registry
        self.counter: TokenCounter = get_counter(spec.tokenizer)
        pm = registry.pm
        self._observer = StepObserver()
        pm.register(self._observer, name="compactor.observer")
        pm.register(_StepEngine(self), name="compactor.engine")
        self._instances: list[tuple[StepSpec, str, Component]] = []
        #: The components of each step, by `id` of its StepSpec (the spec keeps the steps alive).
        self._step_components: dict[int, list[tuple[str, Component]]] = {}
        for step in spec.steps:
            for info, params in step.components:
                try:
                    instance = info.cls(**params)
                except Exception as exc:
                    raise ConfigError(Problem(f"{info.name}: {exc}", spec.file,
                                              field=f"steps[{step.index}].with")) from None
                pm.register(instance, name=f"step{step.index}:{info.name}")
                self._instances.append((step, info.name, instance))
                self._step_components.setdefault(id(step), []).append((info.name, instance))
        self._renderers: dict[str, Component] = {}
        self._render_steps: dict[str, StepSpec] = {}
        self._renderers_lock = threading.Lock()

    @classmethod
    def from_yaml(
        cls, name_or_path: str | os.PathLike[str], *, plugins: Iterable[Any] = (),
        env: Mapping[str, str] | None = None,
    ) -> Pipeline:
        """Load a pipeline file (or a shipped pipeline by name, e.g. "generic")."""
        text, file = read_pipeline_text(name_or_path)
        return cls.from_string(text, file=file, plugins=plugins, env=env)

    @classmethod
    def from_string(
        cls, text: str, *, file: str = "<string>", plugins: Iterable[Any] = (),
        env: Mapping[str, str] | None = None, folder: str | os.PathLike[str] | None = None,
    ) -> Pipeline:
        """Load a pipeline from YAML text; `file` names it in error messages. Its data paths
        (prompts, pattern tables) resolve inside `folder`: by default the file's folder, the
        package's for a shipped pipeline, else the current directory."""
        registry = build_registry(plugins=plugins, env=env)
        where = Path(folder) if folder is not None else pipeline_folder(file)
        return cls(load_spec(text, file, registry, env, where), registry)

    def observe(self, observer: Any, name: str | None = None) -> None:
        """Register an observer plugin (hook wrappers of `compactor_run` / `compactor_step`) with this
        pipeline after it was built, as `plugins=` would have; `name` keeps it unique."""
        self.registry.pm.register(observer, name=name)

    def print_config(self) -> str:
        """The resolved configuration with every default, as YAML."""
        import yaml

        from compactor.llm.client import redact_url

        config = self.spec.to_dict()
        llm = config.get("llm") or {}
        if llm.get("base_url"):  # a key inside the URL (user:key@host, ?api_key=) is not shown
            config["llm"] = {**llm, "base_url": redact_url(str(llm["base_url"]))}
        return yaml.safe_dump(config, sort_keys=False, allow_unicode=True)

    # -- running ---------------------------------------------------------------------------

    def _caller(self, stage: str, keep: Component) -> Callable[..., Any]:
        """The stage hook of `keep` alone: every other plugin object (other steps' components,
        plugins that happen to implement a stage hook) is left out."""
        pm = self.registry.pm
        return pm.subset_hook_caller(STAGE_HOOKS[stage], remove_plugins=pm.get_plugins() - {keep})

    def _render_step(self, fmt: str) -> StepSpec:
        """The step rendering a format when the pipeline has no render step (or another format is
        asked for), with the format's default renderer: made once even when runs share the
        pipeline across threads (shipped pipelines are shared: see `resolved_pipeline`)."""
        step = self._render_steps.get(fmt)
        if step is not None:
            return step
        with self._renderers_lock:
            if fmt not in self._render_steps:
                info = self.registry.get(f"render.{fmt}")
                renderer = info.cls()
                self.registry.pm.register(renderer, name=f"default-render:{fmt}")
                self._renderers[fmt] = renderer
                step = StepSpec(len(self.spec.steps), info.name, "render", ())
                self._step_components[id(step)] = [(info.name, renderer)]
                self._render_steps[fmt] = step
            return self._render_steps[fmt]

    def run(
        self,
        inputs: str | Source | Iterable[Source | str] | Context,
        *,
        query: str | None = None,
        budget: int | Budget | None = None,
        output_format: str | None = None,
        progress: Progress | None = None,
        store: Any = None,
        session: str | None = None,
        llm: Mapping[str, Any] | None = None,
    ) -> Context:
        """Run every step on `inputs` and return the final context (`.output` is the text).

        `store` and `session` (a `compactor.store.ChunkStore` and a session id) are offered to the
        components as `run.settings["session"]`, for the ones that consult what a session holds.
        `llm` overrides keys of the pipeline's `llm:` section for this run (model, base_url, ...).
        Observers see the whole run through the `compactor_run` hook (see `compactor.hookspecs`).
        """
        render_steps = [name for s, name, _ in self._instances if s.stage == "render"]
        declared = render_steps[-1].split(".", 1)[1] if render_steps else self.spec.output["format"]
        fmt = output_format or declared
        run = Run(counter=self.counter.for_run(), pipeline=self.spec.name,
                  settings={"llm": merged_llm(self.spec.llm, llm), "store": self.spec.store,
                            "output": {**self.spec.output, "format": fmt},
                            "session": {"store": store, "id": session} if store is not None else {}})

        def execute(pipeline: Pipeline, run: Run) -> Context:
            # A run allocates millions of small acyclic objects (terms, chunks, scores); the cyclic
            # collector would walk all of them again and again (15-20% of a 300k-token run, growing
            # with the input). It is paused for the run and resumes, collecting as usual, after it.
            _gc_pause()
            try:
                return pipeline._steps(inputs, query, budget, output_format, fmt, progress, run)
            finally:
                _gc_resume()

        hook = self.registry.pm.hook.compactor_run
        if not hook.get_hookimpls():  # nobody observes runs: no hook call
            return execute(self, run)
        result = hook.call_extra([execute], {"pipeline": self, "run": run})
        if not isinstance(result, Context):
            raise StageError(f"a compactor_run wrapper returned {type(result).__name__}, not a Context")
        return result

    def _steps(self, inputs: str | Source | Iterable[Source | str] | Context, query: str | None,
               budget: int | Budget | None, output_format: str | None, fmt: str,
               progress: Progress | None, run: Run) -> Context:
        context = with_counts(self._initial(inputs, query, budget), run, conversation_counts)
        # only the built-in observer and engine implement the step hook: measure the steps here
        # rather than through a hook call per step (the same bookkeeping, `StepObserver.measured`)
        observed = len(self.registry.pm.hook.compactor_step.get_hookimpls()) > 2
        steps = list(self.spec.steps)
        explicit_render = any(s.stage == "render" for s in steps)
        total = len(steps) + (0 if explicit_render else 1)
        position = 0
        retries = 0
        before_compress: tuple[int, Context] | None = None
        while position < len(steps):
            step = steps[position]
            if progress:
                progress(position, total, step.label)
            if step.stage == "compress":
                before_compress = (position, context)
            context = self._run_step(step, context, run, observed)
            retry = self._retry_request(step, run) if step.stage == "validate" else None
            if retry and before_compress is not None and retries < MAX_RETRIES:
                retries += 1
                position, snapshot = before_compress
                context = snapshot.evolve(reports=context.reports,
                                          state=snapshot.state.with_(_retry_state(snapshot, retry)))
                continue
            position += 1
        if not explicit_render or output_format:
            if progress:
                progress(total - 1, total, f"render.{fmt}")
            context = self._run_step(self._render_step(fmt), context, run, observed)
        if progress:
            progress(total, total, "done")
        limit = context.resolved_budget()
        renderer_budgeted = context.state.get(RenderInfo, RenderInfo()).budgeted
        if (limit is not None and renderer_budgeted and context.output_tokens is not None
                and context.output_tokens > limit):
            raise BudgetError(f"a budget of {limit} tokens is too small for the {self.spec.name} "
                              f"pipeline: its smallest output ({context.reports[-1].step}) has "
                              f"{context.output_tokens} tokens; use a budget of at least "
                              f"{context.output_tokens}")
        if limit is not None and not (context.output or "").strip():
            smallest = min((c.tokens for c in context.chunks if c.text.strip()), default=0)
            if smallest > limit:
                raise BudgetError(f"a budget of {limit} tokens is too small for any output of the "
                                  f"{self.spec.name} pipeline: its smallest chunk has {smallest} "
                                  f"tokens; use a budget of at least {smallest}")
        return context

    def _initial(
        self, inputs: str | Source | Iterable[Source | str] | Context, query: str | None,
        budget: int | Budget | None,
    ) -> Context:
        _check_arguments(inputs, query, budget)
        if isinstance(inputs, Context):
            context = inputs
        else:
            if isinstance(inputs, str):
                sources: tuple[Source, ...] = (Source.from_text(inputs),)
            elif isinstance(inputs, Source):
                sources = (inputs,)
            else:  # Sources, or plain strings (one text source each)
                sources = tuple(Source.from_text(i) if isinstance(i, str) else _source(i)
                                for i in inputs)
            if not sources or all(not s.text.strip() for s in sources):
                raise InputError("the input is empty: there is no text to compress")
            context = Context(sources=sources, query=self.spec.query, budget=self.spec.budget)
        if query is not None:
            context = context.evolve(query=query)
        if isinstance(budget, int):
            context = context.evolve(budget=Budget(max_tokens=budget))
        elif isinstance(budget, Budget):
            context = context.evolve(budget=budget)
        return context

    @staticmethod
    def _retry_request(step: StepSpec, run: Run) -> Mapping[str, Any] | None:
        """A validator asks for another compression by returning `retry: {budget_share: ...,
        ratio_attempts: [...]}` (the fields of the `BudgetShare` the compress step runs with)."""
        for info, _ in step.components:
            retry = run.results.get(info.name, {}).get("retry")
            if isinstance(retry, Mapping):
                unknown = set(retry) - set(_RETRY_FIELDS)
                if unknown:
                    raise StageError(f"{info.name} asked for a retry with {', '.join(sorted(unknown))}; "
                                     f"a retry may set {', '.join(_RETRY_FIELDS)}")
                return retry
        return None

    def _lookup(self, context: Context, run: Run) -> Callable[[str], Any]:
        values: dict[str, Any] = {
            "tokens": context.tokens,
            "input_tokens": context.input_tokens,
            "budget": context.resolved_budget(),
            "chunks": len(context.chunks),
            "sources": len(context.sources),
            "segments": len(context.segments),
            "query": context.query,
        }
        values.update(run.results)
        return namespace_lookup(values)

    def _run_step(self, step: StepSpec, context: Context, run: Run, observed: bool = True) -> Context:
        if step.stage != "clean" and RunInputs not in context.state:
            context = context.with_state(RunInputs(context.tokens))
        record = StepRecord(step.index, step.label, step.stage)
        run.step = record
        if step.when is not None and not step.when.evaluate(self._lookup(context, run)):
            report = StepReport(step.index, step.label, step.stage, context.tokens, context.tokens,
                                0.0, skipped=True, details={"when": step.when.source})
            return context.evolve(reports=(*context.reports, report))
        try:  # observers wrap the step; `_StepEngine` runs it
            if observed:
                result = self.registry.pm.hook.compactor_step(step=step, context=context, run=run)
            else:
                components = self._step_components[id(step)]
                result = self._observer.measured(
                    step, context, run, lambda: self._execute(step, components, context, run))
        except BaseException:
            run.failed_step = step.label
            raise
        if not isinstance(result, Context):
            run.failed_step = step.label
            raise StageError(f"{self.spec.file}: step {step.index} ({step.label}) gave "
                             f"{type(result).__name__}, not a Context (a compactor_step wrapper?)")
        context = result
        report = StepReport(step.index, step.label, step.stage, record.tokens_in,
                            record.tokens_out, record.seconds, details=frozen_mapping(record.details),
                            warnings=tuple(record.warnings))
        return context.evolve(reports=(*context.reports, report))

    def _execute(self, step: StepSpec, components: Sequence[tuple[str, Component]], context: Context,
                 run: Run) -> Context:
        """Call the step's stage hook on each of its components and combine what they return."""
        score_sets: list[ScoreSet] = []
        try:
            for name, instance in components:
                if step.stage == "score":  # the scorers of one step score the same chunks
                    found = self._score(name, instance, context, run)
                    if found is not None:
                        score_sets.append(found)
                    continue
                context = self._call(step.stage, name, instance, context, run)
        except CompactorError:
            raise
        except Exception as exc:
            raise StageError(f"{self.spec.file}: step {step.index} ({step.label}) failed: "
                             f"{type(exc).__name__}: {exc}") from exc
        if step.stage == "score":
            context = _merge_scores(context, score_sets, step.weights)
        return context

    def _score(self, name: str, instance: Component, context: Context, run: Run) -> ScoreSet | None:
        result = self._caller("score", instance)(context=context, run=run)
        result = result[0] if result else None
        if result is not None and not isinstance(result, ScoreSet):
            raise StageError(f"{name} returned {type(result).__name__}, not a ScoreSet")
        return result

    def _call(self, stage: str, name: str, instance: Component, context: Context, run: Run) -> Context:
        result = self._caller(stage, instance)(context=context, run=run)
        if stage in ("classify", "score", "validate"):
            result = result[0] if result else None
        if stage == "classify":
            return _merge_labels(context, result or {})
        if stage == "score":
            found = self._score(name, instance, context, run)
            return context if found is None else _merge_scores(context, [found], {})
        if stage == "validate":
            report = dict(result or {})
            run.results[name] = report
            run.note(name, report)
            if LossReport in instance.provides:
                context = context.with_state(LossReport.of(name, report))
            return context
        if stage == "render":
            if not isinstance(result, str):
                raise StageError(f"{name} rendered {type(result).__name__}, not text")
            return context.evolve(output=result, output_tokens=run.counter.count(result),
                                  state=context.state.with_(RenderInfo(instance.budgeted)))
        if result is None:
            if stage == "fallback":
                if run.step is not None:
                    run.step.details.setdefault("declined", True)
                return context
            raise StageError(f"{name} returned nothing for its {stage} step")
        if not isinstance(result, Context):
            raise StageError(f"{name} returned {type(result).__name__}, not a Context")
        return with_counts(result, run, conversation_counts, before=context)


class _StepEngine:
    """The one plain `compactor_step` implementation of a pipeline's plugin manager: runs the
    steps of its pipeline (and declines others), inside every observer's step wrapper."""

    def __init__(self, pipeline: Pipeline) -> None:
        self._pipeline = pipeline

    @hookimpl(trylast=True)
    def compactor_step(self, step: StepSpec, context: Context, run: Run) -> Context | None:
        components = self._pipeline._step_components.get(id(step))
        if components is None:
            return None
        return self._pipeline._execute(step, components, context, run)


_RETRY_FIELDS = ("budget_share", "ratio_attempts", "fill")


def _retry_state(snapshot: Context, retry: Mapping[str, Any]) -> BudgetShare:
    """The `BudgetShare` a validator's retry request asks the compress step to run with."""
    current = snapshot.state.get(BudgetShare, BudgetShare())
    return current.evolve(share=float(retry.get("budget_share", current.share)),
                          attempts=tuple(retry.get("ratio_attempts", current.attempts)),
                          fill=float(retry.get("fill", current.fill)))


def _rebuilt(chunk: Chunk, labels: Mapping[str, Any], scores: Mapping[str, float],
             features: Mapping[str, Mapping[str, Any]]) -> Chunk:
    """`chunk` with new labels, scores and features, built directly (`dataclasses.replace` costs 3x
    per chunk, and a step rebuilds every chunk)."""
    return Chunk(chunk.id, chunk.source_id, chunk.index, chunk.start, chunk.end, chunk.text,
                 chunk.tokens, chunk.lang, labels, scores, features, chunk.units)


def _merge_labels(context: Context, labels: Mapping[str, Mapping[str, Any]]) -> Context:
    if not labels:
        return context
    chunks = tuple(c if (found := labels.get(c.id)) is None
                   else _rebuilt(c, _frozen({**c.labels, **found}), c.scores, c.features)
                   for c in context.chunks)
    return context.evolve(chunks=chunks)


_EMPTY = frozen_mapping(None)


def _frozen(values: dict[str, Any]) -> Mapping[str, Any]:
    """`frozen_mapping` of a dict made here and held by nobody else: no second copy."""
    return MappingProxyType(values) if values else _EMPTY


def _merge_scores(context: Context, score_sets: Sequence[ScoreSet],
                  weights: Mapping[str, float]) -> Context:
    """Every score set's values (clamped to [0, 1]) and features on the chunks, and `combined` =
    the weighted mean of every score a chunk has (weight 1 unless configured): one pass over the
    chunks, one new chunk each."""
    if not score_sets:
        return _combine(context, weights) if weights else context
    sets = [(found.name, found.values, found.features) for found in score_sets]
    weight = weights.get
    chunks = []
    for chunk in context.chunks:
        scores = dict(chunk.scores)
        features = None
        cid = chunk.id
        for name, values, extras in sets:
            value = values.get(cid)
            if value is None:
                continue
            value = float(value)
            scores[name] = (1.0 if value > 1.0 else value) if value > 0.0 else 0.0  # NaN is 0
            extra = extras.get(cid) if extras else None
            if extra is not None:
                if features is None:
                    features = dict(chunk.features)
                features[name] = MappingProxyType(dict(extra)) if extra else _EMPTY
        parts = [(v, weight(k, 1.0)) for k, v in scores.items() if k != "combined"]
        total = sum([w for _, w in parts])
        if parts and total > 0:
            scores["combined"] = sum([v * w for v, w in parts]) / total
        chunks.append(_rebuilt(chunk, chunk.labels, _frozen(scores),
                               _frozen(features) if features is not None else chunk.features))
    return context.evolve(chunks=tuple(chunks))


def _combine(context: Context, weights: Mapping[str, float]) -> Context:
    return _merge_scores(context, [ScoreSet("", {})], weights)
