"""``speech-attend``: train, evaluate, prepare data, transcribe and export.

    speech-attend fit|validate|test --config configs/speech_attend/synth_las.yaml [...]   (LightningCLI)
    speech-attend prepare synth --out DIR [--train N --dev N --test N --seed S] [--text templates|wordnet] [--engines espeak,piper]
    speech-attend transcribe --ckpt CKPT AUDIO... [--beam-size 8] [--alignment-dir DIR] [--json]
    speech-attend export --ckpt CKPT --out DIR

``fit --ckpt_path last`` resumes from the newest ``checkpoints/last.ckpt`` under
``trainer.default_root_dir`` (whichever ``lightning_logs/version_N`` wrote it); SIGTERM saves
``last.ckpt`` and exits with 143 (see :mod:`shared.resume`).

Errors a user can cause come out as one line, ``speech-attend: error: ...``, with exit code 2
(``--debug`` shows the traceback).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Sequence

from pytorch_lightning import Callback, Trainer
from pytorch_lightning.callbacks import ModelCheckpoint
from pytorch_lightning.utilities import rank_zero_info

from shared.cli import SafeCheckpointCLI, expand_folders, run_app
from shared.resume import ExactResume, SaveOnSigterm, with_atomic_checkpoints
from shared.robust import SkipBadSamples, StopOnNonFinite

__all__ = ["main", "newest_last_checkpoint"]

PROG = "speech-attend"


class FinalCheckpoint(Callback):
    """Save ``last.ckpt`` when training ends, wherever it ends (``max_steps`` mid-epoch too)."""

    def on_train_end(self, trainer: Trainer, pl_module) -> None:
        checkpoint = trainer.checkpoint_callback
        directory = Path(checkpoint.dirpath) if checkpoint is not None and checkpoint.dirpath else Path(trainer.log_dir or trainer.default_root_dir) / "checkpoints"
        path = directory / "last.ckpt"
        if checkpoint is not None and getattr(checkpoint, "_last_global_step_saved", -1) == trainer.global_step and path.is_file():
            return  # ModelCheckpoint already saved this very step
        trainer.save_checkpoint(path, weights_only=False)  # full state, so `fit --ckpt_path` can resume from it


def newest_last_checkpoint(root: str | Path) -> Path | None:
    """The most recently written ``.../checkpoints/last.ckpt`` under ``root``, or ``None``.

    With a logger, each run checkpoints into its own ``<root>/lightning_logs/version_N``; Lightning
    looks for ``--ckpt_path last`` only in the new run's (empty) folder, so it would start over.
    """
    found = [path for path in Path(root).glob("**/checkpoints/last.ckpt") if path.is_file()]
    return max(found, key=lambda path: path.stat().st_mtime, default=None)


class _RecognizerCLI(SafeCheckpointCLI):
    def add_arguments_to_parser(self, parser) -> None:
        parser.link_arguments("model.features.sample_rate", "data.sample_rate")
        parser.add_lightning_class_args(ModelCheckpoint, "checkpoint")
        parser.add_lightning_class_args(SkipBadSamples, "bad_samples")  # bad_samples.max_fraction: 0.01
        parser.set_defaults({
            "checkpoint.monitor": "val/cer",
            "checkpoint.mode": "min",
            "checkpoint.save_top_k": 1,
            "checkpoint.save_last": True,
            "checkpoint.filename": "best-step{step}",
            "checkpoint.auto_insert_metric_name": False,
        })

    def _parse_ckpt_path(self) -> None:
        # Resolved first, so "last" is then read and checked like a path given by hand.
        subcommand = self.config.get("subcommand")
        config = self.config[subcommand] if subcommand else None
        if config is not None and config.get("ckpt_path") == "last" and config.checkpoint.dirpath is None:
            last = newest_last_checkpoint(config.trainer.default_root_dir or ".")
            if last is not None:  # none yet: Lightning warns and fit starts afresh (one command for every restart)
                config.ckpt_path = str(last)
                rank_zero_info(f"--ckpt_path last: {last}")
        super()._parse_ckpt_path()

    def instantiate_trainer(self, **kwargs) -> Trainer:
        plugins = self.config_init[self.subcommand].trainer.get("plugins")
        return super().instantiate_trainer(plugins=with_atomic_checkpoints(plugins), **kwargs)


def _lightning(args: list[str]) -> None:
    from .data import SpeechDataModule
    from .module import SpeechRecognizer

    saved_argv = sys.argv
    sys.argv = [saved_argv[0], *args]  # LightningCLI reads sys.argv (and warns when given both); DDP re-runs it
    try:
        _RecognizerCLI(
            SpeechRecognizer,
            SpeechDataModule,
            trainer_defaults={  # our sampler shards itself; ExactResume and SaveOnSigterm: see shared.resume
                "callbacks": [FinalCheckpoint(), StopOnNonFinite(), ExactResume(), SaveOnSigterm()],
                "use_distributed_sampler": False,
            },
            save_config_kwargs={"overwrite": True},
            seed_everything_default=0,
        )
    finally:
        sys.argv = saved_argv


def _prepare(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog=f"{PROG} prepare", description="Prepare built-in data.")
    parser.add_argument("corpus", choices=["synth"], help="synth: sentences spoken by synthesisers, LibriSpeech layout")
    parser.add_argument("--out", required=True, help="output folder")
    parser.add_argument("--train", type=int, default=4000, help="training utterances (default 4000)")
    parser.add_argument("--dev", type=int, default=200, help="validation utterances, unseen voices (default 200)")
    parser.add_argument("--test", type=int, default=200, help="test utterances, unseen voices (default 200)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--text", choices=["templates", "wordnet"], default="templates",
                        help="templates: the light 710-word grammar (default); wordnet: natural sentences, ~30,000 words")
    parser.add_argument("--engines", default="espeak", help="comma-separated: espeak, piper (optional extra) (default: espeak)")
    args = parser.parse_args(argv)
    from .synth import prepare_synth

    engines = tuple(e.strip() for e in args.engines.split(",") if e.strip())
    out = prepare_synth(args.out, train=args.train, dev=args.dev, test=args.test, seed=args.seed, progress=True,
                        text=args.text, engines=engines)
    print(f"synthetic corpus ready in {out} (train {args.train}, dev {args.dev}, test {args.test}; text {args.text}, "
          f"engines {','.join(engines)}); train with --data.data_dir {out}")
    return 0


AUDIO_SUFFIXES = (".wav", ".flac", ".ogg", ".mp3")  # what a folder argument yields


def _transcribe(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog=f"{PROG} transcribe", description="Transcribe audio files.")
    parser.add_argument("audio", nargs="+", help="WAV, FLAC, OGG or MP3 files (any sample rate, mono or stereo), or folders of them")
    parser.add_argument("--ckpt", required=True, help="a .ckpt from fit, or a folder from export")
    parser.add_argument("--beam-size", type=int, default=None, help="beams (default: the model's, 8)")
    parser.add_argument("--alignment-dir", help="write an attention alignment PNG per file here")
    parser.add_argument("--max-chunk-seconds", type=float, default=None,
                        help="cut longer audio at its pauses into chunks of at most this (default: the longest training utterance)")
    parser.add_argument("--json", action="store_true", help="one JSON object per line: audio, text, duration_s, chunks")
    args = parser.parse_args(argv)
    from .transcribe import Transcriber

    transcriber = Transcriber(args.ckpt, beam_size=args.beam_size, max_chunk_seconds=args.max_chunk_seconds)
    files, errors = expand_folders(args.audio, AUDIO_SUFFIXES, "audio")
    for error in errors:
        print(f"{PROG}: error: {error}", file=sys.stderr)
    status = 2 if errors else 0
    for result in transcriber.transcribe_many(files):  # the chunks of several files decode together
        if isinstance(result, ValueError):  # one bad file (AudioError included) does not stop the others
            print(f"{PROG}: error: {str(result).splitlines()[0]}", file=sys.stderr)
            status = 2
            continue
        if args.alignment_dir:
            transcriber.save_alignment(result, args.alignment_dir)
        print(json.dumps(result.to_json(), ensure_ascii=False) if args.json else result.text, flush=True)
    return status


def _export(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog=f"{PROG} export", description="Export a checkpoint as safetensors + JSON.")
    parser.add_argument("--ckpt", required=True, help="a .ckpt from fit")
    parser.add_argument("--out", required=True, help="output folder")
    args = parser.parse_args(argv)
    from shared.checkpoint import export_folder

    from .transcribe import load_recognizer

    model, vocabulary, decoding, config = load_recognizer(args.ckpt)
    norm = model.frontend.norm
    exported = {
        "format": "speech-attend",
        "las": config.get("las"),
        "features": config.get("features"),
        "decoding": config.get("decoding"),
        "vocabulary": vocabulary.to_dict()["tokens"],
        # a readable copy; the weights file holds the same numbers (frontend.norm.*)
        "feature_statistics": {"mean": norm.mean.tolist(), "std": norm.std.tolist(), "frames": int(norm.frames)},
    }
    out = export_folder(args.out, model.state_dict(), exported)
    print(f"exported {args.ckpt} to {out}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``speech-attend`` console script."""
    return run_app(PROG, {"prepare": _prepare, "transcribe": _transcribe, "export": _export}, _lightning, argv)


if __name__ == "__main__":
    sys.exit(main())
