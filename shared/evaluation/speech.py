"""Speech metrics: word and character error rates over a whole corpus.

Both go through jiwer and are corpus level: total edits divided by the total reference length,
not a mean of per-utterance rates, as published WERs are computed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import jiwer

__all__ = ["word_error_rate", "char_error_rate", "speech_metrics"]


def _corpus_error_rate(
    references: Sequence[str],
    hypotheses: Sequence[str],
    process: Callable,
    units: Callable[[str], int],
) -> float:
    """Total edits over total reference units, with jiwer doing the alignments."""
    if isinstance(references, str) or isinstance(hypotheses, str):
        raise ValueError("references and hypotheses must be lists of strings, not strings.")
    if len(references) != len(hypotheses):
        raise ValueError(
            f"expected one hypothesis per reference, got {len(references)} references "
            f"and {len(hypotheses)} hypotheses."
        )
    # Runs of whitespace count as one space, so the CER does not depend on spacing.
    refs = [" ".join(text.split()) for text in references]
    hyps = [" ".join(text.split()) for text in hypotheses]
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
