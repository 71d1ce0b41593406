"""Older recognizer files read as today's: every change of what a checkpoint or an export holds, in one place.

A model file is read as it was saved; what an older layout holds is mapped here onto the current
one, so that every model this code saved still loads, and a run saved before a change resumes:

* hyper-parameters, :func:`migrate_hyper_parameters` (both loaders, ``--ckpt_path`` and
  ``--init_from`` go through :func:`speech_attend.model.las.build_recognizer` or the module's hook):
  features saved before the DC and level steps existed keep those steps off;
* weights, :func:`speller_from_lstm_cells` (a load hook of the speller): the speller's
  ``nn.LSTMCell`` parameters as the shared LSTM step's;
* a resumed run's training state (the LightningModule's ``on_load_checkpoint``, on the plain
  checkpoint dict): the optimiser's moments of those ``nn.LSTMCell`` parameters
  (:func:`optimizer_states_from_lstm_cells`), and the training colour of a model that starts
  shrinking colours from weights saved without (:func:`training_colour_from_model`).

The captioner keeps its own in :mod:`show_attend.model.migrations`. No Lightning here: inference
imports this module.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from shared.io.model_files import CheckpointError

__all__ = [
    "migrate_hyper_parameters",
    "speller_from_lstm_cells",
    "optimizer_states_from_lstm_cells",
    "training_colour_from_model",
]

# Models saved before the DC and level steps existed: their feature settings lack these fields, and
# they must compute the features they were trained on.
_BEFORE_LEVEL_STEPS = {"remove_dc": False, "level_dbfs": None}


def migrate_hyper_parameters(saved: dict) -> dict:
    """A recognizer's saved hyper-parameters (a checkpoint's or an export's) in the current layout.

    Args:
        saved (dict): as saved; not changed.

    Returns:
        dict: a new dict; the keys it does not know pass as they are (the configs refuse them).
    """
    current = dict(saved)
    features = current.get("features")
    if isinstance(features, dict):
        features = {**_BEFORE_LEVEL_STEPS, **features}
        # The white-noise floor under the log-mel was an option no shipped model used; a model
        # saved with it off computes the same features without it.
        if features.pop("noise_floor_dbfs", None) is not None:
            raise ValueError("this model was trained with features.noise_floor_dbfs, which this version no longer computes")
        current["features"] = features
    return current


# ----------------------------------------------------------------------------- weights


def speller_from_lstm_cells(state_dict: dict, prefix: str, *_) -> None:
    """Load-time key map (a ``load_state_dict`` pre-hook of :class:`speech_attend.model.speller.Speller`)
    from the speller's ``nn.LSTMCell`` layout (``cells.{k}.weight_ih``, ``weight_hh``, ``bias_ih``,
    ``bias_hh``) to the shared step's: the first cell's character columns become ``embed_to_gates``
    (with both biases summed), the rest of each cell's input weights sit beside its recurrent ones
    in ``lstm.{k}.weight``. The values are the same sums."""
    if f"{prefix}cells.0.weight_ih" in state_dict:
        embedding_dim = state_dict[f"{prefix}embedding.weight"].size(1)
        state_dict.update(_from_lstm_cells(state_dict, prefix, embedding_dim, lambda ih, hh: ih + hh))


def _from_lstm_cells(tensors: dict, prefix: str, embedding_dim: int, join_biases: Callable) -> dict:
    """The shared step's tensors from the ``nn.LSTMCell`` layout's, popped from ``tensors``: the
    weights as :func:`speller_from_lstm_cells` maps them, the two biases joined by ``join_biases``
    (their sum for the values; either one for an optimiser's moments, as both get the same gradient)."""
    mapped, layer = {}, 0
    while f"{prefix}cells.{layer}.weight_ih" in tensors:
        old = {name: tensors.pop(f"{prefix}cells.{layer}.{name}") for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")}
        weight_ih, bias = old["weight_ih"], join_biases(old["bias_ih"], old["bias_hh"])
        if layer == 0:
            mapped[f"{prefix}embed_to_gates.weight"] = weight_ih[:, :embedding_dim].contiguous()
            mapped[f"{prefix}embed_to_gates.bias"] = bias
            weight_ih = weight_ih[:, embedding_dim:]
        else:
            mapped[f"{prefix}lstm.{layer}.bias"] = bias
        mapped[f"{prefix}lstm.{layer}.weight"] = torch.cat([weight_ih, old["weight_hh"]], 1)
        layer += 1
    return mapped


# ----------------------------------------------------------------------------- a resumed run's training state


def optimizer_states_from_lstm_cells(checkpoint: dict, parameter_names: list[str]) -> None:
    """Map an optimiser state saved with the speller's ``nn.LSTMCell`` parameters onto today's, in
    place (the weights themselves are mapped on load, :func:`speller_from_lstm_cells`): Adam's
    moments are split and joined as the weights are, in the order of today's parameters.

    Args:
        checkpoint (dict): a Lightning checkpoint of the recognizer's module (``model.`` keys).
        parameter_names (list of str): the module's parameter names, in its ``named_parameters`` order.

    Raises:
        CheckpointError: the optimiser state does not match the weights it was saved with.
    """
    prefix = "model.speller."
    state_dict = checkpoint.get("state_dict", {})
    if f"{prefix}cells.0.weight_ih" not in state_dict:
        return
    parameters = set(parameter_names)
    saved_names = [key for key in state_dict if key.startswith(f"{prefix}cells.") or key in parameters]
    embedding_dim = state_dict[f"{prefix}embedding.weight"].size(1)
    for optimizer in checkpoint.get("optimizer_states", []):
        groups = optimizer["param_groups"]
        if len(groups) != 1 or len(groups[0]["params"]) != len(saved_names):
            raise CheckpointError("--ckpt_path: the optimiser state does not match the model it was saved with")
        position = {index: k for k, index in enumerate(groups[0]["params"])}  # state key -> place in the group
        by_name = {saved_names[position[i]]: state for i, state in optimizer["state"].items()}
        step = max(state["step"] for state in by_name.values())  # every parameter is updated at every step
        moments = {field: {name: state[field] for name, state in by_name.items()} for field in ("exp_avg", "exp_avg_sq")}
        for tensors in moments.values():
            tensors.update(_from_lstm_cells(tensors, prefix, embedding_dim, lambda ih, hh: ih))  # both biases get one gradient
        optimizer["state"] = {
            i: {"step": step.clone(), "exp_avg": moments["exp_avg"][name], "exp_avg_sq": moments["exp_avg_sq"][name]}
            for i, name in enumerate(parameter_names)
            if name in moments["exp_avg"]
        }
        groups[0]["params"] = list(range(len(parameter_names)))


def training_colour_from_model(checkpoint: dict, colour: nn.Module | None) -> None:
    """A model that shrinks colours, started from weights saved without: its training colour starts
    uncomputed, in place (``fit`` computes it before the first step; see
    :class:`speech_attend.model.features.FeatureFrontend`).

    Args:
        checkpoint (dict): a Lightning checkpoint of the recognizer's module (``model.`` keys).
        colour (nn.Module or None): the model's ``frontend.colour`` (``None``: the model shrinks no colour).
    """
    state = checkpoint.get("state_dict", {})
    if colour is None or "model.frontend.colour.mean" in state:
        return
    for name, buffer in colour.named_buffers():
        state[f"model.frontend.colour.{name}"] = torch.zeros_like(buffer)
