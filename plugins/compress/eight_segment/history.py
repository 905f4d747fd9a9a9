"""What an agent's history contains, read by rules: people, actions, files, errors, tasks, identifiers.

`History` reads a message list once (who spoke, which messages are real user turns and which are
tool output, the commands and tool calls, the files they read and wrote, the errors they hit) and
the `*_items` functions turn that into candidate lines for the 8 sections of `compress.eight_segment`.
Every candidate names the messages it came from, so the summary can cite them and a reader can expand
them back to the originals. Works on the three wire formats of `compactor.formats.messages`, on coding agents
that act through text commands (```bash blocks, SWE-agent's `edit ... end_of_edit`, aider's
SEARCH/REPLACE blocks) and on Chinese as well as English text.
"""

from __future__ import annotations

import functools
import importlib.resources
import json
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import cast

import regex

from compactor.document import Message
from compactor.formats.clearing import is_tiered, output_indices
from compactor.formats.compaction import SUMMARY_MARK
from compactor.formats.messages import ToolCall, answers, calls, speaker
from compactor.text.sentences import split_sentences
from compactor.text.terms import stopwords, terms

# -- patterns --------------------------------------------------------------------------------------

_PATHISH = re.compile(r"(?<![\w/.:@-])[\w./@+-]*\w\.([A-Za-z]{1,10})(?![\w/-])")
_EXT = (r"py|pyx|pyi|ipynb|js|mjs|cjs|jsx|ts|tsx|json|jsonl|ya?ml|toml|cfg|ini|conf|md|rst|txt|c|h|cc|"
        r"cpp|hpp|go|rs|java|kt|rb|php|sh|bash|html?|css|scss|sql|xml|csv|lock|gradle|swift|cs|vue|"
        r"ecsv|fits|env|proto|dockerfile|tf|lua|pl|r|scala|dart|ex|exs|erl|hs|ml|zig")
PATH = regex.compile(
    rf"(?<![\w/.:@-])(?:\.{{1,2}}/|/)?(?:[\w@+-][\w.@+-]*/)*[\w+-][\w.+-]*\.(?:{_EXT})(?![\w/-])",
    regex.IGNORECASE)
_DOT_LETTER = re.compile(r"\.[A-Za-z]")
_EXTENSIONS = frozenset(e for e in _EXT.split("|") if "?" not in e) | {"yaml", "yml", "htm", "html"}


def find_paths(text: str) -> list[tuple[int, str]]:
    """(offset, path) of every file path in a text: a cheap scan for `name.ext` words, then the
    extension checked against the known ones (faster than one big pattern on long tool output)."""
    found = []
    end = 0
    while (hit := _DOT_LETTER.search(text, end)) is not None:
        # a path holds ".x" and no line break: scan only the lines that have one
        start = text.rfind("\n", 0, hit.start()) + 1
        end = text.find("\n", hit.start())
        end = len(text) if end < 0 else end
        for match in _PATHISH.finditer(text, start, end):
            if match.group(1).lower() in _EXTENSIONS and "//" not in match.group(0):
                found.append((match.start(), match.group(0)))
    return found


_FENCE = regex.compile(r"```[^\n`]*\n(.*?)(?:```|\Z)", regex.DOTALL)
_XML_COMMAND = regex.compile(r"<command>\s*(.*?)\s*</command>", regex.DOTALL)
_RETURNCODE = re.compile(r"<returncode>\s*(-?\d+)\s*</returncode>")
_OBSERVATION = regex.compile(
    r"^\s*(?:<returncode>|<output>|observation\s*:|\[File: |tool (?:output|result)\s*:|"
    r"exit code\s*:?\s*-?\d|file updated\.|\$ )|\(Open file: [^\n]*\)\s*\n\(Current directory: |"
    r"bash-\$\s*$", regex.IGNORECASE | regex.MULTILINE)
#: Literals of which every `_ERROR_LINE` match (and a traceback) holds one.
_ERROR_WORDS = ("Error", "Exception", "Traceback", "error", "fatal", "failed", "failure", "FAILED",
                "ERROR", "command not found", "No such file or directory", "Segmentation fault",
                "错误", "失败", "异常", "报错")
_OPEN_FILE = re.compile(r"\(Open file: ([^)\n]+)\)|\[File: ([^\s(\]]+)")
_ERROR_LINE = regex.compile(
    r"\b[A-Z]\w*(?:Error|Exception)\b(?::|$)|\bTraceback \(most recent call last\)|"
    r"\b(?:error|fatal|failed|failure)\b\s*[:!]|\bFAILED\b|\bERROR\b|command not found|"
    r"No such file or directory|Segmentation fault|错误|失败|异常|报错", regex.MULTILINE)
_TRACE_LAST = regex.compile(r"^(?:[\w.]+\.)?[A-Z]\w*(?:Error|Exception|Exit|Interrupt)\b.*$", regex.MULTILINE)
_PASS = regex.compile(r"\b(?:passed|succeeded|success(?:ful(?:ly)?)?|all tests pass|OK\b|works?\b|"
                      r"fixed|resolved)|成功|通过|已修复", regex.IGNORECASE)
_WRITE_TOOL = regex.compile(r"(?:^|_)(?:edit|write|create|insert|replace|str_replace|patch|apply|"
                            r"save|append|update_file|modify)", regex.IGNORECASE)
_PATH_KEYS = ("path", "file", "filename", "file_path", "filepath", "target_file", "target")
_BODY_KEYS = ("new_str", "content", "replacement_text", "file_text", "text", "code", "patch", "diff",
              "new_content", "insert_text")
_SHELL_WRITES = (
    r"(?:sed\s+-i\S*|perl\s+-p?i\S*)\s+(?:-e\s+)?(?:'[^']*'|\"[^\"]*\"|\S+)(?:\s+-e\s+(?:'[^']*'|\"[^\"]*\"))*"
    r"\s+(?P<path>[^\s;&|>]+)",
    r"(?:>>?|\btee(?:\s+-a)?)\s*(?P<path2>[^\s;&|<>'\"]+)",
    r"\bopen\(\s*['\"](?P<path3>[^'\"]+)['\"]\s*,\s*['\"][wa]",
    r"(?P<path4>[\w./-]+)['\"]?\)\.write_text\(",
    r"^(?:create|touch)\s+(?P<path5>\S+)")
_SHELL_WRITE = re.compile("|".join(_SHELL_WRITES), re.MULTILINE)
#: The same without `.write_text(` (that alternative tries every word start: most of the scan's time),
#: for the commands without one, where it cannot match.
_SHELL_WRITE_PLAIN = re.compile("|".join(p for p in _SHELL_WRITES if "write_text" not in p), re.MULTILINE)
_HEREDOC = re.compile(r"<<-?\s*['\"]?(\w+)['\"]?[^\n]*\n(.*?)\n\1\b", re.DOTALL)
_SWE_EDIT = re.compile(r"^edit\s+\d+:\d+\s*\n(.*?)\nend_of_edit", re.DOTALL | re.MULTILINE)
_SEARCH_REPLACE = regex.compile(
    r"(?:^|\n)([^\n`]*?\S)\s*\n```[^\n]*\n<<<<<<< SEARCH\n.*?\n=======\n(.*?)\n>>>>>>> REPLACE", regex.DOTALL)
_DIFF_FILE = re.compile(r"^\+\+\+ (?:b/)?(\S+)", re.MULTILINE)
_READ_COMMAND = regex.compile(r"^\s*(?:cat|nl|head|tail|less|more|open|view|sed\s+-n|grep|rg|bat)\b")

_TASK_LINE = regex.compile(
    r"^\s*(?:[-*]\s*\[ \]\s*(?P<box>.+)|(?:TODO|FIXME)\b[:\s]*(?P<todo>.+)|"
    r"(?:[-*]|\d+[.)])\s+(?P<step>.+))$", regex.MULTILINE)
_PLAN_HEAD = regex.compile(r"\b(?:plan|next steps|todo|to-do|remaining (?:steps|tasks|work)|steps)\s*:|"
                           r"(?:计划|步骤|待办|下一步)[:：]", regex.IGNORECASE)
_DONE_BOX = regex.compile(r"^\s*[-*]\s*\[[xX]\]\s*(.+)$", regex.MULTILINE)
_INTENT = regex.compile(
    r"\b(?:next,? (?:I|we)(?:'ll| will| need| should)|(?:I|we) (?:still )?need to|(?:I|we)'ll now|"
    r"(?:I|we) (?:will|should) (?:now |then |also )?|remaining(?: steps?)?:|still (?:need|have) to|"
    r"let's|plan:|then (?:I|we)(?:'ll| will))|"
    r"接下来|下一步|还需要|待办|计划|然后(?:我|我们)?(?:会|要|将)",
    regex.IGNORECASE)
