"""The optimiser settings and the learning-rate schedule both apps use: linear warm-up, then
constant or cosine decay."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

__all__ = ["SCHEDULES", "OptimizerConfig", "max_time", "warmup_schedule", "with_schedule"]

SCHEDULES = ("constant", "cosine")


@dataclass(frozen=True)
class OptimizerConfig:
    """Adam's learning rate and weight decay, and the schedule of the learning rate."""

    lr: float = 1e-3  # peak learning rate
    weight_decay: float = 0.0
    warmup_steps: int = 0  # linear warm-up from 0 to lr
    schedule: str = "constant"  # "constant", or "cosine": down to final_lr_fraction * lr at the last step
    final_lr_fraction: float = 0.05

    def __post_init__(self):
        if self.schedule not in SCHEDULES:
            raise ValueError(f"unknown learning-rate schedule {self.schedule!r}; expected one of {', '.join(SCHEDULES)}")
        if self.lr <= 0 or self.warmup_steps < 0 or not 0.0 <= self.final_lr_fraction <= 1.0:
            raise ValueError(f"need lr > 0, warmup_steps >= 0 and final_lr_fraction in [0, 1], got {self}")


def warmup_schedule(
    optimizer: torch.optim.Optimizer,
    warmup_steps: int,
    total_steps: int,
    schedule: str = "cosine",
    final_fraction: float = 0.05,
) -> torch.optim.lr_scheduler.LambdaLR:
    """Multiply each group's learning rate by a factor that rises linearly from ``1 / warmup_steps``
    to 1 over ``warmup_steps`` steps, then stays at 1 (``constant``) or follows a half cosine down
    to ``final_fraction`` at ``total_steps`` (``cosine``). Step it once per optimizer step.

    Args:
        optimizer (torch.optim.Optimizer): whose groups' learning rates are the peaks.
        warmup_steps (int): length of the warm-up; 0 starts at the peak.
        total_steps (int): the last step of training (the cosine's end).
        schedule (str, optional): ``constant`` or ``cosine``. (Default: ``cosine``)
        final_fraction (float, optional): the cosine's end, as a fraction of the peak. (Default: ``0.05``)
    """
    if schedule not in SCHEDULES:
        raise ValueError(f"unknown learning-rate schedule {schedule!r}; expected one of {', '.join(SCHEDULES)}")
    if warmup_steps < 0 or not 0.0 <= final_fraction <= 1.0:
        raise ValueError(f"need warmup_steps >= 0 and final_fraction in [0, 1], got {warmup_steps} and {final_fraction}")
    total_steps = max(1, total_steps)

    def factor(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / warmup_steps
        if schedule == "constant":
            return 1.0
        progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
        return final_fraction + (1 - final_fraction) * 0.5 * (1 + math.cos(math.pi * progress))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def with_schedule(optimizer: torch.optim.Optimizer, config: OptimizerConfig, total_steps: int) -> dict:
    """What a LightningModule's ``configure_optimizers`` returns: ``optimizer`` with the schedule
    of ``config``, stepped once per optimizer step, for a run of ``total_steps`` steps."""
    scheduler = warmup_schedule(optimizer, config.warmup_steps, total_steps, config.schedule, config.final_lr_fraction)
    return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}


def max_time(seconds: float) -> str:
    """``seconds`` as Lightning's ``--trainer.max_time`` reads it, ``DD:HH:MM:SS`` (whole seconds, at least one)."""
    whole = max(1, int(seconds))
    return f"{whole // 86400:02d}:{whole % 86400 // 3600:02d}:{whole % 3600 // 60:02d}:{whole % 60:02d}"
