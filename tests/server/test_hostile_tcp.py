"""Issue 15, item 5: `quickdraft serve --tcp` as a hostile local process (or web page) sees it:
loopback only, a per-launch token, HTTP refused before parsing, one client at a time, and a
disconnect never stops the server. Each case is followed by a valid session answered correctly."""

from __future__ import annotations

import json
import os
import re
import socket
import stat
import subprocess
import sys
import time

import pytest

from support.raw_client import OPTIONS, RawClient, answers_correctly, frame, serve_args

pytestmark = pytest.mark.timeout(300)


class TcpServer:
    def __init__(self, *args: str) -> None:
        self.process = subprocess.Popen([sys.executable, "-m", "lsp_server.cli", "serve", "--tcp", "--port", "0", *args],
                                        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        line = self.process.stdout.readline()
        match = re.search(r"tcp://([\d.]+):(\d+); (?:token (\S+))?", line)
        assert match, line
        self.host, self.port, self.token = match.group(1), int(match.group(2)), match.group(3)

    def connect(self) -> RawClient:
        return RawClient.tcp(self.port)

    def closes_without_answer(self, data: bytes) -> bool:
        with socket.create_connection(("127.0.0.1", self.port), timeout=30) as sock:
            sock.sendall(data)
            received = b""
            while chunk := sock.recv(65536):
                received += chunk
            return received

    def close(self) -> None:
        self.process.kill()
        self.process.wait(30)


@pytest.fixture(scope="module")
def tcp_server(tiny_model_dir):
    server = TcpServer(*serve_args(tiny_model_dir))
    yield server
    server.close()


def test_tcp_binds_loopback_and_wants_the_token(tcp_server):
    assert tcp_server.host == "127.0.0.1" and len(tcp_server.token) >= 32
    # Wrong token, no token, another first message: an error, then the connection closes.
    for options in ({"token": "guess"}, {}):
        body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                           "params": {"capabilities": {}, "initializationOptions": options}}).encode()
        reply = tcp_server.closes_without_answer(frame(body))
        assert b'"code": -32001' in reply and b"token" in reply
    reply = tcp_server.closes_without_answer(frame(b'{"jsonrpc": "2.0", "id": 1, "method": "quickdraft/stats", "params": {}}'))
    assert b'"error"' in reply and b'"result"' not in reply
    client = tcp_session(tcp_server)
    try:
        answers_correctly(client)
    finally:
        client.close()


def test_tcp_refuses_http_before_parsing_it(tcp_server):
    body = json.dumps({"jsonrpc": "2.0", "method": "workspace/didChangeConfiguration",
                       "params": {"settings": {"quickdraft": {"verifier": "/tmp/evil"}}}}).encode()
    request = (b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nOrigin: http://evil.example\r\n"
               b"Content-Type: text/plain\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
    assert tcp_server.closes_without_answer(request) == b""
    client = tcp_session(tcp_server)
    try:
        assert "evil" not in json.dumps(client.result("quickdraft/stats"))
        answers_correctly(client)
    finally:
        client.close()


def tcp_session(server: TcpServer) -> RawClient:
    """An authenticated client; waits while the server still sees the previous one connected."""
    deadline = time.monotonic() + 30
    while True:
        client = server.connect()
        response = client.request("initialize", {"capabilities": {},
                                                 "initializationOptions": {**OPTIONS, "token": server.token}})
        if "result" in response:
            client.notify("initialized", {})
            client.wait_for_status("ready", "error")
            return client
        client.close()
        assert "another client" in response["error"]["message"] and time.monotonic() < deadline, response
        time.sleep(0.2)


def test_tcp_serves_one_client_at_a_time_and_outlives_disconnects(tcp_server):
    first = tcp_session(tcp_server)
    try:
        first.open("file:///tcp/first.py", "private = 1\n")
        second = tcp_server.connect()
        refused = second.request("initialize", {"capabilities": {},
                                                "initializationOptions": {**OPTIONS, "token": tcp_server.token}})
        assert refused["error"]["code"] == -32600 and "another client" in refused["error"]["message"]
        second.wait(lambda: second.closed, 30, "the refused connection to close")
        second.close()
        assert first.held_text("file:///tcp/first.py") == "private = 1\n"
        answers_correctly(first)
    finally:
        first.close()
    # The first client went away without shutdown or exit: the server waits for the next one.
    for _ in range(2):
        client = tcp_session(tcp_server)
        try:
            assert client.held_text("file:///tcp/first.py") is None  # a fresh session
            warming = client.result("quickdraft/stats")["warming"]["recent"]
            assert all(record["uri"] != "file:///tcp/first.py" for record in warming), warming
            answers_correctly(client)
            assert client.request("shutdown")["result"] is None
            client.notify("exit")  # ends this session only
            client.wait(lambda: client.closed, 30, "the session to end")
        finally:
            client.close()
    assert tcp_server.process.poll() is None


def test_tcp_token_file_is_private(tiny_model_dir, tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text("old")
    os.chmod(token_file, 0o644)
    server = TcpServer(*serve_args(tiny_model_dir), "--token-file", str(token_file))
    try:
        assert server.token is None  # not printed
        assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
        server.token = token_file.read_text().strip()
        client = tcp_session(server)
        answers_correctly(client)
        client.close()
    finally:
        server.close()


def test_tcp_connection_that_never_authenticates_is_closed(tcp_server):
    started = time.monotonic()
    assert tcp_server.closes_without_answer(b"") == b""
    assert time.monotonic() - started < 60


