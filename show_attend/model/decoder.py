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
image vector; everything else is the same. The feature projection ``W_a a_i`` is computed once per image
(:meth:`Decoder.start`), not at every step. :meth:`Decoder.step` advances one token and is
what :func:`shared.beam_search` calls.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import nn

from shared import AdditiveScore, Attention, Memory, NoScore, hard_read
from shared.recurrence import Recurrence, step_linear

__all__ = ["DecoderConfig", "DecoderOutput", "Decoder", "GATES", "ATTENTIONS"]

GATES = ("scalar", "channel", "none")
ATTENTIONS = ("soft", "hard", "none")


@dataclass
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
        # T_{D+m+n, 4n} of eq. 1, split by input so the word's share is computed for all steps at once.
        self.embed_to_gates = nn.Linear(m, 4 * n)
        self.context_to_gates = nn.Linear(d, 4 * n, bias=False)
        self.hidden_to_gates = nn.Linear(n, 4 * n, bias=False)
        self.out_hidden, self.out_context = nn.Linear(n, m), nn.Linear(d, m)  # L_h, L_z
        self.out_vocab = nn.Linear(m, vocab_size)  # L_o
        self.dropout = nn.Dropout(config.dropout)

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

    def _gate_weight(self) -> torch.Tensor:
        """The context's and the state's gate weights side by side, `(4n, D + n)`, so that a
        training step is one product; joined once per pass, not per step."""
        return torch.cat([self.context_to_gates.weight, self.hidden_to_gates.weight], 1)

    def _lstm(
        self, embed_gates: torch.Tensor, context: torch.Tensor, h: torch.Tensor, c: torch.Tensor, gate_weight: torch.Tensor | None = None
    ) -> State:
        """The LSTM update of eq. 1-3; with ``gate_weight`` (:meth:`_gate_weight`) the context's and
        the state's shares of the gates are one product."""
        if gate_weight is None:
            gates = step_linear(context, self.context_to_gates.weight, embed_gates) + step_linear(h, self.hidden_to_gates.weight)
        else:
            gates = step_linear(torch.cat([context, h], -1), gate_weight, embed_gates)  # (B, 4n)
        i, f, g, o = gates.chunk(4, dim=-1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        return torch.sigmoid(o) * torch.tanh(c), c

    def _output(self, embedded: torch.Tensor, h: torch.Tensor, context: torch.Tensor) -> torch.Tensor:
        """Deep output layer (eq. 7): logits `(..., V)` from ``E y_{t-1}``, ``h_t`` and ``z_t``."""
        hidden = torch.tanh(embedded + self.out_hidden(self.dropout(h)) + self.out_context(context))  # (..., m)
        return self.out_vocab(self.dropout(hidden))

    def forward(
        self, features: torch.Tensor, inputs: torch.Tensor, lengths: torch.Tensor | None = None, sample: bool = False
    ) -> DecoderOutput:
        """Teacher-forced pass over whole captions.

        With ``lengths``, each step runs only the captions that still have a word to predict:
        the batch is ordered longest first, so the live captions are the first rows, and step
        ``t`` works on ``(lengths > t).sum()`` of them. The deep output layer then runs on the
        real steps only, never on padding.

        Args:
            features (torch.Tensor): annotation vectors `(B, L, D)`.
            inputs (torch.Tensor): input words `(B, T)`, ``<sos>`` first (the captions without
                their last token).
            lengths (torch.Tensor or None): words to predict per caption `(B,)` (``<eos>``
                included); ``None``: all ``T`` for every caption.
            sample (bool): hard attention: read a sampled location instead of the expected context.

        Returns:
            DecoderOutput: logits for the next words, `(B, T, V)` without ``lengths``, and with
            them `(N, V)` for the ``N`` real steps in (caption, step) order, the order of
            ``lengths_to_mask(lengths, T).nonzero()``; weights `(B, T, L)` and, when sampling, the
            samples' log-probabilities `(B, T)`, both 0 at padded steps.
        """
        batch, steps = inputs.shape
        if lengths is None:
            lengths = torch.full((batch,), steps, dtype=torch.long, device=inputs.device)
            packed = False
        else:
            packed = True
        order = lengths.argsort(descending=True, stable=True)  # longest first: live captions are the first rows
        if bool((order == torch.arange(batch, device=order.device)).all()):
            order = None  # already in order (the data's batches are): no copies
        else:
            features, inputs, lengths = features[order], inputs[order], lengths[order]
        live = (lengths[None, :] > torch.arange(steps, device=lengths.device)[:, None]).sum(1).tolist()  # rows live at each step
        memory, (h, c) = self.start(features)
        embedded = self.embedding(inputs)  # (B, T, m)
        embed_gates = self.embed_to_gates(embedded).unbind(1)  # T x (B, 4n): the word's share of eq. 1, all steps at once
        gate_weight = self._gate_weight()
        hs, contexts, alphas, log_probs = [], [], [], []
        with Recurrence():  # each weight's gradient as one product over all steps
            for t, rows in enumerate(live):
                if rows < h.size(0):  # captions that ended leave the batch
                    h, c, memory = h[:rows], c[:rows], Memory(*(x if x is None else x[:rows] for x in memory))
                context, alpha, log_prob = self._attend(h, memory, sample)
                h, c = self._lstm(embed_gates[t][:rows], context, h, c, gate_weight)
                hs.append(h)
                contexts.append(context)
                alphas.append(alpha)
                log_probs.append(log_prob)
        # The real steps, from step-major (all captions at t, then t + 1) to (caption, step) order.
        step_of = torch.cat([torch.full((rows,), t, device=inputs.device) for t, rows in enumerate(live)])
        row_of = torch.cat([torch.arange(rows, device=inputs.device) for rows in live])
        flat = row_of * steps + step_of  # (N,) position in the (sorted) B x T grid
        reorder = flat.argsort()
        row_of, step_of = row_of[reorder], step_of[reorder]
        logits = self._output(embedded[row_of, step_of], torch.cat(hs)[reorder], torch.cat(contexts)[reorder])  # (N, V)
        weights = features.new_zeros(batch, steps, features.size(1))
        weights[row_of, step_of] = torch.cat(alphas)[reorder].to(weights.dtype)  # (B, T, L), 0 at padding
        sample_log_probs = None
        if sample:
            sample_log_probs = weights.new_zeros(batch, steps)
            sample_log_probs[row_of, step_of] = torch.cat(log_probs)[reorder].to(weights.dtype)
        if order is not None:  # back to the caller's order of captions
            inverse = order.argsort()
            weights = weights[inverse]
            sample_log_probs = None if sample_log_probs is None else sample_log_probs[inverse]
            logits = logits[(order[row_of] * steps + step_of).argsort()]  # by original caption, then step
        if not packed:
            logits = logits.view(batch, steps, -1)
        return DecoderOutput(logits, weights, sample_log_probs)

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
        h, c = self._lstm(self.embed_to_gates(embedded), context, h, c)
        # .float() is free for fp32 logits; log_softmax(dtype=...) would copy them even then (20 MB per step
        # for 100 images' beams of 10,000 words).
        return self._output(embedded, h, context).float().log_softmax(-1), (h, c), alpha
