"""`compactor-run`: run a pipeline file on inputs from the command line.

Exit codes: 0 ok, 1 pipeline failure or quality gate, 2 usage or configuration error.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import stat
import sys
import tempfile
import traceback
from collections.abc import Sequence
from pathlib import Path

from compactor.apps.common import check_overrides
from compactor.apps.compacter import ContextCompacter, fact_to_dict
from compactor.apps.tools import expand
from compactor.components import score_label
from compactor.document import Budget, Context, Source
from compactor.errors import CompactorError, ConfigError, InputError
from compactor.formats.records import read_paths
from compactor.formats.system_prompt import system_records
from compactor.llm.client import LLMSettings, describe_key, redact_text
from compactor.ops.batch import run_batch
from compactor.ops.cli_parser import DEFAULT_STORE, build_parser
from compactor.ops.monitor import prometheus_text, record_runs, rolling_stats, stats_text
from compactor.ops.progress import StepProgress, wanted
from compactor.ops.report import html_report
from compactor.pipeline import Pipeline, read_pipeline_text
from compactor.registry import build_registry
from compactor.state import CompactionPlan, ConversationOptions, Knowledge, LossReport, RunInputs, State
from compactor.store import Batch, open_store


class _StderrWarnings(logging.Handler):
    """compactor's log warnings (LLM replies rejected, retries, a missing tokenizer) as one stderr
    line each, remembered so the step warnings printed after a run do not repeat them."""

    def __init__(self, quiet: bool) -> None:
        super().__init__(logging.WARNING)
        self.quiet = quiet
        self.shown: set[str] = set()
        self.progress: StepProgress | None = None  # a bar on screen: the warning goes above it

    def emit(self, record: logging.LogRecord) -> None:
        message = _shown(record.getMessage().removeprefix("compactor: "))
        self.shown.add(message)
        if self.quiet:
            return
        if self.progress is not None:
            self.progress.write(f"compactor-run: warning: {message}")
        else:
            print(f"compactor-run: warning: {message}", file=sys.stderr)


_WARNINGS = _StderrWarnings(quiet=False)


def _print_warnings(context: Context, quiet: bool) -> None:
    """Every step's warnings, one line each, unless already shown or --quiet."""
    if quiet:
        return
    for report in context.reports:
        for warning in report.warnings:
            warning = _shown(warning)
            if warning not in _WARNINGS.shown:
                _WARNINGS.shown.add(warning)
                print(f"compactor-run: warning: {report.step}: {warning}", file=sys.stderr)


