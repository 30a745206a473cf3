"""A headless LSP client that drives a real `quickdraft serve` process over stdio.

One client for everything that talks to the server from outside: `quickdraft demo`, the
session benchmark (lsp_server/bench/) and the tests (tests/support/lsp_client.py runs it
on a background event loop for synchronous tests). It speaks plain LSP plus quickdraft's
custom messages (`quickdraft/status` in, `quickdraft/stats` out). No tensors here.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import sys
import uuid
from typing import Any, Callable

from lsprotocol import types
from pygls.lsp.client import LanguageClient

from lsp_server.wire.plain_data import plain_data

log = logging.getLogger(__name__)

LANGUAGE_IDS = {".py": "python", ".js": "javascript", ".ts": "typescript", ".go": "go", ".rs": "rust"}


def language_id(uri: str) -> str:
    return LANGUAGE_IDS.get(os.path.splitext(uri)[1], "plaintext")


def utf16_len(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


def position_after(text_before: str) -> types.Position:
    """The LSP position (UTF-16 columns) of the end of `text_before`."""
    line = text_before.count("\n")
    column = text_before[text_before.rfind("\n") + 1:]
    return types.Position(line=line, character=utf16_len(column))


def serve_args(**flags: Any) -> list[str]:
    """`quickdraft serve` flags from keyword arguments (verifier="x" → --verifier x); None is left out."""
    args: list[str] = []
    for name, value in flags.items():
        if value is not None:
            args += ["--" + name.replace("_", "-"), str(value)]
    return args


def server_key(uri: str, version, *, kept: bool = False) -> tuple[str, str]:
    """Where `server_records` keeps the server's record of a request: by document version, and
    apart for an answer served kept (asked again at the same version after completionReady),
    which must not hide the model's record of the first request."""
    return uri, f"{version}/kept" if kept else str(version)


