"""The Speller of Listen, Attend and Spell (Chan et al. 2016, section 3.2).

At each output step ``i`` (eq. 6-8)::

    s_i = LSTM_2(LSTM_1([embed(y_{i-1}); c_{i-1}]))    the previous context is fed back (input feeding)
    c_i, alpha_i = Attention(s_i, h, alpha_{i-1})       query, score, normalise, read (shared/)
    P(y_i) = softmax(MLP([s_i; c_i]))

The attention is the shared core's: location-aware by default (Chorowski et al. 2015: the
score also sees a convolution of ``alpha_{i-1}``), content-only MLP (``additive``) or ``dot``.
``none`` is the fixed-vector speller to compare them with: every step reads one summary of the
listener states, their mean or (``summary: last``) the last state of each direction.
The LSTM step is the shared one (:class:`shared.lstm.LSTMLayer`).

The decoder protocol, the captioner's decoder's too:

* :meth:`Speller.start`: the attention memory (the listener states projected once per
  utterance, never per step) and the initial state;
* :meth:`Speller.step`: one character for any number of hypotheses, the step function that
  :func:`shared.beam_search` drives;
* :meth:`Speller.forward`: teacher-forced logits `(B, U, V)` of whole sequences (training);
* :meth:`Speller.score`: each given character's log-probability and the attention that read it
  (rescoring, ``explain``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from shared import Attention, Memory, build_score
from shared.lstm import LSTMLayer
from shared.recurrence import Recurrence
from speech_attend.model.migrations import speller_from_lstm_cells

__all__ = ["SpellerConfig", "Speller", "SpellerState"]

# (hidden (B, layers, H), cell (B, layers, H), context (B, D_enc), weights (B, L)); every
# tensor has the batch first, as shared.beam_search reorders state along dim 0.
SpellerState = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]


@dataclass(frozen=True)
class SpellerConfig:
    """The speller's sizes (:class:`speech_attend.model.las.LASConfig` takes its defaults from here)."""

    hidden: int = 512  # LSTM units H
    layers: int = 2  # stacked LSTM layers
    embedding_dim: int = 64  # character embedding
    attention: str = "location"  # location, additive, dot, scaled_dot (the query projected to D_enc first) or none
    attention_dim: int = 256  # hidden size of the MLP scores
    location_filters: int = 10  # channels of the location convolution
    location_kernel: int = 31  # its odd width, in listener frames
    dropout: float = 0.2  # between LSTM layers and before the output MLP
    summary: str = "mean"  # with attention none: "mean" of the listener states, or "last" of each direction

    def __post_init__(self):
        if self.summary not in ("mean", "last"):
            raise ValueError(f"summary must be mean or last, got {self.summary!r}")


