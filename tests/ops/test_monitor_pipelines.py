"""Run monitoring from the command line records every kind of pipeline: conversation histories and
search sessions as well as plain pipelines, and `--stats` shows the mean validate.loss retention.

`--store` with the conversation or deep-search pipeline recorded nothing."""

from __future__ import annotations

import json
import re
import statistics
from pathlib import Path
from typing import Any

import pytest

from compactor.ops.monitor import prometheus_text, rolling_stats, stats_text
from compactor.store import MemoryStore, SQLiteStore

from ..helpers import run_cli


def _history(lang: str) -> list[dict[str, Any]]:
    """A tool-using history several times larger than the budgets below."""
    if lang == "zh":
        ask = "请把订单 A-1042 的收货地址改成上海市浦东新区世纪大道 100 号，并确认运费。"
        note = "物流系统返回：订单 {n} 已处理，仓库编号 W{n}，预计 3 天送达，运费 12 元。"
    else:
        ask = "Please move order A-1042 to 100 Century Avenue, Shanghai, and confirm the shipping fee."
        note = "The logistics system says order {n} was processed at warehouse W{n}; delivery in 3 days."
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are a support agent."},
                                      {"role": "user", "content": ask}]
    for n in range(30):
        call = {"id": f"call_{n}", "type": "function",
                "function": {"name": "lookup_order", "arguments": json.dumps({"order_id": f"A-{1000 + n}"})}}
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        messages.append({"role": "tool", "tool_call_id": f"call_{n}", "content": note.format(n=1000 + n) * 3})
    messages.append({"role": "assistant", "content": "The address is updated; the fee is 12 yuan."})
    return messages


def _results(path: Path) -> Path:
    """Search results as JSONL, one English and one Chinese page."""
    pages = [
        {"url": "https://example.com/prices", "title": "Console prices",
         "content": " ".join(f"In {2000 + n} the console sold for {199 + n} dollars in store {n}."
                             for n in range(40))},
        {"url": "https://example.cn/prices", "title": "游戏机价格",
         "content": "".join(f"{2000 + n}年，这款游戏机在第{n}家门店的售价是{1299 + n}元。"
                            for n in range(40))},
    ]
    path.write_text("".join(json.dumps(p, ensure_ascii=False) + "\n" for p in pages), encoding="utf-8")
    return path


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_conversation_pipeline_with_store_records_its_run(tmp_path: Path, lang: str) -> None:
    history = tmp_path / "history.json"
    history.write_text(json.dumps(_history(lang), ensure_ascii=False), encoding="utf-8")
    store = tmp_path / "runs.sqlite"
    done = run_cli("conversation", str(history), "--budget", "400", "--store", str(store), "--quiet")
    assert done.returncode == 0, done.stderr
    [record] = SQLiteStore(store).runs("conversation")
    assert record["success"] and record["error"] is None
    assert 0 < record["tokens_out"] <= 400 < record["tokens_in"]
    assert record["retention"] is None  # the conversation pipeline has no validate.loss step
    shown = run_cli("--stats", "--store", str(store))
    assert shown.returncode == 0 and re.search(r"^conversation\s+1\s", shown.stdout, re.M), shown.stdout


def test_deep_search_pipeline_with_store_records_each_batch(tmp_path: Path) -> None:
    results = _results(tmp_path / "results.jsonl")
    store = tmp_path / "runs.sqlite"
    metrics = tmp_path / "metrics.prom"
    done = run_cli("deep-search", str(results), "--query", "console price", "--store", str(store),
                   "--metrics-file", str(metrics), "--quiet")
    assert done.returncode == 0, done.stderr
    [record] = SQLiteStore(store).runs("deep-search")
    assert record["success"] and 0 < record["tokens_out"] < record["tokens_in"]
    assert 'compactor_runs{pipeline="deep-search"} 1' in metrics.read_text(encoding="utf-8")
    switched = run_cli("deep-search", str(results), "--query", "console price", "--store", str(store),
                       "--session", "s2", "--strategy", "chunk_filtering", "--quiet")
    assert switched.returncode == 0, switched.stderr
    assert len(SQLiteStore(store).runs("deep-search")) == 2


