"""`quickdraft serve`: the Language Server over stdio (default) or loopback TCP."""

from __future__ import annotations

import argparse
import asyncio
import logging
from dataclasses import replace

from engine.modes import DRAFTER_MODES


def add_parsers(sub) -> None:
    serve = sub.add_parser("serve", help="run the Language Server (stdio, or --tcp)")
    # No defaults here: unset flags keep the machine's defaults (see settings.machine_defaults).
    serve.add_argument("--verifier", help="preset name, model directory or .gguf file")
    serve.add_argument("--draft", help="draft model (preset, directory, .gguf) or 'none'")
    serve.add_argument("--drafter", choices=DRAFTER_MODES)
    serve.add_argument("--max-new-tokens", type=int)
    serve.add_argument("--budget-ms", type=float, help="latency budget per completion (default 200)")
    serve.add_argument("--dtype", help="int8 | bfloat16 | float16 | float32 (default: int8 weights on a CPU, bf16 on CUDA)")
    serve.add_argument("--device", help="cpu | cuda | cuda:N")
    serve.add_argument("--min-confidence", type=probability, metavar="P",
                       help="withhold answers the model is less sure of (0..1, 0: show all; docs/server.md)")
    serve.add_argument("--no-warm", action="store_true",
                       help="do not prefill the cursor's prompt window ahead of requests (setting `warm`)")
    serve.add_argument("--no-anticipate", action="store_true",
                       help="start the model at the request, not at the edit before it (setting `anticipate`)")
    remote = serve.add_argument_group("a shared inference server instead of local models (docs/teams.md)")
    remote.add_argument("--backend", metavar="URL",
                        help="OpenAI-compatible server (vLLM, SGLang, llama.cpp): http://127.0.0.1:PORT, or https:// "
                             "for one on another machine")
    remote.add_argument("--backend-model", metavar="NAME", help="the model name it serves (default: the first it lists)")
    remote.add_argument("--backend-tokenizer", metavar="SPEC",
                        help="the model's tokenizer here (preset, directory, .gguf) to send exact token ids; "
                             "'none' sends text (default: --backend-model, if it is found here)")
    remote.add_argument("--api-key-env", metavar="VAR", help="environment variable holding the server's bearer token")
    serve.add_argument("--tcp", action="store_true", help="listen on TCP instead of stdio")
    serve.add_argument("--stdio", action="store_true", help="use stdio (the default; accepted because clients pass it)")
    serve.add_argument("--host", default="127.0.0.1", help="TCP address (default 127.0.0.1: this machine only)")
    serve.add_argument("--port", type=int, default=2087, help="TCP port (0: any free port; the chosen one is printed)")
    serve.add_argument("--token-file", help="with --tcp: write the launch token to this file (mode 0600) "
                                            "instead of printing it")
    serve.add_argument("--log-file", help="write logs here instead of stderr")
    serve.set_defaults(handler=run_serve)


def probability(text: str) -> float:
    """A number from 0 to 1 (argparse names the flag and prints the message when it is not)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number from 0 to 1, got {text!r}") from None
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"expected a number from 0 to 1, got {text}")
    return value


def settings_from_args(args: argparse.Namespace):
    from lsp_server.workspace.settings import machine_defaults

    settings = machine_defaults()
    flags = {"verifier": args.verifier, "draft": args.draft, "drafter": args.drafter, "dtype": args.dtype,
             "device": args.device, "max_new_tokens": args.max_new_tokens, "budget_ms": args.budget_ms,
             "backend": args.backend, "backend_model": args.backend_model,
             "backend_tokenizer": args.backend_tokenizer, "api_key_env": args.api_key_env,
             "min_confidence": args.min_confidence}
    if args.no_warm:
        flags["warm"] = False
    if args.no_anticipate:
        flags["anticipate"] = False
    return replace(settings, **{k: v for k, v in flags.items() if v is not None})


def run_serve(args: argparse.Namespace) -> int:
    from lsp_server.server import create_server
    from lsp_server.wire.transport import serve_stdio

    if args.log_file:
        handler = logging.FileHandler(args.log_file)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        logging.getLogger().handlers[:] = [handler]
    if args.verbose:
        logging.getLogger("pygls").setLevel(logging.DEBUG)
    elif not args.log_file:
        # Editors show the server's stderr as errors: keep it for warnings. The client hears
        # about loading and readiness through quickdraft/status anyway.
        logging.getLogger().setLevel(logging.WARNING)
    settings = settings_from_args(args)
    if args.tcp:
        from lsp_server.wire.tcp import serve_tcp

        return asyncio.run(serve_tcp(settings, args.host, args.port, token_file=args.token_file))
    server = create_server(settings)
    try:
        return asyncio.run(serve_stdio(server))
    finally:
        server.service.shutdown()
