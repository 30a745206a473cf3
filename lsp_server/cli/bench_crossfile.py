"""`quickdraft bench crossfile`: completions with and without context from other files (engine/bench/crossfile.py)."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_parser(kinds, common) -> None:
    crossfile = kinds.add_parser("crossfile", help="holes that need another file's name vs holes that do not, "
                                                   "without and with cross-file context")
    common(crossfile)
    crossfile.add_argument("--holes", type=int, help="holes of each group (default 30; --quick 2)")
    crossfile.add_argument("--configs", help="comma-separated: raw,context,heads (default raw,context)")
    crossfile.add_argument("--context-tokens", type=int, default=512,
                           help="prompt budget for other documents in the context and heads runs (default 512)")
    crossfile.add_argument("--max-new-tokens", type=int, help="longest completion (default 48; --quick 16)")
    crossfile.add_argument("--device", help="cpu | cuda (default: cuda when present)")
    crossfile.set_defaults(handler=run_crossfile)


def run_crossfile(args: argparse.Namespace) -> int:
    from engine.bench.crossfile import CONFIGS, CrossFileBenchConfig, format_table, run_crossfile_bench
    from engine.bench.crossfile_holes import make_crossfile_holes
    from engine.bench.decode import environment
    from engine.completion import CompletionEngine
    from engine.errors import QuickdraftError
    from lsp_server.cli.bench_args import comma_list as _csv, pick as _pick, report as _report
    from lsp_server.workspace.settings import machine_defaults

    configs = _csv(args.configs, ("raw", "context"))
    unknown = [c for c in configs if c not in CONFIGS]
    if unknown:
        raise QuickdraftError(f"unknown configuration {', '.join(unknown)}; configurations: {', '.join(CONFIGS)}")
    config = CrossFileBenchConfig(holes=_pick(args.holes, args.quick, 2, 30), seed=args.seed, configs=configs,
                                  context_tokens=args.context_tokens,
                                  max_new_tokens=_pick(args.max_new_tokens, args.quick, 16, 48),
                                  progress=not args.no_progress)
    roots = [Path(p) for p in args.paths] or None
    holes = make_crossfile_holes(config.holes, config.seed, roots)
    if not holes:
        raise QuickdraftError("no hole could be cut: no multi-file Python package here imports names from its own "
                              "modules (give package folders' parents as FILE_OR_DIR)")
    defaults = machine_defaults()
    drafter = "hybrid" if args.draft not in (None, "none") else defaults.drafter
    engine = CompletionEngine.load(args.verifier or defaults.verifier, args.draft or defaults.draft, drafter=drafter,
                                   dtype=args.dtype, device=args.device)
    result = run_crossfile_bench(engine, holes, config, environment(engine.verifier, engine.draft))
    return _report(result, format_table(result), Path(args.out) / "crossfile.json")
