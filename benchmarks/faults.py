"""The fault suite: `compactor-run` attacked with bad inputs, hostile pipeline files, wrong options,
credentials it must not show, special files it must not replace and damaged stores it must not write.

Each case runs the CLI in this process (`compactor.ops.cli.main`, stdin/stdout/stderr redirected,
the environment set per case) and is counted against what must never happen:

* internal error: "internal error" or a traceback on stderr, or an exit code other than 0, 1, 2 (exit 1
  only for an empty result or a failed quality gate);
* hang: a case over ``--limit`` seconds (default 35: the LLM deadline of 30 s plus a margin); a case
  that has not returned after twice that stops the suite with every thread's traceback (exit 1), so a
  true hang fails the run instead of stalling it;
* key leak: any of the keys (environment, literal in a file, ``${VAR}``, inside a URL) in stdout,
  stderr or a written report;
* special file replaced: a FIFO, ``/dev/null`` or a hard-linked file whose inode or type changed;
* damaged store written: a store with a corrupted page whose bytes changed.

    python benchmarks/faults.py [--limit 35] [--quick]

Exits 1 when any count is not zero.
"""

from __future__ import annotations

import argparse
import contextlib
import faulthandler
import io
import json
import os
import sqlite3
import stat
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from compactor.ops.cli import main as cli_main

ENV_KEY = "sk-envLEAK0123456789abcdef"
FILE_KEY = "sk-fileLEAK0123456789abcdef"
VAR_KEY = "sk-varLEAK0123456789abcdef"
URL_KEY = "urlLEAK0123456789abcdef"
KEYS = (ENV_KEY, FILE_KEY, VAR_KEY, URL_KEY)
TEXT = (
    "The Orion probe reached lunar orbit on 4 March 2031 after a 96-hour transfer. It carried four "
    "cameras and a radar sounder built in Toulouse. Mission control reported 12 anomalies, all cleared. "
)
CONVERSATION = [
    {"role": "system", "content": "You are a coding agent."},
    {"role": "user", "content": "Fix the failing test in parser.py; keep the API."},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "run", "arguments": '{"cmd": "pytest"}'}}
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "FAILED test_parse_dates - ValueError: day 31 " * 30},
    {"role": "assistant", "content": "The date parser rejects day 31; fixing parse_day in parser.py."},
]
PIPELINES = ("generic", "qa", "conversation", "deep-search", "transcripts", "topics", "search-results")


@dataclass
class Tally:
    runs: int = 0
    failures: Counter[str] = field(default_factory=Counter)
    examples: dict[str, list[str]] = field(default_factory=dict)

    def fail(self, kind: str, case: str) -> None:
        self.failures[kind] += 1
        self.examples.setdefault(kind, [])
        if len(self.examples[kind]) < 5:
            self.examples[kind].append(case)


@contextlib.contextmanager
def environment(values: dict[str, str]) -> Iterator[None]:
    saved = dict(os.environ)
    os.environ.update(values)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


#: Seconds after which a case counts as a hang (`--limit`).
HANG_LIMIT = [35.0]


def run(
    argv: Sequence[str], stdin: bytes = b"", env: dict[str, str] | None = None
) -> tuple[int, str, str, float]:
    """Exit code, stdout, stderr and seconds of one in-process CLI run."""
    out, err = (
        io.TextIOWrapper(io.BytesIO(), encoding="utf-8"),
        io.TextIOWrapper(io.BytesIO(), encoding="utf-8"),
    )
    saved = sys.stdin, sys.stdout, sys.stderr
    sys.stdin = io.TextIOWrapper(io.BytesIO(stdin), encoding="utf-8")
    sys.stdout, sys.stderr = out, err
    started = time.perf_counter()
    # a watchdog thread outside the interpreter: it fires even inside a C loop holding the GIL
    faulthandler.dump_traceback_later(2 * HANG_LIMIT[0], exit=True, file=sys.__stderr__)
    try:
        with environment(env or {}):
            try:
                code = cli_main(list(argv))
            except SystemExit as exc:  # argparse
                code = int(exc.code or 0)
    finally:
        faulthandler.cancel_dump_traceback_later()
        sys.stdin, sys.stdout, sys.stderr = saved
    seconds = time.perf_counter() - started
    out.flush()
    err.flush()
    return code, _text(out), _text(err), seconds


def _text(stream: io.TextIOWrapper) -> str:
    buffer = stream.buffer
    assert isinstance(buffer, io.BytesIO)
    return buffer.getvalue().decode("utf-8", "replace")


