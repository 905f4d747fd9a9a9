"""compactor.llm.client, compactor.text.fidelity and llm.fallback, against a real local HTTP server.

Every test talks HTTP to `tests/openai_server.py` through the real `openai` client: retries,
Retry-After, timeouts, malformed bodies and concurrency are exercised end to end, never mocked.
"""

from __future__ import annotations

import email.utils
import functools
import logging
import socket
import time
import traceback
from pathlib import Path
from typing import Any

import pytest

from compactor import Component, Pipeline, hookimpl
from compactor.errors import CompactorError, ConfigError, LLMError
from compactor.llm.client import LLMClient, LLMSettings, parse_retry_after
from compactor.plugins.llm import LLMFallback
from compactor.registry import build_registry
from compactor.text.fidelity import find_invented, invented_facts

from ... import openai_server as fake
from ...openai_server import FakeOpenAI, Reply

openai_server = fake.openai_server  # the fixture, by its own name
KEY = "sk-test-secret-5f3a9c1e7d"
FAST = {"retry_base_delay": 0.01, "retry_max_delay": 2.0}


def settings(server: FakeOpenAI, **changes: Any) -> LLMSettings:
    values = {"model": "test-model", "base_url": server.base_url, "api_key": KEY, **FAST, **changes}
    return LLMSettings.from_mapping(values, env={})


def ask(text: str = "hi") -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


# -- settings ---------------------------------------------------------------------------------------


def test_settings_fall_back_to_the_environment_and_hide_the_key() -> None:
    env = {"OPENAI_BASE_URL": "http://llm.local/v1", "OPENAI_API_KEY": KEY, "OPENAI_MODEL": "m-env"}
    s = LLMSettings.from_mapping({"model": None, "temperature": 0}, env=env)
    assert (s.model, s.base_url, s.api_key, s.temperature, s.max_tokens) == (
        "m-env", "http://llm.local/v1", KEY, 0.0, 1500)
    assert s.configured
    assert KEY not in repr(s) and KEY not in str(s) and "***" in repr(s)
    assert KEY not in repr(LLMClient(s))
    both = {"COMPACTOR_LLM_MODEL": "m-compactor", "OPENAI_MODEL": "m-env"}
    assert LLMSettings.from_mapping({}, env=both).model == "m-compactor"
    assert LLMSettings.from_mapping({"model": "yaml"}, env=env).model == "yaml"
    assert not LLMSettings.from_mapping({}, env={}).configured
    assert not LLMSettings.from_mapping({"model": "m"}, env={}).configured  # nowhere to send it
    assert LLMSettings.from_mapping({"model": "m", "api_key": "k"}, env={}).configured


def test_retry_after_accepts_seconds_dates_and_milliseconds() -> None:
    now = time.time()
    assert parse_retry_after({"retry-after": "2"}) == 2.0
    assert parse_retry_after({"retry-after": "0.5"}) == 0.5
    assert parse_retry_after({"retry-after-ms": "250"}) == 0.25
    date = email.utils.formatdate(now + 5, usegmt=True)
    assert 3.5 <= (parse_retry_after({"retry-after": date}, now=now) or 0) <= 5.5
    assert parse_retry_after({"retry-after": email.utils.formatdate(now - 60, usegmt=True)}) == 0.0
    assert parse_retry_after({"retry-after": "soon"}) is None
    assert parse_retry_after({}) is None


# -- the client -------------------------------------------------------------------------------------


def test_complete_sends_model_defaults_and_key(openai_server: FakeOpenAI) -> None:
    openai_server.queue(Reply(content="pong"))
    with LLMClient(settings(openai_server)) as llm:
        assert llm.complete(ask("ping")) == "pong"
    [request] = openai_server.requests
    assert request.path == "/v1/chat/completions"
    assert request.json["model"] == "test-model"
    assert request.json["temperature"] == 0.3 and request.json["max_tokens"] == 1500
    assert request.json["messages"] == [{"role": "user", "content": "ping"}]
    assert request.headers["authorization"] == f"Bearer {KEY}"
    assert request.headers["x-stainless-retry-count"] == "0"  # the client's own retries are off


