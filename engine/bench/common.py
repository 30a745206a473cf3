"""What both benchmarks (engine and session) share: the machine's description and text tables.

No torch here: the session benchmark runs without it.
"""

from __future__ import annotations

import logging
import os
import platform
import subprocess
import time
from pathlib import Path
from typing import Sequence


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def load_average() -> list[float] | None:
    return list(os.getloadavg()) if hasattr(os, "getloadavg") else None


def git_commit() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=5,
                             cwd=Path(__file__).resolve().parent)
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def machine() -> dict:
    """Hardware and software of this run: figures are only comparable on the same machine."""
    return {"cpu": cpu_model(), "cpu_cores": os.cpu_count(), "python": platform.python_version(),
            "platform": platform.platform(), "load_average": load_average(), "git_commit": git_commit(),
            "time": time.strftime("%Y-%m-%dT%H:%M:%S%z")}


def machine_line(env: dict) -> str:
    """"CPU (N cores, GPU)" and the load average when the run started, for a table's last line."""
    gpu = f", {env['gpu']}" if env.get("gpu") else ""
    load = (env.get("load_average") or [None])[0]
    return f"{env.get('cpu')} ({env.get('cpu_cores')} cores{gpu}); load average at start {fmt(load, 2)}"


def round_or_none(value: float | None, digits: int = 4) -> float | None:
    return None if value is None else round(float(value), digits)


def fmt(value, digits: int = 0, unit: str = "", scale: float = 1.0) -> str:
    """A figure for a table cell: `–` when unknown."""
    if value is None:
        return "–"
    return f"{value * scale:.{digits}f}{unit}"


def text_table(rows: Sequence[Sequence[str]]) -> list[str]:
    """Aligned lines: the first row is the header, then a rule; the first column left-aligned."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))) for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return lines


def pyplot():
    """matplotlib's pyplot on the file-only backend (no display needed), or None where it is not
    installed: charts are a benchmark extra (`pip install 'quickdraft[bench]'`), not the server's."""
    try:
        import matplotlib
    except ImportError:
        logging.getLogger(__name__).warning("charts skipped: matplotlib is not installed (pip install 'quickdraft[bench]')")
        return None

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt
