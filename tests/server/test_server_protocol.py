"""The server under hostile input: raw malformed JSON-RPC, and random edit/request sequences."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from support.lsp_client import ServerSession

pytestmark = pytest.mark.timeout(600)


class RawClient:
    """Bytes on the server's stdin and stdout: lets a test send what no well-behaved client would."""

    def __init__(self, *args: str) -> None:
        self.process = subprocess.Popen([sys.executable, "-m", "lsp_server.cli", "serve", *args],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)

    def send_bytes(self, body: bytes) -> None:
        self.process.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        self.process.stdin.flush()

    def send(self, message: dict) -> None:
        self.send_bytes(json.dumps({"jsonrpc": "2.0", **message}).encode())

    def read(self, timeout: float = 60) -> dict:
        import select

        if not select.select([self.process.stdout], [], [], timeout)[0]:
            raise TimeoutError("the server sent nothing")
        length = None
        while True:
            line = self.process.stdout.readline()
            if not line:
                raise EOFError("server closed its output")
            if line in (b"\r\n", b"\n"):
                break
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":")[1])
        return json.loads(self.process.stdout.read(length))

    def response(self, request_id) -> dict:
        while True:
            message = self.read()
            if message.get("id") == request_id and "method" not in message:
                return message

    def close(self) -> None:
        self.process.kill()
        self.process.wait(10)


def test_malformed_requests_get_errors_and_the_server_keeps_serving(tiny_model_dir):
    client = RawClient("--verifier", str(tiny_model_dir), "--drafter", "lookup", "--dtype", "float32")
    try:
        client.send({"id": 1, "method": "initialize", "params": {"capabilities": {}}})
        assert "result" in client.response(1)
        client.send({"method": "initialized", "params": {}})
        client.send({"id": 2, "method": "textDocument/inlineCompletion",
                     "params": {"textDocument": {"uri": 5}, "position": "here"}})
        assert "error" in client.response(2)
        client.send({"id": 3, "method": "textDocument/inlineCompletion"})  # no params at all
        assert "error" in client.response(3)
        client.send_bytes(b"{this is not json")
        client.send({"method": "textDocument/didChange", "params": {"textDocument": {"uri": "file:///x.py"}}})
        client.send({"id": 4, "method": "no/suchMethod", "params": {}})
        assert "error" in client.response(4)
        client.send({"id": 5, "method": "quickdraft/stats", "params": {}})
        assert client.response(5)["result"]["requests"] == 0
    finally:
        client.close()


@pytest.fixture(scope="module")
def fuzz_server(tiny_model_dir):
    session = ServerSession("--verifier", str(tiny_model_dir), "--drafter", "lookup", "--dtype", "float32",
                            initialization_options={"budgetMs": 60000, "maxNewTokens": 4})
    session.wait_for_state("ready")
    yield session
    session.stop()


def utf16_position(text: str, offset: int) -> tuple[int, int]:
    line = text.count("\n", 0, offset)
    start = text.rfind("\n", 0, offset) + 1
    return line, len(text[start:offset].encode("utf-16-le")) // 2


alphabet = st.sampled_from(["a", "b", " ", "\n", "(", ")", "é", "🎉", "\t", "x = 1\n"])
texts = st.lists(alphabet, max_size=30).map("".join)
operations = st.lists(
    st.one_of(
        st.tuples(st.just("edit"), st.floats(0, 1), st.floats(0, 1), texts),
        st.tuples(st.just("request"), st.integers(0, 12), st.integers(0, 40)),
    ),
    min_size=1, max_size=12,
)
counter = iter(range(10**9))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(initial=texts, ops=operations)
def test_random_edits_and_requests_keep_server_and_client_in_sync(fuzz_server, initial, ops):
    uri = f"file:///fuzz/{next(counter)}.py"
    text = initial
    fuzz_server.open(uri, text)
    for op in ops:
        if op[0] == "edit":
            _, a, b, insert = op
            # Positions on code-point boundaries (an emoji is one code point, two UTF-16 units).
            start, end = sorted((int(a * len(text)), int(b * len(text))))
            fuzz_server.edit(uri, utf16_position(text, start), utf16_position(text, end), insert)
            text = text[:start] + insert + text[end:]
        else:
            _, line, character = op
            result = fuzz_server.complete(uri, line, character)
            assert result is None or all(item.range.start.line == item.range.end.line for item in result.items)
    held = fuzz_server.document(uri)
    assert held["text"] == text and held["version"] == fuzz_server.versions[uri]
    fuzz_server.close(uri)
