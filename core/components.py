"""Components: small classes with declarative metadata that implement one stage hook.

A component's keyword-only `__init__` parameters, with their type hints and defaults, are its YAML
`with:` schema. Example::

    class Shout(Component):
        \"\"\"Upper-case every source (a demo).\"\"\"

        name = "acme.shout"
        stage = "clean"

        def __init__(self, *, exclaim: bool = False) -> None:
            self.exclaim = exclaim

        @hookimpl
        def compactor_clean(self, context, run):
            ...
"""

from __future__ import annotations

import functools
import inspect
import os
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, TypeAlias, Union

from compactor.hookspecs import STAGE_HOOKS

if typing.TYPE_CHECKING:
    from compactor.document import Chunk
    from compactor.state import StateItem

Stage = Literal["clean", "chunk", "classify", "score", "compress", "validate", "fallback", "render"]
STAGES: tuple[str, ...] = tuple(STAGE_HOOKS)
#: Stages where every component of a step contributes (the others take the first result).
CONTRIBUTING_STAGES = frozenset({"classify", "score", "validate"})

_MISSING = inspect.Parameter.empty


class DataPath(str):
    """The type of a parameter that names a data file (a prompt, a pattern table).

    Pipeline files are code a user may receive from someone else, so in a pipeline a data path is
    relative and resolves inside the pipeline file's folder (or the compactor package): no
    absolute paths, no `..`, no symlinks out. The component receives the resolved absolute path.
    """


#: What `requires`/`provides` name: a part of the context ("chunks", "scores", "segments", "facts",
#: "labels") or a kind of typed state (a `compactor.state.StateItem` subclass such as `LossReport`).
Requirement: TypeAlias = "str | type[StateItem]"


class Component:
    """Base class for everything a pipeline step can `use:`.

    This is the whole protocol between the framework and a component: the framework reads only
    the attributes declared here (and calls the stage hook of `stage`, `compactor_<stage>`).
    Parameters are checked the same way whether the component comes from a pipeline file or is
    built in Python: `TokenChunker(size=2, overlap=50)` raises the ConfigError the YAML raises.
    """

    #: The dotted name a pipeline step `use:`s ("family.snake_case", e.g. "score.relevance").
    name: ClassVar[str]
    #: The stage whose hook the component implements (one of `STAGES`).
    stage: ClassVar[Stage]
    #: The component's version, shown by `--list-plugins` next to its distribution.
    version: ClassVar[str] = "1"
    #: What must exist before this component runs: context parts ("chunks", "scores", "segments")
    #: and state types. The pipeline file is refused (file:line of the step) when no earlier step
    #: provides one of them.
    requires: ClassVar[tuple[Requirement, ...]] = ()
    #: What this component adds for later steps, applications and operations: context parts and
    #: state types (a strategy provides `Knowledge`, a loss validator `LossReport`, the history
    #: compressor `CompactionPlan`). A validate component that provides `LossReport` has its
    #: report put in `context.state` by the pipeline.
    provides: ClassVar[tuple[Requirement, ...]] = ()
    #: Render components only: False when the output may exceed the budget on purpose (a full
    #: transcript, a message list priced per message), so the pipeline does not hold it to it.
    budgeted: ClassVar[bool] = True

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        init = cls.__dict__.get("__init__")
        if init is not None and not getattr(init, "_compactor_checked", False):
            cls.__init__ = _checked_init(init)  # type: ignore[method-assign]

    @classmethod
    def parameters(cls) -> tuple[Param, ...]:
        """The YAML schema: keyword-only parameters of `__init__` with types and defaults."""
        return parameters_of(cls)

    @classmethod
    def check_params(cls, params: dict[str, Any]) -> list[str]:
        """Problems with a complete set of parameter values (every parameter, defaults filled in)
        that their types cannot express (`overlap < size`), one sentence each; none by default.
        Called for pipeline files and for components built in Python alike."""
        return []

    @classmethod
    def param_problems(cls, params: Mapping[str, Any]) -> list[tuple[str | None, str]]:
        """(parameter, message) for each problem with `params` given to this component: unknown
        names, wrong types, missing required ones, then `check_params` on the complete set."""
        declared = {p.name: p for p in cls.parameters()}
        problems: list[tuple[str | None, str]] = []
        complete: dict[str, Any] = {}
        for key, value in params.items():
            param = declared.get(key)
            if param is None:
                problems.append((key, f"{cls.name} has no parameter {key!r}"))
            elif not check_type(value, param.annotation):
                problems.append((key, f"{cls.name} expects {param.type_name}, got "
                                      f"{type(value).__name__} {value!r}"))
            else:
                complete[key] = value
        for param in declared.values():
            if param.name not in complete and param.name not in params:
                if param.required:
                    problems.append((None, f"{cls.name} requires parameter {param.name!r} "
                                           f"({param.type_name})"))
                else:
                    complete[param.name] = param.default
        if not problems and len(complete) == len(declared):
            problems.extend((None, f"{cls.name}: {message}") for message in cls.check_params(complete))
        return problems

    def __repr__(self) -> str:
        params = ", ".join(f"{p.name}={getattr(self, p.name, '?')!r}" for p in self.parameters())
        return f"<{self.name} {params}>"


