"""`quickdraft bench session`: what a user feels, measured through the real server.

A headless pygls LanguageClient starts `quickdraft serve` over stdio, opens real source
files, deletes function bodies and re-types them character by character in real time.
Like VS Code, it asks for an automatic inline completion once the typing pauses for
`debounce_ms`, and cancels (`$/cancelRequest`) the request in flight when the next key
arrives. For every request it records the end-to-end latency seen by the client, the
server's own figures (prefill tokens, tokens emitted, τ, stop reason, from the
`quickdraft/stats` request), and whether the shown completion is what the user typed next.

No tensors here: the server process does all the model work.
"""

from __future__ import annotations

import asyncio
import logging
import os
import platform
import random
import sys
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Sequence

from lsprotocol import types
from pygls.lsp.client import LanguageClient

from engine.bench.corpus import Hole, body_holes, default_corpus, display_path, expand_paths, read_source
from engine.stats import percentile
from lsp_server.plain_data import plain_data

log = logging.getLogger(__name__)

BUDGET_MS_DEFAULT = 200.0  # the server's default; used when --budget-ms is not given


@dataclass
class SessionBenchConfig:
    files: int = 4
    holes_per_file: int = 2
    min_hole_chars: int = 20
    max_hole_chars: int = 300  # longer bodies are skipped: typing time grows with every character
    typing_cps: float = 6.0  # characters per second (≈ 70 words per minute)
    debounce_ms: float = 75.0  # VS Code asks for inline completions this long after the last key
    # The user pauses where a line's code starts (after Enter and the indentation), and at the
    # empty body right after deleting it: where a multi-line suggestion is most useful.
    line_pause_ms: float = 1000.0
    # A patient user waits at those pauses until the suggestion arrives (at most settle_ms): on a
    # slow machine this is the only way to measure latency and quality at all.
    patient: bool = False
    settle_ms: float = 60_000.0
    seed: int = 0
    # Server flags (None: the server's machine defaults, see `quickdraft serve --help`).
    verifier: str | None = None
    draft: str | None = None
    drafters: Sequence[str | None] = (None,)  # one session per entry; None: the server's default drafter
    dtype: str | None = None
    device: str | None = None
    budget_ms: float | None = None
    max_new_tokens: int | None = None
    adaptive_drafting: bool | None = None  # None: server default
    load_timeout_s: float = 900.0
    progress: bool = True


@dataclass
class RequestRecord:
    session: str
    file: str
    hole: int
    version: int
    line: int
    character: int
    typed: int  # characters of the hole typed so far
    sent_s: float  # seconds since the session started
    status: str = "pending"  # answered | cancelled | error
    latency_ms: float | None = None
    shown: str = ""  # the first item's insertText ("" when the server answered nothing)
    replace_chars: int = 0  # characters after the cursor the item's range replaces
    expected: str = ""  # the rest of the hole: what the user types next
    exact_match: bool = False
    accepted_chars: int = 0
    within_budget: bool | None = None
    server: dict | None = None  # the server's record of this request (quickdraft/stats), if found
    error: str = ""


