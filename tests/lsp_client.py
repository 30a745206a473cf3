"""A real LSP client (pygls) driving a real `quickdraft serve` subprocess, usable from sync tests.

The client's event loop runs in a background thread, so tests (and hypothesis) call
plain methods; each returns when the server has answered.
"""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from typing import Any

from lsprotocol import types
from pygls.lsp.client import LanguageClient

from lsp_server.plain_data import plain_data


class ServerSession:
    def __init__(self, *serve_args: str, initialization_options: dict | None = None,
                 position_encodings: list[str] | None = None) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.statuses: list[dict] = []
        self.logs: list[str] = []
        self.client = LanguageClient("quickdraft-tests", "0")

        @self.client.feature("quickdraft/status")
        def status(ls, params):
            self.statuses.append(plain_data(params))

        @self.client.feature(types.WINDOW_LOG_MESSAGE)
        def log_message(ls, params):
            self.logs.append(params.message)

        self.run(self.client.start_io(sys.executable, "-m", "lsp_server.cli", "serve", *serve_args))
        general = types.GeneralClientCapabilities(position_encodings=position_encodings) if position_encodings else None
        capabilities = types.ClientCapabilities(general=general)
        self.initialize_result = self.run(self.client.initialize_async(types.InitializeParams(
            capabilities=capabilities, initialization_options=initialization_options or {})))
        self.call(self.client.initialized, types.InitializedParams())
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
        self.call(self.client.text_document_did_open, types.DidOpenTextDocumentParams(
            types.TextDocumentItem(uri=uri, language_id=language_id, version=1, text=text)))

    def edit(self, uri: str, start: tuple[int, int], end: tuple[int, int], text: str) -> int:
        self.versions[uri] += 1
        change = types.TextDocumentContentChangePartial(
            range=types.Range(types.Position(*start), types.Position(*end)), text=text)
        self.call(self.client.text_document_did_change, types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=self.versions[uri]),
            content_changes=[change]))
        return self.versions[uri]

    def close(self, uri: str) -> None:
        self.call(self.client.text_document_did_close, types.DidCloseTextDocumentParams(types.TextDocumentIdentifier(uri)))

    # -- requests -----------------------------------------------------------------
    def inline_params(self, uri: str, line: int, character: int) -> types.InlineCompletionParams:
        return types.InlineCompletionParams(
            text_document=types.TextDocumentIdentifier(uri), position=types.Position(line, character),
            context=types.InlineCompletionContext(trigger_kind=types.InlineCompletionTriggerKind.Automatic))

    async def _complete(self, uri: str, line: int, character: int):
        return await self.client.text_document_inline_completion_async(self.inline_params(uri, line, character))

    def start_completion(self, uri: str, line: int, character: int, msg_id: str):
        """Send an inline-completion request with a known id and return its future (see cancel)."""
        async def send():
            return self.client.protocol.send_request(
                types.TEXT_DOCUMENT_INLINE_COMPLETION, self.inline_params(uri, line, character), msg_id=msg_id)
        return self.run(send())

    def cancel(self, msg_id: str) -> None:
        self.notify(types.CANCEL_REQUEST, types.CancelParams(id=msg_id))

    def complete(self, uri: str, line: int, character: int):
        return self.run(self._complete(uri, line, character))

    def request(self, method: str, params: Any = None) -> Any:
        async def send():
            return await self.client.protocol.send_request_async(method, params or {})
        return plain_data(self.run(send()))

    def stats(self) -> dict:
        return self.request("quickdraft/stats")

    def document(self, uri: str) -> dict | None:
        return self.request("quickdraft/document", {"uri": uri})

    def accept(self, item) -> None:
        self.run(self.client.workspace_execute_command_async(types.ExecuteCommandParams(
            command=item.command.command, arguments=list(item.command.arguments))))

    def configure(self, settings: dict) -> None:
        self.call(self.client.workspace_did_change_configuration,
                  types.DidChangeConfigurationParams(settings={"quickdraft": settings}))

    def notify(self, method: str, params: Any) -> None:
        self.call(self.client.protocol.notify, method, params)

    def stop(self) -> None:
        try:
            self.run(self.client.shutdown_async(None), timeout=30)
            self.call(self.client.exit, None)
            self.run(self.client.stop(), timeout=30)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(timeout=10)
