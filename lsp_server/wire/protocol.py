"""pygls's LanguageServerProtocol with the LSP lifecycle enforced and its leaks closed.

Each override says which pygls behaviour it replaces and why:

- requests before `initialize` get ServerNotInitialized (-32002; pygls: -32603 from a
  RuntimeError), a second `initialize` and requests after `shutdown` get InvalidRequest
  (pygls: silence, the client waits forever); notifications then are dropped, as LSP says;
- `exit` ends the session with 0 after `shutdown` and 1 without (pygls calls sys.exit inside
  a callback, which its own loop swallows: the process always exited 0);
- a request whose params do not parse is answered with the error (pygls only logs it);
- custom requests may leave out `params` (JSON-RPC allows it);
- error responses carry no Python traceback in `error.data`;
- a handled notification's future is forgotten (pygls keeps one per generator or async
  notification handler in `_request_futures` for ever: ~2 KB per didChange);
- every `textDocument.uri` is put in its canonical spelling before a handler sees it, and
  the workspace keys documents by that spelling and splits lines the LSP way (documents.py).
"""

from __future__ import annotations

import logging
from typing import Any

from lsprotocol import types
from pygls.exceptions import JsonRpcException
from pygls.protocol import LanguageServerProtocol
from pygls.protocol.language_server import lsp_method

from lsp_server.workspace.documents import Workspace, canonical_uri

log = logging.getLogger(__name__)

SERVER_NOT_INITIALIZED = -32002
INVALID_REQUEST = -32600


class Protocol(LanguageServerProtocol):
    def __init__(self, server, converter) -> None:
        super().__init__(server, converter)
        self.initialize_received = False
        self.exit_code: int | None = None  # set by `exit`: the transport ends the session

    @property
    def workspace(self) -> Workspace:
        # pygls builds a plain Workspace inside its initialize handler; swap in ours before first use.
        workspace = super().workspace
        if not isinstance(workspace, Workspace):
            workspace = self._workspace = Workspace.like(workspace)
        return workspace

    # -- incoming messages ------------------------------------------------------------
    def receive(self, data: dict[str, Any]):
        """The pygls message for a decoded JSON-RPC object, or None when it was answered
        (refused by the lifecycle, params that do not parse) or dropped."""
        method = data.get("method")
        is_request = method is not None and "id" in data
        refusal = None if method == types.EXIT else self._lifecycle_refusal(method, is_request)
        if refusal is not None:
            if is_request:
                self.send_error(data["id"], *refusal)
            log.debug("refused %s: %s", method, refusal[1])
            return None
        if method is not None:
            data.setdefault("params", None)  # JSON-RPC lets a request or notification leave it out
        try:
            message = self.structure_message(data)
        except JsonRpcException as error:
            if is_request:  # pygls only logs it, and the client would wait for ever
                self._send_response(data["id"], error=error.to_response_error())
            log.warning("unusable params for %s: %s", method, error.message)
            return None
        if method == types.INITIALIZE and is_request:
            self.initialize_received = True
        return message

    def _lifecycle_refusal(self, method: str | None, is_request: bool) -> tuple[int, str] | None:
        if method is None:  # a response to one of our requests
            return None
        if method == types.INITIALIZE and is_request:
            return (INVALID_REQUEST, "initialize was already received") if self.initialize_received else None
        if not self.initialize_received:
            return SERVER_NOT_INITIALIZED, f"{method} before initialize"
        if self._shutdown:
            return INVALID_REQUEST, f"{method} after shutdown: only exit is accepted now"
        return None

    def handle_message(self, message) -> None:
        document = getattr(getattr(message, "params", None), "text_document", None)
        if isinstance(getattr(document, "uri", None), str):
            document.uri = canonical_uri(document.uri)
        super().handle_message(message)

    # -- outgoing messages ------------------------------------------------------------
    def send_error(self, msg_id, code: int, message: str) -> None:
        self._send_response(msg_id, error=types.ResponseError(code=code, message=message))

    def _send_response(self, msg_id, result=None, error=None) -> None:
        if error is not None and error.data is not None:
            # pygls puts the handler's traceback here; it belongs in our log, not with the client.
            error = types.ResponseError(code=error.code, message=error.message)
        super()._send_response(msg_id, result, error)

    # -- handlers ---------------------------------------------------------------------
    def _execute_handler(self, msg_id, handler, callback, args=None, kwargs=None) -> None:
        super()._execute_handler(msg_id, handler, callback, args, kwargs)
        future = self._request_futures.get(msg_id)
        if future is not None:
            # Responses pop their future; nothing popped a notification's: forget it when done.
            future.add_done_callback(lambda done: self._forget(msg_id, done))

    def _forget(self, msg_id, future) -> None:
        if self._request_futures.get(msg_id) is future:
            del self._request_futures[msg_id]

    @lsp_method(types.EXIT)
    def lsp_exit(self, *args) -> None:
        self.exit_code = 0 if self._shutdown else 1
