"""Where a run's checkpoints go, when they are written, and how they are written.

One run layout for every app::

    <default_root_dir>/version_N/checkpoints/last.ckpt   the end of the newest epoch, or of training
                                          /best.ckpt   the best validation score (with a monitor)
                                          /last_good.ckpt  the weights before a NaN (see guards.py)
    <default_root_dir>/version_N/metrics.csv, test_metrics.json, skipped_samples.log

:class:`RunCheckpoints` is the one callback that writes ``last.ckpt`` and ``best.ckpt``: at the
end of every epoch (after its validation), every ``every_n_train_steps`` steps if asked, when
training ends wherever it ends (``max_steps`` in the middle of an epoch too), and on SIGTERM.
:class:`AtomicCheckpointIO` makes every write all-or-nothing, and :func:`find_checkpoint`
resolves ``--ckpt_path last`` and ``best`` to the newest run's file.
"""

from __future__ import annotations

import math
import re
import signal
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
from lightning_fabric.plugins import CheckpointIO, TorchCheckpointIO
from pytorch_lightning.trainer.states import TrainerFn
from pytorch_lightning.utilities import rank_zero_info, rank_zero_warn
from pytorch_lightning.utilities.exceptions import SIGTERMException

from ..io.writes import replacing

__all__ = [
    "AtomicCheckpointIO",
    "RunCheckpoints",
    "SIGTERM_EXIT_CODE",
    "checkpoint_dir",
    "find_checkpoint",
    "run_version",
    "with_atomic_checkpoints",
]

SIGTERM_EXIT_CODE = 128 + int(signal.SIGTERM)  # what a shell reports for a process ended by SIGTERM
NAMED_CHECKPOINTS = ("last", "best")
_VERSION = re.compile(r"version_(\d+)$")


class AtomicCheckpointIO(TorchCheckpointIO):
    """``torch.save`` to a hidden temporary file in the target's folder, ``fsync``, ``os.replace``.

    Lightning's own writer goes through an fsspec transaction, which for a local path writes to
    a temporary file in ``$TMPDIR`` and moves it into place. That move is a rename, and atomic,
    only when ``$TMPDIR`` is on the checkpoint's filesystem; otherwise (a local ``/tmp`` with
    checkpoints on NFS or Lustre, a tmpfs ``/tmp``) it is a copy into the target, which a kill
    during the copy leaves truncated, with the previous checkpoint already gone. Writing beside
    the target makes the rename always same-filesystem (:func:`~shared.io.writes.replacing`).
    A failed write (a full disk) removes the temporary file, keeps the previous checkpoint, and
    raises a :class:`~shared.io.writes.WriteError` naming the file and the cause. Remote
    paths (``s3://`` and the like) still go to Lightning's writer.
    """

    def save_checkpoint(self, checkpoint: dict[str, Any], path, storage_options: Any | None = None) -> None:
        if "://" in str(path):
            return super().save_checkpoint(checkpoint, path, storage_options)
        if storage_options is not None:
            raise TypeError(f"{type(self).__name__} takes no storage_options for a local path")
        path = Path(path)
        with replacing(path, "the checkpoint") as temporary, temporary.open("wb") as file:
            torch.save(checkpoint, file)
        for stale in path.parent.glob(f".{path.name}.*.tmp"):  # left by a writer that was killed
            stale.unlink(missing_ok=True)


def with_atomic_checkpoints(plugins: Any) -> list[Any]:
    """A ``Trainer(plugins=...)`` list with :class:`AtomicCheckpointIO` added, unless the configured
    plugins (``None``, one, or a list) already name a checkpoint writer of their own."""
    plugins = [] if plugins is None else list(plugins) if isinstance(plugins, (list, tuple)) else [plugins]
    if any(isinstance(plugin, CheckpointIO) for plugin in plugins):
        return plugins
    return [*plugins, AtomicCheckpointIO()]


def checkpoint_dir(trainer: pl.Trainer) -> Path:
    """``<run>/checkpoints``, the run being the logger's ``version_N`` folder (or the root without
    a logger). Under DDP ``trainer.log_dir`` is a collective call: ask on every rank."""
    return Path(trainer.log_dir or trainer.default_root_dir) / "checkpoints"


def run_version(path: str | Path) -> int | None:
    """``N`` when ``path`` is ``.../version_N/checkpoints/<file>`` (a checkpoint of a run in the
    standard layout), else ``None``."""
    match = _VERSION.search(Path(path).resolve().parent.parent.name)
    return int(match.group(1)) if match and Path(path).parent.name == "checkpoints" else None