def utf16_len(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


def judge(shown: str, expected: str) -> tuple[bool, int]:
    """(exact match, accepted characters) of a shown completion against what is typed next.

    Exact: the completion (trailing blanks aside) is a prefix of what the user types next —
    taking it would have been right. Accepted characters: the longest common prefix, what
    word-by-word acceptance keeps.
    """
    accepted = 0
    for a, b in zip(shown, expected):
        if a != b:
            break
        accepted += 1
    body = shown.rstrip()
    return bool(body) and expected.startswith(body), accepted


# ----------------------------------------------------------------------------- holes


def session_holes(files: Sequence[Path], config: SessionBenchConfig) -> list[tuple[Path, str, list[Hole]]]:
    """Per file, up to `holes_per_file` function bodies of a typeable size, chosen by the seed."""
    chosen = []
    for path in files:
        text = read_source(path)
        if text is None:
            continue
        name = display_path(path)
        holes = [h for h in body_holes(name, text)
                 if config.min_hole_chars <= len(h.middle) <= config.max_hole_chars and h.line >= 8]
        if not holes:
            continue
        rng = random.Random(f"{config.seed}:{name}:session")
        picked = sorted(rng.sample(holes, min(config.holes_per_file, len(holes))), key=lambda h: len(h.prefix))
        chosen.append((path, text, picked))
        if len(chosen) >= config.files:
            break
    return chosen


# ----------------------------------------------------------------------------- the client


class SessionClient:
    """A pygls client driving one `quickdraft serve` process."""

    def __init__(self, config: SessionBenchConfig, drafter: str | None, log_file: Path | None) -> None:
        self.config = config
        self.drafter = drafter
        self.log_file = log_file
        self.client = LanguageClient("quickdraft-bench", "0.1")
        self.statuses: list[dict] = []
        self.ready = asyncio.Event()
        self.server_records: dict[tuple[str, str], dict] = {}

        @self.client.feature("quickdraft/status")
        def on_status(ls, params) -> None:
            status = plain_data(params)
            status = status if isinstance(status, dict) else {}
            self.statuses.append(status)
            if status.get("state") in ("ready", "error"):
                self.ready.set()

        @self.client.feature(types.WINDOW_LOG_MESSAGE)
        def on_log(ls, params) -> None:
            log.debug("server: %s", params.message)

    def serve_args(self) -> list[str]:
        c = self.config
        args = ["-m", "lsp_server.cli", "serve"]
        for flag, value in (("--verifier", c.verifier), ("--draft", c.draft), ("--drafter", self.drafter),
                            ("--dtype", c.dtype), ("--device", c.device), ("--budget-ms", c.budget_ms),
                            ("--max-new-tokens", c.max_new_tokens), ("--log-file", self.log_file)):
            if value is not None:
                args += [flag, str(value)]
        return args

    async def start(self) -> dict:
        await self.client.start_io(sys.executable, *self.serve_args())
        options: dict = {}
        if self.config.adaptive_drafting is not None:
            options["adaptiveDrafting"] = self.config.adaptive_drafting
        await self.client.initialize_async(types.InitializeParams(
            capabilities=types.ClientCapabilities(), initialization_options=options))
        self.client.initialized(types.InitializedParams())
        try:
            await asyncio.wait_for(self.ready.wait(), self.config.load_timeout_s)
        except asyncio.TimeoutError as error:
            raise RuntimeError(f"the server did not load its models within {self.config.load_timeout_s:.0f} s; "
                               f"statuses: {self.statuses}") from error
        status = self.statuses[-1]
        if status.get("state") == "error":
            raise RuntimeError(f"the server could not load its models: {status.get('message')}")
        return status

    async def stop(self) -> None:
        try:
            await asyncio.wait_for(self.client.shutdown_async(None), 60)
            self.client.exit(None)
        except Exception as error:  # a server that died already still has to be reaped
            log.warning("server shutdown: %s", error)
        try:
            await asyncio.wait_for(self.client.stop(), 30)
        except Exception as error:
            log.warning("client stop: %s", error)

    async def stats(self) -> dict:
        result = plain_data(await self.client.protocol.send_request_async("quickdraft/stats", {}))
        result = result if isinstance(result, dict) else {}
        for record in result.get("recent") or []:
            if isinstance(record, dict):
                self.server_records[(record.get("uri", ""), str(record.get("id", "")))] = record
        return result

    # -- documents ------------------------------------------------------------------
    def open(self, uri: str, text: str, version: int) -> None:
        self.client.text_document_did_open(types.DidOpenTextDocumentParams(
            types.TextDocumentItem(uri=uri, language_id=_language_id(uri), version=version, text=text)))

    def change(self, uri: str, version: int, start: types.Position, end: types.Position, text: str) -> None:
        self.client.text_document_did_change(types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
            content_changes=[types.TextDocumentContentChangePartial(range=types.Range(start, end), text=text)]))

    def close(self, uri: str) -> None:
        self.client.text_document_did_close(types.DidCloseTextDocumentParams(types.TextDocumentIdentifier(uri)))

    def request_completion(self, uri: str, position: types.Position) -> tuple[str, asyncio.Future]:
        msg_id = str(uuid.uuid4())
        params = types.InlineCompletionParams(
            text_document=types.TextDocumentIdentifier(uri), position=position,
            context=types.InlineCompletionContext(trigger_kind=types.InlineCompletionTriggerKind.Automatic))
        future = asyncio.wrap_future(self.client.protocol.send_request(
            types.TEXT_DOCUMENT_INLINE_COMPLETION, params, msg_id=msg_id))
        return msg_id, future

    def cancel(self, msg_id: str) -> None:
        self.client.protocol.notify(types.CANCEL_REQUEST, types.CancelParams(id=msg_id))


