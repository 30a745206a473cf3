"""`quickdraft bench passes`: what one forward pass costs, eager against the fast paths, with
random-weight models of the exact Qwen2.5-Coder shapes (engine/bench/passes.py); `--device-run`,
the GPU session's one command (engine/bench/device_run.py)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from lsp_server.cli.bench_args import pick as _pick
from lsp_server.cli.bench_args import report as _report


def add_parser(kinds) -> None:
    passes = kinds.add_parser("passes", help="per-pass cost with random-weight Qwen2.5-Coder shapes: eager vs static "
                                             "cache (+ CUDA graphs on CUDA); no download needed")
    passes.add_argument("--quick", action="store_true",
                        help="small model shapes, short contexts, 32-token replays (a CPU test run)")
    passes.add_argument("--device", help="cpu | cuda | cuda:N (default: cuda when available)")
    passes.add_argument("--dtype", help="bfloat16 | float16 | float32 | int8 | int4 (CPU) "
                                         "(default: bf16 on CUDA, fp32 on the CPU)")
    passes.add_argument("--out", default="bench-out", help="folder for passes.json or device-run.json (default bench-out)")
    passes.add_argument("--verifiers", help="comma-separated shapes of qwen2.5-coder-1.5b, -3b, -7b, -14b (the "
                                            "verifier presets; default qwen2.5-coder-1.5b,qwen2.5-coder-7b; "
                                            "'none': the draft qwen2.5-coder-0.5b alone, which always runs)")
    passes.add_argument("--contexts", help="comma-separated context lengths (default 512,2048; --quick 32,128)")
    passes.add_argument("--repeats", type=int, help="timed passes per figure, the median counts (default 20; --quick 2)")
    passes.add_argument("--fast-mode", choices=("graphs", "bucketed", "eager", "compiled"),
                        help="static cache mode measured as 'fast' (default graphs on CUDA, bucketed elsewhere), "
                             "or 'compiled': the compiled decode step (torch.compile, one graph per shape)")
    passes.add_argument("--measure",
                        help="comma-separated: times (per-pass timings, replays), profile (one pass of each path under "
                             "torch.profiler: kernels on CUDA, ops elsewhere, the five longest) and/or ops (ATen ops "
                             "and compiled kernels per pass, eager vs the compiled step, CPU only; compiles each model) "
                             "(default times)")
    passes.add_argument("--device-run", action="store_true",
                        help="the GPU session's one command: captured and compiled paths side by side for the 0.5B, "
                             "1.5B and 7B shapes, replays, a cold 2,300-token prompt, profiled passes, issue 39's "
                             "targets; writes device-run.json, prints markdown (--quick: tiny shapes, on the CPU)")
    passes.add_argument("--compare-weights", metavar="FORMATS",
                        help="CPU: the 0.5B and 1.5B shapes (or --verifiers) in each weight format, comma-separated "
                             "from int8, int4, float (the --dtype activations) and int8-f32rows (int8 as read before "
                             "2026-12-07), passes of 1, 2, 4 and 8 tokens side by side, then cold prompt chunks "
                             "of 17 and 128 tokens with ATen's and (where it runs) oneDNN's matmul; writes weights.json")
    passes.set_defaults(handler=run_passes)


def run_passes(args: argparse.Namespace) -> int:
    from engine.bench.passes import PassesBenchConfig, run_passes_bench
    from engine.bench.passes_table import format_table
    from engine.errors import QuickdraftError
    from engine.models.loading import parse_device, parse_precision

    device = parse_device(args.device)  # a clear error when CUDA is asked for and missing
    dtype, weights = parse_precision(args.dtype or ("float32" if device.type == "cpu" else None), device)
    if args.fast_mode == "graphs" and device.type != "cuda":
        raise QuickdraftError("--fast-mode graphs needs --device cuda; use bucketed or eager on this device")
    if args.device_run:
        return _device_run(args, device, dtype, weights)
    if args.compare_weights:
        return _compare_weights(args, device, dtype)
    measure = _measures(args.measure or "times")
    if "ops" in measure and device.type != "cpu":
        raise QuickdraftError("--measure ops counts on the CPU (compiled passes on CUDA replay graphs); add --device cpu")
    try:
        contexts = tuple(int(c) for c in args.contexts.split(",")) if args.contexts else None
    except ValueError:
        raise QuickdraftError(f"--contexts takes comma-separated token counts, not {args.contexts!r}") from None
    config = PassesBenchConfig(
        device=str(device), dtype=dtype, weights=weights, quick=args.quick,
        verifiers=_verifiers(args.verifiers),
        contexts=contexts or ((32, 128) if args.quick else (512, 2048)),
        repeats=_pick(args.repeats, args.quick, 2, 20), fast_modes=(args.fast_mode,) if args.fast_mode else (),
        new_tokens=32 if args.quick else 64, measure=measure,
    )
    try:
        result = run_passes_bench(config, progress=lambda text: print(text, file=sys.stderr))
    except ValueError as error:  # an unknown shape name, a context beyond the model's
        raise QuickdraftError(str(error)) from None
    return _report(result, format_table(result), Path(args.out) / "passes.json")


def _device_run(args: argparse.Namespace, device, dtype, weights: str | None) -> int:
    """The preset (engine/bench/device_run.py): the JSON is rewritten after every model, so a run cut
    short keeps what it measured; the exit status is 1 when anything failed."""
    from engine.bench.device_run import OUTPUT, device_run_config
    from engine.bench.passes import run_passes_bench
    from engine.bench.passes_table import format_table
    from engine.errors import QuickdraftError

    fixed = [flag for flag, value in (("--contexts", args.contexts), ("--fast-mode", args.fast_mode),
                                      ("--measure", args.measure)) if value is not None]
    if fixed:
        raise QuickdraftError(f"--device-run sets {', '.join(fixed)} itself; leave them out")
    if device.type != "cuda" and not args.quick:
        raise QuickdraftError("--device-run measures the 0.5B, 1.5B and 7B shapes on a GPU (--device cuda); "
                              "elsewhere add --quick")
    config = device_run_config(str(device), dtype, quick=args.quick, weights=weights, verifiers=_verifiers(args.verifiers),
                               repeats=args.repeats)
    path = Path(args.out) / OUTPUT
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        result = run_passes_bench(config, progress=lambda text: print(text, file=sys.stderr),
                                  checkpoint=lambda partial: path.write_text(json.dumps(partial, indent=1)))
    except ValueError as error:  # an unknown shape name
        raise QuickdraftError(str(error)) from None
    _report(result, format_table(result, markdown=True), path)
    return 1 if result["errors"] else 0


def _compare_weights(args: argparse.Namespace, device, dtype) -> int:
    from engine.bench.cpu_weights import FLOAT, INT8_FLOAT32_ROWS, WeightsBenchConfig, format_weights_table, run_weights_bench
    from engine.errors import QuickdraftError
    from engine.models.loading import WEIGHT_FORMATS

    formats = tuple(part.strip() for part in args.compare_weights.split(",") if part.strip())
    if not formats or set(formats) - {*WEIGHT_FORMATS, FLOAT, INT8_FLOAT32_ROWS}:
        raise QuickdraftError(f"--compare-weights takes int8, int4, float and/or {INT8_FLOAT32_ROWS}, comma-separated; "
                              f"not {args.compare_weights!r}")
    if device.type != "cpu":
        raise QuickdraftError("--compare-weights measures CPU weight formats; add --device cpu")
    config = WeightsBenchConfig(formats=formats, dtype=dtype, repeats=_pick(args.repeats, args.quick, 2, 9))
    if args.verifiers:
        config.models = (config.models[0], *(_verifiers(args.verifiers) or ()))
    if args.quick:
        config.models, config.context, config.sizes, config.prompt_sizes = ("quick-draft", "quick-verifier"), 32, (1, 4), (17, 32)
    result = run_weights_bench(config, progress=lambda text: print(text, file=sys.stderr))
    return _report(result, format_weights_table(result), Path(args.out) / "weights.json")


def _measures(text: str) -> tuple[str, ...]:
    from engine.errors import QuickdraftError

    measures = tuple(part.strip() for part in text.split(",") if part.strip())
    if not measures or set(measures) - {"times", "profile", "ops"}:
        raise QuickdraftError(f"--measure takes times, profile and/or ops, comma-separated; not {text!r}")
    return measures


def _verifiers(text: str | None) -> tuple[str, ...] | None:
    if text is None:
        return None
    return tuple(name.strip() for name in text.split(",") if name.strip() and name.strip() != "none")
