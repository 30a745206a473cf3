"""Raw bytes to and from a real `quickdraft serve`, over stdio or TCP: for the input no
well-behaved LSP client sends (hostile, fuzz and soak tests).

A reader thread parses the server's output (the server is trusted to frame correctly) and
files each message: responses by id, notifications in order.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO


OPTIONS = {"budgetMs": 60000, "maxNewTokens": 8}  # on a tiny model: deterministic answers
COMPLETABLE = "def q():\n    return "  # the tiny model completes this at (1, 11)


def serve_args(model_dir) -> list[str]:
    return ["--verifier", str(model_dir), "--drafter", "lookup", "--dtype", "float32"]


def answers_correctly(client: "RawClient", uri: str = "file:///hostile/check.py") -> None:
    """The valid request that follows each hostile case: a completion that runs the model."""
    client.open(uri, COMPLETABLE)
    assert client.complete(uri, 1, 11), "a valid completion request got no completion"
    assert client.held_text(uri) == COMPLETABLE
    client.close_document(uri)


@contextmanager
def serving(model_dir, options: dict | None = None):
    """A `quickdraft serve` on stdio with `model_dir`, initialized and ready."""
    client = RawClient.stdio(*serve_args(model_dir))
    try:
        client.initialize(OPTIONS if options is None else options)
        yield client
    finally:
        client.close()


def frame(message: dict | bytes) -> bytes:
    body = message if isinstance(message, bytes) else json.dumps({"jsonrpc": "2.0", **message}).encode()
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


class RawClient:
    def __init__(self, output: BinaryIO, write, process: subprocess.Popen | None = None) -> None:
        self.output, self._write, self.process = output, write, process
        self.responses: dict[Any, dict] = {}
        self.unidentified: list[dict] = []  # error responses with "id": null
        self.notifications: list[dict] = []
        self.condition = threading.Condition()
        self.closed = False
        self.ids = iter(range(10**9, 2 * 10**9))
        threading.Thread(target=self._read_forever, daemon=True).start()

    # -- starting --------------------------------------------------------------------
    @classmethod
    def stdio(cls, *serve_args: str) -> "RawClient":
        process = subprocess.Popen([sys.executable, "-m", "lsp_server.cli", "serve", *serve_args],
                                   stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)

        def write(data: bytes) -> None:
            process.stdin.write(data)
            process.stdin.flush()

        return cls(process.stdout, write, process)

    @classmethod
    def tcp(cls, port: int, host: str = "127.0.0.1") -> "RawClient":
        sock = socket.create_connection((host, port), timeout=30)
        sock.settimeout(None)
        client = cls(sock.makefile("rb"), sock.sendall)
        client.socket = sock
        return client

    def initialize(self, options: dict | None = None, *, wait_ready: bool = True) -> dict:
        result = self.request("initialize", {"capabilities": {}, "initializationOptions": options or {}})
        self.notify("initialized", {})
        if wait_ready:
            self.wait_for_status("ready", "error")
        return result

    # -- sending ---------------------------------------------------------------------
    def write(self, data: bytes) -> None:
        self._write(data)

    def send(self, message: dict) -> None:
        self.write(frame(message))

    def notify(self, method: str, params: Any = None) -> None:
        self.send({"method": method, "params": params} if params is not None else {"method": method})

    def request(self, method: str, params: Any = None, *, timeout: float = 60) -> dict:
        """The whole response (result or error) to a request with a fresh id."""
        msg_id = next(self.ids)
        message = {"id": msg_id, "method": method}
        if params is not None:
            message["params"] = params
        self.send(message)
        return self.response(msg_id, timeout)

    def result(self, method: str, params: Any = None, *, timeout: float = 60) -> Any:
        response = self.request(method, params, timeout=timeout)
        assert "result" in response, response
        return response["result"]

    # -- documents and completions ---------------------------------------------------
    def open(self, uri: str, text: str, version: int = 1, language_id: str = "python") -> None:
        self.notify("textDocument/didOpen", {"textDocument": {
            "uri": uri, "languageId": language_id, "version": version, "text": text}})

    def insert(self, uri: str, version: int, line: int, character: int, text: str) -> None:
        position = {"line": line, "character": character}
        self.notify("textDocument/didChange", {"textDocument": {"uri": uri, "version": version},
                                               "contentChanges": [{"range": {"start": position, "end": position},
                                                                   "text": text}]})

    def close_document(self, uri: str) -> None:
        self.notify("textDocument/didClose", {"textDocument": {"uri": uri}})

    def complete(self, uri: str, line: int, character: int) -> list:
        result = self.result("textDocument/inlineCompletion", {
            "textDocument": {"uri": uri}, "position": {"line": line, "character": character},
            "context": {"triggerKind": 2}})
        return [] if result is None else result["items"]

    def held_text(self, uri: str) -> str | None:
        """The text the server holds for `uri` (quickdraft/document)."""
        document = self.result("quickdraft/document", {"uri": uri})
        return None if document is None else document["text"]

    # -- receiving -------------------------------------------------------------------
    def _read_forever(self) -> None:
        try:
            while True:
                length = None
                while True:
                    line = self.output.readline()
                    if not line:
                        return
                    if line in (b"\r\n", b"\n"):
                        break
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                message = json.loads(self.output.read(length))
                with self.condition:
                    if "method" in message:
                        self.notifications.append(message)
                    elif message.get("id") is None:
                        self.unidentified.append(message)
                    else:
                        self.responses[message.get("id")] = message
                    self.condition.notify_all()
        except (OSError, ValueError):
            return
        finally:
            with self.condition:
                self.closed = True
                self.condition.notify_all()

    def wait(self, predicate, timeout: float, what: str):
        deadline = time.monotonic() + timeout
        with self.condition:
            while True:
                value = predicate()
                if value:
                    return value
                remaining = deadline - time.monotonic()
                if remaining <= 0 or self.closed:
                    raise TimeoutError(f"{'closed' if self.closed else 'timed out'} waiting for {what}")
                self.condition.wait(remaining)

    def response(self, msg_id: Any, timeout: float = 60) -> dict:
        return self.wait(lambda: self.responses.pop(msg_id, None), timeout, f"the response to {msg_id!r}")

    def take_unidentified(self) -> list[dict]:
        """The error responses with "id": null received so far (and forget them)."""
        with self.condition:
            taken, self.unidentified = self.unidentified, []
        return taken

    def wait_for_status(self, *states: str, timeout: float = 120) -> dict:
        def found():
            for message in reversed(self.notifications):
                if message["method"] == "quickdraft/status" and message["params"]["state"] in states:
                    return message["params"]
            return None
        return self.wait(found, timeout, f"status {states}")

    def statuses(self) -> list[dict]:
        with self.condition:
            return [m["params"] for m in self.notifications if m["method"] == "quickdraft/status"]

    # -- the process -----------------------------------------------------------------
    def rss_mb(self) -> float:
        status = Path(f"/proc/{self.process.pid}/status").read_text()
        return int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmRSS:"))) / 1024

    def cpu_seconds(self) -> float:
        """User + system CPU time the server process has used (for figures, never asserted)."""
        fields = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def exit_code(self, timeout: float = 60) -> int:
        return self.process.wait(timeout)

    def close(self) -> None:
        if self.process is not None:
            if self.process.poll() is None:
                self.process.kill()
            self.process.wait(30)
            for stream in (self.process.stdin, self.process.stdout):
                try:
                    stream.close()
                except OSError:
                    pass
        else:
            try:
                self.socket.shutdown(socket.SHUT_RDWR)  # makefile() holds the fd open past close()
            except OSError:
                pass
            self.socket.close()
