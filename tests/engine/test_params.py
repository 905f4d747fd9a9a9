"""Parameters declared once: a component's `param()` fields give its `__init__`, schema, checks and
`repr`; per-run options (a face's keywords, CLI flags) are refused with a pipeline file's message."""

from __future__ import annotations

import inspect
import json
from typing import Any, Literal

import pytest

import compactor
from compactor import components, hookspecs
from compactor.components import STAGES, Component, param
from compactor.document import Context
from compactor.errors import ConfigError, InputError
from compactor.hookspecs import hookimpl
from compactor.pipeline import Pipeline
from compactor.registry import build_registry
from compactor.run import Run

from ..helpers import run_cli


class Repeat(Component):
    """Repeat every source's text (a test component)."""

    name = "test.repeat"
    stage = "clean"

    times: int = param(2, ge=1, le=5, doc="copies of the text")
    joiner: str = param(" ")
    case: Literal["keep", "upper"] = param("keep")
    tail: str | None = param(None)
    label: str = param()

    def check(self) -> list[str]:
        return ["joiner must not be empty when times > 1"] if self.times > 1 and not self.joiner else []

    def __post_init__(self) -> None:
        self.built = f"{self.label}x{self.times}"

    @hookimpl
    def compactor_clean(self, context: Context, run: Run) -> Context:
        return context


def test_a_declared_component_gets_a_keyword_only_init_with_its_defaults() -> None:
    made = Repeat(label="a")
    assert (made.times, made.joiner, made.case, made.tail, made.label) == (2, " ", "keep", None, "a")
    assert made.built == "ax2"  # __post_init__ ran once the values were set
    signature = inspect.signature(Repeat)
    assert [p.name for p in signature.parameters.values()] == ["times", "joiner", "case", "tail", "label"]
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in signature.parameters.values())
    assert signature.parameters["times"].default == 2
    with pytest.raises(TypeError):
        Repeat(3, label="a")  # type: ignore[call-arg]


def test_the_schema_repr_and_listing_come_from_the_declaration() -> None:
    params = {p.name: p for p in Repeat.parameters()}
    assert params["times"].annotation is int and params["times"].default == 2 and params["times"].doc
    assert params["label"].required and not params["times"].required
    assert params["case"].type_name == "'keep' | 'upper'"  # a Literal's values are its choices
    assert str(params["times"]) == "times: int = 2 (>= 1, <= 5)"
    assert repr(Repeat(times=3, label="b")) == \
        "<test.repeat times=3, joiner=' ', case='keep', tail=None, label='b'>"


@pytest.mark.parametrize(("given", "message"), [
    ({"times": 0}, "test.repeat: times must be in [1, 5], not 0"),
    ({"times": "2"}, "test.repeat expects int, got str '2'"),
    ({"times": 2.5}, "test.repeat expects int, got float 2.5"),
    ({"case": "lower"}, "test.repeat: case must be one of keep, upper, not 'lower'"),
    ({"joiner": ""}, "test.repeat: joiner must not be empty when times > 1"),
    ({"tims": 3}, "test.repeat has no parameter 'tims'. Did you mean 'times'?"),
    ({}, "test.repeat requires parameter 'label' (str)"),
])
def test_bounds_and_types_are_refused_from_python(given: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        Repeat(**{"label": "x", **given} if given else {})
    assert message in str(caught.value)


def test_a_bound_is_refused_from_a_pipeline_file_with_the_python_message() -> None:
    with pytest.raises(ConfigError) as from_python:
        Repeat(label="x", times=9)
    text = "steps:\n  - use: test.repeat\n    with: {label: x, times: 9}\n"
    with pytest.raises(ConfigError) as from_file:
        Pipeline.from_string(text, file="p.yaml", plugins=[_Plugin()])
    message = "test.repeat: times must be in [1, 5], not 9"
    assert message in str(from_python.value) and message in str(from_file.value)


class _Plugin:
    @hookimpl
    def compactor_register_components(self, register: Any) -> None:
        register(Repeat)


def test_declaring_fields_and_writing_init_is_refused() -> None:
    with pytest.raises(TypeError, match="not both"):
        class Both(Component):
            size: int = param(1)

            def __init__(self, *, size: int = 1) -> None:
                self.size = size


def test_overridden_checks_the_values_and_leaves_the_component_as_it_was() -> None:
    made = Repeat(label="x")
    assert made.overridden({"times": 4, "fill": True}).times == 4  # keys of no parameter: the caller's
    assert made.overridden({"times": 4}).built == "xx4" and made.times == 2
    with pytest.raises(InputError, match=r"^test\.repeat: times must be in \[1, 5\], not 0$"):
        made.overridden({"times": 0})


def _file_message(keep_last: str) -> str:
    text = ("steps:\n  - use: chunk.messages\n  - use: compress.eight_segment\n"
            f"    with: {{keep_last: {keep_last}}}\n")
    with pytest.raises(ConfigError) as caught:
        Pipeline.from_string(text, file="p.yaml")
    return str(caught.value)


HISTORY = [{"role": "user", "content": f"Question {i}: " + "words " * 40} for i in range(8)]


@pytest.mark.parametrize(("value", "in_file"), [(-1, "-1"), ("2", '"2"'), (2.5, "2.5")])
def test_per_run_keep_last_is_refused_with_the_pipeline_files_message(value: Any, in_file: str) -> None:
    expected = _file_message(in_file).split(": ", 2)[-1]  # past "p.yaml:4:11: steps[1].with[.keep_last]: "
    with pytest.raises(InputError) as face:
        compactor.compact_messages(HISTORY, 300, keep_last=value)
    assert str(face.value).endswith(expected), (str(face.value), expected)
    with pytest.raises(InputError) as auto:
        compactor.AutoCompactor(4000, keep_last=value)  # the LangChain and Agents SDK faces build one
    assert str(auto.value) == str(face.value)


def test_the_cli_flag_is_refused_with_the_schema_message() -> None:
    done = run_cli("conversation", "-", "--keep-last", "-1", stdin=json.dumps(HISTORY).encode())
    assert done.returncode == 2
    assert "--keep-last: compress.eight_segment: keep_last must be 0 or more, not -1" in done.stderr


def test_transcript_options_go_through_the_organizers_schema() -> None:
    results = {"filename": "talk.mp4", "segments": [{"start": 0, "end": 1, "text": "Hello there."}]}
    with pytest.raises(InputError, match=r"organize\.hierarchical: unit must be one of chars, tokens"):
        compactor.compress_transcripts(results, query="hello", unit="lines")  # type: ignore[arg-type]
    assert "Hello there." in compactor.compress_transcripts(results, query="hello", unit="tokens")


def test_every_built_in_shows_its_values_and_keeps_its_bounds() -> None:
    registry = build_registry()
    assert len(registry.components) >= 32
    for name, info in registry.components.items():
        made = info.cls()
        shown = repr(made)
        assert "?" not in shown, shown
        for p in info.cls.parameters():
            assert f"{p.name}={getattr(made, p.name)!r}" in shown, (name, p.name)
            assert p.bound_problem(p.default) is None, (name, p.name)  # every default is allowed


def test_stages_and_stage_hooks_are_declared_once() -> None:
    assert components.Stage is hookspecs.Stage and tuple(hookspecs.STAGE_HOOKS) == components.STAGES
    assert all(hookspecs.STAGE_HOOKS[stage] == f"compactor_{stage}" for stage in STAGES)
    assert all(callable(getattr(hookspecs, hook)) for hook in hookspecs.STAGE_HOOKS.values())