def _shown(text: str) -> str:
    """Text bound for stderr with every credential redacted (keys of the LLM settings, credential-named
    environment variables, keys inside URLs)."""
    return redact_text(text, env=os.environ)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script; returns the exit code."""
    args = build_parser().parse_intermixed_args(argv)
    _WARNINGS.quiet = args.quiet
    _WARNINGS.shown.clear()  # each run says its warnings once, a second run in one process too
    root = logging.getLogger("compactor")
    added = _WARNINGS not in root.handlers
    propagate = root.propagate
    if added:
        root.addHandler(_WARNINGS)
        root.propagate = False
    try:
        return _run(args)
    finally:  # a caller running main in its own process (tests, embedders) gets its logging back
        if added:
            root.removeHandler(_WARNINGS)
            root.propagate = propagate


def _run(args: argparse.Namespace) -> int:
    """`_main` with every failure turned into its exit code and one line on stderr."""
    try:
        return _main(args)
    except CompactorError as exc:
        if args.debug:
            traceback.print_exc()
        print(f"compactor-run: error: {_shown(str(exc))}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("compactor-run: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        if args.debug:
            traceback.print_exc()
        print(f"compactor-run: internal error: {type(exc).__name__}: {_shown(str(exc))} "
              "(run with --debug for the traceback)", file=sys.stderr)
        return 1


def _check_single_run(args: argparse.Namespace) -> None:
    """Batch options without --out are refused: without it the inputs would be compressed as one
    input, on this machine, whatever the cluster was meant to do."""
    given = [o for o, on in (("--scheduler", args.scheduler), ("--executor", args.executor != "local"),
                             ("--workers", args.workers is not None)) if on]
    if given:
        raise ConfigError(f"{' and '.join(given)} run batch mode: give --out FILE (a JSONL file the "
                          "results are appended to, one per corpus record)")


def _check_targets(args: argparse.Namespace) -> None:
    """Files the run will write must have a folder to go to: said before any work, not after."""
    for option, value in (("-o/--output", args.output), ("--report", args.report),
                          ("--metrics-file", args.metrics_file), ("--out", args.out)):
        if value:
            folder = Path(value).resolve().parent
            if not folder.is_dir():
                raise ConfigError(f"{option}: cannot write {value}: the folder {folder} does not exist")
            if Path(value).is_dir():
                raise ConfigError(f"{option}: cannot write {value}: it is a folder")


def _main(args: argparse.Namespace) -> int:
    _check_targets(args)
    if args.list_plugins:
        print(list_plugins())
        return 0
    if args.stats:
        store_path = Path(args.store or DEFAULT_STORE)
        if not store_path.exists():
            raise ConfigError(f"{store_path}: no run store yet; runs are recorded with --store PATH")
        stats = rolling_stats(open_store(store_path))
        print(stats_text(stats))
        if args.metrics_file:
            write_atomic(Path(args.metrics_file), prometheus_text(stats))
        return 0
    if args.expand:
        if not args.store:
            raise ConfigError("--expand needs --store PATH (the chunk store the ids were written to)")
        for cid, text in expand(args.expand, args.store).items():
            sys.stdout.write(f"[{cid}]\n{text}\n\n")
        return 0
    if not args.pipeline:
        raise ConfigError("a pipeline file is required (or --list-plugins); "
                          "try `compactor-run generic page.html --budget 500`")
    if args.out:
        return _batch_main(args)
    _check_single_run(args)
    pipeline = Pipeline.from_yaml(args.pipeline)
    conversation = pipeline.spec.provides(CompactionPlan)  # a history compressor
    strategy = pipeline.spec.provides(Knowledge)  # a search strategy
    if (args.strategy or args.session or (args.store and strategy)) and not conversation:
        return _session_main(args)
    if args.store and not conversation:
        record_runs(pipeline, args.store)  # --store without a session: where runs are recorded
    if args.check:
        steps = len(pipeline.spec.steps)
        print(f"{args.pipeline}: ok ({steps} step{'s' if steps != 1 else ''})")
        _print_llm_key(args.pipeline, pipeline)
        return 0
    if args.print_config:
        sys.stdout.write(pipeline.print_config())
        return 0
    if args.budget is not None and args.budget <= 0:
        raise ConfigError("--budget must be a positive number of tokens")
    sources = _read_inputs(args.inputs)
    options = {k: v for k, v in (("keep_last", args.keep_last), ("role", args.role), ("kind", args.kind),
                                 ("focus", args.focus), ("keep_files", args.keep_files),
                                 ("compress_system", args.compress_system or None)) if v is not None}
    if options and not conversation:
        raise ConfigError("--keep-last, --role, --kind, --focus, --keep-files and --compress-system apply "
                          "to conversation pipelines (a history compressor such as compress.eight_segment)")
    for key, value in options.items():  # each flag checked by the history compressor's schema
        try:
            check_overrides(pipeline, CompactionPlan, {key: value})
        except InputError as exc:
            raise ConfigError(f"--{key.replace('_', '-')}: {exc}") from None
    target_ratio = getattr(args, "target_ratio", None)
    if target_ratio is not None:
        if not conversation:
            raise ConfigError("--target-ratio applies to conversation pipelines (a history compressor such "
                              "as compress.eight_segment)")
        if not 0 < target_ratio <= 1:
            raise ConfigError(f"--target-ratio must be a share in (0, 1], not {target_ratio}")
        if args.budget is not None:
            raise ConfigError("give --budget or --target-ratio, not both")
        options["fill"] = True
    inputs = Context(sources=tuple(sources), query=pipeline.spec.query,
                     budget=Budget(ratio=target_ratio) if target_ratio is not None else pipeline.spec.budget,
                     state=State([ConversationOptions(options)] if options else []))
    store = open_store(args.store or (DEFAULT_STORE if args.session else None)) if conversation else None
    if store is not None and (args.store or args.session):
        record_runs(pipeline, store)  # a conversation's runs go to the store its chunks go to
    progress = StepProgress(sys.stderr) if wanted(sys.stderr, args.quiet, args.no_progress) else None
    _WARNINGS.progress = progress
    try:
        context = pipeline.run(inputs, query=args.query, budget=args.budget, output_format=args.format,
                               progress=progress, store=store, session=args.session)
    finally:
        _WARNINGS.progress = None
        if progress is not None:
            progress.close()
    _check_some_text(context)
    if store is not None and (args.store or args.session):
        found = context.state.get(CompactionPlan)
        plans = found.plans if found is not None else {}
        # the originals of system prompts sent as an excerpt, stored for `expand`
        originals = list({o.id: (o, c) for s in context.sources if s.id in plans
                          for o, c in system_records(s.messages, plans[s.id], pipeline.counter)}.values())
        store.commit_batch(args.session or "conversation", Batch(
            sources=(*context.sources, *(o for o, _ in originals)),
            chunks=(*context.chunks, *(c for _, c in originals)), report={"kind": "conversation"}))
    _print_warnings(context, args.quiet)
    fmt = args.format or pipeline.spec.output["format"]
    text = explain(context) if args.explain else (context.output or "")
    if args.report and Path(args.report).suffix.lower() in (".html", ".htm"):
        shown = redact_text(html_report(context, f"compactor · {pipeline.spec.name}"))
        write_atomic(Path(args.report), shown)
        args.report = None  # the JSON report is not written as well
    _emit(args, text, report_dict(context), newline=fmt != "json")
    if args.metrics_file and (args.store or (conversation and args.session)):
        runs = store if store is not None else open_store(args.store)
        write_atomic(Path(args.metrics_file), prometheus_text(rolling_stats(runs)))
    if not args.explain and _nothing_kept(context, text):
        return _empty_result(sum(len(r.details.get("flagged", ())) for r in context.reports))
    if args.fail_under is not None:
        return _quality_gate(context, args.fail_under)
    return 0


def _emit(args: argparse.Namespace, text: str, report: dict[str, object], newline: bool = True) -> None:
    """The output to --output (atomically) or stdout, and the report to --report when asked."""
    if newline and not text.endswith("\n"):
        text += "\n"
    if args.output:
        write_atomic(Path(args.output), text)
    else:
        sys.stdout.write(text)
    if args.report:
        shown = redact_text(json.dumps(report, indent=2, ensure_ascii=False, default=str))
        write_atomic(Path(args.report), shown + "\n")


def _print_llm_key(name: str, pipeline: Pipeline) -> None:
    """For --check: which endpoint the pipeline's LLM calls go to and where their key comes from
    (never the key), when the pipeline has an LLM to call."""
    values = pipeline.spec.llm
    if not (LLMSettings.from_mapping(values).configured or values.get("base_url") or values.get("api_key")):
        return
    print(describe_key(values, os.environ, written=_written_api_key(name)))


def _written_api_key(name: str) -> object:
    """The pipeline file's `llm.api_key` as written (`${VAR}` not replaced), or None."""
    import yaml

    try:
        data = yaml.safe_load(read_pipeline_text(name)[0])
    except (yaml.YAMLError, CompactorError, OSError):
        return None
    llm = data.get("llm") if isinstance(data, dict) else None
    return llm.get("api_key") if isinstance(llm, dict) else None


