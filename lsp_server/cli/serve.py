"""`quickdraft serve`: the Language Server over stdio (default) or loopback TCP."""

from __future__ import annotations

import argparse
import asyncio
import logging

from lsp_server.workspace.settings import SETTINGS, add_setting_flags, machine_defaults, settings_from_flags

# The settings of a shared inference server, in a group of their own in --help.
REMOTE_SETTINGS = ("backend", "backend_model", "backend_tokenizer", "api_key_env")


def add_parsers(sub) -> None:
    serve = sub.add_parser("serve", help="run the Language Server (stdio, or --tcp)")
    # A flag for each setting that has one (lsp_server/workspace/settings.py); unset flags keep the
    # machine's defaults.
    add_setting_flags(serve, [spec.name for spec in SETTINGS if spec.name not in REMOTE_SETTINGS])
    remote = serve.add_argument_group("a shared inference server instead of local models (docs/teams.md)")
    add_setting_flags(remote, REMOTE_SETTINGS)
    serve.add_argument("--tcp", action="store_true", help="listen on TCP instead of stdio")
    serve.add_argument("--stdio", action="store_true", help="use stdio (the default; accepted because clients pass it)")
    serve.add_argument("--host", default="127.0.0.1", help="TCP address (default 127.0.0.1: this machine only)")
    serve.add_argument("--port", type=int, default=2087, help="TCP port (0: any free port; the chosen one is printed)")
    serve.add_argument("--token-file", help="with --tcp: write the launch token to this file (mode 0600) "
                                            "instead of printing it")
    serve.add_argument("--log-file", help="write logs here instead of stderr")
    serve.set_defaults(handler=run_serve)


def settings_from_args(args: argparse.Namespace):
    return settings_from_flags(machine_defaults(), args)


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
