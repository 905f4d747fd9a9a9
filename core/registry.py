"""Plugin loading and the component registry: the one place that talks to entry points.

Built-in plugins are the `compactor` distribution's own entry points and always load. They offer
their components as `Deferred` declarations (name, stage, "module:Class"), so a module is imported
only when a pipeline names one of its components (or a listing asks for every class). Third-party
entry points in the `compactor` group load too, unless `COMPACTOR_DISABLE_PLUGIN_AUTOLOAD=1`;
`COMPACTOR_LOAD_PLUGINS=a,b` restricts them to those entry-point names (and loads them even when
autoload is off). `COMPACTOR_TRACE_HOOKS=1` prints every hook call to stderr, credentials redacted.
A plugin that fails to import or register is recorded as broken and only fails pipelines that use
its components.

A plugin object registers once however it arrives (an installed entry point that a test or a caller
also passes in `plugins=`); a component name claimed by two different classes belongs to neither, and
a pipeline naming it is refused with both claimants. The observer hooks (`compactor_run`,
`compactor_step`) take wrappers only: a plain implementation would stand in for the run or the step
and hand back its input, so it is refused when the plugin is loaded.
"""

from __future__ import annotations

import difflib
import functools
import importlib
import importlib.metadata as md
import os
import sys
import types
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, cast

import pluggy

from compactor import hookspecs
from compactor.components import Component, validate_component_class
from compactor.errors import ConfigError, PluginError
from compactor.hookspecs import STAGE_HOOKS

ENTRY_POINT_GROUP = "compactor"
BUILTIN_DISTRIBUTION = "compactor"
BUILTIN_MODULE = "compactor.plugins"
#: The hooks that observe runs rather than do a stage's work: implemented as wrappers only.
OBSERVER_HOOKS = frozenset({"compactor_run", "compactor_step"})


@dataclass(frozen=True, slots=True)
class Deferred:
    """A component offered by name, stage and import path instead of its class: `register(Deferred(
    "acme.shout", "clean", "acme_compactor.shout:Shout"))`. The registry imports the module the
    first time the class is needed (a pipeline names the component, a listing shows its
    parameters), so a process pays only for the components it uses; the class is then checked like
    an offered class, and must carry the declared name and stage."""

    name: str
    stage: str
    #: "package.module:Class"
    target: str

    def problem(self) -> str | None:
        """Why this declaration cannot name a component (None when it can)."""
        if not isinstance(self.name, str) or "." not in self.name:
            return f"{self.name!r} is not a dotted component name such as 'family.snake_case'"
        if self.stage not in STAGE_HOOKS:
            return f"{self.name}: stage {self.stage!r} is not one of {', '.join(STAGE_HOOKS)}"
        module, _, attribute = str(self.target).partition(":")
        if not module or not attribute:
            return f"{self.name}: target {self.target!r} is not 'package.module:Class'"
        return None

    def names(self, cls: type) -> bool:
        """Whether `cls` is the class this declaration points at (found without importing it)."""
        return f"{cls.__module__}:{cls.__qualname__}" == self.target


@dataclass(frozen=True, slots=True)
class ComponentInfo:
    """A registered component (its class, or a `Deferred` declaration of it) and where it came from."""

    offered: type[Component] | Deferred
    plugin: str
    distribution: str
    dist_version: str
    _cls: type[Component] | None = field(default=None, repr=False, compare=False)

    @property
    def cls(self) -> type[Component]:
        """The component class, imported on first use for a deferred one (PluginError when its
        module fails to import or the class is not the declared component)."""
        found = self._cls
        if found is None:
            offered = self.offered
            if isinstance(offered, Deferred):
                try:
                    found = deferred_class(offered)
                except Exception as exc:
                    raise PluginError(f"component {offered.name!r} of plugin {self.plugin!r} from "
                                      f"{self.distribution} {self.dist_version} could not be loaded: "
                                      f"{type(exc).__name__}: {exc}") from exc
            else:
                found = offered
            object.__setattr__(self, "_cls", found)
        return found

    @property
    def loaded(self) -> bool:
        """Whether the class is at hand (offered as a class, or a deferred one already imported)."""
        return self._cls is not None or not isinstance(self.offered, Deferred)

    @property
    def name(self) -> str:
        return self.offered.name

    @property
    def stage(self) -> str:
        return self.offered.stage

    def same_as(self, other: ComponentInfo) -> bool:
        """Whether two offers are one class (one plugin reachable two ways), decided without
        importing a deferred one."""
        mine, theirs = self.offered, other.offered
        if isinstance(mine, Deferred):
            return mine.target == theirs.target if isinstance(theirs, Deferred) else mine.names(theirs)
        return theirs.names(mine) if isinstance(theirs, Deferred) else mine is theirs


