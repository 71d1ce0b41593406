"""Older captioner files read as today's: every change of what a checkpoint or an export holds, in one place.

A model file is read as it was saved; what an older layout holds is mapped here onto the current
one, so that every model this code saved still loads, and a run saved before a change resumes:

* weights, :func:`decoder_from_split_gates` (a load hook of the decoder): separate context and
  state gate weights as the shared LSTM step's one matrix.

The recognizer keeps its own in :mod:`speech_attend.model.migrations`. No Lightning here:
inference imports this module.
"""

from __future__ import annotations

import torch

__all__ = ["decoder_from_split_gates"]


def decoder_from_split_gates(state_dict: dict, prefix: str, *_) -> None:
    """Load-time key map (a ``load_state_dict`` pre-hook of :class:`show_attend.model.decoder.Decoder`)
    from the layout with separate context and state gate weights (``context_to_gates.weight``,
    ``hidden_to_gates.weight``) to the shared step's one ``lstm.weight``, the two side by side (the
    product the training pass already made)."""
    context, hidden = f"{prefix}context_to_gates.weight", f"{prefix}hidden_to_gates.weight"
    if context in state_dict and hidden in state_dict:
        state_dict[f"{prefix}lstm.weight"] = torch.cat([state_dict.pop(context), state_dict.pop(hidden)], 1)
