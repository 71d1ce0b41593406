"""Recordings as people make them: WER of a recognizer with a DC offset and at low levels.

    python scripts/recording_check.py --ckpt CKPT --devsets DIR [--groups espeak_unseen,piper_unseen] [--json]
    python scripts/recording_check.py --ckpt CKPT --devsets DIR --groups espeak_unseen --conditions "-50 dB"

Each clip of each group (speech never heard in training: ``scripts/speech_devsets.py``) is written
again as a 16-bit WAV, as a sound card would store it, under each condition:

- ``clean``: as it is;
- ``dc+0.3`` / ``dc-0.3``: scaled by 0.5, then shifted by a constant +0.3 or -0.3 (full scale 1.0);
- ``-20 dB`` / ``-40 dB`` / ``-50 dB``: the level lowered (a microphone's gain set too low); at
  -50 dB the loudest samples are a few hundred steps of the 16-bit scale.

and transcribed with the model's own decoding. Prints WER and CER per group and condition, and
each condition's WER against the clean one with its 95 % paired bootstrap interval (the same
clips drawn for both conditions): on 200 clips a ratio of 1.12 is not told from 1.10 when the
interval spans both. ``--conditions`` runs some of them (``clean`` always, first: the ratios'
reference), for a larger group (``speech_devsets.py --espeak-only``) in a third of the time.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np
import soundfile as sf

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from eval_speech import groups_of  # noqa: E402

from speech_attend.data.audio import load_audio  # noqa: E402
from speech_attend.data.readers import read_librispeech  # noqa: E402
from speech_attend.data.text import normalize_text  # noqa: E402
from speech_attend.evaluate.metrics import edit_ratio_interval, speech_metrics, utterance_word_edits  # noqa: E402
from speech_attend.infer.transcribe import Transcriber  # noqa: E402

RATE = 16000
CONDITIONS = {
    "clean": lambda x: x,
    "dc+0.3": lambda x: 0.5 * x + 0.3,
    "dc-0.3": lambda x: 0.5 * x - 0.3,
    "-20 dB": lambda x: x * 10 ** (-20 / 20),
    "-40 dB": lambda x: x * 10 ** (-40 / 20),
    "-50 dB": lambda x: x * 10 ** (-50 / 20),
}


def check(
    transcriber: Transcriber, devsets: Path, group: str, work: Path, conditions: list[str] | None = None
) -> dict[str, dict]:
    """WER/CER of one group under each of ``conditions`` (default: all), clean first."""
    utterances = read_librispeech(devsets, [group])
    references = [normalize_text(u.text) for u in utterances]
    waves = [load_audio(u.audio_path, RATE).numpy() for u in utterances]
    results, clean_edits = {}, None
    for name, condition in CONDITIONS.items():
        if conditions is not None and name != "clean" and name not in conditions:
            continue
        folder = work / group / name.replace(" ", "").replace("+", "p").replace("-", "m")
        folder.mkdir(parents=True, exist_ok=True)
        paths = []
        for i, wave in enumerate(waves):
            paths.append(folder / f"{i:04d}.wav")
            sf.write(paths[-1], np.clip(condition(wave), -1.0, 1.0), RATE, subtype="PCM_16")
        texts = [normalize_text(r.text) if not isinstance(r, ValueError) else "" for r in transcriber.transcribe_many(paths)]
        edits = utterance_word_edits(references, texts)
        clean_edits = edits if clean_edits is None else clean_edits  # "clean" comes first
        defined = sum(clean_edits) > 0  # a clean transcript without an error leaves the ratio undefined
        results[name] = {
            "utterances": len(paths),
            **speech_metrics(references, texts),
            "empty": sum(not t for t in texts),
            "wer_ratio": sum(edits) / sum(clean_edits) if defined else None,
            "wer_ratio_95": edit_ratio_interval(clean_edits, edits) if defined else None,
        }
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ckpt", required=True, help="a .ckpt from fit, or a folder from export")
    parser.add_argument("--devsets", required=True, type=Path, help="folder of evaluation groups (scripts/speech_devsets.py)")
    parser.add_argument(
        "--groups", default="espeak_unseen,piper_unseen", help="comma-separated groups (default: espeak_unseen,piper_unseen)"
    )
    parser.add_argument(
        "--conditions",
        default=None,
        help=f"comma-separated conditions (default: all of {', '.join(CONDITIONS)}); clean always runs",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object: group -> condition -> results")
    args = parser.parse_args(argv)
    try:
        available = groups_of(args.devsets) if args.devsets.is_dir() else []
        groups = [g.strip() for g in args.groups.split(",") if g.strip()]
        missing = [g for g in groups if g not in available]
        if missing:
            raise ValueError(f"{args.devsets}: no group(s) {missing}; it has {available}")
        conditions = None if args.conditions is None else [c.strip() for c in args.conditions.split(",") if c.strip()]
        unknown = [c for c in conditions or [] if c not in CONDITIONS]
        if unknown:
            raise ValueError(f"--conditions: no condition(s) {unknown}; there are {list(CONDITIONS)}")
        transcriber = Transcriber(args.ckpt)
        with tempfile.TemporaryDirectory() as work:
            results = {group: check(transcriber, args.devsets, group, Path(work), conditions) for group in groups}
    except (ValueError, RuntimeError, OSError) as err:
        print(f"recording_check: error: {str(err).splitlines()[0]}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(results, indent=1))
        return 0
    print(f"{'group':<16}{'condition':<10}{'WER':>7}{'CER':>7}{'WER / clean':>13}{'95 % interval':>16}{'empty':>7}")
    for group, by_condition in results.items():
        for name, r in by_condition.items():
            ratio, interval = (
                ("-", "-") if r["wer_ratio"] is None else (f"{r['wer_ratio']:.3f}", "{:.3f}-{:.3f}".format(*r["wer_ratio_95"]))
            )
            print(f"{group:<16}{name:<10}{r['wer']:>7.3f}{r['cer']:>7.3f}{ratio:>13}{interval:>16}{r['empty']:>7}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