_DONE_WORDS = regex.compile(r"\b(?:done|completed?|finished|fixed|implemented|added|updated|resolved|"
                            r"verified|passes|passed)\b|已完成|完成了|已修复|已经", regex.IGNORECASE)
_DECISION = regex.compile(
    r"\b(?:the (?:root )?cause|the (?:issue|problem|bug) (?:is|was)|because|so (?:I|we)|therefore|"
    r"(?:I|we) (?:decided|chose|will use|should use)|instead|the fix|this means|turns out|it seems|"
    r"found that|the reason|works? because|approach)\b|原因|因为|所以|决定|改为|问题(?:是|在于)|发现",
    regex.IGNORECASE)
_REQUEST = regex.compile(
    r"\b(?:need|want|would like|require|should|must|please|make|implement|create|build|fix|add|"
    r"change|remove|update|write|ensure|can you|could you)\b|请|需要|希望|要求|必须|帮我|实现|修复",
    regex.IGNORECASE)
#: Identifier shapes, one group each: a code span, a date, an amount, an email, a name or symbol.
_IDENT_SHAPES = (
    r"`([^`\n]{2,48})`|"
    r"\b(\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2})?)?)\b|"
    r"(\$\s?\d[\d,]*(?:\.\d+)?|\b\d[\d,]*(?:\.\d+)?\s?(?:USD|EUR|GBP|元|美元))|"
    r"\b([\w.+-]+@[\w-]+\.[\w.-]+)\b|"
    r"\b([A-Za-z][A-Za-z0-9]*(?:_[A-Za-z0-9]+)+|[A-Z][a-z0-9]+(?:[A-Z][A-Za-z0-9]*)+|"
    r"[A-Za-z]+\d+[A-Za-z0-9]*|\d+[A-Za-z]+[A-Za-z0-9]*|[A-Za-z_]\w*(?:\.[A-Za-z_]\w*){1,4}(?:\(\))?|"
    r"[A-Z]{2,}[A-Z0-9]*)\b")
#: The shapes behind two lookaheads that change no match, only skip the places where none can
#: start: every shape starts with ` or $, or at a word boundary; and a plain word (`word`, `Word`)
#: followed by no character that could extend it into a shape (a word character, `.`, `+`, `@`,
#: `-`) is none of them. Most of a text is such words: the scan takes about half the time.
_IDENT = re.compile(rf"(?=[`$]|\b[\w.+-])(?![A-Z]?[a-z]+(?![\w.+@-]))(?:{_IDENT_SHAPES})")
_NUMBER = re.compile(r"[\d.,:+ -]+")
#: A number and nothing else (a count, an amount, a line or issue number): no term without its label.
#: Dates, times and versions have a shape of their own and are not bare.
_BARE_NUMBER = re.compile(r"[+-]?\d[\d,]*(?:\.\d+)?%?")
#: A JSON key a bare number is shown under (`amount=150`): a name, not a record's id.
_LABEL_KEY = re.compile(r"[A-Za-z_][A-Za-z_-]{0,30}")
_WORDS = regex.compile(r"[\w@.+-]*\w")
WORD_RUN = regex.compile(r"\w+")
_STOP_VALUES = frozenset({"true", "false", "none", "null", "yes", "no", "ok", "the", "and", "available",
                          "error", "success", "active", "pending"})
_PROSE_NUMBER = regex.compile(r"(?<![\w.$:-])(?<!\d,)\d{3,}(?:[.,]\d+)?(?![\w%.:-]|\.\d)")
_CODE_SHAPE = regex.compile(r"(?=.*\d)(?=.*[A-Za-z])|_|^\d{4}-\d{2}-\d{2}|@")
_COMMON_DOTTED = frozenset({"e.g", "i.e", "etc", "vs", "a.m", "p.m"})
_COMMON_CAPS = frozenset({"OK", "THOUGHT", "DISCUSSION", "COMMAND", "ISSUE", "PR", "API", "URL", "ID", "EST",
                          "UTC", "JSON", "HTML", "HTTP", "HTTPS", "NOTE", "TODO", "FIXME", "IMPORTANT",
                          "USA", "I", "AM", "PM", "EOF", "END", "CLI", "SETTING", "INSTRUCTIONS"})

# -- the reading -----------------------------------------------------------------------------------


@dataclass(slots=True)
class Action:
    """One thing an assistant did: a structured tool call or a command in its text."""

    index: int
    name: str
    text: str
    call: ToolCall | None = None
    writes: list[str] = field(default_factory=list)
    snippets: dict[str, str] = field(default_factory=dict)
    reads: list[str] = field(default_factory=list)
    result: int | None = None
    failed: bool = False
    error: str | None = None


class History:
    """One pass over a message list; everything the section extractors need, indexed by message."""

    def __init__(self, messages: Sequence[Message]) -> None:
        self.messages = list(messages)
        n = len(self.messages)
        self.kinds: list[str] = []
        for i in range(n):  # in order: a message's kind may depend on the one before
            self.kinds.append(self._kind(i))
        self.speakers = [speaker(m) for m in self.messages]
        self.actions: list[Action] = []
        self.by_message: dict[int, list[Action]] = defaultdict(list)
        self.open_file: str | None = None
        #: Results computed once per history (identifier scores per range, ...).
        self.cache: dict[tuple[object, ...], object] = {}
        for i in range(n):
            self._read(i)
        speakers = {self.speakers[i] for i in range(n) if self.kinds[i] == "assistant"}
        #: Label speakers in section lines when several agents (or named users) share the history.
        self.multi_role = len(speakers) > 1 or any(m.name for m in self.messages if m.role == "user")

    # message kinds: system, user (a person), assistant, output (tool results and observations)
    def _kind(self, i: int) -> str:
        message = self.messages[i]
        if message.role in ("system", "developer"):
            return "system"
        if is_summary(message.content):
            return "summary"  # an earlier compaction: its sections are carried, not quoted
        if answers(message) is not None or is_tiered(message):  # a result, or one cleared to a stub
            return "output"
        if message.role == "user":
            if message.raw.get("is_demo") if message.raw else False:
                return "output"
            # an observation answers an agent's command just before it, or one an earlier summary
            # replaced (a system prompt's examples are no command: the task after it is a request)
            before = self.kinds[i - 1] if i > 0 else None
            if ((before == "summary" or (before == "assistant" and self._acted(i - 1)))
                    and _OBSERVATION.search(message.content[:3000])):
                return "output"
            return "user"
        return "assistant"  # assistants, named agents, and any other role that acts

    def _acted(self, i: int) -> bool:
        message = self.messages[i]
        return bool(calls(message)) or "```" in message.content or "<command>" in message.content

    def label(self, i: int) -> str:
        """`[coder] ` in multi-role histories, else nothing."""
        return f"[{self.speakers[i]}] " if self.multi_role else ""

    def _read(self, i: int) -> None:
        message = self.messages[i]
        kind = self.kinds[i]
        text = message.content
        for opened in _OPEN_FILE.finditer(text[-600:] if kind == "output" else ""):
            self.open_file = _clean_path(opened.group(1) or opened.group(2))
        if kind == "output":
            self._observe(i)
            return
        if kind != "assistant":
            return
        made = calls(message)
        for call in made:
            self._add(Action(i, call.name, f"{call.name}({_short_args(call)})", call=call),
                      call.arguments, call)
        if not made:
            for command in _commands(text):
                first = command.strip().split("\n", 1)[0]
                self._add(Action(i, first.split(" ", 1)[0][:40], first[:200]), command, None)
        if "<<<<<<< SEARCH\n" not in text:  # the block's literal: no scan of text without one
            return
        for match in _SEARCH_REPLACE.finditer(text):
            path = _clean_path(match.group(1).strip("`*: "))
            if PATH.fullmatch(path):
                self._note_write(i, path, match.group(2))

    def _add(self, action: Action, body: str, call: ToolCall | None) -> None:
        if call is not None:
            args = call.parsed()
            if isinstance(args, dict):
                path = next((str(args[k]) for k in _PATH_KEYS if isinstance(args.get(k), str)), None)
                snippet = next((str(args[k]) for k in _BODY_KEYS if isinstance(args.get(k), str)), None)
                if path is None and snippet is not None and self.open_file and _WRITE_TOOL.search(call.name):
                    path = self.open_file
                command = args.get("command") if isinstance(args.get("command"), str) else None
                if path and (_WRITE_TOOL.search(call.name) or (command and _WRITE_TOOL.search(command))):
                    action.writes.append(_clean_path(path))
                    if snippet:
                        action.snippets[_clean_path(path)] = snippet
                elif path:
                    action.reads.append(_clean_path(path))
                if command and not path:
                    self._shell(action, command)
            else:
                self._shell(action, str(args))
        else:
            self._shell(action, body)
        self.actions.append(action)
        self.by_message[action.index].append(action)

    def _shell(self, action: Action, command: str) -> None:
        writes = _SHELL_WRITE if ").write_text(" in command else _SHELL_WRITE_PLAIN
        for match in writes.finditer(command):
            path = next((g for g in match.groups() if g), None)
            if path and PATH.fullmatch(_clean_path(path)) and not path.startswith("/dev/"):
                action.writes.append(_clean_path(path))
        for match in _HEREDOC.finditer(command):
            before = command[:match.start()].rsplit("\n", 1)[-1]
            head = before + command[match.start():match.end()].split("\n", 1)[0]
            target = regex.search(r">\s*([^\s;&|<>'\"]+)", head)
            if target and PATH.fullmatch(_clean_path(target.group(1))):
                path = _clean_path(target.group(1))
                if path not in action.writes:
                    action.writes.append(path)
                action.snippets[path] = match.group(2)
        swe = _SWE_EDIT.search(command)
        if swe and self.open_file:
            action.writes.append(self.open_file)
            action.snippets[self.open_file] = swe.group(1)
        if _READ_COMMAND.match(command):
            action.reads.extend(_clean_path(p) for _, p in find_paths(command[:300]))
        action.writes = list(dict.fromkeys(action.writes))

    def _note_write(self, i: int, path: str, snippet: str) -> None:
        action = Action(i, "edit", f"edit {path}", writes=[path], snippets={path: snippet})
        self.actions.append(action)
        self.by_message[i].append(action)

    def _observe(self, i: int) -> None:
        """Attach a tool output to the action it answers and judge whether it failed."""
        text = self.messages[i].content
        target = self._answered(i)
        # error_summary's patterns all need one of _ERROR_WORDS (or a JSON body): most outputs of a
        # long history skip its slow scan
        error = (error_summary(text) if any(w in text for w in _ERROR_WORDS) or text.lstrip().startswith("{")
                 else None)
        code = _RETURNCODE.search(text[:200])
        failed = bool(error) or bool(code and code.group(1) != "0")
        if code and code.group(1) == "0" and error and "Traceback" not in text:
            failed = False
        if target is None:
            return
        target.result = i
        target.failed = failed
        target.error = error or (f"exit code {code.group(1)}" if failed and code else None)
        for path in _DIFF_FILE.findall(text) if "+++ " in text else ():
            path = _clean_path(path)
            if PATH.fullmatch(path):
                target.writes.append(path)

    def _answered(self, i: int) -> Action | None:
        """The action a tool output answers: the call with its id, else the first open structured
        call (or the last text command) of the nearest message that acted."""
        open_actions = [a for j in range(i - 1, max(-1, i - 6), -1) for a in self.by_message.get(j, ())
                        if a.result is None]
        for call_id in answers(self.messages[i]) or ():
            match = next((a for a in open_actions if a.call is not None and a.call.id == call_id), None)
            if call_id is not None and match is not None:
                return match
        if not open_actions:
            return None
        nearest = [a for a in open_actions if a.index == open_actions[0].index]
        structured = [a for a in nearest if a.call is not None]
        return structured[0] if structured else nearest[-1]

    # -- derived views -------------------------------------------------------------------------

    def user_turns(self, indices: Iterable[int]) -> list[int]:
        """Indices of real user messages (people, not tool output dressed as `user`)."""
        # `not isspace()`: whether `strip()` leaves text, without copying a long message to know
        return [i for i in indices if self.kinds[i] == "user" and self.messages[i].content
                and not self.messages[i].content.isspace()]


