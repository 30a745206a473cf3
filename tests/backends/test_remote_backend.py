"""The remote backend against a real llama.cpp server on 127.0.0.1, serving tiny GGUF models made here."""

from __future__ import annotations

import threading
import time

import pytest

from engine.backends.base import BackendError, Health
from engine.backends.connection import check_url, is_loopback
from engine.backends.remote import RemoteBackend, RemoteConfig
from engine.completion import CompletionEngine, CompletionRequest
from engine.text.prompt import ContextBudget
from support.llama_server import MISSING, LlamaServer, binary, one_slot_server
from support.model_fixtures import PRINTABLE, write_tiny_gguf

pytestmark = pytest.mark.timeout(300)

PREFIX = "import os\n\n\ndef add(a, b):\n    return a"
SUFFIX = "\n\n\ndef main():\n    print(add(1, 2), os.getcwd())\n"
LONG = 20_000  # tokens: far more than a test waits for, so only a cut can end the stream early


def request(prefix: str = PREFIX, **overrides) -> CompletionRequest:
    fields = dict(prefix=prefix, suffix=SUFFIX, path="calc.py", language="python", max_new_tokens=16,
                  multiline=False)
    return CompletionRequest(**(fields | overrides))


def printable(text: str) -> bool:
    return all(ord(c) < 128 and c.encode() in PRINTABLE for c in text)


@pytest.fixture(scope="module")
def gguf(tmp_path_factory):
    if binary() is None:
        pytest.fail(MISSING)
    return write_tiny_gguf(tmp_path_factory.mktemp("gguf") / "tiny-fim.gguf", fim=True, printable=True,
                           context=32768)


@pytest.fixture(scope="module")
def llama(gguf, tmp_path_factory):
    server = one_slot_server(gguf, tmp_path_factory.mktemp("llama"), context=32768)
    yield server
    server.stop()


@pytest.fixture
def connect(llama, gguf):
    """RemoteBackend.connect with the test's server and the GGUF's tokenizer; closed after the test."""
    opened = []

    def make(on_health=None, **overrides) -> RemoteBackend:
        config = RemoteConfig(**({"url": llama.url, "tokenizer": str(gguf)} | overrides))
        backend = RemoteBackend.connect(config, on_health=on_health)
        opened.append(backend)
        return backend

    yield make
    for backend in opened:
        backend.close()


def test_token_id_prompt_gives_the_local_engines_completion(connect, gguf):
    backend = connect()
    assert (backend.server, backend.api) == ("llama.cpp", "completions")
    assert "token ids" in backend.describe()
    streamed: list[str] = []
    remote = backend.complete(request(), on_text=streamed.append)
    engine = CompletionEngine.load(str(gguf), "none", drafter="none", dtype="float32")
    engine.context_budget = ContextBudget()  # a CPU engine keeps less context; the remote default is the GPU's
    engine.heal = False  # a server cannot apply the healing constraint: the remote prompt ends at the cursor
    local = engine.complete(request())
    # Same prompt tokens, same greedy model (llama.cpp and torch, both float32): same completion.
    assert remote.raw_text == local.raw_text and remote.text == local.text
    assert remote.text and printable(remote.text)
    assert "".join(streamed) == remote.raw_text
    assert remote.stop_reason == "max_new_tokens"
    assert remote.stats.emitted == 16 and remote.prompt_tokens == local.prompt_tokens
    assert remote.stats.prompt_tokens == remote.prompt_tokens  # llama.cpp's timings: cache_n + prompt_n

    # Typing on: the server's prompt cache holds the common prefix, and says so.
    again = backend.complete(request(PREFIX + " +"))
    assert again.stats.reused_tokens > 0 and again.stats.prefill_tokens < again.stats.prompt_tokens
    stats = backend.stats()
    assert stats["requests"] == 2 and stats["errors"] == 0 and stats["state"] == "ready"
    assert stats["metrics"].get("llamacpp:tokens_predicted_total", 0) >= 16  # read from /metrics


