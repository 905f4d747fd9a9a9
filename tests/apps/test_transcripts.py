"""Retrieved transcript segments: readers, organize.hierarchical layout, compression, LLM guard, CLI."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

import compactor
from compactor.formats.records import read_paths
from compactor.formats.transcripts import read_results
from compactor.pipeline import Pipeline
from compactor.text.tokens import get_counter

from .. import openai_server as fake
from ..helpers import run_cli
from ..openai_server import FakeOpenAI, Reply

openai_server = fake.openai_server
STAMPED = re.compile(r"^\[\d+\.\d{2}-\d+\.\d{2}\] ")


def _segments(n: int, topic_every: int = 7, offset: float = 0.0) -> list[dict[str, Any]]:
    return [{"index": i, "start": offset + i * 5.0, "end": offset + i * 5 + 4.5,
             "text": (f"In part {i} the speaker says GPU rental prices fell to $2.{i:02d} per hour."
                      if i % topic_every == 0 else
                      f"In part {i} the speaker talks about the weather and lunch.")}
            for i in range(n)]


def test_readers_accept_files_dicts_and_flat_lists(tmp_path: Path) -> None:
    srt = tmp_path / "a.srt"
    srt.write_text("1\n00:02:00,500 --> 00:03:00,300\nHello there.\n", encoding="utf-8")
    segments = tmp_path / "b.json"
    segments.write_text(json.dumps([{"index": 3, "start": 1, "end": 2, "text": "x", "speaker": "Bo"}]))
    sources = read_paths([str(srt), str(segments)])
    assert [(s.kind, s.uri) for s in sources] == [("transcript", str(srt)), ("transcript", str(segments))]
    assert sources[0].text == "[120.50-180.30] Hello there."
    assert sources[1].segments[0].speaker == "Bo" and sources[1].segments[0].index == 3
    flat = read_results([{"file": "x.mp4", "start_time": 0, "end_time": 1, "sentence": "a"},
                         {"file": "y.mp4", "start": 1, "end": 2, "text": "b"},
                         {"file": "x.mp4", "start": 2, "end": 3, "text": "c"}])
    assert [(s.uri, len(s.segments)) for s in flat] == [("x.mp4", 2), ("y.mp4", 1)]
    with pytest.raises(compactor.InputError, match=r"talk\.mp4: segment 1: a segment needs numeric `start`"):
        read_results({"filename": "talk.mp4", "segments": [{"start": 0, "end": 1, "text": "a"},
                                                           {"start": "soon", "end": 1, "text": "b"}]})


def test_layout_groups_blocks_by_index_continuity_in_english_and_chinese() -> None:
    results = {"filename": "example_video.mp4", "segments": [
        {"index": 6, "start": 28.5, "end": 32.1, "text": "Sentence six."},
        {"index": 0, "start": 0.0, "end": 3.5, "text": "Sentence zero."},
        {"index": 5, "start": 25.0, "end": 28.5, "text": "Sentence five."},
        {"index": 1, "start": 3.5, "end": 8.2, "text": "Sentence one."},
        {"index": 1, "start": 3.5, "end": 8.2, "text": "Sentence one again (a duplicate)."}]}
    text = compactor.compress_single_file_results("anything", results)
    assert text == (
        "[File start: example_video.mp4]\n"
        "  [Block 1 - indices 0-1]\n  [0.00-3.50] Sentence zero.\n  [3.50-8.20] Sentence one.\n"
        "  [3.50-8.20] Sentence one again (a duplicate).\n"
        "  [Block end: 1]\n\n"
        "  [Block 2 - indices 5-6]\n  [25.00-28.50] Sentence five.\n  [28.50-32.10] Sentence six.\n"
        "  [Block end: 2]\n[File end: example_video.mp4]\n\n"
        "Note: the blocks above come from different parts of the same file; they are not continuous in time.")
    zh = {"filename": "讲座.mp4", "segments": [
        {"index": 0, "start": 0.0, "end": 3.5, "text": "句子一。"},
        {"index": 2, "start": 8.2, "end": 9.0, "text": "句子三。", "speaker": "主持人"}]}
    assert compactor.compress_single_file_results("anything", results, overview=True) == (
        "Retrieved segments per file: example_video.mp4: 5 segments.\n\n" + text)
    text = compactor.compress_single_file_results("问题", zh, overview=True)
    assert "[文件开始: 讲座.mp4]" in text and "[块开始: 2 - 索引: 2-2]" in text
    assert "  [8.20-9.00] 主持人: 句子三。" in text
    assert text.endswith("请注意：以上内容来自同一视频的不同块，不保证时间连续性。")
    assert text.startswith("检索结果概览：讲座.mp4：2 个片段。")


def test_over_the_limit_each_file_keeps_what_the_question_needs_with_timestamps() -> None:
    talk = {"filename": "talk.mp4", "segments": _segments(60)}
    panel = {"filename": "panel.mp4", "segments": list(reversed(_segments(30, 5, offset=1000.0)))}
    text = compactor.compress_multiple_files_results("How much does GPU rental cost per hour?",
                                                     [talk, panel], max_length=900)
    assert len(text) <= 900
    originals = {f"[{s['start']:.2f}-{s['end']:.2f}] {s['text']}" for r in (talk, panel)
                 for s in r["segments"]}
    kept = [line for line in text.splitlines() if STAMPED.match(line)]
    assert kept and all(line in originals for line in kept)  # every statement verbatim, timestamped
    assert sum("GPU rental prices" in line for line in kept) >= 0.8 * len(kept)
    assert "File talk.mp4:\n" in text and "File panel.mp4:\n" in text  # both files answer the question
    tokens = compactor.compress_multiple_files_results("GPU rental cost?", [talk, panel], max_length=150,
                                                       unit="tokens")
    assert get_counter().count(tokens) <= 150 and "GPU rental prices" in tokens


def test_chinese_question_over_a_chinese_transcript() -> None:
    lines = [f"第{i}段主要在聊天气和午饭。" for i in range(40)]
    lines[17] = "嘉宾说显卡租赁价格降到每小时2.5美元。"
    results = {"filename": "访谈.mp4", "segments": [{"index": i, "start": i * 3.0, "end": i * 3 + 2.5,
                                                     "text": t} for i, t in enumerate(lines)]}
    text = compactor.compress_single_file_results("显卡租赁价格是多少？", results, max_length=200)
    assert len(text) <= 200
    assert "[51.00-53.50] 嘉宾说显卡租赁价格降到每小时2.5美元。" in text
    assert text.startswith("文件 访谈.mp4:\n[")


def test_the_pipeline_file_chooses_tokens_or_characters(tmp_path: Path) -> None:
    path = tmp_path / "tokens.yaml"
    path.write_text("version: 1\nname: t\nsteps:\n  - use: chunk.segments\n  - use: organize.hierarchical\n"
                    "    with: {max_length: 120, unit: tokens}\noutput: {format: text}\n", encoding="utf-8")
    sources = read_results({"filename": "talk.mp4", "segments": _segments(80)})
    context = Pipeline.from_yaml(path).run(sources, query="GPU rental prices")
    assert get_counter().count(context.output or "") <= 120
    assert [c.units for c in context.chunks] == [(i, i + 1) for i in range(80)]  # chunk.segments
    kept_ids = {cid for s in context.segments for cid in s.chunk_ids}
    assert kept_ids and all(context.chunk(cid).text in (context.output or "") for cid in kept_ids)


def test_a_failing_or_inventing_llm_keeps_the_rule_output(openai_server: FakeOpenAI) -> None:
    results = {"filename": "talk.mp4", "segments": _segments(60)}
    settings = {"model": "m", "base_url": openai_server.base_url, "api_key": "sk-test", "max_retries": 0}
    openai_server.respond = lambda request: Reply(status=500, content=None)
    failed = compactor.compress_single_file_results("GPU prices?", results, max_length=700, llm=settings)
    assert "File talk.mp4:\n" in failed and "GPU rental prices" in failed
    wrong = "File talk.mp4:\nPrices fell to $9.99 [999.00-1000.00]."
    openai_server.respond = lambda request: Reply(content=wrong)
    invented = compactor.compress_single_file_results("GPU prices?", results, max_length=700, llm=settings)
    assert "$9.99" not in invented and "File talk.mp4:\n" in invented
    good = "File talk.mp4:\nGPU rental prices fell to $2.07 per hour [35.00-39.50]."
    openai_server.respond = lambda request: Reply(content=good)
    used = compactor.compress_single_file_results("GPU prices?", results, max_length=700, llm=settings)
    assert used == good
    shown = compactor.compress_single_file_results("GPU prices?", results, max_length=700, llm=settings,
                                                   overview=True)
    assert shown == "Retrieved segments per file: talk.mp4: 60 segments.\n\n" + good
    request = openai_server.requests[-1].json
    assert request["temperature"] == 0.3 and request["max_tokens"] == 1500
    assert "[35.00-39.50] In part 7 the speaker says GPU rental prices" in request["messages"][0]["content"]


def test_any_other_failure_returns_the_file_overview() -> None:
    results = [{"filename": "a.mp4", "segments": _segments(3)},
               {"filename": "b.mp4", "segments": _segments(2)}]
    text = compactor.compress_multiple_files_results("q", results, pipeline="no-such-pipeline")
    assert text == "Retrieved segments per file: a.mp4: 3 segments; b.mp4: 2 segments."
    single = compactor.compress_retrieval_results("q", results[0])
    assert single.startswith("[File start: a.mp4]\n  [Block 1 - indices 0-2]")


def test_cli_organises_subtitle_files(tmp_path: Path) -> None:
    srt = tmp_path / "talk.srt"
    srt.write_text("1\n00:00:01,500 --> 00:00:03,000\nWelcome to the show.\n\n"
                   "2\n00:00:04,000 --> 00:00:05,250\nGPU prices fell to $2.50 per hour.\n", encoding="utf-8")
    vtt = tmp_path / "panel.vtt"
    vtt.write_text("WEBVTT\n\n00:01.000 --> 00:02.000\n<v Alice>Hi all\n", encoding="utf-8")
    done = run_cli("pipelines/transcripts.yaml", str(srt), str(vtt), "--query", "GPU prices")
    assert done.returncode == 0, done.stderr
    assert f"[File start: {srt}]" in done.stdout
    assert "  [4.00-5.25] GPU prices fell to $2.50 per hour." in done.stdout
    assert "  [1.00-2.00] Alice: Hi all" in done.stdout


def test_a_long_segment_keeps_its_relevant_sentences_with_its_timestamps() -> None:
    chatter = " ".join(f"Filler sentence {i} is about the weather." for i in range(40))
    long_text = f"{chatter} The GPU rental price fell to $2.50 per hour in March. {chatter}"
    results = {"filename": "talk.mp4", "segments": [
        {"index": 0, "start": 10.0, "end": 190.0, "text": long_text},
        {"index": 1, "start": 190.0, "end": 200.0, "text": "Thanks everyone."}]}
    text = compactor.compress_single_file_results("What was the GPU rental price?", results, max_length=400)
    assert len(text) <= 400
    [line] = [x for x in text.splitlines() if x.startswith("[10.00-190.00] ")]
    assert "The GPU rental price fell to $2.50 per hour in March." in line
    parts = [part.strip() for part in line.removeprefix("[10.00-190.00] ").split("…")]
    assert all(part in long_text for part in parts if part)  # verbatim sentences


def test_edge_cases_found_in_review_never_hang_or_overflow() -> None:
    long_text = "A long sentence here about nothing in particular. " * 40
    huge = {"filename": "a" * 30 + ".mp4",
            "segments": [{"index": 0, "start": 1e9, "end": 1e9 + 1, "speaker": "S" * 40, "text": long_text}]}
    for limit in (40, 90, 200):
        assert len(compactor.compress_single_file_results("AI", huge, max_length=limit)) <= limit
    two = [{"filename": "a.mp4", "segments": [{"index": 0, "start": 0, "end": 1, "text": "x " * 60}]},
           {"filename": "b.mp4", "segments": [{"index": 0, "start": 0, "end": 1, "text": "y " * 60}]}]
    assert len(compactor.compress_multiple_files_results("x", two, max_length=156)) <= 156
    assert compactor.compress_multiple_files_results("q", None).startswith("(unreadable retrieval results")
    flat = [{"file": "a.mp4", "start": 0, "end": 1, "text": "one"}, {"file": "b.mp4", "start": 0, "end": 1,
                                                                       "text": "two"},
            {"file": "a.mp4", "start": 1, "end": 2, "text": "three"}]
    text = compactor.compress_multiple_files_results("q", flat)
    assert "[Block 1 - indices 0-1]" in text and "not continuous" not in text
    merged = compactor.compress_multiple_files_results("q", [{"filename": "a.mp4", "segments": flat[:1]},
                                                              {"filename": "a.mp4", "segments": flat[2:]}])
    assert merged.count("[File start: a.mp4]") == 1
