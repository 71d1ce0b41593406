"""The one LSTM step both decoders take (Hochreiter & Schmidhuber 1997; the forget gate of Gers et al. 2000)::

    i, f, g, o = W [x_t; h_{t-1}] + b + a_t        nn.LSTMCell's gate order: input, forget, cell, output
    c_t = sigmoid(f) * c_{t-1} + sigmoid(i) * tanh(g)
    h_t = sigmoid(o) * tanh(c_t)

A decoder's first layer also reads the previous token. That share of the gates, ``a_t``, does not
depend on the state, so teacher forcing computes it for all steps in one product beforehand and
hands each step its row (``ahead``); what is only known at the step (the attention context, the
lower layer's output, the state) is one product through :func:`shared.recurrence.step_linear`,
with the input and recurrent weights side by side in one tensor `(4H, D_in + H)`.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from .recurrence import step_linear

__all__ = ["LSTMLayer", "lstm_update"]


def lstm_update(gates: torch.Tensor, cell: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The new hidden and cell states `(B, H)` from the summed gates `(B, 4H)` and the cell `(B, H)`."""
    i, f, g, o = gates.chunk(4, dim=-1)
    cell = torch.sigmoid(f) * cell + torch.sigmoid(i) * torch.tanh(g)
    return torch.sigmoid(o) * torch.tanh(cell), cell


class LSTMLayer(nn.Module):
    """One LSTM layer, advanced one step at a time.

    Args:
        input_size (int): ``D_in``, what the layer reads at each step besides its state (and
            besides the ``ahead`` share of the gates, which has its own weights elsewhere).
        hidden_size (int): ``H``.
        bias (bool, optional): a bias of the gates; leave it out where ``ahead`` carries one. (Default: ``True``)

    Parameters are ``weight`` `(4H, D_in + H)`, the input's columns then the state's, and ``bias``
    `(4H,)`, initialised as :class:`torch.nn.LSTMCell`'s, uniform in ``+-1/sqrt(H)``.
    """

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True):
        super().__init__()
        self.input_size, self.hidden_size = input_size, hidden_size
        self.weight = nn.Parameter(torch.empty(4 * hidden_size, input_size + hidden_size))
        self.bias = nn.Parameter(torch.empty(4 * hidden_size)) if bias else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        bound = 1 / math.sqrt(self.hidden_size)
        for parameter in self.parameters():
            nn.init.uniform_(parameter, -bound, bound)

    def forward(
        self, x: torch.Tensor, hidden: torch.Tensor, cell: torch.Tensor, ahead: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """One step.

        Args:
            x (torch.Tensor): the step's input `(B, D_in)`.
            hidden (torch.Tensor): ``h_{t-1}`` `(B, H)`.
            cell (torch.Tensor): ``c_{t-1}`` `(B, H)`.
            ahead (torch.Tensor or None, optional): the share of the gates computed beforehand
                `(B, 4H)` (the previous token's, with its bias). (Default: ``None``)

        Returns:
            (torch.Tensor, torch.Tensor): ``h_t`` and ``c_t``, each `(B, H)`.
        """
        added = self.bias if ahead is None else ahead if self.bias is None else ahead + self.bias
        gates = step_linear(torch.cat([x, hidden], dim=-1), self.weight, added)  # (B, 4H)
        return lstm_update(gates, cell)

    def extra_repr(self) -> str:
        return f"{self.input_size}, {self.hidden_size}, bias={self.bias is not None}"