def _commands(text: str) -> list[str]:
    """Commands in an assistant's text: the fenced blocks (the last is usually the action)."""
    found = [m.group(1) for m in _FENCE.finditer(text)] if "```" in text else []
    if "<command>" in text:
        found += [m.group(1) for m in _XML_COMMAND.finditer(text)]
    return [c for c in found if c.strip()][-2:]


def _short_args(call: ToolCall, limit: int = 160) -> str:
    args = call.parsed()
    if isinstance(args, dict):
        parts = []
        for key, value in args.items():
            shown = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False,
                                                                    separators=(",", ":"))
            parts.append(f"{key}={shown}")
        text = ", ".join(parts)
    else:
        text = str(args)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _clean_path(path: str) -> str:
    path = path.strip().strip("'\"`,;:()[]")
    for prefix in ("./", "a/", "b/"):
        if path.startswith(prefix) and len(path) > len(prefix):
            path = path[len(prefix):]
    return path


_SPACE_RUN = regex.compile(r"\s*")


def first_error_line(text: str) -> regex.Match[str] | None:
    """`_ERROR_LINE.search(text)`, searching only the lines that hold one of `_ERROR_WORDS` (every
    match starts on the line of its word; a long output is mostly lines without one)."""
    upcoming = {word: at for word in _ERROR_WORDS if (at := text.find(word)) >= 0}
    while upcoming:
        at = min(upcoming.values())
        start = text.rfind("\n", 0, at) + 1
        end = text.find("\n", at)
        if end < 0:
            return _ERROR_LINE.search(text, start)
        # "error\n  :" matches too: the window reaches the first character after the line's end
        # and the whitespace that follows it
        found = _ERROR_LINE.search(text, start, min(len(text), _after_spaces(text, end) + 1))
        if found is not None:
            return found
        for word, where in list(upcoming.items()):
            if where <= end:
                following = text.find(word, end + 1)
                if following < 0:
                    del upcoming[word]
                else:
                    upcoming[word] = following
    return None


def error_summary(text: str) -> str | None:
    """The most telling error line of a tool output (a traceback's last line first), or None."""
    if "Traceback (most recent call last)" in text:
        tail = text[text.rindex("Traceback (most recent call last)"):]
        last = _TRACE_LAST.findall(tail)
        if last:
            return _trim(last[-1], 200)
    found = first_error_line(text)
    if found is None:
        stripped = text.strip()
        if stripped.startswith("{"):
            try:
                data = json.loads(stripped)
            except ValueError:
                return None
            if isinstance(data, dict) and data.get("error"):
                return _trim(f"error: {data['error']}", 200)
        return None
    line = _line_at(text, found.start(), found.end()).strip()
    benign = line.lower().startswith(("warning", "0 failed", "no errors"))
    if benign or regex.search(r"\b0 (?:errors|failed)\b", line):
        return None
    return _trim(line, 200)


def _line_at(text: str, start: int, end: int) -> str:
    """The whole line around a match."""
    return text[text.rfind("\n", 0, start) + 1: (text.find("\n", end) + 1 or len(text) + 1) - 1]


def _trim(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 1] + "…"


# -- candidate items -------------------------------------------------------------------------------


@dataclass(slots=True)
class Item:
    """One candidate line of a section: full and short renderings, the messages it cites, its value.
    A `mandatory` line (the request being worked on) is in every summary, as it is."""

    text: str
    messages: tuple[int, ...]
    priority: float
    order: float
    short: str | None = None
    inline: bool = False
    mandatory: bool = False


def sentences_of(text: str, limit: int = 60) -> list[str]:
    """Sentences of a prose text (code blocks removed), at most `limit` (of the first 60)."""
    return list(_sentences(text)[:limit])


@functools.lru_cache(maxsize=16384)  # every message of a long chat: a smaller LRU thrashes on each pass
def _sentences(text: str) -> tuple[str, ...]:
    return _prose_sentences(_FENCE.sub(" ", text) if "```" in text else text)


@functools.lru_cache(maxsize=16384)
def _prose_sentences(prose: str) -> tuple[str, ...]:
    """The sentences of a text without code blocks, split once for a message and for the same
    message with its code blocks already taken out (`pending_items` reads it so)."""
    spans = split_sentences(prose[:20000])
    found = []
    for start, end in spans[:120]:
        sentence = " ".join(prose[start:end].split())
        if len(sentence) >= 8:
            found.append(sentence)
        if len(found) >= 60:
            break
    return tuple(found)


def lead(text: str, chars: int) -> str:
    """The start of a text on one line, cut at a sentence or word boundary, with an ellipsis when cut."""
    flat = " ".join(text.split())
    if len(flat) <= chars:
        return flat
    cut = flat[:chars]
    for mark in ("。", ". ", "\n", "！", "？", "; ", ", ", " "):
        at = cut.rfind(mark)
        if at > chars // 2:
            return cut[:at + len(mark)].rstrip() + " …"
    return cut.rstrip() + "…"


def quote(text: str) -> str:
    """A message quoted on indented lines (Markdown-safe inside a list item)."""
    lines = text.strip().splitlines() or [""]
    return "\n".join(f"  > {line}" if line.strip() else "  >" for line in lines)


def primary_items(history: History, dropped: Sequence[int], covered: Iterable[int] = ()) -> list[Item]:
    """The requirement sentences of the dropped user messages that change or extend the request
    (the requests themselves, `covered`, are quoted by `requests`' lines)."""
    items: list[Item] = []
    skip = set(covered)
    for i in history.user_turns(dropped):
        if i in skip:
            continue
        for sentence in sentences_of(history.messages[i].content, 8):
            if _REQUEST.search(sentence):
                late = i / max(1, len(history.messages))
                items.append(Item(f"{history.label(i)}{sentence} (m{i})", (i,), 1.2 + late, i,
                                  short=f"{history.label(i)}{lead(sentence, 160)} (m{i})"))
                break
    return items


def user_items(history: History, dropped: Sequence[int], covered: Iterable[int] = ()) -> list[Item]:
    """Every dropped user message verbatim (but those a request line quotes, `covered`); the first
    and the latest rank highest."""
    skip = set(covered)
    users = [i for i in history.user_turns(dropped) if i not in skip]
    items = []
    for rank, i in enumerate(users):
        text = history.messages[i].content.strip()
        edge = rank == 0 or rank == len(users) - 1
        priority = 2.5 if edge else 1.0 + 0.8 * rank / max(1, len(users))
        items.append(Item(f"{history.label(i)}(m{i}) {text}" if "\n" not in text
                          else f"{history.label(i)}(m{i})\n{quote(text)}", (i,), priority, i,
                          short=f"{history.label(i)}(m{i}) {lead(text, 240)}"))
    return items


def file_items(history: History, dropped: Sequence[int], snippet_lines: int = 12) -> list[Item]:
    """Each file the dropped turns wrote or read: what happened to it and its latest snippet."""
    dropped_set = set(dropped)
    mentions: Counter[str] = Counter()
    first_seen: dict[str, int] = {}
    for i in dropped:
        if history.kinds[i] == "system":
            continue
        content = history.messages[i].content[:20000]
        for start, raw in find_paths(content):
            path = _clean_path(raw)
            if "://" in content[max(0, start - 10):start]:
                continue
            mentions[path] += 1
            first_seen.setdefault(path, i)
    writes: dict[str, list[int]] = defaultdict(list)
    reads: Counter[str] = Counter()
    snippets: dict[str, tuple[int, str]] = {}
    for action in history.actions:
        if action.index not in dropped_set:
            continue
        for path in action.writes:
            writes[path].append(action.index)
            first_seen.setdefault(path, action.index)
        for path, snippet in action.snippets.items():
            snippets[path] = (action.index, snippet)
        for path in action.reads:
            reads[path] += 1
            first_seen.setdefault(path, action.index)
    canonical = _merge_paths(set(mentions) | set(writes) | set(reads))
    merged_mentions: Counter[str] = Counter()
    for path, count in mentions.items():
        merged_mentions[canonical[path]] += count
    merged_writes: dict[str, list[int]] = defaultdict(list)
    for path, where in writes.items():
        merged_writes[canonical[path]].extend(where)
    merged_reads: Counter[str] = Counter()
    for path, count in reads.items():
        merged_reads[canonical[path]] += count
    merged_snippets: dict[str, tuple[int, str]] = {}
    for path, (position, excerpt) in snippets.items():
        key = canonical[path]
        if key not in merged_snippets or merged_snippets[key][0] < position:
            merged_snippets[key] = (position, excerpt)
    n = max(1, len(history.messages))
    earliest: dict[str, int] = {}
    for spelling, path in canonical.items():
        earliest[path] = min(earliest.get(path, n), first_seen.get(spelling, n))
    items = []
    for path in sorted(set(canonical.values())):
        edited = sorted(set(merged_writes.get(path, ())))
        count = merged_mentions.get(path, 0)
        read = merged_reads.get(path, 0)
        if not edited and not read and count < 2:
            continue
        seen = earliest[path]
        status = []
        if edited:
            status.append("edited " + ", ".join(f"m{i}" for i in edited[-4:]))
        if read:
            status.append(f"read {read}×")
        if count:
            status.append(f"mentioned {count}×")
        line = f"`{path}`: {'; '.join(status)}"
        priority = (3.0 + min(len(edited), 5) * 0.3 + max(edited) / n) if edited else (
            0.6 + min(count + 2 * read, 20) / 20)
        cites = tuple(edited[-4:]) or (seen,)
        latest = merged_snippets.get(path)
        if latest is not None:
            body = "\n".join(latest[1].strip("\n").splitlines()[:snippet_lines])
            fence = "````" if "```" in body else "```"
            full = f"{line} (latest, m{latest[0]}):\n{fence}\n{body}\n{fence}"
            items.append(Item(full, cites, priority, max(edited) if edited else seen, short=line))
        else:
            items.append(Item(line, cites, priority, max(edited) if edited else seen))
    return items


def _merge_paths(paths: set[str]) -> dict[str, str]:
    """Map every spelling of a file to one: `fields.py`, `/testbed/src/m/fields.py` -> `src/m/fields.py`
    (the shortest spelling with a folder that every other spelling ends with)."""
    by_name: dict[str, list[str]] = defaultdict(list)
    for path in sorted(paths):
        by_name[path.rsplit("/", 1)[-1]].append(path)
    canonical: dict[str, str] = {}
    for group in by_name.values():
        relative = sorted((p for p in group if "/" in p and not p.startswith("/")), key=len)
        for path in sorted(group, key=len):
            target = path
            for candidate in relative:
                if candidate != path and (path.endswith("/" + candidate) or candidate.endswith("/" + path)):
                    target = candidate if len(candidate) <= len(path) or "/" not in path else path
                    break
            canonical[path] = target
        if len({canonical[p] for p in group}) == 2 and any("/" not in p for p in group):
            full = next(p for p in group if "/" in canonical[p])
            for p in group:
                if "/" not in p:
                    canonical[p] = canonical[full]
    for path in list(canonical):
        while canonical.get(canonical[path], canonical[path]) != canonical[path]:
            canonical[path] = canonical[canonical[path]]
    return canonical


def error_items(history: History, dropped: Sequence[int], covered: Iterable[int] = ()) -> list[Item]:
    """Failures of the dropped turns, each with the command, the error, the change that followed and
    whether a later run of the same command succeeded (and errors people reported, but in the
    requests a request line quotes: `covered`)."""
    skip = set(covered)
    dropped_set = set(dropped)
    actions = [a for a in history.actions if a.index in dropped_set]
    items: list[Item] = []
    seen: dict[str, Item] = {}
    n = max(1, len(history.messages))
    for position, action in enumerate(actions):
        if not action.failed or not action.error:
            continue
        key = action.error[:80]
        fix = next((a for a in actions[position + 1:] if a.writes), None)
        rerun = next((a for a in actions[position + 1:]
                      if a.text[:40] == action.text[:40] and a.result is not None), None)
        resolved = rerun is not None and not rerun.failed
        who = history.label(action.index)
        parts = [f"{who}`{_trim(action.text, 120)}` (m{action.index}) → {action.error}"]
        cites = [action.index] + ([action.result] if action.result is not None else [])
        if fix is not None:
            parts.append(f"fix: edited {', '.join(f'`{p}`' for p in fix.writes[:3])} (m{fix.index})")
            cites.append(fix.index)
        if rerun is not None:
            parts.append(f"re-run {'passed' if resolved else 'still failing'} (m{rerun.result})")
        line = "; ".join(parts)
        if key in seen:
            seen[key].priority += 0.2
            continue
        priority = 1.5 + action.index / n + (0.6 if fix is not None else 0) + (0.4 if not resolved else 0)
        item = Item(line, tuple(c for c in cites if c is not None), priority, action.index,
                    short=f"{who}{action.error} (m{action.index})")
        seen[key] = item
        items.append(item)
    for i in dropped:  # errors that people report in words
        if history.kinds[i] == "user" and i not in skip:
            for sentence in sentences_of(history.messages[i].content, 12):
                if _ERROR_LINE.search(sentence) and len(sentence) < 400:
                    items.append(Item(f"{history.label(i)}reported: {sentence} (m{i})", (i,), 1.4 + i / n, i,
                                      short=f"{history.label(i)}reported: {lead(sentence, 140)} (m{i})"))
                    break
    return items


