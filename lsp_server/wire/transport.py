"""One client session over a byte stream, and the stdio transport.

Replaces pygls's `start_io` loop (pygls.io_.run_async + JsonRPCServer._start_io_async) so that
every message gets an answer or a deliberate, logged skip:

- framing damage: `framing.FrameReader` skips it and reports it (Parse error, id null);
- a body that is not UTF-8 or not JSON: Parse error (-32700), id null;
- JSON that is not a JSON-RPC 2.0 message (not an object, no `"jsonrpc": "2.0"`, a bad id or
  method): Invalid Request (-32600), with the request's id when it has a usable one; such a
  notification is dropped, since nothing can be answered to it;
- a handler that raises: the error, with no traceback (protocol.py);
- the `exit` notification ends the session with its exit code (pygls always exited 0).

Reading is bounded: the stdin thread hands over at most a few 64 KB chunks ahead of the
parser, and a frame is at most `framing.MAX_BODY_BYTES`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
import threading
from typing import Any, BinaryIO

from lsp_server.wire.framing import FrameReader

log = logging.getLogger(__name__)

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
INTERNAL_ERROR = -32603
CHUNK_BYTES = 65536
YIELD_EVERY = 64  # frames read in a row before the handlers they started get a turn


class BadMessage(Exception):
    def __init__(self, code: int, message: str, msg_id: Any = None, answer: bool = True) -> None:
        super().__init__(message)
        self.code, self.message, self.msg_id, self.answer = code, message, msg_id, answer


def _usable_id(value: Any) -> bool:
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def decode(body: bytes) -> dict:
    """A JSON-RPC 2.0 message from a frame's body, or BadMessage saying what is wrong with it."""
    try:
        data = json.loads(body.decode("utf-8"))
    except UnicodeDecodeError as error:
        raise BadMessage(PARSE_ERROR, f"the message is not UTF-8: {error}") from None
    except (ValueError, RecursionError) as error:
        raise BadMessage(PARSE_ERROR, f"the message is not JSON: {str(error)[:200]}") from None
    if not isinstance(data, dict):
        raise BadMessage(INVALID_REQUEST, f"expected a JSON-RPC message (an object), got {type(data).__name__}")
    msg_id = data.get("id")
    if "id" in data and not _usable_id(msg_id):
        raise BadMessage(INVALID_REQUEST, "the id must be a string or an integer")
    is_request = "id" in data and "method" in data
    if data.get("jsonrpc") != "2.0":
        raise BadMessage(INVALID_REQUEST, 'expected "jsonrpc": "2.0"', msg_id, answer=is_request)
    if "method" in data:
        if not isinstance(data["method"], str):
            raise BadMessage(INVALID_REQUEST, "the method must be a string", msg_id, answer=is_request)
    elif "id" not in data or ("result" not in data and "error" not in data):
        raise BadMessage(INVALID_REQUEST, "neither a request, a notification nor a response")
    return data


class Session:
    """A client's conversation with a LanguageServer: frames in, answers out."""

    def __init__(self, reader: FrameReader, writer, server=None) -> None:
        self.reader, self.writer = reader, writer
        self.server = self.protocol = None
        self.closing = False  # set to end the session after the current message
        if server is not None:
            self.attach(server)

    def attach(self, server) -> None:
        self.server, self.protocol = server, server.protocol
        server.protocol.set_writer(self.writer)

    def send_error(self, msg_id: Any, code: int, message: str) -> None:
        # Framed here, not by pygls: it leaves out a null id, and JSON-RPC wants `"id": null`
        # when the request's id is unknown; and there may be no server yet (TCP, before the token).
        body = json.dumps({"jsonrpc": "2.0", "id": msg_id, "error": {"code": code, "message": message}}).encode()
        self.writer.write(b"Content-Length: %d\r\n\r\n%s" % (len(body), body))

    async def run(self) -> int | None:
        """Serve until `exit` (its exit code), the end of input or `closing` (None)."""
        frames = 0
        while not self.closing:
            frames += 1
            if frames % YIELD_EVERY == 0:
                await asyncio.sleep(0)  # buffered input never waits on the loop: let handlers run
            frame = await self.reader.next_frame()
            if frame is None:
                return None
            if frame.problem is not None:
                log.warning("skipped unreadable input: %s", frame.problem)
                if self.refuse_unframed(frame):
                    return None
                self.send_error(None, PARSE_ERROR, f"unreadable input skipped: {frame.problem}")
                continue
            self.dispatch(frame.body)
            if self.protocol is not None and self.protocol.exit_code is not None:
                return self.protocol.exit_code
        return None

    def refuse_unframed(self, frame) -> bool:
        """Whether damaged framing ends the session (TCP refuses what is not LSP)."""
        return False

    def dispatch(self, body: bytes) -> None:
        try:
            data = decode(body)
        except BadMessage as bad:
            log.warning("bad message: %s", bad.message)
            if bad.answer:
                self.send_error(bad.msg_id, bad.code, bad.message)
            return
        if not self.admit(data):
            return
        is_request = "id" in data and "method" in data
        message = self.protocol.receive(data)
        if message is None:
            return
        try:
            self.protocol.handle_message(message)
        except Exception as error:  # pygls answers most failures itself; never let one end the session
            log.exception("handling %s failed", data.get("method"))
            if is_request:
                self.send_error(data["id"], INTERNAL_ERROR, f"{type(error).__name__}: {error}")

    def admit(self, data: dict) -> bool:
        """Whether a decoded message may reach the server (TCP checks the launch token here)."""
        return True


class StdoutWriter:
    """pygls's writer interface over a binary stream; a client that went away ends nothing here."""

    def __init__(self, stream: BinaryIO) -> None:
        self.stream = stream
        self.broken = False

    def write(self, data: bytes) -> None:
        if self.broken:
            return
        try:
            self.stream.write(data)
            self.stream.flush()
        except (OSError, ValueError):
            self.broken = True
            log.warning("the client's end of stdout is closed")

    def close(self) -> None:
        pass


def _pump(fd: int, queue: asyncio.Queue, loop: asyncio.AbstractEventLoop) -> None:
    """Blocking reads of stdin on a thread, handed to the event loop a few chunks at a time."""
    while True:
        try:
            chunk = os.read(fd, CHUNK_BYTES)
        except OSError:
            chunk = b""
        try:
            asyncio.run_coroutine_threadsafe(queue.put(chunk), loop).result()
        except Exception:  # the loop has ended
            return
        if not chunk:
            return


async def serve_stdio(server, stdin: BinaryIO | None = None, stdout: BinaryIO | None = None) -> int:
    """Serve one client on stdin/stdout. Exit code: 0 after shutdown + exit, else 1 (LSP)."""
    stdin = stdin or sys.stdin.buffer
    queue: asyncio.Queue[bytes] = asyncio.Queue(maxsize=4)
    threading.Thread(target=_pump, args=(stdin.fileno(), queue, asyncio.get_running_loop()),
                     name="quickdraft-stdin", daemon=True).start()
    code = await Session(FrameReader(queue.get), StdoutWriter(stdout or sys.stdout.buffer), server).run()
    if code is None:  # the client closed its end without `exit`
        code = 0 if server.protocol._shutdown else 1
    return code