def test_rate_limit_waits_for_retry_after(openai_server: FakeOpenAI) -> None:
    openai_server.queue(Reply(status=429, headers={"Retry-After": "1"}), Reply(content="done"))
    with LLMClient(settings(openai_server)) as llm:
        assert llm.complete(ask()) == "done"
    first, second = openai_server.requests
    assert second.received - first.received >= 1.0  # the header, not the 10 ms base delay


def test_server_errors_are_retried_then_reported(openai_server: FakeOpenAI) -> None:
    openai_server.queue(Reply(status=500), Reply(status=502), Reply(content="third time"))
    with LLMClient(settings(openai_server)) as llm:
        assert llm.complete(ask()) == "third time"
        assert len(openai_server.requests) == 3
        openai_server.default = Reply(status=503)
        with pytest.raises(LLMError) as caught:
            llm.complete(ask())
    assert (caught.value.reason, caught.value.status, caught.value.attempts) == ("server_error", 503, 4)
    assert len(openai_server.requests) == 3 + 4  # max_retries=3 -> four attempts
    assert isinstance(caught.value, CompactorError) and caught.value.retryable


@pytest.mark.parametrize(("status", "reason"), [(400, "client_error"), (404, "client_error"),
                                                (401, "auth"), (403, "auth")])
def test_other_client_errors_are_not_retried(openai_server: FakeOpenAI, status: int, reason: str) -> None:
    openai_server.default = Reply(status=status)
    with LLMClient(settings(openai_server)) as llm, pytest.raises(LLMError) as caught:
        llm.complete(ask())
    assert (caught.value.reason, caught.value.status) == (reason, status)
    assert f"HTTP {status}" in str(caught.value) and "scripted error" in str(caught.value)
    assert len(openai_server.requests) == 1


def test_timeouts_are_retried_and_reported(openai_server: FakeOpenAI) -> None:
    openai_server.default = Reply(delay=5)
    started = time.monotonic()
    with LLMClient(settings(openai_server, timeout=0.25, max_retries=1)) as llm, \
            pytest.raises(LLMError) as caught:
        llm.complete(ask())
    assert caught.value.reason == "timeout" and caught.value.attempts == 2
    assert len(openai_server.requests) == 2
    assert time.monotonic() - started < 2


def test_connection_errors_are_retried_and_reported() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    s = LLMSettings.from_mapping({"model": "m", "base_url": f"http://127.0.0.1:{port}/v1", "api_key": KEY,
                                  "max_retries": 2, **FAST}, env={})
    with LLMClient(s) as llm, pytest.raises(LLMError) as caught:
        llm.complete(ask())
    assert caught.value.reason == "connection" and caught.value.attempts == 3


@pytest.mark.parametrize(("reply", "message"), [
    (Reply(body="<html>502 Bad Gateway</html>"), "not a chat completion"),
    (Reply(body='{"id": "x", "object": "chat.completion"}'), "no choices"),
    (Reply(body='{"choices": []}'), "no choices"),
    (Reply(content=None), "no message content"),
])
def test_malformed_responses_raise_a_clear_error(openai_server: FakeOpenAI, reply: Reply,
                                                message: str) -> None:
    openai_server.queue(reply)
    with LLMClient(settings(openai_server)) as llm, pytest.raises(LLMError) as caught:
        llm.complete(ask())
    assert caught.value.reason == "malformed"
    assert "malformed response" in str(caught.value) and message in str(caught.value)
    assert len(openai_server.requests) == 1  # a broken body is not worth retrying


