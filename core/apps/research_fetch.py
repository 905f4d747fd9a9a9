"""Fetching a research topic's useful pages in full, in parallel, where one bad page costs only itself.

A fetcher is any callable `url -> text`. `HttpFetcher` is the one for real URLs: httpx with a
timeout, a size cap and a redirect limit, http(s) only, text types only; error statuses and pages
that are an error message rather than content ("404 Not Found", "Access denied", a JavaScript or
captcha wall) raise InputError. `fetch_pages` runs any fetcher over many URLs with bounded
threads and an overall wait per page, and turns every failure into one warning naming the URL.
"""

from __future__ import annotations

import concurrent.futures as cf
import warnings
from collections.abc import Callable, Sequence

import regex

from compactor.errors import CompactorWarning, InputError

Fetcher = Callable[[str], str]

_TAGS = regex.compile(r"(?is)<(script|style)\b.*?</\1\s*>|<[^>]+>")
_ERROR_PAGE = regex.compile(
    r"(?i)\b(?:404|403|500|502|503)\b.{0,40}\b(?:not found|forbidden|error|unavailable)\b"
    r"|\bpage not found\b|\baccess denied\b|\bjust a moment\b|\benable javascript\b"
    r"|\bare you a robot\b|\bcaptcha\b|\bverify you are (?:a )?human\b|\brequest blocked\b"
    r"|页面不存在|找不到页面|访问被拒绝|请开启JavaScript|验证码")
# a page this short (in words, markup removed) that says one of the above is an error message
_ERROR_WORDS = 80


def error_page_reason(text: str) -> str | None:
    """Why `text` is an error page rather than content (None when it looks like content)."""
    plain = " ".join(_TAGS.sub(" ", text).split())
    if not plain:
        return "empty page"
    words = len(plain.split()) if " " in plain else len(plain) // 2
    if words <= _ERROR_WORDS and (found := _ERROR_PAGE.search(plain)):
        return f"error page ({found.group(0)!r})"
    return None


class HttpFetcher:
    """GET a URL over httpx: at most `max_bytes` of a text type, `max_redirects` hops, `timeout`
    seconds per request."""

    def __init__(self, *, timeout: float = 10.0, max_bytes: int = 2_000_000, max_redirects: int = 3,
                 user_agent: str = "compactor-research/1.0") -> None:
        self.timeout = timeout
        self.max_bytes = max_bytes
        self.max_redirects = max_redirects
        self.user_agent = user_agent

    def __repr__(self) -> str:
        return f"HttpFetcher(timeout={self.timeout:g}, max_bytes={self.max_bytes}, " \
               f"max_redirects={self.max_redirects})"

    def __call__(self, url: str) -> str:
        import httpx

        if not url.startswith(("http://", "https://")):
            raise InputError(f"{url}: only http(s) URLs are fetched")
        try:
            with httpx.Client(timeout=self.timeout, follow_redirects=True, max_redirects=self.max_redirects,
                              headers={"User-Agent": self.user_agent}) as client, \
                    client.stream("GET", url) as response:
                if response.status_code >= 400:
                    raise InputError(f"{url}: HTTP {response.status_code}")
                kind = response.headers.get("content-type", "text/html").split(";")[0].strip().lower()
                if not (kind.startswith("text/") or kind in ("application/xhtml+xml", "application/json",
                                                             "application/xml")):
                    raise InputError(f"{url}: not text ({kind})")
                data = bytearray()
                for block in response.iter_bytes():
                    data += block
                    if len(data) > self.max_bytes:
                        raise InputError(f"{url}: larger than {self.max_bytes} bytes")
                text = bytes(data).decode(response.encoding or "utf-8", errors="replace")
        except httpx.TooManyRedirects:
            raise InputError(f"{url}: more than {self.max_redirects} redirects") from None
        except httpx.TimeoutException:
            raise InputError(f"{url}: timed out after {self.timeout:g} s") from None
        except httpx.HTTPError as exc:
            raise InputError(f"{url}: {type(exc).__name__}") from None
        reason = error_page_reason(text)
        if reason:
            raise InputError(f"{url}: {reason}")
        return text


def fetch_pages(urls: Sequence[str], fetch: Fetcher, *, workers: int = 8,
                timeout: float | None = 30.0) -> dict[str, str]:
    """The text of every URL `fetch` could get, fetched in parallel. A fetcher that raises, returns
    something other than text, returns an error page or takes longer than `timeout` seconds costs
    that URL only: one warning names it, and it is missing from the result."""
    urls = list(dict.fromkeys(urls))
    if not urls:
        return {}
    got: dict[str, str] = {}
    pool = cf.ThreadPoolExecutor(max_workers=max(1, min(workers, len(urls))), thread_name_prefix="fetch")
    try:
        futures = {url: pool.submit(fetch, url) for url in urls}
        for url, future in futures.items():
            try:
                text = future.result(timeout=timeout)
            except cf.TimeoutError:
                _warn(url, f"no answer within {timeout:g} s")
                continue
            except Exception as exc:
                detail = (str(exc) if isinstance(exc, InputError)
                          else f"{type(exc).__name__}: {str(exc)[:200]}")
                _warn(url, detail.removeprefix(f"{url}: "))
                continue
            if not isinstance(text, str):
                _warn(url, f"the fetcher returned {type(text).__name__}, not text")
                continue
            reason = error_page_reason(text)
            if reason:
                _warn(url, reason)
                continue
            got[url] = text
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
    return got


def _warn(url: str, why: str) -> None:
    warnings.warn(f"could not fetch {url} ({why}); its search result is kept", CompactorWarning, stacklevel=3)
