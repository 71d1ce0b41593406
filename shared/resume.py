"""Runs that survive being killed: whole checkpoints only, and a resume that continues exactly.

Both apps' ``fit`` use the three pieces here:

* :class:`AtomicCheckpointIO` writes every checkpoint to a temporary file beside its target,
  syncs it to disk and renames it over the target, so a kill at any moment leaves either the
  old checkpoint or the new one, never a torn file.
* :class:`ExactResume` saves the random generators (torch, CUDA, Python, NumPy) in each
  checkpoint and restores them on ``fit --ckpt_path``, and numbers the sampler's epochs by the
  epoch: the shuffling, the random reference per image, dropout and SpecAugment go on as if
  the run had never stopped. A run resumed from a checkpoint written at the end of an epoch
  (after its validation) therefore ends with the same weights as one never interrupted. One
  resumed from the middle of an epoch does not: Lightning starts that epoch's loader again
  from its first batch (the apps' loaders hold no position), so some batches are seen twice.
* :class:`SaveOnSigterm` writes ``last.ckpt`` when the run is asked to stop (SIGTERM, as sent
  by schedulers before preempting a job) and makes the process exit with code 143, so a job
  script does not take a stopped run for a finished one.
"""

from __future__ import annotations

import os
import random
import signal
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pytorch_lightning as pl
import torch
from lightning_fabric.plugins import CheckpointIO, TorchCheckpointIO
from lightning_fabric.utilities.data import _set_sampler_epoch
from pytorch_lightning.trainer.states import TrainerFn
from pytorch_lightning.utilities import rank_zero_info
from pytorch_lightning.utilities.exceptions import SIGTERMException

__all__ = ["AtomicCheckpointIO", "ExactResume", "SaveOnSigterm", "SIGTERM_EXIT_CODE", "with_atomic_checkpoints"]

SIGTERM_EXIT_CODE = 128 + int(signal.SIGTERM)  # what a shell reports for a process ended by SIGTERM


class AtomicCheckpointIO(TorchCheckpointIO):
    """``torch.save`` to a hidden temporary file in the target's folder, ``fsync``, ``os.replace``.

    Lightning's own writer (``lightning_fabric.utilities.cloud_io._atomic_save``, 2.6) goes
    through an fsspec transaction; for a local path fsspec's ``LocalFileOpener`` writes to
    ``tempfile.mkstemp()`` (in ``$TMPDIR``) and commits with ``shutil.move``. That is a rename,
    and atomic, only when ``$TMPDIR`` is on the checkpoint's filesystem; otherwise (a local
    ``/tmp`` with checkpoints on NFS or Lustre, a tmpfs ``/tmp``) it is a copy into the target,
    which a kill during the copy leaves truncated, with the previous checkpoint already gone.
    Writing beside the target makes the rename always same-filesystem. Remote paths
    (``s3://`` and the like) still go to Lightning's writer.
    """

    def save_checkpoint(self, checkpoint: dict[str, Any], path, storage_options: Any | None = None) -> None:
        if "://" in str(path):
            return super().save_checkpoint(checkpoint, path, storage_options)
        if storage_options is not None:
            raise TypeError(f"{type(self).__name__} takes no storage_options for a local path")
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        prefix = f".{path.name}."
        descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=prefix, suffix=".tmp")
        try:
            with os.fdopen(descriptor, "wb") as file:
                torch.save(checkpoint, file)
                file.flush()
                os.fsync(file.fileno())  # the data is on disk before the name points at it
            os.replace(temporary, path)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise
        for stale in path.parent.glob(f"{prefix}*.tmp"):  # left by a writer that was killed
            stale.unlink(missing_ok=True)


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
        return _random_states()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
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


class SaveOnSigterm(pl.Callback):
    """On SIGTERM during ``fit``, save ``last.ckpt`` in the checkpoint folder and exit with 143.

    Lightning turns SIGTERM into a ``SIGTERMException`` (a ``SystemExit``) raised between two
    training batches, so the state saved here is a complete step; left alone, that exception
    ends the process with code 0, as if training had finished. Under DDP Lightning forwards the
    signal to every rank and rank zero's flag is broadcast before each step; the save waits for
    all ranks, and if a scheduler's SIGKILL comes first the previous ``last.ckpt`` stays whole.
    """

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        if not isinstance(exception, SIGTERMException) or trainer.state.fn != TrainerFn.FITTING:
            return
        checkpoint = trainer.checkpoint_callback
        folder = Path(checkpoint.dirpath) if checkpoint is not None and checkpoint.dirpath else Path(trainer.default_root_dir) / "checkpoints"
        trainer.save_checkpoint(folder / "last.ckpt")  # collective under DDP: rank zero writes, all wait
        rank_zero_info(f"SIGTERM: saved {folder / 'last.ckpt'} at step {trainer.global_step}; resume with --ckpt_path last")
        exception.code = SIGTERM_EXIT_CODE


def with_atomic_checkpoints(plugins: Any) -> list[Any]:
    """A ``Trainer(plugins=...)`` list with :class:`AtomicCheckpointIO` added, unless the configured
    plugins (``None``, one, or a list) already name a checkpoint writer of their own."""
    plugins = [] if plugins is None else list(plugins) if isinstance(plugins, (list, tuple)) else [plugins]
    if any(isinstance(plugin, CheckpointIO) for plugin in plugins):
        return plugins
    return [*plugins, AtomicCheckpointIO()]