def action_items(history: History, dropped: Sequence[int]) -> list[Item]:
    """The tool calls of the dropped turns with their arguments: what was looked up and changed."""
    dropped_set = set(dropped)
    n = max(1, len(history.messages))
    items = []
    seen: set[str] = set()
    for action in history.actions:
        if action.index not in dropped_set or action.call is None:
            continue
        if action.text in seen:
            continue
        seen.add(action.text)
        outcome = "failed: " + action.error if action.failed and action.error else ""
        writes = bool(_WRITE_TOOL.search(action.name)) or regex.search(
            r"book|cancel|update|modify|send|delete|transfer|submit|pay|refund", action.name, regex.I)
        priority = (1.6 if writes else 1.0) + action.index / n
        line = (f"{history.label(action.index)}{action.text}" + (f" → {outcome}" if outcome else "")
                + f" (m{action.index})")
        items.append(Item(line, (action.index,) + ((action.result,) if action.result is not None else ()),
                          priority, action.index,
                          short=f"{history.label(action.index)}{action.name} (m{action.index})"))
    return items


def reasoning_items(history: History, dropped: Sequence[int], exclude: set[str]) -> list[Item]:
    """Assistant sentences that state a cause, a decision or a finding."""
    n = max(1, len(history.messages))
    items = []
    for i in dropped:
        if history.kinds[i] != "assistant":
            continue
        for sentence in sentences_of(history.messages[i].content, 20):
            if sentence in exclude or len(sentence) > 500 or not _DECISION.search(sentence):
                continue
            density = min(1.0, len(set(terms(sentence))) / 12)
            items.append(Item(f"{history.label(i)}{sentence} (m{i})", (i,), 0.8 + density + i / n, i,
                              short=f"{history.label(i)}{lead(sentence, 160)} (m{i})"))
    return items


#: Open tasks are looked for in this many of the latest people's and agents' messages.
PENDING_SCOPE = 200


def pending_items(history: History, dropped: Sequence[int], later: Sequence[int],
                  covered: Iterable[int] = ()) -> list[Item]:
    """Open tasks: unchecked boxes, TODOs, stated next steps and plan steps, minus what later
    messages report done (none read from the requests a request line quotes: `covered`)."""
    n = max(1, len(history.messages))
    candidates: list[tuple[int, str]] = []
    skip = set(covered)
    people = [i for i in dropped if history.kinds[i] in ("assistant", "user") and i not in skip]
    for i in people[-PENDING_SCOPE:]:  # tasks older than that were done or dropped long ago
        text = _FENCE.sub(" ", history.messages[i].content)
        plan = _PLAN_HEAD.search(text) is not None
        for match in _TASK_LINE.finditer(text):
            task = match.group("box") or match.group("todo") or (match.group("step") if plan else None)
            if task and 6 <= len(task) <= 300:
                candidates.append((i, task.strip()))
        for sentence in sentences_of(_TASK_LINE.sub(" ", text), 30):  # list items were taken above
            if _INTENT.search(sentence) and len(sentence) <= 300:
                candidates.append((i, sentence))
    done_texts: list[tuple[int, frozenset[str]]] = []
    first = min((i for i, _ in candidates), default=n)
    for j in [*dropped, *later]:
        if j <= first or history.kinds[j] not in ("assistant", "user"):  # only later news can close a task
            continue
        content = history.messages[j].content
        for match in _DONE_BOX.finditer(content):
            done_texts.append((j, frozenset(terms(match.group(1)))))
        for sentence in sentences_of(content, 30):
            if _DONE_WORDS.search(sentence):
                done_texts.append((j, frozenset(terms(sentence))))
    items = []
    seen: list[frozenset[str]] = []
    for i, task in candidates:
        words = frozenset(terms(task))
        if len(words) < 2 or any(len(words & s) >= 0.7 * len(words) for s in seen):
            continue
        seen.append(words)
        done = any(j > i and len(words & d) >= max(2, 0.6 * len(words)) for j, d in done_texts)
        if done:
            continue
        priority = 0.8 + 1.2 * i / n + (0.4 if history.kinds[i] == "user" else 0)
        items.append(Item(f"{history.label(i)}{task} (m{i})", (i,), priority, i,
                          short=f"{history.label(i)}{lead(task, 120)} (m{i})"))
    return items


def current_items(history: History, dropped: Sequence[int], turns: int = 3,
                  covered: Iterable[int] = ()) -> list[Item]:
    """What the dropped part ended with: the last assistant statements, actions and their outcome
    (a request a request line quotes, `covered`, is not repeated)."""
    items: list[Item] = []
    skip = set(covered)
    recent = [i for i in dropped if history.kinds[i] in ("assistant", "user") and i not in skip][-turns:]
    for rank, i in enumerate(recent):
        message = history.messages[i]
        said = sentences_of(message.content, 3)
        text = " ".join(said[:2]) if said else ""
        acts = history.by_message.get(i, [])
        if acts:
            outcome = []
            for action in acts[:2]:
                state = (f" → {action.error}" if action.failed and action.error else
                         " → ok" if action.result is not None else "")
                outcome.append(f"`{_trim(action.text, 140)}`{state}")
            text = (text + " " if text else "") + "; ".join(outcome)
        if not text:
            continue
        priority = 2.0 + rank
        items.append(Item(f"{history.label(i)}{text} (m{i})", (i,), priority, i,
                          short=f"{history.label(i)}{lead(text, 200)} (m{i})"))
    return items


@functools.lru_cache(maxsize=65536)
def value_key(token: str) -> str:
    """How values are told apart: `Economy` and `economy` are one, `MIA` and `Mia` are two."""
    return token.lower() if token[1:] == token[1:].lower() else token


def contains_value(text: str, words: set[str], key: str) -> bool:
    """Whether `text` (its `\\w+` runs in `words`) holds `key` as a whole value: `sea` is not in
    "seattle", nor `mia` in "mia_li_3668"; an empty value is in no text."""
    if not key:
        return False
    if WORD_RUN.fullmatch(key):
        return key in words
    start = text.find(key)
    while start >= 0:
        end = start + len(key)
        if not (start and text[start - 1].isalnum() and key[0].isalnum()) and not (
                end < len(text) and text[end].isalnum() and key[-1].isalnum()):
            return True
        start = text.find(key, start + 1)
    return False


def verbatim_text(history: History, indices: Iterable[int]) -> str:
    """What the verbatim messages show a reader: their text and their tool calls' arguments."""
    parts = []
    for i in indices:
        message = history.messages[i]
        parts.append(message.content)
        parts.extend(f"{call.name} {call.arguments}" for call in calls(message))
    return "\n".join(parts)


def identifier_items(history: History, dropped: Sequence[int], kept_text: str) -> list[Item]:
    """Names and values the dropped turns rely on (ids, codes, dates, amounts, names, symbols), ranked
    by how likely a later turn needs them (`identifier_scores`: said by a person, passed to a tool,
    returned by one). A word of prose counts when a tool returned it as a value (a name, a cabin
    class). Values already in `kept_text` (the verbatim messages) are left out."""
    words = set(WORD_RUN.findall(kept_text))  # in its own case: `Mia` is not `MIA`
    return [Item(token, where, priority, first, inline=True)
            for _, token, priority, first, where in identifier_scores(history, dropped)
            if not contains_value(kept_text, words, token)][:150]


