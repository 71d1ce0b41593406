"""Word and segment times against the truth, on eSpeak voices never heard in training.

    python scripts/timing_check.py --ckpt CKPT [--files 25] [--per-file 4] [--pause 0.4 1.0] [--seed 0] [--json OUT]
                                   [--text wordnet|templates]

The clips are those of the ``espeak_unseen`` group of ``scripts/speech_devsets.py``: WordNet dev
sentences (never in training) spoken by the held-out eSpeak voices and variants with the broad
corpus's draws, made as the corpus makes them (:func:`speech_attend.builtin.corpus.speak`). eSpeak reports
where each word starts (:func:`speech_attend.builtin.espeak.synthesize_with_words`), which gives each
word's true start; ``--per-file`` utterances are joined into one file with ``--pause`` seconds
of silence between them, and each utterance's first sample over -50 dBFS is the true start of
its segment. The files are transcribed as ``transcribe`` does (cut at pauses), and the script
prints the median and 90th-percentile error of

- segment starts: each segment that holds words against the nearest utterance start (and how
  many utterances have a segment starting within 0.25 s of them: ``transcribe`` cuts only audio
  longer than its longest chunk, so a short file of several utterances is one segment);
- word starts, from the attention alignment and from the CTC alignment (``Word.attention``,
  ``Word.ctc``): the words of the transcript are matched to the true words by the minimum
  edit-distance alignment; the words recognised right are scored, and then also those
  substituted by another word;

and how often an utterance comes out as no speech (no segment with words overlaps it). Then it
transcribes sounds that are not speech, ``--non-speech-seconds`` long each (silence, white and
pink noise, mains hum, music-like tones: notes of three harmonics, four a second), and prints
those that came out with words.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import jiwer
import numpy as np
import soundfile as sf
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from speech_devsets import _SEED_OFFSET  # noqa: E402  (the espeak_unseen group's draws)

from speech_attend.builtin import corpus  # noqa: E402
from speech_attend.builtin.espeak import ESPEAK_SAMPLE_RATE, synthesize_with_words  # noqa: E402
from speech_attend.data.text import normalize_text  # noqa: E402
from speech_attend.infer.transcribe import Transcriber  # noqa: E402

SAMPLE_RATE = corpus.SAMPLE_RATE


@dataclass
class Utterance:
    """One spoken sentence with its true times, seconds from the start of its own clip."""

    wave: np.ndarray  # (N,) float32 at SAMPLE_RATE, as the corpus writes it
    onset: float  # first sample over -50 dBFS
    words: list[tuple[str, float | None]]  # normalised words and their true start (None: not timed by eSpeak)


@dataclass
class Clip:
    """Utterances joined into one file, and where each starts in it."""

    path: Path
    offsets: list[float] = field(default_factory=list)
    utterances: list[Utterance] = field(default_factory=list)


def speak_with_times(job) -> Utterance:
    """A corpus job spoken as :func:`speech_attend.builtin.corpus.speak` speaks it, with each word's start."""
    rate, pitch, volume, seed, pitch_range, word_gap = job.params
    pcm, events = synthesize_with_words(job.text, job.speaker.espeak_name, rate, pitch, volume, seed, pitch_range, word_gap)
    wave = torch.from_numpy(pcm.astype(np.float32) / 32768.0)
    with torch.no_grad():
        wave = corpus._resampler(ESPEAK_SAMPLE_RATE, SAMPLE_RATE)(wave).numpy()
    peak = float(np.abs(wave).max()) if wave.size else 0.0
    if peak > corpus._MAX_PEAK:
        wave = wave * (corpus._MAX_PEAK / peak)
    loud = np.flatnonzero(np.abs(wave) > corpus._SILENCE_THRESHOLD)  # what speak() trims to, 0.2 s either side
    keep = int(corpus._MAX_EDGE_SILENCE_S * SAMPLE_RATE)
    first, last = (max(0, int(loud[0]) - keep), int(loud[-1]) + 1 + keep) if loud.size else (0, wave.size)
    shift = first / SAMPLE_RATE
    words, position = [], 0
    for token in job.text.split():
        begin = job.text.index(token, position)
        position = begin + len(token)
        event = next((e for e in events if begin <= e.position < position), None)
        start = None if event is None else event.sample / ESPEAK_SAMPLE_RATE - shift
        for k, word in enumerate(normalize_text(token).split()):  # "well-known" is two words, timed from the first
            words.append((word, start if k == 0 else None))
    onset = (int(loud[0]) - first) / SAMPLE_RATE if loud.size else 0.0
    return Utterance(wave[first:last].astype(np.float32), onset, words)


