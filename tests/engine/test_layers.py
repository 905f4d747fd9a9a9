"""The layers as contracts: `lint-imports` (pyproject's [tool.importlinter]) holds on the source tree,
bites on a new import across layers, and the four moves that made it hold stay made."""

from __future__ import annotations

import importlib.util
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import grimp
import pytest

import compactor
from compactor.document import Context, Message, Source
from compactor.formats import system_prompt
from compactor.formats.messages import conversation_counts, conversation_source, messages_tokens
from compactor.observe import with_counts
from compactor.ops.monitor import record_runs
from compactor.pipeline import Pipeline
from compactor.plugins.clean import SessionPages
from compactor.run import Run
from compactor.store import Batch, MemoryStore, SQLiteStore
from compactor.text import similarity as textsim
from compactor.text.tokens import get_counter

ROOT = Path(__file__).resolve().parents[2]


def _package_dir(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    assert spec is not None and spec.submodule_search_locations
    return Path(next(iter(spec.submodule_search_locations)))


def _tree(where: Path, replaced: dict[str, str] | None = None) -> Path:
    """`compactor` as one folder, as a normal install lays it out: grimp finds modules by walking the
    package's folder, and an editable install keeps `compactor.plugins` outside it. Files are links to
    the real ones, except those `replaced` names (relative path -> new text)."""
    package = where / "compactor"
    package.mkdir()
    for entry in _package_dir("compactor").iterdir():
        if entry.name not in ("plugins", "__pycache__") and entry.name not in (replaced or {}):
            (package / entry.name).symlink_to(entry)
    (package / "plugins").symlink_to(_package_dir("compactor.plugins"))
    for name, text in (replaced or {}).items():
        (package / name).write_text(text, encoding="utf-8")
    (where / "pyproject.toml").symlink_to(ROOT / "pyproject.toml")
    return where


def _lint(where: Path) -> subprocess.CompletedProcess[str]:
    """`lint-imports` run from `where` (it puts the current folder first on the path)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    command = "from importlinter.cli import lint_imports_command as c; c()"
    return subprocess.run([sys.executable, "-c", command, "--no-cache", "--no-logo"], cwd=where, env=env,
                          capture_output=True, text=True, timeout=120)


def test_the_import_contracts_hold_on_the_source_tree(tmp_path: Path) -> None:
    done = _lint(_tree(tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Contracts: 3 kept, 0 broken." in done.stdout
    assert "Built-in plugin modules never import each other KEPT" in done.stdout


def test_an_import_against_the_layers_breaks_the_contract(tmp_path: Path) -> None:
    store = (_package_dir("compactor") / "store.py").read_text(encoding="utf-8")
    done = _lint(_tree(tmp_path, {"store.py": store + "\nimport compactor.formats.messages  # noqa\n"}))
    assert done.returncode == 1
    assert "compactor.store is not allowed to import compactor.formats" in done.stdout


def _imported_by(module: str) -> set[str]:
    graph = grimp.build_graph("compactor", cache_dir=None)
    return set(graph.find_modules_directly_imported_by(module))


@pytest.mark.parametrize(("module", "never"), [
    ("compactor.observe", "compactor.formats"),  # message accounting comes in as a parameter
    ("compactor.store", "compactor.text.similarity"),  # clean.seen judges near duplicates
])
def test_a_moved_dependency_stays_out(module: str, never: str) -> None:
    assert not {m for m in _imported_by(module) if m == never or m.startswith(never + ".")}


def test_the_engine_and_formats_import_no_layer_above_them() -> None:
    # run recording is attached by ops, the system excerpt ranked by the component that asks
    assert not {m for m in _imported_by("compactor.pipeline") if m.startswith("compactor.ops")}
    assert "compactor.pipeline" not in _imported_by("compactor.formats.system_prompt")
    imported = subprocess.run([sys.executable, "-c", (
        "import sys, compactor.pipeline, compactor.formats.system_prompt, compactor.observe\n"
        "import compactor.store\n"
        "print(sorted(m for m in sys.modules if m.startswith(('compactor.ops', 'compactor.plugins'))))")],
        capture_output=True, text=True, check=True, timeout=60).stdout
    assert imported.strip() == "[]"


def test_run_recording_is_attached_by_ops() -> None:
    store = MemoryStore()
    pipeline = Pipeline.from_yaml("qa")
    recorder = record_runs(pipeline, store)
    pipeline.run("The refund goes to the card within seven days. Pets travel in the hold.",
                 query="refund", budget=20)
    runs = store.runs("qa")
    assert recorder.pipeline == "qa" and len(runs) == 1 and runs[0]["success"] is True
    assert not hasattr(pipeline, "record_runs")  # the engine records nothing itself


def test_conversation_costs_come_from_the_formats_layer() -> None:
    counter = get_counter("cl100k_base")
    messages = [Message(role="system", content="Be brief."), Message(role="user", content="What is 2+2?"),
                Message(role="assistant", content="4", name="calc")]
    source = conversation_source(messages)
    run = Run(counter=counter)
    counted = with_counts(Context(sources=(source,)), run, conversation_counts).sources[0]
    assert counted.tokens == messages_tokens(messages, counter)
    assert counted.message_tokens is not None and len(counted.message_tokens) == 3
    plain = with_counts(Context(sources=(source,)), run).sources[0]  # without the rule: its text's count
    assert plain.tokens == counter.count(source.text) != counted.tokens


def test_the_system_excerpt_is_ranked_by_what_the_caller_hands_in() -> None:
    counter = get_counter("cl100k_base")
    text = "\n".join(f"Rule {i}: passengers with pets under {i} kg travel in the cabin." for i in range(40))
    text += "\nRefunds for a cancelled flight go back to the original payment method within 7 days."
    asked: list[tuple[str | None, int]] = []

    def rank(body: str, query: str | None, allowance: int) -> Context:
        asked.append((query, allowance))
        return Pipeline.from_yaml("system-prompt").run(Source.from_text(body), query=query, budget=allowance)

    messages = [Message(role="system", content=text), Message(role="user", content="How do refunds work "
                "for a flight the airline cancelled last week?")]
    costs = [messages_tokens([m], counter) - 3 for m in messages]
    given = system_prompt.shorten_system(messages, costs, 200, counter, rank=rank)
    assert asked and asked[0][0] is not None and "refunds" in asked[0][0]
    assert "Refunds for a cancelled flight" in given[0][0].content
    # compress.eight_segment hands in the same ranking: the system message it sends is this excerpt
    compacted = compactor.compact_messages([{"role": m.role, "content": m.content} for m in messages],
                                           budget=200, compress_system=True)
    assert compacted[0]["content"] == given[0][0].content


def test_the_store_keeps_signatures_as_given_and_clean_seen_compares_them(tmp_path: Path) -> None:
    text = " ".join(f"Line {i} of the Tokyo metro stops at station number {i * 7} near ward {i % 23}."
                    for i in range(60))
    near = text + " It opened in 1925."
    sig = textsim.signature(text)
    for store in (MemoryStore(), SQLiteStore(tmp_path / "s.sqlite")):
        page = Source.from_text(text, uri="https://example.org/tokyo")
        store.commit_batch("s", Batch(sources=[page], signatures={page.id: sig}))
        assert store.page_signatures("s") == {page.id: sig}
        held = SessionPages(store, "s")
        assert held.same_as("https://example.org/tokyo", textsim.signature("other"), 0.8) == page.id
        assert held.same_as(None, textsim.signature(near), 0.8) == page.id
        assert held.same_as(None, textsim.signature("Paris is the capital of France."), 0.8) is None
        store.close()
    # the bytes on disk are those earlier releases wrote, so their files keep matching
    with sqlite3.connect(tmp_path / "s.sqlite") as db:
        (blob,) = db.execute("SELECT signature FROM session_sources").fetchone()
    assert blob == textsim.pack(sig)
