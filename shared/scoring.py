"""Score functions: how well each key matches a query (step 2 of attention).

Every score module has the same two-part interface, so a decoder can swap one for another:

* ``precompute(keys)`` projects the keys once per sequence (the projection does not depend on
  the decoding step, Xu et al. 2015 section 3.1.2 / Chorowski et al. 2015 eq. 8);
* ``forward(query, projected_keys, prev_weights=None)`` scores one or more queries against
  them, costing O(L * d) per query instead of a fresh O(L * d_k * d) projection.

``score(query, keys)`` is the naive path that projects the keys on every call; the two give
identical results, and the decoders only ever use the first.

Queries may be `(B, D_q)` (one decoding step, scores `(B, L)`) or `(B, T, D_q)`
(scores `(B, T, L)`).
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

from . import kernels
from .recurrence import step_linear

__all__ = [
    "Score",
    "AdditiveScore",
    "DotScore",
    "GeneralScore",
    "ScaledDotScore",
    "LocationAwareScore",
    "NoScore",
    "build_score",
]


class Score(nn.Module):
    """Base class: ``precompute`` keys once, then ``forward`` per query."""

    def precompute(self, keys: torch.Tensor) -> torch.Tensor:
        """Args: keys (torch.Tensor): `(B, L, D_k)`. Returns: projected keys `(B, L, *)`."""
        return keys

    def forward(
        self, query: torch.Tensor, projected_keys: torch.Tensor, prev_weights: torch.Tensor | None = None
    ) -> torch.Tensor:
        raise NotImplementedError

    def score(self, query: torch.Tensor, keys: torch.Tensor, prev_weights: torch.Tensor | None = None) -> torch.Tensor:
        """Naive path: project the keys, then score. Same result as precompute + forward."""
        return self(query, self.precompute(keys), prev_weights)


def _as_steps(query: torch.Tensor) -> tuple[torch.Tensor, bool]:
    """`(B, D)` -> `(B, 1, D)`, remembering to squeeze the step dimension back out."""
    if query.dim() == 2:
        return query.unsqueeze(1), True
    if query.dim() == 3:
        return query, False
    raise ValueError(f"query must have shape (B, D) or (B, T, D), got {tuple(query.shape)}")


class AdditiveScore(Score):
    """Bahdanau (MLP) score ``e_i = v^T tanh(W_q q + W_k k_i + b)``.

    Args:
        query_dim (int): size of the query ``D_q``.
        key_dim (int): size of the keys ``D_k``.
        attention_dim (int): size of the hidden layer ``A``.
    """

    def __init__(self, query_dim: int, key_dim: int, attention_dim: int):
        super().__init__()
        self.query_proj = nn.Linear(query_dim, attention_dim, bias=False)
        self.key_proj = nn.Linear(key_dim, attention_dim)  # its bias is the b of the formula
        self.v = nn.Linear(attention_dim, 1, bias=False)

    def precompute(self, keys: torch.Tensor) -> torch.Tensor:
        return self.key_proj(keys)  # (B, L, A)

    def forward(self, query, projected_keys, prev_weights=None):
        query, squeeze = _as_steps(query)
        scores = self._mlp_scores(step_linear(query, self.query_proj.weight), projected_keys)  # (B, T, L)
        return scores.squeeze(1) if squeeze else scores

    def _mlp_scores(
        self, projected_query: torch.Tensor, projected_keys: torch.Tensor, location: torch.Tensor | None = None
    ) -> torch.Tensor:
        """``e_ti = v^T tanh(q_t + k_i [+ U f_ti])`` for all queries and keys: `(B, T, L)`.

        Bahdanau et al. 2015 eq. (A.1.2), with Chorowski et al. 2015's location term (eq. 9).
        The plain form below is the reference; where the fused kernel is on
        (:func:`shared.kernels.fused_enabled`), :func:`shared.kernels.fused_mlp_scores` computes
        the same function without writing the `(B, T, L, A)` hidden layer whole.

        Args:
            projected_query (torch.Tensor): ``W_q q`` `(B, T, A)`.
            projected_keys (torch.Tensor): ``W_k k + b`` `(B, L, A)`.
            location (torch.Tensor or None): location features ``f`` `(B, T, L, F)`, projected by
                ``self.location_proj`` inside the tanh.
        """
        project = getattr(self, "location_proj", None)
        if kernels.fused_enabled(projected_query.device):
            return kernels.fused_mlp_scores(projected_query, projected_keys, self.v.weight, location, project)
        hidden = projected_query.unsqueeze(2) + projected_keys.unsqueeze(1)  # q_t + k_i, (B, T, L, A)
        if location is not None:
            hidden = hidden + project(location)  # + U f_ti
        return self.v(torch.tanh(hidden)).squeeze(-1)  # v^T tanh(.), (B, T, L)


class DotScore(Score):
    """Luong dot score ``e_i = q . k_i`` (requires ``D_q == D_k``)."""

    def forward(self, query, projected_keys, prev_weights=None):
        query, squeeze = _as_steps(query)
        scores = query @ projected_keys.transpose(1, 2)  # (B, T, L)
        return scores.squeeze(1) if squeeze else scores


class ScaledDotScore(DotScore):
    """Scaled dot product ``e_i = q . k_i / sqrt(D)`` (Vaswani et al. 2017)."""

    def forward(self, query, projected_keys, prev_weights=None):
        return super().forward(query, projected_keys) / math.sqrt(query.size(-1))


class GeneralScore(DotScore):
    """Luong general (bilinear) score ``e_i = q^T W k_i``.

    Args:
        query_dim (int): size of the query ``D_q``.
        key_dim (int): size of the keys ``D_k``.
    """

    def __init__(self, query_dim: int, key_dim: int):
        super().__init__()
        self.key_proj = nn.Linear(key_dim, query_dim, bias=False)

    def precompute(self, keys):
        return self.key_proj(keys)  # (B, L, D_q): W k_i, so the score is a dot product


class LocationAwareScore(AdditiveScore):
    """Chorowski et al. 2015 location-aware score.

    ``e_i = v^T tanh(W_q q + W_k k_i + U f_i + b)`` with ``f = F * alpha_prev``, a 1-D convolution
    over the previous step's weights, so the model knows where it looked last (eq. 8-9).
    With queries `(B, T, D_q)`, ``prev_weights`` is `(B, T, L)`: one previous alignment per
    query (e.g. per beam); the queries are not consecutive steps of one sequence.

    Args:
        query_dim (int): size of the query ``D_q``.
        key_dim (int): size of the keys ``D_k``.
        attention_dim (int): size of the hidden layer ``A``.
        num_filters (int, optional): channels of the convolution. (Default: ``10``)
        kernel_size (int, optional): odd width of the convolution. (Default: ``31``)
    """

    def __init__(self, query_dim: int, key_dim: int, attention_dim: int, num_filters: int = 10, kernel_size: int = 31):
        super().__init__(query_dim, key_dim, attention_dim)
        if kernel_size % 2 != 1:
            raise ValueError(f"kernel_size must be odd so positions stay aligned, got {kernel_size}")
        self.location_conv = nn.Conv1d(1, num_filters, kernel_size, padding=kernel_size // 2, bias=False)
        self.location_proj = nn.Linear(num_filters, attention_dim, bias=False)

    def forward(self, query, projected_keys, prev_weights=None):
        query, squeeze = _as_steps(query)  # (B, T, D_q)
        batch, steps = query.shape[:2]
        if prev_weights is None:
            prev_weights = projected_keys.new_zeros(batch, steps, projected_keys.size(1))
        # F * alpha_prev as one product over windows (a strided view, no copy): the convolution's
        # own CPU kernel is slow for one input channel and a wide kernel, above all backwards.
        kernel, filters = self.location_conv.kernel_size[0], self.location_conv.out_channels
        previous = prev_weights.reshape(batch * steps, -1)  # each query has its own previous alignment
        windows = F.pad(previous, (kernel // 2, kernel // 2)).unfold(-1, kernel, 1)  # (B*T, L, kernel)
        location = (windows @ self.location_conv.weight.view(filters, kernel).t()).view(batch, steps, -1, filters)  # (B, T, L, F)
        # e = v^T tanh(W_q q + (W_k k + b) + U f), with U f (B, T, L, A) made block by block.
        scores = self._mlp_scores(step_linear(query, self.query_proj.weight), projected_keys, location)
        return scores.squeeze(1) if squeeze else scores


class NoScore(Score):
    """No attention: every key scores 0, whatever the query.

    After :func:`~shared.masks.masked_softmax` the weights are uniform over the real positions,
    so the read is their mean, the same fixed vector at every step: the context of a decoder
    without attention (Show and Tell's image vector; an encoder-decoder's one summary), kept in
    the same four steps so that it is compared with attention on equal terms.
    """

    def forward(self, query, projected_keys, prev_weights=None):
        query, squeeze = _as_steps(query)
        scores = projected_keys.new_zeros(query.size(0), query.size(1), projected_keys.size(1))  # (B, T, L)
        return scores.squeeze(1) if squeeze else scores


def build_score(kind: str, query_dim: int, key_dim: int, attention_dim: int, **kwargs) -> Score:
    """Score module by name: ``additive``, ``location``, ``dot``, ``scaled_dot``, ``general`` or
    ``none`` (:class:`NoScore`)."""
    if kind == "additive":
        return AdditiveScore(query_dim, key_dim, attention_dim)
    if kind == "location":
        return LocationAwareScore(query_dim, key_dim, attention_dim, **kwargs)
    if kind in ("dot", "scaled_dot"):
        if query_dim != key_dim:
            raise ValueError(f"{kind} attention needs query_dim == key_dim, got {query_dim} and {key_dim}")
        return DotScore() if kind == "dot" else ScaledDotScore()
    if kind == "general":
        return GeneralScore(query_dim, key_dim)
    if kind == "none":
        return NoScore()
    raise ValueError(f"unknown attention score {kind!r}; expected additive, location, dot, scaled_dot, general or none")
