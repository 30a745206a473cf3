"""The server as a hostile client sees it (issue 15): each case is followed by a valid request
that must be answered correctly. Raw bytes over stdio to a real `quickdraft serve` (TCP, item 5:
test_hostile_tcp.py)."""

from __future__ import annotations

import asyncio
import json
import re

import pytest

from support.raw_client import COMPLETABLE, OPTIONS, RawClient, answers_correctly, frame, serve_args, serving

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def server(tiny_model_dir):
    with serving(tiny_model_dir) as client:
        yield client


# -- 1. URIs -------------------------------------------------------------------------------
@pytest.mark.parametrize("opened, asked", [
    ("file:///tmp/x/sp%20ace.py", "file:///tmp/x/sp%20ace.py"),
    ("file:///tmp/x/sp%20ace.py", "file:///tmp/x/sp ace.py"),
    ("file:///tmp/x/c%3A/r%C3%A9sum%C3%A9.py", "file:///tmp/x/c:/résumé.py"),
])
def test_a_percent_encoded_uri_gets_completions(server, opened, asked):
    server.open(opened, COMPLETABLE)
    assert server.complete(asked, 1, 11)
    assert server.held_text(asked) == server.held_text(opened) == COMPLETABLE
    server.insert(asked, 2, 1, 11, "1")
    assert server.held_text(opened) == COMPLETABLE + "1"
    server.close_document(asked)
    assert server.held_text(opened) is None
    answers_correctly(server)


