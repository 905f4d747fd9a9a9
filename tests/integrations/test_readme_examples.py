"""The README's integration examples run as written (each block after an `<!-- example: NAME -->`
line), in a fresh process in an empty folder, with the console scripts of this Python on PATH."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ..helpers import REPO

README = REPO / "README.md"
#: What each example needs besides compactor (the extra's import name), and what its output must show.
NEEDS = {"auto": (None, ["compactions,", "tokens saved", '"order_id"']),
         "structured": (None, ["200 rows; fields order_id:str", "#W1042", "more rows: expand orders-0003"]),
         "mcp": ("mcp", ["'compress'", "valve V-12", "Step "]),
         "langchain": ("langchain_classic", ["refunds.md", "compactions,", "['clear'", "[compactor"]),
         "agents": ("agents", ["items stored,", "compaction,"]),
         "formats": (None, ["anthropic user", "['tool_result']"]),
         "deepsearch": (None, ["finished in 1889", "## https://example.org/eiffel",
                               "-0000': \"Eiffel Tower"])}


def _examples() -> dict[str, str]:
    found: dict[str, str] = {}
    lines = README.read_text(encoding="utf-8").splitlines()
    for i, line in enumerate(lines):
        if line.startswith("<!-- example: "):
            name = line.removeprefix("<!-- example: ").removesuffix(" -->").strip()
            assert lines[i + 1] == "```python", f"README line {i + 2}: example {name} is not python"
            end = lines.index("```", i + 2)
            found[name] = "\n".join(lines[i + 2:end]) + "\n"
    return found


def test_every_marked_example_is_checked() -> None:
    assert set(_examples()) == set(NEEDS)


@pytest.mark.parametrize("name", sorted(NEEDS))
def test_example_runs_as_written(name: str, tmp_path: Path) -> None:
    module, expected = NEEDS[name]
    if module is not None and importlib.util.find_spec(module) is None:
        pytest.skip(f"needs the extra that provides {module}")
    script = tmp_path / f"example_{name}.py"  # not "mcp.py": it would shadow the package
    script.write_text(_examples()[name], encoding="utf-8")
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
           "OPENAI_AGENTS_DISABLE_TRACING": "1"}
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    for text in expected:
        assert text in done.stdout, f"{name}: {text!r} not in its output:\n{done.stdout[-2000:]}"
