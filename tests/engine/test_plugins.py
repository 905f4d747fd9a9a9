"""Third-party plugins through real entry points, broken-plugin isolation, env switches."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from compactor import Pipeline, PluginError, hookimpl
from compactor.registry import build_registry

from ..helpers import run_cli, write_dist

SHOUT = '''
from compactor import Component, hookimpl

class Shout(Component):
    """Upper-cases every source."""
    name = "acme.shout"
    stage = "clean"
    version = "2"

    def __init__(self, *, exclaim: bool = False) -> None:
        self.exclaim = exclaim

    @hookimpl
    def compactor_clean(self, context, run):
        mark = "!" if self.exclaim else ""
        return context.evolve(sources=tuple(s.with_text(s.text.upper() + mark)
                                            for s in context.sources))

@hookimpl
def compactor_register_components(register):
    register(Shout)
'''

PIPELINE = "version: 1\nsteps:\n  - use: acme.shout\n    with: {exclaim: true}\n"


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder on sys.path holding throwaway installed distributions."""
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    return tmp_path


def test_third_party_component_is_found_through_its_entry_point(site: Path) -> None:
    write_dist(site, "acme-compactor", "acme_compactor", SHOUT, entry="acme")
    registry = build_registry(env={})
    info = registry.get("acme.shout")
    assert (info.distribution, info.dist_version, info.plugin) == ("acme-compactor", "1.0", "acme")
    context = Pipeline.from_string(PIPELINE, env={}).run("quiet words")
    assert context.output == "QUIET WORDS!"


def test_cli_lists_and_runs_the_third_party_component(site: Path) -> None:
    write_dist(site, "acme-compactor", "acme_compactor", SHOUT, entry="acme")
    env = {"PYTHONPATH": str(site)}
    listed = run_cli("--list-plugins", env=env)
    assert listed.returncode == 0
    assert "acme.shout  [clean]  v2  from acme-compactor 1.0" in listed.stdout
    assert "parameters: exclaim: bool = False" in listed.stdout
    (site / "p.yaml").write_text(PIPELINE, encoding="utf-8")
    ran = run_cli(str(site / "p.yaml"), "-", stdin=b"hello", env=env)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == "HELLO!\n"


def test_broken_plugin_is_isolated_and_named(site: Path) -> None:
    write_dist(site, "acme-compactor", "acme_compactor", SHOUT, entry="acme")
    write_dist(site, "shaky-plugin", "shaky", "raise ImportError('needs libfoo')\n", version="0.3")
    registry = build_registry(env={})
    assert "acme.shout" in registry.components
    [broken] = registry.broken
    assert (broken.plugin, broken.distribution, broken.dist_version) == ("shaky", "shaky-plugin",
                                                                         "0.3")
    assert "needs libfoo" in broken.error
    # pipelines that don't use it run; ones that name a missing component say why
    assert Pipeline.from_string(PIPELINE, env={}).run("ok").output == "OK!"
    with pytest.raises(PluginError, match=r"Broken plugins: plugin 'shaky' from shaky-plugin 0\.3"):
        registry.get("shaky.thing")


def test_failing_register_hook_is_isolated(site: Path) -> None:
    source = ("from compactor import hookimpl\n@hookimpl\ndef compactor_register_components("
              "register):\n    register(object)\n")
    write_dist(site, "bad-register", "bad_register", source)
    registry = build_registry(env={})
    assert any("is not a class" in b.error or "no dotted" in b.error for b in registry.broken)
    assert "chunk.tokens" in registry.components


def test_autoload_switch_and_allow_list(site: Path) -> None:
    write_dist(site, "acme-compactor", "acme_compactor", SHOUT, entry="acme")
    off = build_registry(env={"COMPACTOR_DISABLE_PLUGIN_AUTOLOAD": "1"})
    assert "acme.shout" not in off.components
    assert "chunk.tokens" in off.components  # built-ins always load
    allowed = build_registry(env={"COMPACTOR_DISABLE_PLUGIN_AUTOLOAD": "1",
                                  "COMPACTOR_LOAD_PLUGINS": "acme"})
    assert "acme.shout" in allowed.components
    other = build_registry(env={"COMPACTOR_LOAD_PLUGINS": "something-else"})
    assert "acme.shout" not in other.components


def test_trace_switch_prints_hook_calls(site: Path) -> None:
    result = run_cli("generic", "-", "--budget", "50", stdin=b"Some text to trace.",
                     env={"COMPACTOR_TRACE_HOOKS": "1"})
    assert result.returncode == 0, result.stderr
    assert "compactor_chunk" in result.stderr


def test_each_pipeline_gets_its_own_plugin_manager() -> None:
    first = Pipeline.from_yaml("generic")
    second = Pipeline.from_yaml("generic")
    assert first.registry.pm is not second.registry.pm


def run_python(script: str, env: dict[str, str] | None = None) -> str:
    """What `script` prints, run in a fresh interpreter (what a process has imported is its own)."""
    import os
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True,
                          timeout=120, env={**os.environ, **(env or {})}).stdout


