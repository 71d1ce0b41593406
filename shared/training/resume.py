"""Runs that go on exactly where they stopped: ``fit --ckpt_path last``.

:class:`ExactResume` saves the random generators (torch, CUDA, Python, NumPy) in each
checkpoint and restores them on ``fit --ckpt_path``, and numbers the sampler's epochs by the
epoch: the shuffling, the random reference per image, dropout and SpecAugment go on as if the
run had never stopped. A run resumed from a checkpoint written at the end of an epoch (after its
validation; see :class:`~shared.training.checkpoints.RunCheckpoints`) therefore ends with the
same weights as one never interrupted. One resumed from the middle of an epoch is exact too when
its loader holds a position (``data.shards``: the stream goes on from its next unseen item); the
apps' folder loaders hold none, so Lightning starts that epoch again from its first batch and
some batches are seen twice. Under DDP each rank's generators are saved and restored.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytorch_lightning as pl
import torch
import torch.distributed as dist
from lightning_fabric.utilities.data import _set_sampler_epoch

__all__ = ["ExactResume"]


def _random_states() -> dict[str, Any]:
    """Every generator's state as tensors and plain lists (a checkpoint stays ``weights_only``-loadable)."""
    name, keys, position, has_gauss, gauss = np.random.get_state()
    version, python_state, python_gauss = random.getstate()
    states = {
        "torch": torch.get_rng_state(),
        "python": [version, list(python_state), python_gauss],
        "numpy": [name, keys.tolist(), position, has_gauss, gauss],
    }
    if torch.cuda.is_available():
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def _set_random_states(states: dict[str, Any]) -> None:
    torch.set_rng_state(states["torch"])
    version, python_state, python_gauss = states["python"]
    random.setstate((version, tuple(python_state), python_gauss))
    name, keys, position, has_gauss, gauss = states["numpy"]
    np.random.set_state((name, np.asarray(keys, dtype=np.uint32), position, has_gauss, gauss))
    if states.get("cuda") and torch.cuda.is_available() and len(states["cuda"]) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(states["cuda"])


class ExactResume(pl.Callback):
    """Make ``fit --ckpt_path`` go on as the interrupted run would have: random state, data order.

    * The random generators' states are saved in every checkpoint, as they are when it is
      written, and set again when Lightning restores the callbacks and, for a checkpoint
      written at the end of an epoch, once more when the next epoch starts: while resuming,
      Lightning creates a training iterator that it then discards (``DataLoader.__iter__``
      draws a seed), which would otherwise leave the resumed run one number ahead.
    * Each epoch the training sampler is told the epoch's number. Lightning 2.6 tells it the
      count of epochs *processed*, which a resume from a checkpoint written in
      ``on_train_epoch_end`` (the apps' end-of-epoch checkpoints) counts twice, so every later
      epoch would be shuffled as the one after it.

    A resumed run is exact when nothing random happens between the save and the next epoch's
    start, as with the apps' checkpoints written after the epoch's validation. Under DDP the
    checkpoint holds rank zero's states and every rank restores them (``seed_everything``
    seeds the ranks alike).
    """

    def __init__(self) -> None:
        self._resumed: dict[str, Any] | None = None
        self._resumed_step = -1

    def state_dict(self) -> dict[str, Any]:
        # Every rank draws its own numbers (its batches differ in size), so each rank's states are
        # kept; ``save_checkpoint`` is collective under DDP, so every rank is here.
        if not (dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1):
            return _random_states()
        ranks: list[Any] = [None] * dist.get_world_size()
        dist.all_gather_object(ranks, _random_states())
        return {"ranks": ranks}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if "ranks" in state_dict:  # a DDP run's: this rank's own, or rank zero's for a run on other ranks
            rank = dist.get_rank() if dist.is_available() and dist.is_initialized() else 0
            ranks = state_dict["ranks"]
            state_dict = ranks[rank] if rank < len(ranks) else ranks[0]
        if state_dict:
            _set_random_states(state_dict)
            self._resumed = state_dict

    def on_load_checkpoint(self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict[str, Any]) -> None:
        self._resumed_step = int(checkpoint.get("global_step", -1))

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # Lightning's own helper, with the right number; the samplers draw their order at the
        # first batch, after this hook, so it is in time.
        _set_sampler_epoch(trainer.train_dataloader, trainer.current_epoch)
        # Only the epoch that starts right at the checkpoint: after a mid-epoch checkpoint
        # Lightning reruns that epoch without this hook, and the next start is steps later.
        if self._resumed is not None and trainer.global_step == self._resumed_step:
            _set_random_states(self._resumed)
        self._resumed = None

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int) -> None:
        # A run resumed mid-epoch skips ``on_train_epoch_start``; its loader was built and its next
        # batches fetched since the states were restored, so they are set again at the first step.
        if self._resumed is not None and trainer.global_step == self._resumed_step:
            _set_random_states(self._resumed)
        self._resumed = None
