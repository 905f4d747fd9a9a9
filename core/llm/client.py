"""The one place that talks to an OpenAI-compatible endpoint, through the real `openai` client.

Retries are ours, not the client's (`max_retries=0` there), so backoff, jitter, `Retry-After` and the
cap on waiting are the same for every endpoint and visible in our logs. The API key never appears in a
repr, a log line or an exception message: every text we produce from a failure is redacted first.

    settings = LLMSettings.from_mapping({"model": "gpt-4o-mini"})      # base_url/key from the env
    with LLMClient(settings) as llm:
        text = llm.complete([{"role": "user", "content": "..."}])
"""

from __future__ import annotations

import contextlib
import email.utils
import functools
import json
import logging
import os
import random
import re
import socket
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, fields
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from compactor.errors import RETRYABLE, LLMError

log = logging.getLogger(__name__)

Message = Mapping[str, Any]
#: Used when an endpoint needs no key (local servers); the openai client insists on one.
NO_KEY = "no-key"
#: Where the openai client sends requests when neither the pipeline nor OPENAI_BASE_URL names a host:
#: the one endpoint besides OPENAI_BASE_URL that the environment's OPENAI_API_KEY is meant for.
DEFAULT_BASE_URL = "https://api.openai.com/v1"

# -- credentials: which key goes where, and keeping keys out of everything shown ------------------

