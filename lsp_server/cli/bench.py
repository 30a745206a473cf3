"""`quickdraft bench engine | session | first-completion | passes | quality | crossfile`: the headless
benchmarks (see docs/benchmarks.md).

engine  — decoding speed at equal output: HF generate (greedy, assisted, prompt lookup) vs
          quickdraft's drafters on the same FIM prompts (engine/bench/).
session — what a user feels: a headless LSP client types into `quickdraft serve` and
          measures every inline completion (lsp_server/bench/session.py).
passes  — what one forward pass costs, eager vs static cache + CUDA graphs (or the compiled step),
          with random-weight models of the exact Qwen2.5-Coder shapes (engine/bench/passes.py), and
          with --measure ops the ops per pass, eager vs compiled; writes passes.json; --device-run:
          the GPU session's one command, captured and compiled side by side (lsp_server/cli/bench_passes.py).
quality — are completions right: exact match, edit similarity, stray whitespace, parse
          validity, quickdraft side by side with the raw model (engine/bench/quality.py).
crossfile — holes that need a name from another file, and control holes, without and with
          cross-file context (engine/bench/crossfile.py, lsp_server/cli/bench_crossfile.py).
All write JSON with every raw figure (engine and session also PNG plots) under --out, and print a table.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from engine.modes import DRAFTER_MODES
from lsp_server.cli.bench_args import add_common as _common
from lsp_server.cli.bench_args import comma_list as _csv
from lsp_server.cli.bench_args import pick as _pick
from lsp_server.cli.bench_args import report as _report
from lsp_server.cli.bench_passes import add_parser as add_passes

log = logging.getLogger(__name__)


# Long by design: a declaration, one add_argument per flag of six benchmarks; no logic.
def add_parsers(sub) -> None:
    bench = sub.add_parser("bench", help="benchmarks: engine (decoding speed) | session (typing through the server) "
                                         "| first-completion (warming on vs off) "
                                         "| passes (per-pass cost, eager vs static cache + CUDA graphs) "
                                         "| quality (are completions right) | crossfile (context from other files)")
    kinds = bench.add_subparsers(dest="bench", required=True)

    engine = kinds.add_parser("engine", help="decoding speed vs Hugging Face generate, on FIM holes from real files")
    _common(engine)
    engine.add_argument("--holes", type=int, help="FIM prompts (default 6; --quick 3)")
    engine.add_argument("--max-new-tokens", type=int, help="tokens per completion (default 64; --quick 32)")
    engine.add_argument("--modes", help="comma-separated; default: hf-greedy,hf-assisted,hf-prompt-lookup,"
                        "quickdraft-lookup,quickdraft-draft,quickdraft-hybrid (also: quickdraft-none, token trees "
                        "quickdraft-lookup-tree,-draft-tree,-hybrid-tree, quickdraft-medusa and quickdraft-feature)")
    engine.add_argument("--device", help="cpu | cuda | cuda:N (default: cuda when available)")
    engine.add_argument("--repeats", type=int, default=1, help="runs per prompt and mode; the median time counts")
    engine.add_argument("--no-warmup", action="store_true", help="skip the warm-up round")
    engine.add_argument("--prefix-tokens", type=int, help="prompt budget before the cursor (default 1024; --quick 512)")
    engine.add_argument("--suffix-tokens", type=int, help="prompt budget after the cursor (default 256; --quick 128)")
    engine.add_argument("--hf-lookup-tokens", type=int, default=10, help="HF prompt_lookup_num_tokens (default 10)")
    engine.add_argument("--stop-at-eos", action="store_true",
                        help="stop at EOS/FIM stop tokens like a completion (default: exactly --max-new-tokens "
                             "per mode, so every mode does the same amount of work)")
    knobs = engine.add_argument_group("quickdraft drafter knobs (default: the shipped settings)")
    knobs.add_argument("--max-draft-tokens", type=int, default=8)
    knobs.add_argument("--lookup-min-n", type=int)
    knobs.add_argument("--lookup-max-n", type=int)
    knobs.add_argument("--confidence-threshold", type=float, help="draft model stops below this probability")
    knobs.add_argument("--hybrid-min-match", type=int, help="n-gram length for lookup to preempt the draft model")
    knobs.add_argument("--draft-initial-length", type=int)
    knobs.add_argument("--tuned", metavar="KNOB=VALUE,...",
                       help="also run quickdraft-hybrid+tuned (or the +tuned modes named in --modes) with these knobs, "
                            "e.g. confidence_threshold=0.8,hybrid_min_match=3")
    engine.set_defaults(handler=run_engine)

    session = kinds.add_parser("session", help="type through real files into `quickdraft serve`, measure every completion")
    _common(session)
    session.add_argument("--drafter", action="append", choices=DRAFTER_MODES,
                         help="server drafter; repeat for one session each (default: the server's default)")
    session.add_argument("--files", type=int, help="files to type into (default 4; --quick 1)")
    session.add_argument("--holes-per-file", type=int, help="function bodies per file (default 2; --quick 1)")
    session.add_argument("--max-hole-chars", type=int, help="skip longer bodies (default 300; --quick 120)")
    session.add_argument("--cps", type=float, help="typing speed, characters per second (default 6)")
    session.add_argument("--debounce-ms", type=float, help="pause before an automatic request (default 75, like VS Code)")
    session.add_argument("--line-pause-ms", type=float,
                         help="the user's pause where a line's code starts and at the emptied body (default 1000)")
    session.add_argument("--jump-rest-ms", type=float,
                         help="how long the user looks at a body after jumping to it before typing "
                              "(default: --line-pause-ms; the jump scenario: 300)")
    session.add_argument("--patient", action="store_true",
                         help="at those pauses, wait until the suggestion arrives (for slow machines)")
    session.add_argument("--budget-ms", type=float, help="server latency budget (default: the server's, 200)")
    session.add_argument("--max-new-tokens", type=int, help="server max new tokens (default: the server's)")
    session.add_argument("--device", help="server device")
    session.add_argument("--no-adaptive-drafting", action="store_true",
                         help="keep the chosen drafter all session (the server may otherwise switch to lookup)")
    remote = session.add_argument_group("a shared inference server (docs/teams.md)")
    remote.add_argument("--backend", metavar="URL",
                        help="complete from this OpenAI-compatible server (quickdraft serve --backend)")
    remote.add_argument("--backend-model", metavar="NAME", help="the model name it serves")
    remote.add_argument("--backend-tokenizer", metavar="SPEC", help="the model's tokenizer here (preset, directory, .gguf)")
    session.add_argument("--settings", type=json.loads, metavar="JSON",
                         help='more client settings for the server, e.g. \'{"prefixTokens": 384, "suffixTokens": 16}\'')
    remote.add_argument("--editors", type=int, default=1,
                        help="simulated editors typing at once, each with its own server (default 1)")
    session.set_defaults(handler=run_session)

    first = kinds.add_parser("first-completion",
                             help="the first completion after opening a large file and waiting, warming on vs off")
    first.add_argument("path", nargs="?", metavar="FILE", help="the file to open (default: the stdlib's argparse.py)")
    first.add_argument("--lines", type=int, default=2000, help="cut the file to this many lines (default 2000)")
    first.add_argument("--trials", type=int, default=4, help="trials per mode, warming on and off (default 4)")
    first.add_argument("--wait-s", type=float, default=3.0, help="from opening the file to the first key (default 3)")
    first.add_argument("--until-warm", action="store_true",
                       help="warm trials wait on past --wait-s until the warm has ended (slow or busy machines)")
    for flag in ("--verifier", "--draft", "--dtype"):
        first.add_argument(flag, help="server flag (default: the server's machine default)")
    first.add_argument("--drafter", choices=DRAFTER_MODES, help="server drafter (default: the server's)")
    first.add_argument("--budget-ms", type=float, help="server latency budget (default: the server's, 200)")
    first.add_argument("--out", default="bench-out", help="folder for first-completion.json (default bench-out)")
    first.set_defaults(handler=run_first_completion)

    add_passes(kinds)

    quality = kinds.add_parser("quality", help="completion quality on holes cut from installed code, vs the raw model")
    _common(quality)
    quality.add_argument("--holes", type=int, help="holes (default 36; --quick 6)")
    quality.add_argument("--kinds", help="comma-separated: line,midline,multiline (default all)")
    quality.add_argument("--languages", help="comma-separated (default python,javascript,go,rust: those installed); "
                                             "'all': every language with a grammar and files here "
                                             "(python,javascript,typescript,java,c,cpp,csharp,go,rust), "
                                             "with a per-language table")
    quality.add_argument("--configs", help="comma-separated: raw,noheal,quickdraft (default all three)")
    quality.add_argument("--suffix-tokens", help="comma-separated prompt budgets after the cursor, one run each "
                                                 "(default: the engine's for its device)")
    quality.add_argument("--prefix-tokens", type=int, help="prompt budget before the cursor (default: the engine's)")
    quality.add_argument("--cold-prefix-tokens", type=int,
                         help="the window of a prompt no cache holds, as every hole's is (0: --prefix-tokens; "
                              "default: the engine's, 128 on a CPU)")
    quality.add_argument("--drafter", choices=DRAFTER_MODES, help="default: the server's for this machine")
    quality.add_argument("--max-new-tokens", type=int, help="longest completion (default 48; --quick 16)")
    quality.add_argument("--device", help="cpu | cuda (default: cuda when present)")
    quality.add_argument("--budget-ms", type=float, help="answer within this, caches warmed first, as in the typing "
                                                         "session (default: no deadline)")
    quality.add_argument("--verifiers", help="comma-separated verifiers measured side by side on the same holes "
                                             "(instead of --verifier)")
    quality.set_defaults(handler=run_quality)

    from lsp_server.cli.bench_crossfile import add_parser as add_crossfile

    add_crossfile(kinds, _common)






def run_engine(args: argparse.Namespace) -> int:
    from engine.bench.corpus import default_corpus, expand_paths, make_holes
    from engine.bench.decode import ALL_MODES, DEFAULT_MODES, TUNED, EngineBenchConfig, mode_needs_draft_model, \
        run_engine_bench, valid_mode
    from engine.bench.report import format_table, write_plots
    from engine.errors import QuickdraftError
    from engine.models.loading import check_pair, load_model

    modes = tuple(m.strip() for m in args.modes.split(",")) if args.modes else DEFAULT_MODES
    tuned = _parse_knobs(args.tuned, args.max_draft_tokens) if args.tuned else None
    if tuned is not None and not any(m.endswith(TUNED) for m in modes):
        modes = (*modes, "quickdraft-hybrid" + TUNED)
    unknown = [m for m in modes if not valid_mode(m)]
    if unknown:
        raise QuickdraftError(f"unknown mode(s) {', '.join(unknown)}; choose from {', '.join(ALL_MODES)} "
                              f"(quickdraft modes also as <mode>{TUNED} with --tuned)")
    if tuned is None and any(m.endswith(TUNED) for m in modes):
        raise QuickdraftError(f"the {TUNED} modes need --tuned KNOB=VALUE,...")
    config = EngineBenchConfig(
        holes=_pick(args.holes, args.quick, 3, 6),
        max_new_tokens=_pick(args.max_new_tokens, args.quick, 32, 64),
        seed=args.seed, modes=modes, repeats=args.repeats, warmup=not args.no_warmup,
        prefix_tokens=_pick(args.prefix_tokens, args.quick, 512, 1024),
        suffix_tokens=_pick(args.suffix_tokens, args.quick, 128, 256),
        hf_lookup_tokens=args.hf_lookup_tokens, stop_at_eos=args.stop_at_eos,
        drafters=_drafter_config(max_draft_tokens=args.max_draft_tokens, lookup_min_n=args.lookup_min_n,
                                 lookup_max_n=args.lookup_max_n, confidence_threshold=args.confidence_threshold,
                                 hybrid_min_match=args.hybrid_min_match, draft_initial_length=args.draft_initial_length),
        tuned=tuned, progress=not args.no_progress,
    )
    files = (expand_paths(args.paths, args.seed) if args.paths
             else default_corpus(config.holes * 3, args.seed))  # spare files: not every file has every hole kind
    holes = make_holes(files, config.holes, args.seed)
    if not holes:
        raise QuickdraftError("no FIM hole could be cut from the corpus; name other source files or folders")

    needs_draft = any(mode_needs_draft_model(m) for m in modes)
    verifier = load_model(args.verifier, dtype=args.dtype, device=args.device, role="verifier")
    draft = None
    if needs_draft and args.draft != "none":
        draft = load_model(args.draft, dtype=args.dtype, device=args.device, role="draft")
        check_pair(verifier, draft)

    result = run_engine_bench(verifier, draft, holes, config)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "engine.json").write_text(json.dumps(result, indent=1))
    plots = write_plots(result, out)
    print(format_table(result))
    print(f"wrote {out / 'engine.json'}, {', '.join(str(p) for p in plots)}")
    return 0


def _drafter_config(**flags):
    """The shipped DrafterConfig with the flags that were given (None: not given)."""
    from engine.drafters.config import DrafterConfig

    return DrafterConfig(**{name: value for name, value in flags.items() if value is not None})


def _parse_knobs(text: str, max_draft_tokens: int):
    """"confidence_threshold=0.8,hybrid_min_match=3" → a DrafterConfig (the rest as shipped)."""
    from dataclasses import fields

    from engine.drafters.config import DrafterConfig
    from engine.errors import QuickdraftError

    types = {f.name: (float if "float" in str(f.type) else int) for f in fields(DrafterConfig)}
    values: dict = {"max_draft_tokens": max_draft_tokens}
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, _, value = item.partition("=")
        key = key.strip().replace("-", "_")
        if key not in types or not value:
            raise QuickdraftError(f"--tuned: expected KNOB=VALUE with KNOB one of {', '.join(types)}; got {item!r}")
        try:
            values[key] = types[key](value)
        except ValueError:
            raise QuickdraftError(f"--tuned: {key} needs a number, got {value!r}") from None
    return DrafterConfig(**values)


def run_session(args: argparse.Namespace) -> int:
    from lsp_server.bench.session import SessionBenchConfig, run_session_bench
    from lsp_server.bench.session_report import format_table, write_plots

    defaults = SessionBenchConfig()
    config = SessionBenchConfig(
        files=_pick(args.files, args.quick, 1, defaults.files),
        holes_per_file=_pick(args.holes_per_file, args.quick, 1, defaults.holes_per_file),
        max_hole_chars=_pick(args.max_hole_chars, args.quick, 120, defaults.max_hole_chars),
        typing_cps=_pick(args.cps, False, None, defaults.typing_cps),
        debounce_ms=_pick(args.debounce_ms, False, None, defaults.debounce_ms),
        line_pause_ms=_pick(args.line_pause_ms, False, None, defaults.line_pause_ms), patient=args.patient,
        jump_rest_ms=args.jump_rest_ms,
        seed=args.seed, verifier=args.verifier, draft=args.draft, drafters=tuple(args.drafter or [None]),
        dtype=args.dtype, device=args.device, budget_ms=args.budget_ms, max_new_tokens=args.max_new_tokens,
        adaptive_drafting=False if args.no_adaptive_drafting else None, progress=not args.no_progress,
        backend=args.backend, backend_model=args.backend_model, backend_tokenizer=args.backend_tokenizer,
        editors=max(1, args.editors), client_settings=args.settings,
    )
    out = Path(args.out)
    try:
        result = run_session_bench(config, args.paths, out)
    except RuntimeError as error:
        print(f"quickdraft: {error}", file=sys.stderr)
        return 2
    (out / "session.json").write_text(json.dumps(result, indent=1))
    plots = write_plots(result, out)
    print(format_table(result))
    if "all_editors" in result:
        together = result["all_editors"]
        print(f"{together['editors']} editors together: {together['answered']} answered of {together['requests']}; "
              f"all answers p50 {together['latency_ms']['p50']} ms, p90 {together['latency_ms']['p90']} ms; "
              f"model answers p50 {together['latency_ms_model']['p50']} ms, p90 {together['latency_ms_model']['p90']} ms")
    print(f"wrote {out / 'session.json'}, {', '.join(str(p) for p in plots)}")
    return 0


def run_first_completion(args: argparse.Namespace) -> int:
    from lsp_server.bench.first_completion import FirstCompletionConfig, format_table, run_first_completion_bench

    config = FirstCompletionConfig(lines=args.lines, trials=args.trials, wait_s=args.wait_s, until_warm=args.until_warm,
                                   verifier=args.verifier,
                                   draft=args.draft, drafter=args.drafter, dtype=args.dtype, budget_ms=args.budget_ms)
    try:
        result = run_first_completion_bench(config, args.path)
    except (RuntimeError, OSError) as error:
        print(f"quickdraft: {error}", file=sys.stderr)
        return 2
    return _report(result, format_table(result), Path(args.out) / "first-completion.json")


def run_quality(args: argparse.Namespace) -> int:
    from engine.bench.decode import environment
    from engine.bench.quality import CONFIGS, QualityBenchConfig, format_table, merge_runs, run_quality_bench
    from engine.bench.quality_holes import DEFAULT_LANGUAGES, QUALITY_KINDS, make_quality_holes
    from engine.completion import CompletionEngine
    from engine.errors import QuickdraftError
    from lsp_server.workspace.settings import machine_defaults

    kinds, configs = _csv(args.kinds, QUALITY_KINDS), _csv(args.configs, CONFIGS)
    unknown = [k for k in kinds if k not in QUALITY_KINDS] + [c for c in configs if c not in CONFIGS]
    if unknown:
        raise QuickdraftError(f"unknown kind or configuration {', '.join(unknown)}; kinds: {', '.join(QUALITY_KINDS)}, "
                              f"configurations: {', '.join(CONFIGS)}")
    try:
        suffix_tokens = tuple(int(n) for n in _csv(args.suffix_tokens, ())) or (None,)
    except ValueError:
        raise QuickdraftError(f"--suffix-tokens: expected numbers separated by commas, got {args.suffix_tokens!r}") from None
    config = QualityBenchConfig(
        holes=_pick(args.holes, args.quick, 6, 36), seed=args.seed, languages=_csv(args.languages, DEFAULT_LANGUAGES),
        kinds=kinds, configs=configs, suffix_tokens=suffix_tokens, prefix_tokens=args.prefix_tokens,
        cold_prefix_tokens=args.cold_prefix_tokens,
        max_new_tokens=_pick(args.max_new_tokens, args.quick, 16, 48), budget_ms=args.budget_ms,
        progress=not args.no_progress,
    )
    if args.budget_ms is not None and not 0 < args.budget_ms <= 60_000:
        raise QuickdraftError(f"--budget-ms: expected 1..60000 ms, got {args.budget_ms:g}")
    holes = make_quality_holes(config.holes, config.seed, config.languages, config.kinds)
    if not holes:
        raise QuickdraftError("no hole could be cut: no installed sources with a tree-sitter grammar for "
                              f"{', '.join(config.languages)}")
    defaults = machine_defaults()
    drafter = args.drafter or ("hybrid" if args.draft not in (None, "none") else defaults.drafter)
    runs = {}
    for verifier in _csv(args.verifiers, (args.verifier or defaults.verifier,)):
        engine = CompletionEngine.load(verifier, args.draft or defaults.draft, drafter=drafter,
                                       dtype=args.dtype, device=args.device)
        runs[verifier] = run_quality_bench(engine, holes, config, environment(engine.verifier, engine.draft))
        del engine  # one model in memory at a time
    result = merge_runs(runs) if len(runs) > 1 else runs.popitem()[1]
    return _report(result, format_table(result), Path(args.out) / "quality.json")
