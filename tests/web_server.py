"""A real HTTP server on 127.0.0.1 for the research agent's network faces (Tavily search, page
fetching): each path answers with a scripted `Page` (status, body, headers, delay); every request is
recorded with its headers and JSON body."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest


@dataclass(frozen=True)
class Page:
    """One scripted answer."""

    body: bytes | str = ""
    status: int = 200
    content_type: str = "text/html; charset=utf-8"
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0

    @classmethod
    def json(cls, data: Any, status: int = 200) -> Page:
        return cls(json.dumps(data), status, "application/json")


class LocalWeb:
    """The server, its pages by path and its journal of (method, path, headers, body)."""

    def __init__(self) -> None:
        self.pages: dict[str, Page] = {}
        self.requests: list[tuple[str, str, dict[str, str], Any]] = []
        self._stop = threading.Event()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._httpd.daemon_threads = True
        self._httpd.handle_error = lambda request, address: None  # type: ignore[method-assign]
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        daemon=True)

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def __enter__(self) -> LocalWeb:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)


def _handler(web: LocalWeb) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            self._serve(None)

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                body = json.loads(raw or b"null")
            except json.JSONDecodeError:
                body = raw.decode("utf-8", "replace")
            self._serve(body)

        def _serve(self, body: Any) -> None:
            web.requests.append((self.command, self.path, {k.lower(): v for k, v in self.headers.items()},
                                 body))
            page = web.pages.get(self.path, Page("not found", 404, "text/plain"))
            if page.delay and web._stop.wait(page.delay):
                return
            data = page.body.encode("utf-8") if isinstance(page.body, str) else page.body
            try:
                self.send_response(page.status)
                self.send_header("Content-Type", page.content_type)
                self.send_header("Content-Length", str(len(data)))
                for key, value in page.headers.items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(data)
            except OSError:  # the client gave up
                pass

    return Handler


@pytest.fixture
def local_web() -> Iterator[LocalWeb]:
    with LocalWeb() as web:
        yield web