def _batch_main(args: argparse.Namespace) -> int:
    """A JSONL corpus through the pipeline, streamed to --out (see compactor.ops.batch)."""
    if len(args.inputs) > 1:
        raise ConfigError("batch mode (--out) reads one JSONL corpus (or - for stdin)")
    if args.workers is not None and args.workers < 1:
        raise ConfigError("--workers must be at least 1")
    if args.scheduler and args.executor != "dask":
        raise ConfigError("--scheduler needs --executor dask")
    text, label = read_pipeline_text(args.pipeline)
    if args.store:  # a store that is not one is refused once, before any document runs
        open_store(args.store).close()
    show = None if args.quiet else sys.stderr
    stats = run_batch(text, label, Path(args.inputs[0] if args.inputs else "-"), Path(args.out),
                      executor=args.executor, workers=args.workers, scheduler=args.scheduler,
                      output_format=args.format, query=args.query, budget=args.budget,
                      runs=str(Path(args.store).resolve()) if args.store else None, progress=show,
                      live=wanted(sys.stderr, args.quiet, args.no_progress))
    if stats.errors and not args.quiet:
        for error in stats.errors[:5]:
            print(f"compactor-run: failed: {error}", file=sys.stderr)
    if stats.interrupted:
        print("compactor-run: interrupted; run the same command again to resume", file=sys.stderr)
        return 130
    return 1 if stats.failed else 0


