"""Timing helpers shared by the captioner's and the recognizer's benchmarks (:mod:`scripts.benchmarks.captioner`, :mod:`scripts.benchmarks.recognizer`)."""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
import torch
from torch.utils.flop_counter import FlopCounterMode

PRECISIONS = ("fp32", "bf16")


def sync(device: torch.device) -> None:
    """Wait for queued GPU work, so a timer measures it (nothing to wait for on CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize()


def timed(fn: Callable[[], object], repeats: int, device: torch.device) -> float:
    """Median seconds of ``fn()`` after one warm-up call."""
    fn()
    times = []
    for _ in range(repeats):
        sync(device)
        start = time.perf_counter()
        fn()
        sync(device)
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def autocast(device: torch.device, precision: str):
    """bf16 autocast (matrix products in bf16, parameters kept in fp32), or nothing for fp32."""
    return torch.autocast(device.type, dtype=torch.bfloat16, enabled=precision == "bf16")


def matmul_rate(device: torch.device, precision: str = "fp32", n: int = 2048) -> float:
    """Measured GFLOP/s of a square matrix multiply in ``precision``."""
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    a, b = torch.randn(n, n, device=device, dtype=dtype), torch.randn(n, n, device=device, dtype=dtype)
    seconds = timed(lambda: a @ b, 5, device)
    return 2 * n**3 / seconds / 1e9


def matmul_gflop(fn: Callable[[], object]) -> float:
    """GFLOP of the matrix products (and convolutions) one call of ``fn`` runs; the call is not timed."""
    with FlopCounterMode(display=False) as counter:
        fn()
    return counter.get_total_flops() / 1e9