@dataclass(frozen=True, slots=True)
class Param:
    """One configurable parameter of a component."""

    name: str
    annotation: Any
    default: Any = _MISSING

    @property
    def required(self) -> bool:
        return self.default is _MISSING

    @property
    def type_name(self) -> str:
        return type_name(self.annotation)

    def __str__(self) -> str:
        text = f"{self.name}: {self.type_name}"
        return text if self.required else f"{text} = {self.default!r}"


@dataclass(frozen=True, slots=True)
class ScoreSet:
    """What a scorer returns: one value in [0, 1] per chunk id, and the features behind each."""

    name: str
    values: Mapping[str, float]
    features: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)


#: Scores a pipeline computes itself rather than a scorer (their key is their own name).
DERIVED_SCORES = frozenset({"combined"})
SCORE_PREFIX = "score."


def score_key(name: str) -> str:
    """The key a score is stored under in `Chunk.scores`: its scorer's component name.

    One contract for every reader: `importance` and `score.importance` both mean `score.importance`;
    a dotted name (a plugin's `acme.freshness`) and `combined` are keys already.
    """
    if name in DERIVED_SCORES or "." in name:
        return name
    return SCORE_PREFIX + name


def score_label(key: str) -> str:
    """How reports show a score key: `score.importance` -> `importance`."""
    return key.removeprefix(SCORE_PREFIX)


def has_score(chunk: Chunk, name: str) -> bool:
    """Whether a chunk has the score `name` (short or full name, see `score_key`)."""
    return score_key(name) in chunk.scores


def score_value(chunk: Chunk, name: str, default: float = 0.0) -> float:
    """A chunk's score `name` (short or full name, see `score_key`), or `default` when no scorer set it.

    Every reader goes through here, so a reader asking for `importance` finds what `score.importance`
    stored (reading the bare `importance` key silently found nothing).
    """
    value = chunk.scores.get(score_key(name))
    return default if value is None else float(value)


def _checked_init(init: Callable[..., None]) -> Callable[..., None]:
    """`init` checking its keyword parameters first (`Component.param_problems`), when it builds
    an object of exactly its class (a subclass's own `__init__` checks for it)."""

    @functools.wraps(init)
    def checked(self: Component, *args: Any, **kwargs: Any) -> None:
        if not args and type(self).__init__ is checked:
            problems = type(self).param_problems(kwargs)
            if problems:
                from compactor.errors import ConfigError, Problem

                raise ConfigError([Problem(message, field=f"with.{key}" if key else "with")
                                   for key, message in problems])
        init(self, *args, **kwargs)

    # introspection (`__init__.__kwdefaults__`) sees the defaults; calls of `checked` ignore them
    checked.__kwdefaults__ = init.__kwdefaults__  # type: ignore[attr-defined]
    checked._compactor_checked = True  # type: ignore[attr-defined]
    return checked


