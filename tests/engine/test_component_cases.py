"""Every built-in component's YAML cases (tests/cases/components), and the runner itself."""

from __future__ import annotations

import pytest

from compactor.errors import ConfigError
from compactor.plugins import BUILTIN_COMPONENTS
from compactor.testing import CaseFailure, load_cases, parametrize, run_case

from ..helpers import CASES as SHARED_CASES

CASES = SHARED_CASES / "components"


@parametrize(CASES)
def test_component_case(case):
    run_case(case)


def test_every_builtin_component_has_cases():
    by_component: dict[str, int] = {}
    for case in load_cases(CASES):
        by_component[case.component] = by_component.get(case.component, 0) + 1
    missing = [c.name for c in BUILTIN_COMPONENTS if by_component.get(c.name, 0) < 2]
    assert not missing, f"components with fewer than 2 cases: {missing}"


def test_failure_names_file_case_and_line(tmp_path):
    file = tmp_path / "score.relevance.yaml"
    file.write_text("component: score.relevance\ncases:\n  - id: wrong\n    text: Databases store rows.\n"
                    "    expect:\n      output_contains:\n        - nowhere\n", encoding="utf-8")
    (case,) = load_cases(file)
    with pytest.raises(CaseFailure) as info:
        run_case(case)
    message = str(info.value)
    assert f"{file}:7" in message and "'wrong'" in message and "nowhere" in message


def test_typo_in_case_file_is_a_clear_error(tmp_path):
    file = tmp_path / "typo.yaml"
    file.write_text("component: score.relevance\ncases:\n  - id: a\n    text: x\n    expect:\n"
                    "      output_contain: [x]\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"typo.yaml:6: case 'a': unknown key 'output_contain'"):
        load_cases(file)


def test_unexpected_success_of_an_error_case_fails(tmp_path):
    file = tmp_path / "c.yaml"
    file.write_text("component: score.relevance\ncases:\n  - id: ok\n    text: x\n    expect:\n"
                    "      raises: {error: ConfigError}\n", encoding="utf-8")
    with pytest.raises(CaseFailure, match="the run succeeded"):
        run_case(load_cases(file)[0])


def test_case_ids_are_readable():
    ids = [str(case) for case in load_cases(CASES / "score.relevance.yaml")]
    assert "score.relevance::relevant_kept_en" in ids


def test_a_third_party_plugin_is_tested_through_the_runner(tmp_path, monkeypatch):
    (tmp_path / "shout_plugin.py").write_text(
        "from compactor.components import Component\nfrom compactor.hookspecs import hookimpl\n\n"
        "class Shout(Component):\n    name = 'clean.shout'\n    stage = 'clean'\n\n"
        "    @hookimpl\n    def compactor_clean(self, context, run):\n"
        "        return context.evolve(sources=tuple(s.with_text(s.text.upper()) "
        "for s in context.sources))\n\n"
        "@hookimpl\ndef compactor_register_components(register):\n    register(Shout)\n",
        encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    file = tmp_path / "clean.shout.yaml"
    file.write_text("component: clean.shout\nplugins: [shout_plugin]\ncases:\n  - id: upper\n"
                    "    text: quiet words\n    expect:\n      output_contains: [QUIET WORDS]\n",
                    encoding="utf-8")
    (case,) = load_cases(file)
    assert run_case(case).output.strip() == "QUIET WORDS"


def test_import_does_not_need_pytest():
    import subprocess
    import sys

    code = ("import sys; sys.modules['pytest'] = None; import compactor.testing as t; "
            "print(t.load_cases.__name__)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "load_cases" in done.stdout, done.stderr
