"""Transcript selection prefers content to filler and follows the question; the LLM-failure choice."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

import compactor
from compactor.formats.transcripts import read_results
from compactor.pipeline import Pipeline
from compactor.text.utterances import content_terms, is_filler, question_terms, spread

from .. import openai_server as fake
from ..openai_server import FakeOpenAI, Reply

openai_server = fake.openai_server
STAMPED = re.compile(r"^\[\d+\.\d{2}-\d+\.\d{2}\] (?:\w+: )?")

FILLER_EN = ["Yes.", "Perfectly happy.", "Okay.", "Mm-hmm.", "Yeah, right.", "Sure, fine."]
FILLER_ZH = ["嗯。", "对对对。", "好的好的。", "是的。", "嗯，对。"]


def _meeting(lines: list[str]) -> dict[str, Any]:
    return {"filename": "meeting.mp4", "segments": [
        {"index": i, "start": i * 4.0, "end": i * 4 + 3.5, "speaker": "A" if i % 2 else "B", "text": t}
        for i, t in enumerate(lines)]}


def _kept(text: str) -> list[str]:
    return [STAMPED.sub("", line) for line in text.splitlines() if STAMPED.match(line)]


def test_filler_and_backchannels_are_recognised_in_english_and_chinese() -> None:
    assert all(is_filler(x) for x in FILLER_EN + FILLER_ZH)
    assert not is_filler("The remote control needs a bigger battery compartment.")
    assert not is_filler("遥控器需要更大的电池仓。")
    assert "remot" in content_terms("The remote control, yeah.") and "yeah" not in content_terms("yeah")
    # the frame of a question is not its subject
    assert set(question_terms("Summarize the discussion about the battery.")) == {"batteri"}
    assert "想法" not in question_terms("关于电池的想法") and "电池" in question_terms("关于电池的想法")
    assert spread([0.0, 0.0, 1.0, 0.0, 0.0], 2.0)[1] > spread([0.0, 0.0, 1.0, 0.0, 0.0], 2.0)[0] > 0


def test_compression_keeps_the_stretch_about_the_question_and_drops_filler() -> None:
    chatter = [f"We should book room {i} for the party next month with the catering team." for i in range(40)]
    topic = ["Let us turn to the battery of the remote control.",
             "A lithium cell lasts two years according to the supplier quote.",
             "Kinetic charging would remove the cell but costs four euros more per unit.",
             "The designers prefer a rechargeable pack with a docking station."]
    lines: list[str] = []
    for n, line in enumerate(chatter):
        lines.append(line)
        lines.append(FILLER_EN[n % len(FILLER_EN)])
        if n == 20:
            for t in topic:
                lines += [t, FILLER_EN[(n + len(lines)) % len(FILLER_EN)]]
    text = compactor.compress_single_file_results("What was said about the battery?", _meeting(lines),
                                                  max_length=120, unit="tokens")
    kept = _kept(text)
    assert kept and not any(is_filler(x) for x in kept)
    # the lines after the match have none of the question's words, yet they are the answer
    assert sum(t in kept for t in topic[1:]) >= 2
    assert sum(t in kept for t in topic) > sum(t in kept for t in chatter)


def test_chinese_filler_is_left_out_and_the_topic_kept() -> None:
    lines = []
    for i in range(30):
        lines += [f"第{i}个议题是下个月团建活动的场地预订和餐饮安排。", FILLER_ZH[i % len(FILLER_ZH)]]
    lines[31:31] = ["接下来说遥控器的电池。", "锂电池按照供应商的报价可以用两年。", "嗯对对对。",
                    "动能充电不需要电池，但是每台成本高四欧元。"]
    text = compactor.compress_single_file_results("关于遥控器电池的讨论", _meeting(lines), max_length=90,
                                                  unit="tokens")
    kept = _kept(text)
    assert kept and not any(is_filler(x) for x in kept)
    assert "锂电池按照供应商的报价可以用两年。" in kept


def test_on_llm_failure_chooses_the_overview_or_the_rule_output(openai_server: FakeOpenAI) -> None:
    results = {"filename": "talk.mp4", "segments": [
        {"index": i, "start": i * 5.0, "end": i * 5 + 4.5,
         "text": f"In part {i} the speaker says GPU rental prices fell to $2.{i:02d} per hour."}
        for i in range(60)]}
    settings = {"model": "m", "base_url": openai_server.base_url, "api_key": "sk-test", "max_retries": 0}
    openai_server.respond = lambda request: Reply(status=500, content=None)
    rules = compactor.compress_single_file_results("GPU prices?", results, max_length=700, llm=settings)
    assert rules.startswith("File talk.mp4:\n") and "GPU rental prices" in rules
    assert compactor.compress_single_file_results("GPU prices?", results, max_length=700, llm=settings,
                                                  on_llm_failure="overview") == (
        "Retrieved segments per file: talk.mp4: 60 segments.")
    refused = "GPU prices were $9.99 [999.00-1000.00]."  # invents a price and a timestamp
    openai_server.respond = lambda request: Reply(content=refused)
    zh = {"filename": "讲座.mp4", "segments": [{"index": i, "start": i * 3.0, "end": i * 3 + 2.5,
                                                "text": f"第{i}段嘉宾说显卡租赁价格降到每小时{i}美元。"}
                                               for i in range(60)]}
    shown = compactor.compress_single_file_results("显卡价格？", zh, max_length=300, llm=settings,
                                                   on_llm_failure="overview")
    assert shown == "检索结果概览：讲座.mp4：60 个片段。"
    with pytest.raises(compactor.InputError, match="on_llm_failure"):
        compactor.compress_single_file_results("q", results, on_llm_failure="raise")  # type: ignore[arg-type]


def test_the_pipeline_file_sets_the_overview_and_the_failure_choice(tmp_path: Path) -> None:
    path = tmp_path / "t.yaml"
    path.write_text("version: 1\nname: t\nsteps:\n  - use: chunk.segments\n  - use: organize.hierarchical\n"
                    "    with: {overview: true}\noutput: {format: text}\n", encoding="utf-8")
    sources = read_results({"filename": "talk.mp4", "segments": [{"start": 0, "end": 1, "text": "Hello."}]})
    out = Pipeline.from_yaml(path).run(sources, query="hello").output or ""
    assert out.startswith("Retrieved segments per file: talk.mp4: 1 segment.\n\n[File start: talk.mp4]")
    path.write_text(path.read_text(encoding="utf-8").replace("overview: true", "on_llm_failure: never"),
                    encoding="utf-8")
    with pytest.raises(Exception, match="on_llm_failure"):
        Pipeline.from_yaml(path).run(sources, query="hello")


def test_without_a_question_the_content_lines_are_kept() -> None:
    lines = [f"The budget for item {i} is {i * 10} euros, approved by finance." if i % 3 == 0 else
             FILLER_EN[i % len(FILLER_EN)] for i in range(60)]
    text = compactor.compress_single_file_results("", _meeting(lines), max_length=400)
    kept = _kept(text)
    assert len(text) <= 400 and len(kept) >= 3 and not any(is_filler(x) for x in kept)


def test_the_chinese_layout_is_the_one_the_design_draws() -> None:
    spans = [(0, 0.0, 3.5), (1, 3.5, 8.2), (2, 8.2, 9.0), (5, 25.0, 28.5), (6, 28.5, 32.1)]
    segments = [{"index": i, "start": a, "end": b, "text": f"句子{i + 1}"} for i, a, b in spans]
    results = {"filename": "example_video.mp4", "segments": segments}
    text = compactor.compress_single_file_results("问题", results)
    assert text == ("[文件开始: example_video.mp4]\n"
                    "  [块开始: 1 - 索引: 0-2]\n  [0.00-3.50] 句子1\n  [3.50-8.20] 句子2\n"
                    "  [8.20-9.00] 句子3\n"
                    "  [块结束: 1]\n\n"
                    "  [块开始: 2 - 索引: 5-6]\n  [25.00-28.50] 句子6\n  [28.50-32.10] 句子7\n  [块结束: 2]\n"
                    "[文件结束: example_video.mp4]\n\n"
                    "请注意：以上内容来自同一视频的不同块，不保证时间连续性。")
