"""Compact and retry once when the provider answers that the request is over the context window.

    >>> client = compactor.with_overflow_retry(openai.OpenAI())          # or window=128_000
    >>> reply = client.chat.completions.create(model=..., messages=messages, tools=[...])
    >>> messages = [*client.last_messages, reply.choices[0].message]     # what was sent, plus the reply

`AutoCompactor` compacts before the window is reached, by its own count of the tokens; a provider
that counts more (another tokenizer, a window smaller than configured, a tool result far larger
than the trigger) still answers "maximum context length exceeded". `with_overflow_retry` wraps an
`openai.OpenAI` or `openai.AsyncOpenAI` client so that such an answer is not the end of the loop:
the messages are compacted with an `AutoCompactor` and the request is sent once more. Anything else
(any other error, a second overflow) reaches the caller as the client raised it.
`is_context_overflow(exc)` is the test it applies; `compact_for_retry` is the compaction, which the
LangChain middleware (`compactor.integrations.langchain`) shares.
"""

from __future__ import annotations

import inspect
import json
import logging
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from compactor.apps.auto import AutoCompactor
from compactor.apps.conversation import CompactedMessages, count_message_tokens
from compactor.errors import BudgetError, InputError
from compactor.text.tokens import TokenCounter, get_counter

log = logging.getLogger(__name__)

#: OpenAI's error code for a request over the context window.
OVERFLOW_CODE = "context_length_exceeded"
#: Phrases of providers' overflow messages (OpenAI and compatible servers, Anthropic's "prompt is
#: too long", the Responses API's "exceeds the context window"), matched lower-cased.
OVERFLOW_PHRASES = ("maximum context length", "context length exceeded", "context_length_exceeded",
                    "prompt is too long", "too many tokens", "reduce the length",
                    "exceeds the context window")
#: HTTP statuses an overflow comes with. A 429 "too many tokens" is a rate limit, not an overflow.
OVERFLOW_STATUSES = (400, 413, 422)
#: A retry compacts to at most this share of what the failed request showed the window to be below.
RETRY_SHARE = 0.5
#: The window and the request's size, as providers state them in an overflow message.
_WINDOW = re.compile(r"(?:maximum context length is|context window of|limit of)\s+(\d[\d,]*)\s+tokens", re.I)
_SENT = re.compile(r"(?:resulted in|you requested)\s+(\d[\d,]*)\s+tokens", re.I)
_ANTHROPIC = re.compile(r"(\d[\d,]*)\s+tokens\s*>\s*(\d[\d,]*)\s+maximum", re.I)


def is_context_overflow(exc: BaseException) -> bool:
    """Whether `exc` is a provider's "the request is over the context window" error.

    True for: OpenAI's `BadRequestError` with code `context_length_exceeded` (`exc.code`, or the
    code in `exc.body` / `exc.body["error"]`); any error whose message (its text or its body's
    message) says "maximum context length", "context length exceeded", "context_length_exceeded",
    "prompt is too long" (Anthropic), "too many tokens", "reduce the length" or "exceeds the context
    window"; LangChain's `ContextOverflowError` (checked by class name, LangChain is not imported).
    An error with an HTTP status (`status_code`, `status`, `response.status_code`) counts only with
    400, 413 or 422, so a rate limit's "too many tokens" is not an overflow. An error raised `from`
    an overflow (its `__cause__`) counts too. Duck-typed: no provider package is needed.
    """
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        status = _status(current)
        if status is None or status in OVERFLOW_STATUSES:
            if any(cls.__name__ == "ContextOverflowError" for cls in type(current).__mro__):
                return True
            if OVERFLOW_CODE in _codes(current):
                return True
            text = _error_text(current).lower()
            if any(phrase in text for phrase in OVERFLOW_PHRASES):
                return True
        current = current.__cause__
    return False


