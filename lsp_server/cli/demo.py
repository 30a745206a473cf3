"""`quickdraft demo`: real completions through the real server, at a few holes of a real file.

It starts `quickdraft serve` on the default pair (1.5B verifier, 0.5B draft) as an
editor would, opens a standard-library module with a function body, a statement end and
the middle of a line cut out, asks for an inline completion at each hole, and prints what the server answered next to what the file
really had, with the latency, τ and draft acceptance of each request.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import textwrap
import time
from pathlib import Path

from engine.errors import QuickdraftError
from engine.modes import DRAFTER_MODES

DEMO_MODULE = "textwrap.py"  # in every Python, plain code, stable across versions
CPU_DEMO_BUDGET_MS = 120_000.0
LOAD_TIMEOUT_S = 900.0


def add_parsers(sub) -> None:
    demo = sub.add_parser("demo", help="show real completions through the server on a real source file")
    demo.add_argument("--file", help=f"source file to cut holes in (default: the standard library's {DEMO_MODULE})")
    demo.add_argument("--holes", type=int, default=3)
    demo.add_argument("--seed", type=int, default=1)
    # The default pair, whatever the machine: the demo shows speculative decoding at work.
    demo.add_argument("--verifier", default="qwen2.5-coder-1.5b")
    demo.add_argument("--draft", default="qwen2.5-coder-0.5b")
    demo.add_argument("--drafter", choices=DRAFTER_MODES, default="hybrid")
    demo.add_argument("--dtype")
    demo.add_argument("--device", help="cpu | cuda | cuda:N (default: cuda when available)")
    demo.add_argument("--budget-ms", type=float,
                      help=f"latency budget (default: the server's; {CPU_DEMO_BUDGET_MS:.0f} on a CPU, "
                           "where the first request on a file pays for a cold prefill)")
    demo.add_argument("--max-new-tokens", type=int, default=48)
    demo.set_defaults(handler=run_demo)


def pick_holes(path: Path, count: int, seed: int):
    from engine.bench.corpus import HOLE_KINDS, cut_hole, read_source

    text = read_source(path)
    if text is None:
        raise QuickdraftError(f"cannot use {path} for the demo: unreadable, binary or too large")
    rng = random.Random(seed)
    holes = []
    for i in range(count * 4):
        hole = cut_hole(str(path), text, HOLE_KINDS[i % len(HOLE_KINDS)], rng)
        if hole is not None and all(abs(hole.line - h.line) > 5 for h in holes):
            holes.append(hole)
        if len(holes) == count:
            break
    if not holes:
        raise QuickdraftError(f"found no function body, statement or line to cut out of {path}")
    return holes


async def demo(args: argparse.Namespace, path: Path) -> None:
    from engine.models.loading import parse_device
    from lsp_server.client import QuickdraftClient, position_after, serve_args

    budget = args.budget_ms
    if budget is None and parse_device(args.device).type == "cpu":  # a clear error when CUDA is missing
        budget = CPU_DEMO_BUDGET_MS
        print(f"(CPU only: latency budget {budget / 1000:.0f} s, so the cold first request on each file can "
              "finish its prefill; in an editor, typing afterwards reuses the KV cache)")
    client = QuickdraftClient("quickdraft-demo")
    started = time.monotonic()
    await client.start(serve_args(verifier=args.verifier, draft=args.draft, drafter=args.drafter, dtype=args.dtype,
                                  device=args.device, budget_ms=budget, max_new_tokens=args.max_new_tokens))
    status = await client.wait_until_loaded(LOAD_TIMEOUT_S)
    print(f"server {status.get('message')} — {time.monotonic() - started:.1f} s to load\n")
    try:
        for number, hole in enumerate(pick_holes(path, args.holes, args.seed), 1):
            uri = f"{path.resolve().as_uri()}#hole{number}"
            client.open(uri, hole.prefix + hole.suffix, 1)
            sent = time.monotonic()
            result = await client.complete(uri, position_after(hole.prefix))
            latency = (time.monotonic() - sent) * 1000
            record = ((await client.stats()).get("recent") or [{}])[-1]
            shown = result.items[0].insert_text if result and result.items else ""
            show_hole(number, path, hole, shown, latency, record)
            client.close(uri)
        summary = await client.stats()
        show_summary(summary)
    finally:
        await client.stop()


def show_hole(number: int, path: Path, hole, shown: str, latency_ms: float, record: dict) -> None:
    context = hole.prefix.split("\n")[-4:]
    print(f"── {number}. {path.name}:{hole.line + 1} ({hole.kind.replace('_', ' ')}) " + "─" * 30)
    for line in context[:-1]:
        print(f"   {line}")
    print(f" ▸ {context[-1]}\033[32m{shown if shown else '∅'}\033[0m".replace("\n", "\n   "))
    expected = hole.middle if len(hole.middle) < 240 else hole.middle[:240] + "…"
    print(textwrap.indent(f"file had: {expected!r}", "   "))
    acceptance = record.get("accepted", 0) / record["drafted"] if record.get("drafted") else None
    print(f"   {latency_ms:.0f} ms · {record.get('emitted', 0)} tokens in {record.get('verifier_passes', 0)} verifier "
          f"passes (τ {record.get('tau', 0):.2f}) · draft acceptance "
          f"{'-' if acceptance is None else f'{acceptance:.0%}'} · prefill {record.get('prefill_tokens', 0)} of "
          f"{record.get('prompt_tokens', 0)} prompt tokens · stop: {record.get('stop_reason', '?')}\n")


def show_summary(stats: dict) -> None:
    latency = stats.get("latencyMs") or {}
    rate = stats.get("draftAcceptance")
    print(f"{stats.get('requests', 0)} requests · latency p50 {latency.get('p50') or 0:.0f} ms · τ "
          f"{stats.get('tau') or 0:.2f} · draft acceptance {'-' if rate is None else f'{rate:.0%}'} · drafter "
          f"{stats.get('drafter')}")


def run_demo(args: argparse.Namespace) -> int:
    import sysconfig

    path = Path(args.file) if args.file else Path(sysconfig.get_paths()["stdlib"]) / DEMO_MODULE
    if not path.is_file():
        raise QuickdraftError(f"no such file: {path}")
    asyncio.run(demo(args, path))
    return 0
