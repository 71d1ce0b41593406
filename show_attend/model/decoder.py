"""The Show, Attend and Tell decoder (Xu et al. 2015, arXiv 1502.03044, section 3.1.2).

At each step ``t`` the LSTM's previous state ``h_{t-1}`` is the query of an additive attention
over the annotation vectors ``a_1..a_L``; the context ``z_t`` it reads, scaled by the gate
``beta_t``, enters the LSTM with the previous word, and the word is predicted from the
word, the new state and the context by the deep output layer::

    alpha_t = softmax(f_att(a, h_{t-1}))                              eq. 4-5  (shared.Attention)
    z_t     = beta_t * sum_i alpha_ti a_i,  beta_t = sigmoid(f_beta(h_{t-1}))   eq. 6, 4.2.1
    i,f,o,g = T(E y_{t-1}, h_{t-1}, z_t);  c_t, h_t = LSTM update       eq. 1-3
    p(y_t)  ~ exp(L_o tanh(E y_{t-1} + L_h h_t + L_z z_t))              eq. 7 (tanh as in the authors' code)

Soft attention reads the expected context; hard attention reads one location sampled from
``alpha_t`` (eq. 8-9, through :func:`shared.hard_read`) and is trained with REINFORCE by the
LightningModule. ``attention: none`` is the fixed-vector decoder to compare them with: every
step reads the mean annotation vector (:class:`shared.NoScore`), as Show and Tell reads one
image vector; everything else is the same. The LSTM step is the shared one (:class:`shared.lstm.LSTMLayer`).

The decoder protocol, the recognizer's speller's too:

* :meth:`Decoder.start`: the attention memory (the feature projection ``W_a a_i``, computed
  once per image, not at every step) and the initial state;
* :meth:`Decoder.step`: one word for any number of hypotheses, what :func:`shared.beam_search` calls;
* :meth:`Decoder.forward`: teacher-forced logits `(B, T, V)` of whole captions;
* :meth:`Decoder.score`: each given word's log-probability and the attention that read it
  (the training loss, ``explain``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import nn

from shared import AdditiveScore, Attention, Memory, NoScore, hard_read
from shared.lstm import LSTMLayer
from shared.recurrence import Recurrence, step_linear
from show_attend.model.migrations import decoder_from_split_gates

__all__ = ["DecoderConfig", "DecoderOutput", "DecoderScores", "Decoder", "GATES", "ATTENTIONS"]

GATES = ("scalar", "channel", "none")
ATTENTIONS = ("soft", "hard", "none")


@dataclass(frozen=True)
class DecoderConfig:
    embed_dim: int = 512  # m, word embedding size (paper)
    attention_dim: int = 512  # hidden size of the attention MLP f_att
    hidden_dim: int = 1800  # n, LSTM size (1800 in the authors' COCO code)
    dropout: float = 0.5  # on the LSTM output and before the last output layer
    gate: str = "scalar"  # beta: "scalar" (paper), "channel" (one gate per feature) or "none"
    attention: str = "soft"  # "soft" (deterministic), "hard" (stochastic, REINFORCE) or "none" (the mean feature)


class DecoderOutput(NamedTuple):
    """What a teacher-forced pass returns.

    Attributes:
        logits (torch.Tensor): `(B, T, V)`.
        alphas (torch.Tensor): attention weights `(B, T, L)`.
        sample_log_probs (torch.Tensor or None): ``log alpha_{t, s_t}`` of the sampled
            locations `(B, T)` (hard attention with sampling only).
    """

    logits: torch.Tensor
    alphas: torch.Tensor
    sample_log_probs: torch.Tensor | None


class DecoderScores(NamedTuple):
    """What :meth:`Decoder.score` returns.

    Attributes:
        log_probs (torch.Tensor): ``log p(y_t | y_<t, a)`` of the given words `(B, T)`, float32.
        alphas (torch.Tensor): attention weights `(B, T, L)`.
        sample_log_probs (torch.Tensor or None): as :class:`DecoderOutput`'s.

    All three are 0 at padded steps.
    """

    log_probs: torch.Tensor
    alphas: torch.Tensor
    sample_log_probs: torch.Tensor | None


State = tuple[torch.Tensor, torch.Tensor]  # (h, c), each (B, n)


class Decoder(nn.Module):
    """Attention LSTM that writes a caption, one word per step.

    Args:
        config (DecoderConfig): sizes, gate, attention kind, dropout.
        vocab_size (int): ``V``, specials included.
        feature_dim (int): ``D``, size of each annotation vector.
    """

    def __init__(self, config: DecoderConfig, vocab_size: int, feature_dim: int):
        super().__init__()
        if config.gate not in GATES:
            raise ValueError(f"unknown gate {config.gate!r}; expected one of {', '.join(GATES)}")
        if config.attention not in ATTENTIONS:
            raise ValueError(f"unknown attention {config.attention!r}; expected soft, hard or none")
        m, n, d = config.embed_dim, config.hidden_dim, feature_dim
        self.config, self.vocab_size, self.feature_dim = config, vocab_size, feature_dim
        self.embedding = nn.Embedding(vocab_size, m, padding_idx=0)  # E
        self.init_h, self.init_c = nn.Linear(d, n), nn.Linear(d, n)  # f_init,h and f_init,c
        score = NoScore() if config.attention == "none" else AdditiveScore(n, d, config.attention_dim)  # f_att, tanh MLP
        self.attention = Attention(score)
        self.gate = None if config.gate == "none" else nn.Linear(n, 1 if config.gate == "scalar" else d)  # f_beta
        # T_{D+m+n, 4n} of eq. 1, split by input: the word's share is computed for all steps at once,
        # the context's and the state's are one product per step (shared.lstm).
        self.embed_to_gates = nn.Linear(m, 4 * n)
        self.lstm = LSTMLayer(d, n, bias=False)
        with torch.no_grad():  # each input's block as nn.Linear would start it, uniform in +-1/sqrt(its size)
            nn.init.uniform_(self.lstm.weight[:, :d], -(d**-0.5), d**-0.5)
            nn.init.uniform_(self.lstm.weight[:, d:], -(n**-0.5), n**-0.5)
        self.out_hidden, self.out_context = nn.Linear(n, m), nn.Linear(d, m)  # L_h, L_z
        self.out_vocab = nn.Linear(m, vocab_size)  # L_o
        self.dropout = nn.Dropout(config.dropout)
        self._register_load_state_dict_pre_hook(decoder_from_split_gates)  # older layouts

    def start(self, features: torch.Tensor) -> tuple[Memory, State]:
        """Attention memory and initial LSTM state of each image.

        Args:
            features (torch.Tensor): annotation vectors `(B, L, D)`.

        Returns:
            (Memory, (torch.Tensor, torch.Tensor)): the memory (features projected once) and
            ``(h0, c0)``, each `(B, n)`, from the mean feature (section 3.1.2).
        """
        mean = features.mean(1)  # (B, D)
        return self.attention.precompute(features), (torch.tanh(self.init_h(mean)), torch.tanh(self.init_c(mean)))

    def _attend(self, h: torch.Tensor, memory: Memory, sample: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """Gated context `(B, D)`, weights `(B, L)` and, when sampling, ``log alpha_s`` `(B,)`."""
        context, alpha = self.attention(h, memory)  # expected context (soft), (B, D), (B, L)
        log_prob = None
        if sample:
            context, _, log_prob = hard_read(alpha, memory.values)  # z_t = a_{s_t}, s_t ~ alpha_t
        if self.gate is not None:
            context = torch.sigmoid(step_linear(h, self.gate.weight, self.gate.bias)) * context  # beta_t * z_t
        return context, alpha, log_prob

    def _output(self, embedded: torch.Tensor, h: torch.Tensor, context: torch.Tensor) -> torch.Tensor:
        """Deep output layer (eq. 7): logits `(..., V)` from ``E y_{t-1}``, ``h_t`` and ``z_t``."""
        hidden = torch.tanh(embedded + self.out_hidden(self.dropout(h)) + self.out_context(context))  # (..., m)
        return self.out_vocab(self.dropout(hidden))

    def forward(
        self, features: torch.Tensor, inputs: torch.Tensor, lengths: torch.Tensor | None = None, sample: bool = False
    ) -> DecoderOutput:
        """Teacher-forced pass over whole captions.

        Args:
            features (torch.Tensor): annotation vectors `(B, L, D)`.
            inputs (torch.Tensor): input words `(B, T)`, ``<sos>`` first (the captions without
                their last token).
            lengths (torch.Tensor or None): words to predict per caption `(B,)` (``<eos>``
                included); only those steps run (:class:`_LongestFirst`). ``None``: all ``T``.
            sample (bool): hard attention: read a sampled location instead of the expected context.

        Returns:
            DecoderOutput: logits for the next words `(B, T, V)`, attention weights `(B, T, L)`
            and, when sampling, the samples' log-probabilities `(B, T)`; all 0 at padded steps.
        """
        steps = self._teacher_forced(features, inputs, lengths, sample)
        logits = steps.order.to_grid(self._output(steps.embedded, steps.h, steps.context))  # (B, T, V)
        return DecoderOutput(logits, steps.alphas, steps.sample_log_probs)

    def score(
        self, features: torch.Tensor, tokens: torch.Tensor, lengths: torch.Tensor | None = None, sample: bool = False
    ) -> DecoderScores:
        """Each given word's log-probability, teacher-forced: ``-score(...).log_probs.sum(1)`` is
        ``-log p(y | a)`` of eq. 14. The output layer runs on the real steps only.

        Args:
            features (torch.Tensor): annotation vectors `(B, L, D)`.
            tokens (torch.Tensor): ``<sos> y_1 .. y_T`` `(B, T + 1)`, padded after each caption.
            lengths (torch.Tensor or None): words to score per caption `(B,)` (``<eos>``
                included); ``None``: all ``T``.
            sample (bool): hard attention: read a sampled location instead of the expected context.

        Returns:
            DecoderScores: log-probabilities `(B, T)`, attention weights `(B, T, L)` and, when
            sampling, the samples' log-probabilities `(B, T)`; all 0 at padded steps.
        """
        steps = self._teacher_forced(features, tokens[:, :-1], lengths, sample)
        logits = self._output(steps.embedded, steps.h, steps.context)  # (N, V)
        targets = tokens[:, 1:][steps.order.rows, steps.order.steps]  # (N,)
        log_probs = logits.float().log_softmax(-1).gather(-1, targets[:, None]).squeeze(-1)  # (N,)
        return DecoderScores(steps.order.to_grid(log_probs), steps.alphas, steps.sample_log_probs)

    def step(self, tokens: torch.Tensor, state: State, memory: Memory) -> tuple[torch.Tensor, State, torch.Tensor]:
        """One decoding step with the expected context (test time, both soft and hard models).

        Args:
            tokens (torch.Tensor): previous words `(N,)`.
            state ((torch.Tensor, torch.Tensor)): ``(h, c)``, each `(N, n)`.
            memory (Memory): from :meth:`start`, one row per image; ``N`` may be a multiple of its
                rows (the beams of each image, consecutive).

        Returns:
            (torch.Tensor, State, torch.Tensor): log-probabilities `(N, V)` in float32 (also under
            bf16 autocast, so beams are ranked at full precision), the new state and the attention
            weights `(N, L)`; the signature :func:`shared.beam_search` expects.
        """
        h, c = state
        embedded = self.embedding(tokens)  # (N, m)
        context, alpha, _ = self._attend(h, memory, sample=False)
        h, c = self.lstm(context, h, c, self.embed_to_gates(embedded))
        # .float() is free for fp32 logits; log_softmax(dtype=...) would copy them even then (20 MB per step
        # for 100 images' beams of 10,000 words).
        return self._output(embedded, h, context).float().log_softmax(-1), (h, c), alpha

    # ------------------------------------------------------------------ teacher forcing

    def _recurrence(self, features: torch.Tensor, embedded: torch.Tensor, live: list[int], sample: bool) -> list[tuple]:
        """Eq. 1-6 over the steps of captions ordered longest first: step ``t`` runs the first
        ``live[t]`` captions, those with a word still to predict.

        Returns:
            list of (h_t, z_t, alpha_t, log alpha_{t, s_t} or None), each with ``live[t]`` rows.
        """
        memory, (h, c) = self.start(features)
        embed_gates = self.embed_to_gates(embedded).unbind(1)  # T x (B, 4n): the word's share of eq. 1, all steps at once
        outputs = []
        with Recurrence():  # each weight's gradient as one product over all steps
            for t, rows in enumerate(live):
                if rows < h.size(0):  # captions that ended leave the batch
                    h, c, memory = h[:rows], c[:rows], Memory(*(x if x is None else x[:rows] for x in memory))
                context, alpha, log_prob = self._attend(h, memory, sample)  # eq. 4-6
                h, c = self.lstm(context, h, c, embed_gates[t][:rows])  # eq. 1-3
                outputs.append((h, context, alpha, log_prob))
        return outputs

    def _teacher_forced(self, features: torch.Tensor, inputs: torch.Tensor, lengths: torch.Tensor | None, sample: bool) -> _Steps:
        """:meth:`_recurrence` on the captions in longest-first order, its outputs back in the caller's."""
        order = _LongestFirst(lengths, *inputs.shape, inputs.device)
        embedded = self.embedding(inputs)  # (B, T, m)
        outputs = self._recurrence(order.sort(features), order.sort(embedded), order.live, sample)
        h, context, alpha, log_prob = (order.gather(list(column)) for column in zip(*outputs))  # each (N, ...)
        return _Steps(
            order,
            embedded=embedded[order.rows, order.steps],
            h=h,
            context=context,
            alphas=order.to_grid(alpha.to(features.dtype)),
            sample_log_probs=None if log_prob is None else order.to_grid(log_prob.to(features.dtype)),
        )


