"""The HTTP side of the remote backend: which URLs are allowed, the client, readable errors.

Code and a bearer token travel to the server, so anything off this machine must be
https (certificates checked against the system's store; SSL_CERT_FILE names another);
plain http is only for the loopback (a server here, or one forwarded with `ssh -L`).
"""

from __future__ import annotations

import asyncio
import ipaddress
import threading
from urllib.parse import urlsplit

import httpx2

from engine.backends.base import BackendError

MAX_CONNECTIONS = 8  # one editor has one request in flight, plus warm-ups, metrics and probes


def is_loopback(host: str) -> bool:
    host = host.strip("[]").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_url(url: str) -> tuple[str, bool]:
    """(base URL without a trailing /v1, whether it is on the loopback); refuses what it must."""
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise BackendError(f"backend URL {url!r} is not an http(s) URL: expected e.g. http://127.0.0.1:8080")
    try:
        parts.port  # noqa: B018 -- reading it is the check: a port out of range raises
    except ValueError:
        raise BackendError(f"backend URL {url!r} has an invalid port") from None
    loopback = is_loopback(parts.hostname)
    if parts.scheme == "http" and not loopback:
        raise BackendError(
            f"backend {url} is off this machine and plain http would send your code and token unencrypted: "
            f"serve it over https (e.g. vLLM --ssl-certfile/--ssl-keyfile, or a TLS proxy in front), "
            f"or forward it here with `ssh -L 8000:localhost:8000 HOST` and use http://127.0.0.1:8000")
    path = parts.path.rstrip("/").removesuffix("/v1")
    return f"{parts.scheme}://{parts.netloc}{path}", loopback


def make_client(base_url: str, api_key: str | None, *, loopback: bool, connect_timeout_s: float) -> httpx2.AsyncClient:
    """Pooled keep-alive HTTP/1.1 connections (what vLLM, SGLang and llama.cpp serve)."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    return httpx2.AsyncClient(
        base_url=base_url, headers=headers,
        timeout=httpx2.Timeout(30.0, connect=connect_timeout_s),
        limits=httpx2.Limits(max_connections=MAX_CONNECTIONS, max_keepalive_connections=4, keepalive_expiry=60.0),
        # Proxy variables are for the world outside: a loopback server is always reached directly.
        trust_env=not loopback,
    )


def transport_message(base_url: str, error: httpx2.TransportError) -> str:
    if isinstance(error, httpx2.ConnectTimeout):
        return f"backend {base_url} did not accept a connection in time"
    if isinstance(error, httpx2.ConnectError):
        reason = str(error) or type(error).__name__
        return f"backend {base_url} is not reachable ({reason}): is the server running?"
    if isinstance(error, httpx2.TimeoutException):
        return f"backend {base_url} stopped answering ({type(error).__name__})"
    return f"backend {base_url}: connection failed ({type(error).__name__}: {str(error)[:200]})"


def http_error_message(base_url: str, path: str, status: int, body: str, api_key: str | None) -> str:
    detail = " ".join(body.split())[:300]
    if status in (401, 403):
        hint = "check the API key (--api-key-env)" if api_key else "it wants an API key: pass --api-key-env VAR"
        return f"backend {base_url} refused the request ({status}): {hint}"
    if status == 404:
        return f"backend {base_url} has no {path} (404): is it an OpenAI-compatible server? {detail}"
    if status == 503:
        return f"backend {base_url} is not ready (503, still loading its model?): {detail}"
    return f"backend {base_url}{path} answered {status}: {detail}"


class IoThread:
    """An asyncio loop on a thread of its own, for the HTTP client and its streams."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self.thread.start()

    def submit(self, coroutine):
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop)

    def call(self, coroutine, timeout: float):
        return self.submit(coroutine).result(timeout)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=5)
