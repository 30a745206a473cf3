"""`quickdraft generate` and `quickdraft complete` as a user runs them."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.timeout(300)


def quickdraft(*args: str, input: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "lsp_server.cli", *args], capture_output=True, text=True,
                          input=input, timeout=240)


def tiny(model_dir) -> list[str]:
    return ["--verifier", str(model_dir), "--dtype", "float32"]


def test_generate_json(tiny_model_dir, tiny_draft_dir, tmp_path):
    prompt = tmp_path / "prompt.py"
    prompt.write_text("def add(a, b):\n    return a + b\n\ndef add(a, b):\n")
    out = quickdraft("generate", *tiny(tiny_model_dir), "--draft", str(tiny_draft_dir), "--drafter", "hybrid",
                     "--prompt-file", str(prompt), "--max-new-tokens", "12", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert set(data) == {"text", "token_ids", "stats"} and len(data["token_ids"]) == 12
    stats = data["stats"]
    for key in ("decode_ms", "prefill_tokens", "verifier_passes", "drafted", "accepted", "tau"):
        assert key in stats
    assert stats["accepted"] <= stats["drafted"] and stats["tau"] >= 1.0
    plain = quickdraft("generate", *tiny(tiny_model_dir), "--drafter", "none", "--prompt-file", str(prompt),
                       "--max-new-tokens", "12", "--json")
    assert json.loads(plain.stdout)["token_ids"] == data["token_ids"]  # exact: same tokens as plain decoding


def test_generate_prints_text_and_a_summary(tiny_model_dir):
    out = quickdraft("generate", *tiny(tiny_model_dir), "--drafter", "lookup", "--prompt-file", "-",
                     "--max-new-tokens", "6", input="import sys\n")
    assert out.returncode == 0 and out.stdout and "verifier passes" in out.stderr


def test_complete_at_a_position(tiny_model_dir, tmp_path):
    source = tmp_path / "m.py"
    source.write_text("def double(x):\n    return \n")
    out = quickdraft("complete", str(source), "--line", "1", "--character", "11", *tiny(tiny_model_dir),
                     "--drafter", "lookup", "--max-new-tokens", "8", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["stats"]["prompt_tokens"] > 0 and "multiline" in data["stats"]


@pytest.mark.parametrize("args, message", [
    (["--line", "99", "--character", "0"], "outside the file"),
    (["--line", "0", "--character", "999"], "past the end"),
])
def test_complete_position_errors(tiny_model_dir, tmp_path, args, message):
    source = tmp_path / "m.py"
    source.write_text("x = 1\n")
    out = quickdraft("complete", str(source), *args, *tiny(tiny_model_dir))
    assert out.returncode == 2 and message in out.stderr and "Traceback" not in out.stderr


def test_user_errors_are_one_clear_line(tiny_model_dir, tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    cases = [
        (["generate", *tiny(tiny_model_dir), "--drafter", "lookup", "--prompt-file", str(empty)], "empty"),
        (["generate", "--verifier", str(tmp_path / "nope"), "--drafter", "lookup", "--prompt-file", str(empty)],
         "nope"),
        (["generate", *tiny(tiny_model_dir), "--drafter", "lookup", "--prompt-file", str(tmp_path / "missing")],
         "cannot read"),
        (["generate", *tiny(tiny_model_dir), "--drafter", "draft", "--draft", "none", "--prompt-file", str(empty)],
         "needs a draft model"),
    ]
    for args, needle in cases:
        out = quickdraft(*args)
        assert out.returncode == 2, (args, out.stderr)
        assert needle in out.stderr and "Traceback" not in out.stderr, out.stderr


def test_binary_file_is_refused(tiny_model_dir, tmp_path):
    blob = tmp_path / "blob.bin"
    blob.write_bytes(b"\x00\x01\x02binary")
    out = quickdraft("complete", str(blob), "--line", "0", "--character", "0", *tiny(tiny_model_dir))
    assert out.returncode == 2 and "binary" in out.stderr


def test_demo_types_through_the_server(tiny_model_dir, tmp_path):
    out = quickdraft("demo", *tiny(tiny_model_dir), "--draft", "none", "--drafter", "lookup", "--functions", "1",
                     "--cps", "40", "--budget-ms", "2000", "--out", str(tmp_path))
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("deleting this body") == 1
    assert " model " in out.stdout  # at least one model answer printed as ghost text, with its latency
    for line in ("cold start", "model answers", "within the 2000 ms budget", "characters per model answer", "accepted"):
        assert line in out.stdout, line
    result = json.loads((tmp_path / "session.json").read_text())
    assert result["cold_ms"] > 0 and result["answered"] > 0
    assert (tmp_path / "session-latency-cdf.png").is_file()


def test_models_tiny_writes_a_loadable_model(tmp_path):
    out = quickdraft("models", "tiny", str(tmp_path / "t"), "--seed", "3")
    assert out.returncode == 0, out.stderr
    generated = quickdraft("generate", "--verifier", str(tmp_path / "t"), "--drafter", "lookup", "--dtype", "float32",
                           "--prompt-file", "-", "--max-new-tokens", "3", "--json", input="x = ")
    assert len(json.loads(generated.stdout)["token_ids"]) == 3
