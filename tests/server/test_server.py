"""The real `quickdraft serve` over stdio, driven by a real LSP client (pygls), on a tiny model."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
from lsprotocol import types

from support.lsp_client import ServerSession
from lsp_server.wire.plain_data import plain_data

pytestmark = pytest.mark.timeout(300)

SOURCE = '''import os


def add(a, b):
    """Return the sum of a and b."""
    return a + b


def sub(a, b):
    return a - b


def main():
    print(add(1, 2), sub(3, 4), os.getcwd())
'''
# Generous budget and a short answer: on a tiny model the results are deterministic.
OPTIONS = {"budgetMs": 60000, "maxNewTokens": 16}


def serve_args(model_dir) -> list[str]:
    return ["--verifier", str(model_dir), "--drafter", "lookup", "--dtype", "float32"]


@pytest.fixture(scope="module")
def server(tiny_model_dir):
    session = ServerSession(*serve_args(tiny_model_dir), initialization_options=OPTIONS)
    session.wait_for_state("ready")
    yield session
    session.stop()


def items_of(result) -> list:
    return [] if result is None else list(result.items)


def cli_complete(model_dir, path, line, character) -> dict:
    out = subprocess.run(
        [sys.executable, "-m", "lsp_server.cli", "complete", str(path), "--line", str(line), "--character",
         str(character), *serve_args(model_dir), "--max-new-tokens", "16", "--json"],
        capture_output=True, text=True, timeout=120, check=True)
    return json.loads(out.stdout)


def test_capabilities(server):
    caps = server.initialize_result.capabilities
    assert caps.inline_completion_provider is not None
    assert "quickdraft.accepted" in caps.execute_command_provider.commands
    assert caps.position_encoding == types.PositionEncodingKind.Utf16
    sync = caps.text_document_sync
    assert getattr(sync, "change", sync) == types.TextDocumentSyncKind.Incremental


def test_open_edit_request_accept_matches_quickdraft_complete(server, tiny_model_dir, tmp_path):
    uri = (tmp_path / "calc.py").as_uri()
    server.open(uri, SOURCE.replace("    return a - b\n", "    return a\n"))
    # Incremental edit: "return a" → "return a - " (the cursor then sits after it).
    server.edit(uri, (9, 12), (9, 12), " - ")
    assert server.document(uri)["text"] == SOURCE.replace("return a - b", "return a - ")
    result = items_of(server.complete(uri, 9, 15))
    path = tmp_path / "calc.py"
    path.write_text(server.document(uri)["text"])
    expected = cli_complete(tiny_model_dir, path, 9, 15)
    if not expected["text"]:
        assert result == []
        return
    assert len(result) == 1 and result[0].insert_text == expected["text"]
    item = result[0]
    assert item.range.start == types.Position(9, 15) and item.range.start.line == item.range.end.line
    before = server.stats()["accepted"]
    server.accept(item)
    assert server.stats()["accepted"] == before + 1


def test_typing_through_the_shown_completion_needs_no_model(server, tmp_path):
    uri = (tmp_path / "through.py").as_uri()
    server.open(uri, "def mul(a, b):\n    return ")
    first = items_of(server.complete(uri, 1, 11))
    assert first, "the tiny model always writes something here"
    text = first[0].insert_text
    typed = text[0]
    if typed == "\n":
        pytest.skip("completion starts with a newline")
    before = server.stats()["counts"]["typethrough"]
    server.edit(uri, (1, 11), (1, 11), typed)
    second = items_of(server.complete(uri, 1, 12))
    assert second and second[0].insert_text == text[1:]
    assert server.stats()["counts"]["typethrough"] == before + 1


def test_one_character_edit_reuses_the_kv_cache(server, tmp_path):
    uri = (tmp_path / "reuse.py").as_uri()
    body = SOURCE + "\n\ndef total(values):\n    result = 0\n    for value in values:\n        result"
    server.open(uri, body)
    lines = body.split("\n")
    line, character = len(lines) - 1, len(lines[-1])
    server.complete(uri, line, character)
    first = server.stats()["recent"][-1]
    server.edit(uri, (line, character), (line, character), "\x01" if False else "+")
    server.complete(uri, line, character + 1)
    second = server.stats()["recent"][-1]
    assert second["source"] == "model"
    assert first["prefill_tokens"] > 50
    assert second["prefill_tokens"] <= 8, second  # only the tokens after the edit point
    assert second["reused_tokens"] >= first["prompt_tokens"] - 8


def test_rapid_requests_while_typing_only_the_newest_completes(server, tmp_path):
    uri = (tmp_path / "typing.py").as_uri()
    server.open(uri, "def f(x):\n    return ")
    server.configure({"maxNewTokens": 200, "multiline": "always"})
    try:
        before = server.stats()["counts"]
        futures = []
        for i in range(20):
            server.edit(uri, (1, 11 + i), (1, 11 + i), "x")
            futures.append(server.submit(server._complete(uri, 1, 12 + i)))
        results = [items_of(f.result(120)) for f in futures]
        after = server.stats()["counts"]
    finally:
        server.configure({"maxNewTokens": OPTIONS["maxNewTokens"], "multiline": "auto"})
    assert all(r == [] for r in results[:-1])
    # The newest ran to its end (its text may be empty: a block the tiny model ends at once
    # is judged by the parser, and random text rarely parses).
    newest = max((r for r in server.stats()["recent"] if r["uri"] == uri), key=lambda r: int(r["id"]))
    assert newest["source"] == "model" and newest["stop_reason"] not in ("cancelled", "deadline"), newest
    finished = after["model"] - before["model"] - (after["cancelled"] - before["cancelled"])
    assert finished == 1
    dropped = (after["superseded"] - before["superseded"]) + (after["cancelled"] - before["cancelled"]) \
        + (after["stale"] - before["stale"])
    assert dropped >= 19


def test_cancel_request_frees_the_worker_within_a_verifier_pass(server, tmp_path):
    uri = (tmp_path / "cancel.py").as_uri()
    # At the top level a completion cannot leave its block by indentation: it decodes on.
    server.open(uri, "y = 1\n")
    server.configure({"maxNewTokens": 1024, "multiline": "always"})
    try:
        future = server.start_completion(uri, 1, 0, msg_id="cancel-me")
        # The tiny model writes ~1,000 tokens a second on a quiet CPU: cancel well inside that.
        time.sleep(0.25)
        server.cancel("cancel-me")
        with pytest.raises(Exception):  # the request ends with a RequestCancelled error
            future.result(60)
        server.configure({"maxNewTokens": OPTIONS["maxNewTokens"], "multiline": "auto"})
        other = (tmp_path / "after.py").as_uri()
        server.open(other, "x = 1\ny = ")
        assert items_of(server.complete(other, 1, 4)) is not None
        records = [r for r in server.stats()["recent"] if r["uri"] == uri]
    finally:
        server.configure({"maxNewTokens": OPTIONS["maxNewTokens"], "multiline": "auto"})
    assert records and records[-1]["stop_reason"] == "cancelled"
    assert records[-1]["emitted"] < 1024


def test_stale_version_gets_nothing(server, tmp_path):
    busy = (tmp_path / "busy.py").as_uri()
    stale = (tmp_path / "stale.py").as_uri()
    server.open(busy, "z = 1\n")  # top level: its completion cannot leave its block, it decodes on
    server.open(stale, "def k(w):\n    return ")
    server.configure({"maxNewTokens": 1024, "multiline": "always"})
    try:
        # The blocker holds the worker until it is cancelled, however fast the CPU is.
        blocker = server.start_completion(busy, 1, 0, msg_id="blocker")
        waiting = server.submit(server._complete(stale, 1, 11))
        time.sleep(0.1)  # the server has queued it behind the blocker
        server.edit(stale, (1, 11), (1, 11), "w")  # the queued request is now for an old version
        server.cancel("blocker")
        assert items_of(waiting.result(120)) == []
        with pytest.raises(Exception):
            blocker.result(60)
        records = [r for r in server.stats()["recent"] if r["uri"] == busy]
    finally:
        server.configure({"maxNewTokens": OPTIONS["maxNewTokens"], "multiline": "auto"})
    assert records and records[-1]["stop_reason"] == "cancelled"  # the worker was busy throughout


def test_bad_input_gets_empty_answers_and_the_server_keeps_serving(server, tmp_path):
    assert items_of(server.complete("file:///nowhere/unknown.py", 0, 0)) == []
    uri = (tmp_path / "short.py").as_uri()
    server.open(uri, "a = 1\n")
    assert items_of(server.complete(uri, 40, 0)) == []  # line past the end
    server.complete(uri, 0, 400)  # character past the end of a line: clamped, answers normally
    binary = (tmp_path / "blob.py").as_uri()
    server.open(binary, "abc\x00\x01\x02" * 1000)
    assert items_of(server.complete(binary, 0, 10)) == []
    big = (tmp_path / "big.py").as_uri()
    text = "".join(f"def f{i}(x):\n    return x * {i}\n\n" for i in range(180_000))
    assert len(text) > 5_000_000
    server.open(big, text)
    lines = text.count("\n")
    server.complete(big, lines // 2, 0)
    assert server.stats()["state"] == "ready"
    assert server.document(uri)["text"] == "a = 1\n"


def test_utf8_position_encoding_is_negotiated_and_used(tiny_model_dir, tmp_path):
    session = ServerSession(*serve_args(tiny_model_dir), initialization_options=OPTIONS,
                            position_encodings=["utf-8", "utf-16"])
    try:
        assert session.initialize_result.capabilities.position_encoding == types.PositionEncodingKind.Utf8
        session.wait_for_state("ready")
        uri = (tmp_path / "uni.py").as_uri()
        line = 's = "héllo 🎉" + '
        session.open(uri, line + "\n")
        # Replace the emoji (4 UTF-8 bytes) by "!": incremental edits are in UTF-8 units too.
        start = len('s = "héllo '.encode())
        session.edit(uri, (0, start), (0, start + 4), "!")
        assert session.document(uri)["text"] == 's = "héllo !" + \n'
        cursor = len('s = "héllo !" + '.encode())
        items = items_of(session.complete(uri, 0, cursor))
        for item in items:
            assert item.range.start == types.Position(0, cursor)
    finally:
        session.stop()


def test_a_model_that_fails_to_load_is_reported_and_the_server_keeps_serving(tiny_model_dir, tmp_path):
    session = ServerSession("--verifier", str(tmp_path / "missing-model"), "--drafter", "lookup",
                            initialization_options=OPTIONS)
    try:
        status = session.wait_for_state("error")
        assert "missing-model" in status["message"]
        uri = (tmp_path / "a.py").as_uri()
        session.open(uri, "x = ")
        assert items_of(session.complete(uri, 0, 4)) == []
        assert session.stats()["state"] == "error"
        # Fix the setting: the server loads the model and starts answering.
        session.configure({"verifier": str(tiny_model_dir), "dtype": "float32"})
        session.wait_for_state("ready")
        assert session.stats()["state"] == "ready"
    finally:
        session.stop()


def test_custom_notifications_are_counted(server, tmp_path):
    uri = (tmp_path / "notify.py").as_uri()
    server.open(uri, "def q():\n    return ")
    items = items_of(server.complete(uri, 1, 11))
    assert items
    item_id = plain_data(items[0].command.arguments[0])["id"]
    before = server.stats()
    server.notify("quickdraft/didShowCompletion", {"id": item_id})
    server.notify("quickdraft/didPartiallyAcceptCompletion", {"id": item_id, "acceptedLength": 2})
    time.sleep(0.3)
    after = server.stats()
    assert after["shown"] == before["shown"] + 1
    assert after["partiallyAccepted"] == before["partiallyAccepted"] + 1
    assert after["latencyMs"]["p50"] <= after["latencyMs"]["p90"] <= after["latencyMs"]["p99"]


def test_low_draft_acceptance_switches_to_prompt_lookup(tiny_model_dir, tiny_draft_dir, tmp_path):
    """An unrelated random draft model is almost never right: the server must notice and stop using it."""
    session = ServerSession("--verifier", str(tiny_model_dir), "--draft", str(tiny_draft_dir), "--drafter", "hybrid",
                            "--dtype", "float32",
                            initialization_options={"budgetMs": 60000, "maxNewTokens": 40, "multiline": "always"})
    try:
        session.wait_for_state("ready")
        assert session.stats()["drafter"] == "hybrid"
        for i in range(8):
            uri = (tmp_path / f"r{i}.py").as_uri()
            session.open(uri, f"def f{i}(x):\n    return ")
            session.complete(uri, 1, 11)
            if session.stats()["drafter"] == "lookup":
                break
        stats = session.stats()
        assert stats["drafter"] == "lookup"
        assert stats["drafters"]["draft"]["acceptance"] < 0.5
        assert any("switching to prompt-lookup" in message for message in session.logs)
    finally:
        session.stop()


def test_serves_over_loopback_tcp(tiny_model_dir):
    """The smoke test; tests/server/test_hostile.py has the token, HTTP and one-client-at-a-time cases."""
    import re
    import socket

    process = subprocess.Popen([sys.executable, "-m", "lsp_server.cli", "serve", "--tcp", "--port", "0",
                                *serve_args(tiny_model_dir)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                               text=True)
    try:
        announced = process.stdout.readline()
        host, port, token = re.search(r"tcp://([\d.]+):(\d+); token (\S+)", announced).groups()
        assert host == "127.0.0.1"
        with socket.create_connection((host, int(port)), timeout=30) as connection:
            body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                               "params": {"capabilities": {}, "initializationOptions": {"token": token}}}).encode()
            connection.sendall(b"Content-Length: %d\r\n\r\n" % len(body) + body)
            reply = b""
            while b"inlineCompletionProvider" not in reply:
                chunk = connection.recv(65536)
                assert chunk, "connection closed before the initialize result"
                reply += chunk
    finally:
        process.kill()
        process.wait(10)
