"""`quickdraft` command line: serve | complete | generate | models | heads | bench | demo | doctor.

Each subcommand registers its own arguments and handler; this file only dispatches.
Errors a user can hit end in one clear line on stderr and exit status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import logging
import sys

from engine.errors import QuickdraftError


def build_parser() -> argparse.ArgumentParser:
    from lsp_server.cli import bench, demo, doctor, generate, heads, models, serve

    parser = argparse.ArgumentParser(prog="quickdraft", description=__doc__.splitlines()[0])
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging on stderr")
    sub = parser.add_subparsers(dest="command", required=True)
    for module in (serve, generate, models, heads, bench, demo, doctor):
        module.add_parsers(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    quiet_libraries()
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        return int(args.handler(args) or 0)
    except QuickdraftError as error:
        print(f"quickdraft: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130



def quiet_libraries() -> None:
    """Keep stdout/stderr for quickdraft's own output: no per-load progress bars from transformers."""
    import os

    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    # pygls logs every message it sends or receives at INFO: far too much on a terminal.
    logging.getLogger("pygls").setLevel(logging.WARNING)
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        hf_logging.set_verbosity_error()
    except ImportError:
        pass

