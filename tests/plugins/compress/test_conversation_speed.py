"""The shortcuts that keep history compaction fast give exactly what the plain scans give."""

from __future__ import annotations

import random
import re

import pytest

from compactor.document import Message
from compactor.plugins.compress.eight_segment import conversation as es
from compactor.plugins.compress.eight_segment import history as hx
from compactor.text.tokens import ApproximateEncoding, TokenCounter, get_counter


def _plain_paths(text: str) -> list[tuple[int, str]]:
    """`find_paths` as one scan of the whole text (what the line-by-line scan must equal)."""
    return [(m.start(), m.group(0)) for m in hx._PATHISH.finditer(text)
            if m.group(1).lower() in hx._EXTENSIONS and "//" not in m.group(0)]


def test_find_paths_equals_one_scan_of_the_whole_text() -> None:
    text = ("Edited src/app/models.py and ./tests/test_models.py.\nnothing here\n"
            "see http://example.com/x.py and a:b.py, c+d.md, README.md\n"
            "ends without newline: lib/util.js")
    found = hx.find_paths(text)
    assert found == _plain_paths(text)
    assert [p for _, p in found] == ["src/app/models.py", "./tests/test_models.py", "c+d.md", "README.md",
                                     "lib/util.js"]
    rnd = random.Random(7)
    alphabet = [*"ab./\n :+-@_é漢1", "x.py", ".js", "a:b.py", "//", "\n.py", "+c.md", "文件.py"]
    for _ in range(3000):
        text = "".join(rnd.choice(alphabet) for _ in range(rnd.randint(0, 24)))
        assert hx.find_paths(text) == _plain_paths(text), text


@pytest.mark.parametrize("output, error", [
    ("all 12 tests passed\n" * 200, None),
    ('{"error": "flight not found"}', "error: flight not found"),
    ("Traceback (most recent call last):\n  File \"a.py\", line 1\nValueError: bad", "ValueError: bad"),
    ("x = 1\n" * 300 + "bash: foo: command not found", "bash: foo: command not found"),
])
def test_tool_output_errors_are_found_with_or_without_the_prefilter(output: str, error: str | None) -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "run", "arguments": '{"cmd": "foo"}'}}
    history = hx.History([Message(role="assistant", content="", tool_calls=(call,)),
                          Message(role="tool", content=output, tool_call_id="c1")])
    assert history.kinds == ["assistant", "output"]
    assert history.actions[0].error == hx.error_summary(history.messages[1].content) == error


@pytest.mark.parametrize("counter", [get_counter("cl100k_base"),
                                     TokenCounter(ApproximateEncoding(), "approximate", exact=False)],
                         ids=["cl100k", "approximate"])
@pytest.mark.parametrize("ending", ["(m12)", "done.", "plain words", "trailing spaces   ", "数字 42",
                                    "中文结尾。", "code `x`\n", "- list item:\n  > quoted"])
def test_frame_size_counts_what_the_frame_costs(counter: TokenCounter, ending: str) -> None:
    marker = "[compactor summary] Summary of m1–m9 (of 12). Originals: expand_context(ids=[\"c-0001..0009\"])"
    body = f"## Primary Request and Intent\n- {ending}\n\n## Current Work\n- {ending}"
    for tight in (False, True):
        size = es._frame_size(counter, marker, body, tight)
        for zh in (False, True):
            meta = es._metadata(12345, 678, 0.42, "assistant", zh, tight)
            assert size(meta) == counter.count(es._frame(marker, body, meta, tight))


def test_first_error_line_is_the_first_match_of_the_whole_scan() -> None:
    text = "ok\nno errors here\nerror\n   : disk full\nValueError: bad\n"
    found = hx.first_error_line(text)
    assert found is not None and found.span() == hx._ERROR_LINE.search(text).span()
    assert found.group(0) == "error\n   :"  # a match may run past its line's end
    rnd = random.Random(11)
    alphabet = [*"ab \n\t:!eE", "error", "Error", "errors", "FAILED", "FAILEDx", "ValueError", "xError",
                "\n  :", "错误", "Traceback (most recent call last)", " failure!", "ERROR_",
                "command not found"]
    for _ in range(5000):
        text = "".join(rnd.choice(alphabet) for _ in range(rnd.randint(0, 14)))
        expected = hx._ERROR_LINE.search(text)
        found = hx.first_error_line(text)
        assert (found and found.span()) == (expected and expected.span()), text


@pytest.mark.parametrize("command, writes", [
    ("python - <<'EOF'\nfrom pathlib import Path\nPath('src/app.py').write_text(code)\nEOF", ["src/app.py"]),
    ("sed -i 's/a/b/' src/app.py && python -m pytest tests/ 2>&1 | tail", ["src/app.py"]),
    ("cat setup.py | grep name", []),
])
def test_shell_writes_with_or_without_write_text(command: str, writes: list[str]) -> None:
    history = hx.History([Message(role="assistant", content=f"```bash\n{command}\n```")])
    assert history.actions[0].writes == writes


def test_identifier_scan_equals_the_plain_alternation() -> None:
    """The lookaheads in front of the identifier shapes only skip places: every match (its span,
    its group, what it holds) is the plain alternation's."""
    plain = re.compile(hx._IDENT_SHAPES)

    def matches(pattern: re.Pattern[str], text: str) -> list[tuple[tuple[int, int], int | None, str]]:
        return [(m.span(), m.lastindex, m.group(m.lastindex or 0)) for m in pattern.finditer(text)]

    text = ("Call `get_user(id)` for mia.li+work@example.com on 2024-05-01T10:30, $1,250.00 or 30 EUR: "
            "HTTPServer parse_args os.path.join() ABC123 3rd v2 Word word. word-word word+x word@x.io")
    assert matches(hx._IDENT, text) == matches(plain, text)
    assert hx._identifiers(text, prose=False)[:3] == ["get_user(id)", "mia.li+work@example.com",
                                                      "2024-05-01T10:30"]
    rnd = random.Random(5)
    alphabet = [*"aAbZz09_ .,-+@$`()\n:T/é元", "USD", "EUR", "2024-01-02", "foo.bar", "x@y.io", " 12:30",
                "()", "Word", "word", "ab_c"]
    for _ in range(20000):
        text = "".join(rnd.choice(alphabet) for _ in range(rnd.randint(0, 16)))
        assert matches(hx._IDENT, text) == matches(plain, text), text


def test_sentences_are_split_once_with_or_without_code_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    text = "First we look. Then we fix it.\n```bash\nls -la\n```\nAfter that the tests pass."
    split: list[str] = []
    plain = hx.split_sentences

    def spy(prose: str, *args: object, **kwargs: object) -> list[tuple[int, int]]:
        split.append(prose)
        return plain(prose, *args, **kwargs)

    hx._sentences.cache_clear()
    hx._prose_sentences.cache_clear()
    monkeypatch.setattr(hx, "split_sentences", spy)
    with_blocks = hx.sentences_of(text)
    without = hx.sentences_of(hx._FENCE.sub(" ", text))  # how pending_items reads a message
    assert with_blocks == without == ["First we look.", "Then we fix it.", "After that the tests pass."]
    assert len(split) == 1
    hx._sentences.cache_clear()
    hx._prose_sentences.cache_clear()
