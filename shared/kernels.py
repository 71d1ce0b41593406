"""Fused CPU kernels behind one switch, each held to its plain form in shared/ by a parity test.

The attention core is written as the papers' equations in plain PyTorch (:mod:`shared.scoring`).
Where a fused version of one of them is faster (docs/BENCHMARKS.md), it lives here, and the plain
code calls it only while :func:`fused_enabled` says so:

* :func:`fused_mlp_scores`: the MLP score ``v^T tanh(q_t + k_i [+ U f_ti])`` (additive and
  location-aware attention) as ``2 v^T sigmoid(2x) - sum(v)`` (the same function:
  ``tanh x = 2 sigmoid(2x) - 1``, and PyTorch's CPU sigmoid is far faster than its tanh), with
  the `(B, T, L, A)` hidden layer built a few sequences at a time and in place, and a backward of
  its own.

``use_fused(False)`` (or the environment variable ``ATTEND_FUSED=0``) runs the plain forms
everywhere; ``tests/shared/test_attention_core.py`` checks values and gradients of both.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch

__all__ = ["fused_enabled", "use_fused", "fused_mlp_scores"]

_FUSED = os.environ.get("ATTEND_FUSED", "1") != "0"


def fused_enabled(device: torch.device | str = "cpu") -> bool:
    """Whether the fused kernels run for tensors on ``device`` (on by default on every device)."""
    return _FUSED


@contextmanager
def use_fused(enabled: bool) -> Iterator[None]:
    """Turn the fused kernels on or off inside a ``with`` block."""
    global _FUSED
    before, _FUSED = _FUSED, enabled
    try:
        yield
    finally:
        _FUSED = before


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


def fused_mlp_scores(
    projected_query: torch.Tensor,
    projected_keys: torch.Tensor,
    v: torch.Tensor,
    location: torch.Tensor | None = None,
    project_location: Callable[[torch.Tensor], torch.Tensor] | None = None,
) -> torch.Tensor:
    """``v^T tanh(q_t + k_i [+ U f_ti])`` as :class:`_SigmoidLayerScore` blocks: `(B, T, L)`.

    The blocks are views from one ``split``, whose backward joins their gradients once (slices
    would each zero a gradient of the whole batch).

    Args:
        projected_query (torch.Tensor): ``W_q q`` `(B, T, A)`.
        projected_keys (torch.Tensor): ``W_k k + b`` `(B, L, A)`.
        v (torch.Tensor): the score's output weights `(1, A)`.
        location (torch.Tensor or None): location features ``f`` `(B, T, L, F)`.
        project_location (callable or None): ``U``, applied to each block of ``location``.
    """
    steps, (length, width) = projected_query.size(1), projected_keys.shape[1:]
    batch = max(projected_query.size(0), projected_keys.size(0))  # either may broadcast from 1
    rows = max(1, _HIDDEN_BLOCK // (steps * length * width))

    def blocks(x: torch.Tensor | None) -> list:
        if x is None or x.size(0) == 1 or rows >= batch:
            return [x] * -(-batch // rows)
        return list(x.split(rows))

    scores = []
    for query, keys, where in zip(blocks(projected_query), blocks(projected_keys), blocks(location)):
        located = project_location(where) if where is not None else None  # U f, (b, T, L, A)
        scores.append(_SigmoidLayerScore.apply(query, keys, located, v))  # (b, T, L)
    return (scores[0] if len(scores) == 1 else torch.cat(scores)) - v.sum()  # (B, T, L)
