"""Components: small classes with declarative metadata that implement one stage hook.

A component declares each parameter once, as a class attribute set to `param(...)` with a type
annotation; the framework derives from it the keyword-only `__init__`, the YAML `with:` schema
(`parameters()`), the type and bound checks, `repr` and `--list-plugins`. Example::

    class Shout(Component):
        \"\"\"Upper-case every source (a demo).\"\"\"

        name = "acme.shout"
        stage = "clean"

        exclaim: bool = param(False, doc="add an exclamation mark")
        repeat: int = param(1, ge=1, le=5)

        @hookimpl
        def compactor_clean(self, context, run):
            ...

A rule between parameters that bounds cannot say goes in `check(self)`; work the component does
once with its parameters (loading a data file) goes in `__post_init__(self)`. A component may also
write its own keyword-only `__init__` (the older style): its signature is then the schema.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import functools
import inspect
import os
import sys
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, TypeAlias, TypeVar, Union

from compactor.errors import ConfigError, InputError, Problem
from compactor.hookspecs import STAGE_HOOKS, Stage

if typing.TYPE_CHECKING:
    from compactor.document import Chunk, ContextPart
    from compactor.state import StateItem

STAGES: tuple[str, ...] = tuple(STAGE_HOOKS)
#: Stages where every component of a step contributes (the others take the first result).
CONTRIBUTING_STAGES = frozenset({"classify", "score", "validate"})

_MISSING = inspect.Parameter.empty
_C = TypeVar("_C", bound="Component")


class DataPath(str):
    """The type of a parameter that names a data file (a prompt, a pattern table).

    Pipeline files are code a user may receive from someone else, so in a pipeline a data path is
    relative and resolves inside the pipeline file's folder (or the compactor package): no
    absolute paths, no `..`, no symlinks out. The component receives the resolved absolute path.
    """


#: What `requires`/`provides` name: a part of the context ("chunks", "scores", "segments", "facts",
#: "labels") or a kind of typed state (a `compactor.state.StateItem` subclass such as `LossReport`).
Requirement: TypeAlias = "ContextPart | type[StateItem]"


@dataclass(frozen=True, slots=True)
class Field:
    """What `param()` declares: a parameter's default and the bounds its values keep."""

    default: Any = _MISSING
    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None
    choices: tuple[Any, ...] | None = None
    doc: str = ""
    unit: str = ""


def param(default: Any = _MISSING, *, ge: float | None = None, gt: float | None = None,
          le: float | None = None, lt: float | None = None, choices: Sequence[Any] | None = None,
          doc: str = "", unit: str = "") -> Any:
    """Declare a component parameter (its type is the attribute's annotation). No `default`: the
    parameter is required. `ge`/`gt`/`le`/`lt` bound numbers (None is not checked); `choices` lists
    the allowed values (of each item, for a list); a `Literal` annotation gives its choices too.
    `unit` words the bound ("at least 8 tokens"); `doc` is shown by `--list-plugins`."""
    return Field(default, ge, gt, le, lt, tuple(choices) if choices is not None else None, doc, unit)