@dataclass(frozen=True, slots=True)
class BrokenPlugin:
    """A plugin that could not be loaded or could not register its components."""

    plugin: str
    distribution: str
    dist_version: str
    error: str

    def __str__(self) -> str:
        return f"plugin {self.plugin!r} from {self.distribution} {self.dist_version}: {self.error}"


@dataclass(slots=True)
class Registry:
    """A plugin manager plus the components its plugins offered."""

    pm: pluggy.PluginManager
    components: dict[str, ComponentInfo] = field(default_factory=dict)
    broken: list[BrokenPlugin] = field(default_factory=list)
    #: Names two different plugins claim, with every claimant: usable by neither.
    contested: dict[str, list[ComponentInfo]] = field(default_factory=dict)

    def get(self, name: str) -> ComponentInfo:
        """The component called `name`, or a PluginError with a suggestion and the choices."""
        found = self.components.get(name)
        if found is not None:
            return found
        raise PluginError(self.unknown_message(name))

    def unknown_message(self, name: str, stage: str | None = None) -> str:
        """'unknown component' text with "did you mean" and the list of choices (or, for a name
        two plugins claim, who claims it)."""
        claimants = self.contested.get(name)
        if claimants:
            who = " and ".join(f"plugin {c.plugin!r} from {c.distribution} {c.dist_version}"
                               for c in claimants)
            return (f"component {name!r} is claimed by {who}: uninstall one of them or rename "
                    f"its component")
        choices = sorted(n for n, c in self.components.items() if stage is None or c.stage == stage)
        message = f"unknown component {name!r}."
        close = difflib.get_close_matches(name, choices or list(self.components), n=1, cutoff=0.6)
        if close:
            message += f" Did you mean {close[0]!r}?"
        broken = [b for b in self.broken if name.split(".")[0] in b.plugin or not close]
        if broken:
            message += " Broken plugins: " + "; ".join(str(b) for b in broken) + "."
        return message + " Available: " + ", ".join(choices or sorted(self.components))

    def load_all(self) -> None:
        """Import every deferred component (what a listing of classes and parameters needs); one
        that fails is moved from `components` to `broken`, as a plugin that fails to load is."""
        for name, info in list(self.components.items()):
            try:
                info.cls  # noqa: B018 - imports the class
            except PluginError as exc:
                cause = exc.__cause__ or exc
                self.components.pop(name)
                self.broken.append(BrokenPlugin(info.plugin, info.distribution, info.dist_version,
                                                f"{info.name}: {type(cause).__name__}: {cause}"))


def _env_flag(env: Mapping[str, str], key: str) -> bool:
    return env.get(key, "").strip().lower() in {"1", "true", "yes", "on"}


def _dist_of(ep: md.EntryPoint) -> tuple[str, str]:
    dist = getattr(ep, "dist", None)
    if dist is None:
        return ("unknown", "?")
    return (dist.metadata["Name"] or "unknown", dist.version or "?")


