"""`quickdraft demo`: the product as an editor user on this machine gets it.

It starts `quickdraft serve` with this machine's defaults (what an editor gets: the 0.5B alone
with prompt lookup on a CPU, the 1.5B + 0.5B pair on a GPU), then types through a few
functions of a standard-library module that the project's tests and docs never use, the way
`quickdraft bench session` does (same typist, same server, lsp_server/bench/session.py): it
deletes each body and types it back at 6 characters a second, asking for a completion after
each key as VS Code does. Each answer is printed as the ghost text would appear, with its
latency; the first completion after loading (a cold cache) is shown apart, and a one-screen
summary follows.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
import sysconfig
import time
from dataclasses import asdict
from pathlib import Path

from engine.errors import QuickdraftError
from engine.modes import DRAFTER_MODES

DEMO_MODULE = "heapq.py"  # in every Python; short, real functions; used by no test or doc here
DEMO_FUNCTIONS = 3
LOAD_TIMEOUT_S = 900.0


def add_parsers(sub) -> None:
    demo = sub.add_parser("demo", help="type through real code with the server's defaults and show the ghost text")
    demo.add_argument("--file", help=f"Python file to type through (default: the standard library's {DEMO_MODULE})")
    demo.add_argument("--functions", type=int, default=DEMO_FUNCTIONS, help="function bodies to type")
    demo.add_argument("--seed", type=int, default=0, help="which functions")
    demo.add_argument("--cps", type=float, default=6.0, help="typing speed, characters per second")
    # Unset: the machine's defaults, as `quickdraft serve` picks them.
    demo.add_argument("--verifier")
    demo.add_argument("--draft")
    demo.add_argument("--drafter", choices=DRAFTER_MODES)
    demo.add_argument("--dtype")
    demo.add_argument("--device", help="cpu | cuda | cuda:N")
    demo.add_argument("--budget-ms", type=float)
    demo.add_argument("--out", help="also write session.json and the latency CDF plot here")
    demo.set_defaults(handler=run_demo)


class GhostPrinter:
    """Prints each answer as the editor would show it: the line typed so far, then the ghost text.

    On a terminal, answers typed through the ghost text already on screen rewrite one line in
    place; elsewhere (a log, a pipe) only model answers get a line of their own.
    """

    def __init__(self, budget_ms: float, stream=sys.stdout) -> None:
        self.budget_ms = budget_ms
        self.stream = stream
        self.tty = stream.isatty()
        self.width = shutil.get_terminal_size((110, 24)).columns
        self.current = None
        self.open_line = False  # a typed-through line is on screen, to be rewritten or ended
        self.typed_through: list[float] = []  # latencies of this function's typed-through answers

    def _color(self, code: str, text: str) -> str:
        return f"\033[{code}m{text}\033[0m" if self.tty else text

    def _end_line(self) -> None:
        if self.open_line:
            self.stream.write("\n")
            self.open_line = False

    def _end_hole(self) -> None:
        self._end_line()
        if self.typed_through:
            from engine.stats import percentile

            print(f"{'':16}and {len(self.typed_through)} keys typed through the ghost text on screen, answered "
                  f"without the model (p50 {percentile(self.typed_through, 50):.0f} ms)", file=self.stream)
        self.typed_through = []

    def hole(self, path: Path, hole) -> None:
        self._end_hole()
        self.current = hole
        lines = hole.prefix.split("\n")
        header = next((i for i in range(len(lines) - 1, -1, -1) if lines[i].lstrip().startswith(("def ", "async def "))),
                      len(lines) - 2)
        print(f"\n── {path.name}, line {header + 1}: deleting this body ({len(hole.middle)} characters) "
              f"and typing it back " + "─" * 10, file=self.stream)
        for line in lines[header:-1][:4]:
            print(f"{'':16}{line}", file=self.stream)
        self.stream.flush()

    def answer(self, record) -> None:
        if self.current is None:
            return
        source = (record.server or {}).get("source", "")
        typed_line = (self.current.prefix + self.current.middle[:record.typed]).rsplit("\n", 1)[-1]
        ghost_lines = record.shown.split("\n")
        ghost = ghost_lines[0] + (f" ⏎ +{len(ghost_lines) - 1} line{'s' * (len(ghost_lines) > 2)}"
                                  if len(ghost_lines) > 1 else "")
        verdict = "✓" if record.exact_match else (f"{record.accepted_chars} right" if record.accepted_chars else "✗")
        if not record.shown:
            verdict, ghost = "", "(nothing)"
        late = "" if record.within_budget else self._color("31", " late")
        label = {"model": "model", "typethrough": "typed through"}.get(source, source or "?")
        head = f"{record.latency_ms:6.0f} ms  {label:<13} "
        room = max(20, self.width - len(head) - len(verdict) - 8)
        text = typed_line + "▏" + ghost
        if len(text) > room:
            text = text[:room - 1] + "…"
        typed_part = text[:len(typed_line) + 1]
        line = f"{head}{typed_part}{self._color('90', text[len(typed_part):])}  {self._color('32', verdict)}{late}"
        if source == "typethrough":
            self.typed_through.append(record.latency_ms)
        if source == "typethrough" and self.tty:
            self.stream.write(("\r\033[K" if self.open_line else "") + line)
            self.open_line = True
        elif source == "typethrough":
            return
        else:
            self._end_line()
            self.stream.write(line + "\n")
        self.stream.flush()

    def done(self) -> None:
        self._end_hole()


def describe_plan(settings) -> str:
    from lsp_server.cli.doctor import machine_plan

    plan = machine_plan(settings)
    draft = "no draft model" if plan.draft == "none" else f"draft {plan.draft}"
    return (f"{plan.device} ({plan.device_detail}): verifier {plan.verifier} ({plan.precision}), {draft}, "
            f"drafter {plan.drafter}, budget {plan.budget_ms:.0f} ms")


async def type_through(run, printer: GhostPrinter) -> None:
    run.printer = printer
    try:
        await run.run()
    finally:
        printer.done()


def show_summary(run, summary: dict) -> None:
    from engine.stats import percentile

    def ms(value) -> str:
        return "–" if value is None else f"{value:,.0f} ms"

    def share(value) -> str:
        return "–" if value is None else f"{value:.0%}"

    answered = [r for r in run.records if r.status == "answered"]
    typed_through = [r.latency_ms for r in answered if (r.server or {}).get("source") == "typethrough"]
    model = summary["latency_ms_model"]
    cold = run.warm_up_server or {}
    print("\n── summary " + "─" * 60)
    print(f"server        {summary['server_status']} (loaded in {summary['load_s']:.1f} s)")
    if run.warm_up_ms is None:
        print("cold start    no answer within 30 s to the first completion after loading (a busy machine?)")
    else:
        print(f"cold start    {ms(run.warm_up_ms)}: the first completion after loading, nothing cached yet "
              f"({cold.get('prefill_tokens', '?')} prompt tokens read, {cold.get('text_chars', 0)} characters "
              "shown); not counted below")
    print(f"typing        {summary['typed_chars']} characters in {len({r.hole for r in run.records})} functions; "
          f"{summary['request_count']} requests, {summary['answered']} answered, {summary['cancelled']} cancelled "
          "by the next key")
    print(f"model answers {summary['model_requests']}: p50 {ms(model['p50'])}, p90 {ms(model['p90'])}; "
          f"{share(summary['within_budget_model'])} within the {summary['budget_ms']:.0f} ms budget")
    print(f"typed through {summary['typethrough_requests']} (the ghost text on screen was still right): "
          f"p50 {ms(percentile(typed_through, 50))}")
    model_shown = [r for r in answered if (r.server or {}).get("source") == "model" and r.shown]
    chars = sum(len(r.shown) for r in model_shown) / len(model_shown) if model_shown else None
    print(f"ghost text    {'–' if chars is None else f'{chars:.1f}'} characters per model answer; "
          f"{share(summary['exact_match_rate_model'])} of them exactly what was typed next")
    print(f"accepted      {summary['accepted_chars_per_request'] or 0:.1f} characters per answer "
          "(what accepting word by word would keep)")
    tau = "–" if summary["tau"] is None else f"{summary['tau']:.2f}"
    print(f"decoding      τ {tau} tokens per verifier pass; draft acceptance {share(summary['draft_acceptance'])}")


def run_demo(args: argparse.Namespace) -> int:
    import logging

    from lsp_server.bench.session import SessionBenchConfig, SessionRun, session_holes
    from lsp_server.bench.session_report import environment, summarize, write_plots
    from lsp_server.cli.doctor import settings_for

    path = Path(args.file) if args.file else Path(sysconfig.get_paths()["stdlib"]) / DEMO_MODULE
    if not path.is_file():
        raise QuickdraftError(f"no such file: {path}")
    config = SessionBenchConfig(
        # Patient: at each line start the user waits for the ghost text, as one reading it would; on a
        # quiet machine it comes well inside the 1 s pause anyway. (The cold first request may take
        # twice settle_ms: a busy machine reads its prompt slowly.)
        patient=True, settle_ms=15_000.0,
        files=1, holes_per_file=args.functions, min_hole_chars=60, max_hole_chars=220, typing_cps=args.cps,
        seed=args.seed, verifier=args.verifier, draft=args.draft, dtype=args.dtype, device=args.device,
        drafters=(args.drafter,), budget_ms=args.budget_ms, load_timeout_s=LOAD_TIMEOUT_S, progress=False)
    files = session_holes([path], config)
    if not files:
        raise QuickdraftError(f"found no function body of 60–220 characters in {path}")
    settings = settings_for(args)
    print(f"quickdraft demo: what an editor gets on this machine\n  {describe_plan(settings)}\n"
          f"  typing through {len(files[0][2])} functions of {path} at {args.cps:g} characters a second; "
          "a completion is asked 75 ms after each key, and the next key cancels it\n"
          "  each line: latency, who answered (the model, or typed through the ghost text on screen), "
          "the line so far▏ghost text, ✓ if it was exactly what came next")
    logging.getLogger("pygls").setLevel(logging.WARNING)
    run = SessionRun(config, args.drafter, files, out=None, name="demo")
    started = time.monotonic()
    asyncio.run(type_through(run, GhostPrinter(run.budget_ms)))
    summary = summarize(run)
    show_summary(run, summary)
    print(f"\n{time.monotonic() - started:.0f} s in all. In your editor: see the README (VS Code, Neovim); "
          "`quickdraft doctor` says what is set up.")
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        result = {"benchmark": "demo", "environment": environment(), "config": {**asdict(config), "file": str(path)},
                  "cold_ms": run.warm_up_ms, "cold_server": run.warm_up_server, **summary, "modes": [summary],
                  "requests": [asdict(r) for r in run.records]}
        (out / "session.json").write_text(json.dumps(result, indent=2, default=str))
        write_plots(result, out)
        print(f"wrote {out}/session.json and the plots")
    return 0
