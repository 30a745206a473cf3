"""One engine worker; newer requests for a document supersede older ones.

The engine is single-threaded and expensive, so everything runs on one worker thread.
A request for a document cancels that document's previous request (running or still
queued) through the engine's cancel flag, which the engine checks between decoder
layers; a queued job whose document has moved on never starts.

Background work — warming a cache before the user asks, decoding on after an answer
was sent — runs at low priority: any new request cancels all of it at once, and a job
that turns background while a request is queued behind it stops, so background work
never delays a real request by more than one layer's time.
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
        self._background: set[threading.Event] = set()
        self._queued: set[threading.Event] = set()  # foreground jobs submitted and not started yet

    async def run(self, key: str, job: Callable[[threading.Event], T], *, is_stale: Callable[[], bool] = lambda: False,
                  background: bool = False, cancel: threading.Event | None = None,
                  joins: threading.Event | None = None) -> T:
        """Run `job(cancel_flag)` on the worker; cancels the previous job with the same key.

        A foreground job also cancels every background job but the one it `joins` (a warm
        feeding the prompt this job needs: it queues behind it instead of throwing its work
        away); a background one is cancelled by the next foreground job. `cancel` is the
        job's flag when the caller needs it before the job starts (to demote it). Raises
        Superseded when the job never started, and asyncio.CancelledError when the caller was
        cancelled ($/cancelRequest) — the job itself is told to stop.
        """
        cancel = cancel or threading.Event()
        previous = self._latest.get(key)
        if previous is not None:
            previous.set()
        self._latest[key] = cancel
        if background:
            self._background.add(cancel)
        else:
            self.cancel_background(but=joins)
            self._queued.add(cancel)

        def work() -> T:
            self._queued.discard(cancel)
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
            self._queued.discard(cancel)
            self._background.discard(cancel)
            if self._latest.get(key) is cancel:
                del self._latest[key]

    def demote(self, cancel: threading.Event) -> None:
        """The job holding `cancel` has answered and goes on in the background, unless a request
        queued behind it is waiting for the worker: then it stops."""
        if self._queued - {cancel}:
            cancel.set()
        else:
            self._background.add(cancel)

    def cancel_background(self, but: threading.Event | None = None) -> None:
        for flag in self._background - {but}:
            flag.set()
        self._background &= {but}

    def cancel(self, key: str) -> None:
        """Stop the job with this key, running or queued (its document was closed)."""
        flag = self._latest.get(key)
        if flag is not None:
            flag.set()

    async def call(self, function: Callable[[], T]) -> T:
        """Run a plain function on the worker, in order with the jobs (loading models, switching drafters)."""
        return await asyncio.get_running_loop().run_in_executor(self.executor, function)

    def cancel_all(self) -> None:
        for flag in self._latest.values():
            flag.set()

    def shutdown(self) -> None:
        self.cancel_all()
        self.executor.shutdown(wait=False, cancel_futures=True)
