"""Guards of a training run against bad data and bad numbers.

* :class:`SkipBadSamples` counts the unreadable items the datasets skipped (see
  :mod:`shared.io.bad_samples`), appends each path and reason to ``skipped_samples.log``
  in the run folder, and fails the run with a clear message once the skipped fraction passes a
  limit (1% by default): a few bad files are tolerated, many are a wrong data folder.
* :class:`StopOnNonFinite` stops at the first NaN or infinite loss or gradient, after saving
  the last good weights.
* :func:`zero_loss` is the loss of a training batch whose every item was unreadable: zero, but
  with a backward pass, so that every process of a distributed run still takes the step.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
from pytorch_lightning.utilities import rank_zero_warn

from ..io.bad_samples import BadSample
from .checkpoints import checkpoint_dir

__all__ = [
    "SkipBadSamples",
    "TooManyBadSamples",
    "NonFiniteLoss",
    "StopOnNonFinite",
    "zero_loss",
]


class TooManyBadSamples(RuntimeError):
    """More of the training data is unreadable than the configured limit allows."""


def _skipped_and_size(batch: Any) -> tuple[list[BadSample], int]:
    """``(skipped markers, good items)`` of a dict batch or an object with those attributes."""
    if isinstance(batch, dict):
        return list(batch.get("skipped") or []), int(batch.get("batch_size", 0))
    return list(getattr(batch, "skipped", None) or []), int(getattr(batch, "batch_size", 0))


class SkipBadSamples(pl.Callback):
    """Count skipped training samples, log their paths, fail past ``max_fraction``.

    Batches carry the skipped markers as ``skipped`` (a list of :class:`BadSample`) and the
    number of good items as ``batch_size``: dict keys or attributes. Unreadable validation and
    test items are logged too (with the stage in front), but only training counts to the limit.

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

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        # On every rank and once: under DDP trainer.log_dir is a collective call, so it must not
        # be asked only by the rank that happens to meet a bad file.
        self._path = Path(trainer.log_dir or trainer.default_root_dir) / self.log_name

    def _write(self, trainer: pl.Trainer, bad: list[BadSample], stage: str) -> Path:
        path = getattr(self, "_path", None) or Path(trainer.default_root_dir) / self.log_name
        path.parent.mkdir(parents=True, exist_ok=True)
        prefix = "" if stage == "train" else f"[{stage}] "
        with path.open("a", encoding="utf-8") as log:
            for sample in bad:
                log.write(f"{prefix}{sample.path}\t{sample.reason}\n")
        return path

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int) -> None:
        bad, size = _skipped_and_size(batch)
        self.seen += size + len(bad)
        if not bad:
            return
        self.skipped += len(bad)
        path = self._write(trainer, bad, "train")
        fraction = self.skipped / max(1, self.seen)
        if self.seen >= self.min_samples and fraction > self.max_fraction:
            raise TooManyBadSamples(
                f"{self.skipped} of {self.seen} training samples ({fraction:.1%}) could not be read, more than the "
                f"limit of {self.max_fraction:.1%}; their paths are in {path}"
            )

    def _evaluation_batch(self, trainer: pl.Trainer, batch: Any, stage: str) -> None:
        bad, _ = _skipped_and_size(batch)
        if bad:
            path = self._write(trainer, bad, stage)
            rank_zero_warn(f"{len(bad)} {stage} sample(s) could not be read and were left out of the metrics; see {path}")

    def on_validation_batch_start(self, trainer, pl_module, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        self._evaluation_batch(trainer, batch, "val")

    def on_test_batch_start(self, trainer, pl_module, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        self._evaluation_batch(trainer, batch, "test")

    def state_dict(self) -> dict[str, int]:
        return {"seen": self.seen, "skipped": self.skipped}

    def load_state_dict(self, state_dict: dict[str, int]) -> None:
        self.seen, self.skipped = int(state_dict.get("seen", 0)), int(state_dict.get("skipped", 0))


class NonFiniteLoss(RuntimeError):
    """The loss or a gradient became NaN or infinite."""


class StopOnNonFinite(pl.Callback):
    """Stop at the first NaN/inf loss or gradient, after saving the last good weights.

    (With fp16 loss scaling, inf gradients are expected and handled by the scaler: use this
    callback with fp32 or bf16.) The check runs before the optimizer step, so the weights saved
    are those that produced the last finite update. The checkpoint goes to
    the run's ``checkpoints/last_good.ckpt`` and the error names the step and batch.
    Under DDP the ranks agree on the decision first (one all-reduce of a flag per step), so a
    NaN on one rank stops every rank at the same step instead of leaving the others waiting.
    """

    def __init__(self) -> None:
        self._bad_loss: float | None = None

    def on_before_backward(self, trainer: pl.Trainer, pl_module: pl.LightningModule, loss) -> None:
        finite = bool(loss.detach().isfinite().all())
        self._bad_loss = None if finite else float(loss.detach())

    def on_before_optimizer_step(self, trainer: pl.Trainer, pl_module: pl.LightningModule, optimizer) -> None:
        grads = [(name, p.grad) for name, p in pl_module.named_parameters() if p.grad is not None]
        # One device sync per step: check everything at once, find the culprit only on failure.
        # A NaN or inf anywhere makes the total norm non-finite, and the norm's fused kernels are
        # far faster than an isfinite pass per tensor. Finite gradients whose squares overflow
        # also give an inf norm, so a non-finite norm is checked again element by element.
        grads_finite = not grads or bool(torch.nn.utils.get_total_norm([g for _, g in grads]).isfinite())
        if not grads_finite:
            grads_finite = bool(torch.stack([g.isfinite().all() for _, g in grads]).all())
        local_ok = grads_finite and self._bad_loss is None
        if trainer.strategy.reduce_boolean_decision(local_ok, all=True):
            return
        if self._bad_loss is not None:
            what = f"non-finite loss ({self._bad_loss:.4g})"
        elif not grads_finite:
            what = f"non-finite gradient in {next(name for name, g in grads if not bool(g.isfinite().all()))}"
        else:
            what = "non-finite loss or gradient on another process"
        path = checkpoint_dir(trainer) / "last_good.ckpt"
        trainer.save_checkpoint(path, weights_only=False)  # collective under DDP: every rank is here
        raise NonFiniteLoss(
            f"{what} at global step {trainer.global_step} (epoch {trainer.current_epoch}, batch "
            f"{trainer.fit_loop.epoch_loop.batch_progress.current.ready - 1}); the last good weights are in {path}"
        )


def zero_loss(module: torch.nn.Module) -> torch.Tensor:
    """A loss of exactly 0 that reaches every trainable parameter.

    For a training batch whose items were all unreadable: under DDP every rank must still run
    a backward pass (the gradient all-reduce waits for all of them), so the step cannot simply
    be skipped on one rank.
    """
    return sum(p.sum() for p in module.parameters() if p.requires_grad) * 0.0
