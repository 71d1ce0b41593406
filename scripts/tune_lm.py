"""Choose the language model's weight and the length bonus on dev data: a grid, never on test.

    python scripts/tune_lm.py --ckpt MODEL [--lm LM_DIR] --data CORPUS [--split dev]
                              [--lm-weights 0:1:0.1] [--length-bonuses 0:2:0.5] [--max-utterances N] [--json]
    python scripts/tune_lm.py --ckpt MODEL --lm LM_DIR --data DEVSETS --groups espeak_unseen,piper_shifted

``MODEL`` is a ``.ckpt`` or an exported folder (its own language model is used when it holds one
and ``--lm`` is not given). The utterances are the ``--split`` of a corpus folder (default
``dev``), or, with ``--groups``, those groups of a folder of evaluation groups
(``scripts/speech_devsets.py``). A split or group whose name says ``test`` is refused: weights
chosen on test make its results optimistic. Every pair of the grid transcribes the same
utterances with :class:`speech_attend.infer.transcribe.Transcriber`; the table shows WER (CER) with
the pair ``lm 0, bonus 0`` (no language model) as the reference, and the best pair (lowest WER,
then lowest CER, then the smallest weights) ends the output, with the ``export`` command that
saves it as the model's default.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from speech_attend.data.readers import CorpusError, read_corpus, read_librispeech  # noqa: E402
from speech_attend.data.text import normalize_text  # noqa: E402
from speech_attend.evaluate.metrics import speech_metrics  # noqa: E402
from speech_attend.infer.transcribe import Transcriber  # noqa: E402


def grid(text: str, name: str) -> list[float]:
    """``start:stop:step`` (both ends included) or a comma-separated list, as floats."""
    try:
        if ":" in text:
            start, stop, step = (float(x) for x in text.split(":"))
            if step <= 0 or stop < start:
                raise ValueError
            count = int(round((stop - start) / step)) + 1
            return [round(start + i * step, 6) for i in range(count)]
        return [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ValueError(
            f"{name} {text!r}: expected start:stop:step (step > 0, stop >= start) or values separated by commas"
        ) from None


def dev_utterances(data: Path, split: str, groups: str | None, limit: int | None) -> list:
    """The utterances to tune on; refuses anything named test."""
    names = [g.strip() for g in groups.split(",") if g.strip()] if groups else [split]
    tests = [name for name in names if "test" in name.lower()]
    if tests:
        raise ValueError(
            f"{', '.join(tests)}: refusing to tune on test data; choose the weights on dev, and measure test once after"
        )
    utterances = read_librispeech(data, names) if groups else read_corpus(data, split)
    if not utterances:
        raise CorpusError(f"{data}: no utterances in {', '.join(names)}")
    return utterances[:limit]


def score(transcriber: Transcriber, utterances: list, lm_weight: float, length_bonus: float) -> dict:
    """WER and CER of the utterances decoded with this pair."""
    transcriber.decoding = replace(transcriber.decoding, lm_weight=lm_weight, length_bonus=length_bonus)
    start = time.perf_counter()
    hypotheses = []
    for result in transcriber.transcribe_many([u.audio_path for u in utterances]):
        hypotheses.append("" if isinstance(result, ValueError) else normalize_text(result.text))  # unreadable: empty
    references = [normalize_text(u.text) for u in utterances]
    return {
        "lm_weight": lm_weight,
        "length_bonus": length_bonus,
        **speech_metrics(references, hypotheses),
        "seconds": round(time.perf_counter() - start, 1),
    }


def best_of(results: list[dict]) -> dict:
    """Lowest WER, then lowest CER, then the smallest weights."""
    return min(results, key=lambda r: (round(r["wer"], 6), round(r["cer"], 6), r["lm_weight"], r["length_bonus"]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ckpt", required=True, help="a .ckpt from fit, or a folder from export")
    parser.add_argument("--lm", default=None, help="a language model folder from fit-lm (default: the model folder's own)")
    parser.add_argument(
        "--data", required=True, type=Path, help="a corpus folder, or with --groups a folder of evaluation groups"
    )
    parser.add_argument("--split", default="dev", help="the corpus split to tune on (default dev; never test)")
    parser.add_argument(
        "--groups", default=None, help="comma-separated evaluation groups of --data to tune on, instead of --split"
    )
    parser.add_argument("--lm-weights", default="0:1:0.1", help="grid of weights, start:stop:step or a list (default 0:1:0.1)")
    parser.add_argument("--length-bonuses", default="0:2:0.5", help="grid of length bonuses (default 0:2:0.5)")
    parser.add_argument("--max-utterances", type=int, default=None, help="the first N utterances only (default: all)")
    parser.add_argument("--beam-size", type=int, default=None, help="beams (default: the model's)")
    parser.add_argument("--json", action="store_true", help="print one JSON object: every pair's results and the best")
    args = parser.parse_args(argv)
    try:
        weights, bonuses = grid(args.lm_weights, "--lm-weights"), grid(args.length_bonuses, "--length-bonuses")
        utterances = dev_utterances(args.data, args.split, args.groups, args.max_utterances)
        transcriber = Transcriber(args.ckpt, beam_size=args.beam_size, lm=args.lm, lm_weight=0.0, length_bonus=0.0)
        if transcriber.lm is None:
            raise ValueError(f"{args.ckpt} holds no language model; pass --lm DIR (from speech-attend fit-lm)")
        outside = [w for w in weights if not 0 <= w <= 2]  # checked before the first decoding
        if outside:
            raise ValueError(f"--lm-weights: {', '.join(format(w, 'g') for w in outside)} outside [0, 2]")
        results = []
        for weight in weights:
            for bonus in bonuses:
                results.append(score(transcriber, utterances, weight, bonus))
                r = results[-1]
                print(
                    f"lm {weight:g} bonus {bonus:g}: WER {r['wer']:.4f} CER {r['cer']:.4f} ({r['seconds']} s)",
                    file=sys.stderr,
                    flush=True,
                )
    except (ValueError, RuntimeError, OSError) as err:
        print(f"tune_lm: error: {str(err).splitlines()[0]}", file=sys.stderr)
        return 2
    best = best_of(results)
    where = f"{args.data} ({args.groups or args.split}, {len(utterances)} utterances)"
    if args.json:
        print(json.dumps({"data": where, "results": results, "best": best}, indent=1))
        return 0
    print(f"WER (CER) on {where}; rows: lm weight, columns: length bonus")
    print(f"{'lm':>6}" + "".join(f"{'bonus ' + format(b, 'g'):>18}" for b in bonuses))
    for weight in weights:
        cells = [next(r for r in results if r["lm_weight"] == weight and r["length_bonus"] == b) for b in bonuses]
        print(f"{weight:>6g}" + "".join(f"{r['wer']:>10.4f} ({r['cer']:.3f})" for r in cells))
    baseline = next((r for r in results if r["lm_weight"] == 0 and r["length_bonus"] == 0), None)
    change = f"; without the language model WER {baseline['wer']:.4f}" if baseline else ""
    print(
        f"best: --lm-weight {best['lm_weight']:g} --length-bonus {best['length_bonus']:g} "
        f"(WER {best['wer']:.4f}, CER {best['cer']:.4f}{change})"
    )
    print(
        f"save it as the default: speech-attend export --ckpt {args.ckpt} --out DIR --lm {args.lm or args.ckpt} "
        f"--lm-weight {best['lm_weight']:g} --length-bonus {best['length_bonus']:g}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
