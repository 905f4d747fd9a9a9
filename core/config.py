"""Pipeline files: parse with positions, validate everything, resolve to a `PipelineSpec`.

Pass 1 (`yamlmarks`): YAML syntax, duplicate keys, positions. Pass 2 (`validate`): unknown keys,
component names, parameter names and types, `when:` grammar, stage order and requirements, all
problems collected and reported at once. Pass 3: a `PipelineSpec` with every default filled in.
"""

from __future__ import annotations

import difflib
import os
import pathlib
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import regex

from compactor.components import CONTRIBUTING_STAGES, STAGES, DataPath, check_type, type_name
from compactor.conditions import Condition, parse_condition
from compactor.document import Budget
from compactor.errors import ConditionError, ConfigError, Problem
from compactor.registry import ComponentInfo, Registry
from compactor.state import RenderInfo, RunInputs, state_name
from compactor.yamlmarks import Marked, Path, load_marked

OUTPUT_FORMATS = ("text", "markdown", "json", "messages")
#: State the pipeline itself provides to every step (the input size; the renderer's budget promise).
PIPELINE_PROVIDES = (RunInputs, RenderInfo)
CONDITION_NAMES = ("tokens", "input_tokens", "budget", "chunks", "sources", "segments", "query")

# key -> (type hint, default, check returning an error message or None)
_Check = Callable[[Any], str | None]
_TOP_KEYS = ("version", "name", "description", "tokenizer", "query", "budget", "store", "llm",
             "steps", "output")
_STEP_KEYS = ("use", "with", "when", "id", "weights")


def _positive(value: Any) -> str | None:
    return None if value > 0 else "must be greater than 0"


def _ratio(value: Any) -> str | None:
    return None if 0 < value <= 1 else "must be in (0, 1]"


def _non_negative(value: Any) -> str | None:
    return None if value >= 0 else "must be 0 or more"


_SECTIONS: dict[str, dict[str, tuple[Any, Any, _Check | None]]] = {
    "budget": {
        "max_tokens": (int | None, None, _positive),
        "ratio": (float | None, None, _ratio),
    },
    "store": {
        "path": (str | None, None, None),
        "session": (str | None, None, None),
    },
    "llm": {
        "model": (str | None, None, None),
        "base_url": (str | None, None, None),
        "api_key": (str | None, None, None),
        "temperature": (float, 0.3, _non_negative),
        "max_tokens": (int, 1500, _positive),
        "timeout": (float, 60.0, _positive),
        "max_retries": (int, 3, _non_negative),
        "deadline": (float | None, 30.0, lambda v: None if v is None or v >= 0 else
                     "must be a number of seconds >= 0 (0 or null: no deadline)"),
        "concurrency": (int, 4, _positive),
    },
    "output": {
        "format": (str, "text", lambda v: None if v in OUTPUT_FORMATS
                   else f"must be one of {', '.join(OUTPUT_FORMATS)}"),
        "titles": (bool, True, None),
        "citations": (str, "none", lambda v: None if v in ("none", "ids", "footnotes")
                      else "must be one of none, ids, footnotes"),
    },
}


@dataclass(frozen=True, slots=True)
class StepSpec:
    """One resolved step: its components with full parameters, and its condition."""

    index: int
    label: str
    stage: str
    components: tuple[tuple[ComponentInfo, Mapping[str, Any]], ...]
    when: Condition | None = None
    weights: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class PipelineSpec:
    """A validated pipeline with every default filled in."""

    file: str
    name: str
    description: str
    tokenizer: str
    query: str | None
    budget: Budget
    store: Mapping[str, Any]
    llm: Mapping[str, Any]
    output: Mapping[str, Any]
    steps: tuple[StepSpec, ...]

    def providers(self, item: Any) -> list[tuple[StepSpec, ComponentInfo]]:
        """The steps (with the component) that provide `item`: a state type such as `Knowledge`,
        or a context part such as "segments". How applications find a step by what it does."""
        return [(step, info) for step in self.steps for info, _ in step.components
                if item in info.cls.provides]

    def provides(self, item: Any) -> bool:
        """Whether some step provides `item` (see `providers`)."""
        return bool(self.providers(item))

    def to_dict(self) -> dict[str, Any]:
        """The resolved configuration, as `--print-config` shows it."""
        steps = []
        for step in self.steps:
            uses = [info.name for info, _ in step.components]
            entry: dict[str, Any] = {"id": step.label, "use": uses[0] if len(uses) == 1 else uses}
            params = {info.name: dict(p) for info, p in step.components}
            entry["with"] = params[uses[0]] if len(uses) == 1 else params
            if step.when is not None:
                entry["when"] = step.when.source
            if step.weights:
                entry["weights"] = dict(step.weights)
            steps.append(entry)
        return {
            "version": 1,
            "name": self.name,
            "description": self.description,
            "tokenizer": self.tokenizer,
            "query": self.query,
            "budget": {"max_tokens": self.budget.max_tokens, "ratio": self.budget.ratio},
            "store": dict(self.store),
            "llm": {k: ("***" if k == "api_key" and v else v) for k, v in self.llm.items()},
            "steps": steps,
            "output": dict(self.output),
        }