#: Query parameters and mapping keys whose values are credentials.
_SECRET_NAME = re.compile(r"key|token|secret|passw|pwd|sig|auth|credential|session", re.IGNORECASE)
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>`]+")
#: `'api_key': 'sk-...'`, `api_key="..."`, `"token": "..."` in reprs, JSON and YAML-ish text.
_SECRET_PAIR = re.compile(r"""(["']?[\w-]*(?:api[_-]?key|token|secret|password|passwd)["']?\s*[:=]\s*)"""
                          r"""(["'])([^"'\n]+)\2""", re.IGNORECASE)
_BEARER = re.compile(r"(\bBearer\s+)[A-Za-z0-9._~+/=-]+")
#: Environment variables whose values are treated as secrets on stderr and in hook traces.
_SECRET_ENV = re.compile(r"(?:^|_)(?:API_?KEY|KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIALS?)$", re.IGNORECASE)
#: Keys seen in LLM settings in this process (literal or from `${VAR}`): never shown anywhere.
_SECRETS: set[str] = set()
_SECRETS_LOCK = threading.Lock()
#: Endpoints already warned about a withheld key (one warning per endpoint and process).
_WARNED: set[str] = set()


def remember_secret(value: str | None) -> None:
    """Add a credential to those `redact_text` removes from any text (keys shorter than 4
    characters are not credentials worth a redaction that would mangle ordinary words)."""
    if value and value != NO_KEY and len(value) >= 4:
        with _SECRETS_LOCK:
            _SECRETS.add(value)


def redact_url(url: str) -> str:
    """`url` with its userinfo (`user:key@`) and credential-like query values (`api_key=`, `token=`,
    `sig=`...) replaced by `***`: the form in which an endpoint may be shown or logged."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "***"
    netloc = parts.netloc
    if "@" in netloc:
        netloc = "***@" + netloc.rsplit("@", 1)[1]
    query = "&".join(_redact_param(p) for p in parts.query.split("&")) if parts.query else ""
    fragment = "***" if parts.fragment and _SECRET_NAME.search(parts.fragment) else parts.fragment
    return urlunsplit((parts.scheme, netloc, parts.path, query, fragment))


def _redact_param(param: str) -> str:
    name, sep, value = param.partition("=")
    return f"{name}=***" if sep and value and _SECRET_NAME.search(name) else param


def _url_secrets(url: str | None) -> list[str]:
    """The credentials inside a URL (userinfo parts, credential-like query values), as written."""
    if not url:
        return []
    try:
        parts = urlsplit(url)
    except ValueError:
        return [url]
    found = []
    if "@" in parts.netloc:
        userinfo = parts.netloc.rsplit("@", 1)[0]
        found += [userinfo, *userinfo.split(":", 1)]
    for param in parts.query.split("&"):
        name, sep, value = param.partition("=")
        if sep and value and _SECRET_NAME.search(name):
            found.append(value)
    return [f for f in found if len(f) >= 4]


def env_secrets(env: Mapping[str, str] | None = None) -> list[str]:
    """Values of environment variables named like credentials (OPENAI_API_KEY, MY_TOKEN, ...); short
    values are left alone (a credential is long, and redacting a common word would garble text)."""
    env = os.environ if env is None else env
    return [v for k, v in env.items() if _SECRET_ENV.search(k) and len(v.strip()) >= 8]


def redact_text(text: str, secrets: Iterable[str | None] = (), env: Mapping[str, str] | None = None) -> str:
    """`text` as it may be shown: every URL's credentials, `api_key: '...'`-style values, bearer tokens,
    the keys given and the keys of LLM settings seen so far replaced by `***`; with `env`, the values
    of its credential-named variables too (`env_secrets`)."""
    if not text:
        return text
    text = _URL.sub(lambda m: redact_url(m.group(0)), text)
    text = _SECRET_PAIR.sub(lambda m: f"{m.group(1)}{m.group(2)}***{m.group(2)}", text)
    text = _BEARER.sub(r"\1***", text)
    with _SECRETS_LOCK:
        known = set(_SECRETS)
    known.update(s for s in secrets if s)
    if env is not None:
        known.update(env_secrets(env))
    for secret in sorted(known - {NO_KEY}, key=len, reverse=True):  # longest first: no partial leftovers
        text = text.replace(secret, "***")
    return text


def _origin(url: str) -> tuple[str, str, int | None]:
    """(scheme, host, port) of a URL, default ports filled in: what decides whether two base URLs
    are the same server (userinfo and path do not)."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        return ("", url, None)
    scheme = parts.scheme.lower()
    return (scheme, (parts.hostname or "").lower().rstrip("."),
            port if port is not None else {"https": 443, "http": 80}.get(scheme))


def same_endpoint(first: str, second: str) -> bool:
    """Whether two base URLs reach the same server (scheme, host and port)."""
    return _origin(first) == _origin(second)


def key_source(values: Mapping[str, Any] | None, env: Mapping[str, str] | None = None) -> tuple[str, str]:
    """Which key the settings in `values` (a pipeline's `llm:` section, perhaps with a run's
    overrides) send, and to where: (source, endpoint). Source is "pipeline" (an `api_key` in the
    values), "env" (OPENAI_API_KEY), "withheld" (OPENAI_API_KEY is set, but the values name another
    endpoint than the one it is for) or "none".

    The environment's key is meant for the endpoint the environment names (OPENAI_BASE_URL, else the
    provider's default): a pipeline file naming another host must name its key too, so a shared
    pipeline file cannot collect the keys of those who run it."""
    values = values or {}
    env = os.environ if env is None else env
    env_endpoint = env.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL
    named = values.get("base_url")
    endpoint = str(named) if named else env_endpoint
    if values.get("api_key"):
        return "pipeline", endpoint
    if not env.get("OPENAI_API_KEY"):
        return "none", endpoint
    if named and not same_endpoint(str(named), env_endpoint):
        return "withheld", endpoint
    return "env", endpoint


def describe_key(values: Mapping[str, Any] | None, env: Mapping[str, str] | None = None,
                 written: object = None) -> str:
    """One line for `compactor-run --check`: which endpoint gets which key, never the key itself.
    `written` is the `api_key` as the pipeline file spells it (before `${VAR}` is replaced)."""
    env = os.environ if env is None else env
    source, endpoint = key_source(values, env)
    where = redact_url(endpoint)
    if source == "pipeline":
        spelled = str(written) if written is not None else ""
        match = re.fullmatch(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-[^}]*)?\}", spelled.strip())
        if match:
            return f"llm: {where} gets the key from ${{{match.group(1)}}}"
        if "${" in spelled:
            return f"llm: {where} gets a key built from environment variables in the pipeline file"
        return f"llm: {where} gets the key written in the pipeline file (better: api_key: ${{VAR}})"
    if source == "env":
        return f"llm: {where} gets the key from OPENAI_API_KEY"
    if source == "withheld":
        return (f"llm: {where} gets no key (OPENAI_API_KEY is only sent to "
                f"{redact_url(env.get('OPENAI_BASE_URL') or DEFAULT_BASE_URL)}; "
                "name the key in the pipeline: api_key: ${VAR})")
    return f"llm: {where} gets no key"


@dataclass(frozen=True, slots=True, repr=False)
class LLMSettings:
    """Where and how to call the model; built from a pipeline's `llm:` section plus the environment."""

    model: str | None = None
    base_url: str | None = None
    api_key: str | None = None
    temperature: float = 0.3
    max_tokens: int = 1500
    timeout: float = 60.0
    max_retries: int = 3
    #: Overall seconds for all of a step's calls, retries and waits included; past it the rule
    #: output is kept. Each call's timeout is cut to what is left. None or 0: no deadline.
    deadline: float | None = 30.0
    concurrency: int = 4
    #: First backoff delay in seconds (doubled per retry, with jitter); small in tests.
    retry_base_delay: float = 0.5
    #: No single wait is longer than this, whatever `Retry-After` asks.
    retry_max_delay: float = 30.0
    #: The endpoint OPENAI_API_KEY is for, when that key was not sent because `base_url` names another.
    key_withheld_for: str | None = field(default=None, compare=False)

    @classmethod
    def from_mapping(
        cls, values: Mapping[str, Any] | None = None, env: Mapping[str, str] | None = None,
    ) -> LLMSettings:
        """Settings from a mapping like the YAML `llm:` section; missing model, URL and key come from
        `COMPACTOR_LLM_MODEL` / `OPENAI_MODEL`, `OPENAI_BASE_URL` and `OPENAI_API_KEY`. OPENAI_API_KEY
        is only used for the endpoint the environment names (see `key_source`)."""
        values = dict(values or {})
        env = os.environ if env is None else env
        defaults = {f.name: f.default for f in fields(cls)}

        def pick(key: str, *names: str) -> str | None:
            value = values.get(key)
            if value:
                return str(value)
            for name in names:
                if env.get(name):
                    return env[name]
            return None

        def number(key: str, kind: Callable[[Any], Any]) -> Any:
            value = values.get(key)
            return defaults[key] if value is None else kind(value)

        source, _ = key_source(values, env)
        api_key = {"pipeline": values.get("api_key"), "env": env.get("OPENAI_API_KEY")}.get(source)
        api_key = str(api_key) if api_key else None
        remember_secret(api_key)
        for secret in _url_secrets(pick("base_url", "OPENAI_BASE_URL")):
            remember_secret(secret)
        return cls(
            model=pick("model", "COMPACTOR_LLM_MODEL", "OPENAI_MODEL"),
            base_url=pick("base_url", "OPENAI_BASE_URL"),
            api_key=api_key,
            temperature=number("temperature", float),
            max_tokens=number("max_tokens", int),
            timeout=number("timeout", float),
            max_retries=number("max_retries", int),
            deadline=number("deadline", float),
            concurrency=max(1, number("concurrency", int)),
            retry_base_delay=number("retry_base_delay", float),
            retry_max_delay=number("retry_max_delay", float),
            key_withheld_for=(env.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL) if source == "withheld"
            else None,
        )

    @property
    def configured(self) -> bool:
        """True when a model is named and there is an endpoint or a key to call it with."""
        return bool(self.model) and bool(self.base_url or self.api_key)

    def redact(self, text: str) -> str:
        """`text` with the API key, and any credential inside URLs, replaced by `***` (for anything
        that may be shown or logged)."""
        return redact_text(text, [self.api_key, *_url_secrets(self.base_url)])

    @property
    def shown_url(self) -> str:
        """The endpoint as it may be shown (credentials in the URL redacted)."""
        return redact_url(self.base_url or DEFAULT_BASE_URL)

    def __repr__(self) -> str:
        key = "'***'" if self.api_key else "None"
        url = repr(redact_url(self.base_url)) if self.base_url else "None"
        return (f"LLMSettings(model={self.model!r}, base_url={url}, api_key={key}, "
                f"temperature={self.temperature!r}, max_tokens={self.max_tokens!r}, "
                f"timeout={self.timeout!r}, max_retries={self.max_retries!r}, "
                f"concurrency={self.concurrency!r})")

    __str__ = __repr__


def redact(text: str, secret: str | None) -> str:
    """Replace every occurrence of `secret` in `text` (no-op for empty secrets)."""
    if secret and secret != NO_KEY:
        text = text.replace(secret, "***")
    return text


def parse_retry_after(headers: Mapping[str, str] | None, now: float | None = None) -> float | None:
    """Seconds to wait from `Retry-After` (seconds or an HTTP date) or `retry-after-ms`; None if absent."""
    if not headers:
        return None
    millis = headers.get("retry-after-ms")
    if millis is not None:
        try:
            return max(0.0, float(millis) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        if when is None:
            return None
        seconds = when.timestamp() - (time.time() if now is None else now)
    if seconds != seconds:  # NaN
        return None
    return max(0.0, seconds)


# -- a wall-clock limit on each call ----------------------------------------------------------------
# The HTTP client's read timeout restarts with every byte, so an endpoint that sends its headers and
# then a byte a second keeps a call alive for minutes. Each call therefore runs in a worker thread the
# caller waits on for the call's limit; past it the caller goes on, and the connection is shut down so
# the worker ends at once instead of reading the rest of the trickle.

_CALL = threading.local()


class OutOfTime(Exception):
    """A call that was still running (connecting, waiting or reading the body) at its limit."""

    def __init__(self, limit: float) -> None:
        super().__init__(f"the LLM endpoint did not answer within {limit:g} s")


class _Connections:
    """The sockets one call uses, so the caller can cut them off when the call runs out of time."""

    def __init__(self) -> None:
        self._sockets: list[socket.socket] = []
        self._cut = False
        self._lock = threading.Lock()

    def add(self, sock: socket.socket) -> None:
        with self._lock:
            self._sockets.append(sock)
            cut = self._cut
        if cut:  # the answer's headers came after the caller gave up
            _shut(sock)

    def cut(self) -> None:
        with self._lock:
            self._cut = True
            sockets = list(self._sockets)
        for sock in sockets:
            _shut(sock)


def _shut(sock: socket.socket) -> None:
    """Shut a socket down: a read blocked on it (in the worker thread) returns at once."""
    with contextlib.suppress(OSError):  # already closed
        sock.shutdown(socket.SHUT_RDWR)


def _note_connection(response: Any) -> None:
    """HTTP client response hook (headers received, body not read yet): remember the call's socket."""
    connections = getattr(_CALL, "connections", None)
    stream = getattr(response, "extensions", {}).get("network_stream")
    get_info = getattr(stream, "get_extra_info", None)
    sock = get_info("socket") if get_info is not None else None
    if connections is not None and isinstance(sock, socket.socket):
        connections.add(sock)


def run_within(limit: float, call: Callable[[], Any]) -> Any:
    """`call()`'s result or exception, or OutOfTime once `limit` seconds have passed, whatever the
    endpoint does meanwhile (the call's connections are then shut down)."""
    done = threading.Event()
    box: dict[str, Any] = {}
    connections = _Connections()

    def work() -> None:
        _CALL.connections = connections
        try:
            box["value"] = call()
        except BaseException as exc:
            box["error"] = exc
        finally:
            _CALL.connections = None
            done.set()

    threading.Thread(target=work, name="compactor-llm-call", daemon=True).start()
    if not done.wait(limit):
        connections.cut()
        raise OutOfTime(limit)
    if "error" in box:
        raise box["error"]
    return box["value"]


class LLMClient:
    """Chat completions with our own retries, and many at once with bounded concurrency."""

    def __init__(self, settings: LLMSettings, *, sleep: Callable[[float], None] = time.sleep,
                 deadline_at: float | None = None) -> None:
        self.settings = settings
        self._sleep = sleep
        #: monotonic time by which every call must be done (a step's deadline, shared by its calls)
        if deadline_at is None and settings.deadline:
            deadline_at = time.monotonic() + settings.deadline
        self.deadline_at = deadline_at
        self._client: Any = None
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"LLMClient({self.settings!r})"

    # -- lifecycle -------------------------------------------------------------------------

    def _openai(self) -> Any:
        with self._lock:
            if self._client is None:
                import openai

                self._warn_withheld()
                kwargs: dict[str, Any] = {
                    "api_key": self.settings.api_key or NO_KEY, "timeout": self.settings.timeout,
                    "max_retries": 0,
                    "http_client": openai.DefaultHttpxClient(event_hooks={"response": [_note_connection]})}
                if self.settings.base_url:
                    kwargs["base_url"] = self.settings.base_url
                try:
                    self._client = openai.OpenAI(**kwargs)
                except openai.OpenAIError as exc:
                    raise LLMError(self.settings.redact(f"cannot create the OpenAI client: {exc}"),
                                   reason="not_configured") from None
            return self._client

    def _warn_withheld(self) -> None:
        """Say once per endpoint why a call goes without the environment's key."""
        settings = self.settings
        if settings.key_withheld_for is None or settings.shown_url in _WARNED:
            return
        _WARNED.add(settings.shown_url)
        log.warning("compactor: OPENAI_API_KEY is not sent to %s: it is for %s; the LLM call goes without "
                    "a key (name one in the pipeline's llm section, api_key: ${VAR}, to send it)",
                    settings.shown_url, redact_url(settings.key_withheld_for))

    def close(self) -> None:
        """Close the HTTP connections (also done by `with LLMClient(...)`)."""
        with self._lock:
            if self._client is not None:
                self._client.close()
                self._client = None

    def __enter__(self) -> LLMClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- calls -----------------------------------------------------------------------------

    def complete(
        self, messages: Sequence[Message], *, temperature: float | None = None,
        max_tokens: int | None = None,
    ) -> str:
        """The assistant's reply text; retries rate limits, 5xx, timeouts and connection errors."""
        settings = self.settings
        if not settings.model:
            raise LLMError("no LLM model configured (set llm.model or COMPACTOR_LLM_MODEL)",
                           reason="not_configured")
        client = self._openai()
        request = {
            "model": settings.model,
            "messages": [dict(m) for m in messages],
            "temperature": settings.temperature if temperature is None else temperature,
            "max_tokens": settings.max_tokens if max_tokens is None else max_tokens,
        }
        attempts = settings.max_retries + 1
        for attempt in range(1, attempts + 1):
            left = self._left(attempt)
            limit = settings.timeout if left is None else min(settings.timeout, left)
            try:  # the limit holds for the whole call, however slowly the endpoint sends its answer
                response = run_within(limit, functools.partial(client.chat.completions.create, **request,
                                                               timeout=limit))
                return _reply_text(response)
            except LLMError as exc:
                exc.attempts = attempt
                raise
            except Exception as exc:
                error, retry_after = self._classify(exc, attempt)
                if not error.retryable or attempt >= attempts:
                    log.warning("LLM call to %s failed after %d attempt(s): %s", settings.model,
                                attempt, error)
                    raise error from None
                wait = self._delay(attempt, retry_after)
                left = self._left(attempt + 1, wait)
                log.warning("LLM call to %s failed (%s); retry %d of %d in %.2f s", settings.model,
                            error, attempt, settings.max_retries, wait)
                self._sleep(wait)
        raise AssertionError("unreachable")  # pragma: no cover

    def complete_many(
        self, batch: Sequence[Sequence[Message]], *, temperature: float | None = None,
        max_tokens: int | Sequence[int | None] | None = None,
    ) -> list[str | LLMError]:
        """One reply (or the LLMError it ended with) per message list, in input order, with at most
        `concurrency` calls in flight. `max_tokens` is one limit for all, or one per message list
        (each request's own allowance; None means `settings.max_tokens`)."""
        if not batch:
            return []
        if max_tokens is None or isinstance(max_tokens, int):
            limits: list[int | None] = [max_tokens] * len(batch)
        else:
            limits = list(max_tokens)
            if len(limits) != len(batch):
                raise ValueError(f"{len(limits)} max_tokens for {len(batch)} requests")

        def one(job: tuple[Sequence[Message], int | None]) -> str | LLMError:
            try:
                return self.complete(job[0], temperature=temperature, max_tokens=job[1])
            except LLMError as exc:
                return exc

        jobs = list(zip(batch, limits, strict=True))
        workers = min(self.settings.concurrency, len(batch))
        if workers <= 1:
            return [one(j) for j in jobs]
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="compactor-llm") as pool:
            return list(pool.map(one, jobs))

    # -- helpers ---------------------------------------------------------------------------

    def _left(self, attempt: int, wait: float = 0.0) -> float | None:
        """Seconds left before the deadline after waiting `wait`; LLMError when none are."""
        if self.deadline_at is None:
            return None
        left = self.deadline_at - time.monotonic() - wait
        if left <= 0.05:
            raise LLMError(f"the step's LLM deadline of {self.settings.deadline:g} s passed "
                           f"(attempt {attempt - 1} of {self.settings.max_retries + 1})",
                           reason="deadline", attempts=max(1, attempt - 1))
        return left

    def _delay(self, attempt: int, retry_after: float | None) -> float:
        """`Retry-After` when the server sent one, else exponential backoff with jitter; capped."""
        cap = self.settings.retry_max_delay
        if retry_after is not None:
            return min(cap, retry_after)
        backoff = min(cap, self.settings.retry_base_delay * 2 ** (attempt - 1))
        return backoff * random.uniform(0.5, 1.0)

    def _classify(self, exc: Exception, attempt: int) -> tuple[LLMError, float | None]:
        """Turn whatever the client raised into a redacted LLMError and the server's Retry-After."""
        import openai

        redact_ = self.settings.redact
        if isinstance(exc, OutOfTime):
            return LLMError(str(exc), reason="timeout", attempts=attempt), None
        if isinstance(exc, openai.APITimeoutError):
            return LLMError(f"the LLM endpoint did not answer within {self.settings.timeout:g} s",
                            reason="timeout", attempts=attempt), None
        if isinstance(exc, openai.APIConnectionError):
            cause = exc.__cause__ or exc.__context__
            detail = f": {type(cause).__name__}" if cause is not None else ""
            return LLMError(redact_(f"cannot connect to the LLM endpoint {self.settings.shown_url}"
                                    f"{detail}"), reason="connection", attempts=attempt), None
        if isinstance(exc, openai.APIStatusError):
            status = exc.status_code
            if status == 429:
                reason = "rate_limited"
            elif status >= 500:
                reason = "server_error"
            elif status in (401, 403):
                reason = "auth"
            else:
                reason = "client_error"
            detail = _error_detail(exc.body) or exc.message
            message = redact_(f"HTTP {status} from the LLM endpoint: {detail}")[:500]
            retry_after = parse_retry_after(exc.response.headers) if reason in RETRYABLE else None
            return LLMError(message, reason=reason, status=status, attempts=attempt), retry_after
        if isinstance(exc, openai.APIResponseValidationError | ValueError):
            return LLMError(redact_(f"malformed response from the LLM endpoint (not a chat completion): "
                                    f"{type(exc).__name__}: {exc}")[:500],
                            reason="malformed", attempts=attempt), None
        return LLMError(redact_(f"LLM call failed: {type(exc).__name__}: {exc}")[:500],
                        reason="error", attempts=attempt), None


def _error_detail(body: object) -> str | None:
    """The human part of an OpenAI-style error body."""
    if isinstance(body, Mapping):
        inner = body.get("error", body)
        if isinstance(inner, Mapping) and inner.get("message"):
            return str(inner["message"])
        return json.dumps(body, default=str)[:300]
    if isinstance(body, str | bytes):
        return (body.decode("utf-8", "replace") if isinstance(body, bytes) else body)[:300]
    return None


def _reply_text(response: Any) -> str:
    """The first choice's message content, or an LLMError saying what is missing."""
    choices = getattr(response, "choices", None)
    if not isinstance(choices, list) or not choices:
        kind = type(response).__name__
        raise LLMError(f"malformed response from the LLM endpoint: no choices ({kind})",
                       reason="malformed")
    message = getattr(choices[0], "message", None)
    content = getattr(message, "content", None)
    if not isinstance(content, str):
        refusal = getattr(message, "refusal", None)
        extra = f" (refusal: {refusal})" if refusal else ""
        raise LLMError(f"malformed response from the LLM endpoint: the first choice has no message "
                       f"content{extra}", reason="malformed")
    return content


__all__ = ["DEFAULT_BASE_URL", "LLMClient", "LLMError", "LLMSettings", "describe_key", "key_source",
           "parse_retry_after", "redact", "redact_text", "redact_url", "remember_secret", "same_endpoint"]
