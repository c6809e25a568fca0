"""Median milliseconds of one call of ``fn`` replayed in a CUDA graph (shared by the decoding microbenchmarks)."""

from __future__ import annotations

import statistics


def time_graph(fn, reps: int, calls: int = 1) -> float:
    """Warm ``fn`` up on a side stream, capture ``calls`` calls of it in one CUDA graph, replay it ``reps`` times;
    the median milliseconds per call."""
    import torch

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / calls)
    return statistics.median(times)
