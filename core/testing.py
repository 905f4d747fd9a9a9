"""YAML test cases for components, and the runner plugin authors call from their own pytest.

Like sqlfluff's rule test cases: one YAML file per component holds its cases; the runner builds a
real pipeline through the normal YAML loader (so `params` are validated exactly as in a pipeline
file), runs it and checks the expectations. A failure names the case file, the case id and the
line of the failing expectation.

Case file format::

    component: score.relevance        # the component under test
    plugins: [mypkg.compactor_plugin] # optional: dotted module paths registered as plugins
    before: [{use: chunk.sentences, with: {size: 30}}]  # optional steps run before it
    after: [{use: compress.select}]                     # optional steps run after it
    cases:
      - id: relevant_kept_en
        text: "The cat sat. Databases store rows in tables."
        # or texts: [a, b]; messages: [{role, content}]; segments: [{start, end, text}];
        # sources: [{text, kind: web_page, uri, title}]
        query: database tables        # optional
        budget: 12                    # optional max tokens
        params: {passage_weight: 0.5} # the component's `with:`
        before: [...]                 # optional, overrides the file's
        after: [...]                  # optional, overrides the file's
        expect:
          output_contains: [Databases]      # also: output_not_contains
          kept_contains: [Databases]        # text kept in the output (alias of output_contains)
          dropped_contains: [cat sat]       # text missing from the output
          output_counts: {Databases: 1}     # occurrences in the output
          report: {kept_chunks: 1}          # the component's step report (dotted keys)
          max_tokens: 12                    # output tokens at most
          chunk_count: {min: 2, max: 5}     # chunks after the run
          scores_order: [[Databases, cat]]  # the chunk holding A scores above the one holding B
          labels: [{contains: Traceback, key: type, value: error_information}]
          raises: {error: ConfigError, match: passage_weight}

A malformed case file raises `compactor.ConfigError` with its file and line.
Without `before`/`after`, the steps around the component follow its stage: a chunker before
classify/score/compress steps, a scorer and `compress.select` before later stages.

Use in a plugin's own tests (no conftest needed); a relative path is read from the folder of the
test file that calls `parametrize`, wherever pytest runs from, and a folder without case files is
an error at collection rather than a test that never runs::

    from compactor.testing import parametrize, run_case

    @parametrize("cases")             # tests/cases/*.yaml beside this test file
    def test_case(case):
        run_case(case)
"""

from __future__ import annotations

import importlib
import os
import pathlib
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import yaml

from compactor.errors import ConfigError, Problem
from compactor.yamlmarks import Path, load_marked

__all__ = ["Case", "CaseFailure", "load_cases", "parametrize", "run_case"]

_CASE_KEYS = {"id", "text", "texts", "messages", "segments", "sources", "query", "budget", "params",
              "before", "after", "expect", "output_format"}
_FILE_KEYS = {"component", "plugins", "before", "after", "cases"}
_EXPECT_KEYS = {"report", "output_counts", "output_contains", "output_not_contains", "kept_contains",
                "dropped_contains", "max_tokens", "chunk_count", "scores_order", "labels", "raises"}

_CHUNK = {"use": "chunk.sentences", "with": {"size": 40, "pack": False}}
_SCORE = {"use": "score.relevance"}
_SELECT = {"use": "compress.select"}
#: steps before the component under test, by its stage (when the case file gives none)
_BEFORE: dict[str, list[dict[str, Any]]] = {
    "clean": [], "chunk": [], "classify": [_CHUNK], "score": [_CHUNK], "compress": [_CHUNK, _SCORE],
    "organize": [_CHUNK, _SCORE, _SELECT], "validate": [_CHUNK, _SCORE, _SELECT],
    "fallback": [_CHUNK, _SCORE, _SELECT], "render": [_CHUNK, _SCORE, _SELECT],
}
_AFTER: dict[str, list[dict[str, Any]]] = {"score": [_SELECT]}


def _bad(file: str, line: int | None, message: str) -> ConfigError:
    """A malformed case file (unknown key, missing component, ...), located by file and line."""
    return ConfigError(Problem(message, file, line))


class CaseFailure(AssertionError):
    """An expectation that did not hold: names the case file, the case id and the YAML line."""