def _session_main(args: argparse.Namespace) -> int:
    """Search results through a ContextCompacter: stateful, strategy-switchable, stored by session."""
    store = args.store
    if store is None and args.session and not Pipeline.from_yaml(args.pipeline).spec.store.get("path"):
        store = DEFAULT_STORE  # a session must outlive this process
    compacter = ContextCompacter(args.strategy, pipeline=args.pipeline, store=store,
                                 session=args.session, query=args.query, budget=args.budget)
    if args.check:
        print(f"{args.pipeline}: ok (strategy {compacter.strategy})")
        _print_llm_key(args.pipeline, compacter.pipeline)
        return 0
    if args.print_config:
        sys.stdout.write(compacter.pipeline.print_config())
        return 0
    persistent = store is not None or bool(compacter.pipeline.spec.store.get("path"))
    if persistent:  # each batch's pipeline run is recorded in the session's store
        record_runs(compacter.pipeline, compacter.store)
    sources = _read_inputs(args.inputs)
    batch = compacter.process_search_results(sources)
    if batch["new_pages"] and not batch["chunks"]:  # as _check_some_text, for a search batch
        raise _no_text(sources)
    if args.report_context:
        text = compacter.reconstruct_report_context(budget=args.budget)
    elif args.format == "json":
        context = compacter.get_checklist_context()
        text = json.dumps({"session": compacter.session, "strategy": compacter.strategy,
                           "checklist": [fact_to_dict(f) for f in context] if isinstance(context, list)
                           else context}, indent=2, ensure_ascii=False)
    else:
        text = compacter.checklist_text()
    _emit(args, text, batch)
    if args.metrics_file and persistent:
        write_atomic(Path(args.metrics_file), prometheus_text(rolling_stats(compacter.store)))
    if not args.quiet:
        print(f"compactor-run: session {compacter.session} ({compacter.strategy}): batch {batch['batch']}, "
              f"{batch['new_pages']} new page(s) of {batch['results']}, {len(batch['quarantined'])} "
              f"chunk(s) quarantined", file=sys.stderr)
    if not (text.strip() and (args.format != "json" or compacter.get_checklist_context())):
        return _empty_result(len(batch["quarantined"]))
    return 0


def _read_inputs(inputs: list[str]) -> list[Source]:
    """The inputs' sources (stdin when none is given)."""
    return read_paths(inputs or ["-"])


def _check_some_text(context: Context) -> None:
    """An input with no text left once cleaned (an HTML page without main text) is an input error,
    exit 2 naming it, whichever pipeline ran it: not an empty result (exit 1)."""
    chunked = any(r.stage == "chunk" and not r.skipped for r in context.reports)
    if chunked and not any(c.text.strip() for c in context.chunks):
        raise _no_text(context.sources)


def _no_text(sources: Sequence[Source]) -> InputError:
    names = ", ".join(s.uri or s.title or s.id for s in sources)
    return InputError(f"{names}: no text to compress once cleaned (a web page without main text?)")


def _nothing_kept(context: Context, text: str) -> bool:
    """Whether the output holds nothing of the input: no text, or compressors that kept no text
    (a JSON output is never empty, its segments may be)."""
    if not text.strip():
        return True
    compressed = context.segments or any(r.stage == "compress" and not r.skipped for r in context.reports)
    return bool(compressed) and not any(s.text.strip() for s in context.segments)


def _empty_result(flagged: int) -> int:
    """An empty result is a failure the caller must see: one warning line on stderr, exit 1
    (`flagged`: chunks classify.injection flagged, which may be why nothing is left)."""
    why = f" ({flagged} chunk(s) flagged as prompt injection)" if flagged else ""
    print(f"compactor-run: warning: the result is empty: nothing of the input was kept{why}",
          file=sys.stderr)
    return 1


def _quality_gate(context: Context, threshold: float) -> int:
    loss = context.state.get(LossReport)
    if loss is None or loss.retention is None:
        raise ConfigError("--fail-under needs a loss validator step (such as validate.loss) in the pipeline")
    retention = loss.retention
    if retention < threshold:
        print(f"compactor-run: quality gate failed: retention {retention:.3f} < {threshold:.3f} "
              f"(level {loss.level})", file=sys.stderr)
        return 1
    return 0


