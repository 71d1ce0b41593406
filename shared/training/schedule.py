"""The learning-rate schedule both apps use: linear warm-up, then constant or cosine decay."""

from __future__ import annotations

import math

import torch

__all__ = ["SCHEDULES", "warmup_schedule"]

SCHEDULES = ("constant", "cosine")


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