def build_clips(out: Path, files: int, per_file: int, pause: tuple[float, float], seed: int, text: str = "wordnet") -> list[Clip]:
    """``files`` FLAC files of ``per_file`` dev utterances each, in ``out``; ``text`` as the corpus's
    (``"templates"``: the light corpus's grammar and its dev voices)."""
    jobs, _ = corpus._plan(out, {"train": 0, "dev": files * per_file, "test": 0}, seed + _SEED_OFFSET, text, ("espeak",))
    rng = random.Random(f"timing_check/{seed}")
    clips = []
    for f in range(files):
        clip = Clip(out / f"clip{f:03d}.flac")
        pieces, at = [], 0.0
        for job in jobs[f * per_file : (f + 1) * per_file]:
            utterance = speak_with_times(job)
            if pieces:
                gap = np.zeros(int(rng.uniform(*pause) * SAMPLE_RATE), dtype=np.float32)
                pieces.append(gap)
                at += gap.size / SAMPLE_RATE
            clip.offsets.append(at)
            clip.utterances.append(utterance)
            pieces.append(utterance.wave)
            at += utterance.wave.size / SAMPLE_RATE
        sf.write(clip.path, np.concatenate(pieces), SAMPLE_RATE, format="FLAC", subtype="PCM_16")
        clips.append(clip)
    return clips


def _paired(truth: list[str], predicted: list[str]) -> list[tuple[int, int, bool]]:
    """``(true index, predicted index, same word)`` of the words that the minimum edit-distance
    alignment (jiwer's) matches: the same word, or one word substituted for another."""
    if not truth or not predicted:
        return []
    pairs = []
    for chunk in jiwer.process_words(" ".join(truth), " ".join(predicted)).alignments[0]:
        if chunk.type in ("equal", "substitute"):
            pairs.extend(
                (i, j, chunk.type == "equal")
                for i, j in zip(range(chunk.ref_start_idx, chunk.ref_end_idx), range(chunk.hyp_start_idx, chunk.hyp_end_idx))
            )
    return pairs


def _summary(errors: list[float]) -> dict:
    if not errors:
        return {"n": 0}
    absolute = np.abs(np.array(errors))
    return {
        "n": len(errors),
        "median_abs_s": round(float(np.median(absolute)), 3),
        "p90_abs_s": round(float(np.percentile(absolute, 90)), 3),
        "median_signed_s": round(float(statistics.median(errors)), 3),
        "within_0.1_s": round(float((absolute <= 0.1).mean()), 3),
        "within_0.25_s": round(float((absolute <= 0.25).mean()), 3),
    }


def score(clips: list[Clip], transcripts) -> dict:
    """Segment and word start errors (predicted minus true, seconds) of transcripts against their clips."""
    segment_errors, errors = [], {"attention": [], "ctc": [], "attention_any": [], "ctc_any": []}
    missed = utterances = matched = true_words = found = 0
    for clip, transcript in zip(clips, transcripts):
        spoken = [s for s in transcript.segments if s.words]
        truth, predicted = [], [w for s in spoken for w in s.words]
        onsets = [offset + u.onset for offset, u in zip(clip.offsets, clip.utterances)]
        segment_errors += [min((s.start - onset for onset in onsets), key=abs) for s in spoken]
        for offset, utterance, onset in zip(clip.offsets, clip.utterances, onsets):
            utterances += 1
            end = offset + utterance.wave.size / SAMPLE_RATE
            found += any(abs(s.start - onset) <= 0.25 for s in spoken)
            if not any(s.start < end and s.end > offset for s in spoken):
                missed += 1
            truth += [(word, None if start is None else offset + start) for word, start in utterance.words]
        true_words += sum(start is not None for _, start in truth)
        for i, j, same in _paired([w for w, _ in truth], [w.text for w in predicted]):
            if truth[i][1] is None:
                continue
            matched += same
            for kinds in ["attention_any", "attention"] if same else ["attention_any"]:
                errors[kinds].append(predicted[j].attention[0] - truth[i][1])
            if predicted[j].ctc is not None:
                for kinds in ["ctc_any", "ctc"] if same else ["ctc_any"]:
                    errors[kinds].append(predicted[j].ctc[0] - truth[i][1])
    return {
        "files": len(clips),
        "utterances": utterances,
        "true_words": true_words,
        "matched_words": matched,
        "no_speech_rate": round(missed / max(1, utterances), 4),
        "utterances_with_a_segment_start": round(found / max(1, utterances), 4),
        "segment_start": _summary(segment_errors),
        "word_start_attention": _summary(errors["attention"]),
        "word_start_ctc": _summary(errors["ctc"]),
        "word_start_attention_with_substitutions": _summary(errors["attention_any"]),
        "word_start_ctc_with_substitutions": _summary(errors["ctc_any"]),
    }


def _line(name: str, summary: dict) -> str:
    if not summary["n"]:
        return f"  {name:<22} none"
    return (
        f"  {name:<22} n={summary['n']:<5} median |err| {summary['median_abs_s']:.3f} s   p90 {summary['p90_abs_s']:.3f} s   "
        f"bias {summary['median_signed_s']:+.3f} s   within 0.1 s {summary['within_0.1_s']:.0%}   within 0.25 s {summary['within_0.25_s']:.0%}"
    )


