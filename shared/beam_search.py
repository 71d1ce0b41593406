"""Batched beam search over any step function.

All ``B`` sequences and their ``K`` beams decode together as one batch of ``B * K`` rows, so
one call of the model advances every hypothesis by one token.

The model is seen only through a step function::

    step_fn(tokens: (N,), state) -> (log_probs: (N, V), new_state, attention: (N, L) or None)
    step_fn(tokens: (N,), state, memory) -> the same, when ``memory`` is given

where ``state`` is any nest (tuple, list, dict) of tensors whose first dimension is ``N``, one
row per hypothesis, and ``memory`` a nest whose first dimension is the number of sequences in
the batch: what all beams of a sequence share (e.g. the attention memory), never copied per
beam (:class:`shared.Attention` reads one memory row for ``K`` consecutive queries).

Bookkeeping follows the usual recipe: of the top ``2K`` candidates, those ending in ``<eos>``
that rank within the first ``K`` become finished hypotheses, and the best ``K`` that do not end
continue. A sequence is done when it has ``K`` finished hypotheses or reaches its maximum
length; if none ever finished, its best unfinished hypothesis is returned. With ``K = 1`` this is
exactly greedy decoding.

Two things keep the work proportional to the live hypotheses; neither changes what any
hypothesis is computed from:

* the first step runs one row per sequence (its ``K`` beams are still identical), so ``N = B``
  there and ``B * K`` after;
* sequences that are done leave the batch: once they are a quarter of it, their rows of
  ``state`` and ``memory`` are dropped, so ``N`` and the memory's first dimension shrink.
  A step function must therefore keep everything per-sequence in ``state`` or ``memory``,
  never in a closure.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch.utils._pytree import tree_map

__all__ = ["Hypothesis", "beam_search", "greedy_search"]

StepFn = Callable[..., tuple[torch.Tensor, Any, torch.Tensor | None]]

# Done sequences are dropped once they are this share of the batch: often enough that the
# work follows the live sequences, rarely enough that copying the memory stays cheap.
_COMPACT_FRACTION = 0.25


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


def _select(nest: Any, index: torch.Tensor) -> Any:
    """Rows ``index`` of every tensor in a nest."""
    return tree_map(lambda x: x.index_select(0, index) if isinstance(x, torch.Tensor) else x, nest)


def _keep_rows(nest: Any, kept: torch.Tensor, in_place: bool) -> Any:
    """Rows ``kept`` (ascending) of every tensor in a nest.

    With ``in_place``, each kept row moves down to the first free row and the result is a view
    of the first ``len(kept)`` rows: no new memory. On CPU that matters more than the copy: the
    memory of a large batch is hundreds of MB, and first-touching a fresh buffer of that size
    costs ~10x the copy itself (page faults). Moving down in ascending order is safe, as
    ``kept[i] >= i``: a row is read before anything is written over it.
    """
    if not in_place:
        return _select(nest, kept)
    sources = kept.tolist()

    def move(x: torch.Tensor) -> torch.Tensor:
        for row, source in enumerate(sources):
            if row != source:
                x[row].copy_(x[source])
        return x[: len(sources)]

    return tree_map(lambda x: move(x) if isinstance(x, torch.Tensor) else x, nest)


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
    memory: Any = None,
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
        memory (optional): nest of tensors with first dimension ``B``, shared by the ``K`` beams
            of each sequence; passed to ``step_fn`` as its third argument when given.
            (Default: ``None``)

    Returns:
        list[list[Hypothesis]]: for each sequence, its best ``nbest`` hypotheses, best first.
    """
    if beam_size < 1 or batch_size < 1:
        raise ValueError(f"beam_size and batch_size must be >= 1, got {beam_size} and {batch_size}")
    K, B = beam_size, batch_size
    limits = _per_sequence_limit(max_len, B)
    first = _first_tensor(state) if _first_tensor(state) is not None else _first_tensor(memory)
    device = first.device if first is not None else torch.device("cpu")

    active = list(range(B))  # the original index of each sequence still in the batch
    expanded = False  # whether state has K rows per sequence yet (one until the first step)
    memory_is_ours = False  # whether memory is our copy (after a compaction) rather than the caller's
    tokens = torch.full((B,), sos, dtype=torch.long, device=device)
    scores = torch.full((B, K), float("-inf"), device=device)
    scores[:, 0] = 0.0  # only the first beam is live at the start, so the K beams start distinct
    history = torch.empty(B * K, 0, dtype=torch.long, device=device)
    finished: list[list[Hypothesis]] = [[] for _ in range(B)]
    done = [False] * B
    beam_ids = torch.arange(K, device=device)
    # Attention weights stay where each step put them, with back-pointers, and are gathered for
    # the returned hypotheses only: reordering a (N, t, L) history would cost O(t) every step.
    step_weights: list[torch.Tensor] = []  # step s: (N_s, L), the weights behind token s of each row
    parents: list[torch.Tensor] = []  # step s: (N_s,), the row of step s - 1 that each row extends
    to_recorded: torch.Tensor | None = None  # rows now -> rows of the last recorded step, after a compaction
    ends_at: dict[int, tuple[int, int]] = {}  # id(hypothesis) -> (tokens, row of its last token's step)

    def hypothesis(row: int, score: float, is_finished: bool) -> Hypothesis:
        length = history.size(1) + int(is_finished)
        hyp = Hypothesis(history[row].tolist(), score, _normalize(score, length, length_penalty), is_finished)
        ends_at[id(hyp)] = (history.size(1), row if to_recorded is None else int(to_recorded[row]))
        return hyp

    for step in range(max(limits)):
        for i, b in enumerate(active):  # sequences that used up their length stop here
            if not done[b] and step >= limits[b]:
                done[b] = True
                if not finished[b]:
                    finished[b].append(hypothesis(i * K, float(scores[i, 0]), False))
        live = [i for i, b in enumerate(active) if not done[b]]
        if not live:
            break
        if len(active) - len(live) >= _COMPACT_FRACTION * len(active):  # drop the done sequences
            kept = torch.tensor(live, device=device)
            kept_rows = (kept[:, None] * K + beam_ids).view(-1)  # (B' * K,)
            state_rows = kept_rows if expanded else kept
            state, tokens = _select(state, state_rows), tokens.index_select(0, state_rows)
            # The first compaction copies the caller's memory (never changed in place); later ones
            # reuse that copy, in place on CPU, where a fresh buffer costs more than the copy.
            if memory is not None:
                memory = _keep_rows(memory, kept, in_place=memory_is_ours and device.type == "cpu")
                memory_is_ours = True
            scores, history = scores.index_select(0, kept), history.index_select(0, kept_rows)
            to_recorded = kept_rows
            active = [active[i] for i in live]
        n = len(active)

        if memory is None:
            log_probs, state, attention = step_fn(tokens, state)  # (N, V), ..., (N, L)
        else:
            log_probs, state, attention = step_fn(tokens, state, memory)
        vocab = log_probs.size(-1)
        # (B', K, 1) + (B', K or 1, V): before the first expansion every beam reads its sequence's row.
        candidates = (scores.view(n, K, 1) + log_probs.float().view(n, -1, vocab)).view(n, K * vocab)  # (B', K*V)
        top_scores, top_ids = candidates.topk(min(2 * K, K * vocab), dim=1)  # (B', 2K), sorted
        origin_beam, top_tokens = top_ids // vocab, top_ids % vocab
        origin_rows = (torch.arange(n, device=device) * K)[:, None] + origin_beam  # (B', 2K) rows of the B'*K batch
        ends = top_tokens == eos

        # Finished hypotheses: <eos> candidates that rank within the first K.
        rank = torch.arange(top_ids.size(1), device=device)[None, :]
        finishing = ends & (rank < K) & torch.isfinite(top_scores)
        if finishing.any():
            for i, j in finishing.nonzero().tolist():
                b = active[i]
                if done[b]:
                    continue
                row = int(origin_rows[i, j])
                finished[b].append(hypothesis(row, float(top_scores[i, j]), True))
                if len(finished[b]) >= K:
                    done[b] = True

        # Continuing beams: the first K candidates that do not end (there are at least K of 2K).
        continuing = ~ends
        keep = continuing & (continuing.cumsum(1) <= K)  # (B', 2K), exactly K per row
        pick = keep.nonzero()[:, 1].view(n, K)
        scores = top_scores.gather(1, pick)  # (B', K)
        rows = origin_rows.gather(1, pick).view(-1)  # (N,)
        tokens = top_tokens.gather(1, pick).view(-1)  # (N,)
        state_rows = rows if expanded else rows // K  # the first step ran one row per sequence
        state = _select(state, state_rows)
        expanded = True
        history = torch.cat([history.index_select(0, rows), tokens[:, None]], dim=1)
        if return_attention and attention is not None:
            step_weights.append(attention.index_select(0, state_rows).float())  # (N, L)
            parents.append(rows if to_recorded is None else to_recorded.index_select(0, rows))
        to_recorded = None

    for i, b in enumerate(active):
        if not finished[b]:  # nothing ever ended: the best unfinished hypothesis
            finished[b].append(hypothesis(i * K, float(scores[i, 0]), False))
    results = [sorted(hyps, key=lambda h: h.normalized_score, reverse=True)[: max(1, nbest)] for hyps in finished]
    if step_weights:
        _gather_attention([h for hyps in results for h in hyps], ends_at, step_weights, parents)
    return results


