"""Hostile or mistaken pipeline files: costly `when:` expressions, YAML merge keys, credentials in
error messages, store paths out of the pipeline's folder."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from compactor import ConfigError, Pipeline
from compactor.conditions import parse_condition
from compactor.errors import ConditionError

from .helpers import run_cli


def problems_of(text: str, folder: Path | None = None) -> str:
    with pytest.raises(ConfigError) as caught:
        Pipeline.from_string(text, file="p.yaml", env={}, folder=folder)
    return str(caught.value)


# -- when: is bounded in work, not only in size ------------------------------------------------------

COSTLY = [
    "[[[[1]*9]*9]*9]*9 == [[[[1]*9]*9]*9]*9",  # nested repetition: 9^4 items behind 36 references
    "[[[[[1]*99]*99]*99]*99]*99 == [[[[[1]*99]*99]*99]*99]*99",  # 99^5 if it were ever compared
    "tokens > 0 and [[[[[1]*99]*99]*99]*99]*99 == [[[[[1]*99]*99]*99]*99]*99",
    "['x'*1000]*10000 == tokens",  # 10 million characters behind one list
    "'x'*99999999 == tokens",
    "[[1]*9000, [1]*9000, [1]*9000] == tokens",  # a literal list of large lists
    "99999999999999999999*99999999999999999999*99999999999999999999*999999999999999999999 > 1",
    "9**9**9 > tokens",
    "[x for x in [1]*9] == tokens",
    "[1]*9999" + " + [1]" * 300 + " == tokens",
]


@pytest.mark.parametrize("source", COSTLY)
def test_costly_conditions_are_refused_quickly(source: str) -> None:
    started = time.perf_counter()
    with pytest.raises(ConditionError):
        parse_condition(source)
    assert time.perf_counter() - started < 0.5


def test_large_but_bounded_conditions_still_work_fast() -> None:
    source = "(" + "[1]*5000 == [1]*5000 and " * 60 + "tokens > 3)"
    started = time.perf_counter()
    condition = parse_condition(source)
    assert condition.evaluate(lambda name: 4) is True
    assert condition.evaluate(lambda name: 2) is False
    assert time.perf_counter() - started < 0.5
    assert parse_condition("['a', 'b'] * 3 == tokens").evaluate(lambda n: ["a", "b"] * 3) is True


def test_a_repeated_list_of_lists_from_a_report_is_false_not_slow() -> None:
    nested = [[[1] * 99] * 99] * 99
    condition = parse_condition("report.value * 99 == report.value * 99")
    started = time.perf_counter()
    assert condition.evaluate(lambda name: nested) is False
    assert time.perf_counter() - started < 0.5


def test_cli_check_refuses_a_costly_condition_naming_file_step_and_field(tmp_path: Path) -> None:
    pipeline = tmp_path / "slow.yaml"
    pipeline.write_text("version: 1\nsteps:\n  - use: chunk.tokens\n"
                        "    when: '[[[[[1]*99]*99]*99]*99]*99 == [[[[[1]*99]*99]*99]*99]*99'\n",
                        encoding="utf-8")
    started = time.perf_counter()
    result = run_cli(str(pipeline), "--check")
    assert result.returncode == 2, result.stderr
    assert f"{pipeline}:4:11: steps[0].when:" in result.stderr
    assert "repeats a list of lists" in result.stderr
    assert "Traceback" not in result.stderr
    assert time.perf_counter() - started < 10  # a fresh interpreter; the check itself is instant


# -- YAML merge keys -----------------------------------------------------------------------------------


def test_merge_keys_resolve_as_pyyaml_does() -> None:
    text = ("version: 1\nsteps:\n  - use: chunk.tokens\n    with: &d {size: 200, overlap: 5}\n"
            "  - use: chunk.tokens\n    with:\n      <<: *d\n      overlap: 10\n"
            "  - use: chunk.tokens\n    with:\n      <<: [{size: 300}, *d]\n")
    steps = Pipeline.from_string(text, file="p.yaml", env={}).spec.steps
    params = [dict(step.components[0][1]) for step in steps]
    assert params[0] == {"size": 200, "overlap": 5}
    assert params[1] == {"size": 200, "overlap": 10}  # the mapping's own key wins
    assert params[2] == {"size": 300, "overlap": 5}  # the earlier merged mapping wins


def test_merged_mistakes_point_at_where_they_were_written() -> None:
    text = ("version: 1\nsteps:\n  - use: chunk.tokens\n    with: &d {size: big}\n"
            "  - use: chunk.tokens\n    with:\n      <<: *d\n")
    message = problems_of(text)
    assert "p.yaml:4:21: steps[0].with.size: chunk.tokens expects int, got str 'big'" in message
    assert "p.yaml:4:21: steps[1].with.size: chunk.tokens expects int, got str 'big'" in message
    scalar = problems_of("version: 1\nsteps:\n  - use: chunk.tokens\n    with:\n      <<: 5\n")
    assert "p.yaml:5:11: steps[0].with: a merge key (<<) takes a mapping or a list of mappings" \
        in scalar


def test_merge_keys_cannot_expand_past_the_size_bound() -> None:
    lines = ["version: 1", "a0: &a0 {k: 1, j: 2}"]
    lines += [f"a{i}: &a{i} {{<<: [*a{i - 1}], x{i}: [*a{i - 1}, *a{i - 1}, *a{i - 1}]}}"
              for i in range(1, 16)]
    lines.append("steps: [chunk.tokens]")
    started = time.perf_counter()
    message = problems_of("\n".join(lines) + "\n")
    assert "expands to more than" in message
    assert time.perf_counter() - started < 2


# -- credentials are never echoed ----------------------------------------------------------------------


@pytest.mark.parametrize("value", ["[sk-live-0123456789abcdef]", "{key: sk-live-0123456789abcdef}"])
def test_a_wrongly_typed_api_key_is_named_not_shown(value: str) -> None:
    message = problems_of(f"version: 1\nllm:\n  api_key: {value}\nsteps: [chunk.tokens]\n")
    assert "p.yaml:3:12: llm.api_key: expected str | null" in message
    assert "sk-live" not in message and "0123456789abcdef" not in message


def test_other_wrongly_typed_values_are_still_shown() -> None:
    message = problems_of("version: 1\nllm:\n  model: [gpt-x]\nsteps: [chunk.tokens]\n")
    assert "llm.model: expected str | null, got list ['gpt-x']" in message


# -- store.path stays in the pipeline's folder ---------------------------------------------------------


def test_store_path_resolves_in_the_pipeline_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "pipes"
    folder.mkdir()
    pipeline = folder / "p.yaml"
    pipeline.write_text("version: 1\nstore: {path: state/s.sqlite}\nsteps: [chunk.tokens]\n",
                        encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    assert Pipeline.from_yaml(str(pipeline)).spec.store["path"] == str(folder / "state" / "s.sqlite")
    memory = Pipeline.from_string("version: 1\nstore: {path: ':memory:'}\nsteps: [chunk.tokens]\n")
    assert memory.spec.store["path"] == ":memory:"


@pytest.mark.parametrize(("path", "why"), [
    ("/tmp/elsewhere.sqlite", "must be a relative path"),
    ("~/s.sqlite", "must be a relative path"),
    ("../s.sqlite", "must not leave the pipeline's folder"),
    ("sub/../../s.sqlite", "must not leave the pipeline's folder"),
    ("out/s.sqlite", "resolves outside the pipeline's folder"),
])
def test_store_path_out_of_the_folder_is_refused(tmp_path: Path, path: str, why: str) -> None:
    folder = tmp_path / "pipes"
    folder.mkdir()
    (folder / "out").symlink_to(tmp_path)
    message = problems_of(f"version: 1\nstore:\n  path: '{path}'\nsteps: [chunk.tokens]\n", folder)
    assert "p.yaml:3:9: store.path: store" in message and why in message
    assert not (tmp_path / "s.sqlite").exists()


def test_shipped_pipelines_still_check() -> None:
    for name in ("generic", "conversation", "deep-search"):
        assert Pipeline.from_yaml(name).spec.steps