def explain(context: Context) -> str:
    """Why each chunk was kept or dropped: its scores and the features behind them."""
    decisions: dict[str, str] = {}
    for report in context.reports:
        decisions.update(report.details.get("decisions", {}))
    kept = {cid for s in context.segments for cid in s.chunk_ids}
    lines = [f"{len(context.chunks)} chunks, {len(kept)} kept; budget "
             f"{context.resolved_budget()}, output {context.output_tokens} tokens"]
    for chunk in context.chunks:
        decision = decisions.get(chunk.id, "kept" if chunk.id in kept else "dropped")
        scores = " ".join(f"{score_label(k)}={v:.3f}" for k, v in sorted(chunk.scores.items()))
        preview = chunk.text[:70].replace("\n", " ").strip()
        lines.append(f"\n{chunk.id}  {decision}  tokens={chunk.tokens}  {scores}")
        lines.append(f"    {preview!r}")
        if chunk.labels:
            lines.append(f"    labels: type={chunk.labels.get('type')} "
                         f"confidence={chunk.labels.get('confidence')} "
                         f"keywords={list(chunk.labels.get('keywords', []))}")
        for name, features in sorted(chunk.features.items()):
            shown = ", ".join(f"{k}={v}" for k, v in features.items() if v not in (None, [], 0))
            lines.append(f"    {name}: {shown or '-'}")
    return "\n".join(lines)


def report_dict(context: Context) -> dict[str, object]:
    """The step reports of a run, as JSON-ready data."""
    return {
        "input_tokens": inputs.input_tokens if (inputs := context.state.get(RunInputs)) else None,
        "output_tokens": context.output_tokens,
        "budget": context.resolved_budget(),
        "steps": [
            {"step": r.step, "stage": r.stage, "tokens_in": r.tokens_in,
             "tokens_out": r.tokens_out, "seconds": round(r.seconds, 6), "skipped": r.skipped,
             "details": dict(r.details), "warnings": list(r.warnings)}
            for r in context.reports
        ],
    }


def write_atomic(path: Path, text: str) -> None:
    """Write an output file without ever leaving it half-written, and without breaking what the user
    pointed at: a new file or a regular file with one link is written to a temporary file beside it
    and renamed over it; anything else (a device such as /dev/null, a FIFO, a file with several hard
    links) is written straight into, so /dev/null and pipes work and hard links stay linked."""
    path = path.resolve()
    if not path.parent.is_dir():
        raise ConfigError(f"cannot write {path}: the folder {path.parent} does not exist")
    try:
        info: os.stat_result | None = path.stat()
    except FileNotFoundError:
        info = None
    except OSError as exc:
        raise ConfigError(f"cannot write {path}: {exc.strerror}") from None
    if info is not None and stat.S_ISDIR(info.st_mode):
        raise ConfigError(f"cannot write {path}: it is a folder")
    if info is not None and not (stat.S_ISREG(info.st_mode) and info.st_nlink == 1):
        _write_into(path, text)
    else:
        _write_replacing(path, text, None if info is None else info.st_mode & 0o7777)


def _write_into(path: Path, text: str) -> None:
    """Open the existing file for writing and write: the file itself stays (a FIFO blocks until
    someone reads it, as a shell redirection would)."""
    try:
        with path.open("w", encoding="utf-8") as handle:
            handle.write(text)
    except OSError as exc:
        raise ConfigError(f"cannot write {path}: {exc.strerror or exc}") from None


def _write_replacing(path: Path, text: str, mode: int | None) -> None:
    """A temporary file in the same folder renamed over `path`: readers see the old or the new text."""
    if mode is None:  # a new file gets the umask's mode (mkstemp would give 0600); a replaced one its own
        umask = os.umask(0)
        os.umask(umask)
        mode = 0o666 & ~umask
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    except OSError as exc:
        raise ConfigError(f"cannot write {path}: {exc.strerror}") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def list_plugins() -> str:
    """One block per component: name, stage, version, distribution, parameters (with their bounds),
    then what each declared parameter is for."""
    registry = build_registry()
    registry.load_all()  # a listing shows classes and parameters: a module that fails shows as broken
    lines = []
    for name in sorted(registry.components):
        info = registry.components[name]
        params = ", ".join(str(p) for p in info.cls.parameters()) or "-"
        doc = (info.cls.__doc__ or "").strip().splitlines()
        lines.append(f"{name}  [{info.stage}]  v{info.cls.version}  "
                     f"from {info.distribution} {info.dist_version}")
        if doc:
            lines.append(f"    {doc[0]}")
        lines.append(f"    parameters: {params}")
        lines.extend(f"      {p.name}: {p.doc}" for p in info.cls.parameters() if p.doc)
    for broken in registry.broken:
        lines.append(f"BROKEN {broken}")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
