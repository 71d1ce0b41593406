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


# Elements of the (B, T, L, A) hidden layer of an MLP score built at once: about 4 MB in fp32,
# so each block stays in cache between its add, its non-linearity and its product with v.
_HIDDEN_BLOCK = 1 << 20


class _SigmoidLayerScore(torch.autograd.Function):
    """``2 v^T sigmoid(2 (q_t + k_i [+ U f_ti]))`` for one block of queries, `(b, T, L)`, with a
    backward of its own.

    Autograd's backward of the same operations takes five passes over the `(b, T, L, A)` hidden
    layer besides the keys' gradient: the outer product of the scores' gradient with ``v`` (a
    matrix product with an inner size of 1, far below the memory's speed), the sigmoid's
    derivative, the doubling for the keys, and the reductions. Here the pre-activation gradient
    ``4 g v * s (1 - s)`` is written once, by a broadcast product and the sigmoid's derivative in
    place, and handed to every input, reduced over the axes it was broadcast along.
    """

    @staticmethod
    def forward(ctx, query, keys, located, v):
        # query (b or 1, T, A), keys (b or 1, L, A), located (b, T, L, A) or None, v (1, A).
        # The 2x of tanh x = 2 sigmoid(2x) - 1 rides on the adds (alpha=2, exact in floating point).
        hidden = torch.add(2 * query.unsqueeze(2), keys.unsqueeze(1), alpha=2)  # 2 (q + k), (b, T, L, A)
        if located is not None:
            hidden.add_(located, alpha=2)  # + 2 U f
        hidden.sigmoid_()
        ctx.save_for_backward(hidden, v)
        ctx.shapes = query.shape, keys.shape
        ctx.dtypes = query.dtype, keys.dtype, None if located is None else located.dtype
        return (hidden @ (2 * v.t()).to(hidden.dtype)).squeeze(-1)  # (b, T, L)

    @staticmethod
    def backward(ctx, grad):
        hidden, v = ctx.saved_tensors  # hidden holds s = sigmoid(2 (q + k [+ U f]))
        grad = grad.to(hidden.dtype)
        grad_v = None
        if ctx.needs_input_grad[3]:
            grad_v = 2 * (grad.reshape(1, -1) @ hidden.reshape(-1, hidden.size(-1))).to(v.dtype)  # (1, A)
        if not any(ctx.needs_input_grad[:3]):
            return None, None, None, grad_v
        pre = grad.unsqueeze(-1) * (4 * v[0]).to(hidden.dtype)  # (b, T, L, A): one write
        torch.ops.aten.sigmoid_backward.grad_input(pre, hidden, grad_input=pre)  # * s (1 - s), in place
        (query_shape, keys_shape), dtypes = ctx.shapes, ctx.dtypes
        grads = [None, None, None]
        if ctx.needs_input_grad[0]:
            grads[0] = pre.sum_to_size(query_shape[0], query_shape[1], 1, query_shape[2]).squeeze(2).to(dtypes[0])
        if ctx.needs_input_grad[1]:
            grads[1] = pre.sum_to_size(keys_shape[0], 1, *keys_shape[1:]).squeeze(1).to(dtypes[1])
        if ctx.needs_input_grad[2]:
            grads[2] = pre.to(dtypes[2])
        return (*grads, grad_v)


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

    def _mlp_scores(self, projected_query: torch.Tensor, projected_keys: torch.Tensor, location: torch.Tensor | None = None) -> torch.Tensor:
        """``v^T tanh(q_t + k_i [+ U f_ti])`` for all queries and keys: `(B, T, L)`.

        Computed as ``2 v^T sigmoid(2 x) - sum(v)``, the same function (``tanh x = 2 sigmoid(2x) - 1``):
        PyTorch's CPU sigmoid is far faster than its tanh (docs/BENCHMARKS.md), and the result
        differs from the tanh form only by rounding. The hidden layer is built a few sequences
        at a time and in place, so it is never written to memory whole (beam search scores
        ``B*K`` queries against ``L`` keys at every step). The blocks are views from one
        ``split``, whose backward joins their gradients once (slices would each zero a
        gradient of the whole batch).

        Args:
            projected_query (torch.Tensor): ``W_q q`` `(B, T, A)`.
            projected_keys (torch.Tensor): ``W_k k + b`` `(B, L, A)`.
            location (torch.Tensor or None): location features ``f`` `(B, T, L, F)`, projected by
                ``self.location_proj`` inside the tanh.
        """
        steps, (length, width) = projected_query.size(1), projected_keys.shape[1:]
        batch = max(projected_query.size(0), projected_keys.size(0))  # either may broadcast from 1
        rows = max(1, _HIDDEN_BLOCK // (steps * length * width))

        def blocks(x: torch.Tensor | None) -> list:
            if x is None or x.size(0) == 1 or rows >= batch:
                return [x] * -(-batch // rows)
            return list(x.split(rows))

        v = self.v.weight  # (1, A)
        scores = []
        for query, keys, where in zip(blocks(projected_query), blocks(projected_keys), blocks(location)):
            located = self.location_proj(where) if where is not None else None  # U f, (b, T, L, A)
            scores.append(_SigmoidLayerScore.apply(query, keys, located, v))  # (b, T, L)
        return (scores[0] if len(scores) == 1 else torch.cat(scores)) - v.sum()  # (B, T, L)


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
