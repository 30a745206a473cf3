"""`quickdraft serve --tcp`: loopback by default, a per-launch token, one client at a time.

Over stdio the server's only peer is the editor that started it. A TCP port can be reached
by any local process, and by any web page through the browser (an HTTP POST), so here
(pygls's start_tcp has none of this: no authentication, a second connection took over the
first one's session, and any disconnect stopped the process):

- the socket binds 127.0.0.1 unless `--host` says otherwise;
- a token made at launch (printed, or written to `--token-file` with 0600 permissions) must
  arrive in the first message, `initialize`, as `initializationOptions.token`. Any other
  first message, a wrong token, a first line that is an HTTP request or anything else that
  does not frame as LSP closes the connection — before a byte of it is parsed as JSON;
- one client at a time: a second client that presents the token while one is connected is
  refused; a connection has 10 s to authenticate, so an idle one cannot hold the port;
- a disconnect (or `exit`) ends that client's session only: the server and its loaded models
  wait for the next client, which starts from the launch settings.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import os
import secrets
from pathlib import Path

from lsp_server.wire.framing import MAX_BODY_BYTES, FrameReader
from lsp_server.wire.transport import CHUNK_BYTES, INVALID_REQUEST, Session
from lsp_server.answering.warming import Warmer

log = logging.getLogger(__name__)

AUTH_TIMEOUT_S = 10.0
MAX_UNAUTHENTICATED_BODY = 1024 * 1024  # an initialize message is a few KB
MAX_UNSENT_BYTES = 64 * 1024 * 1024  # a client that stops reading is dropped, not buffered for
NOT_AUTHENTICATED = -32001


def write_token_file(path: str, token: str) -> None:
    """Owner-only file (0600), never following a symlink someone left at the path."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0), 0o600)
    try:
        os.fchmod(fd, 0o600)  # an existing file keeps its mode on open: set it
        os.write(fd, token.encode() + b"\n")
    finally:
        os.close(fd)


class TcpWriter:
    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self.writer = writer

    def write(self, data: bytes) -> None:
        if self.writer.is_closing():
            return
        self.writer.write(data)
        if self.writer.transport.get_write_buffer_size() > MAX_UNSENT_BYTES:
            log.warning("closing a client connection: it stopped reading its responses")
            self.writer.close()

    def close(self) -> None:
        self.writer.close()


class TcpServer:
    def __init__(self, settings, token: str) -> None:
        self.settings = settings
        self.token = token.encode()
        self.service = None  # the completion service, created for the first client and kept
        self.active: "TcpSession | None" = None

    async def on_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        async def read_chunk() -> bytes:
            try:
                return await reader.read(CHUNK_BYTES)
            except OSError:
                return b""

        session = TcpSession(self, FrameReader(read_chunk, max_body=MAX_UNAUTHENTICATED_BODY), TcpWriter(writer))
        timer = asyncio.get_running_loop().call_later(AUTH_TIMEOUT_S, session.expire)
        try:
            await session.run()
        except Exception:
            log.exception("client session failed")
        finally:
            timer.cancel()
            session.end()
            writer.close()

    def open_session(self, session: "TcpSession") -> str | None:
        """Give the authenticated session a server, or say why not."""
        from lsp_server.server import create_server

        if self.active is not None:
            return "another client is connected to this quickdraft server; it serves one at a time"
        server = create_server(self.settings, self.service)
        self.service = server.service
        self.active = session
        session.attach(server)
        session.reader.max_body = MAX_BODY_BYTES
        return None


class TcpSession(Session):
    def __init__(self, owner: TcpServer, reader: FrameReader, writer: TcpWriter) -> None:
        super().__init__(reader, writer)
        self.owner = owner

    def refuse_unframed(self, frame) -> bool:
        if frame.http or self.server is None:
            log.warning("closing a connection that does not speak LSP (%s)", frame.problem)
            return True
        return False

    def admit(self, data: dict) -> bool:
        if self.server is not None:
            return True
        refusal = self.authenticate(data)
        if refusal is None:
            refusal = self.owner.open_session(self)
        if refusal is None:
            return True
        log.warning("refused a TCP client: %s", refusal)
        if data.get("method") is not None and "id" in data:
            self.send_error(data["id"], NOT_AUTHENTICATED if "token" in refusal else INVALID_REQUEST, refusal)
        self.closing = True
        return False

    def authenticate(self, data: dict) -> str | None:
        params = data.get("params")
        options = params.get("initializationOptions") if isinstance(params, dict) else None
        token = options.get("token") if isinstance(options, dict) else None
        if data.get("method") != "initialize" or "id" not in data:
            return "the first message must be initialize, with the server's token in initializationOptions.token"
        if not isinstance(token, str) or not hmac.compare_digest(token.encode("utf-8", "surrogatepass"),
                                                                 self.owner.token):
            return ("missing or wrong token: pass the token quickdraft serve --tcp printed (or wrote to "
                    "--token-file) as initializationOptions.token")
        return None

    def expire(self) -> None:
        if self.server is None:
            log.warning("closing a TCP connection that did not authenticate within %.0f s", AUTH_TIMEOUT_S)
            self.writer.close()

    def end(self) -> None:
        """The client went away: stop its work, free the slot for the next one."""
        if self.owner.active is not self:
            return
        self.owner.active = None
        for future in list(self.protocol._request_futures.values()):
            future.cancel()
        service = self.owner.service
        service.scheduler.cancel_all()
        service.notify = lambda method, params: None  # nobody to tell until the next client
        # Its cursors and documents are gone with it: no warming for them, nothing carried over.
        service.warmer.stop()
        service.warmer = Warmer(service)


async def serve_tcp(settings, host: str, port: int, *, token_file: str | None = None) -> int:
    token = secrets.token_urlsafe(32)
    owner = TcpServer(settings, token)
    server = await asyncio.start_server(owner.on_connection, host, port)
    bound = server.sockets[0].getsockname()
    if token_file:
        write_token_file(token_file, token)
        where = f"the token is in {Path(token_file).resolve()}"
    else:
        where = f"token {token}"
    # stdout is free with --tcp: tell whoever started us where to connect and with what.
    print(f"quickdraft: LSP on tcp://{bound[0]}:{bound[1]}; {where} "
          "(send it as initializationOptions.token)", flush=True)
    try:
        async with server:
            await server.serve_forever()
    finally:
        if owner.service is not None:
            owner.service.shutdown()
    return 0