def judge(
    tally: Tally, case: str, result: tuple[int, str, str, float], limit: float, extra_text: str = ""
) -> None:
    code, out, err, seconds = result
    tally.runs += 1
    if "internal error" in err or "Traceback" in err or code not in (0, 1, 2):
        tally.fail("internal error", f"{case}: {err.strip().splitlines()[-1][:160] if err.strip() else code}")
    elif code == 1 and "the result is empty" not in err and "retention" not in err:
        tally.fail("exit 1 without cause", f"{case}: {err.strip()[:160]}")
    if seconds > limit:
        tally.fail("hang", f"{case}: {seconds:.1f} s")
    seen = out + err + extra_text
    if any(key in seen for key in KEYS):
        tally.fail("key leak", case)


# -- the cases ------------------------------------------------------------------------------------


def input_files(folder: Path) -> dict[str, bytes]:
    records = [
        {"text": "hi", "budget": "x"},
        {"text": "hi", "query": 5},
        {"text": None},
        {"messages": [None]},
        {"messages": {}},
        {"messages": [{"role": 5, "content": "hi"}]},
        {"question": "q", "contexts": [5]},
        {"messages": [{"role": "assistant", "tool_calls": [{"id": "a", "function": "x"}]}]},
        {"messages": [{"role": "user", "content": [{"type": "text", "text": 5}]}]},
        [1, 2],
        "str",
        None,
    ]
    files: dict[str, bytes] = {
        "empty.txt": b"",
        "binary.bin": bytes(range(256)) * 10,
        "bad-utf8.txt": b"hello \xff\xfe world. " * 50,
        "nul.txt": b"a\x00b\x00" * 100,
        "deep.json": b"[" * 5000 + b"]" * 5000,
        "number.json": b"42",
        "string.json": b'"just a string"',
        "surrogate.jsonl": b'{"text": "\\ud800 lone"}\n',
        "huge-number.json": b'{"text": "x", "budget": 1e999}\n',
        "one-token.txt": b"a" * 300_000,
        "nested-html.html": b"<html><body>"
        + b"<div>" * 3000
        + b"text"
        + b"</div>" * 3000
        + b"</body></html>",
        "broken-html.html": b"<html><script>" + b"x" * 1000 + b"<body><<<>>>&#99999999;&#xD800; text",
        "bad.srt": b"1\n00:00:01,000 --> 00:00:00,000\nhello\n\n2\nbad --> time\nworld\n",
        "bad.vtt": b"WEBVTT\n\n99:99:99.999 --> 00:00:01.000\nhi\n",
        "ctrl.txt": "\u202e\u200b\ufeff text".encode(),
        "conversation.json": json.dumps(CONVERSATION).encode(),
        "text.txt": TEXT.encode() * 20,
    }
    for k, record in enumerate(records):
        files[f"record-{k}.jsonl"] = json.dumps(record).encode() + b"\n"
        files[f"record-{k}.json"] = json.dumps([record]).encode()
    for name, data in files.items():
        (folder / name).write_bytes(data)
    return files


def _file(header: str) -> str:
    """A one-step pipeline file with `header` before its steps."""
    return f"version: 1\nname: x\n{header}\nsteps:\n  - use: clean.normalize\n"


PIPELINE_FILES = {
    "empty": "",
    "list": "- a\n- b\n",
    "scalar": "hello",
    "tab": "version: 1\n\tname: x\n",
    "steps-string": "version: 1\nname: x\nsteps: abc\n",
    "use-number": "version: 1\nname: x\nsteps:\n  - use: 5\n",
    "with-list": "version: 1\nname: x\nsteps:\n  - use: clean.normalize\n    with: [1]\n",
    "budget-inf": "version: 1\nname: x\nbudget: {max_tokens: .inf}\nsteps:\n  - use: clean.normalize\n",
    "tokenizer": "version: 1\nname: x\ntokenizer: nope\nsteps:\n  - use: clean.normalize\n",
    "llm-string": "version: 1\nname: x\nllm: gpt\nsteps:\n  - use: clean.normalize\n",
    "api-key-list": _file(f"llm: {{api_key: [{FILE_KEY}]}}"),
    "api-key-map": _file(f"llm: {{api_key: {{k: {FILE_KEY}}}}}"),
    "when-import": 'version: 1\nname: x\nsteps:\n  - use: clean.normalize\n    when: "import os"\n',
    "when-dunder": 'version: 1\nname: x\nsteps:\n  - use: clean.normalize\n    when: "().__class__"\n',
    "when-power": 'version: 1\nname: x\nsteps:\n  - use: clean.normalize\n    when: "9**9**9 > 1"\n',
    "when-nested": "version: 1\nname: x\nsteps:\n  - use: clean.normalize\n"
    '    when: "[[[[1]*99]*99]*99]*99 == [[[[1]*99]*99]*99]*99"\n',
    "when-string": "version: 1\nname: x\nsteps:\n  - use: clean.normalize\n    when: \"'a'*10**9 == 'b'\"\n",
    "merge-key": "base: &b {use: clean.normalize}\nversion: 1\nname: x\nsteps:\n  - <<: *b\n",
    "python-tag": "version: 1\nname: !!python/object:os.system x\nsteps:\n  - use: clean.normalize\n",
    "nul": "version: 1\nname: x\x00\nsteps:\n  - use: clean.normalize\n",
    "store-absolute": _file("store: {path: /tmp/elsewhere.sqlite}"),
    "store-parent": "version: 1\nname: x\nstore: {path: ../up.sqlite}\nsteps:\n  - use: clean.normalize\n",
    "billion-laughs": "a: &a [x,x,x,x,x,x,x,x,x]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\n"
    "c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\n"
    "d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]\ne: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]\nversion: 1\n",
    "prompt-outside": "version: 1\nname: x\nsteps:\n  - use: compress.fact_centric\n"
    "    with: {prompt: /etc/passwd}\n",
    "label-duplicate": "version: 1\nname: x\nsteps:\n  - use: clean.normalize\n    label: a\n"
    "  - use: clean.html\n    label: a\n",
}


