"""A store with a damaged page in the middle is refused before anything is written: one message
naming the file, exit 2 from the CLI, a StoreError from Python, and the file's bytes unchanged."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from compactor import ContextCompacter
from compactor.errors import StoreError
from compactor.store import open_store

from ..helpers import run_cli

QUERY = "electric car battery range price"
RESULTS = [{"url": "https://example.org/ev", "content": "Electric cars cost 30000 dollars in 2024. "
            "The battery of the Model 3 holds 75 kWh and gives a range of 500 km on one charge. " * 40},
           {"url": "https://example.org/bus", "content": "Electric buses in Shenzhen number 16000. "
            "They run about 250 km on one charge and recharge overnight at the depot. " * 40}]


def _store(path: Path) -> Path:
    compacter = ContextCompacter("fact_centric", store=path, session="s", query=QUERY)
    compacter.process_search_results([(r["url"], r["content"]) for r in RESULTS])
    compacter.store.close()
    return path


def _damage_middle_page(path: Path) -> bytes:
    """Overwrite the body of the b-tree page in the middle of the file (its 8-byte header kept, so
    the page still looks like one), with fixed pseudo-random bytes."""
    data = bytearray(path.read_bytes())
    page = int.from_bytes(data[16:18], "big")
    pages = len(data) // page
    middle = next(n for n in range(pages // 2, pages) if data[n * page] in (0x02, 0x05, 0x0A, 0x0D))
    noise = random.Random(26).randbytes(page - 16)
    data[middle * page + 8: middle * page + page - 8] = noise
    path.write_bytes(bytes(data))
    return bytes(data)


@pytest.fixture()
def damaged(tmp_path: Path) -> tuple[Path, bytes]:
    path = _store(tmp_path / "damaged.sqlite")
    assert len(path.read_bytes()) // 4096 >= 8, "the store is too small to have a middle"
    return path, _damage_middle_page(path)


def test_the_api_refuses_a_damaged_store_untouched(damaged: tuple[Path, bytes]) -> None:
    path, before = damaged
    with pytest.raises(StoreError, match="the compactor store is corrupted") as caught:
        open_store(path)
    assert str(path) in str(caught.value) and "\n" not in str(caught.value)
    with pytest.raises(StoreError):
        ContextCompacter("fact_centric", store=path, session="new", query=QUERY)
    assert path.read_bytes() == before


def test_the_cli_refuses_a_damaged_store_untouched(damaged: tuple[Path, bytes], tmp_path: Path) -> None:
    path, before = damaged
    results = tmp_path / "results.jsonl"
    results.write_text("".join(json.dumps(r) + "\n" for r in RESULTS), encoding="utf-8")
    turn = json.dumps({"role": "user", "content": "How far does the Model 3 go on one charge?"}) + "\n"
    for args, stdin in (
        (["deep-search", str(results), "--query", QUERY, "--session", "s", "--store", str(path)], None),
        (["conversation", "-", "--budget", "500", "--store", str(path), "--session", "s2"], turn),
    ):
        done = run_cli(*args, stdin=stdin.encode() if stdin else None)
        assert done.returncode == 2, (args, done.stderr)
        assert done.stderr.count("\n") == 1, done.stderr
        assert f"{path}: the compactor store is corrupted" in done.stderr
        assert "Traceback" not in done.stderr
        assert path.read_bytes() == before, args


def test_a_sound_store_still_opens_and_is_written(tmp_path: Path) -> None:
    path = _store(tmp_path / "sound.sqlite")
    turn = json.dumps({"role": "user", "content": "How far does the Model 3 go on one charge?"}) + "\n"
    done = run_cli("conversation", "-", "--budget", "500", "--store", str(path), "--session", "s2",
                   stdin=turn.encode())
    assert done.returncode == 0, done.stderr
    with open_store(path) as store:
        assert "s2" in store.sessions()