def test_without_a_tokenizer_llama_cpp_renders_the_prompt_through_infill(connect):
    backend = connect(tokenizer="none")
    assert backend.api == "infill"
    result = backend.complete(request())
    assert result.text and printable(result.text) and result.stop_reason == "max_new_tokens"
    text_prompt = connect(tokenizer="none", api="completions")  # any OpenAI-compatible server: a text prompt
    assert "prompt as text" in text_prompt.describe()
    assert text_prompt.complete(request()).text


def test_cancel_closes_the_stream_and_the_server_stops(connect, llama):
    backend = connect()
    cancel = threading.Event()
    result = backend.complete(request(max_new_tokens=LONG), cancel=cancel, on_text=lambda _: cancel.set())
    assert result.stop_reason == "cancelled" and result.raw_text
    slot = llama.wait_idle()
    assert slot["next_token"][0]["n_decoded"] < LONG  # the server stopped when the connection closed
    assert backend.complete(request()).text  # and the next request is served as usual


def test_the_budget_answers_with_what_streamed_and_stops_the_server(connect, llama):
    backend = connect()
    backend.complete(request())  # the prompt is cached: text streams well within the budget below
    # The first text comes within milliseconds; 3 s leaves room on a loaded CI machine and is still
    # far from the LONG tokens the server would otherwise write.
    result = backend.complete(request(max_new_tokens=LONG, budget_ms=3000, received_at=time.monotonic()))
    assert result.stop_reason == "deadline" and result.raw_text
    assert llama.wait_idle()["next_token"][0]["n_decoded"] < LONG


def test_requests_with_no_text_by_their_deadline_say_the_backend_is_slow(connect):
    changes: list[Health] = []
    backend = connect(on_health=changes.append)
    for _ in range(3):  # as an editor sees it: answered empty at the deadline, decoding on, then superseded
        cancel = threading.Event()
        late = request(max_new_tokens=LONG, budget_ms=1, received_at=time.monotonic() - 1)  # deadline already past
        backend.complete(late, cancel=cancel, on_answer=lambda partial: cancel.set())
    assert backend.health.state == "slow" and "no text within the budget" in backend.health.message
    assert backend.complete(request()).text
    assert [h.state for h in changes] == ["slow", "ready"]


def test_a_backend_that_goes_away_is_reported_and_found_again(connect, llama):
    changes: list[Health] = []
    backend = connect(on_health=changes.append)
    assert backend.complete(request()).text
    llama.stop()
    try:
        with pytest.raises(BackendError, match="not reachable"):
            backend.complete(request())
        assert backend.health.state == "unavailable" and "retrying" in backend.health.message
    finally:
        llama.start()
    deadline = time.monotonic() + 30
    while backend.health.state != "ready" and time.monotonic() < deadline:
        time.sleep(0.1)
    assert [h.state for h in changes] == ["unavailable", "ready"]
    assert "is back" in changes[-1].message
    assert backend.complete(request()).text


def test_the_servers_own_speculation_shows_in_the_figures(gguf, tmp_path):
    # The same model drafts for itself: every greedy draft token is accepted.
    server = LlamaServer(gguf, tmp_path / "spec.log", "-md", str(gguf), "--spec-type", "draft-simple",
                         "--spec-draft-n-max", "4", "-np", "1",
                         "--cache-ram", "0").start()
    backend = RemoteBackend.connect(RemoteConfig(server.url, tokenizer=str(gguf)))
    try:
        result = backend.complete(request(max_new_tokens=32))
        assert result.stats.drafted > 0 and result.stats.drafters["server"].drafted == result.stats.drafted
        assert result.stats.tau > 1.0
        assert backend.stats()["serverDraft"]["acceptance"] > 0.5
    finally:
        backend.close()
        server.stop()


