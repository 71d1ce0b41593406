"""The Listener of Listen, Attend and Spell (Chan et al. 2016, section 3.1).

A BLSTM over the feature frames, then pyramidal BLSTM layers: each concatenates pairs of
consecutive frames before its BLSTM (eq. 5), ``h^j_i = pBLSTM(h^j_{i-1}, [h^{j-1}_{2i}, h^{j-1}_{2i+1}])``,
so three of them shorten time 8x. The attention then reads ~8x fewer positions per output
character, and alignment forms far sooner than over raw 10 ms frames.

Padding never enters a real sequence's states (each direction reads only real frames, as
with packed sequences; see :class:`_BLSTM`), and the output lengths are exact: ``floor(T / (input_stack * 2 ** pyramid_layers))``. An odd last
frame at a pyramid layer has no partner and is dropped.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from shared import lengths_to_mask

__all__ = ["Listener", "stack_frames", "reverse_padded"]


def stack_frames(x: torch.Tensor, lengths: torch.Tensor, factor: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Concatenate each run of ``factor`` consecutive frames into one frame.

    Args:
        x (torch.Tensor): `(B, T, D)`.
        lengths (torch.Tensor): valid frames `(B,)`.
        factor (int): frames per group.

    Returns:
        (torch.Tensor, torch.Tensor): `(B, T // factor, factor * D)` and ``lengths // factor``.
    """
    if factor == 1:
        return x, lengths
    batch, steps, dim = x.shape
    steps = steps // factor
    x = x[:, : steps * factor].reshape(batch, steps, factor * dim)  # (B, T/f, f*D)
    return x, torch.div(lengths, factor, rounding_mode="floor")


