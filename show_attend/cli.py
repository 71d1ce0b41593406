"""The ``show-attend`` command line.

    show-attend fit|validate|test --config configs/show_attend/shapes_soft.yaml [--data.data_dir DIR] ...
    show-attend prepare shapes --out data/shapes [--train N --val N --test N --seed S --image-size PX --max-objects K]
    show-attend caption --ckpt CKPT_OR_EXPORTED_DIR IMAGE... [--beam-size 5] [--overlay-dir DIR] [--json]
    show-attend export --ckpt CKPT --out DIR

``fit``, ``validate`` and ``test`` go through LightningCLI with the YAML configs of
``configs/show_attend/``; the vocabulary and image size are linked from the data module into
the model. Every ``fit`` keeps ``checkpoints/last.ckpt`` under ``trainer.default_root_dir``, also
when it stops at ``max_steps`` between validations or on SIGTERM (exit code 143), and
``fit --ckpt_path last`` resumes from it (see :mod:`shared.resume`). User errors print one line
and exit with 2.
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from pathlib import Path
from typing import Sequence

import pytorch_lightning as pl
from pytorch_lightning.callbacks import ModelCheckpoint
from jsonargparse import Namespace
from pytorch_lightning.cli import LightningArgumentParser

from shared.cli import SafeCheckpointCLI, expand_folders, run_app
from shared.resume import ExactResume, SaveOnSigterm, with_atomic_checkpoints
from shared.robust import SkipBadSamples, StopOnNonFinite

from .data import CaptionDataModule
from .module import Captioner

__all__ = ["main", "CaptionCLI", "LastCheckpoint"]

PROG = "show-attend"


class LastCheckpoint(ModelCheckpoint):
    """ModelCheckpoint that also writes ``last.ckpt`` when fit ends between two validations.

    Lightning's own ``on_train_end`` saves "last" only if nothing was saved before, so a run
    stopping at ``max_steps`` after its last validation would leave an older ``last.ckpt``.
    """

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.save_last and self._last_global_step_saved != trainer.global_step:
            self._save_last_checkpoint(trainer, self._monitor_candidates(trainer))


class CaptionCLI(SafeCheckpointCLI):
    """LightningCLI with the captioner's links and its checkpoint callback (config key ``checkpoint``)."""

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        parser.link_arguments("data.vocabulary_tokens", "model.vocabulary", apply_on="instantiate")
        parser.link_arguments("data.image_size", "model.image_size")
        parser.add_lightning_class_args(LastCheckpoint, "checkpoint")
        parser.add_lightning_class_args(SkipBadSamples, "bad_samples")  # bad_samples.max_fraction: 0.01
        parser.set_defaults({"checkpoint.save_last": True, "checkpoint.enable_version_counter": False})

    def before_instantiate_classes(self) -> None:
        config = self.config[self.subcommand]
        root = Path(config.trainer.default_root_dir or ".")
        if config.checkpoint.dirpath is None:  # a fixed place: <default_root_dir>/checkpoints/last.ckpt
            config.checkpoint.dirpath = str(root / "checkpoints")
        checkpoint = config.get("ckpt_path")
        if checkpoint == "last":
            checkpoint = Path(config.checkpoint.dirpath) / "last.ckpt"
        if checkpoint and Path(checkpoint).is_file():
            # The checkpoint holds every weight: do not fetch ImageNet weights for the encoder again.
            config.model.encoder.pretrained, config.model.encoder.weights_path = False, None
        if config.trainer.logger in (None, True):  # CSV curves in the run folder, with or without TensorBoard
            config.trainer.logger = Namespace(
                class_path="pytorch_lightning.loggers.CSVLogger", init_args=Namespace(save_dir=str(root), name="logs")
            )

    def instantiate_trainer(self, **kwargs) -> pl.Trainer:
        plugins = self.config_init[self.subcommand].trainer.get("plugins")
        return super().instantiate_trainer(plugins=with_atomic_checkpoints(plugins), **kwargs)


def _lightning(args: list[str]) -> None:
    # run_app hands over sys.argv's own arguments (minus --debug); nothing is given twice.
    warnings.filterwarnings("ignore", message="LightningCLI's args parameter")
    # A fixed encoder keeps its blocks in eval mode on purpose (batch-norm statistics stay put).
    warnings.filterwarnings("ignore", message=r"Found \d+ module\(s\) in eval mode")
    CaptionCLI(
        Captioner, CaptionDataModule, args=args, save_config_kwargs={"overwrite": True}, auto_configure_optimizers=False,
        # added to any callbacks a config names; ExactResume and SaveOnSigterm make resumes exact and SIGTERM safe
        trainer_defaults={"callbacks": [StopOnNonFinite(), ExactResume(), SaveOnSigterm()]},
    )


