"""Hypothesis fuzz of the raw byte stream into `quickdraft serve` (issue 15): framing, JSON and
encodings in any mix. After each example's bytes a valid request must be answered within
seconds (no hang) by a process that is still running (no crash)."""

from __future__ import annotations

import asyncio
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lsp_server.wire.framing import FrameReader
from support.raw_client import serving

pytestmark = pytest.mark.timeout(900)

ANSWER_WITHIN_S = 30  # generous for a loaded 2-core machine; a hang is for ever
# Methods a fuzzed message may call; exit, shutdown, initialize and settings changes would end
# the session or reload models, which is the lifecycle tests' business.
METHODS = ["quickdraft/stats", "quickdraft/document", "textDocument/inlineCompletion", "textDocument/didOpen",
           "textDocument/didChange", "textDocument/didClose", "$/cancelRequest", "quickdraft/didShowCompletion",
           "workspace/executeCommand", "no/suchMethod", "$/setTrace"]

json_scalars = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(allow_nan=False),
                         st.text(max_size=20), st.sampled_from(["file:///fuzz/a.py", "file:///fuzz/sp%20ace.py",
                                                                "\ud800", "\f\u2028\x85", "😀"]))
json_values = st.recursive(json_scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.sampled_from(
        ["uri", "textDocument", "position", "line", "character", "text", "version", "id", "range", "start",
         "end", "contentChanges", "languageId", "context", "triggerKind", "command", "arguments"]), inner,
        max_size=5)), max_leaves=20)
documents = st.fixed_dictionaries({"uri": st.sampled_from(["file:///fuzz/a.py", "file:///fuzz/sp ace.py"]),
                                   "languageId": st.just("python"), "version": st.integers(0, 100),
                                   "text": st.text(max_size=60)})
positions = st.fixed_dictionaries({"line": st.integers(-2, 5), "character": st.integers(-2, 50)})
params = st.one_of(json_values, st.fixed_dictionaries({"textDocument": documents}), st.fixed_dictionaries({
    "textDocument": documents, "position": positions, "context": st.just({"triggerKind": 1})}),
    st.fixed_dictionaries({"textDocument": documents, "contentChanges": st.lists(st.fixed_dictionaries(
        {"range": st.fixed_dictionaries({"start": positions, "end": positions}), "text": st.text(max_size=10)}),
        max_size=3)}))
messages = st.builds(
    lambda method, msg_id, p, with_id, jsonrpc: {
        **({"jsonrpc": "2.0"} if jsonrpc else {}), "method": method, "params": p,
        **({"id": msg_id} if with_id else {})},
    st.sampled_from(METHODS), st.one_of(st.integers(0, 10**6), st.text(max_size=8), st.floats(), st.none()),
    params, st.booleans(), st.sampled_from([True, True, True, False]))
responses = st.builds(lambda msg_id, result: {"jsonrpc": "2.0", "id": msg_id, "result": result},
                      st.one_of(st.integers(0, 10**6), st.text(max_size=8)), json_values)


def _dumps(message, ascii_only: bool) -> bytes:
    return json.dumps(message, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass")


bodies = st.one_of(
    st.builds(_dumps, messages, st.booleans()),
    st.builds(_dumps, responses, st.booleans()),
    st.binary(max_size=80),
    st.builds(lambda m: _dumps(m, False)[:-3], messages),  # cut short
    st.builds(lambda m: _dumps(m, False).decode("utf-8", "surrogatepass").encode("utf-16", "surrogatepass"), messages),
    st.integers(1, 3000).map(lambda depth: b"[" * depth + b"]" * depth),
)
pieces = st.one_of(
    st.builds(lambda body: b"Content-Length: %d\r\n\r\n" % len(body) + body, bodies),  # well framed
    st.builds(lambda body, delta: b"Content-Length: %d\r\n\r\n" % max(0, len(body) + delta) + body,
              bodies, st.integers(-8, 8)),  # the length is off
    st.builds(lambda value, body: b"Content-Length: " + value + b"\r\n\r\n" + body,
              st.sampled_from([b"-5", b"abc", b"", b"99999999999999", b"1e3", b" 12 ", b"0x10"]), bodies),
    st.builds(lambda body: b"Content-Type: application/json\r\n\r\n" + body, bodies),  # no length
    st.binary(max_size=40),
    st.sampled_from([b"\r\n", b"\n", b"\r", b"Content-Length: 5\r\n", b"Content-Le", b"GET / HTTP/1.1\r\n",
                     b"POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\n{}", b"\xff\xfe\x00"]),
)


SENTINEL = b'{"jsonrpc": "2.0", "id": "sentinel", "method": "quickdraft/stats", "params": {}}'


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(stream=st.lists(pieces, max_size=8), chunk=st.integers(1, 100))
def test_the_reader_finds_a_whole_frame_after_any_bytes(stream, chunk):
    """The invariant the server's recovery rests on, in-process and fast: whatever came before,
    a well-formed frame is read whole, however the bytes are cut into reads."""
    data = b"".join(stream) + b"Content-Length: %d\r\n\r\n" % len(SENTINEL) + SENTINEL
    reads = [data[i:i + chunk] for i in range(0, len(data), chunk)]

    async def read_chunk() -> bytes:
        return reads.pop(0) if reads else b""

    async def last_frame():
        reader, last = FrameReader(read_chunk), None
        while (frame := await reader.next_frame()) is not None:
            last = frame
        return last

    assert asyncio.run(last_frame()).body == SENTINEL


@pytest.fixture(scope="module")
def fuzz_target(tiny_model_dir):
    with serving(tiny_model_dir) as client:
        yield client


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow, HealthCheck.data_too_large])
@given(stream=st.lists(pieces, min_size=1, max_size=8))
def test_any_byte_stream_leaves_the_server_answering(fuzz_target, stream):
    fuzz_target.write(b"".join(stream))
    response = fuzz_target.request("quickdraft/stats", {}, timeout=ANSWER_WITHIN_S)
    assert response["result"]["state"] == "ready"
    assert fuzz_target.process.poll() is None
    fuzz_target.take_unidentified()
    fuzz_target.responses.clear()