def test_the_key_never_appears_in_errors_or_logs(openai_server: FakeOpenAI,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)  # openai's and httpx's debug logs included
    echo = f'{{"error": {{"message": "Incorrect API key provided: {KEY}", "type": "auth"}}}}'
    openai_server.queue(Reply(status=500, body=echo), Reply(status=500, body=echo))
    openai_server.default = Reply(status=401, body=echo)
    s = settings(openai_server, max_retries=2)
    with LLMClient(s) as llm, pytest.raises(LLMError) as caught:
        llm.complete(ask())
    error = caught.value
    assert error.reason == "auth" and error.attempts == 3
    shown = "".join(traceback.format_exception(error)) + repr(error) + str(error.args)
    assert "Incorrect API key provided: ***" in shown
    assert KEY not in shown
    assert "retry 1 of 2" in caplog.text and "HTTP 500" in caplog.text
    assert KEY not in caplog.text
    assert all(r.headers["authorization"] == f"Bearer {KEY}" for r in openai_server.requests)


def test_complete_many_keeps_order_and_bounds_concurrency(openai_server: FakeOpenAI) -> None:
    def respond(request: fake.Recorded) -> Reply:
        prompt = request.prompt
        if prompt == "item 4":
            return Reply(status=400, delay=0.1)
        return Reply(content=f"echo {prompt}", delay=0.15)

    openai_server.respond = respond
    batch = [ask(f"item {i}") for i in range(10)]
    with LLMClient(settings(openai_server, concurrency=3)) as llm:
        started = time.monotonic()
        results = llm.complete_many(batch)
        elapsed = time.monotonic() - started
    assert [r if isinstance(r, str) else r.reason for r in results] == [
        f"echo item {i}" if i != 4 else "client_error" for i in range(10)]
    assert 2 <= openai_server.max_active <= 3
    assert elapsed < 10 * 0.15  # really concurrent
    with LLMClient(settings(openai_server)) as llm:
        assert llm.complete_many([]) == []


# -- the fidelity checker ---------------------------------------------------------------------------

EN_SOURCE = (
    "In 2025 the Orion project, led by Maria Gonzalez at Northwind Labs, served 61,000 users in 12 regions. "
    "Latency fell from 3.50 s to 1.2 s after the March 14, 2026 release of TokenCounter. "
    "Revenue reached $4.1 million, up 18% year on year. Contact ops@northwind.example or see "
    "https://northwind.example/orion for the report."
)


def test_fidelity_passes_faithful_english_paraphrases() -> None:
    paraphrase = (
        "The Orion project (Northwind Labs, lead: Maria Gonzalez) had 61000 users across 12 regions "
        "in 2025.\n"
        "- Latency dropped from 3.5 s to 1.2 s with the TokenCounter release on 14 March 2026.\n"
        "- However, revenue grew 18 percent to 4,100,000 dollars.\n"
        "1. Details: https://northwind.example/orion/ or ops@northwind.example."
    )
    assert invented_facts(paraphrase, EN_SOURCE) == []


def test_fidelity_finds_invented_english_facts() -> None:
    output = ("The Orion project served 75,000 users in 12 regions, said John Smith of Acme "
              "Corp, citing NASA data and the TokenCounterV2 tool (see https://acme.example/x, "
              "press@acme.example) on April 2, 2026; latency fell 40%.")
    assert invented_facts(output, EN_SOURCE) == sorted([
        "75,000", "John Smith", "Acme Corp", "NASA", "TokenCounterV2", "https://acme.example/x",
        "press@acme.example", "April 2, 2026", "40%"])
    kinds = {f.text: f.kind for f in find_invented(output, EN_SOURCE)}
    assert kinds["April 2, 2026"] == "date" and kinds["NASA"] == "name" and kinds["40%"] == "number"


def test_fidelity_ignores_sentence_initial_words_and_headings() -> None:
    source = "revenue grew and costs fell in the third quarter"
    assert invented_facts("## Key Results\nHowever, revenue grew. The costs fell. Overall: good.",
                          source) == []


ZH_SOURCE = ("2026年3月14日，深度求索公司发布了新模型 DeepSeek-V4，训练成本为560万美元，"
             "用户达到35000人，增长35%。《财经》杂志报道称，该模型由 Liang Wenfeng 团队开发。")


def test_fidelity_passes_faithful_chinese_paraphrases() -> None:
    paraphrase = ("据《财经》报道，DeepSeek-V4 于2026年3月14日发布，训练成本560万美元；"
                  "用户3.5万人，增长百分之三十五，由 Liang Wenfeng 团队开发。")
    assert invented_facts(paraphrase, ZH_SOURCE) == []


