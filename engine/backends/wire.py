"""What goes over the wire to an inference server, and what comes back, as plain data.

Two request shapes: OpenAI-compatible `/v1/completions` (vLLM, SGLang, llama.cpp's
llama-server) and llama.cpp's own `/infill` (the server renders the FIM prompt with its
tokenizer). Both stream server-sent events; `parse_event` reads either. The figures a
server reports about its own speculation — llama.cpp's per-request `timings`, the
Prometheus counters on `/metrics` — are read here too.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Sequence

from engine.stats import DecodeStats, DrafterStats

SERVER_DRAFTER = "server"  # per-drafter key for the server's own draft figures


def completions_body(model: str | None, prompt: list[int] | str, *, max_tokens: int, temperature: float,
                     stop: Sequence[str], stop_token_ids: Sequence[int] = (), seed: int | None = None) -> dict:
    body = {
        "prompt": prompt, "max_tokens": max_tokens, "temperature": temperature, "stream": True,
        "stop": list(stop),
        "stream_options": {"include_usage": True},  # vLLM and SGLang: token counts in the last event
        "cache_prompt": True,  # llama.cpp: reuse the KV of the common prefix (others ignore it)
    }
    if model:
        body["model"] = model
    if stop_token_ids:
        body["stop_token_ids"] = list(stop_token_ids)  # vLLM/SGLang: FIM separators end the middle
    if seed is not None:
        body["seed"] = seed
    return body


def infill_body(prefix: str, suffix: str, documents: Sequence[tuple[str, str]], *, max_tokens: int,
                temperature: float, stop: Sequence[str], seed: int | None = None) -> dict:
    body = {
        "input_prefix": prefix, "input_suffix": suffix, "prompt": "",
        "input_extra": [{"filename": path, "text": text} for path, text in documents],
        "n_predict": max_tokens, "temperature": temperature, "stream": True, "stop": list(stop),
        "cache_prompt": True,
    }
    if seed is not None:
        body["seed"] = seed
    return body


@dataclass
class StreamEvent:
    text: str = ""
    done: bool = False  # the server finished this completion
    finish_reason: str = ""  # eos | stop_string | max_new_tokens (when done)
    timings: dict = field(default_factory=dict)  # llama.cpp
    usage: dict = field(default_factory=dict)  # OpenAI-style token counts
    error: str = ""


def parse_event(line: str) -> StreamEvent | None:
    """One line of a server-sent event stream; None for blank lines, comments and `[DONE]`."""
    if line.startswith("error:"):  # llama.cpp reports a failure inside the stream this way
        return StreamEvent(done=True, error=_error_text(line[6:].strip()))
    if not line.startswith("data:"):
        return None
    payload = line[5:].strip()
    if not payload or payload == "[DONE]":
        return None
    try:
        data = json.loads(payload)
    except ValueError:
        return StreamEvent(done=True, error=f"unreadable event from the server: {payload[:120]!r}")
    if not isinstance(data, dict):
        return None
    if "error" in data:
        return StreamEvent(done=True, error=_error_text(data["error"]))
    event = StreamEvent(timings=data.get("timings") or {}, usage=data.get("usage") or {})
    choices = data.get("choices")
    if isinstance(choices, list):  # /v1/completions
        choice = choices[0] if choices and isinstance(choices[0], dict) else {}
        event.text = str(choice.get("text") or "")
        reason = choice.get("finish_reason")
        event.done = bool(reason)
        event.finish_reason = {"length": "max_new_tokens"}.get(reason, "eos") if reason else ""
    else:  # /infill (llama.cpp's own format)
        event.text = str(data.get("content") or "")
        event.done = bool(data.get("stop"))
        stop_type = data.get("stop_type")
        event.finish_reason = {"limit": "max_new_tokens", "word": "stop_string"}.get(stop_type, "eos") if event.done else ""
    return event


def _error_text(error) -> str:
    if isinstance(error, str):
        try:
            error = json.loads(error)
        except ValueError:
            return error[:300]
    if isinstance(error, dict):
        inner = error.get("error", error)
        if isinstance(inner, dict):
            return str(inner.get("message") or inner)[:300]
        return str(inner)[:300]
    return str(error)[:300]


def decode_stats(timings: dict, usage: dict, *, chunks: int, prompt_tokens: int, wall_ms: float) -> DecodeStats:
    """The request's figures: llama.cpp's timings where the server sent them, else token counts."""
    stats = DecodeStats(prompt_tokens=prompt_tokens, decode_ms=wall_ms)
    if timings:
        fed, cached = int(timings.get("prompt_n") or 0), int(timings.get("cache_n") or 0)
        stats.prompt_tokens, stats.prefill_tokens, stats.reused_tokens = fed + cached, fed, cached
        stats.emitted = int(timings.get("predicted_n") or 0)
        stats.prefill_ms = float(timings.get("prompt_ms") or 0.0)
        stats.verify_ms = float(timings.get("predicted_ms") or 0.0)
        drafted, accepted = int(timings.get("draft_n") or 0), int(timings.get("draft_n_accepted") or 0)
        stats.drafted, stats.accepted = drafted, accepted
        # Each verifier pass keeps its accepted drafts plus one token of its own.
        stats.verifier_passes = max(stats.emitted - accepted, 0)
        stats.corrections = stats.verifier_passes
        if drafted:
            stats.drafters[SERVER_DRAFTER] = DrafterStats(proposals=stats.verifier_passes, drafted=drafted,
                                                          accepted=accepted)
    elif usage:
        stats.prompt_tokens = int(usage.get("prompt_tokens") or prompt_tokens)
        stats.emitted = int(usage.get("completion_tokens") or 0)
        cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens")
        if cached is not None:
            stats.reused_tokens = int(cached)
            stats.prefill_tokens = stats.prompt_tokens - stats.reused_tokens
    else:  # cut short (budget, cancel): each streamed event carried about one token
        stats.emitted = chunks
    return stats


# Prometheus counters worth showing: speculation (vLLM spec_decode_*, SGLang spec_*) and load.
_METRIC = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(\{[^}]*\})?\s+([-+0-9.eEinfINFaN]+)")
_KEEP = re.compile(r"spec_decode|spec_accept|num_requests_running|num_requests_waiting|cache_usage"
                   r"|^llamacpp:(requests_processing|requests_deferred|tokens_predicted_total"
                   r"|prompt_tokens_total|n_decode_total|n_busy_slots_per_decode)")


def parse_metrics(text: str) -> dict:
    """The interesting series of a Prometheus text page, summed over their labels."""
    figures: dict[str, float] = {}
    for line in text.splitlines():
        match = _METRIC.match(line)
        if match is None or not _KEEP.search(match.group(1)):
            continue
        try:
            value = float(match.group(3))
        except ValueError:
            continue
        figures[match.group(1)] = figures.get(match.group(1), 0.0) + value
    drafted = figures.get("vllm:spec_decode_num_draft_tokens_total")
    accepted = figures.get("vllm:spec_decode_num_accepted_tokens_total")
    if drafted:
        figures["draftAcceptance"] = round((accepted or 0.0) / drafted, 4)
    return figures
