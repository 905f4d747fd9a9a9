"""Pipeline files: located errors, all at once, suggestions, interpolation, defaults; and files that
are hostile or mistaken: bounded loading and `when:` work, YAML merge keys, keys kept out of messages,
data and store paths confined to the pipeline's folder."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import pytest

from compactor import ConfigError, Pipeline
from compactor.conditions import namespace_lookup, parse_condition
from compactor.errors import ConditionError
from compactor.yamlmarks import MAX_FILE_CHARS, load_marked

from ..helpers import run_cli


def problems_of(text: str, folder: Path | None = None, env: dict[str, str] | None = None) -> str:
    with pytest.raises(ConfigError) as caught:
        Pipeline.from_string(text, file="p.yaml", env=env or {}, folder=folder)
    return str(caught.value)


def test_duplicate_keys_are_rejected_with_position() -> None:
    message = problems_of("version: 1\nsteps:\n  - use: chunk.tokens\n    use: chunk.sentences\n")
    assert "p.yaml:4:5: steps[0].use: duplicate key 'use' (first defined on line 3)" in message


def test_unknown_component_suggests_and_lists_choices() -> None:
    message = problems_of("version: 1\nsteps:\n  - use: chunk.sentence\n")
    assert "p.yaml:3:10: steps[0].use: unknown component 'chunk.sentence'." in message
    assert "Did you mean 'chunk.sentences'?" in message
    assert "Available: " in message and "chunk.tokens" in message


def test_all_problems_are_reported_at_once() -> None:
    text = (
        "version: 1\n"
        "budjet: {max_tokens: 10}\n"
        "steps:\n"
        "  - use: chunk.tokens\n"
        "    with: {size: big, overlapp: 3}\n"
        "  - use: compress.selekt\n"
        "output: {format: yaml}\n"
    )
    message = problems_of(text)
    assert message.startswith("5 problems")
    assert "p.yaml:2:1: budjet: unknown key 'budjet'. Did you mean 'budget'?" in message
    assert "p.yaml:5:18: steps[0].with.size: chunk.tokens expects int, got str 'big'" in message
    assert "steps[0].with.overlapp: chunk.tokens has no parameter 'overlapp'. " \
           "Did you mean 'overlap'?" in message
    assert "p.yaml:6:10: steps[1].use: unknown component 'compress.selekt'" in message
    assert "p.yaml:7:18: output.format: must be one of text, markdown, json" in message


def test_syntax_errors_point_at_the_line() -> None:
    message = problems_of("version: 1\nsteps:\n  - use: [chunk.tokens\n")
    assert message.startswith("p.yaml:4:1: invalid YAML")


def test_requirements_and_order_are_checked() -> None:
    message = problems_of("version: 1\nsteps:\n  - use: compress.select\n  - use: chunk.tokens\n"
                          "  - use: clean.normalize\n")
    assert "compress.select requires chunks" in message
    assert "cleaning must come before chunking" in message


def test_parameter_checks_of_the_component_run() -> None:
    message = problems_of("version: 1\nsteps:\n  - use: chunk.tokens\n    with: {size: 100, "
                          "overlap: 100}\n")
    assert "steps[0].with: chunk.tokens: overlap must be at least 0 and smaller than the size" in message


def test_environment_interpolation() -> None:
    text = "version: 1\nbudget: {max_tokens: 10}\nname: ${NAME}\ntokenizer: ${TOK:-cl100k_base}\n" \
           "steps: [chunk.tokens]\n"
    pipeline = Pipeline.from_string(text, env={"NAME": "from-env"})
    assert pipeline.spec.name == "from-env"
    assert pipeline.spec.tokenizer == "cl100k_base"
    assert "p.yaml:3:7: name: environment variable NAME is not set" in problems_of(text)


def test_when_conditions_are_parsed_safely_and_names_checked() -> None:
    bad = problems_of("version: 1\nsteps:\n  - use: chunk.tokens\n    when: __import__('os')\n")
    assert "steps[0].when:" in bad and "not allowed" in bad
    unknown = problems_of("version: 1\nsteps:\n  - use: chunk.tokens\n"
                          "    when: validate.loss.level == 'severe'\n")
    assert "unknown name 'validate.loss.level'" in unknown


def test_when_skips_a_step_and_reports_it() -> None:
    pipeline = Pipeline.from_string(
        "version: 1\nsteps:\n  - use: chunk.tokens\n  - use: compress.select\n"
        "    when: tokens > 45000 * 0.8\n")
    context = pipeline.run("A short text. " * 20, budget=1000)
    select = next(r for r in context.reports if r.step == "compress.select")
    assert select.skipped
    assert context.segments == ()


def test_print_config_fills_every_default() -> None:
    pipeline = Pipeline.from_yaml("generic")
    printed = pipeline.print_config()
    assert "tokenizer: cl100k_base" in printed
    assert "overlap: 0" in printed  # chunk.sentences default, not written in the file
    assert "temperature: 0.3" in printed and "max_tokens: 1500" in printed


def test_cli_check_points_at_the_line(tmp_path: Path) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text("version: 1\nsteps:\n  - use: clean.html\n  - use: chunk.tokns\n"
                      "    with: {size: 512}\n", encoding="utf-8")
    result = run_cli(str(broken), "--check")
    assert result.returncode == 2
    assert f"{broken}:4:10: steps[1].use: unknown component 'chunk.tokns'" in result.stderr
    assert "Traceback" not in result.stderr
    good = run_cli("pipelines/generic.yaml", "--check")
    assert good.returncode == 0, good.stderr
    assert "ok (6 steps)" in good.stdout


# Hostile or mistaken pipeline files: costly `when:` expressions, YAML merge keys, credentials in
# error messages, store paths out of the pipeline's folder.


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


# Pipeline files are code a user may receive from someone else: loading and checking one must be
# bounded (alias bombs, nesting, size, huge conditions) and must not read files outside its folder.

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
