"""Cache warming through the real `quickdraft serve` over stdio, on the tiny model: the
`quickdraft/didChangeCursor` notification, the `warm` setting and the figures in quickdraft/stats."""

from __future__ import annotations

import time

import pytest

from support.lsp_client import ServerSession

pytestmark = pytest.mark.timeout(300)

SOURCE = "".join(f"def function_{i}(value, other):\n    total = value * {i} + other\n    return total\n\n\n"
                 for i in range(200))
OPTIONS = {"budgetMs": 60000, "maxNewTokens": 8, "multiline": "never", "coldPrefixTokens": 0}  # whole windows cold


@pytest.fixture(scope="module")
def server(tiny_model_dir):
    session = ServerSession("--verifier", str(tiny_model_dir), "--drafter", "lookup", "--dtype", "float32",
                            initialization_options=OPTIONS)
    session.wait_for_state("ready")
    yield session
    session.stop()


def move_cursor(server: ServerSession, uri: str, line: int, character: int) -> None:
    server.notify("quickdraft/didChangeCursor",
                  {"textDocument": {"uri": uri}, "position": {"line": line, "character": character}})


def warm_records(server: ServerSession, uri: str) -> list[dict]:
    return [r for r in server.stats()["warming"]["recent"] if r["uri"] == uri]


def wait_for_warm(server: ServerSession, uri: str, line: int, timeout: float = 60.0) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done = [r for r in warm_records(server, uri) if r["line"] == line and r["outcome"] == "warmed"]
        if done:
            return done[-1]
        time.sleep(0.05)
    raise AssertionError(f"no warm at line {line}: {server.stats()['warming']}")


def test_the_cursor_notification_warms_and_the_next_completion_feeds_one_token(server, tmp_path):
    uri = (tmp_path / "jump.py").as_uri()
    server.open(uri, SOURCE)
    move_cursor(server, uri, 700, 4)
    warmed = wait_for_warm(server, uri, 700)
    assert warmed["trigger"] == "cursor" and warmed["fed_tokens"] > 300
    server.complete(uri, 700, 4)
    record = server.stats()["recent"][-1]
    assert record["uri"] == uri and record["source"] == "model"
    assert record["prefill_tokens"] == 1, record


def test_with_warm_off_a_jump_pays_the_cold_prefill(server, tmp_path):
    uri = (tmp_path / "cold.py").as_uri()
    server.configure({**OPTIONS, "warm": False})
    try:
        server.open(uri, SOURCE)
        move_cursor(server, uri, 500, 4)
        time.sleep(0.5)  # well past the debounce
        assert server.stats()["warming"]["enabled"] is False
        assert warm_records(server, uri) == []
        server.complete(uri, 500, 4)
        assert server.stats()["recent"][-1]["prefill_tokens"] > 300
    finally:
        server.configure({**OPTIONS, "warm": True})
    move_cursor(server, uri, 300, 4)  # on again
    wait_for_warm(server, uri, 300)


def test_malformed_cursor_notifications_leave_the_server_serving(server, tmp_path):
    uri = (tmp_path / "bad.py").as_uri()
    server.open(uri, "x = 1\ny = ")
    for params in ({}, {"textDocument": {"uri": uri}}, {"textDocument": {"uri": uri}, "position": {"line": "a"}},
                   {"textDocument": {"uri": "file:///nowhere.py"}, "position": {"line": 0, "character": 0}}):
        server.notify("quickdraft/didChangeCursor", params)
    assert server.complete(uri, 1, 4) is not None
    assert server.stats()["state"] == "ready"


def test_a_cursor_on_a_uri_spelled_otherwise_warms_the_open_document(server, tmp_path):
    """Issue 15 item 1 for the custom notification: `sp ace` and `sp%20ace` are one document."""
    folder = tmp_path / "sp ace"
    folder.mkdir()
    uri = (folder / "spelled.py").as_uri()  # file:///…/sp%20ace/spelled.py
    server.open(uri, SOURCE)
    move_cursor(server, uri.replace("%20", " "), 400, 4)
    assert wait_for_warm(server, uri, 400)["trigger"] == "cursor"


def test_first_completion_bench_runs_both_modes_side_by_side(tiny_model_dir, tmp_path):
    from lsp_server.bench.first_completion import FirstCompletionConfig, format_table, run_first_completion_bench

    path = tmp_path / "big.py"
    path.write_text(SOURCE)
    config = FirstCompletionConfig(lines=600, trials=1, wait_s=0.5, until_warm=True, verifier=str(tiny_model_dir),
                                   drafter="lookup", dtype="float32", budget_ms=60000)
    result = run_first_completion_bench(config, str(path))
    assert result["file_lines"] == 600
    assert [m["mode"] for m in result["modes"]] == ["warm", "cold"]
    trials = result["trials"]
    assert [t["mode"] for t in trials] == ["warm", "cold"]
    assert trials[0]["line"] != trials[1]["line"], "every trial at its own spot"
    for trial in trials:
        assert trial["latency_ms"] > 0 and trial["server"]["source"] == "model"
        # Warms happen in the warm trials only, at the cursor the client reported.
        assert bool(trial["warms"]) == (trial["mode"] == "warm")
        assert trial["second_latency_ms"] > 0 and trial["second_server"]["uri"] == trial["uri"]
    warm, cold = trials
    assert any((w["line"], w["trigger"], w["outcome"]) == (warm["line"], "cursor", "warmed") for w in warm["warms"])
    # Waited until the warm ended: the first request feeds the middle token and the typed character.
    # The bench's server runs the CPU defaults: a cold prompt is the short first window (coldPrefixTokens 128).
    assert warm["server"]["prefill_tokens"] <= 3 and cold["server"]["prefill_tokens"] > 100
    assert "first completion after opening 600 lines of big.py" in format_table(result)