def build_registry(
    *,
    plugins: Iterable[Any] = (),
    env: Mapping[str, str] | None = None,
) -> Registry:
    """A fresh plugin manager with built-ins, entry-point plugins and `plugins`, components collected.

    `plugins` are extra plugin objects (modules or instances) registered as if they came from an
    entry point, which is how Python callers and tests add components without packaging them.
    """
    env = os.environ if env is None else env
    pm = pluggy.PluginManager(hookspecs.PROJECT)
    pm.add_hookspecs(hookspecs)
    registry = Registry(pm)
    origins: dict[str, tuple[str, str]] = {}

    allow = {n.strip() for n in env.get("COMPACTOR_LOAD_PLUGINS", "").split(",") if n.strip()}
    autoload = not _env_flag(env, "COMPACTOR_DISABLE_PLUGIN_AUTOLOAD")
    builtin_loaded = False
    for ep in sorted(md.entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
        dist, version = _dist_of(ep)
        builtin = dist == BUILTIN_DISTRIBUTION
        if not builtin and ((allow and ep.name not in allow) or (not allow and not autoload)):
            continue
        if pm.has_plugin(ep.name):
            continue
        try:
            module = ep.load()
            if pm.is_registered(module):  # two entry points naming one module: loaded once
                continue
            refuse_plain_observers(pm, module, ep.name)
            pm.register(module, name=ep.name)
        except Exception as exc:
            registry.broken.append(BrokenPlugin(ep.name, dist, version, f"{type(exc).__name__}: {exc}"))
            continue
        origins[ep.name] = (dist, version)
        builtin_loaded = builtin_loaded or builtin
    if not builtin_loaded and not pm.has_plugin("builtins"):
        # Running from a source tree without installed metadata: load the built-ins by name.
        pm.register(importlib.import_module(BUILTIN_MODULE), name="builtins")
        origins["builtins"] = (BUILTIN_DISTRIBUTION, _own_version())
    for index, plugin in enumerate(plugins):
        if pm.is_registered(plugin):
            # an installed plugin also passed here (a plugin's own tests list it): it keeps the
            # origin its entry point gave it
            continue
        name = _free_name(pm, getattr(plugin, "__name__", None) or f"extra-{index}")
        refuse_plain_observers(pm, plugin, name)
        pm.register(plugin, name=name)
        origins[name] = ("<python>", "-")

    _collect_components(registry, origins)
    if _env_flag(env, "COMPACTOR_TRACE_HOOKS"):
        pm.trace.root.setwriter(_redacted_writer(env))
        pm.enable_tracing()
    return registry


def _free_name(pm: pluggy.PluginManager, name: str) -> str:
    """`name`, or `name#2`, `name#3`... when another plugin object already has it."""
    candidate, n = name, 1
    while pm.has_plugin(candidate):
        n += 1
        candidate = f"{name}#{n}"
    return candidate


def plain_observer_hooks(pm: pluggy.PluginManager, plugin: object) -> list[str]:
    """The observer hooks `plugin` (a module, an instance or a class) implements without being a
    wrapper, found the way pluggy finds hookimpls (a `specname` counts)."""
    found: set[str] = set()
    for attr in _own_names(plugin):
        opts = pm.parse_hookimpl_opts(plugin, attr)
        if opts is None:
            continue
        hook = opts.get("specname") or attr
        if hook in OBSERVER_HOOKS and not (opts.get("wrapper") or opts.get("hookwrapper")):
            found.add(hook)
    return sorted(found)


def _own_names(plugin: object) -> set[str]:
    """The attribute names where `plugin` can hold a hookimpl: a module's globals, or what its
    classes define (not `object`'s or the `Component` base's, which hold none): the names pluggy
    would look at, found without `dir()` on every component class of every registry."""
    if isinstance(plugin, types.ModuleType):
        return set(vars(plugin))
    cls = plugin if isinstance(plugin, type) else type(plugin)
    names = set(getattr(plugin, "__dict__", ())) if not isinstance(plugin, type) else set()
    for klass in cls.__mro__:
        if klass not in (object, Component):
            names.update(vars(klass))
    return names


def plain_observer_message(plugin: str, hook: str) -> str:
    """Why a plain observer hook is refused, and what to write instead."""
    return (f"plugin {plugin!r}: {hook} is an observer hook and must be a wrapper: declare it "
            f"`@hookimpl(wrapper=True)` and hand back what `yield` gives (`result = yield` ... "
            f"`return result`); a plain {hook} would replace the "
            f"{'run' if hook == 'compactor_run' else 'step'} and its output")


def refuse_plain_observers(pm: pluggy.PluginManager, plugin: object, name: str) -> None:
    """Raise ConfigError before `plugin` registers if an observer hook of it is not a wrapper:
    registered, it would silently stand in for every step (or run) and empty the output."""
    plain = plain_observer_hooks(pm, plugin)
    if plain:
        raise ConfigError(plain_observer_message(_label(plugin, name), plain[0]))


def _label(plugin: object, name: str) -> str:
    """How an error names a plugin: a module by its name, an instance by its class as well (its
    registered name, `extra-N`, says nothing to the author)."""
    if hasattr(plugin, "__name__"):
        return name
    kind = type(plugin)
    return f"{name} ({kind.__module__}.{kind.__qualname__})"


def _redacted_writer(env: Mapping[str, str]) -> Any:
    """A hook-trace writer to stderr that never shows a credential: hook arguments carry the run's
    LLM settings (an `api_key`, a `base_url` with a key in it), which are redacted first."""
    from compactor.llm.client import redact_text

    def write(text: str) -> None:
        sys.stderr.write(redact_text(text, env=env))

    return write


def _own_version() -> str:
    try:
        return md.version(BUILTIN_DISTRIBUTION)
    except md.PackageNotFoundError:
        return "0+source"


def _offer(
    pm: pluggy.PluginManager, offered: list[ComponentInfo], plugin: str, dist: str, version: str,
    cls: type[Component] | Deferred,
) -> None:
    """The `register` callable plugins receive: validates, then records the class (a `Deferred`
    declaration is checked as far as it goes without importing, the class when it is imported)."""
    problem = cls.problem() if isinstance(cls, Deferred) else _class_problem(pm, cls, plugin)
    if problem:
        raise PluginError(problem)
    offered.append(ComponentInfo(cls, plugin, dist, version))


def _class_problem(pm: pluggy.PluginManager, cls: Any, plugin: str) -> str | None:
    """Why `cls` is not a usable component class. A component is registered with each step that
    uses it, so its observer hooks must be wrappers too (a ConfigError, as for a plugin)."""
    problem = validate_component_class(cls)
    if problem:
        return problem
    plain = plain_observer_hooks(pm, cls)
    if plain:
        raise ConfigError(plain_observer_message(plugin, plain[0]) + f" (component {cls.name!r})")
    return None


@functools.cache
def deferred_class(declared: Deferred) -> type[Component]:
    """The class a `Deferred` names, imported and checked once per process: it must be a usable
    component carrying the declared name and stage."""
    module, _, attribute = declared.target.partition(":")
    found: Any = importlib.import_module(module)
    for part in attribute.split("."):
        found = getattr(found, part)
    problem = _class_problem(_hook_parser(), found, declared.name)
    if problem:
        raise PluginError(problem)
    if (found.name, found.stage) != (declared.name, declared.stage):
        raise PluginError(f"{declared.target} is {found.name!r} ({found.stage}), declared as "
                          f"{declared.name!r} ({declared.stage})")
    return cast("type[Component]", found)


@functools.cache
def _hook_parser() -> pluggy.PluginManager:
    """A plugin manager of the project's hooks, for reading hookimpl markers outside a registry."""
    return pluggy.PluginManager(hookspecs.PROJECT)


def _collect_components(registry: Registry, origins: dict[str, tuple[str, str]]) -> None:
    """Call each plugin's register hook on its own, so one failure stays contained."""
    hook = registry.pm.hook.compactor_register_components
    for impl in hook.get_hookimpls():
        plugin_name = impl.plugin_name
        dist, version = origins.get(plugin_name, ("unknown", "?"))
        offered: list[ComponentInfo] = []
        register = functools.partial(_offer, registry.pm, offered, plugin_name, dist, version)
        try:
            impl.function(register)
        except Exception as exc:
            registry.broken.append(
                BrokenPlugin(plugin_name, dist, version, f"{type(exc).__name__}: {exc}")
            )
            continue
        for info in offered:
            _claim(registry, info)


def _claim(registry: Registry, info: ComponentInfo) -> None:
    """Record `info` under its name. The same class offered again (one plugin reachable two ways)
    keeps its first origin; a different class under a taken name makes the name contested, and
    the later plugin is also listed as broken so `--list-plugins` shows the clash."""
    existing = registry.components.get(info.name)
    claimants = registry.contested.get(info.name, [])
    if any(c.same_as(info) for c in ([existing] if existing else []) + claimants):
        return
    if existing is None and not claimants:
        registry.components[info.name] = info
        return
    first = existing or claimants[0]
    registry.broken.append(BrokenPlugin(
        info.plugin, info.distribution, info.dist_version,
        f"component {info.name!r} is already registered by {first.distribution} "
        f"(plugin {first.plugin!r})",
    ))
    registry.contested[info.name] = [*([existing] if existing else claimants), info]
    registry.components.pop(info.name, None)
