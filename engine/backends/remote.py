"""The remote backend: completions from a shared inference server (vLLM, SGLang, llama.cpp).

quickdraft keeps the editor side (documents, FIM prompt, post-processing, budget,
cancellation, telemetry); the server decodes, with its own speculation. Requests go
out over one pooled keep-alive HTTP client (httpx2) living on its own asyncio loop, so
a request is cancelled by cancelling its task: the stream's connection closes at once
and the server stops generating. The worker thread that calls `complete` only waits.

Health: a request that cannot reach the server, or gets an error, marks the backend
`unavailable` (the editor hears why) and a probe asks the server every few seconds
until it answers again; requests keep answering empty meanwhile, never hang, and the
first one that succeeds (or the probe) brings the state back to `ready`. Nothing by
the deadline several times in a row reads `slow`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import time
from collections import deque
from dataclasses import dataclass, replace
from typing import Callable

import httpx2

from engine.backends.base import BackendError, Health, HealthCallback, TextCallback
from engine.backends.connection import IoThread, check_url, http_error_message, make_client, transport_message
from engine.backends.remote_prompt import PromptRenderer, family_for, load_tokenizer
from engine.backends.stream import Stream
from engine.backends.wire import completions_body, decode_stats, infill_body, parse_event, parse_metrics
from engine.completion import ANSWER_MARGIN_S, CompletionRequest, CompletionResult
from engine.decoding.stops import StopReason
from engine.errors import ModelError
from engine.text.postprocess import postprocess
from engine.stats import percentile
from engine.text.cursor import Cursor
from engine.text.syntax import language_from
from engine.text.text_stream import stop_strings_for

log = logging.getLogger(__name__)

PROBE_INTERVAL_S = 2.0  # while unavailable, ask the server this often whether it is back
SLOW_AFTER = 3  # requests in a row with no text by their deadline before the status says slow
CANCEL_POLL_S = 0.005  # how often the waiting worker looks at the cancel flag
METRICS_EVERY_S = 10.0
WARM_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class RemoteConfig:
    url: str  # http://127.0.0.1:8080, https://gpu.example.com (a trailing /v1 is fine)
    model: str | None = None  # the name the server serves; None: the first one it lists
    api_key: str | None = None  # sent as a bearer token
    tokenizer: str | None = None  # preset, directory, .gguf or cached hub id; None: try `model`; "none": text
    api: str = "auto"  # completions | infill (llama.cpp) | auto: infill on llama.cpp without a local tokenizer
    connect_timeout_s: float = 3.0
    request_timeout_s: float = 30.0  # the longest any request may take when it has no budget


class RemoteBackend:
    kind = "remote"
    shared = True  # other users' requests run on it too
    drafter_mode = "server"  # the server drafts (or not) by its own configuration

    def __init__(self, config: RemoteConfig, *, on_health: HealthCallback | None = None) -> None:
        self.base_url, self.loopback = check_url(config.url)
        if config.api not in ("auto", "completions", "infill"):
            raise BackendError(f"unknown backend api {config.api!r}; use auto, completions or infill")
        self.config = config
        self.on_health = on_health
        self.model = config.model
        self.server = ""  # who answers: llama.cpp, vllm, sglang … (as /v1/models says)
        self.renderer = PromptRenderer()  # replaced once the model (and its tokenizer) is known
        self.api = "completions"
        self.health = Health("ready", "")
        self.requests = self.errors = 0
        self.first_text_ms: deque[float] = deque(maxlen=500)
        self.server_draft = {"drafted": 0, "accepted": 0}
        self.metrics: dict = {}
        self._metrics_at = 0.0
        self._metrics_supported = True
        self._slow_streak = 0
        self._probing = False
        self._closed = False
        self._lock = threading.Lock()
        self._io = IoThread("quickdraft-remote")
        self._client: httpx2.AsyncClient = self._io.call(self._make_client(), 10)

    async def _make_client(self) -> httpx2.AsyncClient:
        return make_client(self.base_url, self.config.api_key, loopback=self.loopback,
                           connect_timeout_s=self.config.connect_timeout_s)

    @classmethod
    def connect(cls, config: RemoteConfig, *, on_health: HealthCallback | None = None) -> "RemoteBackend":
        """Ask the server who it is and load the model's tokenizer if it is here; a server that is
        down is not an error yet (the status says so and the backend waits for it)."""
        backend = cls(config, on_health=on_health)
        try:
            backend._io.call(backend._discover(), config.connect_timeout_s * 2 + 2)
        except (BackendError, concurrent.futures.TimeoutError) as error:
            backend._unavailable(str(error) or f"{backend.base_url} did not answer")
        backend._choose_prompting()
        return backend

    def _choose_prompting(self) -> None:
        spec = self.config.tokenizer if self.config.tokenizer is not None else self.model
        tokenizer = None
        if spec and spec != "none":
            try:
                tokenizer = load_tokenizer(spec)
            except ModelError as error:
                if self.config.tokenizer is not None:
                    raise  # asked for by name: say so rather than silently render text
                log.info("no local tokenizer for %s (%s): the prompt goes as text", spec, error)
        budget = self.renderer.context_budget
        self.renderer = PromptRenderer(tokenizer) if tokenizer is not None else PromptRenderer(
            family=family_for(self.model))
        self.renderer.context_budget = budget
        infill_ok = self.server == "llama.cpp" and tokenizer is None
        self.api = self.config.api if self.config.api != "auto" else ("infill" if infill_ok else "completions")

    async def _discover(self) -> None:
        data = await self._get_json("/v1/models")
        models = [m for m in (data.get("data") or []) if isinstance(m, dict)]
        if models:
            self.model = self.model or str(models[0].get("id") or "") or None
            self.server = str(models[0].get("owned_by") or "")
        try:
            props = await self._get_json("/props")  # only llama.cpp's server has it
            if "default_generation_settings" in props or "build_info" in props:
                self.server = "llama.cpp"
        except BackendError:
            pass

    async def _get_json(self, path: str) -> dict:
        try:
            response = await self._client.get(path, timeout=self.config.connect_timeout_s * 2)
        except httpx2.TransportError as error:
            raise BackendError(transport_message(self.base_url, error)) from None
        if response.status_code >= 400:
            raise BackendError(http_error_message(self.base_url, path, response.status_code, response.text,
                                                  self.config.api_key))
        try:
            data = response.json()
        except ValueError:
            raise BackendError(f"{self.base_url}{path} did not answer JSON") from None
        return data if isinstance(data, dict) else {}

    # -- completions ----------------------------------------------------------------------
    def complete(self, request: CompletionRequest, cancel: threading.Event | None = None,
                 on_text: TextCallback | None = None,
                 on_answer: Callable[[CompletionResult], None] | None = None) -> CompletionResult:
        started = time.monotonic()
        budget_start = request.received_at if request.received_at is not None else started
        cursor = Cursor.at(request.prefix, request.suffix, language_from(request.language, request.path),
                           request.multiline)
        multiline = cursor.multiline
        # Like the local engine: the answer leaves a little before the budget ends, for the reply.
        deadline = budget_start + request.budget_ms / 1000 - ANSWER_MARGIN_S if request.budget_ms else None
        # Without a budget, or when decoding goes on after the budget's answer, the stream still
        # ends: at the longest any request may take.
        until = deadline if deadline is not None and on_answer is None else started + self.config.request_timeout_s
        path, body, prompt_tokens, anchored = self._request(request, cursor)

        def finish(stream: Stream, reason: StopReason) -> CompletionResult:
            text = stream.text
            shown = postprocess(text, cursor, ended=reason in (StopReason.EOS, StopReason.STOP_STRING))
            stats = decode_stats(stream.timings, stream.usage, chunks=stream.chunks, prompt_tokens=prompt_tokens,
                                 wall_ms=(time.monotonic() - started) * 1000)
            return CompletionResult(text=shown.text, replace_after=shown.replace_after, raw_text=text, token_ids=[],
                                    stop_reason=reason, multiline=multiline, prompt_tokens=prompt_tokens, stats=stats,
                                    anchored=anchored)

        answer_at_deadline = None
        if on_answer is not None and deadline is not None:
            answer_at_deadline = (deadline, lambda stream: on_answer(finish(stream, StopReason.DEADLINE)))
        stream = self._stream(path, body, until, cancel, on_text, answer_at_deadline)
        self._after(stream, deadline, started)
        if stream.error is not None:
            raise stream.error
        return finish(stream, stream.reason or StopReason.EOS)

    def warm(self, request: CompletionRequest, cancel: threading.Event | None = None) -> int:
        """One token's request for the prompt: the server caches it (llama.cpp cache_prompt,
        vLLM/SGLang prefix caching), so the real request after it feeds only what changed."""
        one_line = Cursor.at(request.prefix, request.suffix, None, multiline=False)  # one token: no syntax needed
        path, body, prompt_tokens, _ = self._request(replace(request, max_new_tokens=1), one_line)
        stream = self._stream(path, body, time.monotonic() + WARM_TIMEOUT_S, cancel, None)
        ok = stream.error is None and stream.reason not in (StopReason.CANCELLED, StopReason.DEADLINE)
        return prompt_tokens if ok else 0

    def _request(self, request: CompletionRequest, cursor: Cursor) -> tuple[str, dict, int, bool]:
        """(endpoint, JSON body, prompt tokens, whether the prompt continues an anchor)."""
        temperature, seed, limit = request.temperature, request.seed, request.max_new_tokens
        if self.api == "infill":
            prefix, suffix, documents = self.renderer.windows(request, cursor.language)
            body = infill_body(prefix, suffix, documents, max_tokens=limit, temperature=temperature,
                               stop=stop_strings_for(cursor), seed=seed)
            return "/infill", body, (len(prefix) + len(suffix)) // 3, False
        prompt = self.renderer.render(request, cursor.language)
        body = completions_body(self.model, prompt.prompt, max_tokens=limit, temperature=temperature,
                                stop=stop_strings_for(cursor),
                                stop_token_ids=prompt.stop_token_ids, seed=seed)
        return "/v1/completions", body, prompt.prompt_tokens, prompt.anchored

    def _stream(self, path: str, body: dict, until: float, cancel: threading.Event | None,
                on_text: TextCallback | None, answer_at_deadline=None) -> Stream:
        """Run one streamed request on the I/O loop until `until`; stop (and close it) on cancel.

        answer_at_deadline: (deadline, callback) — the callback gets the stream so far then,
        on this (the worker's) thread, and the stream goes on.
        """
        stream = Stream()
        future = self._io.submit(self._read(path, body, until, stream, on_text))
        while True:
            wait = CANCEL_POLL_S if answer_at_deadline is None else max(  # woken at the deadline itself
                0.0, min(CANCEL_POLL_S, answer_at_deadline[0] - time.monotonic()))
            try:
                future.result(timeout=wait)
                return stream
            except concurrent.futures.TimeoutError:
                if cancel is not None and cancel.is_set():
                    future.cancel()  # cancels the task: the connection closes, the server stops
                    stream.closed.wait(1.0)
                    stream.reason = StopReason.CANCELLED
                    return stream
                if answer_at_deadline is not None and time.monotonic() >= answer_at_deadline[0]:
                    answer_at_deadline[1](stream)
                    answer_at_deadline = None
            except concurrent.futures.CancelledError:
                stream.reason = StopReason.CANCELLED
                return stream

    async def _read(self, path: str, body: dict, until: float, stream: Stream,
                    on_text: TextCallback | None) -> None:
        try:
            remaining = until - time.monotonic()
            if remaining <= 0:
                stream.reason = StopReason.DEADLINE
                return
            async with asyncio.timeout(remaining):
                async with self._client.stream("POST", path, json=body, timeout=httpx2.Timeout(
                        remaining + 1, connect=self.config.connect_timeout_s)) as response:
                    if response.status_code >= 400:
                        text = (await response.aread()).decode(errors="replace")
                        if path == "/infill" and response.status_code in (404, 501):
                            self.api = "completions"  # no FIM tokens, or an older server: say it plainly
                        raise BackendError(http_error_message(self.base_url, path, response.status_code, text,
                                                              self.config.api_key))
                    async for line in response.aiter_lines():
                        stream.take(parse_event(line), on_text)
            stream.reason = stream.reason or StopReason.EOS
        except TimeoutError:
            stream.reason = StopReason.DEADLINE
        except httpx2.TransportError as error:
            stream.error = BackendError(transport_message(self.base_url, error))
        except BackendError as error:
            stream.error = error
        finally:
            stream.ended_at = time.monotonic()
            stream.closed.set()

    # -- health -----------------------------------------------------------------------------
    def _after(self, stream: Stream, deadline: float | None, started: float) -> None:
        """Book-keeping after a request: figures, and the health it says the server is in."""
        cancelled_in_time = deadline is None or time.monotonic() < deadline
        if stream.reason == StopReason.CANCELLED and stream.error is None and cancelled_in_time:
            return  # superseded within its budget: says nothing about the server
        self.requests += 1
        if stream.error is not None:
            self.errors += 1
            self._unavailable(str(stream.error))
            return
        if stream.first_text_at is not None:
            self.first_text_ms.append((stream.first_text_at - started) * 1000)
        drafted, accepted = stream.timings.get("draft_n"), stream.timings.get("draft_n_accepted")
        if drafted:
            self.server_draft["drafted"] += int(drafted)
            self.server_draft["accepted"] += int(accepted or 0)
        answered_at = min(stream.first_text_at or float("inf"), stream.ended_at or float("inf"))
        nothing_in_time = deadline is not None and answered_at > deadline
        self._slow_streak = self._slow_streak + 1 if nothing_in_time else 0
        if self._slow_streak >= SLOW_AFTER:
            self._set_health("slow", f"backend {self.base_url} is slow: no text within the budget in the last "
                                     f"{self._slow_streak} requests")
        elif not nothing_in_time:
            self._set_health("ready", f"backend is back: {self.describe()}")
        self._refresh_metrics()

    def _unavailable(self, message: str) -> None:
        self._set_health("unavailable", f"{message}; retrying every {PROBE_INTERVAL_S:.0f} s")
        with self._lock:
            if self._probing or self._closed:
                return
            self._probing = True
        self._io.submit(self._probe())

    async def _probe(self) -> None:
        try:
            while self.health.state == "unavailable" and not self._closed:
                await asyncio.sleep(PROBE_INTERVAL_S)
                try:
                    await self._discover()
                except BackendError:
                    continue
                self._set_health("ready", f"backend is back: {self.describe()}")
        finally:
            self._probing = False

    def _set_health(self, state: str, message: str) -> None:
        with self._lock:
            if self.health.state == state and (state == "ready" or self.health.message == message):
                return
            self.health = Health(state, message)
        (log.warning if state != "ready" else log.info)("backend %s: %s", state, message)
        if self.on_health is not None:
            self.on_health(self.health)

    # -- figures ----------------------------------------------------------------------------
    def _refresh_metrics(self) -> None:
        if self._metrics_supported and time.monotonic() - self._metrics_at > METRICS_EVERY_S:
            self._metrics_at = time.monotonic()
            self._io.submit(self._fetch_metrics())

    async def _fetch_metrics(self) -> None:
        try:
            response = await self._client.get("/metrics", timeout=2.0)
        except httpx2.TransportError:
            return
        if response.status_code != 200:
            self._metrics_supported = False  # llama.cpp without --metrics says 501; others 404
            return
        self.metrics = parse_metrics(response.text)

    def describe(self) -> str:
        prompt = "token ids" if self.renderer.tokenizer is not None and self.api == "completions" else "text"
        where = f"{self.server} at {self.base_url}" if self.server else self.base_url
        return f"{self.model or 'the served model'} on {where} (/{self.api.removeprefix('/')}, prompt as {prompt})"

    def stats(self) -> dict:
        waits = list(self.first_text_ms)
        drafted, accepted = self.server_draft["drafted"], self.server_draft["accepted"]
        return {
            "kind": self.kind, "url": self.base_url, "model": self.model, "server": self.server, "api": self.api,
            "state": self.health.state, "message": self.health.message,
            "requests": self.requests, "errors": self.errors,
            "firstTextMs": {"p50": percentile(waits, 50), "p90": percentile(waits, 90)},
            "serverDraft": {"drafted": drafted, "accepted": accepted,
                            "acceptance": round(accepted / drafted, 4) if drafted else None},
            "metrics": dict(self.metrics),
        }

    def set_drafter(self, mode: str) -> None:
        """Nothing to switch here: the server's own configuration says how it drafts."""

    def set_context_budget(self, **chosen: int | None) -> None:
        self.renderer.context_budget = replace(self.renderer.default_budget,
                                               **{k: v for k, v in chosen.items() if v is not None})

    def close(self) -> None:
        self._closed = True
        try:
            self._io.call(self._client.aclose(), 5)
        except Exception:  # noqa: BLE001 - closing must not raise
            pass
        self._io.stop()
