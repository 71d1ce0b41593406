"""A running training's thread count, changed from outside through a file.

torch can change its intra-op threads at any time, but only from inside the process: a training
that loads :class:`ThreadsFromFile` reads the wanted count from a file before each step, so
whoever hands it more cores (or takes some back) writes the number there. Given on the command line
of either app's ``fit``::

    speech-attend fit ... --trainer.callbacks+=shared.training.threads.ThreadsFromFile \\
        --trainer.callbacks.path run.threads
    echo 2 > run.threads   # from the next step on, two threads

(Pinning a training to its cores and widening them later does not work as well: OpenMP counts the
cores it may use when torch loads, and a run started on one core then spins too briefly between
parallel regions to gain from a second.)
"""

from __future__ import annotations

from pathlib import Path

import pytorch_lightning as pl
import torch
from pytorch_lightning.utilities import rank_zero_info, rank_zero_warn

__all__ = ["ThreadsFromFile"]


class ThreadsFromFile(pl.Callback):
    """Before each training batch, if ``path`` has changed since the last look, set torch's
    intra-op threads to the positive number it holds. No file means no change; a file that cannot
    be read or does not hold a positive whole number is reported once and ignored.

    Args:
        path (str): a text file, written by whoever hands the run more (or fewer) cores.
    """

    def __init__(self, path: str):
        self.path = Path(path)
        self._seen: tuple[int, int] | None = None  # the file's (modification time, size) last read

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch, batch_idx: int) -> None:
        try:
            stat = self.path.stat()
        except FileNotFoundError:
            return
        if (stat.st_mtime_ns, stat.st_size) == self._seen:
            return
        self._seen = stat.st_mtime_ns, stat.st_size
        try:
            text = self.path.read_text().strip()
        except (OSError, UnicodeDecodeError) as error:  # a folder, no permission, binary: the run goes on
            rank_zero_warn(
                f"{self.path}: cannot be read as a number of threads ({error.__class__.__name__}); threads left at {torch.get_num_threads()}"
            )
            return
        if not text.isdigit() or int(text) < 1:
            rank_zero_warn(
                f"{self.path}: expected a positive whole number of threads, got {text!r}; threads left at {torch.get_num_threads()}"
            )
            return
        if int(text) != torch.get_num_threads():
            torch.set_num_threads(int(text))
            rank_zero_info(f"{self.path}: {int(text)} threads from step {trainer.global_step}")
