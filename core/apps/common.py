"""What every application face shares: one way to name a pipeline (a shipped name, a file or a
`Pipeline`, with `plugins`), LLM settings as a mapping, and inputs read as the CLI reads them."""

from __future__ import annotations

import dataclasses
import difflib
import os
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any, ParamSpec, TypeVar

from compactor.components import Requirement
from compactor.document import Context, Source
from compactor.errors import InputError
from compactor.llm.client import LLMSettings
from compactor.pipeline import Pipeline, resolved_pipeline

#: What every face's `pipeline=` accepts.
PipelineArg = str | os.PathLike[str] | Pipeline

_P = ParamSpec("_P")
_R = TypeVar("_R")


def refuse_unknown(face: str, given: Mapping[str, Any], allowed: Collection[str]) -> None:
    """Refuse keywords a face does not take when it is built, not when a later call trips on them
    (a typo such as `keep_lst=3` would otherwise fail many turns into an agent's run, or never)."""
    if not given:
        return
    problems = []
    for key in given:
        close = difflib.get_close_matches(key, list(allowed), n=1, cutoff=0.6)
        hint = f"did you mean {close[0]}?" if close else f"options: {', '.join(sorted(allowed))}"
        problems.append(f"{key}: unknown option; {hint}")
    raise InputError(f"{face}: " + "; ".join(problems))


async def in_worker(function: Callable[_P, _R], *args: _P.args, **kwargs: _P.kwargs) -> _R:
    """`function(*args, **kwargs)` in a worker thread of the loop's default executor: compaction is
    CPU work (and an LLM rewrite a blocking call), so an async caller's other tasks keep running."""
    import asyncio  # only async callers pay for importing it

    return await asyncio.to_thread(function, *args, **kwargs)  # the context (contextvars) goes along


async def acompress(text: Any, **options: Any) -> str:
    """`compactor.compress` for async code: the same arguments and result, the work in a worker
    thread so the event loop is never blocked."""
    from compactor import compress

    return await in_worker(compress, text, **options)


def pipeline_for(pipeline: PipelineArg, plugins: Iterable[Any] = ()) -> Pipeline:
    """The pipeline a face runs: a shipped name or a file (resolved once while the file, the plugins
    and the environment stay the same), or a `Pipeline` as given. `plugins` (objects with hookimpls,
    e.g. a module registering a third-party component) apply to names and files; a `Pipeline` was
    built with its own."""
    plugins = tuple(plugins)
    if isinstance(pipeline, Pipeline):
        if plugins:
            raise InputError("plugins= applies to a pipeline given by name or file; a Pipeline object "
                             "holds its own (Pipeline.from_yaml(..., plugins=...))")
        return pipeline
    if not isinstance(pipeline, str | os.PathLike):
        raise InputError(f"pipeline must be a shipped pipeline's name, a file or a Pipeline, "
                         f"not {type(pipeline).__name__}")
    return resolved_pipeline(pipeline, plugins=plugins)


def check_overrides(runner: Pipeline, item: Requirement, options: Mapping[str, Any]) -> None:
    """Refuse per-run values (a face's keywords, CLI flags) for the parameters of the steps that
    provide `item` before anything runs, by each component's own schema: the InputError says what a
    pipeline file's `with:` would be told. Options that are no parameter of the step are the face's."""
    for step, info in runner.spec.providers(item):
        current = next(params for found, params in step.components if found is info)
        given = {key: value for key, value in options.items() if key in current}
        problems = info.cls.override_problems(current, given) if given else []
        if problems:
            raise InputError("; ".join(problems))


def llm_mapping(llm: Any) -> dict[str, Any] | None:
    """LLM settings as the mapping `Pipeline.run(llm=...)` takes (None: no LLM; True: the pipeline's)."""
    if llm is None or llm is False:
        return None
    if llm is True:
        return {}
    if isinstance(llm, LLMSettings):
        return {f.name: getattr(llm, f.name) for f in dataclasses.fields(llm)}
    if isinstance(llm, Mapping):
        return dict(llm)
    raise InputError(f"llm must be None, True, a mapping of LLM settings or LLMSettings, "
                     f"not {type(llm).__name__}")


def inputs_of(inputs: Any) -> Any:
    """What `Pipeline.run` takes, from what a face accepts: records (a mapping, or a list holding
    mappings) and records files (a path) are read by `compactor.formats.records`, the reader of
    `compactor-run` and batch mode, so every face accepts the same records; text, Sources and
    Contexts pass through (and are checked by `Pipeline.run`)."""
    from compactor.formats.records import Item, read_paths, record_source, sources_from_records

    if isinstance(inputs, os.PathLike):
        return read_paths([inputs])
    if isinstance(inputs, Mapping):
        return sources_from_records(inputs)
    if isinstance(inputs, str | bytes | bytearray | Source | Context) or not isinstance(inputs, Iterable):
        return inputs
    items = list(inputs)
    if items and all(isinstance(i, Mapping) for i in items):
        return sources_from_records(items)
    return [record_source(Item(i, f"records[{n}]")) if isinstance(i, Mapping) else i
            for n, i in enumerate(items)]
