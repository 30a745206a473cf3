"""A real llama.cpp `llama-server` on the loopback (`make test` builds it: tests/support/build_llama_server.sh).

Tests start it on 127.0.0.1 on a free port with a tiny GGUF they wrote, kill it and start
it again on the same port. Nothing here listens on or talks to any other address.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
import urllib.error
import urllib.request
from pathlib import Path

HOST = "127.0.0.1"
MISSING = "llama-server is missing: `make llama-server` builds it (or set QUICKDRAFT_LLAMA_SERVER to one)"


def binary() -> Path | None:
    """$QUICKDRAFT_LLAMA_SERVER, else the one `make` linked beside this Python, else one on PATH."""
    chosen = os.environ.get("QUICKDRAFT_LLAMA_SERVER")
    if chosen:
        return Path(chosen)
    beside = Path(sys.executable).parent / "llama-server"
    if beside.exists():
        return beside
    found = shutil.which("llama-server")
    return Path(found) if found else None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


class LlamaServer:
    def __init__(self, model: Path, log_path: Path, *extra: str, port: int | None = None) -> None:
        self.model, self.log_path, self.extra = model, log_path, extra
        self.port = port or free_port()
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def start(self, timeout: float = 60) -> "LlamaServer":
        # 4 HTTP threads: each open keep-alive connection holds one until it closes or idles out
        # (5 s). A backend may hold two and the tests poll /slots on a third: with 2 threads, one
        # request in two of the budget test waited for a thread and streamed nothing in 3 s.
        command = [str(binary()), "--model", str(self.model), "--host", HOST, "--port", str(self.port),
                   "--threads", "1", "--threads-http", "4", "--metrics", "--slots", "--no-webui", *self.extra]
        log = self.log_path.open("ab")
        self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"llama-server exited with {self.process.returncode}; see {self.log_path}")
            try:
                if self.get("/health").get("status") == "ok":
                    return self
            except (OSError, ValueError):
                pass
            time.sleep(0.1)
        self.stop()
        raise TimeoutError(f"llama-server not healthy within {timeout} s; see {self.log_path}")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()  # as a crash would: no goodbye to open connections
            self.process.wait(timeout=30)
        self.process = None

    def get(self, path: str):
        with urllib.request.urlopen(self.url + path, timeout=5) as response:
            return json.loads(response.read())

    def slots(self) -> list[dict]:
        return self.get("/slots")

    def wait_idle(self, timeout: float = 10) -> dict:
        """The slot that worked last, once no slot is generating any more."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            slots = self.slots()
            if not any(slot.get("is_processing") for slot in slots):
                return max(slots, key=lambda slot: slot.get("id_task", -1))
            time.sleep(0.02)
        raise TimeoutError(f"llama-server still generating after {timeout} s: {self.slots()}")

    @contextmanager
    def decoded_per_task(self):
        """Watch the slots meanwhile: {task id: most tokens seen decoded for it}. A task cut short
        (its connection closed) stops growing and is followed by the next; one left running would
        reach its max_tokens first, with one slot."""
        seen: dict[int, int] = {}
        done = threading.Event()

        def watch() -> None:
            while not done.is_set():
                try:
                    for slot in self.slots():
                        if "id_task" in slot:
                            decoded = slot.get("next_token", [{}])[0].get("n_decoded", 0)
                            seen[slot["id_task"]] = max(seen.get(slot["id_task"], 0), decoded)
                except (OSError, ValueError):
                    pass
                time.sleep(0.01)

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        try:
            yield seen
        finally:
            done.set()
            watcher.join(timeout=5)


def one_slot_server(model: Path, directory: Path, context: int) -> LlamaServer:
    """A started server with one slot and no prompt cache in RAM: what the tests talk to."""
    return LlamaServer(model, directory / "server.log", "-c", str(context), "-np", "1", "--cache-ram", "0").start()