def test_a_session_without_store_records_where_stats_looks_by_default(tmp_path: Path) -> None:
    results = _results(tmp_path / "results.jsonl")
    done = run_cli("deep-search", str(results), "--query", "console price", "--session", "q1", "--quiet",
                   cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    shown = run_cli("--stats", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert re.search(r"^deep-search\s+1\s", shown.stdout, re.M), shown.stdout


def test_batch_runs_of_conversation_and_deep_search_are_recorded(tmp_path: Path) -> None:
    histories = tmp_path / "histories.jsonl"
    histories.write_text("".join(json.dumps({"id": lang, "messages": _history(lang), "budget": 400},
                                            ensure_ascii=False) + "\n" for lang in ("en", "zh")),
                         encoding="utf-8")
    store = tmp_path / "runs.sqlite"
    for pipeline, corpus in (("conversation", histories), ("deep-search", _results(tmp_path / "r.jsonl"))):
        done = run_cli(pipeline, str(corpus), "--out", str(tmp_path / f"{pipeline}.out.jsonl"), "--query",
                       "console price", "--workers", "1", "--store", str(store), "--quiet")
        assert done.returncode == 0, done.stderr
    assert [r["success"] for r in SQLiteStore(store).runs("conversation")] == [True, True]
    assert [r["success"] for r in SQLiteStore(store).runs("deep-search")] == [True, True]


def test_stats_show_the_mean_retention_of_validate_loss(tmp_path: Path) -> None:
    store = tmp_path / "runs.sqlite"
    text = " ".join(f"Report {n}: the reactor at site {n} produced {300 + n} megawatts in {1990 + n}."
                    for n in range(60))
    for budget in ("40", "120", "400"):
        doc = tmp_path / f"doc{budget}.txt"
        doc.write_text(text, encoding="utf-8")
        done = run_cli("qa", str(doc), "--query", "reactor megawatts", "--budget", budget,
                       "--store", str(store), "--quiet")
        assert done.returncode == 0, done.stderr
    retentions = [r["retention"] for r in SQLiteStore(store).runs("qa")]
    assert len(retentions) == 3 and all(0 <= r <= 1 for r in retentions)
    assert len(set(retentions)) > 1  # different budgets: a mean that differs from each run's figure
    mean = statistics.mean(retentions)
    shown = run_cli("--stats", "--store", str(store), "--metrics-file", str(tmp_path / "m.prom"))
    assert shown.returncode == 0, shown.stderr
    header, row = shown.stdout.splitlines()[:2]
    column = header.split().index("retention") - 2  # "median s" and "p95 s" are two words each
    assert row.split()[column] == f"{mean:.3f}", shown.stdout
    metrics = (tmp_path / "m.prom").read_text(encoding="utf-8")
    assert f'compactor_retention_mean{{pipeline="qa"}} {mean:.6g}' in metrics


def test_mean_retention_counts_only_runs_that_measured_one() -> None:
    store = MemoryStore()
    for retention in (0.5, None, 0.9):
        store.record_run({"pipeline": "p", "time": 1.0, "seconds": 0.01, "success": True, "ratio": 0.2,
                          "retention": retention, "loss_level": "minimal" if retention else None})
    store.record_run({"pipeline": "plain", "time": 1.0, "seconds": 0.01, "success": True, "ratio": 0.3})
    stats = rolling_stats(store)
    assert stats["p"]["mean_retention"] == pytest.approx(0.7)
    assert stats["plain"]["mean_retention"] is None
    table = stats_text(stats)
    assert re.search(r"^p\s+3\s.*\s0\.700\s", table, re.M)
    assert re.search(r"^plain\s+1\s+\S+\s+\S+\s+0\.300\s+-\s", table, re.M)
    metrics = prometheus_text(stats)
    assert 'compactor_retention_mean{pipeline="p"} 0.7' in metrics
    assert 'compactor_retention_mean{pipeline="plain"}' not in metrics