def reverse_padded(x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Reverse each sequence within its own length; padding stays where it is.

    Args:
        x (torch.Tensor): `(B, T, D)`.
        lengths (torch.Tensor): `(B,)`.
    """
    steps = torch.arange(x.size(1), device=x.device)[None, :]  # (1, T)
    lengths = lengths.to(x.device)[:, None]  # (B, 1)
    index = torch.where(steps < lengths, lengths - 1 - steps, steps)  # (B, T)
    return x.gather(1, index.unsqueeze(-1).expand_as(x))


class _BLSTM(nn.Module):
    """One bidirectional LSTM layer whose outputs do not depend on padding.

    The backward direction reads each sequence reversed *within its length*, so it starts at
    the sequence's last real frame, not in the padding. This gives exactly what a packed
    sequence gives, and its backward pass is an order of magnitude faster on CPU than PyTorch's
    packed LSTM. Without gradients (decoding), each direction runs packed, skipping the padding's
    steps: the same outputs, in less time (both measured in docs/BENCHMARKS.md).
    """

    def __init__(self, input_dim: int, hidden: int):
        super().__init__()
        self.forward_lstm = nn.LSTM(input_dim, hidden, batch_first=True)
        self.backward_lstm = nn.LSTM(input_dim, hidden, batch_first=True)

    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        forward = self._run(self.forward_lstm, x, lengths)  # (B, T, H); real frames never see the padding after them
        backward = self._run(self.backward_lstm, reverse_padded(x, lengths), lengths)  # (B, T, H)
        out = torch.cat([forward, reverse_padded(backward, lengths)], dim=-1)  # (B, T, 2H)
        return out * lengths_to_mask(lengths.to(x.device), x.size(1)).unsqueeze(-1).to(out.dtype)

    @staticmethod
    def _run(lstm: nn.LSTM, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """``lstm`` over `(B, T, D)`: packed without gradients, padded with them (see the class)."""
        if torch.is_grad_enabled() or x.size(0) == 1:
            return lstm(x)[0]
        cpu_lengths = lengths.cpu()  # what packing needs; read only when decoding
        if int(cpu_lengths.min()) < 1:
            return lstm(x)[0]
        packed = pack_padded_sequence(x, cpu_lengths, batch_first=True, enforce_sorted=False)
        return pad_packed_sequence(lstm(packed)[0], batch_first=True, total_length=x.size(1))[0]


class Listener(nn.Module):
    """BLSTM + pyramidal BLSTM encoder.

    Args:
        input_dim (int): feature size ``D`` (80 for log-mel).
        hidden (int): LSTM units per direction ``H``; outputs have ``2H`` features.
        layers (int, optional): plain BLSTM layers before the pyramid; 0 with a pyramid makes an
            adapter over another encoder's states. (Default: ``1``)
        pyramid_layers (int, optional): pyramidal layers, each halving time. (Default: ``3``)
        input_stack (int, optional): frames concatenated before the first BLSTM (1 = none),
            a cheap extra reduction for CPU training. (Default: ``1``)
        dropout (float, optional): dropout between layers. (Default: ``0.0``)
        layer_norm (bool, optional): normalise each layer's output (Ba et al. 2016); deep LSTM
            stacks converge markedly faster with it. (Default: ``False``)
    """

    def __init__(
        self,
        input_dim: int,
        hidden: int,
        layers: int = 1,
        pyramid_layers: int = 3,
        input_stack: int = 1,
        dropout: float = 0.0,
        layer_norm: bool = False,
    ):
        super().__init__()
        if layers < 0 or pyramid_layers < 0 or layers + pyramid_layers < 1 or input_stack < 1:
            raise ValueError(
                f"need layers >= 0, pyramid_layers >= 0, one layer at least and input_stack >= 1, got {layers}, "
                f"{pyramid_layers}, {input_stack}"
            )
        self.input_stack = input_stack
        self.output_dim = 2 * hidden
        self.layers = nn.ModuleList([_BLSTM(input_dim * input_stack if i == 0 else 2 * hidden, hidden) for i in range(layers)])
        pyramid_input = 2 * (input_dim * input_stack if layers == 0 else 2 * hidden)  # two frames concatenated
        self.pyramid = nn.ModuleList([_BLSTM(pyramid_input if i == 0 else 4 * hidden, hidden) for i in range(pyramid_layers)])
        count = layers + pyramid_layers
        self.norms = nn.ModuleList([nn.LayerNorm(2 * hidden) if layer_norm else nn.Identity() for _ in range(count)])
        self.dropout = nn.Dropout(dropout)

    @property
    def reduction(self) -> int:
        """Input frames per output frame."""
        return self.input_stack * 2 ** len(self.pyramid)

    def output_lengths(self, lengths: torch.Tensor) -> torch.Tensor:
        """Exact output frames for input frames `(B,)` (nested floors equal one floor)."""
        return torch.div(lengths, self.reduction, rounding_mode="floor")

    def forward(
        self, features: torch.Tensor, lengths: torch.Tensor, drop_output: bool = True
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Args:
            features (torch.Tensor): `(B, T, D)`.
            lengths (torch.Tensor): valid frames `(B,)`.
            drop_output (bool, optional): dropout on the last layer's output too (the caller
            applies ``self.dropout`` itself where it also needs the states without). (Default: ``True``)

        Returns:
            (torch.Tensor, torch.Tensor): listener states `(B, T', 2H)` (0 at padding) and
            their lengths `(B,)`, ``T' = T // reduction``.
        """
        x, lengths = stack_frames(features, lengths, self.input_stack)  # (B, T/s, s*D)
        norms = iter(self.norms)
        last = len(self.layers) + len(self.pyramid) - 1
        for i, layer in enumerate([*self.layers, *self.pyramid]):
            if i >= len(self.layers):
                x, lengths = stack_frames(x, lengths, 2)  # (B, T/2, 4H): eq. 5's concatenation
            x = self._masked(next(norms)(layer(x, lengths)), lengths)  # (B, T', 2H)
            if i < last or drop_output:
                x = self.dropout(x)
        return x, lengths

    @staticmethod
    def _masked(x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """Zero the padding (a layer norm would otherwise give it its bias)."""
        return x * lengths_to_mask(lengths.to(x.device), x.size(1)).unsqueeze(-1).to(x.dtype)
