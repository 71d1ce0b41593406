"""The Speller of Listen, Attend and Spell (Chan et al. 2016, section 3.2).

At each output step ``i`` (eq. 6-8)::

    s_i = LSTM_2(LSTM_1([embed(y_{i-1}); c_{i-1}]))    the previous context is fed back (input feeding)
    c_i, alpha_i = Attention(s_i, h, alpha_{i-1})       query, score, normalise, read (shared/)
    P(y_i) = softmax(MLP([s_i; c_i]))

The attention is the shared core's: location-aware by default (Chorowski et al. 2015: the
score also sees a convolution of ``alpha_{i-1}``), content-only MLP (``additive``) or ``dot``.
``none`` is the fixed-vector speller to compare them with: every step reads one summary of the
listener states, their mean or (``summary: last``) the last state of each direction.
The listener states are projected once per utterance (:meth:`Attention.precompute`), never per
step. :meth:`Speller.step` advances any number of hypotheses by one character; it is the step
function that :func:`shared.beam_search` drives.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from shared import Attention, Memory, build_score
from shared.recurrence import Recurrence, step_linear

__all__ = ["Speller", "SpellerState"]

# (hidden (B, layers, H), cell (B, layers, H), context (B, D_enc), weights (B, L)); every
# tensor has the batch first, as shared.beam_search reorders state along dim 0.
SpellerState = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]


def _lstm_update(gates: torch.Tensor, cell: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """An LSTM cell's update from its summed gates `(B, 4H)` (nn.LSTMCell's order: input, forget,
    cell, output): the new hidden and cell states, each `(B, H)`."""
    i, f, g, o = gates.chunk(4, dim=-1)
    cell = torch.sigmoid(f) * cell + torch.sigmoid(i) * torch.tanh(g)
    return torch.sigmoid(o) * torch.tanh(cell), cell


class Speller(nn.Module):
    """Attention-based character decoder.

    Args:
        vocab_size (int): output characters ``V`` (specials included).
        encoder_dim (int): listener state size ``D_enc``.
        hidden (int): LSTM units ``H``.
        layers (int, optional): stacked LSTM cells. (Default: ``2``)
        embedding_dim (int, optional): character embedding size. (Default: ``64``)
        attention (str, optional): ``location``, ``additive``, ``dot``, ``scaled_dot`` or ``none``;
            dot scores project the query to ``D_enc`` first. (Default: ``location``)
        attention_dim (int, optional): hidden size of the MLP scores. (Default: ``128``)
        location_filters (int, optional): channels of the location convolution. (Default: ``10``)
        location_kernel (int, optional): odd width of the location convolution. (Default: ``31``)
        dropout (float, optional): dropout between LSTM layers and before the output MLP. (Default: ``0.0``)
        summary (str, optional): with ``attention="none"``, the one vector every step reads:
            ``mean`` of the listener states, or ``last``, the forward direction's last state with
            the backward direction's first (each direction's whole-utterance state). (Default: ``mean``)
    """

    def __init__(
        self,
        vocab_size: int,
        encoder_dim: int,
        hidden: int,
        layers: int = 2,
        embedding_dim: int = 64,
        attention: str = "location",
        attention_dim: int = 128,
        location_filters: int = 10,
        location_kernel: int = 31,
        dropout: float = 0.0,
        summary: str = "mean",
    ):
        super().__init__()
        if summary not in ("mean", "last"):
            raise ValueError(f"summary must be mean or last, got {summary!r}")
        self.summary_last = attention == "none" and summary == "last"
        self.layers, self.hidden, self.encoder_dim = layers, hidden, encoder_dim
        self.embedding = nn.Embedding(vocab_size, embedding_dim)
        self.cells = nn.ModuleList(
            [nn.LSTMCell(embedding_dim + encoder_dim if i == 0 else hidden, hidden) for i in range(layers)]
        )
        kwargs = {"num_filters": location_filters, "kernel_size": location_kernel} if attention == "location" else {}
        dot = attention in ("dot", "scaled_dot")
        self.query_proj = nn.Linear(hidden, encoder_dim) if dot else nn.Identity()  # dot needs D_q == D_k
        self.attention = Attention(build_score(attention, encoder_dim if dot else hidden, encoder_dim, attention_dim, **kwargs))
        self.output = nn.Sequential(
            nn.Dropout(dropout), nn.Linear(hidden + encoder_dim, hidden), nn.Tanh(), nn.Linear(hidden, vocab_size)
        )
        self.dropout = nn.Dropout(dropout)
        self._decoding_weights: tuple[tuple, list] | None = None  # (the weights' identities and versions, _layer_weights())

    def precompute(self, encoder_states: torch.Tensor, encoder_lengths: torch.Tensor) -> Memory:
        """Project the listener states once per utterance.

        Args:
            encoder_states (torch.Tensor): `(B, L, D_enc)`.
            encoder_lengths (torch.Tensor): `(B,)`.
        """
        if self.summary_last:  # one position: both directions' states after reading the whole utterance
            half = encoder_states.size(-1) // 2
            rows = torch.arange(encoder_states.size(0), device=encoder_states.device)
            last = encoder_states[rows, (encoder_lengths - 1).clamp_min(0), :half]  # (B, H): forward, at the end
            encoder_states = torch.cat([last, encoder_states[:, 0, half:]], dim=-1)[:, None]  # (B, 1, D_enc)
            encoder_lengths = torch.ones_like(encoder_lengths)
        mask = torch.arange(encoder_states.size(1), device=encoder_states.device)[None, :] < encoder_lengths[:, None]
        return self.attention.precompute(encoder_states, mask=mask)

    def initial_state(self, memory: Memory) -> SpellerState:
        """Zero LSTM states and context; the previous alignment starts uniform over the utterance."""
        batch = memory.values.size(0)
        zeros = memory.values.new_zeros(batch, self.layers, self.hidden)
        weights = memory.mask.float() / memory.mask.sum(1, keepdim=True).clamp_min(1).float()  # (B, L)
        return zeros, zeros.clone(), memory.values.new_zeros(batch, self.encoder_dim), weights.to(memory.values.dtype)

    def _input_gates(self, embedded: torch.Tensor) -> torch.Tensor:
        """The previous character's share of the first LSTM layer's gates, with both its biases:
        `(..., E)` -> `(..., 4H)`. It does not depend on the state, so teacher forcing computes
        it for all steps in one product."""
        first = self.cells[0]
        return F.linear(embedded, first.weight_ih[:, : embedded.size(-1)], first.bias_ih + first.bias_hh)

    def _layer_weights(self) -> list[tuple[torch.Tensor, torch.Tensor | None]]:
        """Each layer's input and recurrent weights side by side, `(4H, D_in + H)`, with its summed
        biases, so a step is one product per layer; prepared once per pass, not per step. The
        first layer's input here is the previous context (its character's share, and its biases,
        come from :meth:`_input_gates`)."""
        first = self.cells[0]
        layers = [(torch.cat([first.weight_ih[:, self.embedding.embedding_dim :], first.weight_hh], 1), None)]
        layers += [(torch.cat([cell.weight_ih, cell.weight_hh], 1), cell.bias_ih + cell.bias_hh) for cell in self.cells[1:]]
        return layers

    def _step_weights(self) -> list[tuple[torch.Tensor, torch.Tensor | None]]:
        """:meth:`_layer_weights` for :meth:`step`, joined once per search rather than once a
        step: kept while the cells' weights are the same tensors, unchanged in place."""
        if torch.is_grad_enabled():
            return self._layer_weights()
        key = tuple((id(p), p._version) for p in self.cells.parameters())
        if self._decoding_weights is None or self._decoding_weights[0] != key:
            self._decoding_weights = key, self._layer_weights()
        return self._decoding_weights[1]

    def _advance(
        self, input_gates: torch.Tensor, state: SpellerState, memory: Memory, layers: list[tuple[torch.Tensor, torch.Tensor | None]]
    ) -> tuple[torch.Tensor, SpellerState]:
        """One step from the previous characters' gate shares `(B, 4H)` and :meth:`_layer_weights`;
        returns ``[s_i; c_i]`` `(B, H + D_enc)` and the new state."""
        hidden, cell, context, weights = state
        x = context  # input feeding: the first layer reads [character; previous context]
        new_h, new_c = [], []
        for layer, (weight, bias) in enumerate(layers):
            inputs = torch.cat([x, hidden[:, layer]], dim=-1)  # (B, D_in + H)
            gates = step_linear(inputs, weight, input_gates if layer == 0 else bias)  # (B, 4H)
            h, c = _lstm_update(gates, cell[:, layer])  # (B, H)
            new_h.append(h)
            new_c.append(c)
            x = self.dropout(h) if layer < self.layers - 1 else h  # between layers only
        context, weights = self.attention(self.query_proj(x), memory, weights)  # (B, D_enc), (B, L)
        state = (torch.stack(new_h, 1), torch.stack(new_c, 1), context, weights)
        return torch.cat([x, context], dim=-1), state

    def step(self, tokens: torch.Tensor, state: SpellerState, memory: Memory) -> tuple[torch.Tensor, SpellerState, torch.Tensor]:
        """Advance by one character: the step function for :func:`shared.beam_search`.

        Args:
            tokens (torch.Tensor): previous characters `(N,)`.
            state (SpellerState): from :meth:`initial_state` or the previous step.
            memory (Memory): from :meth:`precompute`, one row per utterance; ``N`` may be a
                multiple of its rows (the beams of each utterance, consecutive).

        Returns:
            (torch.Tensor, SpellerState, torch.Tensor): log-probabilities `(N, V)`, the new
            state, and the attention weights `(N, L)`.
        """
        features, state = self._advance(self._input_gates(self.embedding(tokens)), state, memory, self._step_weights())
        return self.output(features).float().log_softmax(-1), state, state[3]

    def forward(
        self, memory: Memory, inputs: torch.Tensor, sampling_probability: float = 0.0
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Teacher-forced decoding of whole target sequences.

        Args:
            memory (Memory): from :meth:`precompute`.
            inputs (torch.Tensor): ``<sos> y_1 .. y_{U-1}`` with shape `(B, U)`.
            sampling_probability (float, optional): scheduled sampling (Bengio et al. 2015): the chance
                that a step's input is the model's own previous prediction instead of the true
                character. (Default: ``0.0``)

        Returns:
            (torch.Tensor, torch.Tensor): logits `(B, U, V)` and attention weights `(B, U, L)`.
        """
        state = self.initial_state(memory)
        layers = self._layer_weights()
        input_gates = self._input_gates(self.embedding(inputs)).unbind(1)  # U x (B, 4H): the characters' shares, all steps at once
        outputs, alignments = [], []
        with Recurrence():  # each weight's gradient as one product over all steps
            for i in range(inputs.size(1)):
                step_input = input_gates[i]
                if sampling_probability > 0 and i > 0:
                    sampled = torch.rand(inputs.size(0), device=inputs.device) < sampling_probability  # (B,)
                    if sampled.any():
                        step_input = torch.where(sampled[:, None], self._predicted_gates(outputs[-1], sampled), step_input)
                features, state = self._advance(step_input, state, memory, layers)
                outputs.append(features)
                alignments.append(state[3])
        return self.output(torch.stack(outputs, 1)), torch.stack(alignments, 1)  # (B, U, V), (B, U, L)

    def _predicted_gates(self, features: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        """The first layer's gate shares `(B, 4H)` of the characters the model predicts from the
        previous step's features `(B, H + D_enc)`, for the ``rows`` `(B,)` that read them (others:
        those of character 0, unused). The prediction is a choice, not a path for gradients, so
        only those rows go through the output layer, without a graph; the logits the loss needs
        come from one product over all steps at the end, as in teacher forcing."""
        with torch.no_grad():
            predicted = torch.zeros(features.size(0), dtype=torch.long, device=features.device)
            predicted[rows] = self.output(features[rows]).argmax(-1)
        return self._input_gates(self.embedding(predicted))
