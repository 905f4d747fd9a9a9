"""Pipeline files are code a user may receive from someone else: loading and checking one must be
bounded (alias bombs, nesting, size, huge conditions) and must not read files outside its folder."""

from __future__ import annotations

import os
import subprocess
import sys
import tracemalloc
from pathlib import Path

import pytest

from compactor import ConfigError, Pipeline
from compactor.conditions import namespace_lookup, parse_condition
from compactor.errors import ConditionError
from compactor.yamlmarks import MAX_FILE_CHARS, load_marked

BILLION_LAUGHS = """\
a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]
version: 1
steps: [{use: compress.select}]
"""


def run_check(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "compactor.ops.cli", str(path), "--check"],
                          capture_output=True, text=True, timeout=60, cwd=path.parent)


def test_billion_laughs_is_refused_quickly_and_small(tmp_path: Path) -> None:
    tracemalloc.start()
    with pytest.raises(ConfigError, match="expands to more than"):
        load_marked(BILLION_LAUGHS, "bomb.yaml")
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 50_000_000  # the bomb expands to 10^9 values; refusing it costs a few MB
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(BILLION_LAUGHS, encoding="utf-8")
    result = run_check(bomb)
    assert result.returncode == 2
    assert "bomb.yaml" in result.stderr and "expands to more than" in result.stderr
    assert "Traceback" not in result.stderr


def test_small_aliases_still_work() -> None:
    text = ("version: 1\nx: &sel {use: compress.select}\nsteps:\n  - use: chunk.sentences\n  - *sel\n")
    with pytest.raises(ConfigError, match="unknown key 'x'"):  # aliases resolve; the key is unknown
        Pipeline.from_string(text)
    ok = "version: 1\nsteps:\n  - &chunk {use: chunk.sentences}\n  - use: compress.select\n"
    assert len(Pipeline.from_string(ok).spec.steps) == 2


@pytest.mark.parametrize("text", ["[" * 5000 + "]" * 5000, "a:\n" + "".join(
    "  " * i + f"k{i}:\n" for i in range(1, 200)) + "  " * 200 + "v: 1\n"])
def test_deep_nesting_is_one_clear_error(text: str) -> None:
    with pytest.raises(ConfigError, match="nested"):
        load_marked(text, "deep.yaml")


def test_oversized_file_is_refused_before_parsing(tmp_path: Path) -> None:
    big = tmp_path / "big.yaml"
    big.write_text("version: 1\n# " + "x" * (MAX_FILE_CHARS + 10) + "\nsteps: [compress.select]\n",
                   encoding="utf-8")
    with pytest.raises(ConfigError, match="at most"):
        Pipeline.from_yaml(big)


@pytest.mark.parametrize("source", ["'x' * 3000000000 == 'y'", "[1, 2] * 100000000 == []",
                                    "'" + "y" * 5000 + "' == query",
                                    "99999999999999999999 * 99999999999999999999 * 99999999999999999999"
                                    " * 99999999999999999999 * 99999999999999999999 > tokens"])
def test_huge_condition_values_fail_the_check(source: str) -> None:
    with pytest.raises(ConditionError):
        parse_condition(source)


def test_huge_condition_fails_check_from_the_cli(tmp_path: Path) -> None:
    path = tmp_path / "when.yaml"
    path.write_text("version: 1\nsteps:\n  - use: chunk.sentences\n  - use: compress.select\n"
                    "    when: \"'x' * 3000000000 == 'y'\"\n", encoding="utf-8")
    result = run_check(path)
    assert result.returncode == 2, result.stderr
    assert "when.yaml:5" in result.stderr and "too large" in result.stderr


def test_a_huge_value_at_run_time_is_false_not_an_allocation() -> None:
    condition = parse_condition("query * tokens == 'y'")
    assert condition.evaluate(namespace_lookup({"query": "x", "tokens": 3_000_000_000})) is False
    assert parse_condition("query * 2 == 'xx'").evaluate(namespace_lookup({"query": "x"})) is True


def _rules_pipeline(path_value: str) -> str:
    return ("version: 1\nsteps:\n  - use: chunk.sentences\n"
            f"  - use: classify.rules\n    with: {{patterns: '{path_value}'}}\n"
            "  - use: compress.select\n")


@pytest.mark.parametrize("value", ["../secret.yaml", "/etc/passwd", "sub/../../secret.yaml",
                                   "~/secret.yaml", "link.yaml"])
def test_data_paths_stay_inside_the_pipeline_folder(tmp_path: Path, value: str) -> None:
    folder = tmp_path / "pipelines"
    (folder / "sub").mkdir(parents=True)
    secret = tmp_path / "secret.yaml"
    secret.write_text("types: {}\n", encoding="utf-8")
    os.symlink(secret, folder / "link.yaml")
    pipeline = folder / "p.yaml"
    pipeline.write_text(_rules_pipeline(value), encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        Pipeline.from_yaml(pipeline)
    assert "p.yaml:5" in str(caught.value) and "patterns" in str(caught.value)
    result = run_check(pipeline)
    assert result.returncode == 2 and "p.yaml" in result.stderr


def test_data_path_inside_the_folder_resolves_from_any_working_directory(tmp_path: Path) -> None:
    import compactor.plugins

    folder = tmp_path / "pipelines"
    (folder / "tables").mkdir(parents=True)
    shipped = Path(compactor.plugins.__file__).parent / "data" / "classify.yaml"
    (folder / "tables" / "mine.yaml").write_text(shipped.read_text(encoding="utf-8"), encoding="utf-8")
    pipeline = folder / "p.yaml"
    pipeline.write_text(_rules_pipeline("tables/mine.yaml"), encoding="utf-8")
    loaded = Pipeline.from_yaml(pipeline)  # the test's working directory is elsewhere
    [(_, params)] = loaded.spec.steps[1].components
    assert params["patterns"] == str((folder / "tables" / "mine.yaml").resolve())
    missing = folder / "q.yaml"
    missing.write_text(_rules_pipeline("tables/nope.yaml"), encoding="utf-8")
    with pytest.raises(ConfigError, match="not found"):
        Pipeline.from_yaml(missing)


@pytest.mark.parametrize(("step", "key"), [("classify.injection", "rules"), ("llm.fallback", "prompt"),
                                          ("compress.map_reduce", "map_prompt")])
def test_every_data_path_parameter_is_confined(tmp_path: Path, step: str, key: str) -> None:
    path = tmp_path / "p.yaml"
    body = {"classify.injection": "  - use: chunk.sentences\n  - use: classify.injection\n",
            "llm.fallback": "  - use: chunk.sentences\n  - use: compress.select\n  - use: llm.fallback\n",
            "compress.map_reduce": "  - use: chunk.sentences\n  - use: compress.map_reduce\n"}[step]
    path.write_text(f"version: 1\nsteps:\n{body}    with: {{{key}: ../../etc/passwd}}\n", encoding="utf-8")
    result = run_check(path)
    assert result.returncode == 2 and f"{step}: data file '../../etc/passwd' must not leave" in result.stderr
