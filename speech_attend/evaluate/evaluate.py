"""Word and character error rates of a recognizer on every evaluation group of a folder.

    python scripts/eval_speech.py --ckpt CKPT --devsets DIR [--groups a,b] [--beam-size N] [--lm-weight X] [--ctc-weight W] [--by-speaker] [--json]

``DIR`` is the output of ``scripts/speech_devsets.py`` (groups listed in ``DIR/devsets.json``),
or any folder of LibriSpeech-layout subsets. Each group is transcribed with
:class:`speech_attend.infer.transcribe.Transcriber` (files decoded together in batches), references
and hypotheses are normalised by :func:`speech_attend.data.text.normalize_text`, and the corpus-level
WER and CER (:func:`speech_attend.evaluate.metrics.speech_metrics`) are printed as a table, or as JSON;
``--by-speaker`` adds each speaker's (for Flite and Festival: each voice's) under the group's.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from speech_attend.data.readers import CorpusError, read_librispeech  # noqa: E402
from speech_attend.data.text import normalize_text  # noqa: E402
from speech_attend.evaluate.metrics import speech_metrics  # noqa: E402
from speech_attend.infer.transcribe import Transcriber  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from engine_devset import voice_of  # noqa: E402


def groups_of(devsets: Path) -> list[str]:
    """The groups of ``devsets``: those listed in ``devsets.json``, else every subfolder with transcripts."""
    marker = devsets / "devsets.json"
    if marker.is_file():
        listed = json.loads(marker.read_text())["groups"]
        return [name for name in listed if (devsets / name).is_dir()]
    return sorted(p.name for p in devsets.iterdir() if p.is_dir() and any(p.rglob("*.trans.txt")))


def evaluate(transcriber: Transcriber, devsets: Path, group: str, by_speaker: bool = False) -> dict:
    """Transcribe one group; returns its size, error rates, unreadable files and seconds taken,
    and with ``by_speaker`` each speaker's size and error rates (``speakers``, named by voice where known)."""
    utterances = read_librispeech(devsets, [group])
    start = time.perf_counter()
    hypotheses, failed = [], 0
    for result in transcriber.transcribe_many([u.audio_path for u in utterances]):
        if isinstance(result, ValueError):  # an unreadable file counts as an empty transcript
            failed += 1
            hypotheses.append("")
        else:
            hypotheses.append(normalize_text(result.text))
    seconds = time.perf_counter() - start
    references = [normalize_text(u.text) for u in utterances]
    result = {
        "utterances": len(utterances),
        **speech_metrics(references, hypotheses),
        "failed": failed,
        "seconds": round(seconds, 2),
    }
    if by_speaker:
        speakers: dict[str, list[int]] = {}
        for i, u in enumerate(utterances):
            speakers.setdefault(voice_of(group, u.speaker or "") or str(u.speaker), []).append(i)
        result["speakers"] = {
            name: {"utterances": len(items), **speech_metrics([references[i] for i in items], [hypotheses[i] for i in items])}
            for name, items in sorted(speakers.items())
        }
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ckpt", required=True, help="a .ckpt from fit, or a folder from export")
    parser.add_argument("--devsets", required=True, type=Path, help="folder of evaluation groups")
    parser.add_argument("--groups", help="comma-separated groups to score (default: all)")
    parser.add_argument("--beam-size", type=int, default=None, help="beams (default: the model's)")
    parser.add_argument(
        "--lm", default=None, help="a language model folder from fit-lm (default: the model folder's own, if any)"
    )
    parser.add_argument(
        "--lm-weight", type=float, default=None, help="weight of the language model (default: the model's; 0 = none)"
    )
    parser.add_argument("--length-bonus", type=float, default=None, help="score added per character (default: the model's)")
    parser.add_argument(
        "--ctc-weight", type=float, default=None, help="the CTC head's weight in the n-best rescoring (default: the model's)"
    )
    parser.add_argument("--by-speaker", action="store_true", help="also each speaker's (each Flite or Festival voice's) results")
    parser.add_argument("--json", action="store_true", help="print one JSON object: group -> results")
    args = parser.parse_args(argv)
    try:
        if not args.devsets.is_dir():
            raise CorpusError(f"{args.devsets}: folder of evaluation groups not found")
        groups = groups_of(args.devsets)
        if args.groups:
            wanted = [g.strip() for g in args.groups.split(",") if g.strip()]
            unknown = [g for g in wanted if g not in groups]
            if unknown:
                raise CorpusError(f"{args.devsets}: no group(s) {unknown}; it has {groups}")
            groups = wanted
        if not groups:
            raise CorpusError(f"{args.devsets}: no evaluation groups (folders with *.trans.txt)")
        transcriber = Transcriber(
            args.ckpt,
            beam_size=args.beam_size,
            lm=args.lm,
            lm_weight=args.lm_weight,
            length_bonus=args.length_bonus,
            ctc_weight=args.ctc_weight,
        )
        results = {group: evaluate(transcriber, args.devsets, group, args.by_speaker) for group in groups}
    except (ValueError, RuntimeError, OSError) as err:
        print(f"eval_speech: error: {str(err).splitlines()[0]}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(results, indent=1))
        return 0
    width = max(len(g) for g in results) + 2
    print(f"{'group':<{width}}{'utts':>6}{'WER':>8}{'CER':>8}")
    for group, r in results.items():
        print(
            f"{group:<{width}}{r['utterances']:>6}{r['wer']:>8.3f}{r['cer']:>8.3f}"
            + (f"  ({r['failed']} unreadable)" if r["failed"] else "")
        )
        for speaker, s in r.get("speakers", {}).items():
            print(f"  {speaker:<{width + 2}}{s['utterances']:>4}{s['wer']:>8.3f}{s['cer']:>8.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