@dataclass(frozen=True)
class Case:
    """One case of a case file, with what is needed to report where it came from."""

    file: str
    id: str
    component: str
    data: dict[str, Any]
    plugins: tuple[Any, ...] = ()
    before: list[Any] | None = None
    after: list[Any] | None = None
    marks: dict[Path, tuple[int, int]] = field(default_factory=dict, repr=False)
    index: int = 0

    def line(self, *path: str | int) -> int | None:
        """Line of `cases[index].<path>` in the file (or of its nearest ancestor)."""
        full: Path = ("cases", self.index, *path)
        while full:
            if full in self.marks:
                return self.marks[full][0]
            full = full[:-1]
        return None

    def where(self, *path: str | int) -> str:
        return f"{self.file}:{self.line(*path)}: case {self.id!r}"

    def __str__(self) -> str:
        return f"{pathlib.Path(self.file).stem}::{self.id}"


def _plugin(ref: Any) -> Any:
    return importlib.import_module(ref) if isinstance(ref, str) else ref


def _load_file(path: pathlib.Path, plugins: tuple[Any, ...]) -> list[Case]:
    marked = load_marked(path.read_text(encoding="utf-8"), str(path))
    data = marked.data
    where = f"{path}"
    if not isinstance(data, dict):
        raise _bad(where, None, "a case file is a mapping with `component` and `cases`")
    unknown = set(data) - _FILE_KEYS
    if unknown:
        key = sorted(unknown)[0]
        raise _bad(where, marked.where((key,))[0], f"unknown key {key!r}; expected one of "
                   f"{sorted(_FILE_KEYS)}")
    if not isinstance(data.get("component"), str):
        raise _bad(where, None, "`component:` (the component's name) is missing")
    cases = data.get("cases")
    if not isinstance(cases, list) or not cases:
        raise _bad(where, None, "`cases:` must be a non-empty list")
    file_plugins = plugins + tuple(_plugin(p) for p in data.get("plugins") or ())
    out: list[Case] = []
    seen: set[str] = set()
    for i, raw in enumerate(cases):
        line = marked.where(("cases", i))[0]
        if not isinstance(raw, dict) or not isinstance(raw.get("id"), str):
            raise _bad(where, line, "each case is a mapping with a string `id`")
        for keys, allowed, sub in ((raw, _CASE_KEYS, ()), (raw.get("expect") or {}, _EXPECT_KEYS,
                                                          ("expect",))):
            bad = sorted(set(keys) - allowed)
            if bad:
                at = marked.where(("cases", i, *sub, bad[0]))[0]
                raise _bad(where, at, f"case {raw['id']!r}: unknown key {bad[0]!r}; "
                           f"expected one of {sorted(allowed)}")
        if raw["id"] in seen:
            raise _bad(where, line, f"duplicate case id {raw['id']!r}")
        seen.add(raw["id"])
        out.append(Case(str(path), raw["id"], data["component"], raw, file_plugins,
                        raw.get("before", data.get("before")), raw.get("after", data.get("after")),
                        marked.marks, i))
    return out


def load_cases(path: str | os.PathLike[str], *, plugins: tuple[Any, ...] = ()) -> list[Case]:
    """Every case of a case file, or of every `*.yaml` file in a folder (sorted by name). A path
    that does not exist, or a folder without case files, is a ConfigError: either would otherwise
    test nothing and pass."""
    root = pathlib.Path(path)
    if not root.exists():
        raise _bad(str(root), None, "no such case file or folder")
    files = sorted(root.glob("*.yaml")) + sorted(root.glob("*.yml")) if root.is_dir() else [root]
    if not files:
        raise _bad(str(root), None, "no case files (*.yaml, *.yml) in this folder")
    return [case for file in files for case in _load_file(file, plugins)]


def pipeline_text(case: Case) -> str:
    """The pipeline YAML a case runs (the component's step wrapped in its stage's neighbours)."""
    from compactor.registry import build_registry

    stage = build_registry(plugins=case.plugins).get(case.component).cls.stage
    step: dict[str, Any] = {"use": case.component}
    if case.data.get("params"):
        step["with"] = case.data["params"]
    before = case.before if case.before is not None else _BEFORE.get(stage, [])
    after = case.after if case.after is not None else _AFTER.get(stage, [])
    spec = {"version": 1, "name": f"case-{case.id}", "steps": [*before, step, *after]}
    return yaml.safe_dump(spec, sort_keys=False, allow_unicode=True)


