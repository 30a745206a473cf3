"""One engine worker; newer requests for a document supersede older ones.

The engine is single-threaded and expensive, so everything runs on one worker thread.
A request for a document cancels that document's previous request (running or still
queued) through the engine's cancel flag, which the decode loop checks between
verifier passes; a queued job whose document has moved on never starts.
"""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, TypeVar

T = TypeVar("T")


class Superseded(Exception):
    """The job was dropped before it started: a newer request or document version replaced it."""


class Scheduler:
    def __init__(self) -> None:
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="quickdraft-engine")
        self._latest: dict[str, threading.Event] = {}

    async def run(self, key: str, job: Callable[[threading.Event], T], *, is_stale: Callable[[], bool] = lambda: False) -> T:
        """Run `job(cancel_flag)` on the worker; cancels the previous job with the same key.

        Raises Superseded when the job never started, and asyncio.CancelledError when the
        caller was cancelled ($/cancelRequest) — the job itself is told to stop.
        """
        cancel = threading.Event()
        previous = self._latest.get(key)
        if previous is not None:
            previous.set()
        self._latest[key] = cancel

        def work() -> T:
            if cancel.is_set() or is_stale():
                raise Superseded()
            return job(cancel)

        future = asyncio.get_running_loop().run_in_executor(self.executor, work)
        try:
            return await future
        except asyncio.CancelledError:
            cancel.set()
            raise
        finally:
            if self._latest.get(key) is cancel:
                del self._latest[key]

    async def call(self, function: Callable[[], T]) -> T:
        """Run a plain function on the worker, in order with the jobs (loading models, switching drafters)."""
        return await asyncio.get_running_loop().run_in_executor(self.executor, function)

    def cancel_all(self) -> None:
        for flag in self._latest.values():
            flag.set()

    def shutdown(self) -> None:
        self.cancel_all()
        self.executor.shutdown(wait=False, cancel_futures=True)
