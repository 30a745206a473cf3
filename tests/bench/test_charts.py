"""Charts are a benchmark extra: the server and the engine run without matplotlib, and a benchmark
without it still writes its tables and JSON, skipping only the charts."""

from __future__ import annotations

import subprocess
import sys

from engine.bench import common, report
from lsp_server.bench import session_report


def test_the_server_never_imports_matplotlib():
    probe = ("import sys; import lsp_server.server, lsp_server.cli.serve, engine.completion; "
             "print('matplotlib' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"


def test_without_matplotlib_the_charts_are_skipped_not_a_crash(monkeypatch, tmp_path, caplog):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # what `import matplotlib` sees when it is missing
    assert common.pyplot() is None
    assert "quickdraft[bench]" in caplog.text
    assert report.write_plots({}, tmp_path) == []
    assert session_report.write_plots({}, tmp_path) == []
