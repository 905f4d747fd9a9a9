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

import inspect
import types
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, Union

from compactor.hookspecs import STAGE_HOOKS

if typing.TYPE_CHECKING:
    from compactor.document import Chunk

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


class Component:
    """Base class for everything a pipeline step can `use:`."""

    name: ClassVar[str]
    stage: ClassVar[Stage]
    version: ClassVar[str] = "1"
    #: What must exist before this component runs ("chunks", "scores", "segments", ...).
    requires: ClassVar[tuple[str, ...]] = ()
    #: What this component adds for later steps.
    provides: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def parameters(cls) -> tuple[Param, ...]:
        """The YAML schema: keyword-only parameters of `__init__` with types and defaults."""
        return parameters_of(cls)

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


def parameters_of(cls: type) -> tuple[Param, ...]:
    """Keyword-only parameters of `cls.__init__`, with resolved type hints."""
    init = cls.__init__
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
        return isinstance(value, str)
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
    return None