# -- 2. Lines end only at \n, \r\n, \r -----------------------------------------------------
@pytest.mark.parametrize("separator", ["\f", "\v", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029"])
def test_lines_split_only_at_lsp_line_ends(server, separator):
    uri = f"file:///hostile/lines{ord(separator)}.py"
    text = f"a = 1{separator}# x\nb = 2\r\nc{separator}d\re\n"
    server.open(uri, text)
    edits = [((1, 0), "Z"), ((3, 0), "Y"), ((2, 1), "X")]  # lines: "a = 1<sep># x", "b = 2", "c<sep>d", "e"
    expected = "a = 1{s}# x\nZb = 2\r\ncX{s}d\rYe\n".format(s=separator)
    for version, ((line, character), insert) in enumerate(edits, start=2):
        server.insert(uri, version, line, character, insert)
    assert server.held_text(uri) == expected
    answers_correctly(server)


# -- 3. A lone surrogate in one document ---------------------------------------------------
def test_a_lone_surrogate_in_another_document_does_not_break_completions(server):
    broken = "file:///hostile/surrogate.py"
    # json.dumps writes "\ud800" as the escape a JavaScript editor would send.
    server.open(broken, "x = '\ud800'\n" * 3)
    answers_correctly(server)
    assert server.complete(broken, 3, 0) is not None  # and that document itself answers too
    server.close_document(broken)


# -- 4. Notifications leave nothing behind ---------------------------------------------------
def test_handled_notifications_leave_no_futures_behind():
    """pygls kept a future per generator-handled notification (didOpen, didChange, didClose)
    for ever: ~2 KB each. In-process, to count them exactly."""
    from lsp_server.server import create_server
    from lsp_server.workspace.settings import Settings

    server = create_server(Settings(verifier="not-loaded"))
    protocol = server.protocol
    messages = [{"id": 1, "method": "initialize", "params": {"capabilities": {}}},
                {"method": "textDocument/didOpen", "params": {"textDocument": {
                    "uri": "file:///leak.py", "languageId": "python", "version": 1, "text": ""}}}]
    for version in range(2, 1002):
        messages.append({"method": "textDocument/didChange", "params": {
            "textDocument": {"uri": "file:///leak.py", "version": version},
            "contentChanges": [{"range": {"start": {"line": 0, "character": 0}, "end": {"line": 0, "character": 0}},
                                "text": "x"}]}})
        messages.append({"method": "quickdraft/didShowCompletion", "params": {"id": f"qd-{version}"}})

    class Discard:
        def write(self, data):
            pass

    async def feed():
        protocol.set_writer(Discard())
        for message in messages:
            protocol.handle_message(protocol.structure_message({"jsonrpc": "2.0", **message}))
        await asyncio.sleep(0.1)  # let done-callbacks run

    asyncio.run(feed())
    assert protocol.workspace.get_text_document("file:///leak.py").source == "x" * 1000
    assert len(protocol._request_futures) == 0


# -- 6. Framing and JSON errors --------------------------------------------------------------
def _request(msg_id, method="quickdraft/stats") -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": msg_id, "method": method, "params": {}}).encode()


FRAMING_CASES = {
    "length too short": lambda body: b"Content-Length: %d\r\n\r\n" % (len(body) - 3) + body,
    "negative length": lambda body: b"Content-Length: -5\r\n\r\n" + body,
    "non-numeric length": lambda body: b"Content-Length: twelve\r\n\r\n" + body,
    "missing length": lambda body: b"Content-Type: application/vscode-jsonrpc; charset=utf-8\r\n\r\n" + body,
    "no header at all": lambda body: body + b"\r\n",
    "huge length": lambda body: b"Content-Length: 1000000000000\r\n\r\n" + body,
    "garbage line": lambda body: b"\x00\xff garbage \r\n" + frame(body),
    "http request": lambda body: b"POST / HTTP/1.1\r\nHost: localhost\r\n\r\n",
}


def unidentified_errors_after(client: RawClient, data: bytes) -> list[int]:
    """Send `data`, then a valid request (answered correctly); the id-null errors in between."""
    client.take_unidentified()
    client.write(data)
    answers_correctly(client)  # the server works in order: everything before it has been read
    return [message["error"]["code"] for message in client.take_unidentified()]


@pytest.mark.parametrize("case", FRAMING_CASES)
def test_framing_errors_are_answered_and_reading_recovers(server, case):
    codes = unidentified_errors_after(server, FRAMING_CASES[case](_request("lost")))
    assert codes and set(codes) == {-32700}


def test_a_length_too_long_by_a_few_bytes_loses_nothing(server):
    # The next frame's header shows where the body really ended: both requests are answered.
    body = _request("long")
    assert unidentified_errors_after(server, b"Content-Length: %d\r\n\r\n" % (len(body) + 4) + body) == []
    assert "result" in server.response("long")


def test_a_huge_length_does_not_allocate_it(server):
    before = server.rss_mb()
    codes = unidentified_errors_after(server, b"Content-Length: 1000000000000\r\n\r\n" + b"[" * 5_000_000
                                      + b"Content-Length: 99999999\r\n\r\n" + b"x" * 20_000_000)
    assert codes == [-32700, -32700]
    assert server.rss_mb() - before < 50


@pytest.mark.parametrize("body, code, msg_id", [
    (b'{"jsonrpc": "2.0", "id": 7, "method": ', -32700, None),  # malformed JSON
    (b'{"jsonrpc": "2.0", "id": 7, "method": "quickdraft/stats", "params": "\xff\xfe"}', -32700, None),  # not UTF-8
    ('{"jsonrpc": "2.0", "id": 7}'.encode("utf-16"), -32700, None),  # UTF-16
    (b"\xef\xbb\xbf" + _request(7), -32700, None),  # a byte-order mark
    (b"[" * 100_000 + b"]" * 100_000, -32700, None),  # nested deeper than the parser's stack
    (b"[" + _request(7) + b"]", -32600, None),  # a batch: LSP has none
    (b'"just a string"', -32600, None),
    (b'{"jsonrpc": "2.0", "id": 1.5, "method": "quickdraft/stats"}', -32600, None),  # ids are strings or integers
    (b'{"jsonrpc": "2.0", "id": {"a": 1}, "method": "quickdraft/stats"}', -32600, None),
    (b'{"jsonrpc": "2.0"}', -32600, None),
    (b'{"jsonrpc": "2.0", "id": "m42", "method": 42}', -32600, "m42"),
    (b'{"id": "nojsonrpc", "method": "quickdraft/stats", "params": {}}', -32600, "nojsonrpc"),
])
def test_bodies_that_are_not_json_rpc_get_an_error(server, body, code, msg_id):
    codes = unidentified_errors_after(server, frame(body))
    if msg_id is None:
        assert codes == [code]
    else:
        assert codes == [] and server.response(msg_id)["error"]["code"] == code


def test_a_notification_that_is_not_json_rpc_is_skipped(server):
    assert unidentified_errors_after(server, frame(b'{"method": "textDocument/didOpen", "params": {}}')) == []
    assert unidentified_errors_after(server, frame(b'{"jsonrpc": "2.0", "method": "textDocument/didOpen", '
                                                   b'"params": {"textDocument": 5}}')) == []


# -- 7. Lifecycle ----------------------------------------------------------------------------
def test_requests_before_initialize_get_server_not_initialized(tiny_model_dir):
    client = RawClient.stdio(*serve_args(tiny_model_dir))
    try:
        assert client.request("quickdraft/stats")["error"]["code"] == -32002
        assert client.request("textDocument/inlineCompletion", {
            "textDocument": {"uri": "file:///a.py"}, "position": {"line": 0, "character": 0}})["error"]["code"] == -32002
        client.open("file:///early.py", "dropped")  # a notification before initialize: dropped
        client.initialize(OPTIONS)
        assert client.held_text("file:///early.py") is None
        assert client.request("initialize", {"capabilities": {}})["error"]["code"] == -32600  # only once
        answers_correctly(client)
    finally:
        client.close()


def test_custom_requests_need_no_params_and_errors_carry_no_traceback(server):
    server.send({"id": "bare", "method": "quickdraft/stats"})  # no "params" member at all
    assert server.response("bare")["result"]["state"] == "ready"
    response = server.request("quickdraft/document", [1, 2])  # positional params our handler cannot use
    assert "error" in response and "data" not in response["error"], response
    assert "Traceback" not in json.dumps(response) and 'File "' not in json.dumps(response)
    answers_correctly(server)


@pytest.mark.parametrize("shutdown_first, code", [(True, 0), (False, 1)])
def test_exit_code_says_whether_shutdown_came_first(tiny_model_dir, shutdown_first, code):
    client = RawClient.stdio(*serve_args(tiny_model_dir))
    try:
        client.initialize(OPTIONS, wait_ready=False)
        if shutdown_first:
            assert client.request("shutdown")["result"] is None
            # After shutdown: requests are refused with InvalidRequest, not left unanswered.
            assert client.request("quickdraft/stats")["error"]["code"] == -32600
            assert client.request("textDocument/inlineCompletion", {
                "textDocument": {"uri": "file:///a.py"}, "position": {"line": 0, "character": 0}}
            )["error"]["code"] == -32600
        client.notify("exit")
        assert client.exit_code() == code
    finally:
        client.close()


# -- 8. Failures are reported, not silent ----------------------------------------------------
def _rename_fim_tokens(model_dir, target):
    """A copy of the tiny model whose tokenizer has no fill-in-the-middle tokens."""
    import shutil

    shutil.copytree(model_dir, target)
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        path = target / name
        if path.exists():
            path.write_text(path.read_text().replace("<|fim_", "<|xim_"))
    return target


def test_a_model_without_fim_tokens_reports_why(tiny_model_dir, tmp_path):
    client = RawClient.stdio(*serve_args(_rename_fim_tokens(tiny_model_dir, tmp_path / "no-fim")))
    try:
        client.initialize(OPTIONS, wait_ready=False)
        status = client.wait_for_status("ready", "error")
        assert status["state"] == "error" and "fill-in-the-middle" in status["message"], status
        stats = client.result("quickdraft/stats")
        assert stats["state"] == "error" and "fill-in-the-middle" in stats["error"]
        # Fix the setting: it loads and answers.
        client.notify("workspace/didChangeConfiguration", {"settings": {"quickdraft": {"verifier": str(tiny_model_dir)}}})
        client.wait(lambda: client.statuses()[-1]["state"] == "ready", 120, "ready after the fix")
        answers_correctly(client)
    finally:
        client.close()


def _too_small_vocabulary(model_dir, target):
    """The tiny model with its embedding cut to 64 rows: any prompt token past 63 makes it fail."""
    import shutil

    from safetensors.torch import load_file, save_file

    shutil.copytree(model_dir, target)
    weights = load_file(target / "model.safetensors")
    for name in ("model.embed_tokens.weight", "lm_head.weight"):
        weights[name] = weights[name][:64].clone()
    save_file(weights, target / "model.safetensors", metadata={"format": "pt"})
    config = json.loads((target / "config.json").read_text())
    config["vocab_size"] = 64
    (target / "config.json").write_text(json.dumps(config))
    return target


def test_a_model_that_fails_mid_request_shows_in_status_and_recovers(tiny_model_dir, tmp_path):
    client = RawClient.stdio(*serve_args(_too_small_vocabulary(tiny_model_dir, tmp_path / "small-vocab")))
    try:
        client.initialize(OPTIONS)
        uri = "file:///hostile/fails.py"
        client.open(uri, COMPLETABLE)
        assert client.complete(uri, 1, 11) == []
        status = client.wait(lambda: [s for s in client.statuses() if s["state"] == "error"], 30, "an error status")[-1]
        assert "completion failed" in status["message"] and "IndexError" in status["message"], status
        stats = client.result("quickdraft/stats")
        assert "IndexError" in stats["error"] and stats["counts"]["errors"] == 1
        # The failure was this request's: a working model serves the next ones and says ready.
        client.notify("workspace/didChangeConfiguration", {"settings": {"quickdraft": {"verifier": str(tiny_model_dir)}}})
        client.wait(lambda: client.statuses()[-1]["state"] == "ready", 120, "ready again")
        answers_correctly(client)
        assert "error" not in client.result("quickdraft/stats")
    finally:
        client.close()


# -- 9. Sampling with vocabularies padded to different sizes -----------------------------------
def test_sampling_with_a_narrower_draft_vocabulary_follows_the_verifier():
    """A 152,064-row verifier with a 151,936-row draft, in miniature: 8 rows and 6. A token
    drafted from q and put through the acceptance rule must come out distributed as p, the
    verifier's (chi-square at 1e-3, fixed seed) — including the 2 tokens the draft lacks."""
    import torch
    from scipy.stats import chisquare

    from engine.decoding.verify import SamplingParams, accept, probs_from_logits

    params = SamplingParams(temperature=1.0)
    logits = torch.tensor([[0.9, 0.1, -0.5, 0.4, 0.0, -1.0, 0.7, 0.3], [0.0] * 8])
    q = probs_from_logits(torch.tensor([[0.2, 0.8, -0.3, 0.1, 0.5, -0.2]]), params)
    generator = torch.Generator().manual_seed(7)
    samples = 4000
    counts = [0] * 8
    for _ in range(samples):
        drafted = int(torch.multinomial(q[0], 1, generator=generator))
        n, token = accept([drafted], q, logits, params, generator)
        counts[drafted if n == 1 else token] += 1
    p = probs_from_logits(logits[:1], params)[0].double()
    assert chisquare(counts, (p / p.sum() * samples).tolist()).pvalue > 1e-3


def test_acceptance_with_a_wider_draft_vocabulary_never_emits_a_token_the_verifier_lacks():
    import torch

    from engine.decoding.verify import SamplingParams, accept

    logits = torch.zeros(2, 6)  # the verifier knows 6 tokens
    draft_probs = torch.full((1, 8), 1 / 8)  # the draft pads to 8 and drafted token 7
    generator = torch.Generator().manual_seed(0)
    for _ in range(100):
        n, token = accept([7], draft_probs, logits, SamplingParams(temperature=1.0), generator)
        assert n == 0 and 0 <= token < 6


def test_tree_sampling_with_draft_vocabularies_padded_differently_follows_the_verifier():
    """The same for a token tree (SpecInfer's rule): two children drafted from a 6-row q under
    an 8-row verifier come out distributed as p; children from a 10-row q never yield a token
    the verifier lacks."""
    import torch
    from scipy.stats import chisquare

    from engine.decoding.tree import TokenTree, tree_accept
    from engine.decoding.verify import SamplingParams, probs_from_logits

    params = SamplingParams(temperature=1.0)
    root = torch.tensor([0.9, 0.1, -0.5, 0.4, 0.0, -1.0, 0.7, 0.3])
    logits = torch.stack([root, torch.zeros(8), torch.zeros(8)])  # rows for [root, child, child]
    generator = torch.Generator().manual_seed(3)

    def first_token(q: torch.Tensor) -> int:
        tree = TokenTree()
        for _ in range(2):
            tree.add(int(torch.multinomial(q, 1, generator=generator)), q=q)
        path, token = tree_accept(tree, logits, params, generator)
        return tree.tokens[path[0]] if path else token

    narrow = probs_from_logits(torch.tensor([0.2, 0.8, -0.3, 0.1, 0.5, -0.2]), params)
    samples = 4000
    counts = [0] * 8
    for _ in range(samples):
        counts[first_token(narrow)] += 1
    p = probs_from_logits(root, params).double()
    assert chisquare(counts, (p / p.sum() * samples).tolist()).pvalue > 1e-3
    wide = torch.full((10,), 0.1)
    assert all(first_token(wide) < 8 for _ in range(200))


# -- 11. Bounded telemetry, a pinned hub revision ----------------------------------------------
def test_telemetry_remembers_a_bounded_number_of_item_ids():
    from lsp_server.workspace.telemetry import TRACKED_ITEMS, Telemetry

    telemetry = Telemetry()
    for i in range(3 * TRACKED_ITEMS):  # any number of made-up ids, as long as a client likes
        item_id = f"qd-{i}-" + "x" * 10_000
        telemetry.did_show(item_id)
        telemetry.did_partially_accept(item_id, 3)
        telemetry.did_accept(item_id)
    telemetry.did_show(item_id)  # a repeat counts once
    kept = (telemetry.shown, telemetry.accepted_items, telemetry.partial)
    assert all(len(ids.items) == TRACKED_ITEMS and max(map(len, ids.items)) <= 64 for ids in kept)
    snapshot = telemetry.snapshot("lookup")
    assert snapshot["shown"] == snapshot["accepted"] == snapshot["partiallyAccepted"] == 3 * TRACKED_ITEMS


def test_hub_pulls_are_pinned_to_a_commit(tmp_path, monkeypatch):
    """No hub is reachable from the test machines: a stand-in for snapshot_download records
    what would be asked for and writes a minimal snapshot."""
    import time

    import huggingface_hub

    from engine.models import hub, presets, store

    asked = []

    def snapshot_download(repo_id, revision=None, local_dir=None, **kwargs):
        asked.append((repo_id, revision))
        (local_dir / "config.json").write_text("{}")
        (local_dir / "model.safetensors").write_bytes(b"\0" * 8)
        return str(local_dir)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    hub_presets = [preset for preset in presets.PRESETS.values() if preset.hub_repo]
    assert hub_presets
    for preset in hub_presets:
        installed = hub.pull_hub(preset, tmp_path, time.monotonic())
        assert re.fullmatch(r"[0-9a-f]{40}", asked[-1][1] or ""), asked[-1]
        assert json.loads((installed / store.MANIFEST).read_text())["source"]["revision"] == asked[-1][1]
