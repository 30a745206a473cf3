"""`quickdraft bench first-completion`: the first completion after opening a file.

A headless client starts `quickdraft serve` (stdio), and for each trial opens a large file
(by default the first 2,000 lines of the standard library's argparse.py) with the rest of
one code line deleted, says where the cursor is as the editor clients do
(`quickdraft/didChangeCursor`), waits (3 s by default: the user reads), types the line's
first character and asks for an inline completion there. It measures the latency the
client sees and reads the server's own figures (tokens prefilled, warm fed) from
`quickdraft/stats`; then it types the second character and asks again: that keystroke's
latency is what typing costs on this machine at this load, the yardstick for the first.
`--until-warm` waits on, past `--wait-s`, until the warm has finished (on a slow or busy
machine: what the warm buys once it is done).

Trials alternate between warming on and off (the `warm` setting) in the same server, each
at its own spot of the file under a new URI, so no trial reuses another's cache: the
ratio between the two is measured side by side.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Sequence

from lsprotocol import types

from engine.bench.common import load_average
from engine.stats import percentile
from lsp_server.bench.session_report import environment
from lsp_server.client import QuickdraftClient, position_after, serve_args

log = logging.getLogger(__name__)

MODES = ("warm", "cold")


@dataclass
class FirstCompletionConfig:
    lines: int = 2000  # the file is cut to this many lines
    trials: int = 4  # per mode
    wait_s: float = 3.0  # between opening the file and the first keystroke
    until_warm: bool = False  # warm trials wait on past wait_s until the server's warm has ended
    # Server flags (None: the server's machine defaults, the CPU default on a CPU).
    verifier: str | None = None
    draft: str | None = None
    drafter: str | None = None
    dtype: str | None = None
    budget_ms: float | None = None
    load_timeout_s: float = 900.0


@dataclass
class Trial:
    mode: str
    uri: str
    line: int  # 0-based
    character: int
    latency_ms: float = 0.0
    shown: str = ""
    expected: str = ""  # the rest of the line the user is about to type
    server: dict = field(default_factory=dict)  # the server's record of the request
    waited_s: float = 0.0  # from the cursor notification to the first key
    second_latency_ms: float = 0.0  # the next keystroke's request, for comparison
    second_server: dict = field(default_factory=dict)
    warms: list = field(default_factory=list)  # the server's warms of this document


def default_file() -> Path:
    import argparse

    return Path(argparse.__file__)


def pick_spots(lines: Sequence[str], count: int) -> list[int]:
    """`count` code lines spread evenly through the file, well apart: indented statements
    with something to complete, not comments or strings."""
    def completable(text: str) -> bool:
        code = text.strip()
        return text.startswith((" ", "\t")) and len(code) >= 12 and not code.startswith(("#", '"', "'"))

    candidates = [i for i, text in enumerate(lines) if completable(text) and i >= 60]
    if len(candidates) < count:
        raise RuntimeError(f"the file has only {len(candidates)} code lines to complete, {count} needed")
    step = len(candidates) / count
    return [candidates[int(i * step + step / 2)] for i in range(count)]


def spot_document(lines: Sequence[str], line: int) -> tuple[str, int, str]:
    """(the file with line `line` cut after its indentation, that indentation, the cut code)."""
    text = lines[line]
    indent = len(text) - len(text.lstrip())
    cut = [*lines[:line], text[:indent], *lines[line + 1:]]
    return "\n".join(cut) + "\n", indent, text[indent:]


async def run_trial(client: QuickdraftClient, trial: Trial, text: str, code: str, config: FirstCompletionConfig) -> None:
    client.configure({"warm": trial.mode == "warm"})
    client.open(trial.uri, text, 1)
    client.cursor(trial.uri, types.Position(line=trial.line, character=trial.character))
    started = time.monotonic()
    await asyncio.sleep(config.wait_s)
    while config.until_warm and trial.mode == "warm" and not await warm_ended(client, trial.uri):
        await asyncio.sleep(0.2)
    trial.waited_s = time.monotonic() - started
    trial.latency_ms, trial.server, items = await type_and_complete(client, trial, 0, code[0])
    trial.shown = items[0].insert_text if items else ""
    trial.second_latency_ms, trial.second_server, _ = await type_and_complete(client, trial, 1, code[1])
    stats = await client.stats()
    trial.warms = [r for r in (stats.get("warming") or {}).get("recent") or [] if r.get("uri") == trial.uri]
    client.close(trial.uri)


async def warm_ended(client: QuickdraftClient, uri: str) -> bool:
    warms = (await client.stats()).get("warming") or {}
    return any(r.get("uri") == uri for r in warms.get("recent") or [])


async def type_and_complete(client: QuickdraftClient, trial: Trial, typed: int, char: str) -> tuple[float, dict, list]:
    """Type `char` after the `typed` characters already typed, ask at once: (latency ms, the server's record, items)."""
    at = types.Position(line=trial.line, character=trial.character + typed)
    client.change(trial.uri, 2 + typed, at, at, char)
    started = time.monotonic()
    result = await client.complete(trial.uri, types.Position(line=at.line, character=at.character + 1))
    latency = (time.monotonic() - started) * 1000
    items = list(result.items) if result is not None and hasattr(result, "items") else list(result or [])
    stats = await client.stats()
    record = next((r for r in reversed(stats.get("recent") or []) if r.get("uri") == trial.uri), {})
    return latency, record, items


async def warm_up(client: QuickdraftClient, lines: list[str]) -> None:
    """One completion in another document before the trials: the server's first request pays
    for first-call set-up, which is not what opening a file costs (the session bench does the same)."""
    uri = "file:///quickdraft-bench/warm-up.py"
    text = "\n".join(lines[:40]) + "\n"
    client.configure({"warm": False})
    client.open(uri, text, 1)
    await client.complete(uri, position_after(text))
    client.close(uri)


async def run_trials(config: FirstCompletionConfig, lines: list[str], name: str) -> tuple[list[Trial], dict]:
    spots = pick_spots(lines, config.trials * len(MODES))
    client = QuickdraftClient("quickdraft-bench")
    loaded = time.monotonic()
    await client.start(serve_args(verifier=config.verifier, draft=config.draft, drafter=config.drafter,
                                  dtype=config.dtype, budget_ms=config.budget_ms))
    trials = []
    try:
        status = await client.wait_until_loaded(config.load_timeout_s)
        load_s = time.monotonic() - loaded
        await warm_up(client, lines)
        for i, line in enumerate(spots):
            # warm, cold, cold, warm, ...: neither mode always runs right after the other.
            mode = MODES[(i + i // 2) % 2]
            text, indent, code = spot_document(lines, line)
            trial = Trial(mode, f"file:///quickdraft-bench/{i}-{mode}/{name}", line, indent, expected=code[1:])
            await run_trial(client, trial, text, code, config)
            log.info("%s line %d: %.0f ms, prefill %s", mode, line + 1, trial.latency_ms,
                     trial.server.get("prefill_tokens"))
            trials.append(trial)
    finally:
        await client.stop()
    return trials, {"server_status": status.get("message"), "load_s": round(load_s, 1)}


def summarize(trials: list[Trial], mode: str) -> dict:
    mine = [t for t in trials if t.mode == mode]
    latencies = [t.latency_ms for t in mine]
    second = [t.second_latency_ms for t in mine if t.second_server.get("source") == "model"]  # not typed through
    prefill = [t.server.get("prefill_tokens", 0) for t in mine]
    fed = [sum(w.get("fed_tokens", 0) for w in t.warms) for t in mine]
    return {"mode": mode, "trials": len(mine),
            "latency_ms": {"p50": percentile(latencies, 50), "max": max(latencies, default=None),
                           "all": [round(v) for v in latencies]},
            "second_keystroke_ms": {"p50": percentile(second, 50), "all": [round(v) for v in second]},
            "waited_s": [round(t.waited_s, 1) for t in mine],
            "prefill_tokens": prefill, "warm_fed_tokens": fed,
            "within_300_ms": sum(v <= 300 for v in latencies) / len(mine) if mine else None}


def run_first_completion_bench(config: FirstCompletionConfig, path: str | None = None) -> dict:
    logging.getLogger("pygls").setLevel(logging.WARNING)
    file = Path(path) if path else default_file()
    lines = file.read_text(encoding="utf-8").split("\n")[: config.lines]
    if len(lines) < config.lines:
        log.warning("%s has %d lines, fewer than %d", file, len(lines), config.lines)
    env = environment()
    trials, server = asyncio.run(run_trials(config, lines, file.name))
    env["load_average_end"] = load_average()
    return {"benchmark": "first-completion", "environment": env, "config": asdict(config), "file": str(file),
            "file_lines": len(lines), **server, "modes": [summarize(trials, mode) for mode in MODES],
            "trials": [asdict(t) for t in trials]}


def format_table(result: dict) -> str:
    rows = [("mode", "trials", "waited s", "p50 ms", "max ms", "≤ 300 ms", "prefill tokens", "warm fed tokens",
             "next key p50 ms")]
    for m in result["modes"]:
        share = m["within_300_ms"]
        rows.append((m["mode"], str(m["trials"]), " ".join(f"{w:g}" for w in m["waited_s"]),
                     f"{m['latency_ms']['p50'] or 0:.0f}", f"{m['latency_ms']['max'] or 0:.0f}",
                     "–" if share is None else f"{share:.0%}", " ".join(map(str, m["prefill_tokens"])),
                     " ".join(map(str, m["warm_fed_tokens"])), f"{m['second_keystroke_ms']['p50'] or 0:.0f}"))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    load = result["environment"].get("load_average")
    lines = [f"first completion after opening {result['file_lines']} lines of {Path(result['file']).name} and "
             f"waiting {result['config']['wait_s']:g} s ({result.get('server_status')}; load {load})"]
    lines += ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)) for row in rows]
    return "\n".join(lines)