def test_fidelity_finds_invented_chinese_facts() -> None:
    output = ("2026年4月1日，“月之暗面”发布了 Kimi 模型，训练成本为800万美元，用户增长百分之五十，"
              "由 Liang Wenfeng 团队开发。")
    assert invented_facts(output, ZH_SOURCE) == sorted(
        ["2026年4月1日", "月之暗面", "Kimi", "800万", "百分之五十"])


# -- llm.fallback in a pipeline ---------------------------------------------------------------------

ARTICLE = " ".join(
    f"Finding {i}: in region {i} the Orion service handled {1000 + 37 * i:,} requests per hour "
    f"with a cache hit rate of {50 + i}%." for i in range(40))
GOOD = "Orion handled 1,000 requests per hour in region 0 with a 50% cache hit rate [summary]."
INVENTED = "Orion handled 99,999 requests per hour in region 0, said Jane Doe."


class _Validator(Component):
    """Reports a loss level chosen by the test (stands in for validate.loss)."""

    name = "test.loss"
    stage = "validate"

    def __init__(self, *, level: str = "severe") -> None:
        self.level = level

    @hookimpl
    def compactor_validate(self, context: Any, run: Any) -> dict[str, Any]:
        return {"level": self.level, "retention": 0.1}


class _Plugin:
    def __init__(self, *components: type[Component]) -> None:
        self.components = components

    @hookimpl
    def compactor_register_components(self, register: Any) -> None:
        for component in self.components:
            register(component)


@functools.cache
def _builtin() -> bool:
    return "llm.fallback" in build_registry(env={}).components


def fallback_pipeline(server: FakeOpenAI | None, *, with_: str = "", extra_steps: str = "",
                      llm: str | None = None, env: dict[str, str] | None = None) -> Pipeline:
    """chunk.sentences -> [extra] -> compress.select -> llm.fallback, with the test server as the LLM."""
    if llm is None and server is not None:
        llm = (f"llm:\n  model: test-model\n  base_url: '{server.base_url}'\n  api_key: sk-test-secret\n"
               "  timeout: 2\n  max_retries: 1\n")
    text = ("version: 1\nname: llm-test\n" + (llm or "") + "steps:\n"
            "  - use: chunk.sentences\n    with: {size: 48}\n" + extra_steps +
            "  - use: compress.select\n    with: {order: position}\n"
            "  - use: llm.fallback\n" + (f"    with: {with_}\n" if with_ else ""))
    components: list[type[Component]] = [_Validator]
    if not _builtin():
        components.append(LLMFallback)
    return Pipeline.from_string(text, plugins=[_Plugin(*components)], env=env or {})


def fallback_report(context: Any) -> dict[str, Any]:
    [report] = [r for r in context.reports if r.step == "llm.fallback"]
    return dict(report.details)


def test_accepted_reply_becomes_the_output(openai_server: FakeOpenAI) -> None:
    openai_server.queue(Reply(content=GOOD))
    context = fallback_pipeline(openai_server).run(ARTICLE, budget=80, query="Orion load?")
    assert context.output == GOOD
    [segment] = context.segments
    assert segment.id == "llm-fallback" and segment.metadata["llm"] is True
    assert segment.metadata["model"] == "test-model"
    assert list(segment.chunk_ids) == [c.id for c in context.chunks]  # everything fit the input cap
    details = fallback_report(context)
    assert details["accepted"] is True and details["model"] == "test-model"
    [request] = openai_server.requests
    assert request.json["model"] == "test-model"
    assert request.json["temperature"] == 0.3 and request.json["max_tokens"] == 80  # the budget
    assert request.headers["authorization"] == "Bearer sk-test-secret"
    prompt = request.prompt
    first = context.chunks[0]
    assert f"[{first.id}] {first.text.strip()}" in prompt  # chunk text, traceable by id
    assert "at most 80 tokens" in prompt and "Question: Orion load?" in prompt
    assert "Finding 39" in prompt  # all of the input, not only what the rules kept


