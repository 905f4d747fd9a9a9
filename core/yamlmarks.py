"""YAML with positions: safe loading that remembers where every value came from.

Pass one of pipeline loading. Duplicate keys are errors (PyYAML silently keeps the last one), and
every value's `line:col` is kept by its path so later passes can point at the exact field.
"""

from __future__ import annotations

import pathlib
from typing import Any

import yaml

from compactor.errors import ConfigError, Problem

Path = tuple[str | int, ...]
_KEY = "\x00key"


def format_path(path: Path) -> str:
    """`("steps", 3, "use")` -> `steps[3].use`."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


class Marked:
    """Parsed YAML plus the position of every path (1-based line and column)."""

    def __init__(self, data: Any, marks: dict[Path, tuple[int, int]], file: str,
                 key_marks: dict[Path, tuple[int, int]] | None = None,
                 folder: pathlib.Path | None = None) -> None:
        self.data = data
        self.marks = marks
        self.key_marks = key_marks or {}
        self.file = file
        #: where the file's relative data paths (prompts, pattern tables) resolve
        self.folder = folder if folder is not None else pathlib.Path.cwd()

    def where(self, path: Path) -> tuple[int | None, int | None]:
        """Position of `path`, or of its nearest ancestor that has one."""
        while path:
            if path in self.marks:
                return self.marks[path]
            path = path[:-1]
        return self.marks.get((), (None, None))

    def problem(self, path: Path, message: str, *, at_key: bool = False) -> Problem:
        """A problem located at the value of `path` (or at its key, for unknown keys)."""
        line, col = self.key_marks[path] if at_key and path in self.key_marks else self.where(path)
        return Problem(message, self.file, line, col, format_path(path) or None)


#: Pipeline files are a few kilobytes; these bounds keep a hostile one from exhausting the machine.
MAX_FILE_CHARS = 1_000_000
MAX_NODES = 20_000  # values after expanding aliases (a "billion laughs" file has 10^9)
MAX_DEPTH = 40


def _yaml_problem(exc: yaml.YAMLError, file: str) -> Problem:
    """What PyYAML refused, at its line and column when it gave them (a reader error, such as a NUL
    character, gives a position instead)."""
    if isinstance(exc, yaml.MarkedYAMLError):
        mark = exc.problem_mark or exc.context_mark
        line, col = (mark.line + 1, mark.column + 1) if mark else (None, None)
        reason = " ".join(str(x) for x in (exc.context, exc.problem) if x)
        return Problem(f"invalid YAML: {reason}", file, line, col)
    if isinstance(exc, yaml.reader.ReaderError):
        return Problem(f"invalid YAML: {str(exc).splitlines()[0]} (character {exc.position + 1})", file)
    return Problem(f"invalid YAML: {exc}", file)


def load_marked(text: str, file: str = "<string>", folder: pathlib.Path | None = None) -> Marked:
    """Parse one YAML document safely; ConfigError (all duplicate keys at once) on failure.

    Bounded: the file's size, its nesting and the number of values once aliases are expanded
    (`yaml.SafeLoader` shares aliased nodes, walking them expands them)."""
    if len(text) > MAX_FILE_CHARS:
        raise ConfigError(Problem(f"the file has {len(text):,} characters; a pipeline file may have "
                                  f"at most {MAX_FILE_CHARS:,}", file))
    try:
        loader = yaml.SafeLoader(text)
        node = loader.get_single_node()
    except yaml.YAMLError as exc:
        raise ConfigError(_yaml_problem(exc, file)) from None
    except RecursionError:
        raise ConfigError(Problem(f"the YAML is nested too deeply (more than {MAX_DEPTH} levels)",
                                  file)) from None
    if node is None:
        raise ConfigError(Problem("the file is empty", file, 1, 1))
    marks: dict[Path, tuple[int, int]] = {}
    problems: list[Problem] = []
    walk = _Walk(file, loader, marks, problems)
    try:
        data = walk.build(node, ())
    except _TooLarge as exc:
        raise ConfigError(exc.problem) from None
    except yaml.YAMLError as exc:  # a tag no safe constructor knows (`!!python/object`, ...)
        raise ConfigError(_yaml_problem(exc, file)) from None
    finally:
        loader.dispose()
    if problems:
        raise ConfigError(problems)
    key_marks = {path[:-1]: mark for path, mark in marks.items() if path and path[-1] == _KEY}
    return Marked(data, {p: m for p, m in marks.items() if _KEY not in p}, file, key_marks, folder)


class _TooLarge(Exception):
    def __init__(self, problem: Problem) -> None:
        super().__init__(problem.message)
        self.problem = problem


class _Walk:
    """The node walker: values with their positions, within the size and depth bounds."""

    def __init__(self, file: str, loader: yaml.SafeLoader, marks: dict[Path, tuple[int, int]],
                 problems: list[Problem]) -> None:
        self.file = file
        self.loader = loader
        self.marks = marks
        self.problems = problems
        self.nodes = 0

    def build(self, node: yaml.Node, path: Path) -> Any:
        self.nodes += 1
        if self.nodes > MAX_NODES:
            raise _TooLarge(_at(node, self.file, path, f"the file expands to more than {MAX_NODES:,} "
                                "values (aliases repeat what they point at); a pipeline file "
                                "cannot be that large"))
        if len(path) > MAX_DEPTH:
            raise _TooLarge(_at(node, self.file, path, f"the YAML is nested more than {MAX_DEPTH} "
                                "levels deep"))
        marks, file, loader = self.marks, self.file, self.loader
        marks[path] = (node.start_mark.line + 1, node.start_mark.column + 1)
        if isinstance(node, yaml.MappingNode):
            out: dict[Any, Any] = self._merged(node, path)
            seen: dict[Any, int] = {}
            for key_node, value_node in node.value:
                if key_node.tag == _MERGE_TAG:
                    continue
                if not isinstance(key_node, yaml.ScalarNode):
                    self.problems.append(_at(key_node, file, path, "mapping keys must be plain scalars"))
                    continue
                key = loader.construct_object(key_node, deep=True)
                if not isinstance(key, str | int | float | bool) and key is not None:
                    self.problems.append(_at(key_node, file, path, "mapping keys must be plain scalars"))
                    continue
                key = str(key) if not isinstance(key, str) else key
                if key in seen:
                    self.problems.append(
                        _at(key_node, file, (*path, key),
                            f"duplicate key {key!r} (first defined on line {seen[key]})")
                    )
                    continue
                seen[key] = key_node.start_mark.line + 1
                where = (*path, key, _KEY)
                marks[where] = (key_node.start_mark.line + 1, key_node.start_mark.column + 1)
                out[key] = self.build(value_node, (*path, key))
            return out
        if isinstance(node, yaml.SequenceNode):
            return [self.build(item, (*path, i)) for i, item in enumerate(node.value)]
        return loader.construct_object(node, deep=True)


    def _merged(self, node: yaml.MappingNode, path: Path) -> dict[Any, Any]:
        """The keys a mapping takes from its merge keys (`<<: *defaults`, `<<: [*a, *b]`), as PyYAML
        resolves them: the mapping's own keys override merged ones, and of several merged mappings
        the earlier wins. Merged values keep the positions of where they were written."""
        out: dict[Any, Any] = {}
        own_mark = self.marks[path]
        for key_node, value_node in node.value:
            if key_node.tag != _MERGE_TAG:
                continue
            sources = value_node.value if isinstance(value_node, yaml.SequenceNode) else [value_node]
            for source in sources:
                if not isinstance(source, yaml.MappingNode):
                    self.problems.append(_at(source, self.file, path, "a merge key (<<) takes a "
                                             "mapping or a list of mappings"))
                    continue
                for key, value in self.build(source, path).items():
                    out.setdefault(key, value)
        self.marks[path] = own_mark  # building a merged mapping marked its place at this path
        return out


_MERGE_TAG = "tag:yaml.org,2002:merge"


def _at(node: yaml.Node, file: str, path: Path, message: str) -> Problem:
    return Problem(
        message, file, node.start_mark.line + 1, node.start_mark.column + 1, format_path(path)
    )