class Speller(nn.Module):
    """Attention-based character decoder.

    Args:
        vocab_size (int): output characters ``V`` (specials included).
        encoder_dim (int): listener state size ``D_enc``.
        config (SpellerConfig, optional): sizes, attention, dropout. (Default: ``SpellerConfig()``)

    Checkpoints from before the shared LSTM step (``cells.*``, :class:`torch.nn.LSTMCell`'s
    parameters) load through :func:`speech_attend.model.migrations.speller_from_lstm_cells`.
    """

    def __init__(self, vocab_size: int, encoder_dim: int, config: SpellerConfig = SpellerConfig()):
        super().__init__()
        self.config = config
        hidden, embedding_dim, attention = config.hidden, config.embedding_dim, config.attention
        self.summary_last = attention == "none" and config.summary == "last"
        self.layers, self.hidden, self.encoder_dim = config.layers, hidden, encoder_dim
        self.embedding = nn.Embedding(vocab_size, embedding_dim)
        # The character's share of the first layer's gates (with its bias), all steps at once in
        # teacher forcing; the first layer itself reads the previous context, the others the layer below.
        self.embed_to_gates = nn.Linear(embedding_dim, 4 * hidden)
        self.lstm = nn.ModuleList(
            [LSTMLayer(encoder_dim if i == 0 else hidden, hidden, bias=i > 0) for i in range(config.layers)]
        )
        self._init_gates()
        kwargs = (
            {"num_filters": config.location_filters, "kernel_size": config.location_kernel} if attention == "location" else {}
        )
        dot = attention in ("dot", "scaled_dot")
        self.query_proj = nn.Linear(hidden, encoder_dim) if dot else nn.Identity()  # dot needs D_q == D_k
        self.attention = Attention(
            build_score(attention, encoder_dim if dot else hidden, encoder_dim, config.attention_dim, **kwargs)
        )
        self.output = nn.Sequential(
            nn.Dropout(config.dropout), nn.Linear(hidden + encoder_dim, hidden), nn.Tanh(), nn.Linear(hidden, vocab_size)
        )
        self.dropout = nn.Dropout(config.dropout)
        self._register_load_state_dict_pre_hook(speller_from_lstm_cells)

    @torch.no_grad()
    def _init_gates(self) -> None:
        """The LSTM's weights uniform in +-1/sqrt(H), as nn.LSTMCell's; forget-gate biases start at 1
        (Jozefowicz et al. 2015), so memories last from the first step."""
        bound = self.hidden**-0.5
        nn.init.uniform_(self.embed_to_gates.weight, -bound, bound)
        for bias in [self.embed_to_gates.bias] + [layer.bias for layer in self.lstm[1:]]:
            nn.init.uniform_(bias, -bound, bound)
            bias[self.hidden : 2 * self.hidden].fill_(1.0)  # gates are ordered input, forget, cell, output

    # ------------------------------------------------------------------ the protocol

    def start(self, encoder_states: torch.Tensor, encoder_lengths: torch.Tensor) -> tuple[Memory, SpellerState]:
        """The attention memory (the listener states projected once per utterance) and the initial
        state: zero LSTM states and context, and a previous alignment uniform over the utterance.

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
        memory = self.attention.precompute(encoder_states, mask=mask)
        batch = memory.values.size(0)
        zeros = memory.values.new_zeros(batch, self.layers, self.hidden)
        weights = memory.mask.float() / memory.mask.sum(1, keepdim=True).clamp_min(1).float()  # (B, L)
        state = zeros, zeros.clone(), memory.values.new_zeros(batch, self.encoder_dim), weights.to(memory.values.dtype)
        return memory, state

    def step(self, tokens: torch.Tensor, state: SpellerState, memory: Memory) -> tuple[torch.Tensor, SpellerState, torch.Tensor]:
        """Advance by one character: the step function for :func:`shared.beam_search`.

        Args:
            tokens (torch.Tensor): previous characters `(N,)`.
            state (SpellerState): from :meth:`start` or the previous step.
            memory (Memory): from :meth:`start`, one row per utterance; ``N`` may be a
                multiple of its rows (the beams of each utterance, consecutive).

        Returns:
            (torch.Tensor, SpellerState, torch.Tensor): log-probabilities `(N, V)`, the new
            state, and the attention weights `(N, L)`.
        """
        features, state = self._advance(self.embed_to_gates(self.embedding(tokens)), state, memory)
        return self.output(features).float().log_softmax(-1), state, state[3]

    def forward(
        self, encoder_states: torch.Tensor, encoder_lengths: torch.Tensor, inputs: torch.Tensor, sampling_probability: float = 0.0
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Teacher-forced decoding of whole target sequences.

        Args:
            encoder_states (torch.Tensor): listener states `(B, L, D_enc)`.
            encoder_lengths (torch.Tensor): `(B,)`.
            inputs (torch.Tensor): ``<sos> y_1 .. y_{U-1}`` with shape `(B, U)`.
            sampling_probability (float, optional): scheduled sampling (Bengio et al. 2015): the chance
                that a step's input is the model's own previous prediction instead of the true
                character. (Default: ``0.0``)

        Returns:
            (torch.Tensor, torch.Tensor): logits `(B, U, V)` and attention weights `(B, U, L)`.
        """
        memory, state = self.start(encoder_states, encoder_lengths)
        input_gates = self.embed_to_gates(self.embedding(inputs)).unbind(
            1
        )  # U x (B, 4H): the characters' shares, all steps at once
        outputs, alignments = [], []
        with Recurrence():  # each weight's gradient as one product over all steps
            for i in range(inputs.size(1)):
                step_input = input_gates[i]
                if sampling_probability > 0 and i > 0:
                    sampled = torch.rand(inputs.size(0), device=inputs.device) < sampling_probability  # (B,)
                    if sampled.any():
                        step_input = torch.where(sampled[:, None], self._predicted_gates(outputs[-1], sampled), step_input)
                features, state = self._advance(step_input, state, memory)
                outputs.append(features)
                alignments.append(state[3])
        return self.output(torch.stack(outputs, 1)), torch.stack(alignments, 1)  # (B, U, V), (B, U, L)

    def score(
        self,
        encoder_states: torch.Tensor,
        encoder_lengths: torch.Tensor,
        tokens: torch.Tensor,
        lengths: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Each character's log-probability given the ones before it, teacher-forced.

        Args:
            encoder_states (torch.Tensor): listener states `(B, L, D_enc)`.
            encoder_lengths (torch.Tensor): `(B,)`.
            tokens (torch.Tensor): ``<sos> y_1 .. y_U`` `(B, U + 1)`, padded after each sequence's end.
            lengths (torch.Tensor or None, optional): characters to score per sequence `(B,)`;
                ``None``: all ``U``. (Default: ``None``)

        Returns:
            (torch.Tensor, torch.Tensor): ``log p(y_u | y_<u, x)`` `(B, U)` in float32 and the
            attention weights `(B, U, L)`; both 0 past ``lengths``.
        """
        logits, alignments = self(encoder_states, encoder_lengths, tokens[:, :-1])
        log_probs = logits.float().log_softmax(-1).gather(-1, tokens[:, 1:, None]).squeeze(-1)  # (B, U)
        if lengths is not None:
            real = torch.arange(log_probs.size(1), device=log_probs.device)[None, :] < lengths[:, None]  # (B, U)
            log_probs, alignments = log_probs * real, alignments * real[..., None]
        return log_probs, alignments

    # ------------------------------------------------------------------ one step

    def _advance(self, input_gates: torch.Tensor, state: SpellerState, memory: Memory) -> tuple[torch.Tensor, SpellerState]:
        """One step from the previous characters' gate shares `(B, 4H)`; returns ``[s_i; c_i]``
        `(B, H + D_enc)` and the new state."""
        hidden, cell, context, weights = state
        x = context  # input feeding: the first layer reads [character; previous context]
        new_h, new_c = [], []
        for layer, lstm in enumerate(self.lstm):
            h, c = lstm(x, hidden[:, layer], cell[:, layer], input_gates if layer == 0 else None)  # (B, H)
            new_h.append(h)
            new_c.append(c)
            x = self.dropout(h) if layer < self.layers - 1 else h  # between layers only
        context, weights = self.attention(self.query_proj(x), memory, weights)  # (B, D_enc), (B, L)
        state = (torch.stack(new_h, 1), torch.stack(new_c, 1), context, weights)
        return torch.cat([x, context], dim=-1), state

    def _predicted_gates(self, features: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        """The first layer's gate shares `(B, 4H)` of the characters the model predicts from the
        previous step's features `(B, H + D_enc)`, for the ``rows`` `(B,)` that read them (others:
        those of character 0, unused). The prediction is a choice, not a path for gradients, so
        only those rows go through the output layer, without a graph; the logits the loss needs
        come from one product over all steps at the end, as in teacher forcing."""
        with torch.no_grad():
            predicted = torch.zeros(features.size(0), dtype=torch.long, device=features.device)
            predicted[rows] = self.output(features[rows]).argmax(-1)
        return self.embed_to_gates(self.embedding(predicted))
