"""The one place that talks to an OpenAI-compatible endpoint, through the real `openai` client.

Retries are ours, not the client's (`max_retries=0` there), so backoff, jitter, `Retry-After` and the
cap on waiting are the same for every endpoint and visible in our logs. The API key never appears in a
repr, a log line or an exception message: every text we produce from a failure is redacted first.

    settings = LLMSettings.from_mapping({"model": "gpt-4o-mini"})      # base_url/key from the env
    with LLMClient(settings) as llm:
        text = llm.complete([{"role": "user", "content": "..."}])
"""

from __future__ import annotations

import email.utils
import json
import logging
import os
import random
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, fields
from typing import Any

from compactor.errors import RETRYABLE, LLMError

log = logging.getLogger(__name__)

Message = Mapping[str, Any]
#: Used when an endpoint needs no key (local servers); the openai client insists on one.
NO_KEY = "no-key"




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

    @classmethod
    def from_mapping(
        cls, values: Mapping[str, Any] | None = None, env: Mapping[str, str] | None = None,
    ) -> LLMSettings:
        """Settings from a mapping like the YAML `llm:` section; missing model, URL and key come from
        `COMPACTOR_LLM_MODEL` / `OPENAI_MODEL`, `OPENAI_BASE_URL` and `OPENAI_API_KEY`."""
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

        return cls(
            model=pick("model", "COMPACTOR_LLM_MODEL", "OPENAI_MODEL"),
            base_url=pick("base_url", "OPENAI_BASE_URL"),
            api_key=pick("api_key", "OPENAI_API_KEY"),
            temperature=number("temperature", float),
            max_tokens=number("max_tokens", int),
            timeout=number("timeout", float),
            max_retries=number("max_retries", int),
            deadline=number("deadline", float),
            concurrency=max(1, number("concurrency", int)),
            retry_base_delay=number("retry_base_delay", float),
            retry_max_delay=number("retry_max_delay", float),
        )

    @property
    def configured(self) -> bool:
        """True when a model is named and there is an endpoint or a key to call it with."""
        return bool(self.model) and bool(self.base_url or self.api_key)

    def redact(self, text: str) -> str:
        """`text` with the API key replaced by `***` (for anything that may be shown or logged)."""
        return redact(text, self.api_key)

    def __repr__(self) -> str:
        key = "'***'" if self.api_key else "None"
        return (f"LLMSettings(model={self.model!r}, base_url={self.base_url!r}, api_key={key}, "
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

                kwargs: dict[str, Any] = {"api_key": self.settings.api_key or NO_KEY,
                                          "timeout": self.settings.timeout, "max_retries": 0}
                if self.settings.base_url:
                    kwargs["base_url"] = self.settings.base_url
                try:
                    self._client = openai.OpenAI(**kwargs)
                except openai.OpenAIError as exc:
                    raise LLMError(self.settings.redact(f"cannot create the OpenAI client: {exc}"),
                                   reason="not_configured") from None
            return self._client

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
            try:
                response = client.chat.completions.create(
                    **request, timeout=settings.timeout if left is None else min(settings.timeout, left))
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
        if isinstance(exc, openai.APITimeoutError):
            return LLMError(f"the LLM endpoint did not answer within {self.settings.timeout:g} s",
                            reason="timeout", attempts=attempt), None
        if isinstance(exc, openai.APIConnectionError):
            cause = exc.__cause__ or exc.__context__
            detail = f": {type(cause).__name__}" if cause is not None else ""
            return LLMError(redact_(f"cannot connect to the LLM endpoint {self.settings.base_url or ''}"
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


__all__ = ["LLMClient", "LLMError", "LLMSettings", "parse_retry_after", "redact"]
