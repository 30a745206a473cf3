"""`quickdraft bench session`: what a user feels, measured through the real server.

A headless pygls LanguageClient starts `quickdraft serve` over stdio, opens real source
files, moves the cursor to a function body (telling the server, as the editor clients do),
deletes the body and re-types it character by character in real time.
Like VS Code, it asks for an automatic inline completion once the typing pauses for
`debounce_ms`, and cancels (`$/cancelRequest`) the request in flight when the next key
arrives. For every request it records the end-to-end latency seen by the client, the
server's own figures (prefill tokens, tokens emitted, τ, stop reason, from the
`quickdraft/stats` request), and whether the shown completion is what the user typed next.

No tensors here: the server process does all the model work.

Module map: this file starts the servers and runs the sessions; typist.py types each body and
records its requests; session_report.py turns the records into figures, a table and plots;
lsp_server/client.py is the client.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Protocol, Sequence

from engine.bench.common import load_average
from engine.bench.corpus import Hole, body_holes, default_corpus, display_path, expand_paths
from engine.text.sources import read_source
from lsp_server.bench.session_report import environment, summarize, summarize_editors
from lsp_server.bench.typist import SentRequest, Typist
from lsp_server.client import QuickdraftClient, position_after, serve_args, server_key

log = logging.getLogger(__name__)

BUDGET_MS_DEFAULT = 200.0  # the server's default; used when --budget-ms is not given


class SessionPrinter(Protocol):
    """What `quickdraft demo` shows while a session types; the benchmark has none."""

    def hole(self, path: Path, hole: Hole) -> None: ...  # about to type this body

    def answer(self, record: SentRequest) -> None: ...  # answered; `record.server` is the server's record


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
    # How long the user looks at a body after jumping to it, before deleting it (None:
    # line_pause_ms). The jump scenario rests 300 ms: the first request after a jump then
    # finds the prompt still cold, as it is when a user jumps and types at once.
    jump_rest_ms: float | None = None
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
    # A shared inference server instead of local models (`quickdraft serve --backend`).
    backend: str | None = None
    backend_model: str | None = None
    backend_tokenizer: str | None = None
    editors: int = 1  # simulated editors typing at once, each with its own server and its own files
    client_settings: dict | None = None  # more initializationOptions for every server (README: Settings)
    load_timeout_s: float = 900.0
    progress: bool = True


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


class SessionRun:
    def __init__(self, config: SessionBenchConfig, drafter: str | None, files, out: Path | None,
                 name: str | None = None) -> None:
        self.config = config
        self.files = files
        self.name = name or drafter or "default"
        self.drafter = drafter
        self.log_file = (out / f"server-{self.name}.log") if out else None
        self.client = QuickdraftClient("quickdraft-bench")
        self.records: list[SentRequest] = []
        self.jumps: list[dict] = []  # {file, hole, jump_s}: when the cursor jumped to each body
        self.stats_tasks: list[asyncio.Task] = []
        self.typed_chars = 0
        self.started = time.monotonic()
        self.budget_ms = config.budget_ms or BUDGET_MS_DEFAULT
        self.bar = None
        self.status: dict = {}
        self.final_stats: dict = {}
        self.printer: SessionPrinter | None = None
        self.warm_up_ms: float | None = None  # the first completion after loading, on a cold cache
        self.warm_up_server: dict | None = None  # the server's record of it

    def print_answer(self, record: SentRequest, uri: str) -> None:
        record.server = self.client.server_records.get(server_key(uri, record.version, kept=record.trigger == "ready"))
        self.printer.answer(record)

    def serve_args(self) -> list[str]:
        c = self.config
        return serve_args(verifier=c.verifier, draft=c.draft, drafter=self.drafter, dtype=c.dtype, device=c.device,
                          budget_ms=c.budget_ms, max_new_tokens=c.max_new_tokens, log_file=self.log_file,
                          backend=c.backend, backend_model=c.backend_model, backend_tokenizer=c.backend_tokenizer)

    def initialization_options(self) -> dict:
        options = dict(self.config.client_settings or {})
        if self.config.adaptive_drafting is not None:
            options["adaptiveDrafting"] = self.config.adaptive_drafting
        return options

    async def run(self, together: asyncio.Barrier | None = None) -> None:
        from tqdm import tqdm

        load_started = time.monotonic()
        await self.client.start(self.serve_args(), initialization_options=self.initialization_options())
        self.status = await self.client.wait_until_loaded(self.config.load_timeout_s)
        self.load_s = time.monotonic() - load_started
        try:
            await self.warm_up()
            if together is not None:
                await together.wait()  # every editor has started and warmed up: type at once
            total = sum(len(h.middle) for _, _, holes in self.files for h in holes)
            self.started = time.monotonic()
            with tqdm(total=total, desc=f"session {self.name}", unit="char", disable=not self.config.progress) as bar:
                self.bar = bar
                for path, text, holes in self.files:
                    uri = f"file:///bench/{display_path(path)}"
                    version = 1
                    self.client.open(uri, text, version)
                    for index, hole in enumerate(holes):
                        if self.printer is not None:
                            self.printer.hole(path, hole)
                        typist = Typist(self, uri, hole, index)
                        self.client.on_ready = typist.ready
                        version = await typist.type_hole(version)
                    self.client.close(uri)
            self.bar = None
            await asyncio.gather(*self.stats_tasks, return_exceptions=True)
            self.final_stats = await self.client.stats()
            for record in self.records:
                record.server = self.client.server_records.get(
                    server_key(f"file:///bench/{record.file}", record.version, kept=record.trigger == "ready"))
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
        try:
            sent = time.monotonic()
            await asyncio.wait_for(self.client.complete(uri, position_after(text)), self.config.settle_ms / 1000 * 2)
            self.warm_up_ms = round((time.monotonic() - sent) * 1000, 2)
            await self.client.stats()
            self.warm_up_server = self.client.server_records.get((uri, "1"))
        except (asyncio.TimeoutError, Exception) as error:
            log.warning("warm-up request: %s", error)
        self.client.close(uri)


def pick_files(paths: Sequence[str], config: SessionBenchConfig) -> list[Path]:
    if paths:
        return expand_paths(paths, config.seed)
    # More candidates than needed: some files have no body of a typeable size.
    return default_corpus(config.files * 4, config.seed)


async def _run_sessions(config: SessionBenchConfig, files, out: Path | None, paths: Sequence[str] = ()) -> list[SessionRun]:
    runs = []
    for drafter in config.drafters:
        if config.editors > 1:
            runs += await _run_editors(config, drafter, files, out, paths)
            continue
        run = SessionRun(config, drafter, files, out)
        await run.run()
        runs.append(run)
    return runs


async def _run_editors(config: SessionBenchConfig, drafter: str | None, files, out: Path | None,
                       paths: Sequence[str]) -> list[SessionRun]:
    """N editors typing at once, each through its own `quickdraft serve`: the first types the
    session's files, the others files picked with their own seeds (a team does not type one file)."""
    runs = []
    for editor in range(config.editors):
        own = replace(config, seed=config.seed + editor)
        editor_files = files if editor == 0 else session_holes(pick_files(paths, own), own)
        runs.append(SessionRun(replace(config, progress=config.progress and editor == 0), drafter,
                               editor_files or files, out, name=f"{drafter or 'default'}-editor{editor}"))
    together = asyncio.Barrier(len(runs))
    await asyncio.gather(*(run.run(together) for run in runs))
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
    runs = asyncio.run(_run_sessions(config, files, out, paths))
    env["load_average_end"] = load_average()
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
        **({"all_editors": summarize_editors(runs)} if config.editors > 1 else {}),
        "requests": [asdict(r) for run in runs for r in run.records],
    }
    return result

