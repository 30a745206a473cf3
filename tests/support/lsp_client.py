"""The headless client (lsp_server.client) driving a real `quickdraft serve` subprocess,
usable from synchronous tests.

The client's event loop runs in a background thread, so tests (and hypothesis) call
plain methods; each returns when the server has answered.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

from lsprotocol import types

from lsp_server.client import QuickdraftClient


class ServerSession:
    def __init__(self, *serve_args: str, initialization_options: dict | None = None,
                 position_encodings: list[str] | None = None) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.lsp = QuickdraftClient("quickdraft-tests")
        self.client = self.lsp.client  # the pygls LanguageClient, for tests that speak raw LSP
        self.statuses = self.lsp.statuses
        self.logs = self.lsp.logs
        self.initialize_result = self.run(self.lsp.start(
            list(serve_args), initialization_options=initialization_options, position_encodings=position_encodings))
        self.versions: dict[str, int] = {}

    def run(self, coroutine, timeout: float = 120):
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout)

    def call(self, function, *args):
        """Run a plain client method (a notification) on the client's loop, in order with requests."""
        async def invoke():
            return function(*args)
        return self.run(invoke())

    def submit(self, coroutine):
        """Start a coroutine without waiting (for concurrent requests)."""
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop)

    def wait_for_state(self, *states: str, timeout: float = 120) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for status in reversed(self.statuses):
                if status.get("state") in states:
                    return status
            time.sleep(0.05)
        raise TimeoutError(f"server never reached {states}; statuses: {self.statuses}")

    # -- documents ----------------------------------------------------------------
    def open(self, uri: str, text: str, language_id: str = "python") -> None:
        self.versions[uri] = 1
        self.call(self.lsp.open, uri, text, 1, language_id)

    def edit(self, uri: str, start: tuple[int, int], end: tuple[int, int], text: str) -> int:
        self.versions[uri] += 1
        self.call(self.lsp.change, uri, self.versions[uri], types.Position(*start), types.Position(*end), text)
        return self.versions[uri]

    def close(self, uri: str) -> None:
        self.call(self.lsp.close, uri)

    # -- requests -----------------------------------------------------------------
    async def _complete(self, uri: str, line: int, character: int):
        return await self.lsp.complete(uri, types.Position(line, character))

    def start_completion(self, uri: str, line: int, character: int, msg_id: str):
        """Send an inline-completion request with a known id and return its future (see cancel)."""
        async def send():
            return self.lsp.send_completion(uri, types.Position(line, character), msg_id)
        return self.run(send())

    def cancel(self, msg_id: str) -> None:
        self.call(self.lsp.cancel, msg_id)

    def complete(self, uri: str, line: int, character: int):
        return self.run(self._complete(uri, line, character))

    def request(self, method: str, params: Any = None) -> Any:
        return self.run(self.lsp.request(method, params))

    def stats(self) -> dict:
        return self.request("quickdraft/stats")

    def document(self, uri: str) -> dict | None:
        return self.request("quickdraft/document", {"uri": uri})

    def accept(self, item) -> None:
        self.run(self.lsp.execute_command(item.command))

    def configure(self, settings: dict) -> None:
        self.call(self.lsp.configure, settings)

    def notify(self, method: str, params: Any) -> None:
        self.call(self.lsp.notify, method, params)

    def stop(self) -> None:
        try:
            self.run(self.lsp.stop(check=True), timeout=100)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(timeout=10)