def test_invented_number_keeps_the_rule_output(openai_server: FakeOpenAI) -> None:
    openai_server.queue(Reply(content=INVENTED))
    context = fallback_pipeline(openai_server).run(ARTICLE, budget=80)
    assert context.output and "99,999" not in context.output
    assert context.output.startswith("Finding 0:")
    assert all(s.id != "llm-fallback" for s in context.segments)
    details = fallback_report(context)
    assert "99,999" in details["rejected"] and "Jane Doe" in details["rejected"]
    assert details["invented"] == ["99,999", "Jane Doe"]
    assert details["accepted"] is False


def test_reply_over_budget_is_rejected(openai_server: FakeOpenAI) -> None:
    openai_server.queue(Reply(content=" ".join([GOOD] * 10)))
    context = fallback_pipeline(openai_server).run(ARTICLE, budget=80)
    assert "over the budget of 80" in fallback_report(context)["rejected"]
    assert context.output and context.output.startswith("Finding 0:")


def test_server_error_then_success_is_accepted(openai_server: FakeOpenAI) -> None:
    openai_server.queue(Reply(status=500), Reply(content=GOOD))
    context = fallback_pipeline(openai_server).run(ARTICLE, budget=80)
    assert context.output == GOOD
    assert len(openai_server.requests) == 2


def test_timeout_keeps_the_rule_output_and_notes_the_error(openai_server: FakeOpenAI) -> None:
    openai_server.default = Reply(content=GOOD, delay=5)
    llm = (f"llm:\n  model: test-model\n  base_url: '{openai_server.base_url}'\n"
           "  api_key: ${LLM_KEY}\n  timeout: 0.3\n  max_retries: 0\n")
    context = fallback_pipeline(openai_server, llm=llm, env={"LLM_KEY": KEY}).run(ARTICLE, budget=80)
    assert context.output and context.output.startswith("Finding 0:")
    details = fallback_report(context)
    assert details["reason"] == "timeout" and "did not answer" in details["error"]
    assert openai_server.requests[0].headers["authorization"] == f"Bearer {KEY}"  # ${VAR} worked
    assert KEY not in str(details) and KEY not in str(context.reports)


