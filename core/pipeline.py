"""Running a resolved pipeline: one plugin manager per pipeline, one subset caller per component."""

from __future__ import annotations

import functools
import gc
import importlib.resources
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from compactor.components import Component, ScoreSet
from compactor.conditions import namespace_lookup
from compactor.config import PipelineSpec, StepSpec, load_spec
from compactor.document import Budget, Chunk, Context, Source, StepReport, frozen_mapping
from compactor.errors import BudgetError, CompactorError, ConfigError, InputError, Problem, StageError
from compactor.hookspecs import STAGE_HOOKS
from compactor.observe import StepObserver, with_counts
from compactor.ops.monitor import RunRecorder
from compactor.registry import Registry, build_registry
from compactor.run import Run, StepRecord
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


class Pipeline:
    """A validated pipeline bound to its own plugin manager, ready to run many times."""

    def __init__(self, spec: PipelineSpec, registry: Registry) -> None:
        self.spec = spec
        self.registry = registry
        self.counter: TokenCounter = get_counter(spec.tokenizer)
        pm = registry.pm
        pm.register(StepObserver(), name="compactor.observer")
        self._instances: list[tuple[StepSpec, str, Component]] = []
        for step in spec.steps:
            for info, params in step.components:
                try:
                    instance = info.cls(**params)
                except Exception as exc:
                    raise ConfigError(Problem(f"{info.name}: {exc}", spec.file,
                                              field=f"steps[{step.index}].with")) from None
                pm.register(instance, name=f"step{step.index}:{info.name}")
                self._instances.append((step, info.name, instance))
        self._renderers: dict[str, Component] = {}
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

    def record_runs(self, store: Any) -> None:
        """Record every run of this pipeline (time, tokens, ratio, loss, fallback, success) into a
        store (a path or a `ChunkStore`); see `compactor.ops.monitor`."""
        from compactor.store import open_store

        self.registry.pm.register(RunRecorder(open_store(store), self.spec.name or "<inline>"),
                                  name=f"compactor.ops.monitor.{id(store)}")

    def print_config(self) -> str:
        """The resolved configuration with every default, as YAML."""
        import yaml

        return yaml.safe_dump(self.spec.to_dict(), sort_keys=False, allow_unicode=True)

    # -- running ---------------------------------------------------------------------------

    def _caller(self, stage: str, keep: Component) -> Callable[..., Any]:
        others = [inst for _, _, inst in self._instances if inst is not keep]
        others += [r for r in self._renderers.values() if r is not keep]
        return self.registry.pm.subset_hook_caller(STAGE_HOOKS[stage], remove_plugins=others)

    def _renderer(self, fmt: str) -> Component:
        """The default renderer of a format, registered once even when runs share the pipeline
        across threads (shipped pipelines are shared: see `resolved_pipeline`)."""
        renderer = self._renderers.get(fmt)
        if renderer is not None:
            return renderer
        with self._renderers_lock:
            if fmt not in self._renderers:
                info = self.registry.get(f"render.{fmt}")
                renderer = info.cls()
                self.registry.pm.register(renderer, name=f"default-render:{fmt}")
                self._renderers[fmt] = renderer
            return self._renderers[fmt]

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
        """
        recorders = [p for p in self.registry.pm.get_plugins() if isinstance(p, RunRecorder)]
        if not recorders:
            return self._run(inputs, query, budget, output_format, progress, store, session, llm)
        started = time.perf_counter()
        try:
            result = self._run(inputs, query, budget, output_format, progress, store, session, llm)
        except BaseException as exc:
            for recorder in recorders:
                recorder.finish(started, None, error=f"{type(exc).__name__}: {exc}")
            raise
        for recorder in recorders:
            recorder.finish(started, result)
        return result

    def _run(self, inputs: str | Source | Iterable[Source | str] | Context, query: str | None,
             budget: int | Budget | None, output_format: str | None, progress: Progress | None,
             store: Any, session: str | None, llm: Mapping[str, Any] | None) -> Context:
        # A run allocates millions of small acyclic objects (terms, chunks, scores); the cyclic
        # collector would walk all of them again and again (15-20% of a 300k-token run, growing
        # with the input). It is paused for the run and resumes, collecting as usual, after it.
        _gc_pause()
        try:
            return self._steps(inputs, query, budget, output_format, progress, store, session, llm)
        finally:
            _gc_resume()

    def _steps(self, inputs: str | Source | Iterable[Source | str] | Context, query: str | None,
               budget: int | Budget | None, output_format: str | None, progress: Progress | None,
               store: Any, session: str | None, llm: Mapping[str, Any] | None) -> Context:
        context = self._initial(inputs, query, budget)
        render_steps = [name for s, name, _ in self._instances if s.stage == "render"]
        declared = render_steps[-1].split(".", 1)[1] if render_steps else self.spec.output["format"]
        fmt = output_format or declared
        run = Run(counter=self.counter, pipeline=self.spec.name,
                  settings={"llm": {**self.spec.llm, **{k: v for k, v in (llm or {}).items()
                                                          if v is not None}}, "store": self.spec.store,
                            "output": {**self.spec.output, "format": fmt},
                            "session": {"store": store, "id": session} if store is not None else {}})
        context = with_counts(context, run)
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
            context = self._run_step(step, context, run)
            retry = self._retry_request(step, run) if step.stage == "validate" else None
            if retry and before_compress is not None and retries < MAX_RETRIES:
                retries += 1
                position, snapshot = before_compress
                context = snapshot.evolve(reports=context.reports,
                                          meta=frozen_mapping({**snapshot.meta, **retry}))
                continue
            position += 1
        if not explicit_render or output_format:
            if progress:
                progress(total - 1, total, f"render.{fmt}")
            render_step = StepSpec(len(steps), f"render.{fmt}", "render", ())
            context = self._run_step(render_step, context, run, override=self._renderer(fmt))
        if progress:
            progress(total, total, "done")
        limit = context.resolved_budget()
        renderer_budgeted = context.meta.get("render_budgeted", True)
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
        """A validator asks for another compression by returning `retry: {meta updates}`."""
        for info, _ in step.components:
            retry = run.results.get(info.name, {}).get("retry")
            if isinstance(retry, Mapping):
                return retry
        return None

    def _lookup(self, context: Context, run: Run) -> Callable[[str], Any]:
        values: dict[str, Any] = {
            "tokens": context.tokens,
            "input_tokens": context.meta.get("input_tokens", context.tokens),
            "budget": context.resolved_budget(),
            "chunks": len(context.chunks),
            "sources": len(context.sources),
            "segments": len(context.segments),
            "query": context.query,
        }
        values.update(run.results)
        return namespace_lookup(values)

    def _run_step(
        self, step: StepSpec, context: Context, run: Run, override: Component | None = None,
    ) -> Context:
        if step.stage != "clean" and "input_tokens" not in context.meta:
            context = context.evolve(meta=frozen_mapping({**context.meta,
                                                          "input_tokens": context.tokens}))
        record = StepRecord(step.index, step.label, step.stage)
        run.step = record
        if step.when is not None and not step.when.evaluate(self._lookup(context, run)):
            report = StepReport(step.index, step.label, step.stage, context.tokens, context.tokens,
                                0.0, skipped=True, details={"when": step.when.source})
            return context.evolve(reports=(*context.reports, report))
        components = ([(override.name, override)] if override is not None else
                      [(name, inst) for s, name, inst in self._instances if s is step])
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
        report = StepReport(step.index, step.label, step.stage, record.tokens_in,
                            record.tokens_out, record.seconds, details=frozen_mapping(record.details),
                            warnings=tuple(record.warnings))
        return context.evolve(reports=(*context.reports, report))

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
            return context
        if stage == "render":
            if not isinstance(result, str):
                raise StageError(f"{name} rendered {type(result).__name__}, not text")
            tokens = run.step.tokens_out if run.step else self.counter.count(result)
            meta = {**context.meta, "render_budgeted": getattr(instance, "budgeted", True)}
            return context.evolve(output=result, output_tokens=tokens, meta=frozen_mapping(meta))
        if result is None:
            if stage == "fallback":
                if run.step is not None:
                    run.step.details.setdefault("declined", True)
                return context
            raise StageError(f"{name} returned nothing for its {stage} step")
        if not isinstance(result, Context):
            raise StageError(f"{name} returned {type(result).__name__}, not a Context")
        return result


def _merge_labels(context: Context, labels: Mapping[str, Mapping[str, Any]]) -> Context:
    if not labels:
        return context
    chunks = tuple(replace(c, labels=frozen_mapping({**c.labels, **labels[c.id]}))
                   if c.id in labels else c for c in context.chunks)
    return context.evolve(chunks=chunks)


def _merge_scores(context: Context, score_sets: Sequence[ScoreSet],
                  weights: Mapping[str, float]) -> Context:
    """Every score set's values (clamped to [0, 1]) and features on the chunks, and `combined` =
    the weighted mean of every score a chunk has (weight 1 unless configured): one new chunk each."""
    if not score_sets:
        return _combine(context, weights) if weights else context
    chunks = []
    for chunk in context.chunks:
        scores = dict(chunk.scores)
        features = None
        for found in score_sets:
            value = found.values.get(chunk.id)
            if value is None:
                continue
            scores[found.name] = min(1.0, max(0.0, float(value)))
            extra = found.features.get(chunk.id)
            if extra is not None:
                if features is None:
                    features = dict(chunk.features)
                features[found.name] = frozen_mapping(extra)
        parts = {k: v for k, v in scores.items() if k != "combined"}
        total = sum(weights.get(k, 1.0) for k in parts)
        if parts and total > 0:
            scores["combined"] = sum(v * weights.get(k, 1.0) for k, v in parts.items()) / total
        chunks.append(Chunk(chunk.id, chunk.source_id, chunk.index, chunk.start, chunk.end, chunk.text,
                            chunk.tokens, chunk.lang, chunk.labels, frozen_mapping(scores),
                            frozen_mapping(features) if features is not None else chunk.features,
                            chunk.units))  # direct: dataclasses.replace costs 3x per chunk
    return context.evolve(chunks=tuple(chunks))


def _combine(context: Context, weights: Mapping[str, float]) -> Context:
    return _merge_scores(context, [ScoreSet("", {})], weights)
