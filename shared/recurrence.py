"""Tensors used at every step of a recurrence, with one gradient product for all the steps.

A decoder multiplies the same weights, and reads the same attention memory, at each of ``T``
steps. Left to autograd, each step's backward makes that tensor's gradient from its own few
rows (a product with an inner size of the batch, 16 or 32, or for the memory of 1: products
that run far below the machine's matrix rate) and adds it into a buffer of the whole tensor's
size, ``T`` times. Recurrent kernels such as cuDNN's instead keep each step's input and
output gradient and form the weight's gradient once, as one product over all the steps;
:func:`step_linear` and :func:`step_read` do the same::

    with Recurrence():
        for t in range(T):
            gates = step_linear(x_t, weight, bias)       # x_t @ weight.T + bias
            context = step_read(alpha_t, values)         # sum_i alpha_ti v_i

Each shared tensor enters the recurrence through one node that hands it on unchanged; autograd
runs that node's backward after the backward of every step that used the tensor, so that is
where the one product is made, from the inputs kept in forward and the output gradients the
steps left behind. The values are those of ``F.linear`` and ``torch.bmm``; only the order of
the sums in the shared tensor's gradient differs. Without an active :class:`Recurrence`,
without gradients, or for a tensor that needs none, the two functions are the plain operations.
"""

from __future__ import annotations

from contextvars import ContextVar

import torch
from torch.nn import functional as F

__all__ = ["Recurrence", "step_linear", "step_read"]

_active: ContextVar[Recurrence | None] = ContextVar("recurrence", default=None)


class _Uses:
    """One shared tensor's uses in one forward pass: each step's input, and in backward its
    output gradient. Subclasses say what a use computes and how the gradients add up."""

    def __init__(self) -> None:
        self.inputs: list[tuple[torch.Tensor, int]] = []  # (input, its version when used)
        self.grads: dict[int, torch.Tensor] = {}

    def collected(self) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """The inputs and output gradients of the uses that got a gradient."""
        uses = sorted(self.grads)
        for use in uses:
            x, version = self.inputs[use]
            if x._version != version:
                raise RuntimeError("an input of step_linear or step_read was modified in place before backward")
        inputs, grads = [self.inputs[u][0] for u in uses], [self.grads[u] for u in uses]
        self.grads.clear()  # a retained graph may run backward again
        return inputs, grads