def retry_target(exc: BaseException, tokens: int) -> int:
    """The tokens a retry compacts to after `exc` answered a request of `tokens` (our count).

    Half (`RETRY_SHARE`) of the window the error shows: when it states the window and the request's
    size in the provider's tokens ("maximum context length is 8192 tokens. However, your messages
    resulted in 9000 tokens"; Anthropic's "210000 tokens > 200000 maximum"), the window in our
    tokens (`tokens * window / size`, so another tokenizer does not matter); with the window alone,
    the window; otherwise the failed request's own size, which the window is known to be below.
    Half, as `AutoCompactor` compacts to half its trigger: room for the reply and many more turns.
    """
    window, sent = _stated(exc)
    base = tokens
    if window is not None and sent is not None and sent > window:
        base = min(tokens, tokens * window // sent)
    elif window is not None:
        base = min(tokens, window)
    return max(1, int(base * RETRY_SHARE))


def compact_for_retry(auto: AutoCompactor, messages: Sequence[Any], exc: BaseException, *,
                      extra_tokens: int = 0) -> CompactedMessages | None:
    """`messages` compacted with `auto` for a retry after the overflow `exc`, or None when that
    cannot make the request smaller (nothing to compact, or the system prompt leaves no room: the
    compactor's `BudgetError` is logged). Any other error of the compactor is raised.

    The target is the lower of `auto.target_tokens` and `retry_target(exc, ...)`, so a compactor
    set up for a larger window than the provider's compacts to what the provider accepts; and the
    compaction goes down to that target, not merely under the trigger (`AutoCompactor.compact`'s
    `budget`). The compaction is one of `auto`'s (counted, recorded, its ids expandable); its
    trigger and target are never changed, so other loops sharing `auto` (other threads, other
    tasks) keep compacting at their own settings while a retry runs. `extra_tokens`: what the
    failed request spent outside its messages beyond `auto.tools_tokens` (its tool schemas),
    counted for this retry only (`AutoCompactor.compact`'s `extra_tokens`), for the same reason.
    """
    items = list(messages)
    before = auto.tokens(items, extra_tokens=extra_tokens)
    target = max(1, min(auto.target_tokens, retry_target(exc, before)))
    try:
        compacted = auto.compact(items, tokens_before=before, budget=target, extra_tokens=extra_tokens)
    except BudgetError as error:  # the system prompt alone leaves no room: nothing to retry with
        log.warning("context overflow at %d tokens: no room to compact into (%s)", before, error)
        return None
    after = auto.tokens(compacted, extra_tokens=extra_tokens)
    if after >= before:
        return None
    log.info("context overflow at %d tokens: compacted to %d, retrying once", before, after)
    return compacted


def with_overflow_retry(client: Any, *, compactor: AutoCompactor | None = None, window: int | None = None,
                        target: int | float | None = None, **auto_options: Any) -> OverflowRetry:
    """`client` (an `openai.OpenAI` or `openai.AsyncOpenAI`, or any client shaped like them) with a
    `chat.completions.create` that compacts and retries once on a context overflow.

    The request is sent as it is. When the provider answers a context-length error
    (`is_context_overflow`), the messages are compacted (`compact_for_retry`) and the request is
    sent once more with the compacted messages and every other argument unchanged; its answer (or
    its error, a second overflow included) is what the caller gets. There is never a third
    request. Any other error is raised at once, without compacting. When the compaction cannot make
    the request smaller, the overflow error is raised as it came.

    The compactor: `compactor=` (the loop's own `AutoCompactor`: the retry's compaction joins its
    store, session and counters; its settings are left as they were), or one built from `window=`,
    `target=` and `auto_options` (`reserve`, `trigger`, `keep_last`, `store`, `session`, `llm`,
    ...) as `AutoCompactor` takes them. With neither, no window is known: the compactor is built at
    the first overflow with the failed request's size as its window and `target` (tokens, or a
    fraction of that size; default 0.5) as its target. Whichever it is, a retry compacts to at most
    `retry_target`: half of the window the error states, or half of the failed request (the window
    is below it), since a compactor whose window is too large would not compact far enough.

    `last_messages` on the wrapper holds the messages the last request sent: the caller's list, or
    after a retry the compacted one (a `CompactedMessages`), for the loop to continue from.
    `retries` counts the retries; everything else (`models`, `responses`, `chat.completions.parse`,
    ...) is the client's own, unchanged.
    """
    if compactor is not None:
        if window is not None or target is not None or auto_options:
            raise TypeError("give compactor= or AutoCompactor settings (window=, target=, ...), not both")
        return OverflowRetry(client, compactor, owned=False)
    if window is not None:
        built = AutoCompactor(window, target=0.5 if target is None else target, **auto_options)
        return OverflowRetry(client, built, owned=True)
    if "reserve" in auto_options or "trigger" in auto_options:
        raise TypeError("reserve= and trigger= need window=: without a window, the failed request's "
                        "size stands for it")
    if target is not None and not _valid_target(target):
        raise InputError(f"target must be tokens or a fraction in (0, 1], not {target!r}")
    return OverflowRetry(client, None, owned=True, target=0.5 if target is None else target,
                         options=auto_options)


class OverflowRetry:
    """An OpenAI-style client whose `chat.completions.create` compacts and retries once on a context
    overflow (see `with_overflow_retry`); every other attribute is the wrapped client's.

    `client`: the wrapped client. `auto`: the `AutoCompactor` (None until the first overflow when
    no window was given). `last_messages`: the messages of the last request sent (the last call's:
    concurrent calls on one wrapper overwrite it). `retries`: how many requests were sent again
    after an overflow.
    """

    def __init__(self, client: Any, auto: AutoCompactor | None, *, owned: bool,
                 target: int | float = 0.5, options: Mapping[str, Any] | None = None) -> None:
        try:
            create = client.chat.completions.create
        except AttributeError:
            raise TypeError(f"with_overflow_retry needs an OpenAI-style client (chat.completions.create), "
                            f"not {type(client).__name__}") from None
        self.client = client
        self.auto = auto
        self.last_messages: list[Any] | None = None
        self.retries = 0
        #: A compactor the wrapper built counts each request's tool schemas (at least the configured
        #: `tools_tokens`, which stays its `tools_tokens`: the rest is the retry's `extra_tokens`);
        #: a caller's own compactor is used as it is.
        self._owned = owned
        self._target = target
        self._options = dict(options or {})
        self._configured_tools = auto.tools_tokens if auto is not None else int(
            self._options.pop("tools_tokens", 0) or 0)
        self._is_async = inspect.iscoroutinefunction(inspect.unwrap(create))
        self.chat = _Chat(self)

    def __getattr__(self, name: str) -> Any:
        # only reached for names the wrapper does not define: they are the client's (read from
        # __dict__, so a half-built wrapper, as copy makes them, raises instead of recursing)
        client = self.__dict__.get("client")
        if client is None:
            raise AttributeError(name)
        return getattr(client, name)

    def __repr__(self) -> str:  # the client's type only: its repr could carry a key or a base_url
        return f"OverflowRetry({type(self.client).__name__}, {self.auto!r}, retries={self.retries})"

    def _compactor(self, messages: Sequence[Any], request: Mapping[str, Any]) -> tuple[AutoCompactor, int]:
        """The compactor for this overflow and the request's overhead beyond its `tools_tokens` (its
        tool schemas, for this retry only: concurrent requests may carry other tools); without a
        window, the compactor is built at the first overflow, with the failed request's size as its
        window."""
        if self.auto is not None and not self._owned:
            return self.auto, 0
        encoding = self._options.get("encoding", "cl100k_base")
        counter = self.auto.counter if self.auto is not None else get_counter(encoding)
        extra = max(0, _request_overhead(request, counter) - self._configured_tools)
        if self.auto is None:
            size = max(2, count_message_tokens(messages, encoding) + self._configured_tools + extra)
            target = self._target if isinstance(self._target, float) else min(self._target, size)
            self.auto = AutoCompactor(size, trigger=1.0, target=target, tools_tokens=self._configured_tools,
                                      **self._options)
        return self.auto, extra

    def _retry_messages(self, messages: Sequence[Any], request: Mapping[str, Any],
                        exc: BaseException) -> CompactedMessages | None:
        auto, extra = self._compactor(messages, request)
        return compact_for_retry(auto, messages, exc, extra_tokens=extra)


class _Chat:
    """`client.chat`, with `completions` wrapped."""

    def __init__(self, owner: OverflowRetry) -> None:
        self._owner = owner
        self.completions: _Completions | _AsyncCompletions = (
            _AsyncCompletions(owner) if owner._is_async else _Completions(owner))

    def __getattr__(self, name: str) -> Any:
        return getattr(_owner_of(self).client.chat, name)


class _Completions:
    """`client.chat.completions` whose `create` compacts and retries once on an overflow."""

    def __init__(self, owner: OverflowRetry) -> None:
        self._owner = owner

    def __getattr__(self, name: str) -> Any:
        return getattr(_owner_of(self).client.chat.completions, name)

    def create(self, *, messages: Iterable[Any], **kwargs: Any) -> Any:
        owner = self._owner
        sent = messages if isinstance(messages, list) else list(messages)  # read twice on an overflow
        owner.last_messages = sent
        try:
            return owner.client.chat.completions.create(messages=sent, **kwargs)
        except Exception as exc:
            if not is_context_overflow(exc):
                raise
            failure = exc
            # compacted here, so an error of the compactor's own carries the overflow as its context
            retry = owner._retry_messages(sent, kwargs, exc)
        if retry is None:
            raise failure
        owner.last_messages = retry
        owner.retries += 1
        return owner.client.chat.completions.create(messages=retry, **kwargs)  # its error is the caller's


class _AsyncCompletions:
    """As `_Completions`, for an async client."""

    def __init__(self, owner: OverflowRetry) -> None:
        self._owner = owner

    def __getattr__(self, name: str) -> Any:
        return getattr(_owner_of(self).client.chat.completions, name)

    async def create(self, *, messages: Iterable[Any], **kwargs: Any) -> Any:
        owner = self._owner
        sent = messages if isinstance(messages, list) else list(messages)
        owner.last_messages = sent
        try:
            return await owner.client.chat.completions.create(messages=sent, **kwargs)
        except Exception as exc:
            if not is_context_overflow(exc):
                raise
            failure = exc
            # compacted here, so an error of the compactor's own carries the overflow as its context
            retry = owner._retry_messages(sent, kwargs, exc)
        if retry is None:
            raise failure
        owner.last_messages = retry
        owner.retries += 1
        return await owner.client.chat.completions.create(messages=retry, **kwargs)


def _owner_of(part: Any) -> OverflowRetry:
    """The wrapper a `chat` or `completions` part belongs to (from __dict__: no recursion)."""
    owner = part.__dict__.get("_owner")
    if owner is None:
        raise AttributeError("_owner")
    return owner


def _status(exc: BaseException) -> int | None:
    """The HTTP status an SDK error carries, if any."""
    for value in (getattr(exc, "status_code", None), getattr(exc, "status", None),
                  getattr(getattr(exc, "response", None), "status_code", None)):
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def _bodies(exc: BaseException) -> list[Mapping[str, Any]]:
    """The error's body and the `error` object inside it (OpenAI's SDK keeps the inner one,
    Anthropic's the whole `{"type": "error", "error": {...}}`)."""
    body = getattr(exc, "body", None)
    found: list[Mapping[str, Any]] = []
    if isinstance(body, Mapping):
        found.append(body)
        inner = body.get("error")
        if isinstance(inner, Mapping):
            found.append(inner)
    return found


def _codes(exc: BaseException) -> set[str]:
    codes = {getattr(exc, "code", None), *(b.get("code") for b in _bodies(exc))}
    return {str(c) for c in codes if c is not None}


def _error_text(exc: BaseException) -> str:
    """The error's text and its body's messages."""
    parts = [str(exc), *(str(b["message"]) for b in _bodies(exc) if b.get("message"))]
    return "\n".join(parts)


def _stated(exc: BaseException) -> tuple[int | None, int | None]:
    """(window, request size) as the error's message states them, in the provider's tokens."""
    text = _error_text(exc)
    anthropic = _ANTHROPIC.search(text)
    if anthropic:
        return _number(anthropic.group(2)), _number(anthropic.group(1))
    window, sent = _WINDOW.search(text), _SENT.search(text)
    return (_number(window.group(1)) if window else None, _number(sent.group(1)) if sent else None)


def _number(text: str) -> int | None:
    value = int(text.replace(",", ""))
    return value if value > 0 else None


def _request_overhead(request: Mapping[str, Any], counter: TokenCounter) -> int:
    """Tokens the request spends outside its messages: tool (or function) schemas, a response format."""
    extra = [request[key] for key in ("tools", "functions", "response_format") if request.get(key)]
    return counter.count(json.dumps(extra, ensure_ascii=False, default=str)) if extra else 0


def _valid_target(value: Any) -> bool:
    if isinstance(value, float):
        return 0 < value <= 1
    return isinstance(value, int) and not isinstance(value, bool) and value > 0
