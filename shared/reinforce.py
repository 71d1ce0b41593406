"""Training stochastic hard attention with REINFORCE (Xu et al. 2015, section 4.1).

The model samples a location ``s_t`` at every step. The gradient of the variational bound
(eq. 12) is approximated with N sampled location sequences ``s~``:

    dL/dW ~= 1/N sum_n [ d log p(y | s~) / dW
                          + lambda_r (log p(y | s~) - b) d log p(s~ | a) / dW
                          + lambda_e d H[s~] / dW ]

:func:`reinforce_loss` returns a surrogate whose gradient is minus that expression, so
minimising it maximises the bound. Defaults follow the original code.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

__all__ = ["ReinforceConfig", "MovingAverageBaseline", "reinforce_loss", "attention_entropy", "use_expected_context"]


@dataclass
class ReinforceConfig:
    baseline_decay: float = 0.9  # b <- decay * b + (1 - decay) * mean log p(y|s)
    entropy_weight: float = 0.002  # lambda_e: bonus for spread-out attention, against early collapse
    reinforce_weight: float = 0.1  # lambda_r: scale of the score-function term
    semi_sampling: float = 0.5  # probability, per minibatch, of using the expected context


class MovingAverageBaseline(nn.Module):
    """Variance-reducing baseline ``b``, kept as a buffer so it is saved in checkpoints.

    Args:
        decay (float, optional): weight of the old value. (Default: ``0.9``)
    """

    def __init__(self, decay: float = 0.9):
        super().__init__()
        self.decay = decay
        self.register_buffer("value", torch.zeros(()))
        self.register_buffer("initialised", torch.zeros((), dtype=torch.bool))

    @torch.no_grad()
    def update(self, rewards: torch.Tensor) -> torch.Tensor:
        """Fold in the batch mean of ``rewards`` `(B,)`; returns the baseline used *before* the update."""
        used = self.value.clone() if bool(self.initialised) else rewards.mean().detach()
        mean = rewards.detach().float().mean()
        self.value.copy_(torch.where(self.initialised, self.decay * self.value + (1 - self.decay) * mean, mean))
        self.initialised.fill_(True)
        return used


def attention_entropy(weights: torch.Tensor) -> torch.Tensor:
    """Entropy ``H = -sum_i alpha_i log alpha_i`` of each row of `(..., L)` weights -> `(...)`."""
    return -(weights * weights.clamp_min(1e-12).log()).sum(-1)


def reinforce_loss(
    sequence_log_likelihood: torch.Tensor,
    sample_log_probs: torch.Tensor,
    entropy: torch.Tensor,
    step_mask: torch.Tensor,
    baseline: torch.Tensor | float,
    config: ReinforceConfig = ReinforceConfig(),
) -> torch.Tensor:
    """Surrogate loss for hard attention.

    Args:
        sequence_log_likelihood (torch.Tensor): ``log p(y | s~)`` per caption `(B,)` (the reward).
        sample_log_probs (torch.Tensor): ``log alpha_{t, s_t}`` of each sample `(B, T)`.
        entropy (torch.Tensor): attention entropy at each step `(B, T)`.
        step_mask (torch.Tensor): bool `(B, T)`, ``True`` at real (non-padding) steps.
        baseline (torch.Tensor or float): the moving-average baseline ``b``.
        config (ReinforceConfig): the weights lambda_r and lambda_e.

    Returns:
        torch.Tensor: scalar loss; its gradient is minus the estimator above, batch-averaged.
    """
    step_mask = step_mask.to(sample_log_probs.dtype)
    advantage = (sequence_log_likelihood - baseline).detach()  # the reward is not differentiated here
    log_p_samples = (sample_log_probs * step_mask).sum(1)  # log p(s~ | a), (B,)
    total_entropy = (entropy * step_mask).sum(1)  # (B,)
    objective = (
        sequence_log_likelihood + config.reinforce_weight * advantage * log_p_samples + config.entropy_weight * total_entropy
    )
    return -objective.mean()


def use_expected_context(config: ReinforceConfig, generator: torch.Generator | None = None) -> bool:
    """Draw, once per minibatch, whether to use the expected context instead of a sample."""
    return bool(torch.rand((), generator=generator) < config.semi_sampling)