def identifier_scores(history: History, dropped: Sequence[int]) -> list[tuple[str, str, float, int,
                                                                              tuple[int, ...]]]:
    """(key, display, priority, first message, last messages) per identifier, best first; computed
    once per history and range.

    The priority estimates how likely a later turn needs the value back, from where it occurred: a
    person said it or the agent passed it to a tool (the strongest evidence), the agent mentioned it,
    or a tool returned it, as a reference (under an id-like key, in a list of ids, as a record's key)
    or as an attribute. The shape scales it: a code, id or date cannot be guessed back, while a
    bare number or a plain word means little without its label."""
    cache_key = ("identifiers", tuple(dropped))
    if cache_key in history.cache:
        return cast("list[tuple[str, str, float, int, tuple[int, ...]]]", history.cache[cache_key])
    parts = [(i, part) for i in dropped if history.kinds[i] not in ("system", "summary")
             for part in _message_values(history, i)]  # a summary's identifiers come back as carried lines
    structured = {v.lower() for _, (_, found, _, is_json) in parts if is_json for v in found}
    # a bare number is no value on its own: it counts for the labelled values that hold it
    # (a person's "80202" for the tool's `zip=80202`), and is left out when none does
    holders: dict[str, list[str]] = defaultdict(list)
    for value in sorted({v for _, (_, found, _, is_json) in parts if is_json for v in found}):
        number = number_of(value)
        if number:
            holders[number].append(value)
    seen: dict[str, Counter[str]] = defaultdict(Counter)  # messages per kind of evidence
    # the messages of each value in the order first seen (a dict: a value in many messages is
    # looked up, not searched for)
    places: dict[str, dict[int, None]] = defaultdict(dict)
    display: dict[str, str] = {}
    bare: dict[str, bool] = {}  # whether a token is a bare number, decided once per token
    for i, (label, found, prose, _) in parts:
        if structured and prose:  # a word of prose that a tool returned as a value
            returned = [w for w in set(_WORDS.findall(prose)) if w.lower() in structured]
            found = {**found, **dict.fromkeys(returned, "")}
        for token in sorted(found):  # sorted: the same output in every process
            evidence = found[token] if label == "output" and found[token] else label
            is_bare = bare.get(token)
            if is_bare is None:
                is_bare = bare[token] = _BARE_NUMBER.fullmatch(token) is not None
            for value in holders.get(token, ()) if is_bare else (token,):
                key = value_key(value)
                display.setdefault(key, value)
                seen[key][evidence] += 1
                places[key][i] = None
    n = max(1, len(history.messages))
    ranked = []
    for key, count in seen.items():
        where = list(places[key])
        # a labelled number is as short as its number (`seats=4` is no value to keep)
        if len(key.partition("=")[2] or key) < 3 or key.lower() in _STOP_VALUES:
            continue
        if not is_term(display[key], tool_values(history) if display[key].isupper() else frozenset()):
            continue
        miss = 1.0  # the chance that no evidence is right, each kind taken as independent
        for evidence, chance in _EVIDENCE.items():
            if count[evidence]:
                miss *= (1.0 - chance) ** min(count[evidence], 2)  # said again: a little surer
        miss *= 0.95 ** min(len(where) - 1, 6)  # in many messages: part of what is going on
        need = (1.0 - miss) * _shape_weight(display[key])
        priority = 0.05 + 3.0 * need * (0.85 + 0.3 * where[-1] / n)  # later: more likely current
        ranked.append((key, display[key], priority, where[0], tuple(where[-2:])))
    ranked.sort(key=lambda entry: -entry[2])
    history.cache[cache_key] = ranked
    return ranked


def _message_values(history: History, i: int) -> list[tuple[str, dict[str, str], str, bool]]:
    """The values of message `i` and of its tool calls' arguments, read once per history: (label,
    value -> place in a JSON document, the text when it is prose, whether it is JSON) per part."""
    cache_key = ("values", i)
    if cache_key in history.cache:
        return cast("list[tuple[str, dict[str, str], str, bool]]", history.cache[cache_key])
    kind = history.kinds[i]
    content = history.messages[i].content
    if kind == "output" and len(content) > 4000:  # long tool output: its head and tail matter most
        content = content[:3000] + "\n" + content[-1000:]
    parts = []
    for label, text in [(kind, content)] + [("call", c.arguments) for c in calls(history.messages[i])]:
        fields = json_fields(text)
        prose = label in ("user", "assistant")
        found: dict[str, str] = {}
        if fields is not None:
            for value, place in fields:  # the strongest place a value holds in the document
                found[value] = max(found.get(value, ""), place, key=_PLACES.index)
        else:
            found = dict.fromkeys(_identifiers(text, prose=prose), "")
        parts.append((label, found, text if prose and fields is None else "", fields is not None))
    history.cache[cache_key] = parts
    return parts


#: How strongly each kind of occurrence says a value is needed again: a person said it, the agent
#: passed it to a tool, the agent wrote it, a tool returned it as a reference or as an attribute.
_EVIDENCE = {"user": 0.6, "call": 0.6, "assistant": 0.15, "member": 0.3, "ref": 0.1, "output": 0.03}
_PLACES = ("", "ref", "member")
_ID_KEY = regex.compile(r"(?:^|_)(?:ids?|numbers?|no|codes?|keys?|refs?|references?|uuid|sku)$",
                        regex.IGNORECASE)
_DATA_KEY = regex.compile(r"\d")  # `{"gift_card_7": {...}}`: a key with a number is a record's id
_MONEY = regex.compile(r"[$€£¥]\s?\d|\d\s?(?:USD|EUR|GBP|元|美元)$")


def _shape_weight(token: str) -> float:
    """How much a value says on its own: codes, ids, dates and emails fully; short capitals (codes
    such as airports or tickers) nearly; names less; plain words and bare numbers little."""
    if number_of(token):  # a labelled number (`amount=150`): a number still
        return 0.35
    if _CODE_SHAPE.search(token):
        return 1.0
    if _NUMBER.fullmatch(token) or _MONEY.search(token):
        return 0.35
    if token.isupper():
        return 0.8
    if token[:1].isupper():
        return 0.7
    return 0.35


def json_fields(text: str) -> list[tuple[str, str]] | None:
    """Identifier-like values of a JSON document (its keys are schema, not facts), each with its
    place: "member" of a collection (an item of a list of plain strings, a record's key that looks
    like an id: `{"gift_card_7": {...}}`), "ref" (under an id-like key such as `flight_number`) or
    "" (an attribute). None when the text is not JSON."""
    stripped = text.strip()
    if not stripped or stripped[0] not in "[{":
        return None
    try:
        data = json.loads(stripped)
    except ValueError:
        return None
    found: list[tuple[str, str]] = []
    stack: list[tuple[object, str, str]] = [(data, "", "")]  # (item, place, the key it is under)
    while stack and len(found) < 2000:
        item, place, key = stack.pop()
        if isinstance(item, dict):
            for k, v in item.items():
                if isinstance(v, dict) and _DATA_KEY.search(k) and 2 <= len(k) <= 40:
                    found.append((k, "member"))
                stack.append((v, "ref" if _ID_KEY.search(k) else "", k))
        elif isinstance(item, list):
            scalars = all(isinstance(v, str) for v in item)
            stack.extend((v, "member" if scalars else place, key) for v in item)
        elif isinstance(item, str):
            value = item.strip()
            if 2 <= len(value) <= 40 and len(value.split()) <= 3:
                found.append((labelled(key, value), place))
            elif len(value) > 40:
                found.extend((v, "") for v in _identifiers(value, prose=False))
        elif isinstance(item, int | float) and not isinstance(item, bool) and abs(item) >= 10:
            found.append((labelled(key, str(item)), place))
    return found


def number_of(value: str) -> str | None:
    """The number of a labelled number (`amount=150` -> `150`), None for any other value."""
    number = value.partition("=")[2]
    return number if number and _BARE_NUMBER.fullmatch(number) else None


def labelled(key: str, value: str) -> str:
    """A bare number with the name it is under (`amount=150`, as tool calls are shown in the
    summary's lines), so it says what it is; any other value as it is."""
    if _BARE_NUMBER.fullmatch(value) and _LABEL_KEY.fullmatch(key):
        return f"{key}={value}"
    return value


def is_term(token: str, values: AbstractSet[str] = frozenset()) -> bool:
    """Whether a value can stand in Key Technical Concepts on its own: not a bare number (it says
    nothing without its label) and not an English word written in capitals (the emphasis of
    prompt templates: ONLY, MUST, AVOID) unless a tool took or returned it as a value (`values`:
    an airport SEA in a flight's record). A capitalised word that English text writes only
    capitalised (FRANCE, GPL) and any capitals with a digit or underscore stay terms."""
    if (token[:1].isdigit() or token[:1] in "+-") and _BARE_NUMBER.fullmatch(token):
        return False
    return not (token.isupper() and token.isalpha() and token.lower() in english_words()
                and token not in values)


def tool_values(history: History) -> frozenset[str]:
    """Every value the tools of a history took or returned in structured form (the JSON of tool
    calls and results, `json_fields`), computed once per history."""
    cache_key = ("tool values",)
    if cache_key not in history.cache:
        history.cache[cache_key] = frozenset(
            value for i, kind in enumerate(history.kinds) if kind not in ("system", "summary")
            for _, found, _, is_json in _message_values(history, i) if is_json for value in found)
    return cast("frozenset[str]", history.cache[cache_key])


@functools.lru_cache(maxsize=1)
def english_words() -> frozenset[str]:
    """Common English words: the shipped stop words, and the words that the sentence splitter's
    English model (`compactor.text` data, counted over news and Wikipedia text) saw written in
    lower case (names and acronyms it saw only capitalised are not among them)."""
    resource = importlib.resources.files("compactor.text") / "data" / "punkt_en.json"
    ortho = json.loads(resource.read_text(encoding="utf-8"))["ortho_context"]
    lower_case = 16 | 32 | 64  # punkt's flags: seen in lower case first, inside, or unknown
    return stopwords("en") | frozenset(word for word, flags in ortho.items() if int(flags) & lower_case)