class _LongestFirst:
    """The fast path of teacher forcing: captions ordered longest first, so that the captions still
    running at step ``t`` are the first ``live[t]`` rows and the others are never computed; and the
    way back from the steps' outputs (step-major, live rows only) to the real steps in (caption,
    step) order of the caller's captions.

    Args:
        lengths (torch.Tensor or None): real steps per caption `(B,)`; ``None``: ``T`` each.
        batch (int): ``B``. length (int): ``T``.
    """

    def __init__(self, lengths: torch.Tensor | None, batch: int, length: int, device: torch.device):
        self.batch, self.length = batch, length
        if lengths is None:
            lengths = torch.full((batch,), length, dtype=torch.long, device=device)
        order = lengths.argsort(descending=True, stable=True)
        self.order = None if bool((order == torch.arange(batch, device=device)).all()) else order  # None: no copies
        lengths = lengths if self.order is None else lengths[order]
        self.live = (lengths[None, :] > torch.arange(length, device=device)[:, None]).sum(1).tolist()  # rows live at each step
        step_of = torch.cat([torch.full((rows,), t, device=device) for t, rows in enumerate(self.live)])
        row_of = torch.cat([torch.arange(rows, device=device) for rows in self.live])  # sorted rows, step-major
        if self.order is not None:
            row_of = order[row_of]  # the caller's rows
        self._reorder = (row_of * length + step_of).argsort()  # step-major -> (caption, step) order
        self.rows, self.steps = row_of[self._reorder], step_of[self._reorder]  # (N,) each: the real steps

    def sort(self, x: torch.Tensor) -> torch.Tensor:
        return x if self.order is None else x[self.order]

    def gather(self, per_step: list[torch.Tensor | None]) -> torch.Tensor | None:
        """The steps' outputs `T x (live[t], ...)` as `(N, ...)` in (caption, step) order."""
        return None if per_step[0] is None else torch.cat(per_step)[self._reorder]

    def to_grid(self, packed: torch.Tensor) -> torch.Tensor:
        """`(N, ...)` -> `(B, T, ...)`, 0 at padded steps."""
        if packed.size(0) == self.batch * self.length:  # no padding: (caption, step) order is the grid's
            return packed.view(self.batch, self.length, *packed.shape[1:])
        grid = packed.new_zeros(self.batch, self.length, *packed.shape[1:])
        grid[self.rows, self.steps] = packed
        return grid


class _Steps(NamedTuple):
    """The real steps of a teacher-forced pass in (caption, step) order (which they are:
    ``order.rows``, ``order.steps``), what the output layer reads at each, and the attention on
    the grid."""

    order: _LongestFirst
    embedded: torch.Tensor  # (N, m)
    h: torch.Tensor  # (N, n)
    context: torch.Tensor  # (N, D)
    alphas: torch.Tensor  # (B, T, L)
    sample_log_probs: torch.Tensor | None  # (B, T)
