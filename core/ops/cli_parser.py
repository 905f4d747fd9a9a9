"""The `compactor-run` command line: its arguments, and an entry point that answers `--help` and
`--version` without loading the pipelines (the rest of the command lives in `compactor.ops.cli`)."""

from __future__ import annotations

import argparse
import importlib.resources
import sys
from collections.abc import Sequence

DEFAULT_STORE = ".compactor/chunks.sqlite"


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("compactor")
    except Exception:  # not installed as a distribution (a source checkout)
        from compactor import __version__

        return __version__


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="compactor-run",
        description="Compress context for LLM agents with a declarative pipeline.",
        epilog=f"shipped pipelines: {', '.join(_shipped())} (a name, or a pipeline YAML "
               "file). Exit codes: 0 ok, 1 pipeline failure or quality gate, 2 usage or "
               "configuration error.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    parser.add_argument("pipeline", nargs="?", help="pipeline YAML file, or a shipped pipeline name")
    parser.add_argument("inputs", nargs="*", help="files, directories or - for stdin (default: -): text, "
                        "HTML, subtitles, or records (JSON Lines / JSON; README 'Input records')")
    parser.add_argument("-q", "--query", help="what the compressed context must answer")
    parser.add_argument("-b", "--budget", type=int, metavar="TOKENS", help="token budget")
    parser.add_argument("-f", "--format", choices=("text", "markdown", "json", "messages"),
                        help="output format (json carries provenance; messages: a compacted history as "
                        "the JSON message list to send)")
    parser.add_argument("-o", "--output", metavar="FILE", help="write here (atomically), not stdout")
    parser.add_argument("--report", metavar="FILE", help="write the step reports as JSON, or a visual "
                        "report when FILE ends in .html (kept and dropped text, scores, steps, loss)")
    parser.add_argument("--explain", action="store_true",
                        help="print each chunk's scores, features and keep/drop decision instead of the text")
    parser.add_argument("--fail-under", type=float, metavar="RETENTION",
                        help="exit 1 when validate.loss retention is below this (a CI quality gate)")
    parser.add_argument("--strategy", help="search-result strategy: fact_centric, chunk_filtering or "
                        "summarization (for pipelines with a strategy step, e.g. deep-search)")
    parser.add_argument("--session", help="add the inputs to this session of the chunk store and print "
                        "the session's checklist context")
    parser.add_argument("--store", metavar="PATH", help="chunk store file (default: the pipeline's "
                        f"store.path, else {DEFAULT_STORE} when --session is given, else memory)")
    parser.add_argument("--report-context", action="store_true",
                        help="with --session: print the report context (original chunk text) instead")
    parser.add_argument("--target-ratio", "--target-compression-ratio", type=float, metavar="R",
                        dest="target_ratio", help="conversations: compact to this share of the history's "
                        "tokens (0.6: 60%%), filling 90-100%% of it")
    parser.add_argument("--keep-last", type=int, metavar="N",
                        help="conversations: turns kept verbatim at the end (a call with its results is one)")
    parser.add_argument("--compress-system", action="store_true",
                        help="conversations: when the system message(s) would take over half the budget, "
                        "send an excerpt chosen for the opening request (the original stays expandable)")
    parser.add_argument("--role", help="conversations: write the handoff summary of this speaker "
                        "(its name or role)")
    parser.add_argument("--kind", choices=("auto", "coding", "tool", "chat", "meeting"),
                        help="conversations: the kind of history (default: detected from the messages); "
                        "picks the summary template")
    parser.add_argument("--focus", metavar="TEXT",
                        help="conversations: raise what matches this text in every section "
                        "(like `/compact focus on ...`)")
    parser.add_argument("--keep-files", type=int, metavar="N",
                        help="coding agents: keep the latest view of the N files worked on last verbatim")
    parser.add_argument("--expand", nargs="+", metavar="ID",
                        help="print the original text of these chunk ids (ranges like <id>-0002..0009 too) "
                        "from --store, and exit")
    parser.add_argument("--out", metavar="FILE", help="batch mode: run the pipeline on every line of a JSONL "
                        "corpus and append one JSON result per line here (resumes: ids already there "
                        "are skipped)")
    parser.add_argument("--executor", choices=("local", "serial", "dask"), default="local",
                        help="batch mode: a process pool over the cores (default), one process, or Dask")
    parser.add_argument("--workers", type=int, metavar="N", help="batch mode: processes or Dask workers")
    parser.add_argument("--scheduler", metavar="ADDRESS",
                        help="batch mode with --executor dask: an existing cluster (tcp://host:8786); "
                        "its workers' threads set how many documents run at once")
    parser.add_argument("--stats", action="store_true", help="show rolling figures of the last 100 runs per "
                        f"pipeline recorded in --store (default {DEFAULT_STORE}) and flag anomalies")
    parser.add_argument("--metrics-file", metavar="FILE",
                        help="write the rolling run figures in the Prometheus text format")
    parser.add_argument("--check", action="store_true", help="validate the pipeline file and exit")
    parser.add_argument("--print-config", action="store_true",
                        help="print the resolved pipeline with defaults and exit")
    parser.add_argument("--list-plugins", action="store_true",
                        help="list every component with its stage, version and parameters")
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    parser.add_argument("--quiet", action="store_true", help="no progress or summary on stderr")
    parser.add_argument("--no-progress", action="store_true",
                        help="no progress bar or progress lines (COMPACTOR_NO_PROGRESS=1 too); progress "
                        "shows on a terminal as a bar, elsewhere as a plain line every 10 s or 10%%")
    return parser


def _shipped() -> list[str]:
    """The shipped pipelines' names (as `compactor.pipeline.shipped_pipelines`, without loading it)."""
    folder = importlib.resources.files("compactor.pipelines")
    return sorted(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".yaml"))


def run(argv: Sequence[str] | None = None) -> int:
    """The console script: `--help` and `--version` answered here, everything else by `cli.main`."""
    args = list(sys.argv[1:] if argv is None else argv)
    if any(a in ("-h", "--help", "--version") for a in args):
        build_parser().parse_intermixed_args(args)  # prints and exits
    from compactor.ops.cli import main

    return main(argv)
