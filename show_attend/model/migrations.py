"""Older captioner files read as today's: every change of what a checkpoint or an export holds, in one place.

A model file is read as it was saved; what an older layout holds is mapped here onto the current
one, so that every model this code saved still loads, and a run saved before a change resumes:

* hyper-parameters, :func:`migrate_hyper_parameters` (both loaders, ``--ckpt_path`` and
  ``--init_from`` go through :func:`show_attend.model.captioner.build_captioner` or the module's
  hook): the decoding settings saved beside the network's (``beam_size``, ``max_decode_length``,
  ``length_penalty``, ``max_repeats``) gathered under ``decoding``, as the recognizer saves its own;
* weights, :func:`decoder_from_split_gates` (a load hook of the decoder): separate context and
  state gate weights as the shared LSTM step's one matrix.

The recognizer keeps its own in :mod:`speech_attend.model.migrations`. No Lightning here:
inference imports this module.
"""

from __future__ import annotations

import torch

__all__ = ["migrate_hyper_parameters", "decoder_from_split_gates"]

# Decoding settings saved beside the network's, and their names under ``decoding``.
_DECODING_BESIDE = {
    "beam_size": "beam_size",
    "max_decode_length": "max_length",
    "length_penalty": "length_penalty",
    "max_repeats": "max_repeats",
}


def migrate_hyper_parameters(saved: dict) -> dict:
    """A captioner's saved hyper-parameters (a checkpoint's or an export's) in the current layout.

    Args:
        saved (dict): as saved; not changed.

    Returns:
        dict: a new dict; the keys it does not know pass as they are (the configs refuse them).
    """
    current = {key: value for key, value in saved.items() if key not in _DECODING_BESIDE}
    beside = {name: saved[key] for key, name in _DECODING_BESIDE.items() if key in saved}
    if beside:  # a setting given in both places is the newer layout's
        current["decoding"] = {**beside, **(saved.get("decoding") or {})}
    return current


# ----------------------------------------------------------------------------- weights


def decoder_from_split_gates(state_dict: dict, prefix: str, *_) -> None:
    """Load-time key map (a ``load_state_dict`` pre-hook of :class:`show_attend.model.decoder.Decoder`)
    from the layout with separate context and state gate weights (``context_to_gates.weight``,
    ``hidden_to_gates.weight``) to the shared step's one ``lstm.weight``, the two side by side (the
    product the training pass already made)."""
    context, hidden = f"{prefix}context_to_gates.weight", f"{prefix}hidden_to_gates.weight"
    if context in state_dict and hidden in state_dict:
        state_dict[f"{prefix}lstm.weight"] = torch.cat([state_dict.pop(context), state_dict.pop(hidden)], 1)
