"""Word and segment times against the truth, on eSpeak voices never heard in training.

``speech-attend evaluate --conditions timing[:FILESxPER_FILE]`` (default 25x4) and ``non-speech``.

The clips are those of the devsets' ``espeak_unseen`` group (:mod:`speech_attend.evaluate.devsets`):
WordNet dev sentences (never in training) spoken by the held-out eSpeak voices and variants with
the broad corpus's draws, made as the corpus makes them (:func:`speech_attend.builtin.corpus.speak`).
eSpeak reports where each word starts (:func:`speech_attend.builtin.espeak.synthesize_with_words`),
which gives each word's true start; ``per_file`` utterances are joined into one file with 0.4 to
1.0 s of silence between them, and each utterance's first sample over -50 dBFS is the true start
of its segment. The files are transcribed as ``transcribe`` does (cut at pauses), and
:func:`score` gives the median and 90th-percentile error of

- segment starts: each segment that holds words against the nearest utterance start (and how
  many utterances have a segment starting within 0.25 s of them: ``transcribe`` cuts only audio
  longer than its longest chunk, so a short file of several utterances is one segment);
- word starts, from the attention alignment and from the CTC alignment (``Word.attention``,
  ``Word.ctc``): the words of the transcript are matched to the true words by the minimum
  edit-distance alignment; the words recognised right are scored, and then also those
  substituted by another word;

and how often an utterance comes out as no speech (no segment with words overlaps it).
:func:`non_speech_clips` makes sounds that are not speech (silence, white and pink noise, mains
hum, music-like tones: notes of three harmonics, four a second), and :func:`non_speech` says
which of them came out with words.
"""

from __future__ import annotations

import random
import statistics
from dataclasses import dataclass, field
from pathlib import Path

import jiwer
import numpy as np
import soundfile as sf

from speech_attend.builtin import corpus
from speech_attend.builtin.espeak import ESPEAK_SAMPLE_RATE, synthesize_with_words
from speech_attend.data.text import normalize_text
from speech_attend.evaluate.devsets import SEED_OFFSET
from speech_attend.infer.transcribe import Transcriber

__all__ = ["Utterance", "Clip", "speak_with_times", "build_clips", "score", "measure", "non_speech_clips", "non_speech", "report"]

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


def speak_with_times(job: corpus.Job) -> Utterance:
    """A corpus job spoken as :func:`speech_attend.builtin.corpus.speak` speaks it, with each word's start."""
    rate, pitch, volume, seed, pitch_range, word_gap = job.params
    pcm, events = synthesize_with_words(job.text, job.speaker.espeak_name, rate, pitch, volume, seed, pitch_range, word_gap)
    wave, first = corpus.shape_speech(pcm, SAMPLE_RATE)
    wave = wave.numpy()
    shift = first / SAMPLE_RATE
    words, position = [], 0
    for token in job.text.split():
        begin = job.text.index(token, position)
        position = begin + len(token)
        event = next((e for e in events if begin <= e.position < position), None)
        start = None if event is None else event.sample / ESPEAK_SAMPLE_RATE - shift
        for k, word in enumerate(normalize_text(token).split()):  # "well-known" is two words, timed from the first
            words.append((word, start if k == 0 else None))
    loud = np.flatnonzero(np.abs(wave) > corpus.SILENCE_THRESHOLD)  # the first sample over -50 dBFS starts the speech
    onset = int(loud[0]) / SAMPLE_RATE if loud.size else 0.0
    return Utterance(wave, onset, words)


def build_clips(out: Path, files: int, per_file: int, pause: tuple[float, float], seed: int, text: str = "wordnet") -> list[Clip]:
    """``files`` FLAC files of ``per_file`` dev utterances each, in ``out``; ``text`` as the corpus's
    (``"templates"``: the light corpus's grammar and its dev voices)."""
    jobs, _ = corpus.plan(out, {"train": 0, "dev": files * per_file, "test": 0}, seed + SEED_OFFSET, text, ("espeak",))
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


def measure(
    transcriber: Transcriber,
    work: Path,
    files: int = 25,
    per_file: int = 4,
    seed: int = 0,
    pause: tuple[float, float] = (0.4, 1.0),
    text: str = "wordnet",
) -> dict:
    """Build the clips in ``work``, transcribe them and :func:`score` the times (and the audio's seconds).

    Raises:
        ValueError: a clip could not be transcribed (its name and why).
    """
    if files < 1 or per_file < 1 or not 0 <= pause[0] <= pause[1]:
        raise ValueError(f"timing: expected at least 1 file of at least 1 utterance and 0 <= pause, got {files}x{per_file}")
    clips = build_clips(work, files, per_file, pause, seed, text)
    transcripts = []
    for clip, result in zip(clips, transcriber.transcribe_many([c.path for c in clips])):
        if isinstance(result, ValueError):
            raise ValueError(f"timing: {clip.path.name}: {str(result).splitlines()[0]}")
        transcripts.append(result)
    return {
        "per_file": per_file,
        "audio_seconds": round(sum(t.duration_s for t in transcripts), 1),
        "max_chunk_seconds": transcriber.max_chunk_seconds,
        **score(clips, transcripts),
    }


def non_speech(transcriber: Transcriber, work: Path, seconds: list[float], seed: int = 0) -> dict:
    """Transcribe the sounds without speech of :func:`non_speech_clips`: how many, and those that gave words."""
    sounds = non_speech_clips(work, seconds, seed)
    heard = {
        path.stem: result.text if not isinstance(result, ValueError) else f"error: {result}"
        for path, result in zip(sounds, transcriber.transcribe_many(sounds))
    }
    return {"files": len(heard), "with_words": {name: text for name, text in heard.items() if text}}


def report(timing: dict | None, sounds: dict | None) -> list[str]:
    """The lines that say :func:`measure`'s and :func:`non_speech`'s results."""
    lines = []
    if timing is not None:
        lines += [
            f"timing: {timing['files']} files of {timing['per_file']} utterances ({timing['utterances']} utterances, "
            f"{timing['audio_seconds']:.0f} s, max chunk {timing['max_chunk_seconds']} s); "
            f"{timing['matched_words']} of {timing['true_words']} timed words recognised",
            _line("segment start", timing["segment_start"]),
            f"  utterances with a segment starting within 0.25 s: {timing['utterances_with_a_segment_start']:.0%}",
            _line("word start, attention", timing["word_start_attention"]),
            _line("word start, CTC", timing["word_start_ctc"]),
            "  with substituted words too:",
            _line("word start, attention", timing["word_start_attention_with_substitutions"]),
            _line("word start, CTC", timing["word_start_ctc_with_substitutions"]),
            f"  utterances heard as no speech: {timing['no_speech_rate']:.1%}",
        ]
    if sounds is not None:
        wordy = sounds["with_words"]
        lines.append(f"non-speech: sounds without speech that came out with words: {len(wordy)} of {sounds['files']}")
        lines += [f"    {name}: {text[:70]}" for name, text in wordy.items()]
    return lines