def llm_pipelines(folder: Path) -> dict[str, Path]:
    """LLM pipelines whose endpoint is a closed local port: every call fails and is retried, so the
    retry warnings and errors are where a key would show."""
    tail = "steps:\n  - use: chunk.sentences\n  - use: compress.select\n  - use: llm.fallback\n"
    bodies = {
        "literal": f"version: 1\nllm: {{model: m, base_url: 'http://127.0.0.1:9/v1', api_key: {FILE_KEY}, "
        f"max_retries: 1, deadline: 3}}\n{tail}",
        "variable": "version: 1\nllm: {model: m, base_url: 'http://127.0.0.1:9/v1', api_key: '${MY_KEY}', "
        f"max_retries: 1, deadline: 3}}\n{tail}",
        "url-userinfo": f"version: 1\nllm: {{model: m, base_url: 'http://user:{URL_KEY}@127.0.0.1:9/v1', "
        f"max_retries: 1, deadline: 3}}\n{tail}",
        "url-query": f"version: 1\nllm: {{model: m, base_url: 'http://127.0.0.1:9/v1?api_key={URL_KEY}', "
        f"max_retries: 1, deadline: 3}}\n{tail}",
        "environment": f"version: 1\nllm: {{model: m, max_retries: 1, deadline: 3}}\n{tail}",
        "foreign-host": f"version: 1\nllm: {{model: m, base_url: 'http://127.0.0.2:9/v1', max_retries: 1, "
        f"deadline: 3}}\n{tail}",
    }
    paths = {}
    for name, body in bodies.items():
        paths[name] = folder / f"llm-{name}.yaml"
        paths[name].write_text(body)
    return paths


def special_targets(folder: Path) -> Iterator[tuple[str, Path, Callable[[], bool]]]:
    """(name, path, still-the-same check) for a FIFO (read by a thread), /dev/null and a hard link."""
    fifo = folder / "out.fifo"
    if fifo.exists():
        fifo.unlink()
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()), daemon=True)
    reader.start()
    yield "fifo", fifo, lambda: stat.S_ISFIFO(fifo.stat().st_mode)
    reader.join(10)
    null = Path(os.devnull)
    inode = null.stat().st_ino
    yield "/dev/null", null, lambda: null.stat().st_ino == inode and stat.S_ISCHR(null.stat().st_mode)
    first = folder / "linked.txt"
    first.write_text("old")
    second = folder / "link.txt"
    if second.exists():
        second.unlink()
    os.link(first, second)
    yield (
        "hard link",
        first,
        lambda: first.stat().st_ino == second.stat().st_ino and second.read_text() == first.read_text(),
    )


