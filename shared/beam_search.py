"""Batched beam search over any step function.

All ``B`` sequences and their ``K`` beams decode together as one batch of ``B * K`` rows, so
one call of the model advances every hypothesis by one token.

The model is seen only through a step function::

    step_fn(tokens: (N,), state) -> (log_probs: (N, V), new_state, attention: (N, L) or None)

where ``state`` is any nest (tuple, list, dict) of tensors whose first dimension is ``N``.
Beam search expands ``state`` to ``B * K`` rows at the start and reorders it after every step;
anything that is the same for all beams of a sequence (e.g. the attention memory) is better
captured by the step function once, expanded with ``repeat_interleave(K)``.

Bookkeeping follows the usual recipe: of the top ``2K`` candidates, those ending in ``<eos>``
that rank within the first ``K`` become finished hypotheses, and the best ``K`` that do not end
continue. A sequence is done when it has ``K`` finished hypotheses or reaches its maximum
length; if none ever finished, its best unfinished hypothesis is returned. With ``K = 1`` this is
exactly greedy decoding.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch.utils._pytree import tree_map

__all__ = ["Hypothesis", "beam_search", "greedy_search"]

StepFn = Callable[[torch.Tensor, Any], tuple[torch.Tensor, Any, torch.Tensor | None]]


@dataclass
class Hypothesis:
    """One decoded sequence.

    Attributes:
        tokens (list[int]): output tokens, without ``<sos>`` and ``<eos>``.
        score (float): sum of token log-probabilities (the ``<eos>`` included if finished).
        normalized_score (float): ``score / (len + 1) ** length_penalty``; what hypotheses are
            ranked by.
        finished (bool): whether the hypothesis ended with ``<eos>``.
        attention (torch.Tensor or None): `(len(tokens), L)`, the weights used for each token.
    """

    tokens: list[int]
    score: float
    normalized_score: float
    finished: bool
    attention: torch.Tensor | None = None


def _normalize(score: float, length: int, length_penalty: float) -> float:
    return score / (length**length_penalty) if length_penalty else score


def _per_sequence_limit(max_len: int | torch.Tensor, batch_size: int) -> list[int]:
    if isinstance(max_len, torch.Tensor):
        limits = max_len.tolist()
        if len(limits) != batch_size:
            raise ValueError(f"max_len has {len(limits)} entries for a batch of {batch_size}")
        return [int(limit) for limit in limits]
    return [int(max_len)] * batch_size


@torch.no_grad()
def beam_search(
    step_fn: StepFn,
    state: Any,
    batch_size: int,
    beam_size: int,
    sos: int,
    eos: int,
    max_len: int | torch.Tensor,
    length_penalty: float = 0.0,
    nbest: int = 1,
    return_attention: bool = True,
) -> list[list[Hypothesis]]:
    """Decode ``batch_size`` sequences with ``beam_size`` beams each, in one batch.

    Args:
        step_fn (callable): see the module docstring.
        state: nest of tensors with first dimension ``B`` (the decoder's initial state).
        batch_size (int): ``B``.
        beam_size (int): ``K``.
        sos (int): start token fed at the first step.
        eos (int): end token.
        max_len (int or torch.Tensor): most steps (``<eos>`` included), for all or per sequence `(B,)`.
        length_penalty (float, optional): alpha of ``score / length ** alpha`` when ranking
            finished hypotheses; 0 ranks by total log-probability, 1 by the per-token mean.
        nbest (int, optional): hypotheses returned per sequence (at most ``K``). (Default: ``1``)
        return_attention (bool, optional): keep each step's attention weights. (Default: ``True``)

    Returns:
        list[list[Hypothesis]]: for each sequence, its best ``nbest`` hypotheses, best first.
    """
    if beam_size < 1 or batch_size < 1:
        raise ValueError(f"beam_size and batch_size must be >= 1, got {beam_size} and {batch_size}")
    K, B = beam_size, batch_size
    limits = _per_sequence_limit(max_len, B)
    state = tree_map(lambda x: x.repeat_interleave(K, dim=0) if isinstance(x, torch.Tensor) else x, state)

    device = _first_tensor(state).device if _first_tensor(state) is not None else torch.device("cpu")
    tokens = torch.full((B * K,), sos, dtype=torch.long, device=device)
    scores = torch.full((B, K), float("-inf"), device=device)
    scores[:, 0] = 0.0  # only the first beam is live at the start, so the K beams start distinct
    history = torch.empty(B * K, 0, dtype=torch.long, device=device)
    attention_history: torch.Tensor | None = None
    step_attention_width: int | None = None
    finished: list[list[Hypothesis]] = [[] for _ in range(B)]
    done = [False] * B
    row_offsets = (torch.arange(B, device=device) * K)[:, None]  # (B, 1)

    def hypothesis(row: int, score: float, is_finished: bool) -> Hypothesis:
        length = history.size(1) + int(is_finished)
        attention = None
        if attention_history is not None:
            attention = attention_history[row]
        elif return_attention and step_attention_width is not None:  # ended before any token
            attention = torch.zeros(0, step_attention_width, device=device)
        return Hypothesis(history[row].tolist(), score, _normalize(score, length, length_penalty), is_finished, attention)

    for step in range(max(limits)):
        for b in range(B):  # sequences that used up their length stop here
            if not done[b] and step >= limits[b]:
                done[b] = True
                if not finished[b]:
                    finished[b].append(hypothesis(b * K, float(scores[b, 0]), False))
        if all(done):
            break

        log_probs, state, attention = step_fn(tokens, state)  # (N, V), ..., (N, L)
        vocab = log_probs.size(-1)
        if attention is not None:
            step_attention_width = attention.size(-1)
        candidates = (scores.view(-1, 1) + log_probs.float()).view(B, K * vocab)  # (B, K*V)
        top_scores, top_ids = candidates.topk(min(2 * K, K * vocab), dim=1)  # (B, 2K), sorted
        origin_beam, top_tokens = top_ids // vocab, top_ids % vocab
        origin_rows = row_offsets + origin_beam  # (B, 2K) rows in the N = B*K batch
        ends = top_tokens == eos

        # Finished hypotheses: <eos> candidates that rank within the first K.
        rank = torch.arange(top_ids.size(1), device=device)[None, :]
        finishing = ends & (rank < K) & torch.isfinite(top_scores)
        if finishing.any():
            for b, j in finishing.nonzero().tolist():
                if done[b]:
                    continue
                row = int(origin_rows[b, j])
                finished[b].append(hypothesis(row, float(top_scores[b, j]), True))
                if len(finished[b]) >= K:
                    done[b] = True

        # Continuing beams: the first K candidates that do not end (there are at least K of 2K).
        continuing = ~ends
        keep = continuing & (continuing.cumsum(1) <= K)  # (B, 2K), exactly K per row
        pick = keep.nonzero()[:, 1].view(B, K)
        scores = top_scores.gather(1, pick)  # (B, K)
        rows = origin_rows.gather(1, pick).view(-1)  # (N,)
        tokens = top_tokens.gather(1, pick).view(-1)  # (N,)
        state = tree_map(lambda x: x.index_select(0, rows) if isinstance(x, torch.Tensor) else x, state)
        history = torch.cat([history.index_select(0, rows), tokens[:, None]], dim=1)
        if return_attention and attention is not None:
            step_attention = attention.index_select(0, rows)[:, None].float()  # (N, 1, L)
            attention_history = (
                step_attention
                if attention_history is None
                else torch.cat([attention_history.index_select(0, rows), step_attention], dim=1)
            )

    for b in range(B):
        if not finished[b]:  # nothing ever ended: the best unfinished hypothesis
            finished[b].append(hypothesis(b * K, float(scores[b, 0]), False))
    return [sorted(hyps, key=lambda h: h.normalized_score, reverse=True)[: max(1, nbest)] for hyps in finished]


def _first_tensor(nest: Any) -> torch.Tensor | None:
    found: list[torch.Tensor] = []
    tree_map(lambda x: found.append(x) if isinstance(x, torch.Tensor) else None, nest)
    return found[0] if found else None


@torch.no_grad()
def greedy_search(step_fn: StepFn, state: Any, batch_size: int, sos: int, eos: int, max_len: int) -> list[list[int]]:
    """Arg-max decoding, the reference that ``beam_search(beam_size=1)`` must equal.

    Returns:
        list[list[int]]: tokens of each sequence, without ``<sos>``/``<eos>``.
    """
    device = _first_tensor(state).device if _first_tensor(state) is not None else torch.device("cpu")
    tokens = torch.full((batch_size,), sos, dtype=torch.long, device=device)
    outputs: list[list[int]] = [[] for _ in range(batch_size)]
    alive = [True] * batch_size
    for _ in range(max_len):
        log_probs, state, _ = step_fn(tokens, state)
        tokens = log_probs.argmax(-1)
        for b, token in enumerate(tokens.tolist()):
            if alive[b]:
                if token == eos:
                    alive[b] = False
                else:
                    outputs[b].append(token)
        if not any(alive):
            break
    return outputs
