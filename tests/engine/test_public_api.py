"""The public API is one vocabulary: one error tree, `query`/`budget`, `pipeline`/`plugins` on every
face, everything documented exported."""

from __future__ import annotations

import ast
import inspect
import re
from typing import Any

import pytest

import compactor
from compactor import errors
from compactor.hookspecs import hookimpl

from ..helpers import REPO

PACKAGE_DIRS = (REPO / "core", REPO / "plugins")
FACES = ("compress", "compact_messages", "ContextCompacter", "ResearchSession", "compress_transcripts",
         "compress_single_file_results", "compress_multiple_files_results")


def _exception_classes() -> list[tuple[str, str]]:
    """(file, class) for every class in the package whose name says it is an error or a warning."""
    found = []
    for folder in PACKAGE_DIRS:
        for path in folder.rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text("utf-8"))):
                if (isinstance(node, ast.ClassDef) and not node.name.startswith("_")
                        and re.search(r"(Error|Exception|Warning|Conflict)$", node.name)):
                    found.append((str(path.relative_to(REPO)), node.name))
    return found


def test_every_public_error_is_defined_in_errors_py() -> None:
    outside = [(f, c) for f, c in _exception_classes() if f != "core/errors.py"]
    assert outside == []


def test_every_error_is_a_compactor_error_and_the_warning_a_user_warning() -> None:
    for _, name in _exception_classes():
        cls = getattr(errors, name)
        if name.endswith("Warning"):
            assert issubclass(cls, UserWarning)
        else:
            assert issubclass(cls, errors.CompactorError), name
        assert getattr(compactor, name) is cls, f"{name} is not exported by compactor"
    assert issubclass(errors.ConditionError, ValueError)  # kept catchable as before


def test_llm_error_keeps_its_reason_and_retry_verdict() -> None:
    err = compactor.LLMError("slow", reason="timeout", status=None)
    assert err.retryable and not compactor.LLMError("bad", reason="malformed").retryable
    assert isinstance(err, compactor.CompactorError)


def test_every_name_in_all_resolves_and_the_documented_names_are_exported() -> None:
    for name in compactor.__all__:
        assert getattr(compactor, name) is not None
    readme = (REPO / "README.md").read_text("utf-8")
    documented = set(re.findall(r"\bcompactor\.([A-Z]\w+|[a-z_]+)\(", readme))
    documented |= {"LLMSettings", "LLMError"}
    missing = [n for n in documented if not hasattr(compactor, n)]
    assert missing == []


@pytest.mark.parametrize("face", FACES)
def test_every_face_takes_pipeline_and_plugins(face: str) -> None:
    parameters = inspect.signature(getattr(compactor, face)).parameters
    assert "pipeline" in parameters and "plugins" in parameters


@pytest.mark.parametrize("face", ["compress", "compact_messages", "ContextCompacter", "compress_transcripts"])
def test_faces_name_the_question_query_and_the_size_budget(face: str) -> None:
    parameters = inspect.signature(getattr(compactor, face)).parameters
    assert "query" in parameters and "budget" in parameters
    assert "question" not in parameters and "max_length" not in parameters


class _Recorder:
    """A plugin object: proves `plugins=` reached the registry the face built."""

    def __init__(self) -> None:
        self.calls = 0

    @hookimpl
    def compactor_register_components(self, register: Any) -> None:
        self.calls += 1


def _history() -> list[dict[str, str]]:
    turns = []
    for n in range(12):
        turns.append({"role": "user", "content": f"Question {n}: what about order A-{100 + n}?"})
        turns.append({"role": "assistant", "content": f"Order A-{100 + n} ships on day {n}; the refund is "
                                                      f"{n * 10} dollars, approved by Mia."})
    return turns


def test_plugins_reach_the_pipeline_of_every_function_face() -> None:
    for call in (
        lambda r: compactor.compress("Alpha beta. " * 40, budget=20, plugins=[r]),
        lambda r: compactor.compact_messages(_history(), 300, plugins=[r]),
        lambda r: compactor.compress_transcripts(
            {"filename": "a.mp4", "segments": [{"start": 0, "end": 1, "text": "hello there"}]},
            query="hello", plugins=[r]),
    ):
        recorder = _Recorder()
        call(recorder)
        assert recorder.calls == 1


def test_a_pipeline_object_with_plugins_is_refused() -> None:
    pipeline = compactor.Pipeline.from_yaml("generic")
    with pytest.raises(compactor.InputError, match="plugins= applies"):
        compactor.compress("text", pipeline=pipeline, plugins=[_Recorder()])
    assert compactor.compress("Alpha beta. " * 40, budget=20, pipeline=pipeline)


def test_query_is_compact_messages_focus_under_its_common_name() -> None:
    history = _history()
    by_query = compactor.compact_messages(history, 260, query="order A-103")
    by_focus = compactor.compact_messages(history, 260, focus="order A-103")
    assert list(by_query) == list(by_focus)
    with pytest.raises(compactor.InputError, match="same option"):
        compactor.compact_messages(history, 260, query="a", focus="b")


def test_the_seed_transcript_names_are_aliases_of_compress_transcripts() -> None:
    results = {"filename": "talk.mp4", "segments": [
        {"index": i, "start": i * 2.0, "end": i * 2.0 + 2, "text": f"Segment {i} talks about topic {i % 3}."}
        for i in range(30)]}
    expected = compactor.compress_transcripts(results, query="topic 2", budget=300)
    assert compactor.compress_single_file_results("topic 2", results, 300) == expected
    assert compactor.compress_retrieval_results("topic 2", results, 300) == expected
    assert compactor.compress_multiple_files_results("topic 2", [results], 300) == expected
    assert len(expected) <= 300