def non_speech_clips(out: Path, seconds: list[float], seed: int) -> list[Path]:
    """Files of sounds that hold no speech, ``seconds`` long each, in ``out``."""
    rng = np.random.default_rng(seed)

    def pink(n: int) -> np.ndarray:  # 1/f power: white noise shaped in frequency
        spectrum = np.fft.rfft(rng.standard_normal(n))
        spectrum /= np.sqrt(np.maximum(1.0, np.arange(spectrum.size)))
        wave = np.fft.irfft(spectrum, n)
        return wave / (np.abs(wave).max() + 1e-9)

    def tones(n: int) -> np.ndarray:  # a random melody: 0.25 s notes over two octaves, three harmonics each, decaying
        t = np.arange(SAMPLE_RATE // 4) / SAMPLE_RATE
        notes = [
            sum(np.sin(2 * np.pi * 220 * 2 ** (rng.integers(24) / 12) * k * t) / k for k in (1, 2, 3)) * np.exp(-3 * t)
            for _ in range(n // t.size + 1)
        ]
        return np.concatenate(notes)[:n] / 1.8

    kinds = {
        "silence": lambda n: np.zeros(n),
        "white_noise": lambda n: 0.05 * rng.standard_normal(n),
        "pink_noise": lambda n: 0.3 * pink(n),
        "hum": lambda n: 0.1 * sum(np.sin(2 * np.pi * 50 * k * np.arange(n) / SAMPLE_RATE) / k for k in (1, 2, 3)),
        "tones": lambda n: 0.3 * tones(n),
    }
    paths = []
    for length in seconds:
        for kind, make in kinds.items():
            paths.append(out / f"{kind}_{length:g}s.wav")
            sf.write(paths[-1], make(int(length * SAMPLE_RATE)).astype(np.float32), SAMPLE_RATE)
    return paths


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ckpt", required=True, help="a .ckpt from fit, or a folder from export")
    parser.add_argument("--files", type=int, default=25, help="files to build (default: 25)")
    parser.add_argument("--per-file", type=int, default=4, help="dev utterances joined into each file (default: 4)")
    parser.add_argument(
        "--pause",
        type=float,
        nargs=2,
        default=(0.4, 1.0),
        metavar=("MIN", "MAX"),
        help="seconds of silence between utterances, drawn uniformly (default: 0.4 1.0)",
    )
    parser.add_argument("--max-chunk-seconds", type=float, default=None, help="as transcribe's (default: the model's)")
    parser.add_argument("--beam-size", type=int, default=None, help="as transcribe's (default: the model's)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--text",
        choices=corpus.TEXTS,
        default="wordnet",
        help="wordnet: the broad corpus's sentences and voices (default); templates: the light corpus's",
    )
    parser.add_argument(
        "--non-speech-seconds",
        type=float,
        nargs="*",
        default=[1, 5, 20, 60],
        help="lengths of the sounds without speech (default: 1 5 20 60; none: skip them)",
    )
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = parser.parse_args(argv)
    if args.files < 1 or args.per_file < 1 or not 0 <= args.pause[0] <= args.pause[1]:
        print("timing_check: error: --files and --per-file must be at least 1, and 0 <= --pause MIN <= MAX", file=sys.stderr)
        return 2
    try:
        transcriber = Transcriber(args.ckpt, beam_size=args.beam_size, max_chunk_seconds=args.max_chunk_seconds)
    except (ValueError, OSError) as err:
        print(f"timing_check: error: {str(err).splitlines()[0]}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        clips = build_clips(Path(tmp), args.files, args.per_file, tuple(args.pause), args.seed, args.text)
        transcripts = []
        for clip, result in zip(clips, transcriber.transcribe_many([c.path for c in clips])):
            if isinstance(result, ValueError):
                print(f"timing_check: error: {clip.path.name}: {result}", file=sys.stderr)
                return 2
            transcripts.append(result)
        sounds = non_speech_clips(Path(tmp), args.non_speech_seconds, args.seed)
        heard = {
            path.stem: result.text if not isinstance(result, ValueError) else f"error: {result}"
            for path, result in zip(sounds, transcriber.transcribe_many(sounds))
        }
    results = {
        "ckpt": str(args.ckpt),
        "max_chunk_seconds": transcriber.max_chunk_seconds,
        **score(clips, transcripts),
        "non_speech_files": len(heard),
        "non_speech_with_words": {name: text for name, text in heard.items() if text},
    }
    print(
        f"{results['files']} files of {args.per_file} utterances ({results['utterances']} utterances, "
        f"{sum(t.duration_s for t in transcripts):.0f} s, max chunk {transcriber.max_chunk_seconds} s); "
        f"{results['matched_words']} of {results['true_words']} timed words recognised"
    )
    print(_line("segment start", results["segment_start"]))
    print(f"  utterances with a segment starting within 0.25 s: {results['utterances_with_a_segment_start']:.0%}")
    print(_line("word start, attention", results["word_start_attention"]))
    print(_line("word start, CTC", results["word_start_ctc"]))
    print("  with substituted words too:")
    print(_line("word start, attention", results["word_start_attention_with_substitutions"]))
    print(_line("word start, CTC", results["word_start_ctc_with_substitutions"]))
    print(f"  utterances heard as no speech: {results['no_speech_rate']:.1%}")
    wordy = results["non_speech_with_words"]
    print(f"  sounds without speech that came out with words: {len(wordy)} of {len(heard)}")
    for name, text in wordy.items():
        print(f"    {name}: {text[:70]}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
