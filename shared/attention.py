"""Attention in four visible steps: query, score, normalise, read.

    query ──► score(query, keys) ──► masked_softmax ──► weights ──► read(weights, values)

``Attention`` wraps any score function from :mod:`shared.scoring`. ``precompute`` turns the
keys, values and padding mask of one sequence into a :class:`Memory`, computed once and then
read at every decoding step. The read is either soft (the expected context, Xu et al. 2015
eq. 13) or hard (one sampled location, eq. 8-9; see :func:`hard_read`).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import nn
from torch.nn import functional as F

from .kernels import fused_enabled
from .masks import masked_softmax
from .recurrence import step_read
from .scoring import DotScore, GeneralScore, ScaledDotScore, Score

__all__ = ["Memory", "Attention", "soft_read", "hard_read", "MultiHeadAttention"]


class Memory(NamedTuple):
    """What a decoder attends over, prepared once per sequence.

    Attributes:
        projected_keys (torch.Tensor): keys after the score's projection, `(B, L, *)`.
        values (torch.Tensor): what is read, `(B, L, D_v)`.
        mask (torch.Tensor or None): bool `(B, L)`, ``True`` at real (non-padding) positions.
    """

    projected_keys: torch.Tensor
    values: torch.Tensor
    mask: torch.Tensor | None = None

    def repeat_interleave(self, repeats: int) -> Memory:
        """Each sequence repeated ``repeats`` times along the batch.

        Beam search does not need this: :class:`Attention` reads one memory row for `K`
        consecutive queries.
        """
        return Memory(*(None if t is None else t.repeat_interleave(repeats, dim=0) for t in self))


def soft_read(weights: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """Expected context ``z = sum_i alpha_i v_i``.

    Args:
        weights (torch.Tensor): `(B, L)` or `(B, T, L)`.
        values (torch.Tensor): `(B, L, D)`.

    Returns:
        torch.Tensor: `(B, D)` or `(B, T, D)`.
    """
    if weights.dim() == 2:  # one step; inside a Recurrence, the values' gradient comes once for all steps
        return step_read(weights, values)
    return torch.bmm(weights, values)


def hard_read(
    weights: torch.Tensor, values: torch.Tensor, generator: torch.Generator | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Stochastic hard attention: sample one location ``s ~ Multinoulli(alpha)`` per query.

    Args:
        weights (torch.Tensor): attention weights `(B, L)`; rows sum to 1.
        values (torch.Tensor): `(B, L, D)`.
        generator (torch.Generator, optional): source of randomness.

    Returns:
        (torch.Tensor, torch.Tensor, torch.Tensor):
            context `(B, D)` = ``values[b, s_b]``, sampled locations `(B,)`, and
            ``log alpha_{s}`` `(B,)`, differentiable w.r.t. the weights (for REINFORCE).
    """
    locations = torch.multinomial(weights.detach().float(), 1, generator=generator).squeeze(1)  # (B,)
    context = values[torch.arange(values.size(0), device=values.device), locations]  # (B, D)
    # Clamp so a sample of a (numerically) zero weight gives a large but finite log-probability.
    log_prob = weights.gather(1, locations[:, None]).squeeze(1).clamp_min(1e-12).log()
    return context, locations, log_prob