class QuickdraftClient:
    """One `quickdraft serve` subprocess and the pygls client talking to it.

    Notifications (open, change, close, cancel) are plain methods; requests are coroutines,
    or futures where the caller wants to cancel them (`send_completion`).
    """

    def __init__(self, name: str = "quickdraft-client") -> None:
        self.client = LanguageClient(name, "0.1")
        self.statuses: list[dict] = []
        self.logs: list[str] = []
        self.initialize_result: types.InitializeResult | None = None
        # The server's per-request records seen in `stats()`, by (uri, document version).
        self.server_records: dict[tuple[str, str], dict] = {}
        self._loaded: asyncio.Event | None = None

        @self.client.feature("quickdraft/status")
        def on_status(ls, params) -> None:
            status = plain_data(params)
            self.statuses.append(status if isinstance(status, dict) else {})
            if self.statuses[-1].get("state") in ("ready", "error") and self._loaded is not None:
                self._loaded.set()

        # Called with (uri, version, position) when the server says a kept answer is ready.
        self.on_ready: Callable[[str, int, types.Position], None] | None = None

        @self.client.feature("quickdraft/completionReady")
        def on_completion_ready(ls, params) -> None:
            data = plain_data(params)
            try:
                uri, version = data["textDocument"]["uri"], data["textDocument"]["version"]
                position = types.Position(line=data["position"]["line"], character=data["position"]["character"])
            except (KeyError, TypeError):
                log.warning("malformed quickdraft/completionReady: %r", data)
                return
            if self.on_ready is not None:
                self.on_ready(uri, version, position)

        @self.client.feature(types.WINDOW_LOG_MESSAGE)
        def on_log(ls, params) -> None:
            self.logs.append(params.message)
            log.debug("server: %s", params.message)

    # -- lifetime -------------------------------------------------------------------
    async def start(self, args: list[str], *, initialization_options: dict | None = None,
                    position_encodings: list[str] | None = None) -> types.InitializeResult:
        """Start `quickdraft serve ARGS` and run the initialize handshake (models load after it)."""
        self._loaded = asyncio.Event()
        await self.client.start_io(sys.executable, "-m", "lsp_server.cli", "serve", *args)
        general = types.GeneralClientCapabilities(position_encodings=position_encodings) if position_encodings else None
        self.initialize_result = await self.client.initialize_async(types.InitializeParams(
            capabilities=types.ClientCapabilities(general=general), initialization_options=initialization_options or {}))
        self.client.initialized(types.InitializedParams())
        return self.initialize_result

    async def wait_until_loaded(self, timeout_s: float) -> dict:
        """The server's status once its models are loaded; RuntimeError if loading failed or took too long."""
        assert self._loaded is not None, "start() first"
        try:
            await asyncio.wait_for(self._loaded.wait(), timeout_s)
        except asyncio.TimeoutError as error:
            raise RuntimeError(f"the server did not load its models within {timeout_s:.0f} s; "
                               f"statuses: {self.statuses}") from error
        status = next(s for s in reversed(self.statuses) if s.get("state") in ("ready", "error"))
        if status.get("state") == "error":
            raise RuntimeError(f"the server could not load its models: {status.get('message')}")
        return status

    async def stop(self, *, check: bool = False) -> None:
        """Shut the server down and reap it. check=False: a server that died already is only
        logged (a benchmark still has its figures); check=True (tests): that is an error."""
        failure: Exception | None = None
        try:
            await asyncio.wait_for(self.client.shutdown_async(None), 60)
            self.client.exit(None)
        except Exception as error:
            failure = error
            log.warning("server shutdown: %s", error)
        try:
            await asyncio.wait_for(self.client.stop(), 30)
        except Exception as error:
            failure = failure or error
            log.warning("client stop: %s", error)
        if check and failure is not None:
            raise failure

    # -- documents ------------------------------------------------------------------
    def open(self, uri: str, text: str, version: int = 1, language: str | None = None) -> None:
        self.client.text_document_did_open(types.DidOpenTextDocumentParams(types.TextDocumentItem(
            uri=uri, language_id=language or language_id(uri), version=version, text=text)))

    def change(self, uri: str, version: int, start: types.Position, end: types.Position, text: str) -> None:
        self.client.text_document_did_change(types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
            content_changes=[types.TextDocumentContentChangePartial(range=types.Range(start, end), text=text)]))

    def close(self, uri: str) -> None:
        self.client.text_document_did_close(types.DidCloseTextDocumentParams(types.TextDocumentIdentifier(uri)))

    def cursor(self, uri: str, position: types.Position) -> None:
        """Where the user's cursor is now, as the VS Code and Neovim clients say it (cache warming)."""
        self.notify("quickdraft/didChangeCursor", {"textDocument": {"uri": uri},
                                                   "position": {"line": position.line, "character": position.character}})

    # -- requests -------------------------------------------------------------------
    def send_completion(self, uri: str, position: types.Position, msg_id: str) -> concurrent.futures.Future:
        """An automatic inline-completion request with a known id (so that `cancel` can name it)."""
        params = types.InlineCompletionParams(
            text_document=types.TextDocumentIdentifier(uri), position=position,
            context=types.InlineCompletionContext(trigger_kind=types.InlineCompletionTriggerKind.Automatic))
        return self.client.protocol.send_request(types.TEXT_DOCUMENT_INLINE_COMPLETION, params, msg_id=msg_id)

    async def complete(self, uri: str, position: types.Position, msg_id: str | None = None):
        """The server's answer (an InlineCompletionList or None) to one inline-completion request."""
        return await asyncio.wrap_future(self.send_completion(uri, position, msg_id or str(uuid.uuid4())))

    def cancel(self, msg_id: str) -> None:
        self.notify(types.CANCEL_REQUEST, types.CancelParams(id=msg_id))

    async def request(self, method: str, params: Any = None) -> Any:
        """A custom request; its answer as plain data."""
        return plain_data(await self.client.protocol.send_request_async(method, params or {}))

    async def stats(self) -> dict:
        """`quickdraft/stats`; the per-request records in it are kept in `server_records`."""
        result = await self.request("quickdraft/stats")
        result = result if isinstance(result, dict) else {}
        for record in result.get("recent") or []:
            if isinstance(record, dict):
                self.server_records[server_key(record.get("uri", ""), record.get("id", ""),
                                               kept=record.get("source") == "kept")] = record
        return result

    async def execute_command(self, command: types.Command) -> Any:
        return await self.client.workspace_execute_command_async(types.ExecuteCommandParams(
            command=command.command, arguments=list(command.arguments or [])))

    def configure(self, settings: dict) -> None:
        self.client.workspace_did_change_configuration(
            types.DidChangeConfigurationParams(settings={"quickdraft": settings}))

    def notify(self, method: str, params: Any) -> None:
        self.client.protocol.notify(method, params)
