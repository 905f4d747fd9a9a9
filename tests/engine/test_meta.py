"""Contracts on the code base itself."""

from __future__ import annotations

import ast
import inspect
import re

import pytest

import compactor
from compactor import hookspecs
from compactor.plugins import BUILTIN_COMPONENTS

from ..helpers import REPO


def imports_of(path) -> list[str]:  # type: ignore[no-untyped-def]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
    return names


def test_core_never_imports_plugins_and_nothing_imports_bare_names() -> None:
    for folder in ("core", "plugins", "tests", "benchmarks"):
        for path in (REPO / folder).rglob("*.py"):
            for name in imports_of(path):
                root = name.split(".")[0]
                assert root not in ("core", "plugins", "pipelines"), f"{path}: import {name}"
                if folder == "core":
                    assert not name.startswith("compactor.plugins"), f"{path}: import {name}"


def test_public_all_is_sorted_and_complete() -> None:
    # ruff's isort-style order (RUF022): CONSTANTS, then Classes, then functions
    def group(name: str) -> tuple[int, str]:
        return (0 if name.isupper() else 1 if name[0].isupper() else 2, name)

    assert compactor.__all__ == sorted(compactor.__all__, key=group)
    assert all(hasattr(compactor, name) for name in compactor.__all__)


def test_every_hookspec_is_documented_and_in_the_readme() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    specs = [n for n, f in inspect.getmembers(hookspecs, inspect.isfunction)
             if n.startswith("compactor_")]
    assert len(specs) == 11
    for name in specs:
        assert (getattr(hookspecs, name).__doc__ or "").strip(), name
    observers = {"compactor_run", "compactor_step"}  # the run- and step-level observer hooks
    assert set(hookspecs.STAGE_HOOKS.values()) | {"compactor_register_components"} | observers == set(specs)
    assert "compactor_register_components" in readme


def test_every_builtin_component_is_tested_by_name() -> None:
    tests = "".join(p.read_text(encoding="utf-8") for p in (REPO / "tests").rglob("test_*.py"))
    for component in BUILTIN_COMPONENTS:
        assert component.name in tests, component.name
        assert (component.__doc__ or "").strip(), component.name


HOOKS = sorted(n for n, f in inspect.getmembers(hookspecs, inspect.isfunction) if n.startswith("compactor_"))


def write_a_plugin_section() -> str:
    """README's "Write a plugin" part: from its heading to the next second-level heading."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    start = readme.index("\n## Write a plugin\n")
    end = readme.find("\n## ", start + 1)
    return readme[start:end if end != -1 else len(readme)]


@pytest.mark.parametrize("hook", HOOKS)
def test_every_hook_is_documented_in_write_a_plugin(hook: str) -> None:
    # as datasette does: a plugin author finds every hook, with its signature, where plugins are
    # explained (a hook named only in a docstring is one nobody implements)
    section = write_a_plugin_section()
    assert re.search(rf"\bdef {hook}\(", section), f"README 'Write a plugin' lacks `def {hook}(...)`"


@pytest.mark.parametrize("hook", HOOKS)
def test_every_hook_is_exercised_by_a_test(hook: str) -> None:
    # a hook no test names is one whose contract can change unnoticed
    files = [p for p in (REPO / "tests").rglob("test_*.py") if p.name != "test_meta.py"]
    assert any(re.search(rf"\b{hook}\b", p.read_text(encoding="utf-8")) for p in files), (
        f"no test in tests/ names {hook}")
