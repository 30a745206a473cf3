"""What every `quickdraft bench` command shares: its common flags and small argument helpers."""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="*", metavar="FILE_OR_DIR",
                        help="corpus files or folders (default: stdlib and installed-package modules, by --seed)")
    parser.add_argument("--quick", action="store_true", help="a small configuration (a few minutes on a CPU)")
    parser.add_argument("--out", default="bench-out", help="folder for JSON and PNG (default bench-out)")
    parser.add_argument("--seed", type=int, default=0, help="corpus and hole choice (default 0)")
    parser.add_argument("--verifier", help="preset, directory or .gguf (default: the default pair's verifier)")
    parser.add_argument("--draft", help="draft model, or 'none'")
    parser.add_argument("--dtype", help="int8 | int4 | bfloat16 | float16 | float32 (default: the engine's, 4-bit weights on a "
                                        "CPU and bf16 on CUDA; bench engine: bf16 where fast, else fp32)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")


def pick(value, quick: bool, quick_value, default):
    """The flag's value if given, else the quick or the full configuration's."""
    return value if value is not None else (quick_value if quick else default)


def comma_list(text: str | None, default):
    return tuple(part.strip() for part in text.split(",") if part.strip()) if text else default


def report(result: dict, table: str, path: Path) -> int:
    """Write the result as JSON, print its table; the exit status."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1))
    print(table)
    print(f"wrote {path}")
    return 0
