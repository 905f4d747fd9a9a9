"""Score names are one contract: a scorer's key is its component name (`score.importance`)
and every reader gets it through `compactor.components.score_value`, here with the real scorers in
real YAML pipelines (a stand-in scorer storing a bare `importance` key once hid that the readers
asked for a key no shipped scorer writes)."""

from __future__ import annotations

from typing import Any

import pytest

from compactor import Pipeline
from compactor.components import has_score, score_key, score_label, score_value
from compactor.document import Chunk, Context
from compactor.plugins.score import ImportanceScorer
from compactor.plugins.validate import LEVELS, loss_report
from compactor.registry import build_registry

ARTICLE = " ".join(
    f"Finding {i}: the Orion service handled {1000 + i} requests per hour in region {i % 3} "
    f"with a cache hit rate of {50 + i}%." for i in range(40))
ALERT = ("Critical security warning: the Kestrel gateway must never log VAULT_TOKEN, a failed rotation "
         "of VAULT_TOKEN by rotate_keys() caused data loss in Orion and Borealis.")
FOLLOW_UP = "Kestrel, Orion and Borealis now call rotate_keys() hourly to refresh VAULT_TOKEN."
ZH_ARTICLE = "".join(f"第{i}项发现：缓存命中率在第{i}次修改后上升到百分之{50 + i}。" for i in range(40))
ZH_ALERT = ("严重安全警告：Kestrel 网关必须禁止在日志中写入 VAULT_TOKEN，rotate_keys() 失败导致 Orion 和 "
            "Borealis 数据丢失。")
ZH_FOLLOW_UP = "Kestrel、Orion 和 Borealis 现在每小时调用 rotate_keys() 刷新 VAULT_TOKEN。"
TEXTS = {"en": f"{ARTICLE} {ALERT} {FOLLOW_UP}", "zh": ZH_ARTICLE + ZH_ALERT + ZH_FOLLOW_UP}

LOSS = """
version: 1
name: important-loss
steps:
  - use: chunk.sentences
    with: {size: 48}
  - use: score.importance
  - use: compress.select
    with: {order: %s}
  - use: validate.loss
"""


def chunk(**scores: float) -> Chunk:
    return Chunk(id="c", source_id="s", index=0, start=0, end=1, text="x", tokens=1,
                 scores={k.replace("__", "."): v for k, v in scores.items()})


def loss_of(context: Context) -> dict[str, Any]:
    [report] = [r for r in context.reports if r.step == "validate.loss"]
    return dict(report.details["validate.loss"])


def test_score_value_takes_the_short_or_the_full_name() -> None:
    c = chunk(score__importance=0.9, combined=0.4, acme__freshness=0.3)
    assert score_key("importance") == score_key("score.importance") == "score.importance"
    assert score_key("combined") == "combined" and score_key("acme.freshness") == "acme.freshness"
    assert score_value(c, "importance") == score_value(c, "score.importance") == 0.9
    assert score_value(c, "combined") == 0.4 and score_value(c, "acme.freshness") == 0.3
    assert score_value(c, "relevance") == 0.0 and score_value(c, "relevance", 1.0) == 1.0
    assert has_score(c, "importance") and not has_score(c, "relevance")
    assert score_label("score.importance") == "importance" and score_label("combined") == "combined"
    assert score_value(chunk(importance=0.9), "importance") == 0.0  # a bare key is not the contract


def test_every_shipped_scorer_stores_under_its_component_name() -> None:
    scorers = sorted(name for name, info in build_registry(env={}).components.items()
                     if info.stage == "score" and info.cls.__module__.startswith("compactor."))
    assert {"score.density", "score.relevance", "score.importance", "score.recency"} <= set(scorers)
    steps = f"  - use: chunk.sentences\n  - use: [{', '.join(scorers)}]\n"
    text = f"version: 1\nname: all-scores\nsteps:\n{steps}"
    context = Pipeline.from_string(text).run(TEXTS["en"], query="Which token must the gateway never log?")
    for c in context.chunks:
        assert set(c.scores) == {*scorers, "combined"}
        for name in scorers:
            short = name.removeprefix("score.")
            assert score_value(c, short, -1.0) == score_value(c, name, -1.0) == c.scores[name]


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_validate_loss_reports_an_important_chunk_dropped(lang: str) -> None:
    """The alert comes last: selecting by position drops it, and `important_lost` says so."""
    context = Pipeline.from_string(LOSS % "position").run(TEXTS[lang], budget=80)
    [alert] = [c for c in context.chunks if score_value(c, "importance") >= 0.8]
    assert "VAULT_TOKEN" in alert.text and "rotate_keys" in alert.text
    kept = {cid for s in context.segments for cid in s.chunk_ids}
    assert kept and alert.id not in kept
    loss = loss_of(context)
    assert loss["important_lost"] is True
    # `important:` above the alert's score: the same loss is no longer an important one, and its level
    # is never worse (an important loss raises every level's bar by 0.1)
    assert score_value(alert, "importance") < 0.95
    calm = loss_report(context, important=0.95)
    assert calm["important_lost"] is False and calm["retention"] == loss["retention"]
    assert LEVELS.index(loss["level"]) >= LEVELS.index(calm["level"])


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_validate_loss_is_calm_when_the_important_chunk_is_kept(lang: str) -> None:
    context = Pipeline.from_string(LOSS % "score").run(TEXTS[lang], budget=80)
    [alert] = [c for c in context.chunks if score_value(c, "importance") >= 0.8]
    assert alert.id in {cid for s in context.segments for cid in s.chunk_ids}
    loss = loss_of(context)
    assert loss["important_lost"] is False


# score.importance's default weights: 0.35 criticality, 0.25 dependency, 0.20 uniqueness, 0.20 actionability.


def test_importance_weights_are_the_designed_defaults() -> None:
    defaults = {p.name: p.default for p in ImportanceScorer.parameters()}
    assert defaults == {"criticality": 0.35, "dependency": 0.25, "uniqueness": 0.2, "actionability": 0.2}
    text = ("The build must pass before release; see `deploy_app` and `ConfigLoader` below.\n\n"
            "Error: `ConfigLoader` failed to read settings.yaml, so `deploy_app` stopped.\n\n"
            "构建必须先通过测试；参见下文的 `deploy_app`。\n\n"
            "The weather was pleasant and the team had lunch outside.")
    pipeline = Pipeline.from_string("version: 1\nname: importance\nsteps:\n"
                                    "  - use: chunk.paragraphs\n    with: {size: 20}\n"
                                    "  - use: classify.rules\n  - use: score.importance\n")
    context = pipeline.run(text)
    assert len(context.chunks) == 4  # one chunk per paragraph
    swapped = 0
    for chunk in context.chunks:
        f = chunk.features["score.importance"]
        expected = (0.35 * f["criticality"] + 0.25 * f["dependency"] + 0.2 * f["uniqueness"]
                    + 0.2 * f["actionability"])  # the weights sum to 1
        assert score_value(chunk, "importance") == pytest.approx(expected, abs=1e-3)
        swapped += abs(f["dependency"] - f["uniqueness"]) > 0.05  # where the old weights differ
    assert swapped >= 2
