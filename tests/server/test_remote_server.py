"""`quickdraft serve --backend URL` over stdio, completing from a real llama.cpp server on 127.0.0.1.

The server runs a random model big enough that a long completion takes seconds: a cancel, a
budget cut and a kill then happen while it is generating, and the tests check the server
itself stopped (its /slots say how many tokens it decoded).
"""

from __future__ import annotations

import time

import pytest
from support.llama_server import MISSING, binary, one_slot_server
from support.lsp_client import ServerSession
from support.model_fixtures import write_tiny_gguf

pytestmark = pytest.mark.timeout(600)

SOURCE = "import os\n\n\ndef add(a, b):\n    return a\n\n\ndef main():\n    print(add(1, 2), os.getcwd())\n"
LINE, CHARACTER = 4, 12  # after "return a"
MOST = 1024  # the longest completion the settings allow


@pytest.fixture(scope="module")
def gguf(tmp_path_factory):
    if binary() is None:
        pytest.fail(MISSING)
    # ~19M parameters: several milliseconds a token on one thread, seconds for MOST tokens.
    return write_tiny_gguf(tmp_path_factory.mktemp("gguf") / "slow.gguf", fim=True, printable=True, hidden=512,
                           layers=8, context=4096)


@pytest.fixture(scope="module")
def llama(gguf, tmp_path_factory):
    server = one_slot_server(gguf, tmp_path_factory.mktemp("llama"), context=4096)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def session(llama, gguf):
    session = ServerSession("--backend", llama.url, "--backend-tokenizer", str(gguf),
                            initialization_options={"budgetMs": 60000, "maxNewTokens": 8})
    session.wait_for_state("ready")
    yield session
    session.stop()


@pytest.fixture
def uri(session, tmp_path):
    uri = (tmp_path / "calc.py").as_uri()
    session.open(uri, SOURCE)
    yield uri
    session.close(uri)


def last_record(session) -> dict:
    return session.stats()["recent"][-1]


def wait_generating(llama, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        slot = llama.slots()[0]
        if slot.get("is_processing") and slot.get("next_token", [{}])[0].get("n_decoded", 0) > 0:
            return
        time.sleep(0.01)
    raise TimeoutError("the server never started generating")


def test_a_completion_from_the_backend(session, uri):
    items = session.complete(uri, LINE, CHARACTER).items
    assert items and items[0].insert_text
    record = last_record(session)
    assert record["source"] == "model" and record["stop_reason"] == "max_new_tokens"
    assert record["emitted"] == 8 and record["prompt_tokens"] > 0
    backend = session.stats()["backend"]
    assert (backend["kind"], backend["server"], backend["api"], backend["state"]) == (
        "remote", "llama.cpp", "completions", "ready")
    assert any("ready" == s["state"] and "llama.cpp" in s["message"] for s in session.statuses)


def test_cancel_request_closes_the_stream(session, uri, llama):
    session.configure({"maxNewTokens": MOST})
    try:
        future = session.start_completion(uri, LINE, CHARACTER, "cancel-me")
        wait_generating(llama)
        session.cancel("cancel-me")
        with pytest.raises(Exception):  # pygls answers a cancelled request with an error
            future.result(timeout=30)
        slot = llama.wait_idle()
        assert slot["next_token"][0]["n_decoded"] < MOST
        deadline = time.monotonic() + 10
        while last_record(session)["stop_reason"] != "cancelled" and time.monotonic() < deadline:
            time.sleep(0.05)
        assert last_record(session)["stop_reason"] == "cancelled"
    finally:
        session.configure({"maxNewTokens": 8})


def test_the_budget_answers_and_the_next_request_stops_the_stream(session, uri, llama):
    session.complete(uri, LINE, CHARACTER)  # the prompt is in the server's cache now
    session.configure({"maxNewTokens": MOST, "budgetMs": 1500})
    try:
        with llama.decoded_per_task() as decoded:
            items = session.complete(uri, LINE, CHARACTER).items
            record = last_record(session)
            assert record["stop_reason"] == "deadline" and 0 < record["emitted"] < MOST
            assert items and items[0].insert_text  # what streamed by the deadline
            # Decoding goes on after the answer (ghost text for the next keystrokes) until the
            # next request, which closes that stream: the server stops it and serves the new one.
            wait_generating(llama)
            session.edit(uri, (LINE, CHARACTER), (LINE, CHARACTER), " +")
            session.configure({"maxNewTokens": 8})
            assert session.complete(uri, LINE, CHARACTER + 2) is not None
            llama.wait_idle()
        tasks = sorted(decoded)
        assert len(tasks) >= 2 and decoded[tasks[-1]] <= 8
        assert 0 < decoded[tasks[-2]] < MOST - 16  # the budget's request, stopped by the next one
    finally:
        session.configure({"maxNewTokens": 8, "budgetMs": 60000})
        session.edit(uri, (LINE, CHARACTER), (LINE, CHARACTER + 2), "")


def test_the_backend_killed_and_restarted_mid_session(session, uri, llama):
    assert session.complete(uri, LINE, CHARACTER).items
    seen = len(session.statuses)
    llama.stop()
    try:
        started = time.monotonic()
        # Elsewhere on the line: the answer kept for (LINE, CHARACTER) would be served without the server.
        assert not session.complete(uri, LINE, CHARACTER - 1).items  # answered at once, empty
        assert time.monotonic() - started < 30
        down = session.wait_for_state("unavailable", timeout=30)
        assert "not reachable" in down["message"]
        assert session.stats()["backend"]["state"] == "unavailable"
        assert session.stats()["counts"]["errors"] >= 1
    finally:
        llama.start()
    back = wait_for_message(session, "is back", after=seen, timeout=60)
    assert back["state"] == "ready"
    items = session.complete(uri, LINE, CHARACTER).items
    assert items and items[0].insert_text


def wait_for_message(session, words: str, after: int, timeout: float) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for status in reversed(session.statuses[after:]):
            if words in status.get("message", ""):
                return status
        time.sleep(0.05)
    raise TimeoutError(f"no status says {words!r}: {session.statuses}")


@pytest.mark.parametrize("args, words", [
    (("--backend", "http://gpu.example.invalid:8000"), "https"),  # refused before any connection
    (("--backend", "http://127.0.0.1:9", "--api-key-env", "QUICKDRAFT_TEST_UNSET_TOKEN"), "QUICKDRAFT_TEST_UNSET"),
])
def test_serve_explains_a_backend_it_cannot_use(args, words):
    session = ServerSession(*args)
    try:
        status = session.wait_for_state("error", "ready")
        assert status["state"] == "error" and words in status["message"]
        session.open("file:///x.py", "x = ")
        assert not session.complete("file:///x.py", 0, 4).items
    finally:
        session.stop()


def test_backend_settings_from_the_client():
    from lsp_server.workspace.settings import Settings, apply_client_settings

    settings = apply_client_settings(Settings(), {"quickdraft": {
        "backend": "http://127.0.0.1:8080", "backendModel": "qwen", "backendTokenizer": "none",
        "apiKeyEnv": "TEAM_TOKEN"}})
    assert (settings.backend, settings.backend_model, settings.backend_tokenizer, settings.api_key_env) == (
        "http://127.0.0.1:8080", "qwen", "none", "TEAM_TOKEN")
    assert settings.model_key() != Settings().model_key()
