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

A step function that sums several scorers (shallow fusion) may return a fourth element,
``parts``: a dict of named `(N, V)` log-probabilities, one per scorer. Each hypothesis then
keeps every part's log-probability of each of its tokens (``Hypothesis.part_scores``, the
``<eos>`` included where it finished), so a rescoring of the n-best reads each scorer's share
without running any scorer again.

Bookkeeping follows the usual recipe: of the top ``2K`` candidates, those ending in ``<eos>``
that rank within the first ``K`` become finished hypotheses, and the best ``K`` that do not end
continue. A sequence is done when it has ``K`` finished hypotheses or reaches its maximum
length; if none ever finished, its best unfinished hypothesis is returned. With ``K = 1`` this is
exactly greedy decoding.

Tokens in ``never`` (a vocabulary's ``<pad>`` and ``<sos>``, which no output holds) are never
chosen: their log-probability is -inf at every step, so no hypothesis spends a step on them.

With ``max_repeats = R``, a hypothesis whose last ``R`` tokens are one token repeated may only
end: its next token is ``<eos>`` (at its own probability), so a model that loops ("big big big
...") stops there instead of filling ``max_len``, and a looping beam falls behind the others.

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

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch
from torch.utils._pytree import tree_map

__all__ = ["Hypothesis", "beam_search", "greedy_search", "length_normalized"]

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
        normalized_score (float): :func:`length_normalized` ``score``; what hypotheses are ranked by.
        finished (bool): whether the hypothesis ended with ``<eos>``.
        attention (torch.Tensor or None): `(len(tokens), L)`, the weights used for each token.
        token_scores (list[float] or None): the log-probability of each token (the ``<eos>``
            not included), as the search scored it; they sum to ``score`` less the ``<eos>``'s.
        part_scores (dict of str to list[float] or None): with a step function that returns
            ``parts``, each part's log-probability of each token, the ``<eos>`` included where
            the hypothesis finished; ``None`` otherwise.
    """

    tokens: list[int]
    score: float
    normalized_score: float
    finished: bool
    attention: torch.Tensor | None = None
    token_scores: list[float] | None = None
    part_scores: dict[str, list[float]] | None = None


def length_normalized(score: float, length: int, length_penalty: float) -> float:
    """``score / length ** length_penalty``, the score hypotheses are ranked by.

    ``length`` counts the tokens scored (an ``<eos>`` included). A penalty of 0 ranks by the
    total log-probability, which favours short outputs; 1 ranks by the mean per token. A
    hypothesis of no tokens keeps its score.
    """
    return score / (length**length_penalty) if length_penalty and length else score


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
    costs more than the copy itself (page faults). Moving down in ascending order is safe, as
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


class _Ended(NamedTuple):
    """A hypothesis taken out of the search, and where its attention weights were recorded."""

    hypothesis: Hypothesis
    length: int  # tokens recorded for it
    row: int  # the row of its last token in the weights recorded at step ``length - 1``


class _BeamSearch:
    """The state of one batched beam search: ``N = B' * K`` rows of live hypotheses (``B'``
    sequences still in the batch), advanced a step at a time (see :func:`beam_search`).

    Each step of the search is a named method: :meth:`retire` ends the sequences that reached
    their length, :meth:`compact` drops done sequences from the batch, :meth:`expand` runs the
    model and keeps the best candidates, :meth:`finish` returns every sequence's best hypotheses.
    """

    def __init__(
        self,
        step_fn: StepFn,
        state: Any,
        memory: Any,
        batch_size: int,
        beam_size: int,
        sos: int,
        eos: int,
        limits: list[int],
        length_penalty: float,
        keep_attention: bool,
        must_end: bool,
        max_repeats: int | None = None,
        never: tuple[int, ...] = (),
    ):
        self.step_fn, self.state, self.memory = step_fn, state, memory
        self.K, self.eos, self.limits, self.length_penalty = beam_size, eos, limits, length_penalty
        self.must_end, self.max_repeats = must_end, max_repeats
        self.keep_attention = keep_attention
        first = _first_tensor(state) if _first_tensor(state) is not None else _first_tensor(memory)
        self.device = device = first.device if first is not None else torch.device("cpu")
        self.never = torch.tensor(never, dtype=torch.long, device=device) if never else None  # tokens no hypothesis holds
        self.active = list(range(batch_size))  # the original index of each sequence still in the batch
        self.expanded = False  # whether state has K rows per sequence yet (one until the first step)
        self.memory_is_ours = False  # whether memory is our copy (after a compaction) rather than the caller's
        self.tokens = torch.full((batch_size,), sos, dtype=torch.long, device=device)
        self.scores = torch.full((batch_size, beam_size), float("-inf"), device=device)
        self.scores[:, 0] = 0.0  # only the first beam is live at the start, so the K beams start distinct
        self.history = torch.empty(batch_size * beam_size, 0, dtype=torch.long, device=device)
        self.token_scores = torch.empty(batch_size * beam_size, 0, device=device)  # (N, t): each token's log-probability
        self.part_history: dict[str, torch.Tensor] | None = None  # name -> (N, t), with a step function's parts
        self.ended: list[list[_Ended]] = [[] for _ in range(batch_size)]
        self.done = [False] * batch_size
        self.beam_ids = torch.arange(beam_size, device=device)
        # Attention weights stay where each step put them, with back-pointers, and are gathered for
        # the returned hypotheses only: reordering a (N, t, L) history would cost O(t) every step.
        self.step_weights: list[torch.Tensor] = []  # step s: (N_s, L), the weights behind token s of each row
        self.parents: list[torch.Tensor] = []  # step s: (N_s,), the row of step s - 1 that each row extends
        self.to_recorded: torch.Tensor | None = None  # rows now -> rows of the last recorded step, after a compaction

    def _end(self, b: int, row: int, score: float, finished: bool, last_parts: dict[str, float] | None = None) -> None:
        """Take row ``row`` of the live hypotheses out of the search as one of sequence ``b``'s results
        (``last_parts``: each part's log-probability of the ``<eos>`` it finished with)."""
        length = self.history.size(1)
        normalized = length_normalized(score, length + int(finished), self.length_penalty)
        parts = None
        if self.part_history is not None:
            parts = {
                name: history[row].tolist() + ([last_parts[name]] if last_parts else [])
                for name, history in self.part_history.items()
            }
        hypothesis = Hypothesis(
            self.history[row].tolist(),
            score,
            normalized,
            finished,
            token_scores=self.token_scores[row].tolist(),
            part_scores=parts,
        )
        recorded_row = row if self.to_recorded is None else int(self.to_recorded[row])
        self.ended[b].append(_Ended(hypothesis, length, recorded_row))

    def retire(self, step: int) -> bool:
        """End the sequences that used up their length (with their best beam if nothing finished);
        whether any sequence is still live."""
        for i, b in enumerate(self.active):
            if not self.done[b] and step >= self.limits[b]:
                self.done[b] = True
                if not self.ended[b]:
                    self._end(b, i * self.K, float(self.scores[i, 0]), False)
        return not all(self.done[b] for b in self.active)

    def compact(self) -> None:
        """Drop the done sequences' rows once they are a quarter of the batch."""
        live = [i for i, b in enumerate(self.active) if not self.done[b]]
        if len(self.active) - len(live) < _COMPACT_FRACTION * len(self.active):
            return
        kept = torch.tensor(live, device=self.device)
        kept_rows = (kept[:, None] * self.K + self.beam_ids).view(-1)  # (B' * K,)
        state_rows = kept_rows if self.expanded else kept
        self.state, self.tokens = _select(self.state, state_rows), self.tokens.index_select(0, state_rows)
        # The first compaction copies the caller's memory (never changed in place); later ones
        # reuse that copy, in place on CPU, where a fresh buffer costs more than the copy.
        if self.memory is not None:
            in_place = self.memory_is_ours and self.device.type == "cpu"
            self.memory, self.memory_is_ours = _keep_rows(self.memory, kept, in_place), True
        self.scores, self.history = self.scores.index_select(0, kept), self.history.index_select(0, kept_rows)
        self.token_scores = self.token_scores.index_select(0, kept_rows)
        if self.part_history is not None:
            self.part_history = {name: h.index_select(0, kept_rows) for name, h in self.part_history.items()}
        self.to_recorded = kept_rows
        self.active = [self.active[i] for i in live]

    def expand(self, step: int) -> None:
        """One model step for every live row; of each sequence's top ``2K`` candidates, those
        ending in ``<eos>`` that rank within the first ``K`` end as finished hypotheses, and the
        best ``K`` that do not end continue."""
        K, n = self.K, len(self.active)
        if self.memory is None:
            out = self.step_fn(self.tokens, self.state)
        else:
            out = self.step_fn(self.tokens, self.state, self.memory)
        log_probs, self.state, attention = out[:3]  # (N, V), ..., (N, L)
        parts = out[3] if len(out) > 3 else None  # name -> (N, V)
        vocab = log_probs.size(-1)
        if self.never is not None:
            log_probs = log_probs.index_fill(1, self.never, float("-inf"))
        ending = None  # (N,): rows that may only end, <eos> keeping its own probability
        if self.must_end:  # a sequence's last step
            last = torch.tensor([self.limits[b] == step + 1 for b in self.active], device=self.device)  # (B',)
            ending = last.repeat_interleave(log_probs.size(0) // n)  # (N,)
        if self.max_repeats and self.history.size(1) >= self.max_repeats:  # (rows match log_probs once expanded)
            recent = self.history[:, -self.max_repeats :]  # (N, R)
            looping = (recent == recent[:, :1]).all(1)  # (N,): one token R times
            ending = looping if ending is None else ending | looping
        if ending is not None and ending.any():
            not_eos = torch.arange(vocab, device=self.device) != self.eos  # (V,)
            log_probs = log_probs.masked_fill(ending[:, None] & not_eos[None, :], float("-inf"))
        # (B', K, 1) + (B', K or 1, V): before the first expansion every beam reads its sequence's row.
        candidates = (self.scores.view(n, K, 1) + log_probs.float().view(n, -1, vocab)).view(n, K * vocab)  # (B', K*V)
        top_scores, top_ids = candidates.topk(min(2 * K, K * vocab), dim=1)  # (B', 2K), sorted
        origin_beam, top_tokens = top_ids // vocab, top_ids % vocab
        origin_rows = (torch.arange(n, device=self.device) * K)[:, None] + origin_beam  # (B', 2K) rows of the B'*K batch
        top_token_scores = top_scores - self.scores.gather(1, origin_beam)  # (B', 2K): the new token's own log-probability
        top_parts = {}  # name -> (B', 2K): each part's log-probability of each candidate's new token
        if parts is not None:
            step_rows = origin_rows if self.expanded else origin_rows // K  # the rows of log_probs the candidates come from
            top_parts = {name: part.float()[step_rows, top_tokens] for name, part in parts.items()}
            if self.part_history is None:
                self.part_history = {name: self.token_scores.new_empty(n * K, 0) for name in parts}
        ends = top_tokens == self.eos

        rank = torch.arange(top_ids.size(1), device=self.device)[None, :]
        finishing = ends & (rank < K) & torch.isfinite(top_scores)
        if finishing.any():
            for i, j in finishing.nonzero().tolist():
                b = self.active[i]
                if self.done[b]:
                    continue
                self._end(
                    b,
                    int(origin_rows[i, j]),
                    float(top_scores[i, j]),
                    True,
                    {name: float(p[i, j]) for name, p in top_parts.items()},
                )
                self.done[b] = len(self.ended[b]) >= K

        continuing = ~ends
        keep = continuing & (continuing.cumsum(1) <= K)  # (B', 2K), exactly K per row (at least K of 2K go on)
        pick = keep.nonzero()[:, 1].view(n, K)
        self.scores = top_scores.gather(1, pick)  # (B', K)
        rows = origin_rows.gather(1, pick).view(-1)  # (N,)
        self.tokens = top_tokens.gather(1, pick).view(-1)  # (N,)
        state_rows = rows if self.expanded else rows // K  # the first step ran one row per sequence
        self.state = _select(self.state, state_rows)
        self.expanded = True
        self.history = torch.cat([self.history.index_select(0, rows), self.tokens[:, None]], dim=1)
        self.token_scores = torch.cat(
            [self.token_scores.index_select(0, rows), top_token_scores.gather(1, pick).view(-1, 1)], dim=1
        )
        if self.part_history is not None:
            self.part_history = {
                name: torch.cat([h.index_select(0, rows), top_parts[name].gather(1, pick).view(-1, 1)], dim=1)
                for name, h in self.part_history.items()
            }
        if self.keep_attention and attention is not None:
            self.step_weights.append(attention.index_select(0, state_rows).float())  # (N, L)
            self.parents.append(rows if self.to_recorded is None else self.to_recorded.index_select(0, rows))
        self.to_recorded = None

    def finish(self, nbest: int) -> list[list[Hypothesis]]:
        """Every sequence's best ``nbest`` hypotheses, best first, with their attention."""
        for i, b in enumerate(self.active):
            if not self.ended[b]:  # nothing ever ended: the best unfinished hypothesis
                self._end(b, i * self.K, float(self.scores[i, 0]), False)
        best = [sorted(ended, key=lambda e: e.hypothesis.normalized_score, reverse=True)[: max(1, nbest)] for ended in self.ended]
        if self.step_weights:
            _gather_attention([e for ended in best for e in ended], self.step_weights, self.parents)
        return [[e.hypothesis for e in ended] for ended in best]


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
    must_end: bool = False,
    max_repeats: int | None = None,
    never: tuple[int, ...] = (),
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
        length_penalty (float, optional): alpha of :func:`length_normalized` when ranking
            finished hypotheses; 0 ranks by total log-probability, 1 by the per-token mean.
        nbest (int, optional): hypotheses returned per sequence (at most ``K``). (Default: ``1``)
        return_attention (bool, optional): keep each step's attention weights. (Default: ``True``)
        memory (optional): nest of tensors with first dimension ``B``, shared by the ``K`` beams
            of each sequence; passed to ``step_fn`` as its third argument when given.
            (Default: ``None``)
        must_end (bool, optional): a sequence's last step (its ``max_len``-th) may only be
            ``<eos>``, so every hypothesis ends within ``max_len`` steps and holds at most
            ``max_len - 1`` tokens; otherwise a sequence that never ends returns its best
            unfinished hypothesis of ``max_len`` tokens. (Default: ``False``)
        max_repeats (int or None, optional): a hypothesis whose last ``max_repeats`` tokens
            are all one token may only end (``<eos>``); ``None`` lets tokens repeat without
            limit. At least 2. (Default: ``None``)
        never (tuple of int, optional): tokens never chosen (``<pad>``, ``<sos>``); not ``eos``.
            (Default: ``()``)

    Returns:
        list[list[Hypothesis]]: for each sequence, its best ``nbest`` hypotheses, best first.
    """
    if beam_size < 1 or batch_size < 1:
        raise ValueError(f"beam_size and batch_size must be >= 1, got {beam_size} and {batch_size}")
    if max_repeats is not None and max_repeats < 2:
        raise ValueError(f"max_repeats must be None or >= 2 (the tokens in a row that end a hypothesis), got {max_repeats}")
    _check_never(never, eos)
    limits = _per_sequence_limit(max_len, batch_size)
    search = _BeamSearch(
        step_fn,
        state,
        memory,
        batch_size,
        beam_size,
        sos,
        eos,
        limits,
        length_penalty,
        return_attention,
        must_end,
        max_repeats,
        tuple(never),
    )
    for step in range(max(limits)):
        if not search.retire(step):
            break
        search.compact()
        search.expand(step)
    return search.finish(nbest)


def _check_never(never: tuple[int, ...], eos: int) -> None:
    if eos in never:
        raise ValueError(f"never must not hold the end token {eos}: every hypothesis needs a way to end")


def _gather_attention(ended: list[_Ended], step_weights: list[torch.Tensor], parents: list[torch.Tensor]) -> None:
    """Set each hypothesis' ``attention`` `(len(tokens), L)` by following its back-pointers."""
    device = step_weights[0].device
    lengths = torch.tensor([e.length for e in ended], device=device)  # (H,)
    last_rows = torch.tensor([e.row for e in ended], device=device)  # (H,)
    weights = torch.zeros(len(ended), int(lengths.max()), step_weights[0].size(-1), device=device)  # (H, T, L)
    rows = last_rows.clone()
    for step in range(weights.size(1) - 1, -1, -1):  # all hypotheses walk back together
        rows = torch.where(lengths == step + 1, last_rows, rows)  # a hypothesis joins at its last token
        alive = (lengths > step).nonzero().squeeze(1)
        here = rows.index_select(0, alive)
        weights[alive, step] = step_weights[step].index_select(0, here)
        rows[alive] = parents[step].index_select(0, here)
    for e, length, w in zip(ended, lengths.tolist(), weights):
        e.hypothesis.attention = w[:length]


def _first_tensor(nest: Any) -> torch.Tensor | None:
    found: list[torch.Tensor] = []
    tree_map(lambda x: found.append(x) if isinstance(x, torch.Tensor) else None, nest)
    return found[0] if found else None


@torch.no_grad()
def greedy_search(
    step_fn: StepFn,
    state: Any,
    batch_size: int,
    sos: int,
    eos: int,
    max_len: int,
    memory: Any = None,
    max_repeats: int | None = None,
    never: tuple[int, ...] = (),
) -> list[list[int]]:
    """Arg-max decoding, the reference that ``beam_search(beam_size=1)`` must equal.

    ``memory``, when given, is passed to ``step_fn`` as its third argument; ``max_repeats`` ends a
    sequence whose last ``max_repeats`` tokens are one token and ``never`` lists tokens never
    chosen, as in :func:`beam_search`.

    Returns:
        list[list[int]]: tokens of each sequence, without ``<sos>``/``<eos>``.
    """
    _check_never(never, eos)
    device = _first_tensor(state).device if _first_tensor(state) is not None else torch.device("cpu")
    never_ids = torch.tensor(never, dtype=torch.long, device=device) if never else None
    tokens = torch.full((batch_size,), sos, dtype=torch.long, device=device)
    outputs: list[list[int]] = [[] for _ in range(batch_size)]
    alive = [True] * batch_size
    for _ in range(max_len):
        log_probs, state, _ = step_fn(tokens, state) if memory is None else step_fn(tokens, state, memory)
        if never_ids is not None:
            log_probs = log_probs.index_fill(1, never_ids, float("-inf"))
        tokens = log_probs.argmax(-1)
        for b, token in enumerate(tokens.tolist()):
            if alive[b]:
                repeats = max_repeats and len(outputs[b]) >= max_repeats and len(set(outputs[b][-max_repeats:])) == 1
                if token == eos or repeats:  # a sequence that repeats one token may only end
                    alive[b] = False
                else:
                    outputs[b].append(token)
        if not any(alive):
            break
    return outputs
