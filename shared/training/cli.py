"""The LightningCLI both apps build on: ``fit``, ``validate`` and ``test`` with one run layout.

:class:`AttendCLI` adds to Lightning's CLI what both apps need, so an app's own CLI only links
its data module to its model:

* the vocabulary: the data module's (built from the training text) is linked into the model,
  and a checkpoint's (``--ckpt_path``) is handed to the data module, so the data is always
  encoded with the model's words or characters;
* the run layout of :mod:`shared.training.checkpoints`: everything of a run under
  ``<trainer.default_root_dir>/version_N`` (checkpoints, ``metrics.csv`` from a CSV logger,
  ``test_metrics.json``, ``skipped_samples.log``); ``test`` and a resumed ``fit`` write into
  the run whose checkpoint they read;
* ``--ckpt_path last`` / ``best`` resolved to the newest run's file, and any checkpoint checked
  (it must load without pickled code) before Lightning reads it; the checkpoint's model settings
  replace the config file's, and ``--model.*`` options on the command line replace the
  checkpoint's (Lightning alone lets the checkpoint win silently: a fine-tune with
  ``--model.features.freq_masks 2`` would train without the masks); a checkpoint of an older
  layout is read in the current one (the app module's ``migrate_hyper_parameters``);
* ``--init_from MODEL``: a new run that starts from a trained model's weights (an exported
  folder or a checkpoint), with its settings and vocabulary, a new optimiser and step 0: a
  fine-tune on other data, or a longer schedule for a model whose run is gone; ``--model.*``
  options on the command line replace its settings, as they replace a checkpoint's;
* the callbacks: :class:`~shared.training.checkpoints.RunCheckpoints` (config key
  ``checkpoint``), :class:`~shared.training.guards.SkipBadSamples` (``bad_samples``),
  :class:`~shared.training.averaging.WeightAverage` (``averaging``, off unless ``decay`` is set),
  :class:`~shared.training.guards.StopOnNonFinite` and :class:`~shared.training.resume.ExactResume`;
* atomic checkpoint writes, checkpoints loaded with ``weights_only=True``, and none of the
  warnings a user cannot act on.
"""

from __future__ import annotations

import logging
import sys
import warnings
from pathlib import Path
from typing import Any, Optional

import torch.distributed as dist
from jsonargparse import Namespace
from pytorch_lightning.cli import LightningArgumentParser, LightningCLI
from pytorch_lightning.utilities import rank_zero_info

from ..io.model_files import CheckpointError, ModelFiles, load_model_files, safe_torch_load
from .averaging import WeightAverage
from .checkpoints import NAMED_CHECKPOINTS, RunCheckpoints, find_checkpoint, run_version, with_atomic_checkpoints
from .guards import SkipBadSamples, StopOnNonFinite
from .resume import ExactResume

__all__ = ["AttendCLI", "run_lightning"]

# Warnings about Lightning's and PyTorch's own internals, or advice that does not apply to these
# apps; they would be printed on every run, and no user can act on them.
_QUIET_WARNINGS = (
    r".*isinstance\(treespec, LeafSpec\)",
    r"The number of training batches .* is smaller than the logging interval",
    r"Precision .* is not supported by the model summary",
    r"Starting from v1\.9\.0, `tensorboardX` has been removed",
    r"LightningCLI's args parameter",
    r"Found \d+ module\(s\) in eval mode",  # a fixed encoder keeps its batch-norm statistics on purpose
)


def _quiet_lightning(record: logging.LogRecord) -> bool:
    # Lightning 2.6 advertises its cloud logger on every fit.
    return "litlogger" not in record.getMessage()