def _language_id(uri: str) -> str:
    suffix = os.path.splitext(uri)[1]
    return {".py": "python", ".js": "javascript", ".ts": "typescript", ".go": "go", ".rs": "rust"}.get(suffix, "plaintext")


def _position(text_before: str) -> types.Position:
    """LSP position (UTF-16 columns) of the end of `text_before`."""
    line = text_before.count("\n")
    column = text_before[text_before.rfind("\n") + 1:]
    return types.Position(line=line, character=utf16_len(column))


class Typist:
    """Types one hole back in and triggers completions the way VS Code does."""

    def __init__(self, session: "SessionRun", uri: str, hole: Hole, hole_index: int) -> None:
        self.session = session
        self.uri = uri
        self.hole = hole
        self.hole_index = hole_index
        self.pending: asyncio.Task | None = None  # debounce timer + request in flight
        self.in_flight: tuple[str, RequestRecord] | None = None

    async def interrupt(self) -> None:
        """A key was pressed: drop the debounce timer and cancel the request in flight."""
        if self.in_flight is not None:
            msg_id, record = self.in_flight
            self.session.client.cancel(msg_id)
            record.status = "cancelled"
            self.in_flight = None
        if self.pending is not None and not self.pending.done():
            self.pending.cancel()
            try:
                await self.pending
            except asyncio.CancelledError:
                pass
        self.pending = None

    async def trigger(self, version: int, typed: int) -> None:
        await asyncio.sleep(self.session.config.debounce_ms / 1000)
        session = self.session
        before = self.hole.prefix + self.hole.middle[:typed]
        position = _position(before)
        record = RequestRecord(
            session=session.name, file=self.hole.path, hole=self.hole_index, version=version, line=position.line,
            character=position.character, typed=typed, sent_s=round(time.monotonic() - session.started, 3),
            expected=self.hole.middle[typed:],
        )
        session.records.append(record)
        sent = time.monotonic()
        msg_id, future = session.client.request_completion(self.uri, position)
        self.in_flight = (msg_id, record)
        # A cancelled request still gets an answer (or an error) later; nobody awaits it then.
        future.add_done_callback(lambda f: f.cancelled() or f.exception())
        try:
            result = await asyncio.shield(future)
        except asyncio.CancelledError:
            raise
        except Exception as error:  # RequestCancelled after $/cancelRequest, or a server error
            if record.status == "pending":
                record.status, record.error = "error", f"{type(error).__name__}: {error}"
            return
        if record.status != "pending":
            return
        self.in_flight = None
        record.latency_ms = round((time.monotonic() - sent) * 1000, 2)
        record.status = "answered"
        items = result.items if isinstance(result, types.InlineCompletionList) else (result or [])
        if items:
            item = items[0]
            record.shown = item.insert_text if isinstance(item.insert_text, str) else item.insert_text.value
            if item.range is not None and item.range.end != item.range.start:
                record.replace_chars = item.range.end.character - item.range.start.character
        record.exact_match, record.accepted_chars = judge(record.shown, record.expected)
        record.within_budget = record.latency_ms <= session.budget_ms
        # The server's figures for this request, matched later by version; a task of its own so
        # the next key (which cancels this task) cannot cut it off.
        session.stats_tasks.append(asyncio.ensure_future(session.client.stats()))

    async def pause(self) -> None:
        """The user stops typing for a moment (or, if patient, until the suggestion arrives)."""
        config = self.session.config
        started = time.monotonic()
        if config.patient and self.pending is not None:
            try:
                await asyncio.wait_for(asyncio.shield(self.pending), config.settle_ms / 1000)
            except asyncio.TimeoutError:
                pass
        rest = config.line_pause_ms / 1000 - (time.monotonic() - started)
        if rest > 0:
            await asyncio.sleep(rest)

    async def type_hole(self, start_version: int) -> int:
        """Delete the hole, then type it back; returns the document's last version."""
        session, hole, config = self.session, self.hole, self.session.config
        version = start_version + 1
        session.client.change(self.uri, version, _position(hole.prefix), _position(hole.prefix + hole.middle), "")
        # Deleting is an edit too: the editor asks for a suggestion on the empty body.
        self.pending = asyncio.ensure_future(self.trigger(version, 0))
        await self.pause()
        for typed, char in enumerate(hole.middle, start=1):
            await self.interrupt()
            version += 1
            here = _position(hole.prefix + hole.middle[: typed - 1])
            session.client.change(self.uri, version, here, here, char)
            self.pending = asyncio.ensure_future(self.trigger(version, typed))
            session.typed_chars += 1
            if session.bar is not None:
                session.bar.update(1)
            line_so_far = hole.middle[:typed].rsplit("\n", 1)[-1]
            next_char = hole.middle[typed:typed + 1]
            if "\n" in hole.middle[:typed] and not line_so_far.strip() and next_char.strip():
                await self.pause()  # at the first character of a new line's code
            else:
                await asyncio.sleep(1 / config.typing_cps)
        await self.interrupt()  # the user moves on: whatever is in flight is cancelled
        return version


