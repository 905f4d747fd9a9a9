"""Keys go only where they are meant to, and are never shown.

The environment's OPENAI_API_KEY is sent only to the endpoint the environment names (OPENAI_BASE_URL, or
api.openai.com without it): a pipeline file naming another host must name its key. No key, written in
the file, taken from `${VAR}` or inside a URL, reaches stderr, a hook trace, a report or --print-config.
"""

from __future__ import annotations

import json
import logging
import socket
from pathlib import Path

import pytest

from compactor import Pipeline
from compactor.llm.client import LLMSettings, describe_key, key_source, redact_text, redact_url
from compactor.ops.cli import main as cli_main
from compactor.pipeline import merged_llm

from ... import openai_server as fake
from ...helpers import run_cli
from ...openai_server import FakeOpenAI, Reply

openai_server = fake.openai_server

ENV_KEY = "sk-env-0123456789abcdef"
FILE_KEY = "sk-file-0123456789abcdef"
URL_KEY = "sk-url-0123456789abcdef"
QUERY_KEY = "sk-query-0123456789abcdef"
TEXT = ("The Orion service handled 1200 requests per hour in region one. The Kestrel cache kept a hit "
        "rate of 93% in region one. Region two moved to the new cluster in March.")
CLEAN = {"OPENAI_API_KEY": "", "OPENAI_BASE_URL": "", "COMPACTOR_LLM_MODEL": "", "OPENAI_MODEL": ""}


def _pipeline(tmp_path: Path, llm: str, name: str = "p.yaml") -> Path:
    path = tmp_path / name
    path.write_text(f"version: 1\nname: cred\nllm:\n{llm}budget: {{max_tokens: 30}}\nsteps:\n"
                    "  - use: chunk.sentences\n  - use: compress.select\n  - use: llm.fallback\n",
                    encoding="utf-8")
    return path


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# -- which key goes where ---------------------------------------------------------------------------


def test_the_environment_key_goes_only_to_the_environment_endpoint() -> None:
    env = {"OPENAI_API_KEY": ENV_KEY}
    elsewhere = LLMSettings.from_mapping({"model": "m", "base_url": "https://collector.example/v1"}, env=env)
    assert elsewhere.api_key is None and elsewhere.key_withheld_for == "https://api.openai.com/v1"
    default = LLMSettings.from_mapping({"model": "m"}, env=env)
    assert default.api_key == ENV_KEY and default.key_withheld_for is None
    named_default = LLMSettings.from_mapping({"model": "m", "base_url": "https://API.openai.com:443/v1/"},
                                             env=env)
    assert named_default.api_key == ENV_KEY
    local = {**env, "OPENAI_BASE_URL": "http://127.0.0.1:8000/v1"}
    assert LLMSettings.from_mapping({"model": "m", "base_url": "http://127.0.0.1:8000/v1"},
                                    env=local).api_key == ENV_KEY
    assert LLMSettings.from_mapping({"model": "m", "base_url": "http://127.0.0.1:8001/v1"},
                                    env=local).api_key is None  # another port is another server
    assert LLMSettings.from_mapping({"model": "m", "base_url": "https://api.openai.com/v1"},
                                    env=local).api_key is None  # the env key is for its own endpoint
    own = LLMSettings.from_mapping({"model": "m", "base_url": "https://x.example/v1", "api_key": FILE_KEY},
                                   env=env)
    assert own.api_key == FILE_KEY
    assert key_source({"base_url": "https://x.example/v1"}, {}) == ("none", "https://x.example/v1")


def test_a_pipeline_naming_another_host_gets_no_env_key(openai_server: FakeOpenAI, tmp_path: Path) -> None:
    openai_server.default = Reply(status=401, content=None)
    path = _pipeline(tmp_path, f"  model: m\n  base_url: '{openai_server.base_url}'\n  max_retries: 0\n")
    result = run_cli(str(path), "-", stdin=TEXT.encode(), env={**CLEAN, "OPENAI_API_KEY": ENV_KEY})
    assert result.returncode == 0, result.stderr
    assert "Orion" in result.stdout  # the rule result stands
    [request] = openai_server.requests
    assert ENV_KEY not in json.dumps(request.headers)
    assert request.headers["authorization"] == "Bearer no-key"
    [warning] = [line for line in result.stderr.splitlines() if "OPENAI_API_KEY is not sent" in line]
    assert openai_server.base_url in warning and "api.openai.com" in warning
    assert ENV_KEY not in result.stderr