def find_checkpoint(root: str | Path, name: str) -> Path | None:
    """The newest run's ``checkpoints/<name>.ckpt`` under ``root`` (``name``: ``last`` or ``best``).

    Runs are ``root/version_N``; the highest ``N`` holding the file wins, so ``--ckpt_path last``
    always continues the most recent run. ``None`` when no run has one.
    """
    if name not in NAMED_CHECKPOINTS:
        raise ValueError(f"expected one of {', '.join(NAMED_CHECKPOINTS)}, got {name!r}")
    found = [(run_version(path), path) for path in Path(root).glob(f"version_*/checkpoints/{name}.ckpt") if path.is_file()]
    found = [(version, path) for version, path in found if version is not None]
    return max(found, default=(None, None))[1]


class RunCheckpoints(pl.Callback):
    """Writes ``last.ckpt`` and, with a ``monitor``, ``best.ckpt`` into the run's ``checkpoints/``.

    ``last.ckpt`` is written at the end of every training epoch, after its validation (so a run
    resumed from it goes on exactly; see :class:`~shared.training.resume.ExactResume`), every
    ``every_n_train_steps`` steps when set, when training ends at any step, and when the process
    is asked to stop with SIGTERM, after which it exits with code 143 (a job script must not take
    a stopped run for a finished one). Each step is written once. ``best.ckpt`` is written after
    a validation whose ``monitor`` value beats every earlier one.

    Args:
        monitor (str or None, optional): a logged validation metric, e.g. ``val/cer``. (Default: ``None``)
        mode (str, optional): ``min`` or ``max``: which direction is better. (Default: ``min``)
        every_n_train_steps (int or None, optional): also write ``last.ckpt`` every N steps. (Default: ``None``)
    """

    def __init__(self, monitor: str | None = None, mode: str = "min", every_n_train_steps: int | None = None):
        if mode not in ("min", "max"):
            raise ValueError(f"checkpoint.mode must be min or max, got {mode!r}")
        if every_n_train_steps is not None and every_n_train_steps < 1:
            raise ValueError(f"checkpoint.every_n_train_steps must be >= 1, got {every_n_train_steps}")
        self.monitor, self.mode, self.every_n_train_steps = monitor, mode, every_n_train_steps
        self.best_score: float | None = None
        self._last_step = -1  # the step last.ckpt holds, so no step is written twice
        self.dirpath: Path | None = None

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self.dirpath = checkpoint_dir(trainer)  # on every rank: log_dir is collective under DDP

    def _save(self, trainer: pl.Trainer, name: str) -> Path:
        path = self.dirpath / f"{name}.ckpt"
        for logger in trainer.loggers:  # the metrics logged so far are on disk before the checkpoint is
            logger.save()
        trainer.save_checkpoint(path, weights_only=False)  # full state, to resume from; collective under DDP
        return path

    def save_last(self, trainer: pl.Trainer) -> Path:
        """Write ``last.ckpt`` now, unless it already holds this step."""
        path = self.dirpath / "last.ckpt"
        if self._last_step != trainer.global_step or not path.is_file():
            self._save(trainer, "last")
            self._last_step = trainer.global_step
        return path

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs, batch, batch_idx: int) -> None:
        if self.every_n_train_steps and trainer.global_step % self.every_n_train_steps == 0:
            self.save_last(trainer)

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.save_last(trainer)

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.save_last(trainer)

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.monitor is None or trainer.sanity_checking or trainer.state.fn != TrainerFn.FITTING:
            return
        value = trainer.callback_metrics.get(self.monitor)
        if value is None:  # a validation with no readable item logs no metric: say so, go on training
            rank_zero_warn(
                f"checkpoint.monitor is {self.monitor!r}, but this validation logged no such value "
                f"(logged: {', '.join(sorted(trainer.callback_metrics)) or 'nothing'}); best.ckpt is not updated"
            )
            return
        score = float(value)
        if math.isnan(score):
            return
        if self.best_score is None or (score < self.best_score if self.mode == "min" else score > self.best_score):
            self.best_score = score
            self._save(trainer, "best")

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        # Lightning turns SIGTERM into a SIGTERMException (a SystemExit) raised between two training
        # batches, so the state saved here is a whole step; left alone, it would exit with code 0.
        if not isinstance(exception, SIGTERMException) or trainer.state.fn != TrainerFn.FITTING:
            return
        path = self.save_last(trainer)
        rank_zero_info(f"SIGTERM: saved {path} at step {trainer.global_step}; resume with --ckpt_path last")
        exception.code = SIGTERM_EXIT_CODE

    def state_dict(self) -> dict[str, Any]:
        return {"monitor": self.monitor, "best_score": self.best_score}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if state_dict.get("monitor") == self.monitor:  # a new monitor starts its own record
            self.best_score = state_dict.get("best_score")
