"""Masks for attention, and the softmax that respects them.

Convention used everywhere in attend: a boolean mask is ``True`` where a position may be
attended to and ``False`` where it may not (padding, the future). Masks are applied to the
scores *before* normalising, so masked positions get exactly zero weight.
"""

from __future__ import annotations

import torch

__all__ = ["lengths_to_mask", "causal_mask", "combine_masks", "masked_softmax"]


def lengths_to_mask(lengths: torch.Tensor, max_len: int | None = None) -> torch.Tensor:
    """Padding mask from sequence lengths.

    Args:
        lengths (torch.Tensor): valid length of each sequence, with shape `(B,)`.
        max_len (int or None, optional): width of the mask; defaults to ``lengths.max()``.

    Returns:
        torch.Tensor: bool mask with shape `(B, max_len)`, ``True`` at positions ``< length``.
    """
    if lengths.dim() != 1:
        raise ValueError(f"lengths must have shape (B,), got {tuple(lengths.shape)}")
    if max_len is None:
        max_len = int(lengths.max()) if lengths.numel() else 0
    positions = torch.arange(max_len, device=lengths.device)
    return positions[None, :] < lengths[:, None]  # (B, L)


def causal_mask(query_len: int, key_len: int | None = None, device=None) -> torch.Tensor:
    """Mask that lets query ``t`` read keys ``<= t`` (keys aligned to the end if longer).

    Args:
        query_len (int): number of queries ``T``.
        key_len (int or None, optional): number of keys ``S``; defaults to ``T``.
        device (torch.device, optional): where to build the mask.

    Returns:
        torch.Tensor: bool mask with shape `(T, S)`.
    """
    key_len = query_len if key_len is None else key_len
    # With S > T the first S - T keys are a prefix every query may read (e.g. a cache).
    return torch.ones(query_len, key_len, dtype=torch.bool, device=device).tril(key_len - query_len)


def combine_masks(*masks: torch.Tensor | None) -> torch.Tensor | None:
    """Logical AND of broadcastable masks; ``None`` entries are ignored.

    A padding mask `(B, S)` combines with a causal mask `(T, S)` after
    ``padding[:, None, :]`` to give `(B, T, S)`.
    """
    present = [m for m in masks if m is not None]
    if not present:
        return None
    combined = present[0]
    for mask in present[1:]:
        combined = combined & mask
    return combined


def masked_softmax(scores: torch.Tensor, mask: torch.Tensor | None = None, dim: int = -1) -> torch.Tensor:
    """Softmax over ``dim`` with masked scores removed before normalising.

    Masked positions get exactly 0. A row whose positions are all masked returns all zeros
    (not NaN), and gradients stay finite.

    Args:
        scores (torch.Tensor): unnormalised scores, any shape.
        mask (torch.Tensor or None): bool mask broadcastable to ``scores``, ``True`` = keep.
        dim (int, optional): dimension to normalise over. (Default: ``-1``)

    Returns:
        torch.Tensor: weights with the shape of ``scores``; each row sums to 1 or is all 0.
    """
    if mask is None:
        return torch.softmax(scores, dim=dim)
    # The most negative finite value, not -inf: exp(-inf - -inf) would give NaN on empty rows.
    floor = torch.finfo(scores.dtype).min
    weights = torch.softmax(scores.masked_fill(~mask, floor), dim=dim)
    # A fully masked row has become uniform over masked slots; zeroing them all fixes both cases.
    return weights.masked_fill(~mask, 0.0)