class SessionRun:
    def __init__(self, config: SessionBenchConfig, drafter: str | None, files, out: Path | None) -> None:
        self.config = config
        self.files = files
        self.name = drafter or "default"
        self.client = SessionClient(config, drafter, (out / f"server-{self.name}.log") if out else None)
        self.records: list[RequestRecord] = []
        self.stats_tasks: list[asyncio.Task] = []
        self.typed_chars = 0
        self.started = time.monotonic()
        self.budget_ms = config.budget_ms or BUDGET_MS_DEFAULT
        self.bar = None
        self.status: dict = {}
        self.final_stats: dict = {}

    async def run(self) -> None:
        from tqdm import tqdm

        load_started = time.monotonic()
        self.status = await self.client.start()
        self.load_s = time.monotonic() - load_started
        try:
            await self.warm_up()
            total = sum(len(h.middle) for _, _, holes in self.files for h in holes)
            self.started = time.monotonic()
            with tqdm(total=total, desc=f"session {self.name}", unit="char", disable=not self.config.progress) as bar:
                self.bar = bar
                for path, text, holes in self.files:
                    uri = f"file:///bench/{display_path(path)}"
                    version = 1
                    self.client.open(uri, text, version)
                    for index, hole in enumerate(holes):
                        version = await Typist(self, uri, hole, index).type_hole(version)
                    self.client.close(uri)
            self.bar = None
            await asyncio.gather(*self.stats_tasks, return_exceptions=True)
            self.final_stats = await self.client.stats()
            for record in self.records:
                record.server = self.client.server_records.get((f"file:///bench/{record.file}", str(record.version)))
        finally:
            await self.client.stop()

    async def warm_up(self) -> None:
        """One completion before measuring: first-call allocations stay out of the figures."""
        if not self.files:
            return
        path, text, _ = self.files[0]
        uri = "file:///bench/warm-up/" + path.name
        # At the end of the file: a prompt unlike the measured ones, so their caches start cold.
        self.client.open(uri, text, 1)
        _, future = self.client.request_completion(uri, _position(text))
        try:
            await asyncio.wait_for(future, self.config.settle_ms / 1000 * 2)
        except (asyncio.TimeoutError, Exception) as error:
            log.warning("warm-up request: %s", error)
        self.client.close(uri)


# ----------------------------------------------------------------------------- figures