def test_the_env_endpoint_and_a_named_key_still_get_their_keys(openai_server: FakeOpenAI,
                                                               tmp_path: Path) -> None:
    openai_server.default = Reply(content="The Orion service handled 1200 requests per hour.")
    path = _pipeline(tmp_path, f"  model: m\n  base_url: '{openai_server.base_url}'\n")
    same = {**CLEAN, "OPENAI_API_KEY": ENV_KEY, "OPENAI_BASE_URL": openai_server.base_url}
    assert run_cli(str(path), "-", stdin=TEXT.encode(), env=same).returncode == 0
    named = _pipeline(tmp_path, f"  model: m\n  base_url: '{openai_server.base_url}'\n"
                      "  api_key: ${MY_KEY}\n", name="named.yaml")
    result = run_cli(str(named), "-", stdin=TEXT.encode(),
                     env={**CLEAN, "OPENAI_API_KEY": ENV_KEY, "MY_KEY": FILE_KEY})
    assert result.returncode == 0, result.stderr
    assert [r.headers["authorization"] for r in openai_server.requests] == [
        f"Bearer {ENV_KEY}", f"Bearer {FILE_KEY}"]


def test_a_run_override_naming_another_host_gets_no_env_key(openai_server: FakeOpenAI,
                                                            monkeypatch: pytest.MonkeyPatch,
                                                            caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", ENV_KEY)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    openai_server.default = Reply(status=401, content=None)
    pipeline = Pipeline.from_string("version: 1\nllm: {model: m, max_retries: 0}\nsteps:\n"
                                    "  - use: chunk.sentences\n  - use: compress.select\n"
                                    "  - use: llm.fallback\n")
    with caplog.at_level(logging.WARNING, logger="compactor"):
        context = pipeline.run(TEXT, budget=30, llm={"base_url": openai_server.base_url})
    assert context.output and "Orion" in context.output
    assert openai_server.requests[0].headers["authorization"] == "Bearer no-key"
    assert ENV_KEY not in caplog.text


def test_check_says_which_host_gets_which_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    def check(path: Path, env: dict[str, str]) -> str:
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        assert cli_main([str(path), "--check"]) == 0
        out, err = capsys.readouterr()
        assert FILE_KEY not in out + err and ENV_KEY not in out + err
        return out

    env = {**CLEAN, "OPENAI_API_KEY": ENV_KEY, "MY_KEY": FILE_KEY}
    named = _pipeline(tmp_path, "  model: m\n  base_url: https://llm.example/v1\n  api_key: ${MY_KEY}\n",
                      name="named.yaml")
    assert "llm: https://llm.example/v1 gets the key from ${MY_KEY}" in check(named, env)
    foreign = _pipeline(tmp_path, "  model: m\n  base_url: https://collector.example/v1\n", name="f.yaml")
    assert "llm: https://collector.example/v1 gets no key (OPENAI_API_KEY is only sent to " \
           "https://api.openai.com/v1" in check(foreign, env)
    default = _pipeline(tmp_path, "  model: m\n", name="d.yaml")
    assert "llm: https://api.openai.com/v1 gets the key from OPENAI_API_KEY" in check(default, env)
    literal = _pipeline(tmp_path, f"  model: m\n  base_url: https://llm.example/v1\n  api_key: {FILE_KEY}\n",
                        name="l.yaml")
    assert "gets the key written in the pipeline file" in check(literal, env)
    result = run_cli(str(foreign), "--check", env=env)  # the same through the console script
    assert result.returncode == 0 and "gets no key" in result.stdout and ENV_KEY not in result.stdout


# -- keys are never shown ---------------------------------------------------------------------------


def test_redact_url_hides_userinfo_and_credential_parameters() -> None:
    url = f"https://user:{URL_KEY}@llm.example:8443/v1?api_key={QUERY_KEY}&model=x&sig=abc123&X-Token=t0k3n"
    shown = redact_url(url)
    assert shown == "https://***@llm.example:8443/v1?api_key=***&model=x&sig=***&X-Token=***"
    assert redact_url("http://127.0.0.1:8000/v1") == "http://127.0.0.1:8000/v1"
    text = redact_text(f"calling {url} with {{'api_key': '{FILE_KEY}'}} and Bearer {ENV_KEY}")
    assert URL_KEY not in text and QUERY_KEY not in text and FILE_KEY not in text and ENV_KEY not in text
    line = describe_key({"model": "m", "base_url": url, "api_key": FILE_KEY}, {}, written="${K}")
    assert line == "llm: https://***@llm.example:8443/v1?api_key=***&model=x&sig=***&X-Token=*** " \
                   "gets the key from ${K}"


def test_hook_traces_never_show_a_key(tmp_path: Path) -> None:
    port = _free_port()  # nothing listens: the LLM step fails fast and the rule output stands
    base = f"http://user:{URL_KEY}@127.0.0.1:{port}/v1?api_key={QUERY_KEY}"
    for name, key_line, env in (("literal.yaml", f"  api_key: {FILE_KEY}\n", {}),
                                ("var.yaml", "  api_key: ${LLM_CRED}\n", {"LLM_CRED": FILE_KEY})):
        path = _pipeline(tmp_path, f"  model: m\n  base_url: '{base}'\n{key_line}  max_retries: 0\n", name)
        result = run_cli(str(path), "-", stdin=TEXT.encode(),
                         env={**CLEAN, **env, "COMPACTOR_TRACE_HOOKS": "1"})
        assert result.returncode == 0, result.stderr
        assert "compactor_chunk" in result.stderr and "api_key" in result.stderr  # the trace is there
        for secret in (FILE_KEY, URL_KEY, QUERY_KEY):
            assert secret not in result.stderr, (name, secret)


def test_a_key_in_base_url_is_never_shown(tmp_path: Path) -> None:
    port = _free_port()
    base = f"http://user:{URL_KEY}@127.0.0.1:{port}/v1?api_key={QUERY_KEY}"
    path = _pipeline(tmp_path, f"  model: m\n  base_url: '{base}'\n  api_key: ${{MY_KEY}}\n"
                     "  max_retries: 1\n")
    env = {**CLEAN, "MY_KEY": FILE_KEY}
    report = tmp_path / "report.json"
    result = run_cli(str(path), "-", "--report", str(report), stdin=TEXT.encode(), env=env)
    assert result.returncode == 0, result.stderr
    assert "retry 1 of 1" in result.stderr and f"http://***@127.0.0.1:{port}/v1?api_key=***" in result.stderr
    config = run_cli(str(path), "--print-config", env=env)
    assert f"base_url: http://***@127.0.0.1:{port}/v1?api_key=***" in config.stdout
    assert "api_key: '***'" in config.stdout
    check = run_cli(str(path), "--check", env=env)
    shown = result.stderr + report.read_text(encoding="utf-8") + config.stdout + config.stderr + check.stdout
    for secret in (FILE_KEY, URL_KEY, QUERY_KEY):
        assert secret not in shown, secret
    html = tmp_path / "report.html"
    assert run_cli(str(path), "-", "--report", str(html), stdin=TEXT.encode(), env=env).returncode == 0
    assert not any(s in html.read_text(encoding="utf-8") for s in (FILE_KEY, URL_KEY, QUERY_KEY))


def test_repr_and_errors_of_settings_hide_url_keys() -> None:
    settings = LLMSettings(model="m", base_url=f"https://u:{URL_KEY}@h.example/v1", api_key=FILE_KEY)
    assert URL_KEY not in repr(settings) and FILE_KEY not in repr(settings)
    assert URL_KEY not in settings.redact(f"failed: https://u:{URL_KEY}@h.example/v1/chat {URL_KEY}")


# -- a run's endpoint override does not inherit the pipeline file's key -----------------------------

PROBE_TEXT = "The Orion probe reached orbit in 2031. It carried four cameras. " * 8


def test_an_override_to_another_host_does_not_inherit_the_files_key(openai_server: FakeOpenAI) -> None:
    spec = {"model": "m", "base_url": "https://llm.example/v1", "api_key": "sk-file"}
    assert "api_key" not in merged_llm(spec, {"base_url": "https://elsewhere.example/v1"})
    assert merged_llm(spec, {"base_url": "https://llm.example/v2"})["api_key"] == "sk-file"  # same server
    assert merged_llm(spec, {"base_url": "https://x.example", "api_key": "sk-x"})["api_key"] == "sk-x"
    assert merged_llm(spec, {"model": "n"})["api_key"] == "sk-file"
    openai_server.default = Reply(status=401, content=None)
    pipeline = Pipeline.from_string("version: 1\nllm: {model: m, api_key: sk-file-key, max_retries: 0}\n"
                                    "steps:\n  - use: chunk.sentences\n  - use: compress.select\n"
                                    "  - use: llm.fallback\n")
    context = pipeline.run(PROBE_TEXT, budget=30, llm={"base_url": openai_server.base_url})
    assert context.output and "Orion" in context.output
    assert all("sk-file-key" not in r.headers.get("authorization", "") for r in openai_server.requests)
    assert openai_server.requests  # the call was made, without the file's key
