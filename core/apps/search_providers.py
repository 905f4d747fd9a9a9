"""Search for a research agent: one `SearchProvider` protocol, an offline corpus and Tavily.

    >>> provider = search_provider(corpus="notes/")      # Tavily when TAVILY_API_KEY is set
    >>> provider.search("sodium-ion battery cost", max_results=5)
    [{"url": ..., "title": ..., "content": ...}, ...]

`OfflineSearch` ranks a local corpus (a JSONL file of `{url, title, content}` records, a folder of
`.txt`/`.md`/`.jsonl` files, or records in memory) with BM25 over the relevance engine's terms, so
examples and tests run without a network. `TavilySearch` posts to Tavily's search API over httpx;
its key goes only into the request's Authorization header and never into a message or an error; a
failed search (timeout, HTTP error, a reply that is not search results) is an InputError.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import regex

from compactor.errors import InputError
from compactor.llm.client import redact
from compactor.text.relevance import Bm25, index_terms, query_weights

TAVILY_URL = "https://api.tavily.com"
_PARAGRAPH = regex.compile(r"\n[ \t]*\n\s*")
_TEXT_FILES = (".txt", ".md", ".markdown")


@runtime_checkable
class SearchProvider(Protocol):
    """Anything that answers a query with result records `{url, title, content}` (best first)."""

    name: str

    def search(self, query: str, max_results: int = 5) -> list[dict[str, Any]]:
        """At most `max_results` results for `query`."""
        ...


def _record(item: Any, where: str) -> dict[str, Any]:
    if not isinstance(item, Mapping):
        raise InputError(f"{where}: a corpus record must be an object with `content`, "
                         f"not {type(item).__name__}")
    text = item.get("content", item.get("text", item.get("raw_content")))
    if not isinstance(text, str):
        raise InputError(f"{where}: field `content` (or `text`) must be text")
    url = item.get("url") or item.get("id")
    title = item.get("title")
    return {"url": str(url) if url else where, "title": str(title) if title else None, "content": text}


def read_corpus(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The records of a JSONL file, or of every `.txt`, `.md` and `.jsonl` file under a folder (a
    text file is one record: its first line is the title, its `file://` URI the URL)."""
    root = Path(path)
    if root.is_dir():
        records: list[dict[str, Any]] = []
        for file in sorted(p for p in root.rglob("*") if p.is_file()):
            if file.suffix == ".jsonl":
                records += read_corpus(file)
            elif file.suffix in _TEXT_FILES:
                text = file.read_text(encoding="utf-8", errors="replace")
                first = next((line for line in text.splitlines() if line.strip()), file.stem)
                records.append({"url": file.resolve().as_uri(), "title": first.lstrip("# ").strip(),
                                "content": text})
        return records
    if not root.is_file():
        raise InputError(f"corpus: no such file or folder: {root}")
    records = []
    for number, line in enumerate(root.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputError(f"{root}:{number}: not JSON ({exc.msg})") from None
        records.append(_record(item, f"{root}:{number}"))
    return records


class OfflineSearch:
    """BM25 over a local corpus (English stems and Chinese bigrams, as the relevance engine makes
    them); a result's `content` is the whole record, its `snippet` the best paragraph."""

    name = "offline"

    def __init__(self, corpus: str | os.PathLike[str] | Iterable[Mapping[str, Any]], *,
                 snippet_chars: int = 600) -> None:
        if isinstance(corpus, str | os.PathLike):
            self.records = read_corpus(corpus)
        else:
            self.records = [_record(item, f"record {i}") for i, item in enumerate(corpus)]
        self.snippet_chars = snippet_chars
        self._index = Bm25([index_terms(f"{r['title'] or ''}\n{r['content']}") for r in self.records])

    def __repr__(self) -> str:
        return f"OfflineSearch({len(self.records)} records)"

    def search(self, query: str, max_results: int = 5) -> list[dict[str, Any]]:
        weights = query_weights(query)
        scores = self._index.scores(weights)
        ranked = sorted((i for i, s in enumerate(scores) if s > 0), key=lambda i: (-scores[i], i))
        return [{**self.records[i], "score": round(scores[i], 4),
                 "snippet": self._snippet(self.records[i]["content"], weights)}
                for i in ranked[:max(0, max_results)]]

    def _snippet(self, text: str, weights: Mapping[str, float]) -> str:
        paragraphs = [p.strip() for p in _PARAGRAPH.split(text) if p.strip()] or [text]
        best = max(paragraphs, key=lambda p: sum(weights.get(t, 0.0) for t in set(index_terms(p))))
        return best if len(best) <= self.snippet_chars else best[:self.snippet_chars].rsplit(" ", 1)[0] + " …"


class TavilySearch:
    """Tavily's search API over httpx. The key comes from `api_key` or `TAVILY_API_KEY`."""

    name = "tavily"

    def __init__(self, api_key: str | None = None, *, base_url: str | None = None, timeout: float = 20.0,
                 search_depth: str = "basic", include_raw_content: bool = True,
                 client: Any = None) -> None:
        key = api_key or os.environ.get("TAVILY_API_KEY")
        if not key:
            raise InputError("TavilySearch needs an API key: set TAVILY_API_KEY or pass api_key=")
        self._key = key
        self.base_url = (base_url or os.environ.get("TAVILY_BASE_URL") or TAVILY_URL).rstrip("/")
        self.timeout = timeout
        self.search_depth = search_depth
        self.include_raw_content = include_raw_content
        self._client = client

    def __repr__(self) -> str:
        return f"TavilySearch(base_url={self.base_url!r})"

    def search(self, query: str, max_results: int = 5) -> list[dict[str, Any]]:
        import httpx

        body = {"query": query, "max_results": max_results, "search_depth": self.search_depth,
                "include_raw_content": self.include_raw_content}
        headers = {"Authorization": f"Bearer {self._key}", "Content-Type": "application/json"}
        try:
            if self._client is not None:
                response = self._client.post(f"{self.base_url}/search", json=body, headers=headers,
                                             timeout=self.timeout)
            else:
                with httpx.Client(timeout=self.timeout) as client:
                    response = client.post(f"{self.base_url}/search", json=body, headers=headers)
        except httpx.TimeoutException:
            raise InputError(f"tavily search timed out after {self.timeout:g} s") from None
        except httpx.HTTPError as exc:
            detail = redact(f"{type(exc).__name__}: {exc}", self._key)
            raise InputError(f"tavily search failed: {detail}") from None
        if response.status_code >= 400:
            raise InputError(f"tavily search failed: HTTP {response.status_code}")
        try:
            data = response.json()
        except ValueError:
            raise InputError("tavily search returned a reply that is not JSON") from None
        items = data.get("results") if isinstance(data, Mapping) else None
        if not isinstance(items, list):
            raise InputError("tavily search returned no `results` list")
        results = []
        for item in items:
            if not isinstance(item, Mapping) or not isinstance(item.get("url"), str):
                continue
            snippet = item.get("content") if isinstance(item.get("content"), str) else ""
            raw = item.get("raw_content") if isinstance(item.get("raw_content"), str) else None
            results.append({"url": item["url"], "title": item.get("title"), "content": raw or snippet,
                            "snippet": snippet, "score": item.get("score")})
        return results


def search_provider(corpus: str | os.PathLike[str] | Iterable[Mapping[str, Any]] | None = None,
                    **options: Any) -> SearchProvider:
    """Tavily when `TAVILY_API_KEY` is set, else the offline corpus (InputError without one)."""
    if os.environ.get("TAVILY_API_KEY"):
        return TavilySearch(**options)
    if corpus is None:
        raise InputError("no search provider: set TAVILY_API_KEY or give an offline corpus")
    return OfflineSearch(corpus, **options)
