"""attend's attention core, shared by the captioner and the recognizer.

The four steps of attention live in four places: the query comes from the decoder, the
score from :mod:`shared.scoring`, the normalisation from :func:`shared.masks.masked_softmax`,
and the read from :mod:`shared.attention`. Beam search, vocabularies, metrics and plots sit
beside them. This package imports neither app.
"""

from .attention import Attention, Memory, MultiHeadAttention, hard_read, soft_read
from .beam_search import Hypothesis, beam_search, greedy_search
from .masks import causal_mask, combine_masks, lengths_to_mask, masked_softmax
from .reinforce import MovingAverageBaseline, ReinforceConfig, attention_entropy, reinforce_loss
from .scoring import (
    AdditiveScore,
    DotScore,
    GeneralScore,
    LocationAwareScore,
    ScaledDotScore,
    Score,
    build_score,
)
from .vocab import Vocabulary

__all__ = [
    "Attention", "Memory", "MultiHeadAttention", "hard_read", "soft_read",
    "Hypothesis", "beam_search", "greedy_search",
    "causal_mask", "combine_masks", "lengths_to_mask", "masked_softmax",
    "MovingAverageBaseline", "ReinforceConfig", "attention_entropy", "reinforce_loss",
    "AdditiveScore", "DotScore", "GeneralScore", "LocationAwareScore", "ScaledDotScore", "Score", "build_score",
    "Vocabulary",
]