class Component:
    """Base class for everything a pipeline step can `use:`.

    This is the whole protocol between the framework and a component: the framework reads only
    the attributes declared here (and calls the stage hook of `stage`, `compactor_<stage>`).
    Parameters are checked the same way whether the component comes from a pipeline file, is
    built in Python or gets per-run values (`overridden`): `TokenChunker(size=2, overlap=50)`
    raises the ConfigError the YAML raises.
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
        declared = any(isinstance(value, Field) for value in cls.__dict__.values())
        if declared and init is not None:
            raise TypeError(f"{cls.__qualname__}: declare parameters with param() or write __init__, "
                            "not both")
        if declared:
            cls.__init__ = _derived_init(cls)  # type: ignore[method-assign]
        elif init is not None and not getattr(init, "_compactor_checked", False):
            cls.__init__ = _checked_init(init)  # type: ignore[method-assign]

    @classmethod
    def parameters(cls) -> tuple[Param, ...]:
        """The YAML schema: the declared parameters (or the keyword-only parameters of a written
        `__init__`) with types, defaults and bounds."""
        return parameters_of(cls)

    def check(self) -> list[str]:
        """Problems between parameter values that bounds cannot express (`overlap < size`), one
        sentence each; none by default. Runs on the values before `__post_init__`, only when every
        value has the right type and keeps its bounds."""
        return []

    def __post_init__(self) -> None:
        """Work done once with the parameters (load a data file, compile patterns); nothing by default."""

    @classmethod
    def check_params(cls, params: dict[str, Any]) -> list[str]:
        """Problems with a complete set of parameter values (every parameter, defaults filled in)
        that their types cannot express: the declared bounds, then `check`. Called for pipeline
        files, components built in Python and per-run values alike."""
        problems = [f"{p.name} {why}" for p in cls.parameters()
                    if p.name in params and (why := p.bound_problem(params[p.name]))]
        if problems or cls.check is Component.check or not _fields_of(cls):
            return problems  # `check` is the hook of declared parameters only
        probe = object.__new__(cls)  # the values alone: `check` reads parameters, nothing built
        probe.__dict__.update(params)
        return probe.check()

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
                problems.append((key, unknown_parameter(cls.name, key, list(declared))))
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

    @classmethod
    def override_problems(cls, current: Mapping[str, Any], given: Mapping[str, Any]) -> list[str]:
        """Messages for per-run values `given` over the complete parameter set `current`: the
        messages a pipeline file's `with:` gets, led by the parameter a type problem is about."""
        return [f"{key}: {message}" if key else message
                for key, message in cls.param_problems({**current, **given})]

    def params(self) -> dict[str, Any]:
        """The parameter values of this component, by name."""
        return {p.name: getattr(self, p.name) for p in self.parameters()}

    def overridden(self: _C, given: Mapping[str, Any]) -> _C:
        """This component with per-run values (`ConversationOptions`, a face's keywords) in place of
        its parameters, checked by the schema: an InputError says what a pipeline file would be told.
        Keys that are not parameters of this component are left to the caller."""
        names = {p.name for p in self.parameters()}
        mine = {key: value for key, value in given.items() if key in names}
        if not mine:
            return self
        problems = type(self).override_problems(self.params(), mine)
        if problems:
            raise InputError("; ".join(problems))
        changed = copy.copy(self)
        changed.__dict__.update(mine)
        changed.__post_init__()
        return changed

    def __repr__(self) -> str:
        params = ", ".join(f"{p.name}={getattr(self, p.name, '?')!r}" for p in self.parameters())
        return f"<{self.name} {params}>" if params else f"<{self.name}>"


@dataclass(frozen=True, slots=True)
class Param:
    """One configurable parameter of a component: its type, default and bounds."""

    name: str
    annotation: Any
    default: Any = _MISSING
    bounds: Field = field(default_factory=Field)

    @property
    def required(self) -> bool:
        return self.default is _MISSING

    @property
    def type_name(self) -> str:
        if self.bounds.choices is not None and self.annotation is str:
            return " | ".join(repr(c) for c in self.bounds.choices)
        return type_name(self.annotation)

    @property
    def doc(self) -> str:
        return self.bounds.doc

    def bound_problem(self, value: Any) -> str | None:
        """Why `value` breaks this parameter's bounds ("must be at least 8 tokens, not 2"), or None."""
        bounds = self.bounds
        if value is None:
            return None
        if bounds.choices is not None:
            items = value if isinstance(value, list | tuple) else [value]
            if any(item not in bounds.choices for item in items):
                return f"must be one of {', '.join(map(str, bounds.choices))}, not {value!r}"
        if isinstance(value, bool) or not isinstance(value, int | float):
            return None
        low = bounds.ge if bounds.ge is not None else bounds.gt
        high = bounds.le if bounds.le is not None else bounds.lt
        broken = ((bounds.ge is not None and value < bounds.ge)
                  or (bounds.gt is not None and value <= bounds.gt)
                  or (bounds.le is not None and value > bounds.le)
                  or (bounds.lt is not None and value >= bounds.lt))
        if broken:
            unit = f" {bounds.unit}" if bounds.unit else ""
            if low is not None and high is not None:
                opening = "[" if bounds.ge is not None else "("
                closing = "]" if bounds.le is not None else ")"
                wanted = f"in {opening}{_number(low)}, {_number(high)}{closing}"
            elif bounds.ge is not None:
                wanted = "0 or more" if bounds.ge == 0 else f"at least {_number(bounds.ge)}"
            elif bounds.gt is not None:
                wanted = f"greater than {_number(bounds.gt)}"
            elif bounds.le is not None:
                wanted = f"at most {_number(bounds.le)}"
            else:
                wanted = f"less than {_number(high or 0)}"
            return f"must be {wanted}{unit}, not {value!r}"
        return None

    def __str__(self) -> str:
        text = f"{self.name}: {self.type_name}"
        if not self.required:
            text = f"{text} = {self.default!r}"
        rules = [text for text in (_rule(">=", self.bounds.ge), _rule(">", self.bounds.gt),
                                   _rule("<=", self.bounds.le), _rule("<", self.bounds.lt)) if text]
        return f"{text} ({', '.join(rules)})" if rules else text


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def _rule(sign: str, value: float | None) -> str:
    return "" if value is None else f"{sign} {_number(value)}"


def unknown_parameter(component: str, key: str, declared: Sequence[str]) -> str:
    """The message for a parameter a component does not have, with the closest declared name."""
    close = difflib.get_close_matches(key, list(declared), n=1, cutoff=0.6)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    return f"{component} has no parameter {key!r}.{hint} Allowed: {', '.join(declared) or '(none)'}"


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


