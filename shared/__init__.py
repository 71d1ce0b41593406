"""attend's attention core, shared by the captioner and the recognizer.

The four steps of attention live in four places: the query comes from the decoder, the
score from :mod:`shared.scoring`, the normalisation from :func:`shared.masks.masked_softmax`,
and the read from :mod:`shared.attention`. Beside them: :mod:`shared.beam_search`,
:mod:`shared.reinforce` (hard attention's training signal) and :mod:`shared.vocabulary`.

The core and the layers on it, each importing only those above it in this list::

    shared                       the attention core (this package's own modules)
    shared.io                    what the programs read and write: data files, model files,
                                 devices, the command-line frame; no Lightning
    shared.evaluation            what both apps measure and plot
    shared.training              the Lightning plumbing: CLI base, LightningModule base, checkpoints
    show_attend, speech_attend   the apps

This package imports neither app, and only :mod:`shared.training` imports Lightning.
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
