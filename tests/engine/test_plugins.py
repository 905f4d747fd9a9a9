"""Third-party plugins through real entry points, broken-plugin isolation, env switches."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from compactor import Pipeline, PluginError
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
