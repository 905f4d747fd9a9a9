"""Inputs that ended as "internal error" (exit 1) now exit 2 naming the input, and the last holes
of the input and key rules: a batch record past the input limit, a run's endpoint override that
would inherit the pipeline file's key."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from compactor.pipeline import Pipeline, merged_llm

from .helpers import run_cli
from .openai_server import FakeOpenAI, Reply
from .openai_server import openai_server as openai_server

TEXT = "The Orion probe reached orbit in 2031. It carried four cameras. " * 8


@pytest.mark.parametrize("body, said", [
    ("version: 1\nname: !!python/object:os.system x\nsteps:\n  - use: clean.normalize\n",
     "could not determine a constructor for the tag"),
    ("version: 1\nname: x\x00\nsteps:\n  - use: clean.normalize\n", "unacceptable character #x0000"),
])
def test_unsafe_or_unreadable_yaml_is_an_error_naming_the_file(tmp_path: Path, body: str, said: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(body)
    for extra in ((), ("--check",)):
        result = run_cli(str(path), "-", *extra, stdin=TEXT.encode())
        assert result.returncode == 2, result.stderr
        assert "internal error" not in result.stderr
        assert str(path) in result.stderr and said in result.stderr


def test_a_conversation_pipeline_given_plain_text_names_the_input(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text(TEXT)
    result = run_cli("conversation", str(path))
    assert result.returncode == 2 and "needs a conversation" in result.stderr
    assert str(path) in result.stderr


def test_a_batch_record_past_the_input_limit_stops_naming_the_line(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus.jsonl"
    records = [{"id": "a", "text": TEXT}, {"id": "b", "text": "x" * 5000}]
    corpus.write_text("".join(json.dumps(r) + "\n" for r in records))
    out = tmp_path / "out.jsonl"
    result = run_cli("generic", str(corpus), "--out", str(out), env={"COMPACTOR_MAX_INPUT_BYTES": "2000"})
    assert result.returncode == 2 and f"{corpus}:2: the record is larger than 2,000 bytes" in result.stderr
    endless = run_cli("generic", "/dev/zero", "--out", str(tmp_path / "z.jsonl"),
                      env={"COMPACTOR_MAX_INPUT_BYTES": "100000"})
    assert endless.returncode == 2 and "/dev/zero:1: the record is larger" in endless.stderr


def test_an_override_to_another_host_does_not_inherit_the_files_key(openai_server: FakeOpenAI) -> None:
    spec = {"model": "m", "base_url": "https://llm.example/v1", "api_key": "sk-file"}
    assert "api_key" not in merged_llm(spec, {"base_url": "https://elsewhere.example/v1"})
    assert merged_llm(spec, {"base_url": "https://llm.example/v2"})["api_key"] == "sk-file"  # same server
    assert merged_llm(spec, {"base_url": "https://x.example", "api_key": "sk-x"})["api_key"] == "sk-x"
    assert merged_llm(spec, {"model": "n"})["api_key"] == "sk-file"
    openai_server.default = Reply(status=401, content=None)
    pipeline = Pipeline.from_string("version: 1\nllm: {model: m, api_key: sk-file-key, max_retries: 0}\n"
                                    "steps:\n  - use: chunk.sentences\n  - use: compress.select\n"
                                    "  - use: llm.fallback\n")
    context = pipeline.run(TEXT, budget=30, llm={"base_url": openai_server.base_url})
    assert context.output and "Orion" in context.output
    assert all("sk-file-key" not in r.headers.get("authorization", "") for r in openai_server.requests)
    assert openai_server.requests  # the call was made, without the file's key