def summarize(run: SessionRun) -> dict:
    records = run.records
    answered = [r for r in records if r.status == "answered"]
    latencies = [r.latency_ms for r in answered if r.latency_ms is not None]
    model = [r for r in answered if (r.server or {}).get("source") == "model"]
    shown = [r for r in answered if r.shown]
    exact = [r for r in shown if r.exact_match]
    server_model = [r.server for r in model]
    passes = sum(s.get("verifier_passes", 0) for s in server_model)
    emitted = sum(s.get("emitted", 0) for s in server_model)
    drafted = sum(s.get("drafted", 0) for s in server_model)
    accepted = sum(s.get("accepted", 0) for s in server_model)

    def spread(values: Sequence[float]) -> dict:
        return {"p50": percentile(values, 50), "p90": percentile(values, 90), "p99": percentile(values, 99),
                "mean": round(sum(values) / len(values), 2) if values else None,
                "max": max(values) if values else None, "n": len(values)}

    return {
        "name": run.name,
        "drafter": (run.final_stats or {}).get("drafter") or run.name,
        "request_count": len(records),
        "answered": len(answered),
        "cancelled": sum(r.status == "cancelled" for r in records),
        "errors": sum(r.status == "error" for r in records),
        "typed_chars": run.typed_chars,
        "latency_ms": spread(latencies),
        "latency_ms_model": spread([r.latency_ms for r in model]),
        "within_budget": round(sum(bool(r.within_budget) for r in answered) / len(answered), 4) if answered else None,
        "within_budget_model": round(sum(bool(r.within_budget) for r in model) / len(model), 4) if model else None,
        "budget_ms": run.budget_ms,
        "shown_rate": round(len(shown) / len(answered), 4) if answered else None,
        "exact_match_rate": round(len(exact) / len(shown), 4) if shown else None,
        "exact_match_rate_answered": round(len(exact) / len(answered), 4) if answered else None,
        "exact_match_rate_model": (round(sum(r.exact_match for r in model if r.shown) / sum(bool(r.shown) for r in model), 4)
                                   if any(r.shown for r in model) else None),
        "accepted_chars_per_request": round(sum(r.accepted_chars for r in answered) / len(answered), 2)
        if answered else None,
        "accepted_chars_per_shown": round(sum(r.accepted_chars for r in shown) / len(shown), 2) if shown else None,
        "server_matched": sum(r.server is not None for r in answered),
        "model_requests": len(model),
        "typethrough_requests": sum((r.server or {}).get("source") == "typethrough" for r in answered),
        "prefill_tokens": spread([s.get("prefill_tokens", 0) for s in server_model]),
        "prompt_tokens": spread([s.get("prompt_tokens", 0) for s in server_model]),
        "emitted_per_request": round(emitted / len(model), 2) if model else None,
        "tau": round(emitted / passes, 4) if passes else None,
        "draft_acceptance": round(accepted / drafted, 4) if drafted else None,
        "stop_reasons": _count(s.get("stop_reason", "") for s in server_model),
        "load_s": round(getattr(run, "load_s", 0.0), 1),
        "server_status": run.status.get("message"),
        "server_stats": {k: v for k, v in (run.final_stats or {}).items() if k != "recent"},
    }


def _count(values) -> dict:
    counts: dict = {}
    for value in values:
        counts[value] = counts.get(value, 0) + 1
    return counts


def environment() -> dict:
    def cpu() -> str:
        try:
            for line in Path("/proc/cpuinfo").read_text().splitlines():
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
        except OSError:
            pass
        return platform.processor() or platform.machine()

    import pygls

    return {"cpu": cpu(), "cpu_cores": os.cpu_count(), "python": platform.python_version(),
            "platform": platform.platform(), "pygls": getattr(pygls, "__version__", None),
            "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
            "time": time.strftime("%Y-%m-%dT%H:%M:%S%z")}


def format_table(result: dict) -> str:
    header = ("session", "requests", "answered", "p50 ms", "p90 ms", "p99 ms", "in budget", "shown", "exact",
              "acc chars", "τ", "prefill")
    rows = [header]

    def f(value, digits=0, scale=1.0, unit=""):
        return "–" if value is None else f"{value * scale:.{digits}f}{unit}"

    for s in result["modes"]:
        lat = s["latency_ms"]
        rows.append((s["name"], str(s["request_count"]), str(s["answered"]), f(lat["p50"]), f(lat["p90"]), f(lat["p99"]),
                     f(s["within_budget"], 0, 100, "%"), f(s["shown_rate"], 0, 100, "%"),
                     f(s["exact_match_rate"], 0, 100, "%"), f(s["accepted_chars_per_request"], 1), f(s["tau"], 2),
                     f(s["prefill_tokens"]["p50"])))
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))) for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    env = result["environment"]
    lines.append(f"{env['cpu']} ({env['cpu_cores']} cores); {result['config']['typing_cps']} chars/s, "
                 f"debounce {result['config']['debounce_ms']:.0f} ms; load average at start "
                 f"{env['load_average'][0] if env.get('load_average') else '–'}")
    return "\n".join(lines)


