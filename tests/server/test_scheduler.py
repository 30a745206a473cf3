"""The scheduler in-process: one worker, newer requests for a document supersede older ones."""

from __future__ import annotations

import asyncio
import threading

import pytest

from lsp_server.answering.scheduler import Scheduler, Superseded

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def scheduler():
    scheduler = Scheduler()
    yield scheduler
    scheduler.shutdown()


async def _occupy(scheduler: Scheduler) -> tuple[threading.Event, asyncio.Future, threading.Event]:
    """A job that holds the worker until released; returns (release, its future, started)."""
    release, started = threading.Event(), threading.Event()

    def hold(cancel):
        started.set()
        release.wait(10)
        return "held"

    future = asyncio.ensure_future(scheduler.run("blocker", hold))
    await asyncio.get_running_loop().run_in_executor(None, started.wait, 10)
    return release, future, started


async def test_jobs_run_on_one_worker_thread_in_order(scheduler):
    threads, order = set(), []

    def job(name):
        def work(cancel):
            threads.add(threading.current_thread().name)
            order.append(name)
            return name
        return work

    results = await asyncio.gather(*(scheduler.run(f"doc{i}", job(i)) for i in range(5)),
                                   scheduler.call(lambda: order.append("call") or "call"))
    assert results == [0, 1, 2, 3, 4, "call"] and order == [0, 1, 2, 3, 4, "call"]
    assert len(threads) == 1 and threads.pop().startswith("quickdraft-engine")


async def test_a_newer_request_supersedes_the_queued_one(scheduler):
    release, blocker, _ = await _occupy(scheduler)
    ran = []
    older = asyncio.ensure_future(scheduler.run("a.py", lambda cancel: ran.append("older")))
    newer = asyncio.ensure_future(scheduler.run("a.py", lambda cancel: ran.append("newer") or "newer"))
    other = asyncio.ensure_future(scheduler.run("b.py", lambda cancel: ran.append("other") or "other"))
    await asyncio.sleep(0)
    release.set()
    with pytest.raises(Superseded):
        await older
    assert await newer == "newer" and await other == "other" and await blocker == "held"
    assert ran == ["newer", "other"]  # the superseded job never started


async def test_a_newer_request_cancels_the_running_one(scheduler):
    started, seen = threading.Event(), []

    def long_job(cancel):
        started.set()
        seen.append(cancel.wait(10))  # a decode loop checks its flag between passes
        return "stopped early"

    running = asyncio.ensure_future(scheduler.run("a.py", long_job))
    await asyncio.get_running_loop().run_in_executor(None, started.wait, 10)
    newer = await scheduler.run("a.py", lambda cancel: "newer")
    assert await running == "stopped early" and seen == [True] and newer == "newer"


async def test_a_cancelled_caller_tells_its_job_to_stop(scheduler):
    started, seen = threading.Event(), []

    def long_job(cancel):
        started.set()
        seen.append(cancel.wait(10))

    task = asyncio.ensure_future(scheduler.run("a.py", long_job))
    await asyncio.get_running_loop().run_in_executor(None, started.wait, 10)
    task.cancel()  # what pygls does on $/cancelRequest
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await scheduler.call(lambda: seen) == [True]  # the worker finished the job, told to stop


async def test_a_stale_document_version_never_starts(scheduler):
    ran = []
    with pytest.raises(Superseded):
        await scheduler.run("a.py", lambda cancel: ran.append(1), is_stale=lambda: True)
    assert ran == []


async def test_cancel_all_stops_queued_jobs_before_a_model_load(scheduler):
    release, blocker, _ = await _occupy(scheduler)
    queued = [asyncio.ensure_future(scheduler.run(f"{i}.py", lambda cancel: "ran")) for i in range(3)]
    await asyncio.sleep(0)
    scheduler.cancel_all()
    release.set()
    for job in queued:
        with pytest.raises(Superseded):
            await job
    await blocker


async def test_errors_reach_the_caller_and_the_worker_keeps_serving(scheduler):
    def broken(cancel):
        raise ValueError("bad input")

    with pytest.raises(ValueError, match="bad input"):
        await scheduler.run("a.py", broken)
    assert await scheduler.run("a.py", lambda cancel: "fine") == "fine"


async def test_a_job_turned_background_goes_on_unless_a_request_waits_behind_it(scheduler):
    """demote(): decoding on after an answer must not hold up a request already queued for the worker."""
    for queued_behind in (False, True):
        started, demoted, seen = threading.Event(), threading.Event(), []
        cancel = threading.Event()

        def long_job(flag):
            started.set()
            demoted.wait(10)
            seen.append(flag.wait(0.2))  # told to stop, or not, within a pass or two
            return "done"

        running = asyncio.ensure_future(scheduler.run("a.py", long_job, cancel=cancel))
        await asyncio.get_running_loop().run_in_executor(None, started.wait, 10)
        waiting = asyncio.ensure_future(scheduler.run("b.py", lambda flag: "b")) if queued_behind else None
        await asyncio.sleep(0)
        scheduler.demote(cancel)  # the job answered at its deadline and decodes on
        demoted.set()
        assert await running == "done" and seen == [queued_behind]
        if waiting is not None:
            assert await waiting == "b"
    # A job that is itself still queued when it answers (the loop's answer at the deadline) keeps its place.
    release, blocker, _ = await _occupy(scheduler)
    queued_flag = threading.Event()
    queued = asyncio.ensure_future(scheduler.run("c.py", lambda flag: flag.is_set(), cancel=queued_flag))
    await asyncio.sleep(0)
    scheduler.demote(queued_flag)
    release.set()
    assert await blocker == "held" and await queued is False