def _prepare(args: list[str]) -> int:
    parser = argparse.ArgumentParser(prog=f"{PROG} prepare", description="Generate built-in data.")
    kinds = parser.add_subparsers(dest="kind", required=True)
    shapes = kinds.add_parser("shapes", help="scenes of coloured shapes with exact captions (Karpathy JSON + PNGs)")
    shapes.add_argument("--out", required=True, help="output folder")
    shapes.add_argument("--train", type=int, default=6000, help="training images (default 6000)")
    shapes.add_argument("--val", type=int, default=300, help="validation images (default 300)")
    shapes.add_argument("--test", type=int, default=300, help="test images (default 300)")
    shapes.add_argument("--seed", type=int, default=0)
    shapes.add_argument("--image-size", type=int, default=128, help="image side in pixels (default 128)")
    shapes.add_argument("--max-objects", type=int, default=4, help="most objects per image (default 4)")
    shapes.add_argument("--quiet", action="store_true", help="no progress bar")
    options = parser.parse_args(args)
    from .shapes import prepare_shapes

    path = prepare_shapes(
        options.out, options.train, options.val, options.test, options.seed,
        options.image_size, options.max_objects, progress=not options.quiet,
    )
    print(f"wrote {path}")
    return 0


IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp")  # what a folder argument yields


def _caption(args: list[str]) -> int:
    parser = argparse.ArgumentParser(prog=f"{PROG} caption", description="Caption images with a trained model.")
    parser.add_argument("images", nargs="+", help="image files (any format and size Pillow reads), or folders of them")
    parser.add_argument("--ckpt", required=True, help="a .ckpt file or a folder written by `export`")
    parser.add_argument("--beam-size", type=int, default=None, help="beams (default: the model's, 5 unless trained otherwise)")
    parser.add_argument("--max-length", type=int, default=None, help="most words per caption (default: the model's)")
    parser.add_argument("--overlay-dir", default=None, help="write one PNG per image: each word with its attention map")
    parser.add_argument("--json", action="store_true", help="one JSON object per line: image, caption, tokens, overlay")
    parser.add_argument("--device", default="cpu", help="cpu, cuda, cuda:1, ... (default cpu)")
    options = parser.parse_args(args)
    if options.beam_size is not None and options.beam_size < 1:
        raise ValueError(f"--beam-size must be >= 1, got {options.beam_size}")
    if options.max_length is not None and options.max_length < 1:
        raise ValueError(f"--max-length must be >= 1, got {options.max_length}")
    from .caption import caption_files, load_captioner, save_overlay

    model = load_captioner(options.ckpt, options.device)
    images, errors = expand_folders(options.images, IMAGE_SUFFIXES, "image")
    for error in errors:
        print(f"{PROG}: error: {error}", file=sys.stderr)
    used: set[str] = set()
    status = 2 if errors else 0
    for result in caption_files(model, images, options.beam_size, options.max_length):
        if isinstance(result, Exception):  # one bad file does not stop the others
            print(f"{PROG}: error: {str(result).splitlines()[0]}", file=sys.stderr)
            status = 2
            continue
        overlay = None
        if options.overlay_dir:
            name = result.image.stem
            while name in used:  # same file name from two folders: keep both
                name += "_"
            used.add(name)
            overlay = str(save_overlay(result, Path(options.overlay_dir) / f"{name}.png"))
        if options.json:
            print(json.dumps({"image": str(result.image), "caption": result.caption, "tokens": result.tokens, "overlay": overlay}), flush=True)
        else:
            print(f"{result.image}: {result.caption}" + (f"  [{overlay}]" if overlay else ""), flush=True)
    return status


def _export(args: list[str]) -> int:
    parser = argparse.ArgumentParser(prog=f"{PROG} export", description="Export a checkpoint as safetensors + JSON.")
    parser.add_argument("--ckpt", required=True, help="a Lightning .ckpt file")
    parser.add_argument("--out", required=True, help="output folder")
    options = parser.parse_args(args)
    from .caption import export_model

    print(f"exported to {export_model(options.ckpt, options.out)}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``show-attend``; returns the exit code."""
    commands = {"prepare": _prepare, "caption": _caption, "export": _export}
    return run_app(PROG, commands, _lightning, argv)


if __name__ == "__main__":
    sys.exit(main())
