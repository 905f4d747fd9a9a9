"""Where the benchmarks find ../shared/eval, and how they read its JSONL files."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent


def eval_dir() -> Path:
    """The shared evaluation data folder (`$COMPACTOR_EVAL_DIR`, else ../shared/eval)."""
    env = os.environ.get("COMPACTOR_EVAL_DIR")
    return Path(env) if env else REPO_ROOT.parent / "shared" / "eval"


def read_jsonl(path: Path) -> Iterator[dict[str, Any]]:
    """The records of a JSONL file, skipping blank lines."""
    with path.open(encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                yield json.loads(line)


# --------------------------------------------------------------------------------------------
# Long real text for the speed and needle benchmarks
# --------------------------------------------------------------------------------------------


def _unique(texts: list[str]) -> list[str]:
    return list(dict.fromkeys(t.strip() for t in texts if t and t.strip()))


def _qa_passages(folder: str, *, titled: bool = True) -> list[str]:
    path = eval_dir() / folder / "qa.jsonl"
    return _unique([f"{c['title']}\n{c['text']}" if titled and c.get("title") else c["text"]
                    for row in read_jsonl(path) for c in row["contexts"]])


def _pages(folder: str, lang: str) -> list[str]:
    path = eval_dir() / folder / "pages.jsonl"
    return _unique([row["gold_text"] for row in read_jsonl(path)
                    if row.get("gold_text") and row.get("lang", "en") == lang])


def _mix(kinds: list[list[str]]) -> list[str]:
    """Documents of every kind spread through each other by their share of characters, so any prefix
    of the result holds each kind in about the same proportion as the whole."""
    keyed: list[tuple[float, int, str]] = []
    for k, docs in enumerate(kinds):
        total = sum(len(d) for d in docs) or 1
        done = 0
        for doc in docs:
            keyed.append(((done + len(doc) / 2) / total, k, doc))
            done += len(doc)
    return [doc for _, _, doc in sorted(keyed, key=lambda x: (x[0], x[1]))]


def english_documents() -> list[str]:
    """Distinct real English text of the eval data, about 1.05M cl100k tokens: news articles (CNN/DM,
    XSum, web article bodies), podcast and meeting transcripts ("speaker: text" lines) and QA
    passages (HotpotQA, MuSiQue, NQ; "title\\ntext"), interleaved by kind."""
    root = eval_dir()
    summaries = root / "summarization-frank-cnndm-xsum" / "summ.jsonl"
    articles = _unique([r["document"] for r in read_jsonl(summaries)])
    articles += _pages("web-article-extraction", "en") + _pages("web-readability-testpages", "en")
    podcasts = _unique(["\n".join(f"{t['speaker']}: {t['text']}" for t in r["turns"])
                        for r in read_jsonl(root / "transcripts-changelog-podcasts" / "transcripts.jsonl")])
    meetings = _unique(["\n".join(f"{t['speaker']}: {t['content']}" for t in r["meeting_transcripts"])
                        for r in read_jsonl(root / "meeting-transcripts-qmsum" / "test.jsonl")])
    passages = [p for folder in ("hotpotqa-distractor-sample", "musique-sample", "nq-open-oracle")
                for p in _qa_passages(folder)]
    return _mix([articles, podcasts + meetings, _unique(passages)])


def chinese_documents() -> list[str]:
    """Distinct real Chinese text: CMRC 2018 passages, VCSum meeting transcripts, Chinese web pages."""
    root = eval_dir()
    meetings = _unique(["\n".join(u["text"] for s in r["segments"] for u in s["utterances"])
                        for r in read_jsonl(root / "vcsum-zh-meetings" / "meetings.jsonl")])
    passages = _qa_passages("cmrc2018-zh-dev", titled=False)
    return _mix([passages, meetings + _pages("web-readability-testpages", "zh")])


def text_of_tokens(docs: list[str], tokens: int, encoding: Any) -> str:
    """The first documents joined by blank lines, cut to `tokens` tokens of `encoding` (a tiktoken
    Encoding) on a token boundary; raises when the documents hold fewer tokens."""
    out: list[str] = []
    have = 0
    for doc in docs:
        n = len(encoding.encode_ordinary(doc)) + 1
        if have + n >= tokens:
            ids = encoding.encode_ordinary(doc)[: max(0, tokens - have - 1)]
            out.append(encoding.decode_bytes(ids).decode("utf-8", errors="ignore"))
            have = tokens
            break
        out.append(doc)
        have += n
    if have < tokens:
        raise SystemExit(f"the eval data holds only about {have:,} tokens of this text, {tokens:,} asked")
    return "\n\n".join(out)
