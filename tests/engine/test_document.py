"""The shared document model: stable ids, offsets, immutability."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest

from compactor import Budget, Context, Pipeline, Source

TEXT = "First sentence here. Second one follows.\n\n第二段落。还有一句话！"


def test_source_id_is_content_hash_and_stable_across_processes() -> None:
    here = Source.from_text(TEXT, uri="https://example.org/a").id
    code = ("from compactor import Source; import sys; "
            "print(Source.from_text(sys.argv[1], uri='https://example.org/a').id)")
    there = subprocess.run([sys.executable, "-c", code, TEXT], capture_output=True, text=True,
                           check=True).stdout.strip()
    assert here == there
    assert Source.from_text(TEXT).id != here


def test_chunk_ids_and_offsets_point_into_the_source_text() -> None:
    pipeline = Pipeline.from_string(
        "version: 1\nsteps:\n  - use: chunk.sentences\n    with: {size: 8}\n")
    context = pipeline.run(TEXT)
    source = context.sources[0]
    assert len(context.chunks) >= 3
    for index, chunk in enumerate(context.chunks):
        assert chunk.id == f"{source.id}-{index:04d}"
        assert source.text[chunk.start:chunk.end] == chunk.text
    again = pipeline.run(TEXT)
    assert [c.id for c in again.chunks] == [c.id for c in context.chunks]


def test_model_objects_are_frozen() -> None:
    source = Source.from_text("x")
    with pytest.raises(dataclasses.FrozenInstanceError):
        source.text = "y"  # type: ignore[misc]
    with pytest.raises(TypeError):
        source.metadata["k"] = 1  # type: ignore[index]


def test_budget_resolves_absolute_and_ratio() -> None:
    assert Budget(max_tokens=100).resolve(1000) == 100
    assert Budget(ratio=0.25).resolve(1000) == 250
    assert Budget(max_tokens=100, ratio=0.5).resolve(1000) == 100
    assert Budget().resolve(1000) is None
    assert Context().resolved_budget() is None