def _error_class(name: str) -> type[BaseException]:
    import builtins

    import compactor.errors as errors

    found = getattr(errors, name, None) or getattr(builtins, name, None)
    if not (isinstance(found, type) and issubclass(found, BaseException)):
        raise ConfigError(f"unknown error class {name!r} (compactor.errors or a builtin)")
    return found


def _chunk_with(context: Any, text: str, case: Case, path: tuple[Any, ...]) -> Any:
    for chunk in context.chunks:
        if text in chunk.text:
            return chunk
    raise CaseFailure(f"{case.where(*path)}: no chunk contains {text!r}")


def _score(chunk: Any, component: str) -> float:
    scores = chunk.scores
    if component in scores:
        return float(scores[component])
    return float(sum(scores.values()))


def _inputs(data: dict[str, Any]) -> Any:
    """`text`, `texts`, `messages` (one conversation), `segments` (one transcript) or `sources`
    (each `{text, kind, uri, title}`) as the pipeline's inputs."""
    from compactor.document import Message, Source, TranscriptSegment

    if data.get("messages"):
        from compactor.formats.messages import conversation_source

        return conversation_source([Message(**m) for m in data["messages"]])
    if data.get("segments"):
        from compactor.formats.transcripts import transcript_source

        return transcript_source([TranscriptSegment(index=i, **s)
                                  for i, s in enumerate(data["segments"])], "case")
    if data.get("sources"):
        return [Source.from_text(s["text"], kind=s.get("kind", "text"), uri=s.get("uri"),
                                 title=s.get("title")) for s in data["sources"]]
    return data.get("texts") or data.get("text", "")


def _budget(data: dict[str, Any]) -> Any:
    """`budget: 300` (max tokens) or `budget: {max_tokens: 300, ratio: 0.2}`."""
    from compactor.document import Budget

    budget = data.get("budget")
    return Budget(**budget) if isinstance(budget, dict) else budget


def run_case(case: Case) -> Any:
    """Build the case's pipeline through the YAML loader, run it and check its expectations.

    Returns the final context (None for a case expecting an error). Raises `CaseFailure`."""
    from compactor.pipeline import Pipeline

    expect = case.data.get("expect") or {}
    raises = expect.get("raises")
    text = pipeline_text(case)
    inputs = _inputs(case.data)
    try:
        pipeline = Pipeline.from_string(text, file=f"{case.file}#{case.id}", plugins=case.plugins)
        context = pipeline.run(inputs, query=case.data.get("query"), budget=_budget(case.data),
                               output_format=case.data.get("output_format"))
    except Exception as exc:
        if raises is None:
            raise CaseFailure(f"{case.where()}: raised {type(exc).__name__}: {exc}") from exc
        wanted = _error_class(raises.get("error", "Exception"))
        if not isinstance(exc, wanted):
            raise CaseFailure(f"{case.where('expect', 'raises')}: raised {type(exc).__name__}, "
                              f"expected {wanted.__name__}: {exc}") from exc
        fragment = raises.get("match")
        if fragment and fragment not in str(exc):
            raise CaseFailure(f"{case.where('expect', 'raises', 'match')}: error message lacks "
                              f"{fragment!r}: {exc}") from exc
        return None
    if raises is not None:
        raise CaseFailure(f"{case.where('expect', 'raises')}: expected {raises.get('error')}, "
                          f"the run succeeded")
    _check(case, expect, context)
    return context


def _report_value(context: Any, component: str, key: str) -> Any:
    """`a.b` in the details of the last report of `component`'s step (None when absent); a key
    holding dots (`validate.loss`) is matched whole, a number indexes a list."""
    details = [r.details for r in context.reports if r.step == component]
    value: Any = details[-1] if details else None
    parts = key.split(".")
    while parts and value is not None:
        for n in range(len(parts), 0, -1):
            head = ".".join(parts[:n])
            if hasattr(value, "get") and head in value:
                value, parts = value[head], parts[n:]
                break
            if isinstance(value, list | tuple) and n == 1 and head.isdigit() and int(head) < len(value):
                value, parts = value[int(head)], parts[1:]
                break
        else:
            return None
    return value


