"""An exponential moving average of the weights (config key ``averaging``; off by default).

After every optimizer step the average moves a little towards the weights being trained:

    average <- decay * average + (1 - decay) * weights

so it is a mean over about ``1 / (1 - decay)`` of the last steps: the steps' noise (small batches,
a learning rate not yet near zero) averages out, while the optimizer goes on from the weights
themselves. Averaging the end of a run is standard in speech recipes (ESPnet averages its last
checkpoints; Polyak and Juditsky 1992 for the idea).

What a run does with it:

* validation (and so ``best.ckpt``) scores the average; training resumes from the weights;
* a checkpoint's ``state_dict`` holds the average, so ``validate``, ``test`` and ``export`` read
  it as any model; the trained weights travel beside it under ``trained_state_dict`` and are
  what ``fit --ckpt_path`` goes on from;
* only floating-point parameters are averaged; buffers (feature statistics, counters) are the
  trained model's own.

Lightning's ``EMAWeightAveraging`` is not used: it averages buffers too (the recognizer's
integer frame count among them) or, without them, swaps stale copies in at validation.

Across runs, :func:`uniform_soup` averages the weights of models fine-tuned from one start with
different seeds (a uniform "model soup", Wortsman et al. 2022):

    theta = (1 / K) * sum_k theta_k

Fine-tunes of one model stay in one basin of the loss, so their mean is a model too, and often
better than each; models trained apart from the start are not (their units are not aligned).
The soup of exported folders is their weights through :func:`uniform_soup`, written with
:func:`shared.io.model_files.export_folder` and the config they share.
"""

from __future__ import annotations

from typing import Any

import pytorch_lightning as pl
import torch
from pytorch_lightning.trainer.states import TrainerFn

__all__ = ["WeightAverage", "TRAINED_STATE", "uniform_soup"]

TRAINED_STATE = "trained_state_dict"  # checkpoint key: the weights the optimizer trains


class WeightAverage(pl.Callback):
    """Keep an exponential moving average of the module's parameters; validate and save it.

    Args:
        decay: the average's weight on its past at each step, in [0, 1); 0 turns averaging off.
            0.999 averages over about the last 1,000 steps.
        start_step: the optimizer step at which the average starts from the weights as they are
            (before it, the average is not kept: early weights are far from the end's).
    """

    def __init__(self, decay: float = 0.0, start_step: int = 0):
        if not 0.0 <= decay < 1.0:
            raise ValueError(f"averaging.decay {decay}: expected a number in [0, 1) (0 turns averaging off)")
        if start_step < 0:
            raise ValueError(f"averaging.start_step {start_step}: expected 0 or more")
        self.decay, self.start_step = decay, start_step
        self.average: dict[str, torch.Tensor] = {}  # parameter name -> its average; empty until start_step

    @property
    def enabled(self) -> bool:
        return self.decay > 0.0

    def _parameters(self, pl_module: pl.LightningModule) -> dict[str, torch.Tensor]:
        return {name: p for name, p in pl_module.named_parameters() if p.is_floating_point()}

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if not self.enabled or trainer.global_step < self.start_step:
            return
        parameters = self._parameters(pl_module)
        if not self.average:
            self.average = {name: p.detach().clone() for name, p in parameters.items()}
            return
        names = list(self.average)
        torch._foreach_lerp_([self.average[n] for n in names], [parameters[n].detach() for n in names], 1.0 - self.decay)

    def _swap(self, pl_module: pl.LightningModule) -> None:
        parameters = self._parameters(pl_module)
        with torch.no_grad():
            for name, average in self.average.items():
                trained = parameters[name].detach().clone()
                parameters[name].copy_(average)
                average.copy_(trained)

    def on_validation_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.average and trainer.state.fn == TrainerFn.FITTING:
            self._swap(pl_module)  # the average is scored; the trained weights wait in its place

    def on_validation_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.average and trainer.state.fn == TrainerFn.FITTING:
            self._swap(pl_module)

    def on_save_checkpoint(self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict[str, Any]) -> None:
        # Checkpoints are written between training steps, when the module holds the trained weights.
        if self.average:
            checkpoint[TRAINED_STATE] = checkpoint["state_dict"]
            checkpoint["state_dict"] = {**checkpoint["state_dict"], **{name: a.clone() for name, a in self.average.items()}}

    def on_load_checkpoint(self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict[str, Any]) -> None:
        if TRAINED_STATE not in checkpoint or trainer.state.fn != TrainerFn.FITTING:
            return
        # Lightning has loaded state_dict (the average) into the module: keep it as the average
        # (when averaging goes on) and put the trained weights back.
        if self.enabled:
            self.average = {name: p.detach().clone() for name, p in self._parameters(pl_module).items()}
        pl_module.load_state_dict(checkpoint[TRAINED_STATE])


def uniform_soup(state_dicts: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """The mean of ``K`` models' floating-point tensors; every other tensor (a counter) must be equal.

    Args:
        state_dicts (list of dict): the models' tensors, the same names and shapes in each.

    Returns:
        dict: name -> the mean (floating point, in the first model's dtype) or the shared value.

    Raises:
        ValueError: fewer than two models, different names or shapes, or unequal non-float tensors.
    """
    if len(state_dicts) < 2:
        raise ValueError(f"a soup needs at least two models, got {len(state_dicts)}")
    first = state_dicts[0]
    for k, other in enumerate(state_dicts[1:], start=2):
        if other.keys() != first.keys():
            different = sorted(other.keys() ^ first.keys())
            raise ValueError(f"model {k} has other weights than model 1 ({', '.join(different[:3])}): not the same architecture")
        for name, tensor in other.items():
            if tensor.shape != first[name].shape:
                raise ValueError(f"{name}: shape {tuple(tensor.shape)} in model {k}, {tuple(first[name].shape)} in model 1")
            if not tensor.is_floating_point() and not torch.equal(tensor, first[name]):
                raise ValueError(f"{name}: a non-float tensor that differs between model 1 and model {k}; it cannot be averaged")
    soup = {}
    for name, tensor in first.items():
        if tensor.is_floating_point():
            mean = torch.stack([s[name].double() for s in state_dicts]).mean(0)
            soup[name] = mean.to(tensor.dtype)
        else:
            soup[name] = tensor.clone()
    return soup