def test_a_pipeline_imports_only_the_builtin_modules_it_names() -> None:
    script = ("import sys\nfrom compactor.pipeline import Pipeline\n"
              "Pipeline.from_string('version: 1\\nsteps:\\n  - use: clean.normalize\\n"
              "  - use: chunk.sentences\\n')\n"
              "print(sorted(m for m in sys.modules if m.startswith('compactor.plugins.')))")
    loaded = run_python(script)
    assert "'compactor.plugins.chunk'" in loaded and "'compactor.plugins.clean'" in loaded
    for never in ("eight_segment", "map_reduce", "organize", "classify", "score", "compress.select"):
        assert never not in loaded, loaded


def test_every_builtin_declaration_names_its_class() -> None:
    from compactor.plugins import BUILTINS, builtin_components

    classes = builtin_components()
    assert [(c.name, c.stage) for c in classes] == [(d.name, d.stage) for d in BUILTINS]
    assert all(d.names(c) for d, c in zip(BUILTINS, classes, strict=True))
    assert len({d.name for d in BUILTINS}) == len(BUILTINS)


LAZY = '''
from compactor import hookimpl
from compactor.registry import Deferred

@hookimpl
def compactor_register_components(register):
    register(Deferred("acme.shout", "clean", "acme_shout_impl:Shout"))
    register(Deferred("acme.gone", "clean", "acme_missing_module:Gone"))
    register(Deferred("acme.liar", "chunk", "acme_shout_impl:Shout"))
'''


def test_a_deferred_component_is_imported_when_a_pipeline_names_it(site: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.delitem(sys.modules, "acme_shout_impl", raising=False)  # dropped again afterwards
    (site / "acme_shout_impl.py").write_text(SHOUT.split("@hookimpl\ndef compactor_register")[0],
                                             encoding="utf-8")
    write_dist(site, "acme-lazy", "acme_lazy", LAZY, entry="acme")
    registry = build_registry(env={})
    assert {"acme.shout", "acme.gone", "acme.liar"} <= set(registry.components)
    assert "acme_shout_impl" not in sys.modules and not registry.get("acme.shout").loaded
    assert "Did you mean 'acme.shout'?" in registry.unknown_message("acme.shot")
    assert Pipeline.from_string(PIPELINE, env={}).run("quiet words").output == "QUIET WORDS!"
    assert "acme_shout_impl" in sys.modules
    # a declaration that cannot be honoured fails the pipelines naming it, and only those
    with pytest.raises(PluginError, match=r"'acme.gone' of plugin 'acme' from acme-lazy 1.0 could not be "
                                          r"loaded: ModuleNotFoundError"):
        Pipeline.from_string("version: 1\nsteps:\n  - use: acme.gone\n", env={})
    with pytest.raises(PluginError, match=r"declared as 'acme.liar' \(chunk\)"):
        registry.get("acme.liar").cls  # noqa: B018
    registry.load_all()  # what a listing does: the failures become broken plugins
    assert "acme.gone" not in registry.components and "acme.shout" in registry.components
    assert sorted(b.error.split(": ")[:2] for b in registry.broken) == [
        ["acme.gone", "ModuleNotFoundError"], ["acme.liar", "PluginError"]]


CLASH = '''
from compactor import Component, hookimpl

class Mine(Component):
    """Not the built-in."""
    name = "compress.map_reduce"
    stage = "compress"

    @hookimpl
    def compactor_compress(self, context, run):
        return context

@hookimpl
def compactor_register_components(register):
    register(Mine)
'''


def test_a_builtin_name_claimed_by_another_class_is_contested_without_importing(site: Path) -> None:
    write_dist(site, "clash-plugin", "clash", CLASH)
    script = ("import sys\nfrom compactor.registry import build_registry\n"
              "registry = build_registry(env={})\n"
              "name = 'compress.map_reduce'\n"
              "print(name in registry.contested, name in registry.components,"
              " 'compactor.plugins.' + name in sys.modules)\n"
              "print(registry.unknown_message('compress.map_reduce'))")
    shown = run_python(script, env={"PYTHONPATH": str(site)})
    assert shown.splitlines()[0] == "True False False"
    assert "claimed by plugin 'builtins' from compactor" in shown
    assert "plugin 'clash' from clash-plugin 1.0" in shown


def test_one_class_offered_as_a_class_and_as_a_declaration_is_one_component() -> None:
    from compactor.plugins.chunk import TokenChunker
    from compactor.registry import Deferred

    class Both:
        @staticmethod
        @hookimpl
        def compactor_register_components(register):  # type: ignore[no-untyped-def]
            register(TokenChunker)
            register(Deferred("chunk.tokens", "chunk", "compactor.plugins.chunk:TokenChunker"))

    registry = build_registry(plugins=[Both()], env={})
    assert "chunk.tokens" not in registry.contested and registry.get("chunk.tokens").plugin == "builtins"
