"""The few lines that only run on CUDA: uploads that don't block the host, graph capture.

Importing this module never touches CUDA; every function checks the device it is given,
so the CPU runs the same callers with plain tensors.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Callable, Iterator

import torch

WARMUP_RUNS = 2  # eager runs on a side stream before capture (cuBLAS picks its kernels, allocations settle)


def upload(values: list[int], device: torch.device) -> torch.Tensor:
    """Token ids as a long tensor on `device`, without stalling the host on CUDA.

    `torch.tensor(values, device="cuda")` copies from pageable memory and waits for the
    whole stream; from pinned memory a non-blocking copy just joins the queue.
    """
    host = torch.tensor(values, dtype=torch.long)
    if device.type != "cuda":
        return host.to(device)
    return host.pin_memory().to(device, non_blocking=True)


def capture(run: Callable[[], torch.Tensor], pool) -> tuple["torch.cuda.CUDAGraph", torch.Tensor]:
    """Record `run` (a pass over static input buffers) once; replaying the graph reruns it.

    Returns the graph and the tensor `run` returned, which every replay overwrites in place.
    """
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(WARMUP_RUNS):
            run()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    # Thread-local: the engine's background compile (engine/decoding/compile_in_background.py) may run
    # CUDA work on its own thread meanwhile; in global mode that work would fail this capture.
    with torch.cuda.graph(graph, pool=pool, capture_error_mode="thread_local"):
        output = run()
    return graph, output


def new_pool():
    """A memory pool the graphs of one cache share (they never run at the same time)."""
    return torch.cuda.graph_pool_handle()


def synchronize(device: torch.device) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


@contextmanager
def no_host_sync(device: torch.device) -> Iterator[None]:
    """On CUDA, make any operation that waits for the GPU raise (a check for the benchmark)."""
    if torch.device(device).type != "cuda":
        yield
        return
    previous = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode("error")
    try:
        yield
    finally:
        torch.cuda.set_sync_debug_mode(previous)
