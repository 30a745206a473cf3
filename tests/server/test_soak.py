"""A day of editing in a few minutes (issue 15): 100,000 incremental edits and 10,000
completion requests (a third of them cancelled) over a real stdio connection to a real
`quickdraft serve` on a tiny model. The server must answer every request, hold exactly the
client's text at the end, and grow by less than 50 MB after warming up (pygls kept ~2 KB
per notification: +200 MB)."""

from __future__ import annotations

import json
import random

import pytest

from support.raw_client import RawClient, serve_args

pytestmark = pytest.mark.timeout(900)

EDITS = 100_000
EDITS_PER_REQUEST = 10
CANCEL_EVERY = 3  # every third request is cancelled right after it is sent
BATCH = 500  # edits per write (~120 KB); each batch's last requests reach the model
MAX_RSS_GROWTH_MB = 50
SNIPPETS = ["x", "y = 1\n", "    ", "é", "🎉", "(", ")", "\r\n", "def f():\n    return 0\n", "\t", "ab"]


def frame_bytes(message: dict) -> bytes:
    body = json.dumps({"jsonrpc": "2.0", **message}, separators=(",", ":")).encode()
    return b"Content-Length: %d\r\n\r\n%s" % (len(body), body)


class Editor:
    """The client's copy of a document and the edits that keep the server's copy in step."""

    def __init__(self, uri: str, text: str, rng: random.Random) -> None:
        self.uri, self.text, self.rng, self.version = uri, text, rng, 1
        self.cursor = (0, 0)

    def position(self, offset: int) -> dict:
        start = self.text.rfind("\n", 0, offset) + 1
        line = self.text.count("\n", 0, start)
        return {"line": line, "character": len(self.text[start:offset].encode("utf-16-le")) // 2}

    def edit(self) -> bytes:
        # A code-point boundary that does not split "\r\n" (LSP positions cannot point inside it).
        def offset() -> int:
            at = self.rng.randint(0, len(self.text))
            return at - 1 if 0 < at < len(self.text) and self.text[at - 1:at + 1] == "\r\n" else at

        start = offset()
        end = min(len(self.text), start + self.rng.randint(0, 12)) if len(self.text) > 3000 else start
        end = end - 1 if 0 < end < len(self.text) and self.text[end - 1:end + 1] == "\r\n" else end
        insert = "" if len(self.text) > 3000 and self.rng.random() < 0.5 else self.rng.choice(SNIPPETS)
        change = {"range": {"start": self.position(start), "end": self.position(end)}, "text": insert}
        self.text = self.text[:start] + insert + self.text[end:]
        self.version += 1
        cursor = self.position(start + len(insert))
        self.cursor = (cursor["line"], cursor["character"])
        return frame_bytes({"method": "textDocument/didChange", "params": {
            "textDocument": {"uri": self.uri, "version": self.version}, "contentChanges": [change]}})


def test_a_day_of_editing_keeps_text_and_memory(tiny_model_dir):
    rng = random.Random(15)
    client = RawClient.stdio(*serve_args(tiny_model_dir))
    try:
        client.initialize({"budgetMs": 50, "maxNewTokens": 4})
        editors = [Editor("file:///soak/main.py", "import os\n\n\ndef main():\n    return os.getcwd()\n", rng),
                   Editor("file:///soak/other%20file.py", "class Other:\n    pass\n", rng)]
        for editor in editors:
            client.open(editor.uri, editor.text)
        sent_requests = 0
        baseline_mb = None
        for batch_start in range(0, EDITS, BATCH):
            data = []
            for index in range(batch_start, batch_start + BATCH):
                editor = editors[index % 2]
                data.append(editor.edit())
                if index % EDITS_PER_REQUEST == EDITS_PER_REQUEST - 1:
                    msg_id = f"soak-{sent_requests}"
                    line, character = editor.cursor
                    data.append(frame_bytes({"id": msg_id, "method": "textDocument/inlineCompletion", "params": {
                        "textDocument": {"uri": editor.uri}, "position": {"line": line, "character": character},
                        "context": {"triggerKind": 2}}}))
                    if sent_requests % CANCEL_EVERY == 0:
                        data.append(frame_bytes({"method": "$/cancelRequest", "params": {"id": msg_id}}))
                    sent_requests += 1
            client.write(b"".join(data))
            # Every request gets an answer (a result, or the cancellation error): wait for this batch's.
            client.wait(lambda: len(client.responses) >= sent_requests, 300, "the batch's responses")
            if baseline_mb is None and batch_start + BATCH >= EDITS // 10:
                baseline_mb = client.rss_mb()  # after warming up: models, caches, the allocator's pools
        assert sent_requests == EDITS // EDITS_PER_REQUEST
        responses = [client.responses.pop(f"soak-{i}") for i in range(sent_requests)]
        answered = [r for r in responses if "result" in r]
        cancelled = [r for r in responses if "error" in r]
        assert all(r["error"]["code"] == -32800 for r in cancelled), cancelled[:3]
        assert len(answered) + len(cancelled) == sent_requests and answered
        for editor in editors:
            assert client.held_text(editor.uri) == editor.text
        growth = client.rss_mb() - baseline_mb
        stats = client.result("quickdraft/stats")
        print(f"RSS growth {growth:.1f} MB; {len(answered)} answered, {len(cancelled)} cancelled; "
              f"server CPU {client.cpu_seconds():.0f} s; counts {stats['counts']}")
        assert growth < MAX_RSS_GROWTH_MB
        assert client.result("shutdown") is None
        client.notify("exit")
        assert client.exit_code() == 0
    finally:
        client.close()
