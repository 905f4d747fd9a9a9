"""Co-occurrence closeness: a sentence sharing no word with the question but the company its words keep."""

from __future__ import annotations

from compactor.document import Chunk, Source
from compactor.text import cooccurrence as cooc
from compactor.text import relevance as rel

PASSAGES = [
    "金字塔位于埃及吉萨。胡夫金字塔由法老胡夫下令修建。",
    "尼罗河流经埃及。河水每年泛滥。",
    "法老胡夫统治了二十多年。他的陵墓在吉萨高原。",
    "上海是一座港口城市。这里的地铁很方便。",
    "北京有故宫。故宫每天有很多游客。",
    "杭州以西湖闻名。西湖边有很多茶园。",
]


def _context() -> tuple[list[Chunk], list[Source]]:
    text = "\n\n".join(PASSAGES)
    chunks: list[Chunk] = []
    for para in PASSAGES:
        base = text.index(para)
        for sent in para.split("。"):
            if sent:
                start = base + para.index(sent)
                chunks.append(Chunk(f"c{len(chunks)}", "s", len(chunks), start, start + len(sent) + 1,
                                    sent + "。", 10))
    return chunks, [Source(id="s", kind="text", original=text, text=text)]


def test_terms_sharing_passages_with_the_question_are_its_company() -> None:
    chunks, _ = _context()
    docs = [rel.index_terms(c.text) for c in chunks]
    passages = [rel.index_terms(p) for p in PASSAGES]
    holders: dict[str, list[tuple[int, int]]] = {}
    for p, terms in enumerate(passages):
        for t in set(terms):
            holders.setdefault(t, []).append((p, terms.count(t)))
    query = rel.query_weights("金字塔是谁修建的？")
    company = cooc.expansion(query, passages, holders)
    assert "胡夫" in company and "金字" not in company  # a question term is not its own company
    close = cooc.closeness(query, docs, passages, holders)
    assert close is not None
    pharaoh = next(i for i, c in enumerate(chunks) if c.text.startswith("法老胡夫统治"))
    metro = next(i for i, c in enumerate(chunks) if "地铁" in c.text)
    assert close[pharaoh] > 0 and close[metro] == 0


def test_a_question_nobody_shares_has_no_company() -> None:
    chunks, _ = _context()
    docs = [rel.index_terms(c.text) for c in chunks]
    passages = [rel.index_terms(p) for p in PASSAGES]
    assert cooc.closeness(rel.query_weights("火星探测器"), docs, passages, {}) is None


def test_the_engine_orders_unmatched_chinese_sentences_by_company() -> None:
    chunks, sources = _context()
    result = rel.score_chunks("金字塔是谁修建的？", chunks, sources)
    pharaoh = next(i for i, c in enumerate(chunks) if c.text.startswith("法老胡夫统治"))
    metro = next(i for i, c in enumerate(chunks) if "地铁" in c.text)
    assert result.sentence[pharaoh] > result.sentence[metro] == 0
    # it stays below the sentences that match the question's own words
    pyramid = next(i for i, c in enumerate(chunks) if c.text.startswith("胡夫金字塔"))
    assert result.sentence[pyramid] > result.sentence[pharaoh]
    off = rel.score_chunks("金字塔是谁修建的？", chunks, sources, rel.Settings(unmatched=0))
    assert off.sentence[pharaoh] == 0
