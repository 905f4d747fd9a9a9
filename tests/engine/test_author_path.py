"""The plugin author's path, with the example package (examples/plugin_package) installed for real:
an installed module also passed in `plugins=` registers once, observer hooks are wrappers only,
`compactor.testing.parametrize` reads paths from the calling test file, every hook runs."""

from __future__ import annotations

import importlib
import importlib.util
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import compactor
from compactor import ConfigError, Pipeline, PluginError, hookimpl
from compactor.registry import ENTRY_POINT_GROUP, build_registry

from ..helpers import REPO, write_dist

EXAMPLE = REPO / "examples" / "plugin_package"
MODULE = "acme_compactor"
TEXT = "routine note\nURGENT: the disk is full\nanother routine note"


def _forget(name: str) -> None:
    """Drop a module imported from a throwaway folder (test_plugins writes one of the same name)."""
    for key in [k for k in sys.modules if k == name or k.startswith(name + ".")]:
        del sys.modules[key]


def _dist_info(site: Path, dist: str, version: str, entry: str, module: str) -> None:
    """An installed distribution's metadata only: its module lives elsewhere on sys.path."""
    info = site / f"{dist.replace('-', '_')}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n",
                                   encoding="utf-8")
    (info / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\n{entry} = {module}\n",
                                           encoding="utf-8")


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The example package installed: its entry point in a dist-info folder on sys.path, its module
    importable from examples/plugin_package."""
    site = tmp_path / "site"
    site.mkdir()
    _dist_info(site, "acme-compactor", "0.1.0", "acme", MODULE)
    _forget(MODULE)
    monkeypatch.syspath_prepend(str(EXAMPLE))
    monkeypatch.syspath_prepend(str(site))
    importlib.invalidate_caches()
    yield site
    _forget(MODULE)
    _forget("rival_plugin")


@pytest.fixture
def acme(site: Path) -> ModuleType:
    return importlib.import_module(MODULE)


# -- one registration per plugin object ---------------------------------------------------------


def test_installed_module_also_passed_in_plugins_registers_once(acme: ModuleType) -> None:
    registry = build_registry(plugins=[acme, acme], env={})
    named = [name for name, plugin in registry.pm.list_name_plugin() if plugin is acme]
    assert named == ["acme"]  # the entry point's name, not a second "acme_compactor"
    info = registry.get("acme.shout")
    assert (info.plugin, info.distribution, info.dist_version) == ("acme", "acme-compactor", "0.1.0")
    assert registry.broken == []


def test_compress_with_the_installed_module_in_plugins(acme: ModuleType) -> None:
    text = compactor.compress(TEXT, pipeline=EXAMPLE / "acme.yaml", plugins=[acme])
    assert text == "- URGENT: THE DISK IS FULL"
    generic = compactor.compress("One sentence. Another one.", plugins=[acme])
    assert generic == compactor.compress("One sentence. Another one.")


def test_same_classes_through_another_plugin_object_keep_their_origin(acme: ModuleType) -> None:
    class Reoffer:
        @hookimpl
        def compactor_register_components(self, register: Any) -> None:
            register(acme.Shout)

    registry = build_registry(plugins=[Reoffer()], env={})
    assert registry.broken == [] and registry.contested == {}
    assert registry.get("acme.shout").distribution == "acme-compactor"


def test_two_plugins_claiming_one_name_is_a_config_error(site: Path) -> None:
    rival = ("from compactor import Component, hookimpl\n\n"
             "class Other(Component):\n    '''Another acme.shout.'''\n    name = 'acme.shout'\n"
             "    stage = 'clean'\n\n    @hookimpl\n    def compactor_clean(self, context, run):\n"
             "        return context\n\n"
             "@hookimpl\ndef compactor_register_components(register):\n    register(Other)\n")
    (site / "rival_plugin.py").write_text(rival, encoding="utf-8")
    rival_module = importlib.import_module("rival_plugin")
    registry = build_registry(plugins=[rival_module], env={})
    with pytest.raises(PluginError, match=r"claimed by plugin 'acme' from acme-compactor 0\.1\.0 and "
                                          r"plugin 'rival_plugin'"):
        registry.get("acme.shout")
    [broken] = registry.broken
    assert broken.plugin == "rival_plugin" and "already registered by acme-compactor" in broken.error
    with pytest.raises(ConfigError, match=r"<string>:3:\d+: steps\[0\]\.use: component 'acme.shout' "
                                          "is claimed by"):
        Pipeline.from_string("version: 1\nsteps:\n  - use: acme.shout\n", plugins=[rival_module],
                             env={})
    # the plugin's other components, and the built-ins, are untouched
    other = Pipeline.from_string("version: 1\nsteps:\n  - use: acme.lines\n  - use: acme.first_line\n"
                                 "  - use: acme.bullets\n", plugins=[rival_module], env={})
    assert other.run("one\ntwo").output == "- one"


# -- observer hooks are wrappers ----------------------------------------------------------------


class PlainStep:
    """What an author might write first: a plain step hook handing its context back."""

    @hookimpl
    def compactor_step(self, step: Any, context: Any, run: Any) -> Any:
        return context


def test_a_plain_step_observer_would_empty_every_run() -> None:
    # why it is refused: registered behind the loader's back, it stands in for every step
    pipeline = Pipeline.from_yaml("generic")
    pipeline.registry.pm.register(PlainStep(), name="plain")
    assert not pipeline.run("Some text that should come back. Another sentence.").output


def test_a_plain_step_observer_is_refused_at_load() -> None:
    with pytest.raises(ConfigError) as info:
        compactor.compress("Some text.", plugins=[PlainStep()])
    message = str(info.value)
    assert "test_author_path.PlainStep" in message and "compactor_step" in message
    assert "@hookimpl(wrapper=True)" in message


def test_plain_run_observers_and_renamed_ones_are_refused() -> None:
    class PlainRun:
        @hookimpl
        def compactor_run(self, pipeline: Any, run: Any) -> Any:
            return None

    class Renamed:
        @hookimpl(specname="compactor_step", tryfirst=True)
        def measure(self, step: Any, context: Any, run: Any) -> Any:
            return context

    with pytest.raises(ConfigError, match="compactor_run is an observer hook and must be a wrapper"):
        build_registry(plugins=[PlainRun()], env={})
    with pytest.raises(ConfigError, match="compactor_step is an observer hook"):
        build_registry(plugins=[Renamed()], env={})


def test_wrapper_observers_see_every_step_and_change_nothing(acme: ModuleType) -> None:
    class OldStyle:  # pluggy's older wrapper form is a wrapper too
        seen = 0

        @hookimpl(hookwrapper=True)
        def compactor_step(self, step: Any, context: Any, run: Any) -> Any:
            OldStyle.seen += 1
            yield

    timer, old = acme.Timer(), OldStyle()
    plain = Pipeline.from_yaml("generic").run("Some text. Another sentence.").output
    watched = Pipeline.from_yaml("generic", plugins=[timer, old])
    assert watched.run("Some text. Another sentence.").output == plain
    assert len(timer.steps) == OldStyle.seen == len(watched.spec.steps) + 1  # and the renderer
    assert timer.runs == [("generic", watched.counter.count(plain or ""))]


def test_an_installed_plain_observer_is_a_broken_plugin(site: Path) -> None:
    source = ("from compactor import hookimpl\n\n@hookimpl\n"
              "def compactor_step(step, context, run):\n    return context\n")
    write_dist(site, "plain-observer", "plain_observer", source, version="0.2")
    try:
        registry = build_registry(env={})
        [broken] = [b for b in registry.broken if b.plugin == "plain_observer"]
        assert broken.error.startswith("ConfigError: plugin 'plain_observer': compactor_step")
        assert not registry.pm.has_plugin("plain_observer")
        assert Pipeline.from_yaml("generic").run("Some text stays.").output == "Some text stays."
    finally:
        _forget("plain_observer")


def test_a_component_with_a_plain_observer_hook_is_refused(acme: ModuleType) -> None:
    class Sneaky(acme.Shout):
        name = "acme.sneaky"

        @hookimpl
        def compactor_run(self, pipeline: Any, run: Any) -> Any:
            return None

    class Offers:
        @hookimpl
        def compactor_register_components(self, register: Any) -> None:
            register(Sneaky)

    registry = build_registry(plugins=[Offers()], env={})
    assert "acme.sneaky" not in registry.components
    [broken] = registry.broken
    assert "compactor_run is an observer hook" in broken.error and "'acme.sneaky'" in broken.error


# -- every hook of a third-party plugin runs ----------------------------------------------------


def test_every_hook_of_the_example_plugin_runs(acme: ModuleType) -> None:
    pipeline = Pipeline.from_yaml(EXAMPLE / "acme.yaml", plugins=[acme.Timer()])
    called: list[str] = []
    pipeline.registry.pm.add_hookcall_monitoring(lambda name, impls, kwargs: called.append(name),
                                                 lambda outcome, name, impls, kwargs: None)
    context = pipeline.run(TEXT)
    assert set(called) == {"compactor_run", "compactor_step", "compactor_clean", "compactor_chunk",
                           "compactor_classify", "compactor_score", "compactor_compress",
                           "compactor_validate", "compactor_fallback", "compactor_render"}
    assert context.output == "- URGENT: THE DISK IS FULL"
    urgent = [c for c in context.chunks if c.labels.get("acme.urgent")]
    assert [c.text for c in urgent] == ["URGENT: THE DISK IS FULL"]
    assert all("acme.shortest" in c.scores for c in context.chunks)
    loss = context.state.get(compactor.LossReport)
    assert loss is not None and loss.component == "acme.kept_share" and loss.retention == 1 / 3
    # compactor_register_components ran once per plugin: the example's eight components are there
    assert {c.name for c in acme.COMPONENTS} <= set(pipeline.registry.components)


def test_the_fallback_step_fills_in_when_nothing_was_kept(acme: ModuleType) -> None:
    text = "version: 1\nsteps:\n  - use: acme.lines\n  - use: acme.first_line\n  - use: acme.bullets\n"
    context = Pipeline.from_string(text, plugins=[acme]).run("first\nsecond")
    assert context.output == "- first"
    assert context.reports[1].details.get("declined") is None


# -- the example package and the testing recipe -------------------------------------------------


def test_example_pyproject_declares_the_entry_point(acme: ModuleType) -> None:
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((EXAMPLE / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert project["entry-points"][ENTRY_POINT_GROUP] == {"acme": MODULE}
    assert "compactor" in project["dependencies"]


def test_the_readme_testing_recipe_runs_from_any_directory(site: Path, tmp_path: Path) -> None:
    package = tmp_path / "acme-compactor"
    shutil.copytree(EXAMPLE, package, ignore=shutil.ignore_patterns("__pycache__"))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {"PYTHONPATH": f"{site}:{package}", "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(package)],
                          cwd=elsewhere, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "7 passed" in done.stdout


# -- parametrize reads paths from the calling test file -----------------------------------------


def _import_test_module(path: Path) -> ModuleType:
    """Import a test module as pytest would collect it (its `parametrize` runs at import)."""
    spec = importlib.util.spec_from_file_location(f"author_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


CALLER = "from compactor.testing import parametrize\nMARK = parametrize({path!r})\n"
CASE = ("component: chunk.sentences\ncases:\n  - id: two\n    text: One. Two.\n"
        "    expect: {chunk_count: {min: 1}}\n")


def test_parametrize_resolves_from_the_calling_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tests = tmp_path / "plugin" / "tests"
    (tests / "cases").mkdir(parents=True)
    (tests / "cases" / "chunk.sentences.yaml").write_text(CASE, encoding="utf-8")
    (tests / "test_cases.py").write_text(CALLER.format(path="cases"), encoding="utf-8")
    monkeypatch.chdir(tmp_path)  # not the test file's folder
    mark = _import_test_module(tests / "test_cases.py").MARK.mark
    [case] = mark.args[1]
    assert Path(case.file) == (tests / "cases" / "chunk.sentences.yaml").resolve()
    assert mark.kwargs["ids"] == ["chunk.sentences::two"]


def test_parametrize_fails_collection_on_an_empty_or_missing_folder(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tests = tmp_path / "tests"
    (tests / "cases").mkdir(parents=True)
    (tests / "cases" / "notes.txt").write_text("not a case file", encoding="utf-8")
    (tests / "test_empty.py").write_text(CALLER.format(path="cases"), encoding="utf-8")
    (tests / "test_missing.py").write_text(CALLER.format(path="nowhere"), encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=r"tests/cases: no case files \(\*\.yaml, \*\.yml\)"):
        _import_test_module(tests / "test_empty.py")
    with pytest.raises(ConfigError, match="nowhere: no such case file or folder"):
        _import_test_module(tests / "test_missing.py")


def test_a_path_written_from_the_working_directory_is_named(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tests = tmp_path / "tests"
    (tests / "cases").mkdir(parents=True)
    (tests / "cases" / "chunk.sentences.yaml").write_text(CASE, encoding="utf-8")
    (tests / "test_old.py").write_text(CALLER.format(path="tests/cases"), encoding="utf-8")
    monkeypatch.chdir(tmp_path)  # the old reading would find tests/cases from here
    with pytest.raises(ConfigError, match=r"'tests/cases' is read from the calling test file's folder; "
                                          r"write it relative to .*test_old\.py"):
        _import_test_module(tests / "test_old.py")


def test_a_plugin_claiming_a_built_in_name_does_not_replace_it(site: Path) -> None:
    # entry points load by name and "acme" sorts before "builtins": first-wins would hand every
    # shipped pipeline the plugin's class
    source = ("from compactor import Component, hookimpl\n\n"
              "class Fake(Component):\n    '''Not the built-in.'''\n    name = 'chunk.sentences'\n"
              "    stage = 'chunk'\n\n    @hookimpl\n    def compactor_chunk(self, context, run):\n"
              "        return context\n\n"
              "@hookimpl\ndef compactor_register_components(register):\n    register(Fake)\n")
    write_dist(site, "fake-chunks", "fake_chunks", source, entry="aaa")
    try:
        with pytest.raises(ConfigError, match=r"component 'chunk\.sentences' is claimed by plugin 'aaa' "
                                              r"from fake-chunks 1\.0 and plugin 'builtins' from compactor"):
            Pipeline.from_yaml("generic", env={})
        assert "chunk.sentences" in build_registry(env={"COMPACTOR_DISABLE_PLUGIN_AUTOLOAD": "1"}).components
    finally:
        _forget("fake_chunks")
