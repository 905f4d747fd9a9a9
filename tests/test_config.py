"""Pipeline files: located errors, all at once, suggestions, interpolation, defaults."""

from __future__ import annotations

from pathlib import Path

import pytest

from compactor import ConfigError, Pipeline

from .helpers import run_cli


def problems_of(text: str, env: dict[str, str] | None = None) -> str:
    with pytest.raises(ConfigError) as caught:
        Pipeline.from_string(text, file="p.yaml", env=env or {})
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
