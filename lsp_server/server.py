"""The pygls Language Server: capabilities and handlers, each a few lines calling the service."""

from __future__ import annotations

import logging

from lsprotocol import types
from pygls.lsp.server import LanguageServer

from lsp_server.workspace.documents import canonical_uri
from lsp_server.wire.plain_data import plain_data
from lsp_server.wire.protocol import Protocol
from lsp_server.answering.context import ACCEPT_COMMAND
from lsp_server.answering.service import CompletionService
from lsp_server.workspace.settings import Settings, apply_client_settings, client_settings
from lsp_server.answering.warming import CURSOR_NOTIFICATION

log = logging.getLogger(__name__)

VERSION = "0.1.0"


# Long by design: pygls registers each handler as a function over the server, so all of them (a few
# lines each, calling the service) are declared here, together.
def create_server(settings: Settings, service: CompletionService | None = None) -> LanguageServer:
    """A server for one client session. A TCP server passes the service (and its loaded
    models) on from one client to the next, starting each from the launch settings."""
    server = LanguageServer("quickdraft", VERSION, protocol_cls=Protocol,
                            text_document_sync_kind=types.TextDocumentSyncKind.Incremental)

    def log_message(message: str, kind: types.MessageType) -> None:
        server.window_log_message(types.LogMessageParams(type=kind, message=message))

    if service is None:
        service = CompletionService(settings, server.protocol.notify, log_message)
    else:
        service.notify, service.log_message, service.settings = server.protocol.notify, log_message, settings
        service.shown.clear()
    server.service = service  # for tests and debugging

    @server.feature(types.INITIALIZE)
    def initialize(ls: LanguageServer, params: types.InitializeParams) -> None:
        service.settings = apply_client_settings(service.settings, params.initialization_options)

    @server.feature(types.INITIALIZED)
    def initialized(ls: LanguageServer, params: types.InitializedParams) -> None:
        if service.state == "ready" and service.backend_key == service.settings.model_key():
            service.send_status("ready", "ready: models already loaded")  # a later TCP client
        service.start_loading()

    @server.feature(types.WORKSPACE_DID_CHANGE_CONFIGURATION)
    def did_change_configuration(ls: LanguageServer, params: types.DidChangeConfigurationParams) -> None:
        service.configure(params.settings)

    @server.feature(types.TEXT_DOCUMENT_INLINE_COMPLETION, types.InlineCompletionOptions())
    async def inline_completion(ls: LanguageServer, params: types.InlineCompletionParams):
        return await service.complete(ls.workspace, params)

    @server.feature(types.TEXT_DOCUMENT_DID_OPEN)
    def did_open(ls: LanguageServer, params: types.DidOpenTextDocumentParams) -> None:
        service.warmer.did_open(ls.workspace, params.text_document.uri)

    @server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(ls: LanguageServer, params: types.DidChangeTextDocumentParams) -> None:
        service.document_changed(ls.workspace, params)

    @server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(ls: LanguageServer, params: types.DidCloseTextDocumentParams) -> None:
        service.document_closed(params.text_document.uri)
        service.warmer.did_close(params.text_document.uri)

    @server.feature(CURSOR_NOTIFICATION)
    def did_change_cursor(ls: LanguageServer, params) -> None:
        """The client's cursor rested somewhere: warm the cache there (lsp_server/answering/warming.py)."""
        service.warmer.did_change_cursor(ls.workspace, params)

    @server.command(ACCEPT_COMMAND)
    def accepted(ls: LanguageServer, *args) -> None:
        for arg in args:
            item_id = (plain_data(arg) or {}).get("id") if not isinstance(arg, str) else arg
            if item_id:
                service.item_accepted(str(item_id))

    @server.feature("quickdraft/didShowCompletion")
    def did_show(ls: LanguageServer, params) -> None:
        item_id = (plain_data(params) or {}).get("id")
        if item_id:
            service.item_shown(str(item_id))

    @server.feature("quickdraft/didPartiallyAcceptCompletion")
    def did_partially_accept(ls: LanguageServer, params) -> None:
        data = plain_data(params) or {}
        if data.get("id"):
            service.item_partially_accepted(str(data["id"]), int(data.get("acceptedLength") or 0))

    @server.feature("quickdraft/stats")
    def stats(ls: LanguageServer, params) -> dict:
        # With the settings in effect: editors that send none must get the same (tests/editors/).
        return {**service.stats(), "settings": client_settings(service.settings)}

    @server.feature("quickdraft/document")
    def document(ls: LanguageServer, params) -> dict | None:
        """The text and version the server holds for a URI: for support and sync tests."""
        uri = (plain_data(params) or {}).get("uri")
        doc = ls.workspace.text_documents.get(canonical_uri(uri)) if isinstance(uri, str) else None
        return None if doc is None else {"uri": uri, "version": doc.version, "text": doc.source}

    @server.feature(types.SHUTDOWN)
    def shutdown(ls: LanguageServer, params) -> None:
        # Stop work, keep the worker: over TCP the next client uses it. The process's end shuts it.
        service.scheduler.cancel_all()

    return server
