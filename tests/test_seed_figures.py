"""The seeds' own figures (issue 13 item 4): seed 003's second pass above `max_observations_tokens // 2`
(45000 // 2 = 22500, not half the 36000 routing threshold) and seed 004's importance weights
(0.35 criticality, 0.25 dependency, 0.20 uniqueness, 0.20 actionability)."""

from __future__ import annotations

import pytest

from compactor import Pipeline
from compactor.components import score_value
from compactor.plugins.score import ImportanceScorer


def _observations(n: int) -> str:
    """Research observations, an English and a Chinese sentence per line, all distinct."""
    return "\n".join(
        f"Observation {i}: the console sold for {199 + i % 97} dollars at store {i} in {1990 + i % 35}, "
        f"according to retailer report R-{i:05d}. "
        f"观察{i}：该游戏机于{1990 + i % 35}年在第{i}家门店售价{1299 + i % 89}元，来源为零售报告R-{i:05d}。"
        for i in range(n))


def _router_details(text: str, **params: object) -> dict[str, object]:
    pipeline = Pipeline.from_yaml("report-overflow")
    context = pipeline.run(text, query="console price", **params)  # type: ignore[arg-type]
    [report] = [r for r in context.reports if r.step == "compress.map_reduce"]
    return dict(report.details)


def test_the_shipped_router_runs_a_second_pass_only_above_22500_tokens() -> None:
    # about 71000 tokens in: over the 36000 threshold, and the merged extracts land between half the
    # threshold (18000, the old trigger) and half of max_tokens (22500, the seed's)
    details = _router_details(_observations(1000))
    assert details["threshold"] == 36000 and details["compression_decision"] == "compress_first"
    assert details["second_pass_above"] == 45000 // 2 == 22500
    assert 18000 < int(details["tokens_after_map"]) <= 22500  # the case the two figures disagree on
    assert details["passes"] == 1
    assert details["tokens_after_reduce"] == details["tokens_after_map"]


def test_above_22500_the_second_pass_brings_the_result_under_it() -> None:
    details = _router_details(_observations(1300))
    assert int(details["tokens_after_map"]) > 22500
    assert details["passes"] == 2 and 18000 < int(details["tokens_after_reduce"]) <= 22500


def test_a_budget_below_half_of_max_tokens_is_the_second_pass_target() -> None:
    details = _router_details(_observations(1000), budget=15000)
    assert details["second_pass_above"] == 15000
    assert details["passes"] == 2 and int(details["tokens_after_reduce"]) <= 15000


def test_importance_weights_are_seed_004s() -> None:
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
