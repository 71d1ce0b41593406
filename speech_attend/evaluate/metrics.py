"""Speech metrics: word and character error rates over a whole corpus.

Both go through jiwer and are corpus level: total edits divided by the total reference length,
not a mean of per-utterance rates, as published WERs are computed.

Two conditions of the same clips (clean and quiet, say) are compared by the ratio of their WERs,
which is the ratio of their total word edits; :func:`edit_ratio_interval` gives its paired
bootstrap interval (Bisani and Ney 2004), so that "within 10 % of clean" can be told from noise.
Two decodings of the same groups are compared by their mean WER over the groups;
:func:`mean_wer_difference_interval` gives the paired bootstrap interval of the difference.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence

import jiwer
import numpy as np

__all__ = [
    "word_error_rate",
    "char_error_rate",
    "speech_metrics",
    "utterance_word_edits",
    "edit_ratio_interval",
    "mean_wer",
    "mean_wer_difference_interval",
]


def _aligned(references: Sequence[str], hypotheses: Sequence[str]) -> tuple[list[str], list[str]]:
    """The two lists checked to pair up, each text's runs of whitespace as one space (so the CER
    does not depend on spacing)."""
    if isinstance(references, str) or isinstance(hypotheses, str):
        raise ValueError("references and hypotheses must be lists of strings, not strings.")
    if len(references) != len(hypotheses):
        raise ValueError(
            f"expected one hypothesis per reference, got {len(references)} references and {len(hypotheses)} hypotheses."
        )
    return [" ".join(text.split()) for text in references], [" ".join(text.split()) for text in hypotheses]


def _corpus_error_rate(
    references: Sequence[str],
    hypotheses: Sequence[str],
    process: Callable,
    units: Callable[[str], int],
) -> float:
    """Total edits over total reference units, with jiwer doing the alignments."""
    refs, hyps = _aligned(references, hypotheses)
    # An empty reference has nothing to substitute or delete: all its hypothesis is insertions.
    edits = sum(units(hyp) for ref, hyp in zip(refs, hyps) if not ref)
    length = 0
    pairs = [(ref, hyp) for ref, hyp in zip(refs, hyps) if ref]
    if pairs:
        out = process([ref for ref, _ in pairs], [hyp for _, hyp in pairs])
        edits += out.substitutions + out.deletions + out.insertions
        length += out.hits + out.substitutions + out.deletions
    if length == 0:
        raise ValueError("every reference is empty, so the error rate is undefined.")
    return edits / length


def word_error_rate(references: Sequence[str], hypotheses: Sequence[str]) -> float:
    """Corpus word error rate: (substitutions + deletions + insertions) / reference words.

    Words are split on whitespace; text is compared as given, so normalise case and
    punctuation the same way on both sides first. An empty hypothesis counts all its
    reference's words as deletions; an empty reference adds its hypothesis's words as
    insertions and nothing to the denominator. The rate can exceed 1.

    Args:
        references (list[str]): the reference transcripts.
        hypotheses (list[str]): the recognised transcripts, aligned with ``references``.

    Returns:
        float: the WER (0 is perfect).

    Raises:
        ValueError: when the lists differ in length or every reference is empty.
    """
    return _corpus_error_rate(references, hypotheses, jiwer.process_words, lambda s: len(s.split()))


def char_error_rate(references: Sequence[str], hypotheses: Sequence[str]) -> float:
    """Corpus character error rate; spaces between words count as characters.

    Same conventions as :func:`word_error_rate`, over characters (runs of whitespace count as
    one space; leading and trailing whitespace is ignored).

    Args:
        references (list[str]): the reference transcripts.
        hypotheses (list[str]): the recognised transcripts, aligned with ``references``.

    Returns:
        float: the CER (0 is perfect).

    Raises:
        ValueError: when the lists differ in length or every reference is empty.
    """
    return _corpus_error_rate(references, hypotheses, jiwer.process_characters, len)


def speech_metrics(references: Sequence[str], hypotheses: Sequence[str]) -> dict[str, float]:
    """Both speech metrics: ``{"wer": ..., "cer": ...}`` (see :func:`word_error_rate`)."""
    return {
        "wer": word_error_rate(references, hypotheses),
        "cer": char_error_rate(references, hypotheses),
    }


def utterance_word_edits(references: Sequence[str], hypotheses: Sequence[str]) -> list[int]:
    """Each utterance's word edits (substitutions + deletions + insertions), in order: the terms
    that :func:`word_error_rate` sums before it divides by the reference words.

    Args:
        references (list[str]): the reference transcripts.
        hypotheses (list[str]): the recognised transcripts, aligned with ``references``.

    Returns:
        list[int]: one count per utterance (an empty reference counts its hypothesis's words).
    """
    edits = []
    for ref, hyp in zip(*_aligned(references, hypotheses)):
        if not ref:
            edits.append(len(hyp.split()))
            continue
        out = jiwer.process_words(ref, hyp)
        edits.append(out.substitutions + out.deletions + out.insertions)
    return edits


def edit_ratio_interval(
    base_edits: Sequence[int], other_edits: Sequence[int], level: float = 0.95, draws: int = 2000, seed: int = 0
) -> tuple[float, float]:
    """Paired bootstrap interval of ``sum(other_edits) / sum(base_edits)``: the WER of one condition
    over another's on the same utterances (the same references, so the same denominator).

    Utterances are drawn with replacement ``draws`` times, the same draw for both conditions; the
    interval is the ratio's central ``level`` share over the draws (percentile bootstrap).

    Args:
        base_edits (list[int]): each utterance's word edits in the reference condition (clean).
        other_edits (list[int]): the same utterances' word edits in the other condition.
        level (float, optional): coverage of the interval. (Default: ``0.95``)
        draws (int, optional): bootstrap resamples. (Default: ``2000``)
        seed (int, optional): seed of the resampling. (Default: ``0``)

    Returns:
        tuple[float, float]: the interval's low and high ends.
    """
    base, other = np.asarray(base_edits, dtype=np.float64), np.asarray(other_edits, dtype=np.float64)
    if base.shape != other.shape or base.ndim != 1 or base.size == 0:
        raise ValueError(f"expected two equal, non-empty lists of edit counts, got {base.size} and {other.size}")
    if base.sum() == 0:
        raise ValueError("the base condition has no edits, so the ratio is undefined")
    picks = np.random.default_rng(seed).integers(0, base.size, size=(draws, base.size))  # (draws, utterances)
    ratios = other[picks].sum(1) / np.maximum(base[picks].sum(1), 1e-12)
    tail = (1.0 - level) / 2 * 100
    low, high = np.percentile(ratios, [tail, 100 - tail])
    return float(low), float(high)


def mean_wer(
    edits: Mapping[str, Sequence[int]], words: Mapping[str, Sequence[int]], draw: Mapping[str, Sequence[int]] | None = None
) -> float:
    """The mean over groups of each group's WER (its word edits over its reference words).

    Args:
        edits (dict[str, list[int]]): each group's per-utterance word edits (:func:`utterance_word_edits`).
        words (dict[str, list[int]]): each group's per-utterance reference words, aligned with ``edits``.
        draw (dict[str, list[int]] or None, optional): the utterances drawn from each group (indices,
            repeats allowed); ``None``: every utterance once. (Default: ``None``)
    """
    total = 0.0
    for group in edits:
        picked = draw[group] if draw else range(len(edits[group]))
        total += sum(edits[group][i] for i in picked) / max(1, sum(words[group][i] for i in picked))
    return total / len(edits)


def mean_wer_difference_interval(
    base: Mapping[str, Sequence[int]],
    other: Mapping[str, Sequence[int]],
    words: Mapping[str, Sequence[int]],
    draws: int = 1000,
    seed: int = 0,
) -> tuple[float, float]:
    """95 % paired bootstrap interval of ``mean_wer(other) - mean_wer(base)``: two decodings of the same
    groups, each group's utterances drawn with replacement, the same draw for both.

    Args:
        base (dict[str, list[int]]): each group's per-utterance word edits under the base decoding.
        other (dict[str, list[int]]): the same under the other decoding.
        words (dict[str, list[int]]): each group's per-utterance reference words.
        draws (int, optional): bootstrap resamples. (Default: ``1000``)
        seed (int, optional): seed of the resampling. (Default: ``0``)

    Returns:
        tuple[float, float]: the interval's low and high ends.
    """
    rng = random.Random(seed)
    diffs = []
    for _ in range(draws):
        draw = {g: [rng.randrange(len(base[g])) for _ in base[g]] for g in base}
        diffs.append(mean_wer(other, words, draw) - mean_wer(base, words, draw))
    diffs.sort()
    return diffs[int(0.025 * draws)], diffs[int(0.975 * draws) - 1]