def json_values(text: str) -> list[str] | None:
    """Identifier-like values of a JSON document, or None when the text is not JSON."""
    fields = json_fields(text)
    return None if fields is None else [value for value, _ in fields]


#: A reference to a stored original (`3f2a9c0d1e2b4a56-0007`, `..0012`): a way back, not a term.
_CHUNK_REF = regex.compile(r"\b[0-9a-f]{8,64}-\d{4,}(?:\.\.\d{4,})?\b")


def _identifiers(text: str, prose: bool) -> list[str]:
    found = []
    if "-" in text:
        text = _CHUNK_REF.sub(" ", text)
    for match in _IDENT.finditer(text):
        group = match.lastindex or 0
        token = match.group(group).strip().rstrip(".,:;")
        if not token or token.upper() in _COMMON_CAPS or token.lower() in _COMMON_DOTTED:
            continue
        if token[0].isdigit() and _BARE_NUMBER.fullmatch(token):  # (`identifier_scores` may label it)
            continue
        if group == 5 and "." in token and PATH.fullmatch(token):
            continue
        if group == 1 and (len(token.split()) > 4 or PATH.fullmatch(token) or not _code_span(token)):
            continue
        found.append(token)
    if prose:
        prose_text = _FENCE.sub(" ", text)
        found.extend(m.group(0) for m in _PROSE_NUMBER.finditer(prose_text))
    return found


#: What code has and prose has not: brackets, operators, quotes, dots and underscores inside words.
_CODE_MARK = regex.compile(r"[()\[\]{}=<>+*/|&%$#@\\'\"_~^]|\w[.:]\w|\d|^-")
_OPENERS, _CLOSERS = "([{", ")]}"


def _code_span(token: str) -> bool:
    """Whether the text between two backticks is code rather than the prose between two spans
    (an odd backtick earlier in a message pairs a span's closing backtick with the next one's
    opening: ". It seems", "is an argument to", ", is"). Code starts with no sentence punctuation
    and no closing bracket, its brackets balance, and a span of several words shows some code."""
    if token[0] in ".,;:!?" + _CLOSERS:
        return False
    depth = 0
    for char in token:
        if char in _OPENERS:
            depth += 1
        elif char in _CLOSERS:
            depth -= 1
            if depth < 0:
                return False
    if depth:
        return False
    return " " not in token or _CODE_MARK.search(token) is not None


def split_values(line: str) -> list[str]:
    """The values of a rendered list of values (`a, f(x, y), b`): split at the commas outside
    brackets; empty pieces are no values."""
    pieces: list[str] = []
    depth = 0
    start = 0
    for at, char in enumerate(line):
        if char in _OPENERS:
            depth += 1
        elif char in _CLOSERS:
            depth = max(0, depth - 1)
        elif char == "," and depth == 0 and line.startswith(", ", at):
            pieces.append(line[start:at])
            start = at + 2
    pieces.append(line[start:])
    return [piece.strip() for piece in pieces if piece.strip()]


def tool_items(history: History, dropped: Sequence[int]) -> list[Item]:
    """The tools the dropped turns used, with how often."""
    used: Counter[str] = Counter()
    last: dict[str, int] = {}
    dropped_set = set(dropped)
    for action in history.actions:
        if action.index in dropped_set and action.call is not None:
            used[action.name] += 1
            last[action.name] = action.index
    return [Item(f"{name} ×{count}" if count > 1 else name, (last[name],), 0.3 + min(count, 10) / 20,
                 last[name], inline=True) for name, count in used.most_common(12)]


_SECTION_BLOCK = re.compile(r"^## (.+?)\n(.*?)(?=^## |\Z)", re.MULTILINE | re.DOTALL)


def summary_sections(text: str) -> list[tuple[str, list[str]]]:
    """(heading, bullets) of each `## ` section of a summary; a bullet's continuation lines (quotes,
    code) stay with it."""
    out = []
    for match in _SECTION_BLOCK.finditer(text):
        bullets: list[str] = []
        for line in match.group(2).rstrip().splitlines():
            if line.startswith("- "):
                bullets.append(line[2:])
            elif bullets and line.strip():
                bullets[-1] += "\n" + line
        out.append((match.group(1).strip(), bullets))
    return out


def carried_items(history: History, dropped: Sequence[int], titles: dict[str, str],
                  citations: Citations | None = None,
                  quoted: Iterable[tuple[int, str]] = ()) -> dict[str, list[Item]]:
    """Lines of earlier summaries in the dropped range, per section (`titles` maps a heading to its
    section key), so a compaction of a compacted history keeps what the first one kept. Their
    citations name the messages of the earlier history: `citations` rewrites them so that they
    still do in the new summary. The request lines that `requests` quotes again (`quoted`: the
    summary and the label) are left to it; a request that newer ones replaced goes on as an
    earlier request."""
    taken = set(quoted)
    citations = citations or Citations(history, dropped, "")
    carried: dict[str, list[Item]] = defaultdict(list)
    n = max(1, len(history.messages))
    for i in dropped:
        if history.kinds[i] != "summary":
            continue
        for title, bullets in summary_sections(history.messages[i].content):
            key = titles.get(title)
            if key is None:
                continue
            for rank, bullet in enumerate(b for b in bullets if "kept verbatim above" not in b):
                priority = 0.8 + i / n - rank * 0.01
                request = REQUEST_LINE.match(bullet)
                if request:  # the current and first requests are quoted anew; an older one goes on
                    which, cite, text = request.group(1, 2, 3)
                    if (i, which) in taken:
                        continue
                    which = _EARLIER_LABELS[1] if which in _ZH_LABELS else _EARLIER_LABELS[0]
                    cite = citations.rewrite(i, cite)
                    carried[key].append(Item(f'{which} ({cite}): "{text}"', (i,), priority, i,
                                             short=f"{which} ({cite}): {lead(unquote(text), 160)}"))
                    continue
                bullet = citations.rewrite(i, bullet)
                inline = key == "concepts" and "\n" not in bullet and ", " in bullet
                for piece in split_values(bullet) if inline else [bullet]:
                    if inline and _BARE_NUMBER.fullmatch(piece):  # (the earlier summary judged the rest)
                        continue
                    carried[key].append(Item(piece, (i,), priority, i, inline=inline,
                                             short=lead(piece, 160) if not inline else None))
    return carried


_FILE_LINE = regex.compile(r"^`([^`\n]+)`: ")
_CITED = r"(?:[a-z]\d+|[0-9a-f]{6,64}-\d{4,})"  # `m12`, `a7`, or a full id
_EDITED = regex.compile(rf"\bedited ({_CITED}(?:, {_CITED})*)")


def merge_file_lines(found: list[Item], carried: list[Item]) -> list[Item]:
    """The carried lines of Files and Code Sections without the files this range has a line for:
    that line tells the file's latest state, and takes the edits the carried line lists (`edited
    a4, m7`), so a file has one line however often the history was compacted."""
    mine = {match.group(1): item for item in found if (match := _FILE_LINE.match(item.text))}
    kept = []
    for item in carried:
        match = _FILE_LINE.match(item.text)
        target = mine.get(match.group(1)) if match else None
        if target is None:
            kept.append(item)
            continue
        edits = _EDITED.search(item.text)
        if edits:
            before = edits.group(1)
            for line in ("text", "short"):
                text = getattr(target, line)
                if text is None:
                    continue
                head = _FILE_LINE.match(text)
                end = head.end() if head else 0
                if text.startswith("edited ", end):
                    text = f"{text[:end]}edited {before}, {text[end + len('edited '):]}"
                else:
                    text = f"{text[:end]}edited {before}; {text[end:]}"
                setattr(target, line, text)
            target.messages = tuple(dict.fromkeys((*item.messages, *target.messages)))
    return kept


_TOOL_COUNT = regex.compile(r"([\w.-]+)(?: ×(\d+))?")


def merge_tool_counts(tools: list[Item], carried: list[Item]) -> list[Item]:
    """The carried values of Key Technical Concepts without the tools this range used too (`tools`:
    `tool_items`): the counts add up in this range's value (`bash ×7`, not `bash ×3, bash ×4`)."""
    mine = {match.group(1): (item, int(match.group(2) or 1))
            for item in tools if (match := _TOOL_COUNT.fullmatch(item.text))}
    kept = []
    for item in carried:
        match = _TOOL_COUNT.fullmatch(item.text) if item.inline else None
        if match is None or match.group(1) not in mine:
            kept.append(item)
            continue
        target, count = mine[match.group(1)]
        count += int(match.group(2) or 1)
        mine[match.group(1)] = (target, count)
        target.text = f"{match.group(1)} ×{count}"
    return kept


# -- summaries: their markers, citations and request lines -----------------------------------------

