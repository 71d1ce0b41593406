"""Training that survives a few bad files, and stops loudly on many.

A dataset's ``__getitem__`` returns a :class:`BadSample` instead of raising when one file
cannot be read. The collate function calls :func:`drop_bad_samples`, which removes them and
hands their paths on with the batch (they may be in a worker process, so nothing is counted
there). The :class:`SkipBadSamples` callback, in the training process, counts them, appends
each path and reason to ``skipped_samples.log`` in the run directory, and fails the run with a
clear message once the skipped fraction passes a limit (1% by default).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, NamedTuple, Sequence

import pytorch_lightning as pl
import torch

__all__ = ["BadSample", "drop_bad_samples", "SkipBadSamples", "TooManyBadSamples", "NonFiniteLoss", "StopOnNonFinite"]


class BadSample(NamedTuple):
    """Stands in for an item that could not be loaded (a tuple, so batch transfer passes it through)."""

    path: str
    reason: str


class TooManyBadSamples(RuntimeError):
    """More of the training data is unreadable than the configured limit allows."""


def drop_bad_samples(items: Sequence[Any]) -> tuple[list[Any], list[BadSample]]:
    """Split a list of dataset items into the good ones and the :class:`BadSample` markers."""
    good = [item for item in items if not isinstance(item, BadSample)]
    bad = [item for item in items if isinstance(item, BadSample)]
    return good, bad


class SkipBadSamples(pl.Callback):
    """Count skipped training samples, log their paths, fail past ``max_fraction``.

    Batches must carry the skipped markers as ``batch["skipped"]`` (a list of
    :class:`BadSample`) and their size as ``batch["batch_size"]`` (the good items).

    Args:
        max_fraction (float, optional): largest tolerated fraction of unreadable samples.
            (Default: ``0.01``)
        min_samples (int, optional): samples seen before the fraction is judged, so one bad
            file in the first batch does not end the run. (Default: ``200``)
        log_name (str, optional): file in the run directory. (Default: ``skipped_samples.log``)
    """

    def __init__(self, max_fraction: float = 0.01, min_samples: int = 200, log_name: str = "skipped_samples.log"):
        if not 0 <= max_fraction <= 1:
            raise ValueError(f"max_fraction must be in [0, 1], got {max_fraction}")
        self.max_fraction, self.min_samples, self.log_name = max_fraction, min_samples, log_name
        self.seen = self.skipped = 0

    def _log_path(self, trainer: pl.Trainer) -> Path:
        return Path(trainer.log_dir or trainer.default_root_dir) / self.log_name

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int) -> None:
        if not isinstance(batch, dict):
            return
        bad: list[BadSample] = batch.get("skipped") or []
        self.seen += int(batch.get("batch_size", 0)) + len(bad)
        if not bad:
            return
        self.skipped += len(bad)
        path = self._log_path(trainer)
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8") as log:
            for sample in bad:
                log.write(f"{sample.path}\t{sample.reason}\n")
        fraction = self.skipped / max(1, self.seen)
        if self.seen >= self.min_samples and fraction > self.max_fraction:
            raise TooManyBadSamples(
                f"{self.skipped} of {self.seen} training samples ({fraction:.1%}) could not be read, more than the "
                f"limit of {self.max_fraction:.1%}; their paths are in {path}"
            )

    def state_dict(self) -> dict[str, int]:
        return {"seen": self.seen, "skipped": self.skipped}

    def load_state_dict(self, state_dict: dict[str, int]) -> None:
        self.seen, self.skipped = int(state_dict.get("seen", 0)), int(state_dict.get("skipped", 0))


class NonFiniteLoss(RuntimeError):
    """The loss or a gradient became NaN or infinite."""


class StopOnNonFinite(pl.Callback):
    """Stop at the first NaN/inf loss or gradient, after saving the last good weights.

    (With fp16 loss scaling, inf gradients are expected and handled by the scaler: use this
    callback with fp32 or bf16.) The check runs before the optimizer step, so the weights saved are those that produced
    the last finite update. The checkpoint goes to ``<run dir>/checkpoints/last_good.ckpt``
    and the error names the step and batch.
    """

    def _stop(self, trainer: pl.Trainer, what: str) -> None:
        path = Path(trainer.default_root_dir) / "checkpoints" / "last_good.ckpt"
        trainer.save_checkpoint(path)
        raise NonFiniteLoss(
            f"{what} at global step {trainer.global_step} (epoch {trainer.current_epoch}, batch "
            f"{trainer.fit_loop.epoch_loop.batch_progress.current.ready - 1}); the last good weights are in {path}"
        )

    def on_before_backward(self, trainer: pl.Trainer, pl_module: pl.LightningModule, loss) -> None:
        if not bool(loss.detach().isfinite().all()):
            self._stop(trainer, f"non-finite loss ({float(loss.detach()):.4g})")

    def on_before_optimizer_step(self, trainer: pl.Trainer, pl_module: pl.LightningModule, optimizer) -> None:
        grads = [(name, p.grad) for name, p in pl_module.named_parameters() if p.grad is not None]
        if not grads:
            return
        # One device sync per step: check everything at once, find the culprit only on failure.
        if bool(torch.stack([g.isfinite().all() for _, g in grads]).all()):
            return
        name = next(name for name, g in grads if not bool(g.isfinite().all()))
        self._stop(trainer, f"non-finite gradient in {name}")
