"""The DeepSearch compacter as its design names it (`strategy_name=`, `chunk_store`, `knowledge_base`,
`FactObject.summary`), every strategy within the session budget, chunk_filtering's guarded LLM pick of
chunk ids (through the real openai client against tests/openai_server.py), and summary sentences traced
back to their chunks; on HotpotQA/MuSiQue items from ../shared/eval fed as two batches of search results."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from compactor import ContextCompacter, Pipeline
from compactor.document import Fact
from compactor.errors import ConfigError, InputError
from compactor.formats.search_context import summary_sentences
from compactor.plugins.compress.search import parse_chunk_ids, trace_sentences
from compactor.text.tokens import get_counter

from .. import openai_server as fake
from ..helpers import EVAL, REPO
from ..openai_server import FakeOpenAI, Reply
from .test_search_budget import items, pages

openai_server = fake.openai_server
QA = [EVAL / "hotpotqa-distractor-sample" / "qa.jsonl", EVAL / "musique-sample" / "qa.jsonl"]
pytestmark = pytest.mark.skipif(not all(p.is_file() for p in QA), reason="eval data not found")
COUNTER = get_counter("cl100k_base")
STRATEGIES = ("fact_centric", "chunk_filtering", "summarization")


def two_batches(compacter: ContextCompacter, item: dict[str, Any]) -> None:
    found = pages(item)
    half = len(found) // 2
    compacter.process_search_results(found[:half], item["question"])
    compacter.process_search_results(found[half:], item["question"])


@pytest.fixture(scope="module")
def mixed() -> list[dict[str, Any]]:
    return items(QA[0], 4, 10) + items(QA[1], 3, 5)


# -- the seed's surface ----------------------------------------------------------------------------


def test_strategy_name_selects_the_strategy_and_a_disagreement_names_the_field() -> None:
    for name in STRATEGIES:
        assert ContextCompacter(strategy_name=name).strategy == name
    assert ContextCompacter("B", strategy_name="chunk_filtering").strategy == "chunk_filtering"
    with pytest.raises(ConfigError, match="strategy_name"):
        ContextCompacter("summarization", strategy_name="chunk_filtering")
    with pytest.raises(ConfigError, match="choose from fact_centric"):
        ContextCompacter(strategy_name="magic")


def test_chunk_store_maps_every_chunk_id_of_the_session_to_its_original_text(
        mixed: list[dict[str, Any]]) -> None:
    compacter = ContextCompacter(strategy_name="fact_centric")
    two_batches(compacter, mixed[0])
    store = compacter.chunk_store
    assert isinstance(store, Mapping)
    stored = compacter.store.session_chunks(compacter.session)
    assert list(store) == [c.id for c in stored] and len(store) == len(stored)
    assert all(store[c.id] == c.text for c in stored)
    for fact in compacter.knowledge_base:  # every fact points back into the chunk store, verbatim
        assert isinstance(fact, Fact) and fact.summary == fact.text
        assert fact.summary in store[fact.chunk_ids[0]]
    with pytest.raises(TypeError):
        store[stored[0].id] = "changed"  # type: ignore[index]
    with pytest.raises(KeyError):
        store["nope-0000"]
    # a chunk of another session is not this session's
    other = ContextCompacter(strategy_name="fact_centric", store=compacter.store)
    other.process_search_results(pages(mixed[1])[:2], mixed[1]["question"])
    foreign = next(iter(other.chunk_store))
    assert foreign not in compacter.chunk_store and foreign in other.chunk_store


def test_knowledge_base_takes_the_shape_of_its_strategy(mixed: list[dict[str, Any]]) -> None:
    shapes = {}
    for name in STRATEGIES:
        compacter = ContextCompacter(strategy_name=name)
        two_batches(compacter, mixed[2])
        shapes[name] = compacter.knowledge_base
    assert shapes["fact_centric"] and all(isinstance(f, Fact) for f in shapes["fact_centric"])
    assert shapes["chunk_filtering"] and all(isinstance(i, str) for i in shapes["chunk_filtering"])
    assert isinstance(shapes["summarization"], str) and shapes["summarization"]


# -- every strategy within the session budget ------------------------------------------------------


@pytest.mark.parametrize("budget", [120, 300, 1000])
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_every_checklist_stays_within_the_session_budget(strategy: str, budget: int,
                                                         mixed: list[dict[str, Any]]) -> None:
    for item in mixed:
        compacter = ContextCompacter(strategy, query=item["question"], budget=budget)
        two_batches(compacter, item)
        text = compacter.checklist_text()
        assert text, item["id"]
        assert COUNTER.count(text) <= budget, (item["id"], COUNTER.count(text))
        # a report context asked for within the budget keeps it too
        assert COUNTER.count(compacter.reconstruct_report_context(budget=budget)) <= budget


def test_chunk_filtering_by_default_shows_a_share_of_the_input(mixed: list[dict[str, Any]]) -> None:
    for item in mixed:
        compacter = ContextCompacter("chunk_filtering")
        two_batches(compacter, item)
        input_tokens = sum(COUNTER.count(text) for _, text in pages(item))
        shown = COUNTER.count(compacter.checklist_text())
        assert 0 < shown <= 0.2 * input_tokens + 2 * 150, item["id"]  # 20% of each batch, >= 150 each
        assert shown < 0.6 * input_tokens, item["id"]


def test_citations_give_way_to_facts_when_the_checklist_is_tight(mixed: list[dict[str, Any]]) -> None:
    text = (REPO / "pipelines" / "deep-search.yaml").read_text()
    text = text.replace("share: 0.1", "share: 1.0").replace("threshold: 0.3", "threshold: 0.8")
    roomy = ContextCompacter(None, pipeline=Pipeline.from_string(text), budget=4000)
    tight = ContextCompacter("fact_centric", budget=60)
    for compacter in (roomy, tight):
        two_batches(compacter, mixed[3])
    assert "[" in roomy.checklist_text()  # room: each fact cites its chunks
    facts = tight.get_checklist_context()
    assert facts and COUNTER.count(tight.checklist_text()) <= 60
    assert all(f.text in tight.checklist_text() for f in facts)


# -- chunk_filtering's LLM pick --------------------------------------------------------------------


def _llm_pipeline(tmp_path: Path, server: FakeOpenAI) -> Path:
    text = (REPO / "pipelines" / "deep-search.yaml").read_text()
    llm = f"{{model: m, base_url: '{server.base_url}', api_key: sk-test, max_retries: 0}}"
    text = text.replace("steps:\n", f"llm: {llm}\nsteps:\n")
    step = "  - use: compress.fact_centric\n"
    head, tail = text.split(step)
    text = head + "  - use: compress.chunk_filtering\n    with: {llm: true}\n" + tail.split("\n", 1)[1]
    path = tmp_path / "deep-llm.yaml"
    path.write_text(text)
    return path


def test_llm_chunk_ids_are_used_only_when_every_id_is_a_chunk_of_the_batch(
        tmp_path: Path, openai_server: FakeOpenAI, mixed: list[dict[str, Any]]) -> None:
    item = mixed[0]
    found = pages(item)
    probe = ContextCompacter("chunk_filtering", query=item["question"])
    probe.process_search_results(found[:3])
    rules = probe.chunk_ids
    chunks = list(probe.chunk_store)
    chosen = [c for c in chunks if c not in rules][:1] + rules[-1:]
    openai_server.queue(Reply(content=json.dumps(["made-up-0001", chunks[0]])),
                        Reply(content="I'm sorry, but I can't help with that."),
                        Reply(content=f"```json\n{json.dumps(chosen)}\n```"))
    pipeline = str(_llm_pipeline(tmp_path, openai_server))
    steps = []
    for expected in ("rules", "rules", "llm"):
        compacter = ContextCompacter(None, pipeline=pipeline, query=item["question"])
        step = compacter.process_search_results(found[:3])["steps"]["compress.chunk_filtering"]
        steps.append(step)
        assert step["extraction"] == expected
        if expected == "rules":  # a refused reply keeps the rules' choice
            assert compacter.chunk_ids == rules and step["llm_rejected"]
    assert "unknown chunk id(s): made-up-0001" in " ".join(steps[0]["llm_rejected"])
    assert "refusal" in " ".join(steps[1]["llm_rejected"]).lower()
    assert compacter.chunk_ids == chosen  # the model's pick, in its order
    assert all(compacter.chunk_store[i] in compacter.reconstruct_report_context() for i in chosen)
    sent = openai_server.requests[-1].prompt
    assert item["question"] in sent and all(f"[{c}]" in sent for c in chunks)
    assert len(openai_server.requests) == 3


def test_parse_chunk_ids_refuses_anything_but_known_ids() -> None:
    known = {"a-0000", "a-0001"}
    assert parse_chunk_ids('["a-0001", "a-0000", "a-0001"]', known) == (["a-0001", "a-0000"], [])
    assert parse_chunk_ids('{"chunk_ids": ["[a-0000]"]}', known) == (["a-0000"], [])
    assert parse_chunk_ids("[]", known) == ([], [])
    assert parse_chunk_ids('["a-0000", "b-0009"]', known)[1] == ["unknown chunk id(s): b-0009"]
    assert parse_chunk_ids("[1, 2]", known)[1] == ["reply is not a JSON list of chunk id strings"]
    assert parse_chunk_ids("none of them", known)[1] == ["reply holds no JSON list of chunk ids"]


# -- summary sentences back to their chunks --------------------------------------------------------


def test_each_summary_sentence_gives_back_the_chunks_it_came_from(mixed: list[dict[str, Any]]) -> None:
    item = mixed[1]
    compacter = ContextCompacter(strategy_name="summarization", query=item["question"], budget=300)
    found = pages(item)
    half = len(found) // 2
    compacter.process_search_results(found[:half])
    first = {s.text: s.chunk_ids for s in compacter.summary_sentences}
    compacter.process_search_results(found[half:])
    sentences = compacter.summary_sentences
    assert sentences and "\n".join(s.text for s in sentences) == compacter.summary
    for sentence in sentences:
        assert sentence.chunk_ids and sentence.id.startswith("s-")
        # a rules summary copies its sentences: each is in the first chunk it cites
        assert sentence.text in compacter.chunk_store[sentence.chunk_ids[0]]
        if sentence.text in first:  # kept from the first batch's summary, with its chunks
            assert sentence.chunk_ids == first[sentence.text]
        by_text = compacter.reconstruct_report_context([sentence.text])
        assert by_text == compacter.reconstruct_report_context([sentence.id])
        assert compacter.reconstruct_report_context([sentence]) == by_text
        assert all(compacter.chunk_store[c] in by_text for c in sentence.chunk_ids)
    assert any(s.text in first for s in sentences) and any(s.text not in first for s in sentences)
    whole = compacter.reconstruct_report_context([s.id for s in sentences], budget=250)
    assert 0 < COUNTER.count(whole) <= 250
    with pytest.raises(InputError, match="relevant_items"):
        compacter.reconstruct_report_context(["a sentence the summary never had"])
    assert compacter.reconstruct_report_context() == compacter.summary


def test_an_llm_summary_sentence_is_traced_to_the_chunks_it_draws_on(
        tmp_path: Path, openai_server: FakeOpenAI, mixed: list[dict[str, Any]]) -> None:
    item = mixed[0]
    found = pages(item)[:2]
    probe = ContextCompacter("summarization")
    probe.process_search_results(found)
    stored = probe.store.session_chunks(probe.session)
    lead = [summary_sentences(c.text)[0] for c in stored]
    one, two = stored[0], stored[1]  # the first pages' leads: one from each page
    text = (REPO / "pipelines" / "deep-search.yaml").read_text()
    llm = f"{{model: m, base_url: '{openai_server.base_url}', api_key: sk-test, max_retries: 0}}"
    text = text.replace("steps:\n", f"llm: {llm}\nsteps:\n").replace(
        "use: compress.fact_centric\n    with: {share: 0.1, min_tokens: 50, threshold: 0.3, min_score: 0.1}",
        "use: compress.summarization\n    with: {llm: true}")
    path = tmp_path / "summary-llm.yaml"
    path.write_text(text)
    openai_server.queue(Reply(content=" ".join(lead)))
    compacter = ContextCompacter(None, pipeline=str(path))
    step = compacter.process_search_results(found)["steps"]["compress.summarization"]
    assert step["method"] == "llm", step
    sentences = compacter.summary_sentences
    assert " ".join(s.text for s in sentences) == " ".join(lead)
    originals = {c.id: c.text for c in stored}
    for sentence in sentences:  # each copied sentence is traced to the chunk it was copied from
        assert any(sentence.text[:40] in originals[c] for c in sentence.chunk_ids), sentence
        assert all(originals[c] in compacter.reconstruct_report_context([sentence.id])
                   for c in sentence.chunk_ids)
    assert one.id in sentences[0].chunk_ids and two.id in sentences[1].chunk_ids


def test_tracing_picks_the_chunks_sharing_most_terms() -> None:
    from compactor.document import Chunk

    def chunk(cid: str, text: str) -> Chunk:
        return Chunk(id=cid, source_id=cid.split("-")[0], index=0, start=0, end=len(text), text=text,
                     tokens=COUNTER.count(text))

    chunks = [chunk("a-0000", "The Eiffel Tower in Paris was finished in 1889 for the World's Fair."),
              chunk("b-0000", "Gustave Eiffel's company designed and built the tower."),
              chunk("c-0000", "巴黎铁塔于1889年建成，是世界博览会的入口。")]
    traced = dict(trace_sentences(["The tower in Paris was finished in 1889.", "铁塔于1889年建成。",
                                   "Nothing shared here at all."], chunks))
    assert traced["The tower in Paris was finished in 1889."][0] == "a-0000"
    assert traced["铁塔于1889年建成。"][0] == "c-0000"
    assert traced["Nothing shared here at all."] == []


def test_a_fact_leaves_its_pages_heading_line_out_and_still_points_into_the_input(
        mixed: list[dict[str, Any]]) -> None:
    compacter = ContextCompacter("fact_centric", budget=1000)
    two_batches(compacter, mixed[5])
    given = dict(pages(mixed[5]))
    assert len(given) == len(pages(mixed[5]))  # one page per URL
    url_of = {s.id: s.url for s in compacter.store.sources(compacter.session)}
    titles = {url.rsplit("/", 1)[1].replace("_", " ") for url in given}
    facts = compacter.facts
    assert facts and not any("\n" in f.text and f.text.split("\n")[0] in titles for f in facts)
    spans = [f for f in facts if f.span is not None]
    assert spans
    for fact in spans:
        source, start, end = fact.span  # type: ignore[misc]
        assert given[str(url_of[source])][start:end] == fact.text
    # the first sentence of a page, without its heading line, is a fact of its own
    first = [f for f in facts if any(given[u].split("\n", 1)[1].startswith(f.text[:30]) for u in given)]
    assert first and all(not f.text.startswith(t + "\n") for f in first for t in titles)


CMRC = EVAL / "cmrc2018-zh-dev" / "qa.jsonl"


@pytest.mark.skipif(not CMRC.is_file(), reason="eval data not found")
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_chinese_pages_keep_the_budget_and_trace_back(strategy: str) -> None:
    rows = items(CMRC, 6)
    results = [(f"https://zh.wikipedia.org/wiki/{c['title']}", f"{c['title']}\n{c['text']}")
               for row in rows for c in row["contexts"]]
    compacter = ContextCompacter(strategy_name=strategy, query=rows[0]["question"], budget=200)
    compacter.process_search_results(results[:3])
    compacter.process_search_results(results[3:])
    text = compacter.checklist_text()
    assert text and COUNTER.count(text) <= 200
    if strategy == "summarization":
        sentences = compacter.summary_sentences
        assert sentences and all(s.text in compacter.chunk_store[s.chunk_ids[0]] for s in sentences)
        assert compacter.chunk_store[sentences[0].chunk_ids[0]] in compacter.reconstruct_report_context(
            [sentences[0].text])
    elif strategy == "chunk_filtering":
        assert all(compacter.chunk_store[i] in text for i in compacter.checklist_chunk_ids)
    else:
        assert all(f.summary in compacter.chunk_store[f.chunk_ids[0]] for f in compacter.knowledge_base)