def write_plots(result: dict, out: Path) -> list[Path]:
    """Latency CDF per session mode, and τ / prefill tokens per model request."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    env = result["environment"]
    paths = []
    fig, ax = plt.subplots(figsize=(7, 4))
    budget = None
    for index, mode in enumerate(result["modes"]):
        mine = [r for r in result["requests"] if r["session"] == mode["name"] and r["latency_ms"] is not None]
        model = sorted(r["latency_ms"] for r in mine if (r.get("server") or {}).get("source") == "model")
        answered = sorted(r["latency_ms"] for r in mine)
        color = f"C{index}"
        # Over answered requests: cancelled ones (the user typed on) have no latency to show.
        for values, style, what in ((answered, "-", "all answered, type-through included"),
                                    (model, "--", "model runs only")):
            if values:
                ax.step(values, [(i + 1) / len(values) for i in range(len(values))], where="post", color=color,
                        linestyle=style, label=f"{mode['name']}: {what} (n={len(values)})")
        budget = mode["budget_ms"]
    if budget:
        ax.axvline(budget, color="grey", linestyle="--", linewidth=0.8, label=f"budget {budget:.0f} ms")
    ax.set_xscale("log")
    ax.set_xlabel("end-to-end latency (ms, log scale)")
    ax.set_ylabel("share of answered requests")
    ax.set_ylim(0, 1.02)
    cancelled = ", ".join(f"{m['name']}: {m['cancelled']}/{m['request_count']} cancelled by typing" for m in result["modes"])
    ax.set_title(f"Inline-completion latency CDF (end to end, client side)\n{env['cpu']} ({env['cpu_cores']} cores); "
                 f"{cancelled}", fontsize=8)
    ax.legend(fontsize=7)
    fig.tight_layout()
    paths.append(out / "session-latency-cdf.png")
    fig.savefig(paths[-1], dpi=120)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(7, 4))
    for mode in result["modes"]:
        taus = [r["server"]["tau"] for r in result["requests"] if r["session"] == mode["name"]
                and r.get("server") and r["server"].get("source") == "model" and r["server"].get("verifier_passes")]
        if taus:
            ax.plot(range(1, len(taus) + 1), taus, marker=".", linestyle="-", label=mode["name"])
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xlabel("model request")
    ax.set_ylabel("τ (tokens per verifier pass)")
    ax.set_title("τ per request (session)", fontsize=9)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)
    else:
        ax.text(0.5, 0.5, "no model request ran a verifier pass", ha="center", transform=ax.transAxes)
    fig.tight_layout()
    paths.append(out / "session-tau.png")
    fig.savefig(paths[-1], dpi=120)
    plt.close(fig)
    return paths


def pick_files(paths: Sequence[str], config: SessionBenchConfig) -> list[Path]:
    if paths:
        return expand_paths(paths, config.seed)
    # More candidates than needed: some files have no body of a typeable size.
    return default_corpus(config.files * 4, config.seed)


async def _run_sessions(config: SessionBenchConfig, files, out: Path | None) -> list[SessionRun]:
    runs = []
    for drafter in config.drafters:
        run = SessionRun(config, drafter, files, out)
        await run.run()
        runs.append(run)
    return runs


def run_session_bench(config: SessionBenchConfig, paths: Sequence[str] = (), out: Path | None = None) -> dict:
    """Run one typing session per drafter; return the JSON-ready result.

    The top-level figures are the first session's; `modes` holds every session's.
    """
    # pygls logs every message at INFO: thousands of lines per session.
    logging.getLogger("pygls").setLevel(logging.WARNING)
    env = environment()
    files = session_holes(pick_files(paths, config), config)
    if not files:
        raise RuntimeError("no function body of a typeable size in the corpus; name other files or raise --max-hole-chars")
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
    runs = asyncio.run(_run_sessions(config, files, out))
    env["load_average_end"] = list(os.getloadavg()) if hasattr(os, "getloadavg") else None
    modes = [summarize(run) for run in runs]
    config_dict = asdict(config)
    config_dict.pop("progress", None)
    config_dict["drafters"] = [d or "default" for d in config.drafters]
    result = {
        "benchmark": "session",
        "environment": env,
        "config": config_dict,
        "holes": [{**h.describe(), "file": display_path(p)} for p, _, holes in files for h in holes],
        **{k: v for k, v in modes[0].items() if k != "name"},
        "modes": modes,
        "requests": [asdict(r) for run in runs for r in run.records],
    }
    return result