def _check(case: Case, expect: dict[str, Any], context: Any) -> None:
    output = context.output or ""
    for key, present in (("output_contains", True), ("kept_contains", True),
                         ("output_not_contains", False), ("dropped_contains", False)):
        for i, fragment in enumerate(expect.get(key) or ()):
            if (fragment in output) != present:
                verb = "lacks" if present else "still contains"
                raise CaseFailure(f"{case.where('expect', key, i)}: output {verb} {fragment!r}; "
                                  f"output was {output[:300]!r}")
    for fragment, count in (expect.get("output_counts") or {}).items():
        if output.count(fragment) != count:
            raise CaseFailure(f"{case.where('expect', 'output_counts', fragment)}: {fragment!r} "
                              f"occurs {output.count(fragment)} times, expected {count}")
    for key, wanted in (expect.get("report") or {}).items():
        got = _report_value(context, case.component, key)
        if got != wanted:
            raise CaseFailure(f"{case.where('expect', 'report', key)}: the step report's {key!r} "
                              f"is {got!r}, expected {wanted!r}")
    if "max_tokens" in expect:
        tokens = context.output_tokens
        if tokens is None:
            from compactor.text.tokens import get_counter
            tokens = get_counter().count(output)
        if tokens > expect["max_tokens"]:
            raise CaseFailure(f"{case.where('expect', 'max_tokens')}: output has {tokens} tokens, "
                              f"more than {expect['max_tokens']}")
    if "chunk_count" in expect:
        bounds = expect["chunk_count"]
        bounds = bounds if isinstance(bounds, dict) else {"min": bounds, "max": bounds}
        n = len(context.chunks)
        if n < bounds.get("min", 0) or n > bounds.get("max", n):
            raise CaseFailure(f"{case.where('expect', 'chunk_count')}: {n} chunks, expected "
                              f"{bounds}: {[c.text[:40] for c in context.chunks]}")
    for i, (high, low) in enumerate(expect.get("scores_order") or ()):
        path = ("expect", "scores_order", i)
        a, b = _chunk_with(context, high, case, path), _chunk_with(context, low, case, path)
        sa, sb = _score(a, case.component), _score(b, case.component)
        if not sa > sb:
            raise CaseFailure(f"{case.where(*path)}: chunk with {high!r} scores {sa:.4f}, not above "
                              f"{sb:.4f} of the chunk with {low!r}")
    for i, rule in enumerate(expect.get("labels") or ()):
        path = ("expect", "labels", i)
        chunk = _chunk_with(context, rule["contains"], case, path)
        got = chunk.labels.get(rule["key"])
        if "value" in rule and got != rule["value"]:
            raise CaseFailure(f"{case.where(*path)}: label {rule['key']!r} of the chunk with "
                              f"{rule['contains']!r} is {got!r}, expected {rule['value']!r}")
        if "value" not in rule and rule["key"] not in chunk.labels:
            raise CaseFailure(f"{case.where(*path)}: the chunk with {rule['contains']!r} has no "
                              f"label {rule['key']!r}: {dict(chunk.labels)}")


def parametrize(path: str | os.PathLike[str], *, plugins: tuple[Any, ...] = (),
                argname: str = "case") -> Callable[[Any], Any]:
    """`pytest.mark.parametrize` over the cases of a file or folder, ids `<file>::<case id>`.

    A relative `path` is read from the folder of the calling test file, so the cases are found
    whatever directory pytest runs from; a missing path or an empty folder fails collection."""
    import pytest

    cases = load_cases(_beside_caller(path, sys._getframe(1)), plugins=plugins)
    return pytest.mark.parametrize(argname, cases, ids=[str(c) for c in cases])


def _beside_caller(path: str | os.PathLike[str], frame: Any) -> pathlib.Path:
    """`path` resolved from the folder of the file `frame` runs in (the working directory when
    the caller has no file, as in an interactive session). A path that is missing there but exists
    from the working directory is named in the error, since that is the old reading."""
    given = pathlib.Path(path)
    caller = frame.f_globals.get("__file__")
    if given.is_absolute() or not caller:
        return given
    resolved = pathlib.Path(caller).resolve().parent / given
    if not resolved.exists() and given.exists():
        raise _bad(str(resolved), None, f"no such case file or folder: {str(path)!r} is read from "
                   f"the calling test file's folder; write it relative to {caller}")
    return resolved
