"""CPU threads that follow the cores a training may run on.

A training pinned to some of the machine's cores (``taskset``, a container's cpuset, or
``make demo``, which gives each app one core while both train) starts with one thread per
pinned core. When its cores are widened while it trains (the demo does so once the other app
is done), the threads should follow, or the freed cores idle for the rest of the run.
"""

from __future__ import annotations

import os

import pytorch_lightning as pl
import torch

__all__ = ["ThreadsFollowCores", "allowed_cores"]


def allowed_cores() -> int | None:
    """How many cores this process may run on, or ``None`` where the system does not say (macOS)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None


class ThreadsFollowCores(pl.Callback):
    """Set torch's intra-op threads to one per allowed core whenever the allowed cores change
    during training; checked before each training batch (one system call).

    A run whose cores never change keeps the threads it was started with, whatever set them
    (``OMP_NUM_THREADS``, ``torch.set_num_threads``).
    """

    def __init__(self) -> None:
        self._cores: int | None = None

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch, batch_idx: int) -> None:
        cores = allowed_cores()
        if self._cores is not None and cores is not None and cores != self._cores:
            torch.set_num_threads(cores)
        self._cores = cores