def _gather_attention(
    hyps: list[Hypothesis], ends_at: dict[int, tuple[int, int]], step_weights: list[torch.Tensor], parents: list[torch.Tensor]
) -> None:
    """Set each hypothesis' ``attention`` `(len(tokens), L)` by following its back-pointers."""
    device = step_weights[0].device
    lengths = torch.tensor([ends_at[id(h)][0] for h in hyps], device=device)  # (H,)
    last_rows = torch.tensor([ends_at[id(h)][1] for h in hyps], device=device)  # (H,)
    weights = torch.zeros(len(hyps), int(lengths.max()), step_weights[0].size(-1), device=device)  # (H, T, L)
    rows = last_rows.clone()
    for step in range(weights.size(1) - 1, -1, -1):  # all hypotheses walk back together
        rows = torch.where(lengths == step + 1, last_rows, rows)  # a hypothesis joins at its last token
        alive = (lengths > step).nonzero().squeeze(1)
        here = rows.index_select(0, alive)
        weights[alive, step] = step_weights[step].index_select(0, here)
        rows[alive] = parents[step].index_select(0, here)
    for h, length, w in zip(hyps, lengths.tolist(), weights):
        h.attention = w[:length]


def _first_tensor(nest: Any) -> torch.Tensor | None:
    found: list[torch.Tensor] = []
    tree_map(lambda x: found.append(x) if isinstance(x, torch.Tensor) else None, nest)
    return found[0] if found else None


@torch.no_grad()
def greedy_search(
    step_fn: StepFn, state: Any, batch_size: int, sos: int, eos: int, max_len: int, memory: Any = None
) -> list[list[int]]:
    """Arg-max decoding, the reference that ``beam_search(beam_size=1)`` must equal.

    ``memory``, when given, is passed to ``step_fn`` as its third argument, as in :func:`beam_search`.

    Returns:
        list[list[int]]: tokens of each sequence, without ``<sos>``/``<eos>``.
    """
    device = _first_tensor(state).device if _first_tensor(state) is not None else torch.device("cpu")
    tokens = torch.full((batch_size,), sos, dtype=torch.long, device=device)
    outputs: list[list[int]] = [[] for _ in range(batch_size)]
    alive = [True] * batch_size
    for _ in range(max_len):
        log_probs, state, _ = step_fn(tokens, state) if memory is None else step_fn(tokens, state, memory)
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