class _LinearUses(_Uses):
    """``y = x @ W.T``; ``dW = sum_t g_t^T x_t``."""

    @staticmethod
    def forward(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return F.linear(x, weight)

    @staticmethod
    def input_grad(grad: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return grad @ weight.to(grad.dtype)  # (..., in)

    def shared_grad(self, shape: torch.Size, dtype: torch.dtype) -> torch.Tensor:
        inputs, grads = self.collected()  # the steps may have different numbers of rows
        grads = torch.cat([g.reshape(-1, shape[0]) for g in grads]).to(dtype)  # (N, out)
        return grads.t() @ torch.cat([x.reshape(-1, shape[1]) for x in inputs]).to(dtype)  # (out, in)


class _ReadUses(_Uses):
    """``c = alpha @ V`` per sequence (alpha `(B, L)`, V `(B, L, D)`); ``dV = sum_t alpha_t^T g_t``."""

    @staticmethod
    def forward(weights: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        return torch.bmm(weights.unsqueeze(1), values).squeeze(1)  # (B, D)

    @staticmethod
    def input_grad(grad: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        return torch.bmm(grad.to(values.dtype).unsqueeze(1), values.transpose(1, 2)).squeeze(1)  # (B, 1, D) @ (B, D, L)

    def shared_grad(self, shape: torch.Size, dtype: torch.dtype) -> torch.Tensor:
        weights, grads = self.collected()  # T x (B, L), T x (B, D)
        return torch.bmm(torch.stack(weights, 2).to(dtype), torch.stack(grads, 1).to(dtype))  # (B, L, T) @ (B, T, D)


class _Collect(torch.autograd.Function):
    """Hands the shared tensor on unchanged; its backward runs after every use's and makes the
    tensor's gradient."""

    @staticmethod
    def forward(ctx, shared: torch.Tensor, uses: _Uses) -> torch.Tensor:
        ctx.uses, ctx.shape, ctx.dtype = uses, shared.shape, shared.dtype
        ctx.set_materialize_grads(False)  # the uses give no gradient here: no zeros to make
        return shared.view_as(shared)

    @staticmethod
    def backward(ctx, _unused):
        return (ctx.uses.shared_grad(ctx.shape, ctx.dtype) if ctx.uses.grads else None), None


class _Use(torch.autograd.Function):
    """One step's product with the shared tensor; its backward gives the input's gradient and
    leaves the output's for :class:`_Collect`."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, shared: torch.Tensor, uses: _Uses, use: int) -> torch.Tensor:
        ctx.uses, ctx.use = uses, use
        ctx.save_for_backward(shared)
        return uses.forward(x, shared)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        (shared,) = ctx.saved_tensors
        ctx.uses.grads[ctx.use] = grad
        return (ctx.uses.input_grad(grad, shared) if ctx.needs_input_grad[0] else None), None, None, None


class Recurrence:
    """The context of one pass over the steps of a recurrence, in which :func:`step_linear` and
    :func:`step_read` make each shared tensor's gradient in one product.

    Enter one before the loop over steps; each shared tensor keeps its steps' inputs until backward.
    """

    def __init__(self) -> None:
        self._shared: dict[tuple[type, int], tuple[torch.Tensor, torch.Tensor, _Uses]] = {}  # -> (tensor, handed on, uses)

    def __enter__(self) -> Recurrence:
        self._token = _active.set(self)
        return self

    def __exit__(self, *exc) -> None:
        _active.reset(self._token)
        self._shared = {}

    def _use(self, kind: type[_Uses], x: torch.Tensor, shared: torch.Tensor) -> torch.Tensor:
        entry = self._shared.get((kind, id(shared)))
        if entry is None or entry[0] is not shared:
            uses = kind()
            entry = self._shared[(kind, id(shared))] = (shared, _Collect.apply(shared, uses), uses)
        _, handed_on, uses = entry
        # Kept detached: the uses are reachable from the graph's nodes, and an input holding its
        # own graph would close a cycle through autograd that Python's collector cannot see.
        uses.inputs.append((x.detach(), x._version))
        return _Use.apply(x, handed_on, uses, len(uses.inputs) - 1)


def _recurrence(shared: torch.Tensor) -> Recurrence | None:
    recurrence = _active.get()
    return recurrence if recurrence is not None and torch.is_grad_enabled() and shared.requires_grad else None


def step_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``x @ weight.T + bias`` for one step of a recurrence.

    Args:
        x (torch.Tensor): the step's input `(B, in)`; ``B`` may change from step to step.
        weight (torch.Tensor): `(out, in)`, the same tensor at every step.
        bias (torch.Tensor or None): added after the product; anything that broadcasts to `(B, out)`.

    Returns:
        torch.Tensor: `(B, out)`.
    """
    recurrence = _recurrence(weight)
    if recurrence is None:
        return F.linear(x, weight, bias)
    out = recurrence._use(_LinearUses, x, weight)
    return out if bias is None else out + bias


def step_read(weights: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """The expected context ``sum_i alpha_i v_i`` for one step of a recurrence.

    Args:
        weights (torch.Tensor): `(B, L)`.
        values (torch.Tensor): `(B, L, D)`, the same tensor at every step.

    Returns:
        torch.Tensor: `(B, D)`.
    """
    recurrence = _recurrence(values)
    if recurrence is None:
        return _ReadUses.forward(weights, values)
    return recurrence._use(_ReadUses, weights, values)
