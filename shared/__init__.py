"""attend's attention core, shared by the captioner and the recognizer.

The four steps of attention live in four places: the query comes from the decoder, the
score from :mod:`shared.scoring`, the normalisation from :func:`shared.masks.masked_softmax`,
and the read from :mod:`shared.attention`. Beside them: :mod:`shared.beam_search`,
:mod:`shared.reinforce` (hard attention's training signal), :mod:`shared.vocabulary` and
:mod:`shared.data_files` (the manifests and Hugging Face folders both apps read).

The layers above the core, each importing only those below it::

    shared (this core)  <-  shared.evaluation (metrics, plots)  <-  shared.training (Lightning plumbing)
                        <-  show_attend, speech_attend (the apps)  <-  scripts/

This package imports neither app, and its top level imports no Lightning.
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
    NoScore,
    ScaledDotScore,
    Score,
    build_score,
)
from .vocabulary import Vocabulary

__all__ = [
    "Attention",
    "Memory",
    "MultiHeadAttention",
    "hard_read",
    "soft_read",
    "Hypothesis",
    "beam_search",
    "greedy_search",
    "causal_mask",
    "combine_masks",
    "lengths_to_mask",
    "masked_softmax",
    "MovingAverageBaseline",
    "ReinforceConfig",
    "attention_entropy",
    "reinforce_loss",
    "AdditiveScore",
    "DotScore",
    "GeneralScore",
    "LocationAwareScore",
    "NoScore",
    "ScaledDotScore",
    "Score",
    "build_score",
    "Vocabulary",
]
