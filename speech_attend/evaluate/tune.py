"""Decoding settings compared on the dev groups: WER per group, their mean, and a paired bootstrap.

    python scripts/decode_sweep.py --ckpt models/speech_attend --devsets data/devsets \\
        --settings ctc_weight=0.3 ctc_weight=0.15 beam_size=48,ctc_weight=0.15 [--split data/broad38:dev] [--json]

Each setting (``name=value`` pairs of ``beam_size``, ``ctc_weight``, ``lm_weight``,
``length_bonus``; the empty setting ``-`` is the model's own decoding) transcribes every clip of
the groups (default: all of ``devsets.json`` but ``human_alsa``, whose 16 words say little) with
one model and language model, one thread. The first setting is the base: each other one gets its
mean WER over the groups and the paired bootstrap interval (1,000 draws of each group's clips,
the same draws for both) of its mean's difference from the base's. With ``--split DIR:NAME``
(a LibriSpeech-layout split, e.g. the corpus's dev split, where the LM weight was chosen) it
is scored too, and shown beside the mean.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from eval_speech import groups_of  # noqa: E402

from speech_attend.data.readers import read_librispeech  # noqa: E402
from speech_attend.data.text import normalize_text  # noqa: E402
from speech_attend.evaluate.metrics import utterance_word_edits  # noqa: E402
from speech_attend.infer.transcribe import Transcriber  # noqa: E402

SETTINGS = {"beam_size": int, "ctc_weight": float, "lm_weight": float, "length_bonus": float}
LEFT_OUT = ("human_alsa",)


def parse_setting(text: str) -> dict:
    """``"beam_size=48,ctc_weight=0.15"`` -> ``{"beam_size": 48, "ctc_weight": 0.15}``; ``"-"`` -> ``{}``."""
    if text.strip() == "-":
        return {}
    setting = {}
    for pair in text.split(","):
        name, _, value = pair.partition("=")
        if name.strip() not in SETTINGS or not value:
            raise ValueError(f"--settings {text!r}: expected name=value pairs of {', '.join(SETTINGS)}")
        setting[name.strip()] = SETTINGS[name.strip()](value)
    return setting


def word_edits(transcriber: Transcriber, root: Path, group: str) -> tuple[list[int], list[int]]:
    """Each utterance's word edits and reference words in ``group`` of ``root``."""
    utterances = read_librispeech(root, [group])
    references = [normalize_text(u.text) for u in utterances]
    texts = [
        normalize_text(r.text) if not isinstance(r, ValueError) else ""
        for r in transcriber.transcribe_many([u.audio_path for u in utterances])
    ]
    return utterance_word_edits(references, texts), [len(r.split()) for r in references]


def mean_wer(edits: dict[str, list[int]], words: dict[str, list[int]], draw: dict[str, list[int]] | None = None) -> float:
    """The mean over groups of each group's WER (``draw``: the utterances drawn from each group)."""
    total = 0.0
    for group in edits:
        picked = draw[group] if draw else range(len(edits[group]))
        total += sum(edits[group][i] for i in picked) / max(1, sum(words[group][i] for i in picked))
    return total / len(edits)


def difference_interval(base: dict, other: dict, words: dict, draws: int = 1000, seed: int = 0) -> tuple[float, float]:
    """95 % paired bootstrap interval of ``mean_wer(other) - mean_wer(base)``."""
    rng = random.Random(seed)
    diffs = []
    for _ in range(draws):
        draw = {g: [rng.randrange(len(base[g])) for _ in base[g]] for g in base}
        diffs.append(mean_wer(other, words, draw) - mean_wer(base, words, draw))
    diffs.sort()
    return diffs[int(0.025 * draws)], diffs[int(0.975 * draws) - 1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ckpt", required=True, help="a .ckpt from fit, or a folder from export")
    parser.add_argument("--devsets", required=True, type=Path, help="folder of evaluation groups (scripts/speech_devsets.py)")
    parser.add_argument(
        "--settings", nargs="+", required=True, help="decoding settings, the first the base: name=value[,name=value] or -"
    )
    parser.add_argument("--groups", default=None, help=f"comma-separated groups (default: all but {', '.join(LEFT_OUT)})")
    parser.add_argument(
        "--split", default=None, help="also score this LibriSpeech-layout split, as DIR:NAME (e.g. data/broad38:dev)"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    try:
        settings = [parse_setting(text) for text in args.settings]
        available = groups_of(args.devsets) if args.devsets.is_dir() else []
        groups = args.groups.split(",") if args.groups else [g for g in available if g not in LEFT_OUT]
        if not groups or any(g not in available for g in groups):
            raise ValueError(f"{args.devsets}: groups {groups} not all among its groups {available}")
        split = None
        if args.split:
            root, _, name = args.split.rpartition(":")
            if not root or not (Path(root) / name).is_dir():
                raise ValueError(f"--split {args.split}: expected DIR:NAME with a folder DIR/NAME")
            split = (Path(root), name)
        results, base = [], None
        for setting in settings:
            transcriber = Transcriber(args.ckpt, **setting)
            measured = {g: word_edits(transcriber, args.devsets, g) for g in groups}
            edits, words = {g: e for g, (e, _) in measured.items()}, {g: w for g, (_, w) in measured.items()}
            row = {
                "setting": setting,
                "wer": {g: sum(edits[g]) / max(1, sum(words[g])) for g in groups},
                "mean": mean_wer(edits, words),
            }
            if base is None:
                base = edits
            else:
                row["difference_95"] = difference_interval(base, edits, words)
            if split:
                e, w = word_edits(transcriber, *split)
                row["split_wer"] = sum(e) / max(1, sum(w))
            results.append(row)
    except (ValueError, RuntimeError, OSError) as err:
        print(f"decode_sweep: error: {str(err).splitlines()[0]}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps({"groups": groups, "split": args.split, "results": results}, indent=1))
        return 0
    print(
        "setting".ljust(34)
        + "".join(g[:10].rjust(11) for g in groups)
        + "       mean  95 % of the difference"
        + ("      split" if split else "")
    )
    for row in results:
        name = ",".join(f"{k}={v}" for k, v in row["setting"].items()) or "(the model's)"
        low_high = row.get("difference_95")
        interval = f"{low_high[0]:+.4f} .. {low_high[1]:+.4f}" if low_high else "(base)"
        print(
            name[:33].ljust(34)
            + "".join(f"{row['wer'][g]:11.4f}" for g in groups)
            + f" {row['mean']:10.4f}  {interval:<22}"
            + (f" {row['split_wer']:10.4f}" if split else "")
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