def parameters_of(cls: type) -> tuple[Param, ...]:
    """Keyword-only parameters of `cls.__init__`, with resolved type hints (read once per class)."""
    return _parameters_of(cls)


@functools.cache
def _parameters_of(cls: Any) -> tuple[Param, ...]:
    init = inspect.unwrap(cls.__init__)
    if init is object.__init__:
        return ()
    try:
        hints = typing.get_type_hints(init)
    except Exception:
        hints = getattr(init, "__annotations__", {})
    params = []
    for p in inspect.signature(init).parameters.values():
        if p.kind is inspect.Parameter.KEYWORD_ONLY:
            params.append(Param(p.name, hints.get(p.name, Any), p.default))
    return tuple(params)


def type_name(annotation: Any) -> str:
    """Readable name of a type hint, as shown in errors and `--list-plugins`."""
    if annotation is Any:
        return "any"
    if annotation is DataPath:
        return "path"
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is Literal:
        return " | ".join(repr(a) for a in args)
    if origin in (Union, types.UnionType):
        return " | ".join(type_name(a) for a in args)
    if origin is not None:
        inner = ", ".join(type_name(a) for a in args if a is not Ellipsis)
        base = getattr(origin, "__name__", str(origin))
        return f"{base}[{inner}]" if inner else base
    if annotation is type(None):
        return "null"
    return getattr(annotation, "__name__", str(annotation))


def check_type(value: Any, annotation: Any) -> bool:
    """Whether a YAML value fits a parameter's type hint (ints are accepted for floats)."""
    if annotation is Any or annotation is inspect.Parameter.empty:
        return True
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is Literal:
        return value in args
    if origin in (Union, types.UnionType):
        return any(check_type(value, a) for a in args)
    if annotation is type(None) or annotation is None:
        return value is None
    if annotation is DataPath:
        return isinstance(value, str | os.PathLike)
    if annotation is bool:
        return isinstance(value, bool)
    if annotation is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if annotation is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if origin in (list, tuple, Sequence):
        if not isinstance(value, list | tuple):
            return False
        item = args[0] if args else Any
        return all(check_type(v, item) for v in value)
    if origin in (dict, Mapping):
        if not isinstance(value, dict):
            return False
        key_t, val_t = args if len(args) == 2 else (Any, Any)
        return all(check_type(k, key_t) and check_type(v, val_t) for k, v in value.items())
    if isinstance(annotation, type):
        return isinstance(value, annotation)
    return True


def validate_component_class(cls: Any) -> str | None:
    """Why a registered class is not a usable component (None when it is)."""
    if not isinstance(cls, type):
        return f"{cls!r} is not a class"
    name = getattr(cls, "name", None)
    if not isinstance(name, str) or "." not in name:
        return f"{cls.__qualname__} has no dotted `name` such as 'family.snake_case'"
    stage = getattr(cls, "stage", None)
    if stage not in STAGE_HOOKS:
        return f"{name}: stage {stage!r} is not one of {', '.join(STAGES)}"
    hook = STAGE_HOOKS[stage]
    method = getattr(cls, hook, None)
    if method is None or not hasattr(method, "compactor_impl"):
        return f"{name}: a {stage} component must implement `@hookimpl def {hook}(self, context, run)`"
    from compactor.state import StateItem

    for attribute in ("requires", "provides"):
        for entry in getattr(cls, attribute, ()):
            if not (isinstance(entry, str) or (isinstance(entry, type) and issubclass(entry, StateItem))):
                return (f"{name}: `{attribute}` entries are context parts (str) or state types "
                        f"(compactor.state.StateItem subclasses), got {entry!r}")
    if not isinstance(getattr(cls, "budgeted", True), bool):
        return f"{name}: `budgeted` must be True or False"
    return None