class AttendCLI(LightningCLI):
    """LightningCLI with the run layout, checkpoints and guards both apps share (module docstring).

    Both apps' data modules take a ``vocabulary`` and have ``vocabulary_tokens``; their modules
    take a ``vocabulary``. An app subclasses this class and overrides :meth:`link_data_and_model`
    for its other links. Keyword arguments go to :class:`~pytorch_lightning.cli.LightningCLI`;
    ``trainer_defaults`` are merged into the shared ones.
    """

    def __init__(
        self, model_class: type, datamodule_class: type, args: list[str], trainer_defaults: dict | None = None, **kwargs: Any
    ):
        defaults = dict(trainer_defaults or {})
        defaults["callbacks"] = [StopOnNonFinite(), ExactResume(), *defaults.get("callbacks", [])]
        defaults.setdefault("enable_checkpointing", False)  # RunCheckpoints writes them; Lightning's own would add copies
        self._model_options = _model_options(args)  # read while Lightning parses, in _parse_ckpt_path
        self._init_files: ModelFiles | None = None  # --init_from's weights, loaded once the module is built
        super().__init__(
            model_class,
            datamodule_class,
            args=args,
            trainer_defaults=defaults,
            seed_everything_default=0,
            save_config_kwargs={"overwrite": True},
            auto_configure_optimizers=False,
            **kwargs,
        )

    def link_data_and_model(self, parser: LightningArgumentParser) -> None:
        """Link what else the model needs from the data module or the data module from the model."""

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        parser.add_lightning_class_args(RunCheckpoints, "checkpoint")
        parser.add_lightning_class_args(SkipBadSamples, "bad_samples")
        parser.add_lightning_class_args(WeightAverage, "averaging")
        parser.add_argument(
            "--init_from",
            type=Optional[str],  # noqa: UP045  jsonargparse reads the typing form
            default=None,
            help="start a new run from a trained model's weights: an exported folder or a .ckpt (its settings and "
            "vocabulary; a new optimiser at step 0). --ckpt_path resumes a run instead",
        )
        parser.link_arguments("data.vocabulary_tokens", "model.vocabulary", apply_on="instantiate")
        self.link_data_and_model(parser)

    def _subcommand_config(self) -> Namespace | None:
        subcommand = self.config.get("subcommand")
        return self.config[subcommand] if subcommand else None

    def _parse_ckpt_path(self) -> None:
        # Lightning reads the checkpoint's hyper-parameters here, with a bare torch.load: resolve
        # `last`/`best` first, and refuse a missing, foreign or unsafe file in one line.
        config = self._subcommand_config()
        ckpt_path = config.get("ckpt_path") if config is not None else None
        if ckpt_path in NAMED_CHECKPOINTS:
            root = Path(config.trainer.default_root_dir or ".")
            found = find_checkpoint(root, ckpt_path)
            if found is None and self.config.subcommand == "fit" and ckpt_path == "last":
                rank_zero_info(f"--ckpt_path last: no run under {root} has a last.ckpt yet; starting a new run")
            elif found is None:
                raise CheckpointError(
                    f"--ckpt_path {ckpt_path}: no run under {root} has a {ckpt_path}.ckpt (runs are {root}/version_N)"
                )
            else:
                rank_zero_info(f"--ckpt_path {ckpt_path}: {found}")
            config.ckpt_path = ckpt_path = None if found is None else str(found)
        if ckpt_path:
            if not Path(ckpt_path).is_file():
                raise CheckpointError(
                    f"{ckpt_path}: checkpoint not found (--ckpt_path expects a .ckpt file written by fit, or last or best)"
                )
            checkpoint = safe_torch_load(ckpt_path)  # one extra read; refuses pickled code and names a corrupt file
        init_from = config.get("init_from") if config is not None else None
        if ckpt_path and init_from:
            raise ValueError(
                "--ckpt_path resumes a run and --init_from starts a new one from a model's weights; give one of them"
            )
        given = {key: config.model[key] for key in self._model_options if (ckpt_path or init_from) and key in config.model}
        if init_from:
            self._init_files = load_model_files(init_from, self.model_class.app)  # one line naming a missing or foreign file
            self._parse_model_settings(self._init_files.hyper_parameters)
        elif ckpt_path:
            self._parse_model_settings(checkpoint.get("hyper_parameters") or {})
        model = self._subcommand_config().model if given else None  # the config now holds the trained model's settings
        source = "--init_from model" if init_from else "checkpoint"
        for key, value in given.items():
            if model[key] != value:
                rank_zero_info(f"--model.{key} {value}: replaces the {source}'s {model[key]}")
                model[key] = value

    def _parse_model_settings(self, hparams: dict) -> None:
        """Put a saved model's settings (in the current layout: the app's migrations) into the config."""
        settings = self.model_class.migrate_hyper_parameters(hparams)
        settings.pop("_instantiator", None)
        if settings:
            self.config = self.parser.parse_object({self.config.subcommand: {"model": settings}}, self.config)

    def before_instantiate_classes(self) -> None:
        config = self._subcommand_config()
        if config.model.get("vocabulary"):  # read from --ckpt_path: the data must use the model's vocabulary
            config.data.vocabulary = list(config.model.vocabulary)
        if config.get("weights_only") is None:
            config.weights_only = True  # checkpoints hold tensors and plain data only
        if config.trainer.logger in (None, True):  # the run layout: <root>/version_N/metrics.csv
            root = Path(config.trainer.default_root_dir or ".")
            version = run_version(config.ckpt_path) if config.get("ckpt_path") else None
            if version is not None and Path(config.ckpt_path).resolve().parents[1].parent != root.resolve():
                version = None  # a checkpoint of a run elsewhere: this run is new
            config.trainer.logger = Namespace(
                class_path="shared.training.run_logger.RunLogger", init_args=Namespace(save_dir=str(root), version=version)
            )

    def after_instantiate_classes(self) -> None:
        super().after_instantiate_classes()
        if self._init_files is not None:
            self.model.load_model_weights(self._init_files, f"--init_from {self._subcommand_config().init_from}")
            rank_zero_info(f"--init_from {self._subcommand_config().init_from}: a new run from its weights")

    def instantiate_trainer(self, **kwargs: Any):
        plugins = self.config_init[self.subcommand].trainer.get("plugins")
        return super().instantiate_trainer(plugins=with_atomic_checkpoints(plugins), **kwargs)


def _model_options(args: list[str]) -> list[str]:
    """The model settings named on the command line: ``--model.features.freq_masks 2`` -> ``features.freq_masks``."""
    prefix = "--model."
    return [token[len(prefix) :].split("=", 1)[0] for token in args if token.startswith(prefix) and len(token) > len(prefix)]


def run_lightning(cli_class: type[AttendCLI], model_class: type, datamodule_class: type, args: list[str], **kwargs: Any) -> None:
    """Run ``cli_class`` on ``[command, *options]`` as the program's own command line.

    LightningCLI reads ``sys.argv``, and DDP starts the other processes by running it again, so
    it is set to exactly these arguments for the run. The process group a DDP run opened is shut
    down at the end, also after an error or SIGTERM: left to the interpreter's exit, gloo's
    worker threads are destroyed while still running and the process aborts after its work is done.
    """
    for pattern in _QUIET_WARNINGS:
        warnings.filterwarnings("ignore", message=pattern)
    logging.getLogger("pytorch_lightning.utilities.rank_zero").addFilter(_quiet_lightning)
    saved_argv = sys.argv
    sys.argv = [saved_argv[0], *args]
    try:
        cli_class(model_class, datamodule_class, args=args, **kwargs)
    finally:
        sys.argv = saved_argv
        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()
