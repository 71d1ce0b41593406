"""The recognizer's ``fit``, ``validate`` and ``test``: the shared LightningCLI with the recognizer's
links, and the callback that hands the training audio's statistics to the model. The
``speech-attend`` command (:mod:`speech_attend.cli`) imports this only for those commands, so
that transcribing never loads Lightning.
"""

from __future__ import annotations

import pytorch_lightning as pl

from shared.training.cli import AttendCLI, run_lightning
from speech_attend.train.datamodule import SpeechDataModule
from speech_attend.train.module import RecognizerModule

__all__ = ["DataToModel", "RecognizerCLI", "fit_validate_test"]


class DataToModel(pl.Callback):
    """What the recognizer and its data module take from each other when a run starts: the
    feature statistics (a new run only) and the longest utterance of the training audio go to the
    model (``fit``), and the model's shortest decodable clip (one listener frame) and, for a cache
    of its states, its frozen pretrained listener to the data module."""

    def setup(self, trainer: pl.Trainer, pl_module: RecognizerModule, stage: str) -> None:
        datamodule = trainer.datamodule
        if not isinstance(datamodule, SpeechDataModule):
            return
        datamodule.set_min_samples(pl_module.model.min_samples())  # a shorter clip is skipped and logged, not fatal
        if datamodule.feature_cache:
            model = pl_module.model
            if not model.pretrained:
                raise ValueError(
                    "data.feature_cache holds a pretrained listener's frozen states: set model.las.listener: pretrained"
                )
            datamodule.use_encoder(model.frozen_states, model.frozen_key())  # the states below its trainable blocks
        if stage == "fit":
            pl_module.set_longest_utterance(max(datamodule.training_durations()))

    def on_fit_start(self, trainer: pl.Trainer, pl_module: RecognizerModule) -> None:
        # After a resumed run's checkpoint is restored (it is not yet at setup), so its statistics are kept, not recomputed.
        datamodule = trainer.datamodule
        if isinstance(datamodule, SpeechDataModule):
            pl_module.set_feature_statistics(datamodule.statistics_batches(pl_module.hparams.statistics_utterances))


def _quote_default(parser, dest: str) -> None:
    """Show a string option's default in quotes in ``--help``: jsonargparse prints it bare, and
    the lone apostrophe of ``data.keep_punctuation`` read as a misprint, ``(default: ')``."""
    action = next(action for action in parser._actions if action.dest == dest)
    action.help = f'{action.help} (type: %(type)s, default: "%(default)s")'  # jsonargparse then adds neither


def _needs_references(consistency_weight: float) -> bool:
    """The training batches carry their references where the consistency loss reads them."""
    return consistency_weight > 0


class RecognizerCLI(AttendCLI):
    """The shared LightningCLI, with the model's sample rate linked into the data module."""

    def link_data_and_model(self, parser) -> None:
        parser.link_arguments("model.features.sample_rate", "data.sample_rate")
        parser.link_arguments("model.consistency_weight", "data.references", compute_fn=_needs_references)
        _quote_default(parser, "data.keep_punctuation")


def fit_validate_test(args: list[str]) -> None:
    """``speech-attend fit|validate|test ARGS``: the recognizer's LightningCLI run."""
    run_lightning(
        RecognizerCLI,
        RecognizerModule,
        SpeechDataModule,
        args,
        trainer_defaults={"callbacks": [DataToModel()], "use_distributed_sampler": False},  # the bucketed sampler shards itself
    )