def test_a_bearer_token_is_sent_and_a_missing_one_explained(gguf, tmp_path):
    server = LlamaServer(gguf, tmp_path / "key.log", "--api-key", "s3cret", "-np", "1", "--cache-ram", "0").start()
    without = RemoteBackend.connect(RemoteConfig(server.url, tokenizer=str(gguf)))
    with_key = RemoteBackend.connect(RemoteConfig(server.url, tokenizer=str(gguf), api_key="s3cret"))
    try:
        assert without.health.state == "unavailable" and "API key" in without.health.message
        with pytest.raises(BackendError, match="API key"):
            without.complete(request())
        assert with_key.health.state == "ready" and with_key.complete(request()).text
    finally:
        without.close()
        with_key.close()
        server.stop()


def test_urls_off_this_machine_must_use_tls():
    assert check_url("http://127.0.0.1:8080/v1/") == ("http://127.0.0.1:8080", True)
    assert check_url("http://localhost:8000") == ("http://localhost:8000", True)
    assert check_url("http://[::1]:8000")[1] and is_loopback("127.0.0.2")
    assert check_url("https://gpu.example.invalid/v1") == ("https://gpu.example.invalid", False)
    for url in ("http://gpu.example.invalid:8000", "http://192.0.2.1:8000"):  # refused before any connection
        with pytest.raises(BackendError, match="https"):
            RemoteBackend(RemoteConfig(url))
    for url in ("ftp://127.0.0.1", "127.0.0.1:8080", "http://127.0.0.1:99999"):
        with pytest.raises(BackendError):
            check_url(url)


# -- what other servers send (shapes from vLLM's and SGLang's OpenAI-compatible streams) ------------

VLLM_STREAM = [
    'data: {"id":"cmpl-1","object":"text_completion","choices":[{"index":0,"text":"    return","finish_reason":null}]}',
    'data: {"id":"cmpl-1","object":"text_completion","choices":[{"index":0,"text":" a + b","finish_reason":"length"}]}',
    'data: {"id":"cmpl-1","object":"text_completion","choices":[],"usage":{"prompt_tokens":120,'
    '"completion_tokens":5,"prompt_tokens_details":{"cached_tokens":96}}}',
    "data: [DONE]",
]
VLLM_METRICS = """# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="Qwen/Qwen2.5-Coder-7B"} 40.0
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="Qwen/Qwen2.5-Coder-7B"} 200.0
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="Qwen/Qwen2.5-Coder-7B"} 150.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",position="0"} 38.0
vllm:num_requests_running{engine="0",model_name="Qwen/Qwen2.5-Coder-7B"} 3.0
vllm:prompt_tokens_total{engine="0"} 99999.0
"""


def test_reads_an_openai_stream_with_usage_and_the_metrics_page():
    from engine.backends.wire import decode_stats, parse_event, parse_metrics

    events = [parse_event(line) for line in VLLM_STREAM]
    assert events[-1] is None and parse_event("") is None and parse_event(": keep-alive") is None
    assert "".join(e.text for e in events if e) == "    return a + b"
    assert events[1].done and events[1].finish_reason == "max_new_tokens"
    stats = decode_stats({}, events[2].usage, chunks=2, prompt_tokens=118, wall_ms=40.0)
    assert (stats.prompt_tokens, stats.reused_tokens, stats.prefill_tokens, stats.emitted) == (120, 96, 24, 5)
    assert stats.verifier_passes == 0 and stats.tau == 0.0  # vLLM does not say per request
    metrics = parse_metrics(VLLM_METRICS)
    assert metrics["vllm:spec_decode_num_draft_tokens_total"] == 200.0 and metrics["draftAcceptance"] == 0.75
    assert metrics["vllm:num_requests_running"] == 3.0 and "vllm:prompt_tokens_total" not in metrics
    error = parse_event('data: {"error": {"message": "model not found", "code": 404}}')
    assert error.done and error.error == "model not found"
    assert parse_event("data: {not json").error
