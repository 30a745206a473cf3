"""LSP base-protocol framing (`Content-Length: N\\r\\n\\r\\n` + N bytes) that survives a hostile peer.

pygls's reader (pygls.io_.run_async) trusts its peer: a Content-Length that is off by a few
bytes, negative, non-numeric or missing desynchronises it for good, and a huge one is read
into memory in one piece (`Content-Length: 1000000000000` ended in MemoryError). This reader
never holds more than one bounded frame, and finds its way back after any damage:

- A header block it cannot use (no or a bad Content-Length, a line that is not a header, a
  body over the limit) becomes a `Frame(problem=...)`, and reading resumes at the next
  `Content-Length: N` line — wherever it is, even in the middle of a line of garbage.
- A frame's body is cut short where the next frame's header starts. A JSON text cannot
  contain a raw line break inside a string, so `Content-Length: N` + line break inside a
  body always means the length was too long: the next frame is read, not swallowed.
- A body that ends in the first bytes of a header (the length was too long by a few bytes,
  and the next frame's header began) gives those bytes back.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Awaitable, Callable

MAX_BODY_BYTES = 64 * 1024 * 1024  # a 64 MB document is more than any editor syncs
MAX_HEADER_LINE = 4096
MAX_HEADER_LINES = 32
_HEADER_START = re.compile(rb"Content-Length:[ \t]{0,8}\d{1,12}[ \t]{0,8}\r?\n", re.IGNORECASE)
_HEADER_PREFIX = b"content-length:"
_PARTIAL_HEADER = re.compile(rb"content-length:[ \t]{0,8}\d{0,12}[ \t]{0,8}\r?\Z", re.IGNORECASE)
_PARTIAL_SPAN = 64
_HTTP_REQUEST_LINE = re.compile(rb"^[A-Z]{3,10} \S+ HTTP/\d(\.\d)?\r?\n$")
_HEADER_NAME = re.compile(rb"^[A-Za-z0-9-]+$")


@dataclass
class Frame:
    body: bytes | None = None  # one message's bytes, not yet decoded
    problem: str | None = None  # why the bytes here were skipped
    http: bool = False  # the skipped bytes began with an HTTP request line


def _partial_header_at_end(data: bytes) -> int | None:
    """Where the tail of `data` may be the first bytes of a `Content-Length: N` line, if anywhere."""
    for index in range(max(0, len(data) - _PARTIAL_SPAN), len(data)):
        tail = data[index:]
        if _HEADER_PREFIX.startswith(tail.lower()) or _PARTIAL_HEADER.match(tail):
            return index
    return None


class FrameReader:
    """Frames from a source of byte chunks (`read_chunk()` returns b"" at the end of input)."""

    def __init__(self, read_chunk: Callable[[], Awaitable[bytes]], *, max_body: int = MAX_BODY_BYTES) -> None:
        self.read_chunk = read_chunk
        self.max_body = max_body
        self.buffer = bytearray()
        self.at_end = False

    async def _fill(self) -> bool:
        if self.at_end:
            return False
        chunk = await self.read_chunk()
        if not chunk:
            self.at_end = True
            return False
        self.buffer += chunk
        return True

    async def _line(self) -> bytes | None:
        """The next line with its \\n, or what is buffered when it is overlong; None at the end."""
        searched = 0
        while True:
            end = self.buffer.find(b"\n", searched)
            if end >= 0 or len(self.buffer) >= MAX_HEADER_LINE:
                size = end + 1 if 0 <= end < MAX_HEADER_LINE else MAX_HEADER_LINE
                line = bytes(self.buffer[:size])
                del self.buffer[:size]
                return line
            searched = len(self.buffer)
            if not await self._fill():
                return None

    async def _resync(self) -> None:
        """Drop bytes up to the next `Content-Length: N` line (or the end of input)."""
        while True:
            match = _HEADER_START.search(self.buffer)
            if match:
                del self.buffer[:match.start()]
                return
            # Keep only a tail that may be the first bytes of the next header.
            tail = max(0, len(self.buffer) - _PARTIAL_SPAN)
            keep = _partial_header_at_end(bytes(self.buffer[tail:]))
            del self.buffer[:len(self.buffer) if keep is None else tail + keep]
            if not await self._fill():
                self.buffer.clear()
                return

    async def _skip(self, problem: str, *, http: bool = False) -> Frame:
        await self._resync()
        return Frame(problem=problem, http=http)

    async def next_frame(self) -> Frame | None:
        """The next frame, or None at the end of input."""
        length: int | None = None
        lines = 0
        while True:
            line = await self._line()
            if line is None:
                return None
            if not line.strip():
                if length is not None:
                    break
                if lines:  # a header block without a length: its body cannot be found
                    return await self._skip("header block without a Content-Length")
                continue  # blank lines between frames: nothing lost
            lines += 1
            if lines == 1 and _HTTP_REQUEST_LINE.match(line):
                return await self._skip("an HTTP request, not LSP (Content-Length framed JSON-RPC)", http=True)
            name, colon, value = line.partition(b":")
            # Not a header, or bytes glued in front of the next frame's header ("xyzContent-Length: 52").
            glued = _HEADER_START.search(line, 1)
            if not colon or not _HEADER_NAME.match(name.strip()) or not line.endswith(b"\n") or glued \
                    or lines > MAX_HEADER_LINES:
                self.buffer[:0] = line  # the next header may start inside this line
                return await self._skip(f"expected a header line, got {line[:60]!r}")
            if name.strip().lower() == b"content-length":
                if length is not None:  # a second one: the previous frame lost its body
                    self.buffer[:0] = line
                    return await self._skip("header block with two Content-Length lines")
                value = value.strip()
                if not value.isdigit():
                    self.buffer[:0] = line  # the next header may start inside this line
                    return await self._skip(f"Content-Length {value[:40]!r} is not a byte count")
                length = int(value)
                if length > self.max_body:
                    return await self._skip(f"a body of {length} bytes is over the limit of {self.max_body}")
        return await self._body(length)

    async def _body(self, length: int) -> Frame | None:
        searched = 0
        while True:
            # The next frame's header inside this body means this frame's length was too long.
            match = _HEADER_START.search(self.buffer, max(0, searched - _PARTIAL_SPAN))
            if match and match.start() < length:
                body = bytes(self.buffer[:match.start()])
                del self.buffer[:match.start()]
                return Frame(body=body)
            if len(self.buffer) >= length:
                break
            searched = len(self.buffer)
            if not await self._fill():
                return None
        body = bytes(self.buffer[:length])
        del self.buffer[:length]
        if not body.rstrip().endswith(b"}"):  # every JSON-RPC message ends so: is a header starting?
            tail = max(0, len(body) - _PARTIAL_SPAN)
            cut = _partial_header_at_end(body[tail:])
            if cut is not None:
                self.buffer[:0] = body[tail + cut:]
                body = body[:tail + cut]
        return Frame(body=body)