class Attention(nn.Module):
    """Score, normalise and read, for one step or a block of queries.

    Args:
        score (Score): the score function, e.g. ``AdditiveScore(512, 2048, 512)``.
    """

    def __init__(self, score: Score):
        super().__init__()
        self.score = score

    def precompute(self, keys: torch.Tensor, values: torch.Tensor | None = None, mask: torch.Tensor | None = None) -> Memory:
        """Project the keys once per sequence.

        Args:
            keys (torch.Tensor): `(B, L, D_k)`.
            values (torch.Tensor or None): `(B, L, D_v)`; the keys themselves when ``None``.
            mask (torch.Tensor or None): bool `(B, L)`, ``True`` at real positions.
        """
        return Memory(self.score.precompute(keys), keys if values is None else values, mask)

    def forward(
        self, query: torch.Tensor, memory: Memory, prev_weights: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Attend with ``query`` over ``memory``.

        Args:
            query (torch.Tensor): `(B, D_q)` for one step, or `(B, T, D_q)`. A 2-D query of
                `(B*K, D_q)` rows against a memory of `B` rows is read as `K` queries per memory
                row (the beams of beam search), so the memory never needs copying per beam.
            memory (Memory): from :meth:`precompute`.
            prev_weights (torch.Tensor or None): the previous step's weights, shaped like the
                returned weights (used by location-aware scores only).

        Returns:
            (torch.Tensor, torch.Tensor): context `(B, D_v)` / `(B, T, D_v)` and weights
            `(B, L)` / `(B, T, L)`.
        """
        groups = query.size(0) // memory.values.size(0)
        if query.dim() == 2 and groups > 1:  # beams: K consecutive queries share one memory row
            context, weights = self(
                query.view(-1, groups, query.size(-1)),
                memory,
                None if prev_weights is None else prev_weights.view(-1, groups, prev_weights.size(-1)),
            )
            return context.flatten(0, 1), weights.flatten(0, 1)  # (B*K, D_v), (B*K, L)
        scores = self.score(query, memory.projected_keys, prev_weights)  # step 2: score
        mask = memory.mask
        if mask is not None and scores.dim() == 3:
            mask = mask.unsqueeze(1)  # (B, 1, L) broadcasts over the T queries
        weights = masked_softmax(scores, mask)  # step 3: normalise
        return soft_read(weights, memory.values), weights  # step 4: read


class MultiHeadAttention(nn.Module):
    """Multi-head attention over any score of the dot-product family.

    Each head projects queries, keys and values to ``embed_dim // num_heads`` features and
    attends independently; the heads are concatenated and projected back.

    Args:
        embed_dim (int): model size ``D`` (queries and outputs).
        num_heads (int): number of heads ``H``; must divide ``embed_dim``.
        score (str, optional): ``scaled_dot``, ``dot`` or ``general``. (Default: ``scaled_dot``)
        key_dim (int or None, optional): size of keys/values if not ``embed_dim``.
        bias (bool, optional): biases on the projections. (Default: ``True``)
        key_bias (bool or None, optional): a bias on the key projection; ``None``: as ``bias``.
            A key bias adds the same amount to every score of a query, which the softmax takes
            out, so Whisper's encoder has none. (Default: ``None``)

    With ``need_weights=False`` and the scaled dot score, the fused kernel
    (:func:`torch.nn.functional.scaled_dot_product_attention`) computes the same output where
    :func:`shared.kernels.fused_enabled` says so.
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        score: str = "scaled_dot",
        key_dim: int | None = None,
        bias: bool = True,
        key_bias: bool | None = None,
    ):
        super().__init__()
        if embed_dim % num_heads:
            raise ValueError(f"embed_dim ({embed_dim}) must be divisible by num_heads ({num_heads})")
        key_dim = embed_dim if key_dim is None else key_dim
        self.num_heads, self.head_dim = num_heads, embed_dim // num_heads
        self.q_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.k_proj = nn.Linear(key_dim, embed_dim, bias=bias if key_bias is None else key_bias)
        self.v_proj = nn.Linear(key_dim, embed_dim, bias=bias)
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        scores = {"scaled_dot": ScaledDotScore, "dot": DotScore, "general": lambda: GeneralScore(self.head_dim, self.head_dim)}
        if score not in scores:
            raise ValueError(f"multi-head attention takes a dot-product score (scaled_dot, dot, general), got {score!r}")
        self.score = scores[score]()

    def _split_heads(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, _ = x.shape
        x = x.view(batch, length, self.num_heads, self.head_dim).transpose(1, 2)  # (B, H, T, hd)
        return x.reshape(batch * self.num_heads, length, self.head_dim)  # (B*H, T, hd)

    def forward(
        self,
        query: torch.Tensor,
        keys: torch.Tensor,
        values: torch.Tensor | None = None,
        mask: torch.Tensor | None = None,
        need_weights: bool = True,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Args:
            query (torch.Tensor): `(B, T, D)`.
            keys (torch.Tensor): `(B, S, D_k)`.
            values (torch.Tensor or None): `(B, S, D_k)`; the keys when ``None``.
            mask (torch.Tensor or None): bool, broadcastable to `(B, T, S)` (padding `(B, 1, S)`,
                causal `(T, S)`, or both combined).
            need_weights (bool, optional): return the weights; without them the fused kernel may
                run. (Default: ``True``)

        Returns:
            (torch.Tensor, torch.Tensor or None): output `(B, T, D)` and weights `(B, H, T, S)`
            (``None`` without ``need_weights``). A query whose keys are all masked reads nothing.
        """
        values = keys if values is None else values
        batch, steps, _ = query.shape
        q = self._split_heads(self.q_proj(query))  # (B*H, T, hd)
        k = self.score.precompute(self._split_heads(self.k_proj(keys)))  # (B*H, S, hd)
        v = self._split_heads(self.v_proj(values))  # (B*H, S, hd)
        if mask is not None:
            mask = mask.unsqueeze(-3) if mask.dim() == 3 else mask  # (B, 1, T, S): same for every head
        if not need_weights and type(self.score) is ScaledDotScore and fused_enabled(query.device):
            heads = self._fused(q, k, v, mask, batch, steps)  # (B, H, T, hd)
            weights = None
        else:
            scores = self.score(q, k).view(batch, self.num_heads, steps, -1)  # (B, H, T, S)
            weights = masked_softmax(scores, mask)  # (B, H, T, S)
            heads = torch.bmm(weights.view(batch * self.num_heads, steps, -1), v)  # (B*H, T, hd)
            heads = heads.view(batch, self.num_heads, steps, self.head_dim)  # (B, H, T, hd)
        out = self.out_proj(heads.transpose(1, 2).reshape(batch, steps, -1))  # (B, T, D)
        return out, (weights if need_weights else None)

    def _fused(self, q, k, v, mask, batch: int, steps: int) -> torch.Tensor:
        """softmax(q k^T / sqrt(hd)) v by PyTorch's fused kernel, `(B, H, T, hd)`; rows with no key read 0."""
        q, k, v = (x.view(batch, self.num_heads, -1, self.head_dim) for x in (q, k, v))  # (B, H, *, hd)
        heads = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        if mask is not None:  # the kernel gives NaN where every key is masked; the plain form gives 0
            heads = heads.masked_fill(~mask.any(-1, keepdim=True), 0.0)
        return heads
