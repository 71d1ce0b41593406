"""The captioner's ``fit``, ``validate`` and ``test``: the shared LightningCLI with the captioner's
links, and the callback that hands the encoder to a feature cache. The ``show-attend`` command
(:mod:`show_attend.cli`) imports this only for those commands, so that captioning never loads
Lightning.
"""

from __future__ import annotations

import pytorch_lightning as pl

from shared.training.cli import AttendCLI, run_lightning
from show_attend.data.readers import DataError
from show_attend.train.datamodule import CaptionDataModule
from show_attend.train.module import CaptionerModule

__all__ = ["EncoderToFeatureCache", "CaptionCLI", "fit_validate_test"]


class EncoderToFeatureCache(pl.Callback):
    """Hands the model's encoder to the data module, which caches its features (``data.feature_cache``)."""

    def setup(self, trainer: pl.Trainer, pl_module: CaptionerModule, stage: str) -> None:
        datamodule = trainer.datamodule
        if isinstance(datamodule, CaptionDataModule) and datamodule.feature_cache:
            if not pl_module.model.encoder.frozen:
                raise DataError(
                    "data.feature_cache needs a frozen encoder (model.encoder.fine_tune_blocks: 0, not the small CNN)"
                )
            datamodule.use_encoder(pl_module.model.encoder)


class CaptionCLI(AttendCLI):
    """The shared LightningCLI, with the data module's image size linked into the model too."""

    def link_data_and_model(self, parser) -> None:
        parser.link_arguments("data.image_size", "model.image_size")


def fit_validate_test(args: list[str]) -> None:
    """``show-attend fit|validate|test ARGS``: the captioner's LightningCLI run."""
    run_lightning(CaptionCLI, CaptionerModule, CaptionDataModule, args, trainer_defaults={"callbacks": [EncoderToFeatureCache()]})