#: A chunk id in quotes (`"3f2a9c0d1e2b4a56-0012"`, or a range `..0040`), as markers list them.
_QUOTED_ID = regex.compile(r'"([0-9a-f]{6,64})-(\d{4,})(?:\.\.(\d{4,}))?"')
_BRACKETS = regex.compile(r"\[([^\]]*)\]")
#: How a marker defines a citation letter: `m2 is id "<source>-0002"` (`m2 即 id ...` in Chinese).
_DEFINES = regex.compile(r'(?<![\w-])([a-z])\d+ (?:is id|即 id) "([0-9a-f]{6,64})-\d{4,}"')
#: A citation in a summary line: a letter and a message number (`m12`, `a7`).
_CITATION = regex.compile(r"(?<![\w./@#$-])([a-z])(\d+)(?![\w-]|\.\d)")
#: What a citation is never rewritten in: code (fenced or inline) and quoted requests.
_VERBATIM = regex.compile(r"```.*?(?:```|\Z)|`[^`\n]*`|: \".*\"\s*\Z", regex.DOTALL)
#: Letters for the messages of earlier histories (`m` is this history's).
_LETTERS = "abcdefghijklnpqrstuvwxyz"


def is_summary(content: str) -> bool:
    """Whether a message is a summary compactor wrote: the mark, then ids on its first line."""
    first = content[:1000].split("\n", 1)[0]
    return content.startswith(SUMMARY_MARK) and _QUOTED_ID.search(first) is not None


def marker_ids(content: str) -> list[str]:
    """The ids a summary's marker lists (its own range first, then earlier summaries')."""
    first = content[:2000].split("\n", 1)[0]
    return [m.group(0).strip('"') for listed in _BRACKETS.findall(first) for m in _QUOTED_ID.finditer(listed)]


def marker_letters(content: str) -> dict[str, str]:
    """Citation letter -> the source id whose messages it numbers, as a summary's marker defines
    them; a marker that defines none numbers its own source's messages `mN` (its first id)."""
    first = content[:2000].split("\n", 1)[0]
    letters = dict(_DEFINES.findall(first))
    if "m" not in letters:
        listed = marker_ids(content)
        if listed:
            letters["m"] = listed[0].rsplit("-", 1)[0]
    return letters


class Citations:
    """How one summary names messages: `m12` is message 12 of this history (`<source>-0012`); a line
    carried from an earlier summary cites the messages of that summary's own history, under a
    letter of their own (`a7` is `<earlier source>-0007`), which the marker defines. Each citation
    names one message, and the expand tool takes its id. `brief`: no letters (a tight summary has
    no room to define them): a carried line cites the earlier summary it comes from, `mN` here."""

    def __init__(self, history: History, dropped: Sequence[int], source_id: str, brief: bool = False) -> None:
        self.source_id = source_id
        self.brief = brief
        self.letters: dict[str, str] = {}  # earlier source -> its letter here
        self.given: dict[int, dict[str, str]] = {
            i: marker_letters(history.messages[i].content) for i in dropped if history.kinds[i] == "summary"}

    def rewrite(self, summary: int, text: str) -> str:
        """A line of the earlier summary at `summary`, its citations in this summary's letters (a
        full id when the letters run out); code and quoted requests are left as they are."""
        given = self.given.get(summary)
        if not given:
            return text

        def swap(match: regex.Match[str]) -> str:
            source = given.get(match.group(1))
            if source is None:
                return match.group(0)
            if self.brief:
                return f"m{summary}"
            letter = self.letter(source)
            number = int(match.group(2))
            return f"{letter}{number}" if letter else f"{source}-{number:04d}"

        out, at = [], 0
        for kept in _VERBATIM.finditer(text):
            out.append(_CITATION.sub(swap, text[at:kept.start()]))
            out.append(kept.group(0))
            at = kept.end()
        out.append(_CITATION.sub(swap, text[at:]))
        return "".join(out)

    def letter(self, source: str) -> str | None:
        """The letter of a source's messages here (`m`: this history), None when none is left."""
        if source == self.source_id:
            return "m"
        if source not in self.letters:
            free = [c for c in _LETTERS if c not in self.letters.values()]
            if not free:
                return None
            self.letters[source] = free[0]
        return self.letters[source]

    def defined(self, text: str) -> list[tuple[str, str, int]]:
        """(letter, source, a number it cites) of the earlier histories' letters `text` uses."""
        if not self.letters:
            return []
        sources = {letter: source for source, letter in self.letters.items()}
        first: dict[str, int] = {}
        for match in _CITATION.finditer(text):
            if match.group(1) in sources:
                first.setdefault(match.group(1), int(match.group(2)))
        return [(letter, sources[letter], number) for letter, number in first.items()]


SECTION_PRIMARY, SECTION_PRIMARY_ZH = "Primary Request and Intent", "主要请求和意图"
#: The request lines of a summary: `Current request (m41): "..."` (the latest from the person),
#: `First request (m1): "..."` (the task), `Earlier request (...)` (one that newer ones replaced).
REQUEST_LABELS = {"current": ("Current request", "当前请求"), "first": ("First request", "最初请求")}
_EARLIER_LABELS = ("Earlier request", "较早请求")
_ZH_LABELS = ("当前请求", "最初请求", "较早请求")
REQUEST_LINE = regex.compile(r"^(Current request|First request|Earlier request|当前请求|最初请求|较早请求) "
                             r"\(([^()\n]*)\): \"(.*)\"\s*$", regex.DOTALL)


def quoted(text: str) -> str:
    """A request quoted in full within a list item: in double quotes, its later lines indented (so
    no line of it reads as a heading or a new item; whitespace aside, the words are the original's)."""
    lines = text.strip().split("\n")
    return '"' + "\n".join([lines[0], *(f"  {line}" if line.strip() else "" for line in lines[1:])]) + '"'


def unquote(text: str) -> str:
    """The request a `quoted` text holds (its indentation undone)."""
    return "\n".join(line[2:] if line.startswith("  ") else line for line in text.split("\n"))


@dataclass(frozen=True, slots=True)
class Request:
    """A request a summary has to quote: which one (`current`, `first`; while the history is read,
    where it was found: a `turn`, or `carried` by an earlier summary), how it is cited, its text
    (as written; a carried quote that was shortened stays so), and the message that holds it."""

    which: str
    cite: str
    text: str
    index: int
    carried: str = ""  # the label an earlier summary quoted it under (`index`: that summary)


def requests(history: History, dropped: Sequence[int], citations: Citations) -> tuple[list[Request], bool]:
    """The requests the summary of `dropped` quotes: the latest from the person ("current": their
    latest real turn, not tool output) when it is in the dropped range, and the first (the task
    statement) when that is dropped too; either may be a request an earlier summary in the range
    quoted. Also whether the first request is kept verbatim before the summary."""
    dropped_set = set(dropped)
    # what answers an agent's command is no request, even without an observation's marks (a text
    # agent's harness replying "provide exactly one action"): the plan's reading, `output_indices`
    answering = set(output_indices(history.messages))
    seen: list[tuple[Request, bool]] = []  # every request in order, and whether it is dropped
    for i, kind in enumerate(history.kinds):
        content = history.messages[i].content
        if kind == "user" and content.strip() and i not in answering:
            seen.append((Request("turn", f"m{i}", content.strip(), i), i in dropped_set))
        elif kind == "summary":  # the requests it quoted, the first before the current
            found = sorted((match for title, bullets in summary_sections(content)
                            if title in (SECTION_PRIMARY, SECTION_PRIMARY_ZH)
                            for match in map(REQUEST_LINE.match, bullets)
                            if match and match.group(1) not in _EARLIER_LABELS),
                           key=lambda match: match.group(1) not in REQUEST_LABELS["first"])
            for match in found:
                cite = citations.rewrite(i, match.group(2)) if i in dropped_set else match.group(2)
                seen.append((Request("carried", cite, unquote(match.group(3)), i, match.group(1)),
                             i in dropped_set))
    if not seen:
        return [], False
    chosen: list[Request] = []
    latest, latest_dropped = seen[-1]
    if latest_dropped:
        chosen.append(Request("current", latest.cite, latest.text, latest.index, latest.carried))
    first, first_dropped = seen[0]
    if len(seen) > 1 and first_dropped:
        chosen.append(Request("first", first.cite, first.text, first.index, first.carried))
    kept_before = (first.which == "turn" and bool(dropped) and first.index < dropped[0])
    return chosen, kept_before



def _after_spaces(text: str, end: int) -> int:
    """Where the run of spaces starting at `end` stops."""
    found = _SPACE_RUN.match(text, end)
    return found.end() if found is not None else end
