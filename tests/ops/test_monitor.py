"""Run monitoring: every run recorded by the wrapper-hook observer, rolling figures, anomalies, metrics."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from compactor import Budget, BudgetError, Component, Pipeline, hookimpl
from compactor.ops.monitor import anomalies, prometheus_text, record_runs, rolling_stats, stats_text
from compactor.store import MemoryStore, SQLiteStore

from ..helpers import EVAL, run_cli


@pytest.fixture(scope="module")
def articles() -> list[str]:
    path = EVAL / "summarization-frank-cnndm-xsum" / "summ.jsonl"
    if not path.exists():
        pytest.skip(f"evaluation data not found: {path}")
    import json

    return [json.loads(line)["document"] for line in path.read_text(encoding="utf-8").splitlines()[:6]]


class _Boom(Component):
    """Fails on purpose, to see a failed run recorded."""

    name = "test.boom"
    stage = "compress"

    @hookimpl
    def compactor_compress(self, context, run):  # type: ignore[no-untyped-def]
        raise RuntimeError("boom")


class _Plugin:
    @hookimpl
    def compactor_register_components(self, register):  # type: ignore[no-untyped-def]
        register(_Boom)


def test_every_run_is_recorded_with_its_figures(articles: list[str]) -> None:
    store = MemoryStore()
    pipeline = Pipeline.from_yaml("qa")
    record_runs(pipeline, store)
    for text in articles:
        pipeline.run(text, query="who said what?", budget=120)
    runs = store.runs("qa")
    assert len(runs) == len(articles)
    for record in runs:
        assert record["success"] and record["error"] is None and not record["fallback"]
        assert 0 < record["tokens_out"] <= 120 < record["tokens_in"]
        assert record["ratio"] == round(record["tokens_out"] / record["tokens_in"], 4)
        assert record["loss_level"] in ("minimal", "acceptable", "moderate", "severe")
        assert 0 <= record["retention"] <= 1 and record["seconds"] > 0
    broken = Pipeline.from_string("version: 1\nname: broken\nsteps:\n  - use: chunk.sentences\n"
                                  "  - use: test.boom\n", plugins=[_Plugin()])
    record_runs(broken, store)
    with pytest.raises(Exception, match="boom"):
        broken.run(articles[0])
    [failed] = store.runs("broken")
    assert not failed["success"] and "RuntimeError: boom" in failed["error"]


def test_anomalies_are_slow_lossy_or_failed_runs() -> None:
    store = MemoryStore()
    now = time.time()
    for i in range(120):
        store.record_run({"pipeline": "p", "time": now + i, "seconds": 0.02, "tokens_in": 1000,
                          "tokens_out": 200, "ratio": 0.2, "loss_level": "minimal", "success": True})
    store.record_run({"pipeline": "p", "time": now + 200, "seconds": 0.5, "ratio": 0.2, "success": True,
                      "loss_level": "minimal"})
    store.record_run({"pipeline": "p", "time": now + 201, "seconds": 0.02, "ratio": 0.2, "success": True,
                      "loss_level": "severe"})
    store.record_run({"pipeline": "p", "time": now + 202, "seconds": 0.02, "success": False, "error": "boom"})
    stats = rolling_stats(store)["p"]
    assert stats["runs"] == 100 and stats["median_seconds"] == pytest.approx(0.02)
    reasons = [a["reason"] for a in stats["anomalies"]]
    assert reasons == ["25.0x slower than the median", "loss level severe (median minimal)", "failed: boom"]
    assert len(anomalies(store.runs("p", 100))) == 3
    table = stats_text({"p": stats})
    assert "25.0x slower than the median" in table and table.splitlines()[1].startswith("p ")


def test_cli_records_runs_shows_stats_and_writes_prometheus_metrics(tmp_path: Path,
                                                                   articles: list[str]) -> None:
    store = tmp_path / "runs.sqlite"
    for n, text in enumerate(articles[:3]):
        doc = tmp_path / f"doc{n}.txt"
        doc.write_text(text, encoding="utf-8")
        done = run_cli("qa", str(doc), "--query", "who?", "--budget", "100", "--store", str(store), "--quiet")
        assert done.returncode == 0, done.stderr
    assert len(SQLiteStore(store).runs("qa")) == 3
    metrics = tmp_path / "metrics.prom"
    shown = run_cli("--stats", "--store", str(store), "--metrics-file", str(metrics))
    assert shown.returncode == 0, shown.stderr
    assert re.search(r"^qa\s+3\s", shown.stdout, re.M)
    text = metrics.read_text(encoding="utf-8")
    assert "# TYPE compactor_runs gauge" in text and 'compactor_runs{pipeline="qa"} 3' in text
    assert all(re.fullmatch(r'(# (HELP|TYPE) .+|compactor_\w+\{pipeline="[^"]*"\} [-+.\deE]+)', line)
               for line in text.splitlines())
    assert prometheus_text(rolling_stats(SQLiteStore(store))) == text
    missing = run_cli("--stats", "--store", str(tmp_path / "none.sqlite"))
    assert missing.returncode == 2 and "no run store yet" in missing.stderr


def test_one_record_per_run_whatever_fails_and_wherever(articles: list[str]) -> None:
    store = MemoryStore()
    topics = Pipeline.from_yaml("topics")  # has its own render step; a format override renders again
    record_runs(topics, store)
    topics.run(articles[:2], query="who?", output_format="text")
    assert len(store.runs("topics")) == 1
    generic = Pipeline.from_yaml("generic")
    record_runs(generic, store)
    with pytest.raises(Exception, match="the input is empty"):
        generic.run("   ")  # fails before any step
    with pytest.raises(BudgetError, match="too small"):
        generic.run(articles[0], budget=Budget(max_tokens=1))  # fails after rendering
    first, second = store.runs("generic")
    assert not first["success"] and "the input is empty" in first["error"] and first["tokens_in"] is None
    assert not second["success"] and second["failed_step"] is None


def test_batch_runs_are_recorded_from_every_worker(tmp_path: Path, articles: list[str]) -> None:
    import json

    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"id": n, "text": t}) + "\n" for n, t in enumerate(articles)),
                      encoding="utf-8")
    store = tmp_path / "runs.sqlite"
    done = run_cli("qa", str(corpus), "--out", str(tmp_path / "out.jsonl"), "--query", "who?",
                   "--budget", "90", "--workers", "2", "--store", str(store), "--quiet")
    assert done.returncode == 0, (tmp_path / "out.jsonl").read_text(encoding="utf-8")
    runs = SQLiteStore(store).runs("qa")
    assert len(runs) == len(articles) and all(r["success"] and r["tokens_out"] <= 90 for r in runs)