def test_no_llm_configured_declines(openai_server: FakeOpenAI, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENAI_BASE_URL", "OPENAI_API_KEY", "COMPACTOR_LLM_MODEL", "OPENAI_MODEL"):
        monkeypatch.delenv(name, raising=False)
    context = fallback_pipeline(None).run(ARTICLE, budget=80)
    details = fallback_report(context)
    assert details["reason"] == "no LLM configured" and details["declined"]
    assert context.output and context.output.startswith("Finding 0:")
    assert openai_server.requests == []


def test_policies_gate_the_call(openai_server: FakeOpenAI) -> None:
    openai_server.default = Reply(content=GOOD)
    loss = "  - use: test.loss\n    with: {level: %s}\n"
    calm = fallback_pipeline(openai_server, with_="{policy: severe_loss}", extra_steps=loss % "minimal")
    assert "severe loss" in fallback_report(calm.run(ARTICLE, budget=80))["reason"]
    severe = fallback_pipeline(openai_server, with_="{policy: severe_loss}", extra_steps=loss % "severe")
    assert severe.run(ARTICLE, budget=80).output == GOOD
    assert len(openai_server.requests) == 1


# A critical sentence (criticality words, names and identifiers other sentences refer to): the real
# score.importance gives it at least 0.8; nothing in ARTICLE comes near.
ALERT = ("Critical security warning: the Kestrel gateway must never log VAULT_TOKEN, a failed rotation "
         "of VAULT_TOKEN by rotate_keys() caused data loss in Orion and Borealis.")
FOLLOW_UP = "Kestrel, Orion and Borealis now call rotate_keys() hourly to refresh VAULT_TOKEN."
ZH_ARTICLE = "".join(f"第{i}项发现：缓存命中率在第{i}次修改后上升到百分之{50 + i}。" for i in range(40))
ZH_ALERT = ("严重安全警告：Kestrel 网关必须禁止在日志中写入 VAULT_TOKEN，rotate_keys() 失败导致 Orion 和 "
            "Borealis 数据丢失。")
ZH_FOLLOW_UP = "Kestrel、Orion 和 Borealis 现在每小时调用 rotate_keys() 刷新 VAULT_TOKEN。"
ZH_GOOD = "缓存命中率在第0次修改后上升到百分之50。"


@pytest.mark.parametrize(("plain", "critical", "reply"), [
    (ARTICLE, f"{ARTICLE} {ALERT} {FOLLOW_UP}", GOOD),
    (ZH_ARTICLE, ZH_ARTICLE + ZH_ALERT + ZH_FOLLOW_UP, ZH_GOOD),
], ids=["en", "zh"])
def test_important_policy_fires_on_the_real_importance_scorer(openai_server: FakeOpenAI, plain: str,
                                                              critical: str, reply: str) -> None:
    """`policy: important` reads what score.importance stored (under `score.importance`)."""
    openai_server.default = Reply(content=reply)
    pipeline = fallback_pipeline(openai_server, with_="{policy: important}",
                                 extra_steps="  - use: score.importance\n")
    dull = pipeline.run(plain, budget=80)
    assert max(c.scores["score.importance"] for c in dull.chunks) < 0.8
    assert "no chunk is marked critical" in fallback_report(dull)["reason"]
    assert openai_server.requests == []
    vital = pipeline.run(critical, budget=80)
    [alert] = [c for c in vital.chunks if "VAULT_TOKEN" in c.text and "rotate_keys" in c.text
               and ("Critical" in c.text or "严重" in c.text)]
    assert alert.scores["score.importance"] >= 0.8 and not alert.labels  # the score alone decides
    assert "importance" not in alert.scores  # one key, the scorer's component name
    assert vital.output == reply and fallback_report(vital)["accepted"] is True
    assert len(openai_server.requests) == 1


def test_chinese_input_uses_the_chinese_prompt_and_input_cap(openai_server: FakeOpenAI) -> None:
    zh = "".join(f"第{i}项发现：缓存命中率在第{i}次修改后上升到百分之{50 + i}。" for i in range(60))
    reply = "缓存命中率在第0次修改后上升到百分之50。"
    openai_server.queue(Reply(content=reply))
    context = fallback_pipeline(openai_server, with_="{max_input_tokens: 300}").run(zh, budget=60)
    assert context.output == reply
    prompt = openai_server.requests[0].prompt
    assert "你负责" in prompt and "不超过 60 个 token" in prompt
    assert "第0项发现" in prompt and "第59项发现" not in prompt  # capped, the kept chunks first
    assert fallback_report(context)["input_truncated"] is True
    assert 0 < len(context.segments[0].chunk_ids) < len(context.chunks)


def test_custom_prompt_file_and_its_validation(openai_server: FakeOpenAI, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # an inline pipeline's data paths resolve in the working directory
    custom = tmp_path / "prompt.md"
    custom.write_text("Shrink to {budget} tokens for {query}: {content} {not_a_placeholder}",
                      encoding="utf-8")
    openai_server.queue(Reply(content=GOOD))
    p = fallback_pipeline(openai_server, with_="{prompt: prompt.md, language: en}")
    assert p.run(ARTICLE, budget=80, query="load").output == GOOD
    prompt = openai_server.requests[0].prompt
    assert prompt.startswith("Shrink to 80 tokens for load: [") and "{not_a_placeholder}" in prompt
    with pytest.raises(ConfigError, match=r"'missing\.md' not found"):
        fallback_pipeline(openai_server, with_="{prompt: missing.md}")
    with pytest.raises(ConfigError, match="must be a relative path"):
        fallback_pipeline(openai_server, with_=f"{{prompt: '{custom}'}}")
    custom.write_text("no placeholder", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"no \{content\} placeholder"):
        fallback_pipeline(openai_server, with_="{prompt: prompt.md}")