def _raise_problems(problems: list[tuple[str | None, str]]) -> None:
    """Parameters given in Python refused with the ConfigError a pipeline file's `with:` gets."""
    if problems:
        raise ConfigError([Problem(message, field=f"with.{key}" if key else "with")
                           for key, message in problems])


def _checked_init(init: Callable[..., None]) -> Callable[..., None]:
    """`init` checking its keyword parameters first (`Component.param_problems`), when it builds
    an object of exactly its class (a subclass's own `__init__` checks for it)."""

    @functools.wraps(init)
    def checked(self: Component, *args: Any, **kwargs: Any) -> None:
        if not args and type(self).__init__ is checked:
            _raise_problems(type(self).param_problems(kwargs))
        init(self, *args, **kwargs)

    # introspection (`__init__.__kwdefaults__`) sees the defaults; calls of `checked` ignore them
    checked.__kwdefaults__ = init.__kwdefaults__  # type: ignore[attr-defined]
    checked._compactor_checked = True  # type: ignore[attr-defined]
    return checked


def _derived_init(owner: type[Component]) -> Callable[..., None]:
    """The keyword-only `__init__` of a class that declares its parameters: check the values (when
    it builds an object of exactly its class), set them, then `__post_init__`."""

    def __init__(self: Component, **kwargs: Any) -> None:
        if type(self).__init__ is __init__:
            _raise_problems(type(self).param_problems(kwargs))
        for name, declared in _fields_of(owner).items():
            setattr(self, name, kwargs.get(name, declared.default))
        self.__post_init__()

    __init__.__qualname__ = f"{owner.__qualname__}.__init__"
    annotations = {name: hint for klass in reversed(owner.__mro__)
                   for name, hint in vars(klass).get("__annotations__", {}).items()}
    __init__.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
        + [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=declared.default,
                             annotation=annotations.get(name, inspect.Parameter.empty))
           for name, declared in _fields_of(owner).items()])
    __init__._compactor_checked = True  # type: ignore[attr-defined]
    __init__._compactor_fields = True  # type: ignore[attr-defined]
    return __init__


def _fields_of(cls: type) -> dict[str, Field]:
    """The parameters a class and its bases declare with `param()`, in declaration order."""
    found: dict[str, Field] = {}
    for klass in reversed(cls.__mro__):
        found.update((name, value) for name, value in vars(klass).items() if isinstance(value, Field))
    return found


def parameters_of(cls: type) -> tuple[Param, ...]:
    """The schema of a component class (read once per class): its declared parameters, or the
    keyword-only parameters of its written `__init__` (with the bounds of inherited declarations)."""
    return _parameters_of(cls)


@functools.cache
def _parameters_of(cls: Any) -> tuple[Param, ...]:
    fields = _fields_of(cls)
    init = inspect.unwrap(cls.__init__)
    if getattr(init, "_compactor_fields", False):
        hints = _hints(cls)
        return tuple(_declared(name, hints.get(name, Any), declared) for name, declared in fields.items())
    if init is object.__init__:
        return ()
    try:
        hints = typing.get_type_hints(init)
    except Exception:
        hints = getattr(init, "__annotations__", {})
    params = []
    for p in inspect.signature(init).parameters.values():
        if p.kind is inspect.Parameter.KEYWORD_ONLY:
            bounds = fields.get(p.name, Field())
            params.append(Param(p.name, hints.get(p.name, Any), p.default,
                                dataclasses.replace(bounds, default=p.default)))
    return tuple(params)


def _hints(cls: type) -> dict[str, Any]:
    """The resolved annotations of the declared parameters, each in its own class's module (the
    base's own annotations name types imported only for type checking, so the whole class is not
    resolved at once)."""
    hints: dict[str, Any] = {}
    for klass in reversed(cls.__mro__):
        declared = {name for name, value in vars(klass).items() if isinstance(value, Field)}
        module = vars(sys.modules[klass.__module__]) if klass.__module__ in sys.modules else {}
        for name, hint in vars(klass).get("__annotations__", {}).items():
            if name in declared:
                try:
                    hints[name] = eval(hint, dict(module), dict(vars(klass))) if isinstance(hint, str) \
                        else hint
                except Exception:  # an annotation that does not resolve is read as Any
                    hints[name] = Any
    return hints


def _declared(name: str, annotation: Any, declared: Field) -> Param:
    """A declared parameter's schema entry; a `Literal` of strings is `str` with its choices, so a
    value outside them gets the bound message ("must be one of ...") wherever it comes from."""
    if typing.get_origin(annotation) is Literal and declared.choices is None \
            and all(isinstance(arg, str) for arg in typing.get_args(annotation)):
        declared = dataclasses.replace(declared, choices=typing.get_args(annotation))
        annotation = str
    return Param(name, annotation, declared.default, declared)


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