def damaged_store(folder: Path) -> Path:
    path = folder / "damaged.sqlite"
    if path.exists():
        path.unlink()
    with contextlib.closing(sqlite3.connect(path)) as db:
        db.execute("create table t (x text)")
        db.executemany("insert into t values (?)", [(f"row {i} " * 40,) for i in range(2000)])
        db.commit()
    data = bytearray(path.read_bytes())
    middle = len(data) // 2 - len(data) // 2 % 4096
    data[middle : middle + 4096] = os.urandom(4096)
    path.write_bytes(bytes(data))
    return path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--limit", type=float, default=35.0, help="seconds after which a case is a hang")
    parser.add_argument("--quick", action="store_true", help="inputs through two pipelines only")
    args = parser.parse_args()
    HANG_LIMIT[0] = args.limit
    tally = Tally()
    started = time.perf_counter()
    base_env = {"OPENAI_API_KEY": ENV_KEY, "MY_KEY": VAR_KEY, "OPENAI_BASE_URL": "http://127.0.0.1:9/v1"}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        inputs = folder / "inputs"
        inputs.mkdir()
        files = input_files(inputs)
        text = str(inputs / "text.txt")
        conversation = str(inputs / "conversation.json")
        # bad inputs through every shipped pipeline
        for pipeline in PIPELINES[:2] if args.quick else PIPELINES:
            for name in files:
                for shape in ([], ["-b", "40"], ["-f", "json"], ["-f", "messages", "-b", "300"]):
                    judge(
                        tally,
                        f"{pipeline} {name} {' '.join(shape)}",
                        run([pipeline, str(inputs / name), "-q", "orbit", *shape], env=base_env),
                        args.limit,
                    )
            judge(
                tally,
                f"{pipeline} stdin",
                run([pipeline, "-"], stdin=TEXT.encode(), env=base_env),
                args.limit,
            )
        # hostile and broken pipeline files
        for name, body in PIPELINE_FILES.items():
            path = folder / f"{name}.yaml"
            path.write_text(body)
            for extra in ([], ["--check"], ["--print-config"]):
                judge(
                    tally,
                    f"pipeline {name} {extra}",
                    run([str(path), text, *extra], env=base_env),
                    args.limit,
                )
        # wrong options
        options = [
            ["-b", "0"],
            ["-b", "-5"],
            ["-b", "nan"],
            ["--fail-under", "2"],
            ["--fail-under", "nan"],
            ["--target-ratio", "2"],
            ["--keep-last", "-1"],
            ["--keep-files", "-1"],
            ["--role", "nobody"],
            ["--expand", "x"],
            ["--expand", "x", "--store", str(folder / "none.sqlite")],
            ["--report-context"],
            ["--strategy", "zzz"],
            ["--executor", "dask"],
            ["--workers", "0"],
            ["-o", str(folder / "missing" / "x.txt")],
            ["-o", str(folder)],
            ["--report", str(folder)],
            ["--metrics-file", str(folder)],
            ["--out", str(folder)],
            ["--scheduler", "tcp://127.0.0.1:9"],
        ]
        for pipeline in PIPELINES:
            source = conversation if pipeline == "conversation" else text
            for option in options:
                judge(
                    tally,
                    f"{pipeline} {' '.join(option)}",
                    run([pipeline, source, *option], env=base_env),
                    args.limit,
                )
        # credentials: every face that could show a key
        for name, path in llm_pipelines(folder).items():
            for extra in (
                [],
                ["--check"],
                ["--print-config"],
                ["-b", "20", "--report", str(folder / "r.json")],
                ["-b", "20", "--report", str(folder / "r.html")],
                ["-b", "20", "-f", "json"],
            ):
                for trace in ("0", "1"):
                    for report in folder.glob("r.*"):
                        report.unlink()
                    result = run([str(path), text, *extra], env={**base_env, "COMPACTOR_TRACE_HOOKS": trace})
                    written = "".join(p.read_text(errors="replace") for p in folder.glob("r.*"))
                    judge(tally, f"keys {name} {extra} trace={trace}", result, args.limit, written)
        # special files as outputs
        for option in ("-o", "--report", "--metrics-file"):
            for name, target, same in special_targets(folder):
                extra = [option, str(target)]
                if option == "--metrics-file":
                    extra += ["--store", str(folder / "metrics.sqlite")]
                judge(
                    tally,
                    f"special {option} {name}",
                    run(["generic", text, *extra], env=base_env),
                    args.limit,
                )
                if not same():
                    tally.fail("special file replaced", f"{option} {name}")
        # damaged stores are never written
        for argv in (
            ["deep-search", text, "--session", "s"],
            ["conversation", conversation, "--session", "s"],
            ["generic", text, "--stats"],
        ):
            store = damaged_store(folder)
            before = store.read_bytes()
            judge(
                tally,
                f"damaged store {argv[0]}",
                run([*argv, "--store", str(store)], env=base_env),
                args.limit,
            )
            if store.read_bytes() != before:
                tally.fail("damaged store written", argv[0])
    print(f"{tally.runs} runs in {time.perf_counter() - started:.0f} s")
    for kind in (
        "internal error",
        "exit 1 without cause",
        "hang",
        "key leak",
        "special file replaced",
        "damaged store written",
    ):
        print(f"{kind:24s} {tally.failures[kind]}")
        for example in tally.examples.get(kind, []):
            print(f"    {example}")
    return 1 if sum(tally.failures.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
