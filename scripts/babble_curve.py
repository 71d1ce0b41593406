"""WER against the babble's level: how far a recognizer is from a babble target, in dB.

    python scripts/babble_curve.py --ckpt DIR --devsets data/devsets [--snrs 5,10,15,20,30] [--out data/babble_curve] [--json]
    python scripts/babble_curve.py --ckpt DIR --devsets data/devsets --noise white --source piper_unseen --snrs 20,30,40,50

The ``espeak_babble10`` group of ``scripts/speech_devsets.py`` holds one point: each clip of
``espeak_unseen`` (new sentences, voices never heard) under babble of 3 to 7 of the group's other
clips at 10 dB SNR. This script writes the same clips with the same babble draws (the devsets'
seed) at other SNRs into ``--out`` and scores the model on each, beside the clean group, so the
ratio to the clean WER is a curve: the SNR where it crosses a target (1.5x) says how many dB of
robustness the model lacks at 10 dB. Groups already written are reused.

``--noise white`` writes white noise instead (the same SNR, on the active speech), the kind of
noise a 16-bit file recorded 50 dB too low holds once its level is set (about 30 dB under its
speech); ``--source`` takes another clean group (``piper_unseen``).
"""

from __future__ import annotations

import argparse
import functools
import json
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import eval_speech  # noqa: E402
import speech_devsets  # noqa: E402
import torch  # noqa: E402

from speech_attend.data.augment import add_noise, coloured_noise  # noqa: E402
from speech_attend.infer.transcribe import Transcriber  # noqa: E402

SOURCE = "espeak_unseen"
NOISES = ("babble", "white")


def _with_white_noise(wave: torch.Tensor, others: list[torch.Tensor], generator: torch.Generator, snr_db: float) -> torch.Tensor:
    return add_noise(wave, coloured_noise(wave.numel(), "white", generator), snr_db, speech_devsets.SAMPLE_RATE)


def babble_group(devsets: Path, out: Path, snr_db: float, seed: int = 0, noise: str = "babble", source: str = SOURCE) -> str:
    """Write group ``source`` of ``devsets`` with ``noise`` at ``snr_db`` into ``out`` (once); its group name
    (``espeak_babble10`` for the devsets' babble at 10 dB: their own group, sample for sample)."""
    name = f"{source.removesuffix('_unseen')}_{noise}{snr_db:g}"
    if not (out / name).is_dir():
        if not (out / source).is_dir():
            shutil.copytree(devsets / source, out / source)
        with_noise = speech_devsets._with_babble if noise == "babble" else _with_white_noise  # the devsets' own babble
        speech_devsets._derived_group(out, source, name, seed, functools.partial(with_noise, snr_db=snr_db))
    return name


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ckpt", required=True, help="a .ckpt from fit, or a folder from export")
    parser.add_argument("--devsets", required=True, type=Path, help="folder from scripts/speech_devsets.py (its espeak_unseen)")
    parser.add_argument("--snrs", default="5,10,15,20,30", help="comma-separated babble SNRs in dB")
    parser.add_argument("--out", type=Path, default=Path("data/babble_curve"), help="where the babble groups are written")
    parser.add_argument("--seed", type=int, default=0, help="the devsets' seed (speech_devsets.py --seed): the same babble draws")
    parser.add_argument("--noise", choices=NOISES, default="babble", help="babble (the devsets' own draws) or white noise")
    parser.add_argument("--source", default=SOURCE, help="the clean group the noise is added to")
    parser.add_argument("--json", action="store_true", help="print one JSON object: group -> results")
    args = parser.parse_args(argv)
    if not (args.devsets / args.source).is_dir():
        print(
            f"babble_curve: error: {args.devsets / args.source}: not found; expected a group of a folder from "
            "scripts/speech_devsets.py",
            file=sys.stderr,
        )
        return 2
    try:
        snrs = [float(x) for x in args.snrs.split(",")]
    except ValueError:
        print(f"babble_curve: error: --snrs {args.snrs!r}: expected comma-separated numbers of dB", file=sys.stderr)
        return 2
    try:
        transcriber = Transcriber(args.ckpt)  # before the groups are written: a bad model is told at once
        args.out.mkdir(parents=True, exist_ok=True)
        groups = [args.source] + [babble_group(args.devsets, args.out, snr, args.seed, args.noise, args.source) for snr in snrs]
        results = {group: eval_speech.evaluate(transcriber, args.out, group) for group in groups}
    except (ValueError, RuntimeError, OSError) as err:  # CheckpointError and unreadable audio included
        print(f"babble_curve: error: {str(err).splitlines()[0]}", file=sys.stderr)
        return 2
    clean = results[args.source]["wer"]
    for result in results.values():
        result["wer_ratio"] = result["wer"] / clean if clean else float("nan")
    if args.json:
        print(json.dumps(results, indent=1))
    else:
        print(f"{'group':<22} {'WER':>7} {'CER':>7} {'x clean':>8}")
        for group, r in results.items():
            print(f"{group:<22} {r['wer']:7.4f} {r['cer']:7.4f} {r['wer_ratio']:7.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