_VAR = regex.compile(r"\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def interpolate(marked: Marked, env: Mapping[str, str]) -> list[Problem]:
    """Replace `${VAR}` and `${VAR:-default}` in every string value; `$$` is a literal `$`."""
    problems: list[Problem] = []

    def substitute(value: Any, path: Path) -> Any:
        if isinstance(value, str) and "$" in value:
            def repl(match: regex.Match[str]) -> str:
                if match.group(0) == "$$":
                    return "$"
                name, default = match.group(1), match.group(2)
                if name in env:
                    return env[name]
                if default is not None:
                    return default
                problems.append(marked.problem(path, f"environment variable {name} is not set "
                                               f"(write ${{{name}:-default}} to give a default)"))
                return ""
            return _VAR.sub(repl, value)
        if isinstance(value, dict):
            return {k: substitute(v, (*path, k)) for k, v in value.items()}
        if isinstance(value, list):
            return [substitute(v, (*path, i)) for i, v in enumerate(value)]
        return value

    marked.data = substitute(marked.data, ())
    return problems


def _suggest(name: str, choices: list[str]) -> str:
    close = difflib.get_close_matches(name, choices, n=1, cutoff=0.6)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    return f"{hint} Allowed: {', '.join(choices)}"


def _coerce_numbers(value: Any, hint: Any) -> Any:
    """YAML `1` for a float field is the float 1.0 in the resolved config."""
    if hint in (float, float | None) and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    return value


#: Parts of a field name that mark its value as a credential, never to be repeated in a message.
_SECRET_PARTS = frozenset({"key", "apikey", "token", "secret", "password", "passwd", "passphrase",
                           "credential", "credentials", "auth", "authorization", "bearer"})


def is_secret_field(name: str) -> bool:
    """Whether a field holds a credential (`api_key`, `access_token`, `client_secret`, ...): its
    value stays out of error messages, which end up in logs and CI output."""
    parts = regex.split(r"[_\-.\s]+|(?<=[a-z])(?=[A-Z])", str(name))
    return any(part.lower() in _SECRET_PARTS for part in parts)


def _shown(name: str, value: Any) -> str:
    """A wrongly typed value as an error message shows it: its type, and the value itself unless the
    field holds a credential."""
    kind = type(value).__name__
    return f"{kind} (value not shown: {name} holds a credential)" if is_secret_field(name) \
        else f"{kind} {value!r}"


def _section(marked: Marked, key: str, problems: list[Problem]) -> dict[str, Any]:
    schema = _SECTIONS[key]
    raw = marked.data.get(key)
    resolved = {name: default for name, (_, default, _) in schema.items()}
    if raw is None:
        return resolved
    if not isinstance(raw, dict):
        problems.append(marked.problem((key,), "must be a mapping"))
        return resolved
    for name, value in raw.items():
        if name not in schema:
            problems.append(marked.problem((key, name), f"unknown key {name!r}."
                                           + _suggest(name, list(schema)), at_key=True))
            continue
        hint, _, check = schema[name]
        if not check_type(value, hint):
            problems.append(marked.problem((key, name), f"expected {type_name(hint)}, "
                                           f"got {_shown(name, value)}"))
            continue
        if check is not None and value is not None and (message := check(value)):
            problems.append(marked.problem((key, name), message))
            continue
        resolved[name] = _coerce_numbers(value, hint)
    return resolved


def _step_components(
    marked: Marked, index: int, raw_step: dict[str, Any], registry: Registry,
    problems: list[Problem],
) -> list[tuple[ComponentInfo, dict[str, Any]]]:
    path: Path = ("steps", index)
    use = raw_step.get("use")
    names: list[str]
    if isinstance(use, str):
        names = [use]
    elif isinstance(use, list) and use and all(isinstance(u, str) for u in use):
        names = list(use)
    else:
        problems.append(marked.problem((*path, "use"), "must be a component name or a "
                                       "non-empty list of names"))
        return []
    resolved: list[tuple[ComponentInfo, dict[str, Any]]] = []
    for position, name in enumerate(names):
        use_path: Path = (*path, "use") if isinstance(use, str) else (*path, "use", position)
        info = registry.components.get(name)
        if info is None:
            problems.append(marked.problem(use_path, registry.unknown_message(name)))
            continue
        resolved.append((info, {}))
    stages = {info.stage for info, _ in resolved}
    if len(stages) > 1:
        problems.append(marked.problem((*path, "use"), "components of one step must share a "
                                       f"stage, got {', '.join(sorted(stages))}"))
        return []
    if len(names) > 1 and stages and not stages <= CONTRIBUTING_STAGES:
        problems.append(marked.problem((*path, "use"), f"only {', '.join(sorted(CONTRIBUTING_STAGES))}"
                                       " steps may list several components"))
        return []
    with_value = raw_step.get("with", {}) or {}
    if not isinstance(with_value, dict):
        problems.append(marked.problem((*path, "with"), "must be a mapping of parameters"))
        return resolved
    multi = len(names) > 1
    if multi:
        for key in with_value:
            if key not in names:
                problems.append(marked.problem((*path, "with", key), "with several components, "
                                               "`with:` maps component names to parameters."
                                               + _suggest(key, names)))
    for info, params in resolved:
        given = with_value.get(info.name, {}) if multi else with_value
        base: Path = (*path, "with", info.name) if multi else (*path, "with")
        _check_params(marked, base, info, given or {}, params, problems)
    return resolved


def _check_params(
    marked: Marked, base: Path, info: ComponentInfo, given: Any, out: dict[str, Any],
    problems: list[Problem],
) -> None:
    if not isinstance(given, dict):
        problems.append(marked.problem(base, "must be a mapping of parameters"))
        return
    declared = {p.name: p for p in info.cls.parameters()}
    for key, value in given.items():
        param = declared.get(key)
        if param is None:
            allowed = list(declared) or ["(none)"]
            problems.append(marked.problem((*base, key), f"{info.name} has no parameter {key!r}."
                                           + _suggest(key, allowed), at_key=True))
            continue
        if not check_type(value, param.annotation):
            problems.append(marked.problem((*base, key), f"{info.name} expects {param.type_name}, "
                                           f"got {_shown(key, value)}"))
            continue
        if _names_data_path(param.annotation) and isinstance(value, str):
            resolved, why = resolve_data_path(value, marked.folder)
            if why:
                problems.append(marked.problem((*base, key), f"{info.name}: {why}"))
                continue
            value = resolved
        out[key] = _coerce_numbers(value, param.annotation)
    for param in declared.values():
        if param.name not in out:
            if param.required:
                problems.append(marked.problem(base, f"{info.name} requires parameter "
                                               f"{param.name!r} ({param.type_name})"))
            else:
                out[param.name] = param.default
    if len(out) == len(declared):
        for message in info.cls.check_params(dict(out)):
            problems.append(marked.problem(base, f"{info.name}: {message}"))


def _names_data_path(annotation: Any) -> bool:
    return annotation is DataPath or DataPath in typing.get_args(annotation)


def _package_root() -> pathlib.Path:
    return pathlib.Path(__file__).resolve().parent.parent


def _inside_folder(value: str, folder: pathlib.Path, what: str, *, absolute_hint: str = "",
                   also: pathlib.Path | None = None) -> tuple[pathlib.Path | None, str | None]:
    """`value` resolved inside `folder` (or `also`), or why not: relative, no `..`, and no symlink
    out (resolving follows links). `what` names the path in the messages ("data file", "store")."""
    given = pathlib.PurePath(value)
    if given.is_absolute() or value.startswith("~"):
        return None, f"{what} {value!r} must be a relative path (inside the pipeline's folder){absolute_hint}"
    if ".." in given.parts:
        return None, f"{what} {value!r} must not leave the pipeline's folder ('..')"
    root = folder.resolve()
    target = (root / given).resolve()
    if not (target.is_relative_to(root) or (also is not None and target.is_relative_to(also))):
        return None, f"{what} {value!r} resolves outside the pipeline's folder ({target})"
    return target, None


def resolve_data_path(value: str, folder: pathlib.Path) -> tuple[str, str | None]:
    """A pipeline's data file (prompt, pattern table) as an absolute path inside the pipeline's
    folder or the compactor package, or why it is refused: pipeline files may come from someone
    else, and a path out of their folder would read any file (and send it to the LLM endpoint)."""
    if not value.strip():
        return value, "a data file path must not be empty"
    target, why = _inside_folder(value, folder, "data file", also=_package_root())
    if target is None:
        return value, why
    if not target.is_file():
        return value, f"data file {value!r} not found in {folder.resolve()}"
    return str(target), None


def resolve_store_path(value: str, folder: pathlib.Path) -> tuple[str, str | None]:
    """A pipeline's `store.path` as an absolute path inside the pipeline's folder, or why it is
    refused: as with data files, a pipeline from someone else must not choose which file on the
    machine is written to. The file itself need not exist yet (opening creates it)."""
    if value == ":memory:":
        return value, None
    if not value.strip():
        return value, "a store path must not be empty (leave store.path out for a store in memory)"
    target, why = _inside_folder(value, folder, "store",
                                 absolute_hint="; give an absolute path with --store instead")
    return (value, why) if target is None else (str(target), None)


def validate(marked: Marked, registry: Registry) -> PipelineSpec:
    """Passes 2 and 3: every problem at once as a ConfigError, else the resolved spec."""
    data = marked.data
    problems: list[Problem] = []
    if not isinstance(data, dict):
        raise ConfigError(marked.problem((), "a pipeline file must be a mapping with `steps:`"))
    for key in data:
        if key not in _TOP_KEYS:
            problems.append(marked.problem((key,), f"unknown key {key!r}."
                                           + _suggest(key, list(_TOP_KEYS)), at_key=True))
    version = data.get("version", 1)
    if version != 1:
        problems.append(marked.problem(("version",), f"unsupported version {version!r}; "
                                       "this compactor reads version 1"))
    texts = {}
    for key in ("name", "description", "tokenizer", "query"):
        value = data.get(key)
        if value is not None and not isinstance(value, str):
            problems.append(marked.problem((key,), f"must be a string, got {value!r}"))
            value = None
        texts[key] = value
    sections = {key: _section(marked, key, problems) for key in _SECTIONS}
    store_path = sections["store"]["path"]
    if isinstance(store_path, str):
        resolved, why = resolve_store_path(store_path, marked.folder)
        if why:
            problems.append(marked.problem(("store", "path"), why))
        sections["store"]["path"] = resolved

    steps_raw = data.get("steps")
    steps: list[StepSpec] = []
    if not isinstance(steps_raw, list) or not steps_raw:
        problems.append(marked.problem(("steps",), "`steps:` must be a non-empty list of steps"))
        steps_raw = []
    provided: set[Any] = {"sources", *PIPELINE_PROVIDES}
    seen_names: set[str] = set()
    stage_seen: list[str] = []
    for index, raw_step in enumerate(steps_raw):
        path: Path = ("steps", index)
        if isinstance(raw_step, str):
            raw_step = {"use": raw_step}
        if not isinstance(raw_step, dict):
            problems.append(marked.problem(path, "a step must be a mapping with `use:`"))
            continue
        for key in raw_step:
            if key not in _STEP_KEYS:
                problems.append(marked.problem((*path, key), f"unknown step key {key!r}."
                                               + _suggest(key, list(_STEP_KEYS)), at_key=True))
        if "use" not in raw_step:
            problems.append(marked.problem(path, "a step needs `use:` naming its component(s)"))
            continue
        components = _step_components(marked, index, raw_step, registry, problems)
        if not components:
            continue
        stage = components[0][0].stage
        names = [info.name for info, _ in components]
        _check_order(marked, path, stage, stage_seen, names, provided, components, problems)
        when = _parse_when(marked, path, raw_step.get("when"), seen_names, problems)
        weights = _parse_weights(marked, path, raw_step.get("weights"), names, stage, problems)
        step_id = raw_step.get("id")
        label = step_id if isinstance(step_id, str) else "+".join(names)
        steps.append(StepSpec(index, label, stage, tuple(components), when, weights))
        stage_seen.append(stage)
        seen_names.update(names)
        for info, _ in components:
            provided.update(info.cls.provides)
    if problems:
        raise ConfigError(sorted(problems, key=lambda p: (p.line or 0, p.column or 0)))
    budget = sections["budget"]
    return PipelineSpec(
        file=marked.file,
        name=texts["name"] or os.path.splitext(os.path.basename(marked.file))[0],
        description=texts["description"] or "",
        tokenizer=texts["tokenizer"] or "cl100k_base",
        query=texts["query"],
        budget=Budget(budget["max_tokens"], budget["ratio"]),
        store=sections["store"],
        llm=sections["llm"],
        output=sections["output"],
        steps=tuple(steps),
    )


def _check_order(
    marked: Marked, path: Path, stage: str, stage_seen: list[str], names: list[str],
    provided: set[str], components: list[tuple[ComponentInfo, dict[str, Any]]],
    problems: list[Problem],
) -> None:
    if "render" in stage_seen:
        problems.append(marked.problem((*path, "use"), "no step may follow the render step"))
    if stage == "clean" and "chunk" in stage_seen:
        problems.append(marked.problem((*path, "use"), f"{names[0]} is a clean step after a chunk "
                                       "step; cleaning must come before chunking"))
    for info, _ in components:
        missing = [state_name(r) for r in info.cls.requires if r not in provided]
        if missing:
            problems.append(marked.problem((*path, "use"), f"{info.name} requires "
                                           f"{', '.join(missing)}, which no earlier step provides "
                                           "(add a chunk step such as chunk.sentences)"
                                           if "chunks" in missing else
                                           f"{info.name} requires {', '.join(missing)}, which no "
                                           "earlier step provides"))


def _parse_when(
    marked: Marked, path: Path, raw: Any, seen_names: set[str], problems: list[Problem],
) -> Condition | None:
    if raw is None:
        return None
    if isinstance(raw, bool):
        raw = "true" if raw else "false"
    if not isinstance(raw, str | int | float):
        problems.append(marked.problem((*path, "when"), "must be a condition string"))
        return None
    try:
        condition = parse_condition(str(raw))
    except ConditionError as exc:
        problems.append(marked.problem((*path, "when"), str(exc)))
        return None
    for name in condition.names:
        if name in CONDITION_NAMES:
            continue
        parts = name.split(".")
        heads = {".".join(parts[:cut]) for cut in range(1, len(parts))}
        if not heads & seen_names:
            known = ", ".join([*CONDITION_NAMES, *(f"{n}.<key>" for n in sorted(seen_names))])
            problems.append(marked.problem((*path, "when"), f"unknown name {name!r} in condition "
                                           f"(names are the built-ins or reports of earlier "
                                           f"steps). Available: {known}"))
    return condition


def _parse_weights(
    marked: Marked, path: Path, raw: Any, names: list[str], stage: str, problems: list[Problem],
) -> dict[str, float]:
    if raw is None:
        return {}
    if stage != "score":
        problems.append(marked.problem((*path, "weights"), "only score steps take `weights:`"))
        return {}
    if not isinstance(raw, dict):
        problems.append(marked.problem((*path, "weights"), "must map scorer names to numbers"))
        return {}
    weights: dict[str, float] = {}
    for key, value in raw.items():
        if key not in names:
            problems.append(marked.problem((*path, "weights", key), f"{key!r} is not a scorer of "
                                           "this step." + _suggest(key, names)))
        elif not check_type(value, float) or value < 0:
            problems.append(marked.problem((*path, "weights", key), "must be a number >= 0"))
        else:
            weights[key] = float(value)
    return weights


def load_spec(
    text: str, file: str, registry: Registry, env: Mapping[str, str] | None = None,
    folder: pathlib.Path | None = None,
) -> PipelineSpec:
    """All three passes over one pipeline file's text; its relative data paths resolve in `folder`
    (the current directory when None)."""
    marked = load_marked(text, file, folder)
    problems = interpolate(marked, os.environ if env is None else env)
    try:
        spec = validate(marked, registry)
    except ConfigError as exc:
        raise ConfigError(problems + exc.problems) from None
    if problems:
        raise ConfigError(problems)
    return spec


__all__ = ["STAGES", "PipelineSpec", "StepSpec", "interpolate", "load_spec", "validate"]
